//! The policy writer and the cluster admin's tiers on the real kube-apiserver (v1.36, from
//! `KUBE_BIN_DIR`, `conformance::realkube`), with cozyplane-apiserver behind it as the chart
//! installs it and the agent reading with a token of the chart's `cozyplane-agent`
//! ClusterRole:
//!
//! 1. **CRDs absent**: the network-policy-api kinds are not served (404). The writer must not
//!    hold the policy layers back: the maps become the full compile of the NetworkPolicies,
//!    and the agent keeps asking for the admin kinds.
//! 2. **CRDs installed** from the chart's `crds/` (as Helm would): an AdminNetworkPolicy (with
//!    `nodes` and `networks` peers, Allow, Deny, Pass), one the compiler refuses in part
//!    (`domainNames`: an Event on it and a metric) and the BaselineAdminNetworkPolicy reach
//!    the maps without a restart; a node relabelled moves a `nodes` peer; deleting the ANP
//!    takes it out (and bumps the generation); a restart reconciles changes made while the
//!    agent was down. After each step the maps must equal the compilers' full compile of what
//!    the API holds.
//! 3. **The kube-apiserver extension**: an ANP whose annotation
//!    `policy.cozystack.io/kube-apiserver` names an egress rule (and a rule it does not have:
//!    an Event). The control plane runs with `--endpoint-reconciler-type=none`, so the
//!    `default/kubernetes` Service has no EndpointSlice: the first build ran on an empty list
//!    (it must not hold the maps back), and the test writes the slice itself. The slice's
//!    address reaches the maps as a class the named rule admits, its change (and one made
//!    while the agent is down) is followed.
//!
//! The policy maps are created and pinned in a private bpffs. Needs root (fails without it);
//! without the control-plane binaries the test says loudly that it did not run (a failure in
//! CI or with `REQUIRE_KUBE=1`). Deadlines are hang guards only.

mod common;
mod policy_kit;

use std::path::Path;
use std::time::{Duration, Instant};

use cozyplane_agent::features::policy::maps::{Pinned, PolicyMaps};
use cozyplane_apis::admin_policy::{AdminNetworkPolicy, BaselineAdminNetworkPolicy, UPSTREAM_RELEASE};
use cozyplane_conformance::realkube::cozy::RELEASE_NAMESPACE;
use cozyplane_conformance::realkube::{self, ControlPlane, audit};
use cozyplane_lab::require_root;
use cozyplane_policy::cidr::Prefix;
use cozyplane_policy::model::{Layer, MARK_ANP, MARK_BANP, PEER_ISOLATED, Tables, proto};
use cozyplane_policy::verdict;
use k8s_openapi::api::core::v1::{Event, Namespace, Node, Pod};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use policy_kit::{pin_policy_maps, start_writer};
use serde_json::{Value, json};

const NODE: &str = "n1";
const NODE_IP: &str = "192.0.2.1";
const OTHER_IP: &str = "192.0.2.2";
const AGENT: &str = "cozyplane-agent";
/// The kube-apiserver as the test's EndpointSlice places it (outside `192.0.2.0/24`,
/// which the floor ANP denies).
const API_IP: &str = "198.51.100.10";
const API_MOVED: &str = "198.51.100.11";
const API_AGAIN: &str = "198.51.100.12";
/// The test's EndpointSlice of the `kubernetes` Service.
const API_SLICE: &str = "kubernetes-test";

async fn create<K>(api: &Api<K>, v: Value) -> K
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    let o: K = serde_json::from_value(v).unwrap();
    api.create(&PostParams::default(), &o).await.unwrap()
}

/// A running pod with a named port `http` (8080); created once the namespace's default
/// ServiceAccount exists (the controller makes it).
async fn pod(client: &kube::Client, ns: &str, name: &str, app: &str, ip: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let o: Pod = serde_json::from_value(json!({
        "metadata": { "name": name, "namespace": ns, "labels": { "app": app } },
        "spec": { "nodeName": NODE,
                  "containers": [{ "name": "c", "image": "i", "ports": [{ "name": "http", "containerPort": 8080 }] }] },
    }))
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while let Err(e) = pods.create(&PostParams::default(), &o).await {
        assert!(Instant::now() < deadline, "pod {ns}/{name}: {e}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let status = json!({ "status": { "phase": "Running", "podIP": ip, "podIPs": [{ "ip": ip }] } });
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

async fn node(client: &kube::Client, name: &str, role: &str, ip: &str) {
    let nodes: Api<Node> = Api::all(client.clone());
    create(
        &nodes,
        json!({ "metadata": { "name": name, "labels": { "role": role } } }),
    )
    .await;
    let addrs = json!({ "status": { "addresses": [{ "type": "InternalIP", "address": ip }] } });
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&addrs))
        .await
        .unwrap();
}

async fn maps_match(dir: &Path, client: &kube::Client, what: &str) -> Tables {
    let started = Instant::now();
    let t = policy_kit::maps_match(dir, client, NODE, NODE_IP, what).await;
    eprintln!(
        "{what}: the maps are the full compile after {:?}",
        started.elapsed()
    );
    t
}

fn generation(dir: &Path) -> u32 {
    Pinned::open(dir).unwrap().generation().unwrap()
}

fn ip(s: &str) -> std::net::IpAddr {
    s.parse().unwrap()
}

/// The agent's ClusterRole and its binding, as Helm renders them with the defaults.
async fn agent_rbac(cp: &ControlPlane) {
    let m = cozyplane_chartkit::Render::new(RELEASE_NAMESPACE)
        .show_only("templates/agent.yaml")
        .ok();
    for kind in ["ClusterRole", "ClusterRoleBinding"] {
        cp.apply(&m.object(kind, AGENT).to_string()).await;
    }
}

/// The chart's `crds/`, applied as Helm would, and established.
async fn install_crds(cp: &ControlPlane) {
    for (name, text) in cozyplane_chartkit::crd_files() {
        assert!(
            text.contains(&format!("release {UPSTREAM_RELEASE} ")),
            "{name} is of the release the wire types follow"
        );
        let out = cp
            .kubectl_stdin(&cp.admin, &["apply", "--server-side"], &text)
            .await;
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for crd in ["adminnetworkpolicies", "baselineadminnetworkpolicies"] {
        cp.ok(
            &cp.admin,
            &[
                "wait",
                "--for=condition=Established",
                &format!("crd/{crd}.policy.networking.k8s.io"),
                "--timeout=60s",
            ],
        )
        .await;
    }
}

/// Requests of the agent for `resource` of `policy.networking.k8s.io` answered `code`.
fn asked(cp: &ControlPlane, resource: &str, code: u16) -> usize {
    let user = format!("system:serviceaccount:{RELEASE_NAMESPACE}:{AGENT}");
    audit::read(&cp.audit_log)
        .iter()
        .filter(|e| {
            e.user == user
                && e.stage == "ResponseComplete"
                && e.code == Some(code)
                && e.uri
                    .starts_with(&format!("/apis/policy.networking.k8s.io/v1alpha1/{resource}"))
        })
        .count()
}

fn floor_anp() -> Value {
    json!({ "apiVersion": "policy.networking.k8s.io/v1alpha1", "kind": "AdminNetworkPolicy",
        "metadata": { "name": "tenant-floor" },
        "spec": {
            "priority": 10,
            "subject": { "namespaces": { "matchLabels": { "team": "x" } } },
            "ingress": [
                { "name": "same-team", "action": "Pass",
                  "from": [{ "namespaces": { "matchLabels": { "team": "x" } } }] },
                { "name": "no-one-else", "action": "Deny", "from": [{ "namespaces": {} }] },
            ],
            "egress": [
                { "name": "kubelets", "action": "Allow", "to": [{ "nodes": { "matchLabels": { "role": "edge" } } }],
                  "ports": [{ "portNumber": { "protocol": "TCP", "port": 10250 } }] },
                { "name": "no-nodes", "action": "Deny", "to": [{ "networks": ["192.0.2.0/24"] }] },
            ],
        } })
}

/// Team x may reach the kube-apiserver on 6443 (the annotation's rule; its own `nodes` peer
/// selects no node here) and nothing else of `198.51.100.0/24`.
fn apiserver_anp() -> Value {
    json!({ "apiVersion": "policy.networking.k8s.io/v1alpha1", "kind": "AdminNetworkPolicy",
        "metadata": { "name": "to-apiserver",
                      "annotations": { "policy.cozystack.io/kube-apiserver": "apiserver, no-such-rule" } },
        "spec": {
            "priority": 5,
            "subject": { "namespaces": { "matchLabels": { "team": "x" } } },
            "egress": [
                { "name": "apiserver", "action": "Allow",
                  "to": [{ "nodes": { "matchLabels": { "node-role.kubernetes.io/control-plane": "" } } }],
                  "ports": [{ "portNumber": { "protocol": "TCP", "port": 6443 } }] },
                { "name": "outside", "action": "Deny", "to": [{ "networks": ["198.51.100.0/24"] }] },
            ],
        } })
}

/// The test's EndpointSlice of the `kubernetes` Service, one ready endpoint at `addr`.
fn apiserver_slice(addr: &str) -> Value {
    json!({ "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": { "name": API_SLICE, "namespace": "default",
                      "labels": { "kubernetes.io/service-name": "kubernetes",
                                  "endpointslice.kubernetes.io/managed-by": "cozyplane-test" } },
        "addressType": "IPv4",
        "endpoints": [{ "addresses": [addr], "conditions": { "ready": true } }],
        "ports": [{ "name": "https", "port": 6443, "protocol": "TCP" }] })
}

/// Waits for the writer's Event on the ADMIN policy `name` whose message holds `text`.
async fn refused_event(admin: &kube::Client, kind: &str, name: &str, text: &str) {
    let events: Api<Event> = Api::namespaced(admin.clone(), "default");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let evs = events.list(&ListParams::default()).await.unwrap();
        if evs.items.iter().any(|e| {
            e.reason.as_deref() == Some("PolicyRefused")
                && e.involved_object.kind.as_deref() == Some(kind)
                && e.involved_object.name.as_deref() == Some(name)
                && e.message.as_deref().is_some_and(|m| m.contains(text))
        }) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no Event on {kind} {name} saying {text:?}: {evs:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_policies_from_the_charts_crds_reach_the_maps_on_the_real_kube_apiserver() {
    require_root();
    let bins = match realkube::bins() {
        Ok(b) => b,
        Err(why) => {
            realkube::not_run(&why);
            return;
        }
    };
    let started = Instant::now();
    let fs = common::Bpffs::new("cpadmin");
    let pins = fs.0.path().to_path_buf();
    pin_policy_maps(&pins);
    let cp = ControlPlane::start(&bins).await;
    let _cozy = cp.install_cozyplane(&[]).await;
    agent_rbac(&cp).await;
    let token = cp
        .ok(
            &cp.admin,
            &["create", "token", AGENT, "-n", RELEASE_NAMESPACE, "--duration=1h"],
        )
        .await;
    let agent_kc = cp.token_kubeconfig("agent", token.trim());
    let admin = cp.client(&cp.admin).await;
    eprintln!(
        "control plane and cozyplane-apiserver up after {:?}",
        started.elapsed()
    );

    // The kube side: two teams' namespaces, two nodes, three pods, a NetworkPolicy.
    let nss: Api<Namespace> = Api::all(admin.clone());
    create(
        &nss,
        json!({ "metadata": { "name": "t1", "labels": { "team": "x" } } }),
    )
    .await;
    create(
        &nss,
        json!({ "metadata": { "name": "t2", "labels": { "team": "y" } } }),
    )
    .await;
    node(&admin, NODE, "edge", NODE_IP).await;
    node(&admin, "n2", "core", OTHER_IP).await;
    pod(&admin, "t1", "web-1", "web", "10.244.1.5").await;
    pod(&admin, "t1", "db-1", "db", "10.244.1.6").await;
    pod(&admin, "t2", "client-1", "client", "10.244.2.7").await;
    let t1_policies: Api<NetworkPolicy> = Api::namespaced(admin.clone(), "t1");
    create(
        &t1_policies,
        json!({ "metadata": { "name": "db-allow", "namespace": "t1" }, "spec": {
            "podSelector": { "matchLabels": { "app": "db" } }, "policyTypes": ["Ingress"],
            "ingress": [{ "from": [{ "podSelector": { "matchLabels": { "app": "web" } } }],
                          "ports": [{ "port": 5432 }] }] } }),
    )
    .await;

    // 1. No CRDs: the admin kinds count as listed and empty, nothing is held back. Nor by
    // the kube-apiserver's EndpointSlices: none, with this control plane's reconciler.
    let slices: Api<EndpointSlice> = Api::namespaced(admin.clone(), "default");
    assert!(
        policy_kit::kube_apiserver(&admin).await.is_empty(),
        "the control plane keeps no endpoints of its own (--endpoint-reconciler-type=none): {:?}",
        slices.list(&ListParams::default()).await.unwrap().items
    );
    let agent = policy_kit::agent_clients(&agent_kc, NODE, NODE_IP).await;
    let (writer, metrics) = start_writer(agent, pins.clone());
    let t = maps_match(&pins, &admin, "without the CRDs").await;
    assert!(t.rules.keys().any(|k| k.layer == Layer::Np), "{t:#?}");
    assert!(
        !t.rules
            .keys()
            .any(|k| matches!(k.layer, Layer::Anp | Layer::Banp))
    );
    assert!(metrics.render().contains("cozyplane_policy_sync_state 1"));
    // The agent keeps asking (1 s, 2 s, 4 s...).
    let deadline = Instant::now() + Duration::from_secs(30);
    while asked(&cp, "adminnetworkpolicies", 404) < 3 {
        assert!(
            Instant::now() < deadline,
            "the agent stopped asking for AdminNetworkPolicies"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // 2. The chart's CRDs installed, the admin policies created: picked up without a restart.
    // (Created with kubectl: the wire types serialize without apiVersion and kind.)
    install_crds(&cp).await;
    let installed = Instant::now();
    let anps: Api<AdminNetworkPolicy> = Api::all(admin.clone());
    let banps: Api<BaselineAdminNetworkPolicy> = Api::all(admin.clone());
    cp.apply(&floor_anp().to_string()).await;
    cp.apply(
        &json!({ "apiVersion": "policy.networking.k8s.io/v1alpha1", "kind": "AdminNetworkPolicy",
            "metadata": { "name": "by-name" },
            "spec": { "priority": 20, "subject": { "pods": { "namespaceSelector": {}, "podSelector": { "matchLabels": { "app": "client" } } } },
                      "egress": [{ "action": "Allow", "to": [{ "domainNames": ["example.com"] }] }] } })
        .to_string(),
    )
    .await;
    cp.apply(
        &json!({ "apiVersion": "policy.networking.k8s.io/v1alpha1", "kind": "BaselineAdminNetworkPolicy",
            "metadata": { "name": "default" },
            "spec": { "subject": { "namespaces": {} },
                      "ingress": [{ "action": "Deny", "from": [{ "namespaces": { "matchLabels": { "team": "y" } } }] }] } })
        .to_string(),
    )
    .await;
    let t = maps_match(&pins, &admin, "after the CRDs were installed").await;
    eprintln!(
        "admin policies in the maps {:?} after the CRDs were installed",
        installed.elapsed()
    );
    assert!(t.rules.keys().any(|k| k.layer == Layer::Anp), "{t:#?}");
    assert!(t.rules.keys().any(|k| k.layer == Layer::Banp), "{t:#?}");
    assert!(
        t.rules
            .iter()
            .any(|(k, v)| k.peer == PEER_ISOLATED && v.flags & MARK_ANP != 0 && v.flags & MARK_BANP != 0),
        "a marker names both admin tiers: {t:#?}"
    );
    let (web, db, client) = (ip("10.244.1.5"), ip("10.244.1.6"), ip("10.244.2.7"));
    let tcp = |t: &Tables, s, d, port| verdict::np(t, s, d, proto::TCP, port).allowed();
    assert!(
        tcp(&t, web, ip(NODE_IP), 10250),
        "team x reaches the edge kubelet"
    );
    assert!(!tcp(&t, web, ip(OTHER_IP), 10250), "not the core node's");
    assert!(
        tcp(&t, web, db, 5432),
        "passed to the NetworkPolicy, which admits web"
    );
    assert!(
        !tcp(&t, client, db, 5432),
        "team y is denied at db's ingress by the ANP"
    );
    assert!(!tcp(&t, client, web, 80), "and at web's");
    // The refused construct is raised on its (cluster-scoped) policy, and counted.
    let events: Api<Event> = Api::namespaced(admin.clone(), "default");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let evs = events.list(&ListParams::default()).await.unwrap();
        if evs.items.iter().any(|e| {
            e.reason.as_deref() == Some("PolicyRefused")
                && e.involved_object.kind.as_deref() == Some("AdminNetworkPolicy")
                && e.involved_object.name.as_deref() == Some("by-name")
        }) {
            break;
        }
        assert!(Instant::now() < deadline, "no Event on the refused ANP: {evs:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let text = metrics.render();
    assert!(
        text.contains("cozyplane_policy_refused_total{layer=\"anp\",reason=\"peer\"} 1"),
        "{text}"
    );

    // 3. A node relabelled: the `nodes` peer follows.
    Api::<Node>::all(admin.clone())
        .patch(
            "n2",
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "labels": { "role": "edge" } } })),
        )
        .await
        .unwrap();
    let t = maps_match(&pins, &admin, "after a node relabel").await;
    assert!(tcp(&t, web, ip(OTHER_IP), 10250), "n2 is an edge node now");

    // 3b. The kube-apiserver extension: the annotated rule matches nothing more while the
    // apiserver has no endpoints; then the slice appears, and moves.
    cp.apply(&apiserver_anp().to_string()).await;
    let t = maps_match(&pins, &admin, "with the annotated ANP, no endpoints").await;
    assert!(!tcp(&t, web, ip(API_IP), 6443), "no address known yet");
    refused_event(&admin, "AdminNetworkPolicy", "to-apiserver", "no-such-rule").await;
    let listed = Instant::now();
    cp.apply(&apiserver_slice(API_IP).to_string()).await;
    let t = maps_match(&pins, &admin, "after the kube-apiserver's EndpointSlice appeared").await;
    eprintln!(
        "the kube-apiserver's address in the maps {:?} after its EndpointSlice was written",
        listed.elapsed()
    );
    assert!(
        t.cidrs.keys().any(|k| k.prefix == Prefix::host(ip(API_IP))),
        "a class of its own: {:#?}",
        t.cidrs
    );
    assert!(
        tcp(&t, web, ip(API_IP), 6443),
        "the named rule admits the apiserver"
    );
    assert!(!tcp(&t, web, ip(API_IP), 443), "on the rule's ports only");
    assert!(!tcp(&t, web, ip(API_MOVED), 6443), "and no other address");
    assert!(
        tcp(&t, client, ip(API_IP), 6443),
        "team y is not the ANP's subject"
    );
    let moved = Instant::now();
    cp.apply(&apiserver_slice(API_MOVED).to_string()).await;
    let t = maps_match(&pins, &admin, "after the kube-apiserver moved").await;
    eprintln!("the kube-apiserver's move followed in {:?}", moved.elapsed());
    assert!(tcp(&t, web, ip(API_MOVED), 6443));
    assert!(
        !tcp(&t, web, ip(API_IP), 6443),
        "the old address is outside again"
    );
    assert!(!t.cidrs.keys().any(|k| k.prefix == Prefix::host(ip(API_IP))));

    // 4. The ANP deleted: its entries go and established flows are re-checked.
    let g0 = generation(&pins);
    anps.delete("tenant-floor", &DeleteParams::default())
        .await
        .unwrap();
    let t = maps_match(&pins, &admin, "after the ANP was deleted").await;
    assert!(tcp(&t, web, ip(OTHER_IP), 22), "no Deny to the nodes any more");
    assert!(!tcp(&t, client, db, 5432), "the NetworkPolicy isolates db");
    assert!(!tcp(&t, client, web, 80), "the BANP denies team y");
    assert!(
        generation(&pins) > g0,
        "a removal narrows: the generation is bumped"
    );

    // 5. A restart: the agent is down while an ANP comes back and the BANP goes.
    writer.abort();
    let _ = writer.await;
    cp.apply(&floor_anp().to_string()).await;
    banps.delete("default", &DeleteParams::default()).await.unwrap();
    cp.apply(&apiserver_slice(API_AGAIN).to_string()).await;
    let agent = policy_kit::agent_clients(&agent_kc, NODE, NODE_IP).await;
    let (writer, _) = start_writer(agent, pins.clone());
    let t = maps_match(&pins, &admin, "after a restart").await;
    assert!(!t.rules.keys().any(|k| k.layer == Layer::Banp), "{t:#?}");
    assert!(!tcp(&t, web, ip(OTHER_IP), 22));
    assert!(
        tcp(&t, web, ip(API_AGAIN), 6443) && !tcp(&t, web, ip(API_MOVED), 6443),
        "the apiserver moved while the agent was down"
    );
    // Its slice deleted: the named rule is back to its own peers.
    slices.delete(API_SLICE, &DeleteParams::default()).await.unwrap();
    let t = maps_match(&pins, &admin, "after the kube-apiserver's slice was deleted").await;
    assert!(!tcp(&t, web, ip(API_AGAIN), 6443));
    writer.abort();

    let forbidden = audit::forbidden(
        &audit::read(&cp.audit_log),
        &format!("system:serviceaccount:{RELEASE_NAMESPACE}:{AGENT}"),
    );
    assert!(
        forbidden.is_empty(),
        "the chart's agent role grants everything the writer asks for: {forbidden:#?}"
    );
    assert!(
        asked(&cp, "adminnetworkpolicies", 200) > 0 && asked(&cp, "baselineadminnetworkpolicies", 200) > 0
    );
    eprintln!("done after {:?}", started.elapsed());
}
