//! The kube stand-in driven by the real kubectl: core CRUD, namespaces, RBAC with static tokens,
//! `kubectl auth can-i`, and the aggregation proxy in front of a cozyplane server.

use std::path::Path;
use std::time::Duration;

use cozyplane_conformance::standin::{Options, StandIn, Token};
use cozyplane_conformance::{Backend, TestServer};
use serde_json::{Value, json};

fn tokens() -> Options {
    Options {
        tokens: vec![
            Token::new("alice-token", "alice", &[]),
            Token::new("bob-token", "bob", &["devs"]),
        ],
        ..Default::default()
    }
}

async fn ok(s: &StandIn, kc: &Path, args: &[&str]) -> String {
    let out = s.kubectl(kc, args).await;
    assert!(
        out.status.success(),
        "kubectl {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

async fn fails(s: &StandIn, kc: &Path, args: &[&str]) -> String {
    let out = s.kubectl(kc, args).await;
    assert!(
        !out.status.success(),
        "kubectl {args:?} unexpectedly succeeded: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn manifest(dir: &Path, name: &str, v: &Value) -> String {
    let p = dir.join(name);
    std::fs::write(&p, v.to_string()).unwrap();
    p.display().to_string()
}

async fn eventually<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    for _ in 0..100 {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn core_kinds_and_namespace_lifecycle() {
    let s = StandIn::start(Options::default()).await;
    let admin = s.admin_kubeconfig();
    let dir = tempfile::tempdir().unwrap();

    ok(&s, &admin, &["create", "namespace", "t1"]).await;
    let phase = ok(&s, &admin, &["get", "ns", "t1", "-o", "jsonpath={.status.phase}"]).await;
    assert_eq!(phase, "Active");
    let names = ok(&s, &admin, &["get", "namespaces", "-o", "name"]).await;
    assert!(
        names.contains("namespace/kube-system") && names.contains("namespace/t1"),
        "{names}"
    );

    // Nodes (cluster-scoped), pods with a nodeName field selector, configmaps.
    let node = json!({ "apiVersion": "v1", "kind": "Node", "metadata": { "name": "n1", "labels": { "role": "worker" } } });
    ok(
        &s,
        &admin,
        &[
            "create",
            "--validate=false",
            "-f",
            &manifest(dir.path(), "node.json", &node),
        ],
    )
    .await;
    assert_eq!(
        ok(&s, &admin, &["get", "nodes", "-l", "role=worker", "-o", "name"])
            .await
            .trim(),
        "node/n1"
    );
    for (pod, node) in [("p1", "n1"), ("p2", "n2")] {
        let p = json!({ "apiVersion": "v1", "kind": "Pod", "metadata": { "name": pod, "namespace": "t1" },
            "spec": { "nodeName": node, "containers": [{ "name": "c", "image": "busybox" }] } });
        ok(
            &s,
            &admin,
            &[
                "create",
                "--validate=false",
                "-f",
                &manifest(dir.path(), &format!("{pod}.json"), &p),
            ],
        )
        .await;
    }
    let on_n1 = ok(
        &s,
        &admin,
        &[
            "get",
            "pods",
            "-n",
            "t1",
            "--field-selector",
            "spec.nodeName=n1",
            "-o",
            "name",
        ],
    )
    .await;
    assert_eq!(on_n1.trim(), "pod/p1");
    let phase = ok(
        &s,
        &admin,
        &["get", "pod", "p1", "-n", "t1", "-o", "jsonpath={.status.phase}"],
    )
    .await;
    assert_eq!(phase, "Pending");
    ok(
        &s,
        &admin,
        &["create", "configmap", "c1", "-n", "t1", "--from-literal=k=v"],
    )
    .await;
    ok(&s, &admin, &["label", "pod", "p1", "-n", "t1", "app=web"]).await;
    assert_eq!(
        ok(
            &s,
            &admin,
            &["get", "pods", "-n", "t1", "-l", "app=web", "-o", "name"]
        )
        .await
        .trim(),
        "pod/p1"
    );
    ok(&s, &admin, &["delete", "node", "n1"]).await;
    fails(&s, &admin, &["get", "node", "n1"]).await;

    // Creating in a missing namespace is refused.
    let err = fails(&s, &admin, &["create", "configmap", "c", "-n", "nope"]).await;
    assert!(err.contains("namespaces \"nope\" not found"), "{err}");

    // ResourceQuota status goes through /status only.
    let q = json!({ "apiVersion": "v1", "kind": "ResourceQuota", "metadata": { "name": "q", "namespace": "t1" },
        "spec": { "hard": { "pods": "10" } }, "status": { "used": { "pods": "99" } } });
    ok(
        &s,
        &admin,
        &[
            "create",
            "--validate=false",
            "-f",
            &manifest(dir.path(), "q.json", &q),
        ],
    )
    .await;
    assert_eq!(
        ok(
            &s,
            &admin,
            &["get", "quota", "q", "-n", "t1", "-o", "jsonpath={.status}"]
        )
        .await,
        ""
    );
    ok(
        &s,
        &admin,
        &[
            "patch",
            "quota",
            "q",
            "-n",
            "t1",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"used":{"pods":"2"}}}"#,
        ],
    )
    .await;
    assert_eq!(
        ok(
            &s,
            &admin,
            &[
                "get",
                "quota",
                "q",
                "-n",
                "t1",
                "-o",
                "jsonpath={.status.used.pods}"
            ]
        )
        .await,
        "2"
    );

    // Deleting the namespace marks it Terminating, refuses new content, then empties and removes it.
    let mut cm = json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "held", "namespace": "t1", "finalizers": ["test/hold"] } });
    ok(
        &s,
        &admin,
        &["create", "-f", &manifest(dir.path(), "held.json", &cm)],
    )
    .await;
    ok(&s, &admin, &["delete", "namespace", "t1", "--wait=false"]).await;
    let phase = ok(&s, &admin, &["get", "ns", "t1", "-o", "jsonpath={.status.phase}"]).await;
    assert_eq!(phase, "Terminating");
    let err = fails(&s, &admin, &["create", "configmap", "late", "-n", "t1"]).await;
    assert!(err.contains("because it is being terminated"), "{err}");
    eventually("the namespace's pods to be deleted", || async {
        ok(&s, &admin, &["get", "pods", "-n", "t1", "-o", "name"])
            .await
            .trim()
            .is_empty()
    })
    .await;
    // The finalizer holds the namespace until it is removed.
    assert!(s.kubectl(&admin, &["get", "ns", "t1"]).await.status.success());
    cm["metadata"]["finalizers"] = json!([]);
    ok(
        &s,
        &admin,
        &[
            "patch",
            "configmap",
            "held",
            "-n",
            "t1",
            "--type=merge",
            "-p",
            r#"{"metadata":{"finalizers":null}}"#,
        ],
    )
    .await;
    eventually("the namespace to go away", || async {
        !s.kubectl(&admin, &["get", "ns", "t1"]).await.status.success()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbac_with_static_tokens_and_can_i() {
    let s = StandIn::start(tokens()).await;
    let admin = s.admin_kubeconfig();
    let alice = s.token_kubeconfig("alice-token");
    let bob = s.token_kubeconfig("bob-token");
    let dir = tempfile::tempdir().unwrap();
    ok(&s, &admin, &["create", "namespace", "t1"]).await;
    ok(
        &s,
        &admin,
        &[
            "create",
            "rolebinding",
            "bob-admin",
            "-n",
            "t1",
            "--clusterrole=admin",
            "--user=bob",
        ],
    )
    .await;
    ok(
        &s,
        &admin,
        &[
            "create",
            "rolebinding",
            "devs-view",
            "-n",
            "t1",
            "--clusterrole=view",
            "--group=devs",
        ],
    )
    .await;

    // An unknown token is a 401, a known user without bindings a 403.
    let bad = s.token_kubeconfig("nobody-token");
    // kubectl words a 401 this way whether it came from discovery or from the list itself.
    let err = fails(&s, &bad, &["get", "pods", "-n", "t1"]).await;
    assert!(err.contains("You must be logged in to the server"), "{err}");
    let err = fails(&s, &alice, &["get", "pods", "-n", "t1"]).await;
    assert!(
        err.contains("pods is forbidden: User \"alice\" cannot list resource \"pods\" in API group \"\" in the namespace \"t1\""),
        "{err}"
    );

    // admin (aggregated from edit and view) lets bob manage pods in t1 only.
    let pod = json!({ "apiVersion": "v1", "kind": "Pod", "metadata": { "name": "p" }, "spec": { "containers": [{ "name": "c", "image": "i" }] } });
    ok(
        &s,
        &bob,
        &[
            "create",
            "--validate=false",
            "-n",
            "t1",
            "-f",
            &manifest(dir.path(), "p.json", &pod),
        ],
    )
    .await;
    ok(&s, &bob, &["get", "pods", "-n", "t1"]).await;
    fails(&s, &bob, &["get", "pods", "-n", "default"]).await;
    fails(&s, &bob, &["get", "nodes"]).await;

    // kubectl auth can-i (SelfSubjectAccessReview).
    assert_eq!(
        ok(&s, &bob, &["auth", "can-i", "delete", "pods", "-n", "t1"])
            .await
            .trim(),
        "yes"
    );
    assert_eq!(
        ok(&s, &bob, &["auth", "can-i", "create", "rolebindings", "-n", "t1"])
            .await
            .trim(),
        "yes"
    );
    let out = s.kubectl(&bob, &["auth", "can-i", "list", "nodes"]).await;
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "no");
    let out = s
        .kubectl(&alice, &["auth", "can-i", "get", "pods", "-n", "t1"])
        .await;
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "no");
    assert_eq!(ok(&s, &admin, &["auth", "can-i", "*", "*"]).await.trim(), "yes");
    // Impersonation-free SubjectAccessReview through can-i --as is not supported; the group
    // binding is checked with a SubjectAccessReview instead.
    let sar = json!({ "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": { "user": "carol", "groups": ["devs"], "resourceAttributes": { "namespace": "t1", "verb": "watch", "resource": "pods" } } });
    let out = ok(
        &s,
        &admin,
        &[
            "create",
            "-f",
            &manifest(dir.path(), "sar.json", &sar),
            "-o",
            "jsonpath={.status.allowed}",
        ],
    )
    .await;
    assert_eq!(out, "true");
    let sar = json!({ "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": { "user": "carol", "groups": ["devs"], "resourceAttributes": { "namespace": "t1", "verb": "delete", "resource": "pods" } } });
    let out = ok(
        &s,
        &admin,
        &[
            "create",
            "-f",
            &manifest(dir.path(), "sar2.json", &sar),
            "-o",
            "jsonpath={.status.allowed}",
        ],
    )
    .await;
    assert_eq!(out, "false");

    // A ClusterRole labelled aggregate-to-view is folded into view, edit and admin.
    let extra = json!({ "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": { "name": "sdn-view", "labels": { "rbac.authorization.k8s.io/aggregate-to-view": "true" } },
        "rules": [{ "apiGroups": ["sdn.cozystack.io"], "resources": ["vpcs"], "verbs": ["get", "list", "watch"] }] });
    ok(
        &s,
        &admin,
        &["create", "-f", &manifest(dir.path(), "cr.json", &extra)],
    )
    .await;
    // (kubectl auth can-i cannot name a group the server does not serve, so ask with a SAR.)
    let sar = json!({ "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": { "user": "bob", "groups": ["system:authenticated"], "resourceAttributes": { "namespace": "t1", "verb": "list", "group": "sdn.cozystack.io", "resource": "vpcs" } } });
    let sar = manifest(dir.path(), "sar3.json", &sar);
    eventually("aggregation into admin", || async {
        ok(
            &s,
            &admin,
            &["create", "-f", &sar, "-o", "jsonpath={.status.allowed}"],
        )
        .await
            == "true"
    })
    .await;

    // Roles and bindings made by kubectl's typed (protobuf) commands.
    ok(
        &s,
        &admin,
        &[
            "create",
            "role",
            "pod-reader",
            "-n",
            "t1",
            "--verb=get",
            "--verb=list",
            "--resource=pods",
        ],
    )
    .await;
    ok(
        &s,
        &admin,
        &[
            "create",
            "rolebinding",
            "alice-reads",
            "-n",
            "t1",
            "--role=pod-reader",
            "--user=alice",
        ],
    )
    .await;
    assert_eq!(
        ok(&s, &alice, &["auth", "can-i", "list", "pods", "-n", "t1"])
            .await
            .trim(),
        "yes"
    );
    ok(&s, &alice, &["get", "pods", "-n", "t1"]).await;
    fails(&s, &alice, &["delete", "pod", "p", "-n", "t1"]).await;
    ok(
        &s,
        &admin,
        &[
            "create",
            "clusterrole",
            "node-reader",
            "--verb=get,list",
            "--resource=nodes",
        ],
    )
    .await;
    ok(
        &s,
        &admin,
        &[
            "create",
            "clusterrolebinding",
            "alice-nodes",
            "--clusterrole=node-reader",
            "--user=alice",
        ],
    )
    .await;
    ok(&s, &alice, &["get", "nodes"]).await;

    // TokenReview with the static token file.
    let tr = json!({ "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": { "token": "bob-token" } });
    let out = ok(
        &s,
        &admin,
        &[
            "create",
            "-f",
            &manifest(dir.path(), "tr.json", &tr),
            "-o",
            "json",
        ],
    )
    .await;
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["status"]["user"]["username"], "bob");
    assert_eq!(
        v["status"]["user"]["groups"],
        json!(["devs", "system:authenticated"])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aggregation_proxy_to_a_standalone_cozyplane() {
    let s = StandIn::start(tokens()).await;
    let admin = s.admin_kubeconfig();
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(Backend::Embedded).await;
    s.register_standalone(&server).await;
    eventually("the APIService to be Available", || async {
        ok(
            &s,
            &admin,
            &[
                "get",
                "apiservice",
                "v1alpha1.sdn.cozystack.io",
                "-o",
                "jsonpath={.status.conditions[0].status}",
            ],
        )
        .await
            == "True"
    })
    .await;

    // Discovery: legacy and aggregated.
    let apis = ok(&s, &admin, &["get", "--raw", "/apis"]).await;
    assert!(apis.contains("sdn.cozystack.io/v1alpha1"), "{apis}");
    let res = ok(
        &s,
        &admin,
        &["api-resources", "--api-group=sdn.cozystack.io", "-o", "name"],
    )
    .await;
    assert!(res.contains("vpcs.sdn.cozystack.io"), "{res}");
    let all = ok(&s, &admin, &["api-resources", "-o", "name"]).await;
    assert!(
        all.contains("pods") && all.contains("vpcs.sdn.cozystack.io"),
        "{all}"
    );

    // CRUD through the proxy.
    ok(&s, &admin, &["create", "namespace", "t1"]).await;
    let vpc = json!({ "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "VPC", "metadata": { "name": "v1", "namespace": "t1" }, "spec": { "cidrs": ["10.0.0.0/24"] } });
    ok(
        &s,
        &admin,
        &["create", "-f", &manifest(dir.path(), "vpc.json", &vpc)],
    )
    .await;
    let names = ok(&s, &admin, &["get", "vpcs", "-n", "t1", "-o", "name"]).await;
    assert_eq!(names.trim(), "vpc.sdn.cozystack.io/v1");
    assert!(
        server
            .kubectl(&["get", "vpc", "v1", "-n", "t1"])
            .await
            .contains("v1")
    );

    // A watch streams through the proxy.
    let w = ok(
        &s,
        &admin,
        &[
            "get",
            "--raw",
            "/apis/sdn.cozystack.io/v1alpha1/namespaces/t1/vpcs?watch=true&timeoutSeconds=2",
        ],
    )
    .await;
    assert!(w.contains("\"type\":\"ADDED\""), "{w}");
    // ... unbuffered: an event written after the watch started arrives long before it ends.
    {
        use futures::StreamExt;
        use kube::api::{ApiResource, DynamicObject, GroupVersionKind, WatchEvent, WatchParams};
        let kc = kube::config::Kubeconfig::read_from(&admin).unwrap();
        let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .unwrap();
        let client = kube::Client::try_from(cfg).unwrap();
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("sdn.cozystack.io", "v1alpha1", "VPC"));
        let api: kube::Api<DynamicObject> = kube::Api::namespaced_with(client, "t1", &ar);
        let rv = api
            .list(&Default::default())
            .await
            .unwrap()
            .metadata
            .resource_version
            .unwrap();
        let mut events = api
            .watch(&WatchParams::default().timeout(120), &rv)
            .await
            .unwrap()
            .boxed();
        let vpc2 = json!({ "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "VPC", "metadata": { "name": "v2", "namespace": "t1" }, "spec": { "cidrs": ["10.0.1.0/24"] } });
        ok(
            &s,
            &admin,
            &["create", "-f", &manifest(dir.path(), "vpc2.json", &vpc2)],
        )
        .await;
        let ev = tokio::time::timeout(Duration::from_secs(20), events.next())
            .await
            .expect("the event streams through the proxy before the watch ends")
            .unwrap()
            .unwrap();
        assert!(matches!(ev, WatchEvent::Added(o) if o.metadata.name.as_deref() == Some("v2")));
    }

    // Deleting the namespace empties the aggregated group too (deletecollection via the proxy).
    ok(&s, &admin, &["delete", "namespace", "t1", "--wait=false"]).await;
    eventually("the namespace to go away", || async {
        !s.kubectl(&admin, &["get", "ns", "t1"]).await.status.success()
    })
    .await;
    assert!(
        server
            .kubectl(&["get", "vpcs", "-n", "t1", "-o", "name"])
            .await
            .trim()
            .is_empty()
    );

    // Without a backend the group is unavailable.
    drop(server);
    eventually("the APIService to become unavailable", || async {
        ok(
            &s,
            &admin,
            &[
                "get",
                "apiservice",
                "v1alpha1.sdn.cozystack.io",
                "-o",
                "jsonpath={.status.conditions[0].status}",
            ],
        )
        .await
            == "False"
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_chain_kubectl_standin_cozyplane_sar() {
    let s = StandIn::start(tokens()).await;
    let admin = s.admin_kubeconfig();
    let bob = s.token_kubeconfig("bob-token");
    let alice = s.token_kubeconfig("alice-token");
    let dir = tempfile::tempdir().unwrap();
    let _server = s.start_cozyplane().await;
    // --ensure-apiservice registers the APIService; the availability check then passes over the
    // front-proxy certificate and a SubjectAccessReview back to the stand-in.
    eventually("the APIService to be Available", || async {
        s.kubectl(
            &admin,
            &[
                "get",
                "apiservice",
                "v1alpha1.sdn.cozystack.io",
                "-o",
                "jsonpath={.status.conditions[0].status}",
            ],
        )
        .await
        .stdout
            == b"True"
    })
    .await;
    let res = ok(
        &s,
        &admin,
        &["api-resources", "--api-group=sdn.cozystack.io", "-o", "name"],
    )
    .await;
    assert!(res.contains("vpcs.sdn.cozystack.io"), "{res}");

    ok(&s, &admin, &["create", "namespace", "t1"]).await;
    ok(
        &s,
        &admin,
        &[
            "create",
            "rolebinding",
            "bob-admin",
            "-n",
            "t1",
            "--clusterrole=admin",
            "--user=bob",
        ],
    )
    .await;
    let agg = json!({ "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": { "name": "sdn-admin", "labels": { "rbac.authorization.k8s.io/aggregate-to-admin": "true" } },
        "rules": [{ "apiGroups": ["sdn.cozystack.io"], "resources": ["*"], "verbs": ["*"] }] });
    ok(
        &s,
        &admin,
        &["create", "-f", &manifest(dir.path(), "agg.json", &agg)],
    )
    .await;
    eventually("bob to be allowed vpcs", || async {
        s.kubectl(&bob, &["auth", "can-i", "create", "vpcs", "-n", "t1"])
            .await
            .stdout
            == b"yes\n"
    })
    .await;

    // kubectl (token) → stand-in (TokenReview, RBAC) → cozyplane (request header) → SAR back.
    let vpc = json!({ "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "VPC", "metadata": { "name": "v1" }, "spec": { "cidrs": ["10.0.0.0/24"] } });
    ok(
        &s,
        &bob,
        &[
            "create",
            "-n",
            "t1",
            "-f",
            &manifest(dir.path(), "vpc.json", &vpc),
        ],
    )
    .await;
    assert_eq!(
        ok(&s, &bob, &["get", "vpcs", "-n", "t1", "-o", "name"])
            .await
            .trim(),
        "vpc.sdn.cozystack.io/v1"
    );
    assert!(
        s.reviews("SubjectAccessReview") > 0,
        "cozyplane asked the stand-in"
    );
    let err = fails(&s, &alice, &["get", "vpcs", "-n", "t1"]).await;
    assert!(err.contains("forbidden"), "{err}");
    let err = fails(&s, &bob, &["get", "vpcs", "-n", "default"]).await;
    assert!(err.contains("forbidden"), "{err}");
    // cozyplane refuses creation in a namespace the stand-in does not have.
    let err = fails(
        &s,
        &admin,
        &[
            "create",
            "-n",
            "nope",
            "-f",
            &manifest(dir.path(), "vpc2.json", &vpc),
        ],
    )
    .await;
    assert!(err.contains("not found"), "{err}");

    // The namespace controller empties our group through the proxy.
    ok(&s, &admin, &["delete", "namespace", "t1", "--wait=false"]).await;
    eventually("the namespace to go away", || async {
        !s.kubectl(&admin, &["get", "ns", "t1"]).await.status.success()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_sees_its_pods_with_kube_rs() {
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::{Namespace, Pod};
    use kube::runtime::watcher;

    let s = StandIn::start(Options::default()).await;
    let kc = kube::config::Kubeconfig::read_from(s.admin_kubeconfig()).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .unwrap();
    let client = kube::Client::try_from(cfg).unwrap();
    s.create("namespaces", None, json!({ "metadata": { "name": "t1" } }))
        .await
        .unwrap();
    let pod = |name: &str, node: &str| json!({ "metadata": { "name": name }, "spec": { "nodeName": node, "containers": [{ "name": "c", "image": "i" }] } });
    s.create("pods", Some("t1"), pod("a", "n1")).await.unwrap();
    s.create("pods", Some("t1"), pod("b", "n2")).await.unwrap();

    let ns: kube::Api<Namespace> = kube::Api::all(client.clone());
    let t1 = ns.get("t1").await.unwrap();
    assert_eq!(t1.status.unwrap().phase.as_deref(), Some("Active"));
    assert!(t1.metadata.creation_timestamp.is_some() && t1.metadata.uid.is_some());

    let pods: kube::Api<Pod> = kube::Api::all(client);
    let lp = kube::api::ListParams::default().fields("spec.nodeName=n1");
    let mine: Vec<String> = pods
        .list(&lp)
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    assert_eq!(mine, ["a"]);

    // A watcher (list, then watch with bookmarks) on the node's field selector.
    let mut w = watcher(
        pods,
        watcher::Config::default()
            .fields("spec.nodeName=n1")
            .any_semantic(),
    )
    .boxed();
    let mut seen = Vec::new();
    s.create("pods", Some("t1"), pod("d", "n2")).await.unwrap();
    s.create("pods", Some("t1"), pod("c", "n1")).await.unwrap();
    tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(ev) = w.next().await {
            match ev.unwrap() {
                watcher::Event::Apply(p) | watcher::Event::InitApply(p) => {
                    seen.push(p.metadata.name.unwrap());
                }
                _ => {}
            }
            if seen.contains(&"c".to_string()) {
                break;
            }
        }
    })
    .await
    .expect("the watcher sees the new pod");
    assert!(
        seen.contains(&"a".to_string())
            && !seen.contains(&"b".to_string())
            && !seen.contains(&"d".to_string()),
        "{seen:?}"
    );

    // Raw watch with bookmarks.
    let admin = s.admin_kubeconfig();
    let out = ok(&s, &admin, &["get", "--raw", "/api/v1/namespaces/t1/pods?watch=true&allowWatchBookmarks=true&timeoutSeconds=1&fieldSelector=spec.nodeName%3Dn2"]).await;
    assert!(
        out.contains("\"name\":\"b\"") && !out.contains("\"name\":\"a\""),
        "{out}"
    );
}
