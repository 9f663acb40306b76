//! The admin tiers' probe world (the NetworkPolicy world plus nodes and a host-network pod)
//! and a random generator of AdminNetworkPolicies and BaselineAdminNetworkPolicies over it.

use std::net::IpAddr;

use cozyplane_apis::admin_policy::{
    AdminNetworkPolicy, AdminNetworkPolicySpec, BaselineAdminNetworkPolicy, BaselineAdminNetworkPolicySpec,
    EgressPeer, EgressRule, IngressPeer, IngressRule, NamespacedPod, PolicyPort, PortNumber, PortRange,
    Subject,
};
use cozyplane_policy::np::{NodeInfo, PodInfo};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use rand::Rng;
use rand::seq::{IndexedRandom, IteratorRandom};

use super::admin_oracle::{AEnd, ONode};
use super::{OUTSIDE, World, any_selector, expr, labels, ns_selector, sel};

/// Nodes: (name, role, zone, addresses). Their addresses sit inside and outside the
/// CIDRs of the vocabulary below (and of the NetworkPolicy ipBlocks); `fd00::10` is never
/// probed (the pods are IPv4) but is compiled.
const NODES: [(&str, &str, &str, &[&str]); 3] = [
    ("n1", "control-plane", "a", &["10.0.0.10", "fd00::10"]),
    ("n2", "worker", "a", &["192.168.7.7"]),
    ("n3", "worker", "b", &["172.16.0.1", "10.0.3.200"]),
];

/// The `networks` vocabulary.
const NETWORKS: [&[&str]; 10] = [
    &["10.0.0.0/16"],
    &["10.0.2.0/24", "10.0.3.4/32"],
    &["0.0.0.0/0", "::/0"],
    &["192.168.0.0/16"],
    &["10.0.1.3/32"],
    &["172.16.0.0/12"],
    &["10.0.0.0/8"],
    &["10.0.0.10/32"],
    &["fd00::/8"],
    &["172.16.0.0/30", "192.168.1.1/32"],
];

/// The NetworkPolicy world, nodes, and a host-network pod on `n2` whose labels many
/// selectors match (it must never be a subject nor a pod peer).
pub struct AdminWorld {
    pub base: World,
    pub nodes: Vec<ONode>,
    pub host_pods: Vec<PodInfo>,
}

impl AdminWorld {
    pub fn new() -> Self {
        let nodes = NODES
            .iter()
            .map(|(name, role, zone, ips)| ONode {
                name: name.to_string(),
                labels: labels(&[
                    ("kubernetes.io/os", "linux"),
                    ("kubernetes.io/hostname", name),
                    ("role", role),
                    ("zone", zone),
                ]),
                ips: ips.iter().map(|a| a.parse().unwrap()).collect(),
            })
            .collect();
        let host = PodInfo {
            ns: "x".into(),
            name: "host-a".into(),
            labels: labels(&[("pod", "a"), ("app", "web"), ("pod-template-hash", "hh")]),
            ips: vec!["192.168.7.7".parse().unwrap()],
            host_network: true,
            named_ports: vec![("web".into(), cozyplane_policy::model::proto::TCP, 80)],
        };
        Self {
            base: World::new(),
            nodes,
            host_pods: vec![host],
        }
    }

    pub fn node_infos(&self) -> Vec<NodeInfo> {
        self.nodes
            .iter()
            .map(|n| NodeInfo {
                name: n.name.clone(),
                labels: n.labels.clone(),
                ips: n.ips.clone(),
            })
            .collect()
    }

    /// Every pod the compiler is given, host-network ones included.
    pub fn pod_infos(&self) -> Vec<PodInfo> {
        let mut v = self.base.pod_infos();
        v.extend(self.host_pods.iter().cloned());
        v
    }

    /// Probe ends: the pods, every IPv4 node address, the outside addresses.
    pub fn ends(&self) -> Vec<AEnd<'_>> {
        let mut v: Vec<AEnd> = self.base.pods.iter().map(AEnd::Pod).collect();
        for n in &self.nodes {
            v.extend(
                n.ips
                    .iter()
                    .filter(|ip| ip.is_ipv4())
                    .map(|ip| AEnd::Node(n, *ip)),
            );
        }
        v.extend(OUTSIDE.iter().map(|a| AEnd::Addr(a.parse::<IpAddr>().unwrap())));
        v
    }
}

fn node_selector(r: &mut impl Rng) -> LabelSelector {
    match r.random_range(0..7) {
        0 => LabelSelector::default(),
        1 => sel(&[("kubernetes.io/os", "linux")]),
        2 => sel(&[("role", "worker")]),
        3 => expr("zone", "In", &["a"]),
        4 => expr("role", "NotIn", &["worker"]),
        5 => sel(&[("kubernetes.io/hostname", "n3")]),
        _ => expr("gpu", "Exists", &[]),
    }
}

fn namespaced(r: &mut impl Rng) -> NamespacedPod {
    NamespacedPod {
        namespace_selector: ns_selector(r),
        pod_selector: any_selector(r),
    }
}

fn port(r: &mut impl Rng, named: bool) -> PolicyPort {
    let num = |pr: Option<&str>, port| PolicyPort {
        port_number: Some(PortNumber {
            protocol: pr.map(String::from),
            port,
        }),
        ..PolicyPort::default()
    };
    let range = |pr: Option<&str>, start, end| PolicyPort {
        port_range: Some(PortRange {
            protocol: pr.map(String::from),
            start,
            end,
        }),
        ..PolicyPort::default()
    };
    let k = r.random_range(0..if named { 15 } else { 11 });
    match k {
        0 => num(Some("TCP"), 80),
        1 => num(None, 8080),
        2 => num(Some("UDP"), 53),
        3 => num(Some("SCTP"), 80),
        4 => num(Some("SCTP"), 9000),
        5 => num(Some("TCP"), 81),
        6 => range(Some("TCP"), 80, 81),
        7 => range(Some("TCP"), 8080, 9000),
        8 => range(Some("UDP"), 1, 65535),
        9 => range(Some("SCTP"), 80, 9000),
        10 => range(None, 81, 8080),
        _ => PolicyPort {
            named_port: Some(["web", "alt", "dns", "nope"][k - 11].into()),
            ..PolicyPort::default()
        },
    }
}

/// `ports`: absent (every port) or one or two entries; `named` admits `namedPort`.
fn ports(r: &mut impl Rng, named: bool) -> Option<Vec<PolicyPort>> {
    if r.random_bool(0.4) {
        return None;
    }
    let n = r.random_range(1..=2);
    Some((0..n).map(|_| port(r, named)).collect())
}

fn action(r: &mut impl Rng, banp: bool) -> String {
    let all = if banp {
        &["Allow", "Deny"][..]
    } else {
        &["Allow", "Deny", "Pass"][..]
    };
    all.choose(r).unwrap().to_string()
}

fn ingress_rule(r: &mut impl Rng, banp: bool) -> IngressRule {
    let action = action(r, banp);
    let from = (0..r.random_range(1..=2))
        .map(|_| match r.random_range(0..40) {
            // No field set: the rule fails closed.
            0 => IngressPeer::default(),
            1..20 => IngressPeer {
                namespaces: Some(ns_selector(r)),
                ..IngressPeer::default()
            },
            _ => IngressPeer {
                pods: Some(namespaced(r)),
                ..IngressPeer::default()
            },
        })
        .collect();
    IngressRule {
        name: String::new(),
        action,
        from,
        ports: ports(r, true),
    }
}

/// An egress rule. A `namedPort` is never paired with a `nodes` or `networks` peer: what a
/// container port name means towards an address is not enforced (see the report in
/// `admin_truth_table.rs`).
fn egress_rule(r: &mut impl Rng, banp: bool) -> EgressRule {
    let action = action(r, banp);
    let ports = ports(r, true);
    let named = ports.iter().flatten().any(|p| p.named_port.is_some());
    let to = (0..r.random_range(1..=2))
        .map(|_| match r.random_range(0..if named { 20 } else { 40 }) {
            0 => EgressPeer::default(),
            1 if action == "Allow" => EgressPeer {
                domain_names: Some(vec!["example.com".into()]),
                ..EgressPeer::default()
            },
            1..10 => EgressPeer {
                namespaces: Some(ns_selector(r)),
                ..EgressPeer::default()
            },
            10..20 => EgressPeer {
                pods: Some(namespaced(r)),
                ..EgressPeer::default()
            },
            20..30 => EgressPeer {
                nodes: Some(node_selector(r)),
                ..EgressPeer::default()
            },
            _ => EgressPeer {
                networks: Some(
                    NETWORKS
                        .choose(r)
                        .unwrap()
                        .iter()
                        .map(ToString::to_string)
                        .collect(),
                ),
                ..EgressPeer::default()
            },
        })
        .collect();
    EgressRule {
        name: String::new(),
        action,
        to,
        ports,
    }
}

fn subject(r: &mut impl Rng) -> Subject {
    if r.random_bool(0.4) {
        Subject {
            namespaces: Some(ns_selector(r)),
            pods: None,
        }
    } else {
        Subject {
            namespaces: None,
            pods: Some(namespaced(r)),
        }
    }
}

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        ..ObjectMeta::default()
    }
}

/// A random ANP with this priority: up to three rules each way.
pub fn anp(r: &mut impl Rng, name: &str, priority: i32) -> AdminNetworkPolicy {
    let subject = subject(r);
    let ingress = (0..r.random_range(0..=3))
        .map(|_| ingress_rule(r, false))
        .collect();
    let egress = (0..r.random_range(0..=3))
        .map(|_| egress_rule(r, false))
        .collect();
    AdminNetworkPolicy {
        metadata: meta(name),
        spec: AdminNetworkPolicySpec {
            priority,
            subject,
            ingress,
            egress,
        },
        status: None,
    }
}

/// A random BANP (always named `default`).
pub fn banp(r: &mut impl Rng) -> BaselineAdminNetworkPolicy {
    let subject = subject(r);
    let ingress = (0..r.random_range(0..=3))
        .map(|_| ingress_rule(r, true))
        .collect();
    let egress = (0..r.random_range(0..=3)).map(|_| egress_rule(r, true)).collect();
    BaselineAdminNetworkPolicy {
        metadata: meta("default"),
        spec: BaselineAdminNetworkPolicySpec {
            subject,
            ingress,
            egress,
        },
        status: None,
    }
}

/// One random policy set: ANPs of distinct priorities, NetworkPolicies, maybe a BANP.
#[derive(Clone, Debug, Default)]
pub struct PolicySet {
    pub anps: Vec<AdminNetworkPolicy>,
    pub banp: Option<BaselineAdminNetworkPolicy>,
    pub nps: Vec<NetworkPolicy>,
}

/// `n_anp` ANPs (distinct priorities, sometimes adjacent), zero to two NetworkPolicies, a
/// BANP seven times in ten.
pub fn policy_set(r: &mut impl Rng, tag: &str, n_anp: usize) -> PolicySet {
    let mut prios: Vec<i32> = (0..=1000).choose_multiple(r, n_anp);
    if n_anp >= 2 && r.random_bool(0.3) && prios[0] < 1000 && !prios.contains(&(prios[0] + 1)) {
        prios[1] = prios[0] + 1;
    }
    let anps = prios
        .iter()
        .enumerate()
        .map(|(i, p)| anp(r, &format!("anp-{tag}-{i}"), *p))
        .collect();
    let nps = (0..r.random_range(0..=2))
        .map(|i| super::policy(r, &format!("np-{tag}-{i}")))
        .collect();
    let banp = r.random_bool(0.7).then(|| banp(r));
    PolicySet { anps, banp, nps }
}

/// Where the kube-apiserver may be: nowhere known, on the control-plane node `n1` (a
/// host-network apiserver: the node's addresses), behind an address outside the cluster
/// (a load balancer), on a pod's address (a hosted control plane), on two of those.
pub const APISERVERS: [&[&str]; 5] = [
    &[],
    &["10.0.0.10", "fd00::10"],
    &["192.168.1.1"],
    &["10.0.1.3"],
    &["172.16.0.9", "10.0.0.10"],
];

/// One of [`APISERVERS`].
pub fn apiserver(r: &mut impl Rng) -> Vec<IpAddr> {
    APISERVERS
        .choose(r)
        .unwrap()
        .iter()
        .map(|a| a.parse().unwrap())
        .collect()
}

/// The kube-apiserver extension on a generated set: every rule gets a name (`e0`, `e1`, …
/// for egress, `i0`, … for ingress; now and then two egress rules share one), and about
/// half the policies get the `policy.cozystack.io/kube-apiserver` annotation, listing some
/// egress rules' names, at times an ingress rule's or one no rule has (both ignored), with
/// spaces and empty items the list may hold.
pub fn annotate(r: &mut impl Rng, s: &mut PolicySet) {
    for a in &mut s.anps {
        annotate_one(r, &mut a.metadata, &mut a.spec.ingress, &mut a.spec.egress);
    }
    if let Some(b) = &mut s.banp {
        annotate_one(r, &mut b.metadata, &mut b.spec.ingress, &mut b.spec.egress);
    }
}

/// [`annotate`] for one policy.
pub fn annotate_one(
    r: &mut impl Rng,
    meta: &mut ObjectMeta,
    ingress: &mut [IngressRule],
    egress: &mut [EgressRule],
) {
    for (i, rule) in ingress.iter_mut().enumerate() {
        rule.name = format!("i{i}");
    }
    for (i, rule) in egress.iter_mut().enumerate() {
        rule.name = format!("e{i}");
    }
    if egress.len() >= 2 && r.random_bool(0.15) {
        egress[1].name = "e0".into();
    }
    if !r.random_bool(0.5) {
        return;
    }
    let mut names: Vec<String> = egress
        .iter()
        .filter(|_| r.random_bool(0.6))
        .map(|e| e.name.clone())
        .collect();
    if r.random_bool(0.15) {
        names.push("i0".into());
    }
    if r.random_bool(0.15) {
        names.push("missing".into());
    }
    let value = match r.random_range(0..4) {
        0 => names.join(" , "),
        1 => format!("{},", names.join(",")),
        _ => names.join(","),
    };
    meta.annotations
        .get_or_insert_default()
        .insert("policy.cozystack.io/kube-apiserver".into(), value);
}
