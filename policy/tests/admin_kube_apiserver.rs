//! The kube-apiserver entity, a cozyplane extension of the admin tiers: the annotation
//! `policy.cozystack.io/kube-apiserver` on an AdminNetworkPolicy or the
//! BaselineAdminNetworkPolicy names egress rules (by `name`) that also match the
//! kube-apiserver's addresses (`NpCompiler::set_kube_apiserver`, the endpoints of the
//! `default/kubernetes` Service). What is checked here, each on the compiled entries
//! (`verdict::np`, the datapath's lookups):
//!
//! * the named rules match the addresses, in both families, and only those rules do; a name
//!   no egress rule has (or an ingress rule's) is a warning and changes nothing;
//! * the addresses moving is an incremental change: its diff, applied to a copy of the maps,
//!   gives the compiler's maps and a fresh compile's; the classes are shared with a `nodes`
//!   peer on the same address (the usual host-network apiserver) and outlive either holder;
//! * the addresses given while no policy names the entity change nothing;
//! * fail closed: a named rule with a `namedPort` (a name is a pod's, the apiserver an
//!   address) and an `Allow` rule with an unenforceable peer match nothing of the apiserver.
//!
//! The generated truth table (`admin_truth_table.rs`) covers the extension against the
//! oracle at large; these are the cases written out.

use std::net::IpAddr;

use cozyplane_apis::admin_policy::{AdminNetworkPolicy, BaselineAdminNetworkPolicy};
use cozyplane_policy::Tables;
use cozyplane_policy::cidr::Prefix;
use cozyplane_policy::error::Reason;
use cozyplane_policy::model::{Diff, proto};
use cozyplane_policy::np::admin::{AdminPeer, KUBE_APISERVER_ANNOTATION, translate_anp};
use cozyplane_policy::np::{NamespaceInfo, NodeInfo, NpCompiler, PodInfo};
use cozyplane_policy::verdict::{self, Tier};
use serde_json::{Value, json};

const POD4: &str = "10.0.0.1";
const POD6: &str = "fd00::a";
const API4: &str = "192.168.1.10";
const API6: &str = "fd00::1:10";
const OTHER: &str = "192.168.1.11";

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn anp(v: Value) -> AdminNetworkPolicy {
    serde_json::from_value(v).unwrap()
}

/// Pods of namespace `a` may reach the kube-apiserver on 6443 (and a placeholder network
/// no one uses), nothing else outside on any port.
fn api_only(annotation: &str) -> AdminNetworkPolicy {
    anp(json!({
        "metadata": {"name": "api-only", "annotations": {KUBE_APISERVER_ANNOTATION: annotation}},
        "spec": {
            "priority": 5,
            "subject": {"namespaces": {}},
            "ingress": [{"name": "ingress-rule", "action": "Allow", "from": [{"namespaces": {}}]}],
            "egress": [
                {"name": "apiserver", "action": "Allow", "to": [{"networks": ["0.0.0.0/32"]}],
                 "ports": [{"portNumber": {"protocol": "TCP", "port": 6443}}]},
                {"name": "world", "action": "Deny", "to": [{"networks": ["0.0.0.0/0", "::/0"]}]},
            ],
        },
    }))
}

fn compiler() -> NpCompiler {
    let ns = NamespaceInfo {
        name: "a".into(),
        labels: [("kubernetes.io/metadata.name".to_string(), "a".to_string())].into(),
    };
    let pod = PodInfo {
        ns: "a".into(),
        name: "p".into(),
        labels: [("app".to_string(), "web".to_string())].into(),
        ips: vec![ip(POD4), ip(POD6)],
        ..PodInfo::default()
    };
    NpCompiler::build([ns], [pod], [])
}

fn tcp(t: &Tables, dst: &str, port: u16) -> bool {
    let d = ip(dst);
    let src = if d.is_ipv4() { ip(POD4) } else { ip(POD6) };
    verdict::np(t, src, d, proto::TCP, port).allowed()
}

/// Apply `d` to `applied`, then check it equals the compiler's maps and a fresh compile's.
fn step(c: &NpCompiler, d: &Diff, applied: &mut Tables, fresh: &Tables, what: &str) {
    d.apply(applied);
    assert!(
        *applied == c.tables(),
        "{what}: the diff does not rebuild the maps"
    );
    assert!(applied == fresh, "{what}: the maps differ from a fresh compile");
}

#[test]
fn the_annotation_adds_the_kube_apiserver_to_the_named_egress_rules_only() {
    let (pol, warns) = translate_anp(&api_only(" apiserver ,, missing,ingress-rule"));
    assert!(pol.egress[0].peers.contains(&AdminPeer::KubeApiserver), "{pol:?}");
    assert!(
        !pol.egress[1].peers.contains(&AdminPeer::KubeApiserver),
        "{pol:?}"
    );
    assert!(
        pol.ingress[0]
            .peers
            .iter()
            .all(|p| *p != AdminPeer::KubeApiserver)
    );
    let refused: Vec<String> = warns
        .iter()
        .map(|w| format!("{}: {}", w.field, w.reason))
        .collect();
    assert_eq!(
        refused,
        [
            "metadata.annotations[policy.cozystack.io/kube-apiserver]: peer sets kube-apiserver: no egress rule named \"missing\"",
            "metadata.annotations[policy.cozystack.io/kube-apiserver]: peer sets kube-apiserver: no egress rule named \"ingress-rule\"",
        ],
        "{warns:?}"
    );
    // Two rules of one name: both are named.
    let mut twice = api_only("world");
    twice.spec.egress[0].name = "world".into();
    let (pol, warns) = translate_anp(&twice);
    assert!(warns.is_empty(), "{warns:?}");
    assert!(
        pol.egress
            .iter()
            .all(|r| r.peers.contains(&AdminPeer::KubeApiserver))
    );
    // Without the annotation, or an empty one: nothing.
    let (pol, warns) = translate_anp(&api_only(""));
    assert!(warns.is_empty() && !pol.has_kube_apiserver(), "{pol:?}");
}

#[test]
fn the_named_rule_matches_the_apiservers_addresses_and_follows_them() {
    let mut c = compiler();
    let mut applied = c.tables();
    let d = c.set_anp(&api_only("apiserver"));
    d.apply(&mut applied);
    // No address known yet: the rule's own peer only; everything outside is denied.
    assert!(!tcp(&applied, API4, 6443));

    let api = vec![ip(API4), ip(API6)];
    let d = c.set_kube_apiserver(api.clone());
    assert!(!d.is_empty());
    let mut fresh = compiler();
    fresh.set_kube_apiserver(api.clone());
    fresh.set_anp(&api_only("apiserver"));
    step(&c, &d, &mut applied, &fresh.tables(), "the apiserver found");
    let hosts: Vec<Prefix> = d.cidrs.upsert.iter().map(|(k, _)| k.prefix).collect();
    assert_eq!(hosts, [Prefix::host(ip(API4)), Prefix::host(ip(API6))], "{d:?}");
    assert!(tcp(&applied, API4, 6443) && tcp(&applied, API6, 6443));
    assert!(!tcp(&applied, API4, 443), "only the rule's ports");
    assert!(!tcp(&applied, OTHER, 6443), "only the apiserver's addresses");
    let (e, _) = verdict::np_detail(&applied, ip(POD4), ip(API4), proto::TCP, 6443);
    assert_eq!(e.tier, Tier::Anp, "{e:?}");

    // The same addresses again, in another order: nothing to do.
    assert!(
        c.set_kube_apiserver(vec![ip(API6), ip(API4), ip(API6)])
            .is_empty()
    );

    // The apiserver moves: one diff, the old class out, the new one in.
    let d = c.set_kube_apiserver(vec![ip(OTHER)]);
    let mut fresh = compiler();
    fresh.set_anp(&api_only("apiserver"));
    fresh.set_kube_apiserver(vec![ip(OTHER)]);
    step(&c, &d, &mut applied, &fresh.tables(), "the apiserver moved");
    assert_eq!(d.cidrs.upsert.len(), 1, "{d:?}");
    assert_eq!(d.cidrs.remove.len(), 2, "{d:?}");
    assert!(tcp(&applied, OTHER, 6443));
    assert!(!tcp(&applied, API4, 6443) && !tcp(&applied, API6, 6443));

    // No endpoint at all (the slice emptied): the rule matches its own peers only.
    let d = c.set_kube_apiserver(Vec::new());
    step(
        &c,
        &d,
        &mut applied,
        &compiler_with(&[], &api_only("apiserver")),
        "the apiserver gone",
    );
    assert!(!tcp(&applied, OTHER, 6443));
    assert!(
        !applied.cidrs.keys().any(|k| k.prefix == Prefix::host(ip(OTHER))),
        "the class went with the address"
    );
}

fn compiler_with(api: &[&str], p: &AdminNetworkPolicy) -> Tables {
    let mut c = compiler();
    c.set_kube_apiserver(api.iter().map(|a| ip(a)).collect());
    c.set_anp(p);
    c.tables()
}

#[test]
fn addresses_no_policy_names_change_nothing() {
    let mut c = compiler();
    c.set_anp(&api_only(""));
    let before = c.tables();
    assert!(c.set_kube_apiserver(vec![ip(API4)]).is_empty());
    assert!(c.tables() == before);
    assert_eq!(c.kube_apiserver(), [ip(API4)]);
    // The annotation added later finds them.
    let d = c.set_anp(&api_only("apiserver"));
    assert!(
        d.cidrs
            .upsert
            .iter()
            .any(|(k, _)| k.prefix == Prefix::host(ip(API4))),
        "{d:?}"
    );
    assert!(tcp(&c.tables(), API4, 6443));
    // And removed, takes them out.
    let d = c.set_anp(&api_only(""));
    assert!(
        d.cidrs.remove.iter().any(|k| k.prefix == Prefix::host(ip(API4))),
        "{d:?}"
    );
    assert!(c.tables() == before);
}

/// A host-network apiserver: its address is its node's, which a `nodes` peer also holds.
#[test]
fn an_apiserver_on_a_node_shares_the_nodes_class() {
    let nodes_anp = anp(json!({
        "metadata": {"name": "kubelets"},
        "spec": {"priority": 1, "subject": {"namespaces": {}},
                 "egress": [{"name": "kubelet", "action": "Allow",
                             "to": [{"nodes": {"matchLabels": {"role": "control-plane"}}}],
                             "ports": [{"portNumber": {"port": 10250}}]}]},
    }));
    let node = NodeInfo {
        name: "cp1".into(),
        labels: [("role".to_string(), "control-plane".to_string())].into(),
        ips: vec![ip(API4)],
    };
    let mut c = compiler();
    let mut applied = c.tables();
    for d in [
        c.set_node(node.clone()),
        c.set_anp(&nodes_anp),
        c.set_anp(&api_only("apiserver")),
        c.set_kube_apiserver(vec![ip(API4)]),
    ] {
        d.apply(&mut applied);
    }
    assert!(applied == c.tables());
    let class = |t: &Tables| {
        t.cidrs
            .iter()
            .filter(|(k, _)| k.prefix == Prefix::host(ip(API4)))
            .count()
    };
    assert_eq!(class(&applied), 1, "one class for the address");
    assert!(tcp(&applied, API4, 6443) && tcp(&applied, API4, 10250));
    assert!(!tcp(&applied, API4, 22));

    // The apiserver moves away: the node's peer keeps the class.
    let d = c.set_kube_apiserver(vec![ip(OTHER)]);
    assert!(
        !d.cidrs.remove.iter().any(|k| k.prefix == Prefix::host(ip(API4))),
        "{d:?}"
    );
    d.apply(&mut applied);
    assert_eq!(class(&applied), 1);
    assert!(!tcp(&applied, API4, 6443) && tcp(&applied, API4, 10250));
    // The node goes too: now the class goes.
    let d = c.remove_node("cp1");
    d.apply(&mut applied);
    assert!(applied == c.tables());
    assert_eq!(class(&applied), 0);
    let mut fresh = compiler();
    fresh.set_anp(&nodes_anp);
    fresh.set_anp(&api_only("apiserver"));
    fresh.set_kube_apiserver(vec![ip(OTHER)]);
    assert!(applied == fresh.tables());
}

#[test]
fn the_baseline_policy_takes_the_annotation_too() {
    let banp: BaselineAdminNetworkPolicy = serde_json::from_value(json!({
        "metadata": {"name": "default", "annotations": {KUBE_APISERVER_ANNOTATION: "no-apiserver"}},
        "spec": {"subject": {"namespaces": {}},
                 "egress": [{"name": "no-apiserver", "action": "Deny", "to": [{"networks": ["0.0.0.0/32"]}]}]},
    }))
    .unwrap();
    let mut c = compiler();
    c.set_banp(&banp);
    assert!(tcp(&c.tables(), API4, 443));
    c.set_kube_apiserver(vec![ip(API4)]);
    let t = c.tables();
    assert!(!tcp(&t, API4, 443));
    let (e, _) = verdict::np_detail(&t, ip(POD4), ip(API4), proto::TCP, 443);
    assert_eq!(e.tier, Tier::Banp, "{e:?}");
    assert!(tcp(&t, OTHER, 443));
}

#[test]
fn a_named_rule_fails_closed_as_its_peers_would() {
    // A named port cannot match an address: the rule is refused (a Deny becomes "deny
    // all"), as `namedPort` with `nodes` or `networks` is.
    let named_port = anp(json!({
        "metadata": {"name": "named", "annotations": {KUBE_APISERVER_ANNOTATION: "api"}},
        "spec": {"priority": 3, "subject": {"namespaces": {}},
                 "egress": [{"name": "api", "action": "Deny", "to": [{"namespaces": {}}],
                             "ports": [{"namedPort": "https"}]}]},
    }));
    let (_, warns) = translate_anp(&named_port);
    assert!(
        warns
            .iter()
            .any(|w| matches!(w.reason, Reason::NamedPortToBlock(_)) && w.field == "spec.egress[0].ports"),
        "{warns:?}"
    );
    let mut c = compiler();
    c.set_kube_apiserver(vec![ip(API4)]);
    c.set_anp(&named_port);
    assert!(!tcp(&c.tables(), OTHER, 80), "deny all");

    // An Allow rule with an unenforceable peer matches nothing, the apiserver included.
    let unenforced = anp(json!({
        "metadata": {"name": "unenforced", "annotations": {KUBE_APISERVER_ANNOTATION: "api"}},
        "spec": {"priority": 3, "subject": {"namespaces": {}},
                 "egress": [{"name": "api", "action": "Allow", "to": [{"domainNames": ["kubernetes.default"]}]},
                            {"name": "rest", "action": "Deny", "to": [{"networks": ["0.0.0.0/0"]}]}]},
    }));
    let mut c = compiler();
    c.set_kube_apiserver(vec![ip(API4)]);
    c.set_anp(&unenforced);
    assert!(!tcp(&c.tables(), API4, 6443));
}
