//! Lifecycle driven by kube-controller-manager and by our server's kube-backed loops: the
//! namespace controller empties our kinds, the garbage collector follows ownerReferences between
//! our kinds with every propagation policy, Ports of a deleted Node are collected, and a Port's
//! SecurityGroups follow its pod's labels.

use std::sync::Arc;

use cozyplane_apis::v1alpha1::{Port, PortSpec, VPCRef};
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::{Env, obj, vpc};

/// `kubectl delete namespace`: kube-controller-manager's namespace controller finds our kinds by
/// discovery, deletes them through the aggregator and then removes the namespace.
pub(crate) fn namespace_deletion(env: &Arc<Env>) {
    let e = env.clone();
    env.run(async move {
        let cp = &e.cp;
        let ns = cp.namespace("nsdel").await;
        e.create_ok(&cp.admin, &ns, &vpc("v1", "10.1.0.0/24")).await;
        e.create_ok(&cp.admin, &ns, &vpc("v2", "10.1.1.0/24")).await;
        e.create_ok(
            &cp.admin,
            &ns,
            &obj("SecurityGroup", "sg", &json!({ "vpcRef": { "name": "v1" } })),
        )
        .await;
        e.create_ok(
            &cp.admin,
            &ns,
            &obj("VPCGateway", "gw", &json!({ "vpcRef": { "name": "v2" } })),
        )
        .await;
        cp.ok(&cp.admin, &["delete", "namespace", &ns, "--wait=false"])
            .await;
        cp.eventually("the namespace to be removed", || async {
            e.gone(&["namespace", &ns]).await
        })
        .await;
        for kind in ["vpcs", "securitygroups", "vpcgateways"] {
            let list = e
                .get_json(&[&format!("{kind}.sdn.cozystack.io"), "-n", &ns])
                .await;
            assert_eq!(list["items"], json!([]), "{kind} left in {ns}: {list}");
        }
    });
}

/// An owner VPC and a dependent VPC whose ownerReference names it (blocking owner deletion).
async fn owner_and_dependent(e: &Env, ns: &str, tag: &str) -> (String, String) {
    let owner = format!("owner-{tag}");
    let dep = format!("dep-{tag}");
    e.create_ok(&e.cp.admin, ns, &vpc(&owner, "10.1.0.0/24")).await;
    let uid = e.get_json(&["vpc.sdn.cozystack.io", &owner, "-n", ns]).await["metadata"]["uid"]
        .as_str()
        .expect("uid")
        .to_string();
    let mut d = vpc(&dep, "10.2.0.0/24");
    d["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "VPC", "name": owner, "uid": uid,
        "blockOwnerDeletion": true,
    }]);
    e.create_ok(&e.cp.admin, ns, &d).await;
    (owner, dep)
}

/// kube-controller-manager's garbage collector on our kinds: Background deletes the dependent
/// after the owner, Foreground deletes the dependent first and then the owner (which waits with
/// the `foregroundDeletion` finalizer), Orphan keeps the dependent without its ownerReference.
pub(crate) fn garbage_collection(env: &Arc<Env>) {
    let e = env.clone();
    env.run(async move {
        let cp = &e.cp;
        let ns = cp.namespace("gc").await;
        let vpcs = "vpc.sdn.cozystack.io";

        let (owner, dep) = owner_and_dependent(&e, &ns, "bg").await;
        cp.ok(
            &cp.admin,
            &["delete", vpcs, &owner, "-n", &ns, "--cascade=background"],
        )
        .await;
        cp.eventually("the background dependent to be collected", || async {
            e.gone(&[vpcs, &dep, "-n", &ns]).await
        })
        .await;

        let (owner, dep) = owner_and_dependent(&e, &ns, "fg").await;
        cp.ok(
            &cp.admin,
            &[
                "delete",
                vpcs,
                &owner,
                "-n",
                &ns,
                "--cascade=foreground",
                "--wait=false",
            ],
        )
        .await;
        // Until its dependent is gone the owner stays, terminating, with the GC's finalizer
        // (unless the collector was already done: then the owner is gone too).
        let o = cp
            .kubectl(&cp.admin, &["get", vpcs, &owner, "-n", &ns, "-o", "json"])
            .await;
        if o.status.success() {
            let o: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
            assert!(
                o["metadata"]["deletionTimestamp"].is_string()
                    && o["metadata"]["finalizers"]
                        .as_array()
                        .is_some_and(|f| f.contains(&json!("foregroundDeletion"))),
                "{o}"
            );
        }
        cp.eventually("the foreground dependent to be collected", || async {
            e.gone(&[vpcs, &dep, "-n", &ns]).await
        })
        .await;
        cp.eventually("the foreground owner to go after it", || async {
            e.gone(&[vpcs, &owner, "-n", &ns]).await
        })
        .await;

        let (owner, dep) = owner_and_dependent(&e, &ns, "or").await;
        cp.ok(
            &cp.admin,
            &[
                "delete",
                vpcs,
                &owner,
                "-n",
                &ns,
                "--cascade=orphan",
                "--wait=false",
            ],
        )
        .await;
        cp.eventually("the orphaning owner to go", || async {
            e.gone(&[vpcs, &owner, "-n", &ns]).await
        })
        .await;
        cp.eventually("the orphan's ownerReference to be removed", || async {
            let d = e.get_json(&[vpcs, &dep, "-n", &ns]).await;
            d["metadata"]["ownerReferences"]
                .as_array()
                .is_none_or(Vec::is_empty)
        })
        .await;
        let d = e.get_json(&[vpcs, &dep, "-n", &ns]).await;
        assert!(d["metadata"]["deletionTimestamp"].is_null(), "{d}");
    });
}

/// A Node.
async fn node(e: &Env, name: &str) {
    let n = json!({ "apiVersion": "v1", "kind": "Node", "metadata": { "name": name } });
    e.cp.apply(&n.to_string()).await;
}

/// A Port in `ns/vpc` on `node` (with the agent's finalizer), optionally for pod `ns/pod`.
async fn port(client: &kube::Client, ns: &str, vpc: &str, node: &str, pod: Option<&str>) -> String {
    let mut p = Port::new(
        "",
        PortSpec {
            vpc_ref: VPCRef {
                namespace: ns.into(),
                name: vpc.into(),
            },
            node: node.into(),
            node_ip: "192.168.0.1".into(),
            pod_namespace: pod.map_or_else(String::new, |_| ns.into()),
            pod_name: pod.unwrap_or_default().into(),
            ..Default::default()
        },
    );
    p.metadata.name = None;
    p.metadata.generate_name = Some("p-".into());
    p.metadata.finalizers = Some(vec!["sdn.cozystack.io/sever".into()]);
    Api::<Port>::all(client.clone())
        .create(&PostParams::default(), &p)
        .await
        .expect("Port created")
        .metadata
        .name
        .expect("generated name")
}

/// Our server watches Nodes on kube-apiserver: when a Node is deleted, its Ports go (the agent's
/// finalizer included); the Port of a Node that stays is kept.
pub(crate) fn port_gc(env: &Arc<Env>) {
    let e = env.clone();
    env.run(async move {
        let cp = &e.cp;
        let ns = cp.namespace("portgc").await;
        e.create_ok(&cp.admin, &ns, &vpc("v1", "10.1.0.0/24")).await;
        let (gone, kept) = (format!("{ns}-gone"), format!("{ns}-kept"));
        node(&e, &gone).await;
        node(&e, &kept).await;
        let client = cp.client(&cp.admin).await;
        let p_gone = port(&client, &ns, "v1", &gone, None).await;
        let p_kept = port(&client, &ns, "v1", &kept, None).await;
        cp.ok(&cp.admin, &["delete", "node", &gone]).await;
        cp.eventually("the deleted node's Port to be collected", || async {
            e.gone(&["ports.sdn.cozystack.io", &p_gone]).await
        })
        .await;
        let k = e.get_json(&["ports.sdn.cozystack.io", &p_kept]).await;
        assert!(k["metadata"]["deletionTimestamp"].is_null(), "{k}");
        cp.ok(&cp.admin, &["delete", "node", &kept]).await;
    });
}

/// `Port.status.groups` lists the SecurityGroups of the Port's VPC that select its pod; our
/// server watches Pods on kube-apiserver, so relabelling the pod moves the Port between groups.
pub(crate) fn security_group_membership(env: &Arc<Env>) {
    let e = env.clone();
    env.run(async move {
        let cp = &e.cp;
        let ns = cp.namespace("sg").await;
        let n = format!("{ns}-node");
        node(&e, &n).await;
        e.create_ok(&cp.admin, &ns, &vpc("v1", "10.1.0.0/24")).await;
        let pod = json!({ "apiVersion": "v1", "kind": "Pod",
            "metadata": { "name": "web-1", "namespace": ns, "labels": { "app": "web" } },
            "spec": { "nodeName": n, "containers": [{ "name": "c", "image": "i" }] } });
        // The serviceaccount controller creates the namespace's `default` first.
        cp.eventually("the pod to be admitted", || async {
            cp.kubectl_stdin(&cp.admin, &["create"], &pod.to_string())
                .await
                .status
                .success()
        })
        .await;
        let sg = |name: &str, sel: serde_json::Value| {
            obj(
                "SecurityGroup",
                name,
                &json!({ "vpcRef": { "name": "v1" }, "podSelector": sel }),
            )
        };
        e.create_ok(&cp.admin, &ns, &sg("web", json!({ "matchLabels": { "app": "web" } })))
            .await;
        e.create_ok(&cp.admin, &ns, &sg("db", json!({ "matchLabels": { "app": "db" } })))
            .await;
        let id = |name: &'static str| {
            let e = e.clone();
            let ns = ns.clone();
            async move {
                e.get_json(&["securitygroup.sdn.cozystack.io", name, "-n", &ns])
                    .await["status"]["id"]
                    .as_i64()
                    .expect("the group's id is allocated")
            }
        };
        let (web, db) = (id("web").await, id("db").await);
        let client = cp.client(&cp.admin).await;
        let p = port(&client, &ns, "v1", &n, Some("web-1")).await;
        let groups = |want: i64| {
            let e = e.clone();
            let p = p.clone();
            async move {
                e.get_json(&["ports.sdn.cozystack.io", &p]).await["status"]["groups"] == json!([want])
            }
        };
        cp.eventually("the Port to be in web", || groups(web)).await;
        cp.ok(
            &cp.admin,
            &["label", "pod", "web-1", "-n", &ns, "app=db", "--overwrite"],
        )
        .await;
        cp.eventually("the Port to move to db", || groups(db)).await;
        cp.ok(&cp.admin, &["delete", "node", &n]).await;
    });
}
