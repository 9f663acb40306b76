//! The policy writer (`agent/src/policy/`) against the kube stand-in and our API server behind
//! it (delegated, as deployed): NetworkPolicies, Pods, Namespaces and the Node from the
//! stand-in, VPCs, SecurityGroups, Ports (groups filled by the server from pod labels) and
//! HostFirewalls from our server, all read with a token bound to the chart's
//! `cozyplane-agent` ClusterRole. The policy maps are created and pinned in a private bpffs
//! (the datapath objects need not create them), and their contents must equal the
//! compilers' full compile of what the API holds — after the first list, after live changes,
//! and after a restart that finds stale entries. Needs root; fails (never skips) without it.
//! Deadlines are hang guards only.

mod common;
mod policy_kit;

use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

use cozyplane_agent::features::policy::maps::{Pinned, PolicyMaps};
use cozyplane_apis::v1alpha1::{HostFirewall, Port, PortSpec, SecurityGroup, VPC, VPCRef};
use cozyplane_conformance::objects::wait_for;
use cozyplane_conformance::standin::{Options, StandIn, Token};
use cozyplane_lab::require_root;
use cozyplane_policy::model::Tables;
use k8s_openapi::api::core::v1::{Event, Namespace, Node, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use policy_kit::{pin_policy_maps, pinned, start_writer};
use serde_json::{Value, json};

const SERVER_SA: &str = "system:serviceaccount:cozy-system:cozyplane-apiserver";
const SERVER_TOKEN: &str = "cozyplane-apiserver-token";
const AGENT_SA: &str = "system:serviceaccount:cozy-system:cozyplane-agent";
const AGENT_TOKEN: &str = "cozyplane-agent-token";
const NODE: &str = "n1";
const NODE_IP: &str = "192.0.2.1";

/// The chart's `cozyplane-agent` ClusterRole rules, as Helm renders them with the defaults.
fn chart_agent_rules() -> Value {
    cozyplane_chartkit::Render::new("cozy-system")
        .ok()
        .object("ClusterRole", "cozyplane-agent")["rules"]
        .clone()
}

async fn bind(s: &StandIn, role: &str, sa: &str, rules: Value) {
    s.create(
        "clusterroles",
        None,
        json!({ "metadata": { "name": role }, "rules": rules }),
    )
    .await
    .unwrap();
    s.create(
        "clusterrolebindings",
        None,
        json!({
            "metadata": { "name": role },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role },
            "subjects": [{ "kind": "ServiceAccount", "name": sa, "namespace": "cozy-system" }],
        }),
    )
    .await
    .unwrap();
}

async fn create<K>(api: &Api<K>, v: Value) -> K
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    let o: K = serde_json::from_value(v).unwrap();
    api.create(&PostParams::default(), &o).await.unwrap()
}

/// A running pod of `ns` with `labels`, address `ip` and named container ports.
async fn pod(client: &kube::Client, ns: &str, name: &str, labels: Value, ip: &str, host_network: bool) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    create(
        &pods,
        json!({
            "metadata": { "name": name, "namespace": ns, "labels": labels },
            "spec": {
                "nodeName": NODE, "hostNetwork": host_network,
                "containers": [{ "name": "c", "image": "i",
                    "ports": [{ "name": "http", "containerPort": 8080 }] }],
            },
        }),
    )
    .await;
    let status = json!({ "status": { "phase": "Running", "podIP": ip, "podIPs": [{ "ip": ip }] } });
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

async fn maps_match(dir: &Path, client: &kube::Client, what: &str) -> Tables {
    policy_kit::maps_match(dir, client, NODE, NODE_IP, what).await
}

async fn agent_clients(s: &StandIn) -> cozyplane_agent::core::api::ApiClients {
    policy_kit::agent_clients(&s.token_kubeconfig(AGENT_TOKEN), NODE, NODE_IP).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_maps_follow_the_api_and_a_restart_reconciles_them() {
    require_root();
    let fs = common::Bpffs::new("cppolicy");
    let pins = fs.0.path().to_path_buf();
    pin_policy_maps(&pins);

    let s = StandIn::start(Options {
        tokens: vec![
            Token::new(SERVER_TOKEN, SERVER_SA, &["system:serviceaccounts"]),
            Token::new(AGENT_TOKEN, AGENT_SA, &["system:serviceaccounts"]),
        ],
        ..Default::default()
    })
    .await;
    bind(
        &s,
        "cozyplane-apiserver",
        "cozyplane-apiserver",
        json!(cozyplane_apiserver::rbac::server_role_rules()),
    )
    .await;
    bind(&s, "cozyplane-agent", "cozyplane-agent", chart_agent_rules()).await;
    let kc = kube::config::Kubeconfig::read_from(s.admin_kubeconfig()).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .unwrap();
    let admin = kube::Client::try_from(cfg).unwrap();
    let _cozy = s.start_cozyplane_as(&s.token_kubeconfig(SERVER_TOKEN), &[]).await;
    wait_for(
        &Api::<APIService>::all(admin.clone()),
        "v1alpha1.sdn.cozystack.io",
        "Available",
        |o: Option<&APIService>| {
            o.and_then(|a| a.status.as_ref())
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Available" && c.status == "True"))
        },
    )
    .await;

    // The kube side: two namespaces, the node, four pods (one hostNetwork), two policies,
    // one of which names a protocol NetworkPolicy does not have.
    let nss: Api<Namespace> = Api::all(admin.clone());
    create(
        &nss,
        json!({ "metadata": { "name": "t1", "labels": { "team": "x" } } }),
    )
    .await;
    create(&nss, json!({ "metadata": { "name": "t2" } })).await;
    let nodes: Api<Node> = Api::all(admin.clone());
    create(
        &nodes,
        json!({ "metadata": { "name": NODE, "labels": { "role": "edge" } } }),
    )
    .await;
    let addrs = json!({ "status": { "addresses": [{ "type": "InternalIP", "address": NODE_IP },
        { "type": "InternalIP", "address": "2001:db8::1" }] } });
    nodes
        .patch_status(NODE, &PatchParams::default(), &Patch::Merge(&addrs))
        .await
        .unwrap();
    pod(
        &admin,
        "t1",
        "web-1",
        json!({ "app": "web" }),
        "10.244.1.5",
        false,
    )
    .await;
    pod(&admin, "t1", "db-1", json!({ "app": "db" }), "10.244.1.6", false).await;
    pod(
        &admin,
        "t2",
        "client-1",
        json!({ "app": "client" }),
        "10.244.2.7",
        false,
    )
    .await;
    pod(&admin, "t2", "host-1", json!({ "app": "host" }), NODE_IP, true).await;
    let t1_policies: Api<NetworkPolicy> = Api::namespaced(admin.clone(), "t1");
    create(
        &t1_policies,
        json!({ "metadata": { "name": "db-allow", "namespace": "t1" }, "spec": {
            "podSelector": { "matchLabels": { "app": "db" } }, "policyTypes": ["Ingress"],
            "ingress": [{ "from": [{ "podSelector": { "matchLabels": { "app": "web" } } },
                                   { "namespaceSelector": {}, "podSelector": { "matchLabels": { "app": "client" } } },
                                   { "ipBlock": { "cidr": "10.0.0.0/8", "except": ["10.244.0.0/16"] } }],
                          "ports": [{ "port": 5432 }, { "port": 6000, "endPort": 6100 }] }] } }),
    )
    .await;
    create(
        &t1_policies,
        json!({ "metadata": { "name": "refused", "namespace": "t1" }, "spec": {
            "podSelector": { "matchLabels": { "app": "web" } }, "policyTypes": ["Ingress"],
            "ingress": [{ "ports": [{ "protocol": "ICMP", "port": 8 }, { "port": "http" }] }] } }),
    )
    .await;

    // Our side: a VPC, a group of web pods (ingress by CIDR), web-1's Port (the server
    // fills its groups from the pod's labels), a HostFirewall for the node's role.
    let vpcs: Api<VPC> = Api::namespaced(admin.clone(), "t1");
    create(
        &vpcs,
        json!({ "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "VPC",
                "metadata": { "name": "v1", "namespace": "t1" }, "spec": { "cidrs": ["10.0.0.0/24"] } }),
    )
    .await;
    wait_for(&vpcs, "v1", "a VNI", |v: Option<&VPC>| {
        v.and_then(|v| v.status.as_ref()).is_some_and(|s| s.vni != 0)
    })
    .await;
    let sgs: Api<SecurityGroup> = Api::namespaced(admin.clone(), "t1");
    create(
        &sgs,
        json!({ "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "SecurityGroup",
                "metadata": { "name": "web", "namespace": "t1" }, "spec": {
                    "vpcRef": { "name": "v1" }, "podSelector": { "matchLabels": { "app": "web" } },
                    "ingress": [{ "from": { "cidr": "203.0.113.0/24" }, "ports": [{ "protocol": "TCP", "port": 443 }] },
                                { "from": { "group": "web" } }] } }),
    )
    .await;
    let mut p = Port::new(
        "",
        PortSpec {
            vpc_ref: VPCRef {
                namespace: "t1".into(),
                name: "v1".into(),
            },
            node: NODE.into(),
            node_ip: NODE_IP.into(),
            pod_namespace: "t1".into(),
            pod_name: "web-1".into(),
            ..Default::default()
        },
    );
    p.metadata.name = None;
    p.metadata.generate_name = Some("p-".into());
    let ports: Api<Port> = Api::all(admin.clone());
    let port = ports.create(&PostParams::default(), &p).await.unwrap();
    let port_name = port.metadata.name.clone().unwrap();
    wait_for(&ports, &port_name, "grouped", |o: Option<&Port>| {
        o.and_then(|p| p.status.as_ref())
            .is_some_and(|s| !s.groups.is_empty())
    })
    .await;
    let hfs: Api<HostFirewall> = Api::all(admin.clone());
    create(
        &hfs,
        json!({ "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "HostFirewall",
                "metadata": { "name": "edge" }, "spec": {
                    "nodeSelector": { "matchLabels": { "role": "edge" } },
                    "ingress": [{ "from": [{ "cidr": "198.51.100.0/24", "except": ["198.51.100.128/25"] }],
                                  "ports": [{ "protocol": "TCP", "port": 22 }] }] } }),
    )
    .await;

    // 1. The first list: the maps become the full compile, every layer present.
    let (writer, metrics) = start_writer(agent_clients(&s).await, pins.clone());
    let t = maps_match(&pins, &admin, "after the first list").await;
    let text = metrics.render();
    assert!(text.contains("cozyplane_policy_sync_state 1"), "{text}");
    assert!(
        text.contains(&format!(
            "cozyplane_bpf_map_entries{{map=\"sdn_pol_rules\"}} {}",
            t.rules.len()
        )),
        "{text}"
    );
    assert!(
        t.rules
            .keys()
            .any(|k| k.layer == cozyplane_policy::model::Layer::Np)
            && t.rules
                .keys()
                .any(|k| k.layer == cozyplane_policy::model::Layer::Sg)
            && t.rules
                .keys()
                .any(|k| k.layer == cozyplane_policy::model::Layer::Hf),
        "{t:#?}"
    );
    assert_eq!(
        t.np_idents.len(),
        3,
        "the three pod-network pods, not the hostNetwork one"
    );
    assert_eq!(t.sg_members.len(), 1);
    assert_eq!(t.hf_self.len(), 2, "both the node's addresses");
    assert_ne!(t.state_flags, 0, "the node's ingress is armed");
    // The refused construct is raised on its policy.
    let events: Api<Event> = Api::namespaced(admin.clone(), "t1");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let evs = events.list(&ListParams::default()).await.unwrap();
        let found = evs.items.iter().any(|e| {
            e.reason.as_deref() == Some("PolicyRefused")
                && e.involved_object.name.as_deref() == Some("refused")
                && e.involved_object.kind.as_deref() == Some("NetworkPolicy")
        });
        if found {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "no Event: {evs:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let g0 = Pinned::open(&pins).unwrap().generation().unwrap();

    // 2. Live changes: a relabel, a removed policy, a namespace label; each narrows.
    Api::<Pod>::namespaced(admin.clone(), "t1")
        .patch(
            "db-1",
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "labels": { "app": "web" } } })),
        )
        .await
        .unwrap();
    t1_policies
        .delete("refused", &DeleteParams::default())
        .await
        .unwrap();
    nss.patch(
        "t2",
        &PatchParams::default(),
        &Patch::Merge(json!({ "metadata": { "labels": { "team": "y" } } })),
    )
    .await
    .unwrap();
    maps_match(&pins, &admin, "after live changes").await;
    let g1 = Pinned::open(&pins).unwrap().generation().unwrap();
    assert!(g1 > g0, "a removed policy bumps the generation ({g0} -> {g1})");

    // 3. A restart: the agent is down while the API changes, and the maps hold a stale
    // identity and rule besides; the new agent keeps what holds and removes the rest.
    writer.abort();
    let _ = writer.await;
    Api::<Pod>::namespaced(admin.clone(), "t2")
        .delete("client-1", &DeleteParams::default())
        .await
        .unwrap();
    create(
        &t1_policies,
        json!({ "metadata": { "name": "web-egress", "namespace": "t1" }, "spec": {
            "podSelector": { "matchLabels": { "app": "web" } }, "policyTypes": ["Egress"],
            "egress": [{ "to": [{ "podSelector": { "matchLabels": { "app": "web" } } }],
                         "ports": [{ "port": "http" }] }] } }),
    )
    .await;
    let before = pinned(&pins);
    {
        let mut m = Pinned::open(&pins).unwrap();
        let stale = cozyplane_policy::model::RuleKey {
            layer: cozyplane_policy::model::Layer::Np,
            dir: cozyplane_policy::model::Dir::Ingress,
            net: 0,
            subject: 4242,
            peer: cozyplane_policy::model::PEER_ISOLATED,
            proto: 0,
            port: cozyplane_policy::ports::PortBlock::ANY,
        };
        use cozyplane_agent::features::policy::maps::Op;
        m.op(&Op::Rule(
            stale,
            cozyplane_policy::model::RuleVal {
                peers: cozyplane_policy::model::ALL,
                rule: 0,
                flags: 0,
            },
        ))
        .unwrap();
        m.op(&Op::Ident("10.9.9.9".parse().unwrap(), 4242)).unwrap();
    }
    assert_eq!(
        pinned(&pins).rules.len(),
        before.rules.len() + 1,
        "the stale rule is pinned"
    );
    let (writer, _) = start_writer(agent_clients(&s).await, pins.clone());
    let t = maps_match(&pins, &admin, "after the restart").await;
    assert!(!t.np_idents.contains_key(&"10.9.9.9".parse::<IpAddr>().unwrap()));
    assert!(!t.np_idents.contains_key(&"10.244.2.7".parse::<IpAddr>().unwrap()));
    let g2 = Pinned::open(&pins).unwrap().generation().unwrap();
    assert!(g2 > g1, "the reconcile removed entries and bumps the generation");
    writer.abort();

    assert_eq!(
        s.forbidden_requests(),
        0,
        "the chart's agent role grants everything the writer asks for"
    );
}
