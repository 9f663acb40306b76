//! The probe world of the NetworkPolicy suites (three namespaces × three labelled pods,
//! cyclonus-style), a random policy generator, and the oracle.

#![allow(dead_code, unreachable_pub)]

pub mod admin_gen;
pub mod admin_oracle;
pub mod oracle;

use std::collections::BTreeMap;

use cozyplane_policy::model::proto;
use cozyplane_policy::np::{NamespaceInfo, PodInfo};
use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyIngressRule, NetworkPolicyPeer,
    NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use oracle::OPod;
use rand::Rng;
use rand::seq::IndexedRandom;

pub const NAMESPACES: [&str; 3] = ["x", "y", "z"];
pub const PODS: [&str; 3] = ["a", "b", "c"];
/// Probe ports: (protocol, port).
pub const PROBES: [(&str, u16); 10] = [
    ("TCP", 80),
    ("TCP", 81),
    ("TCP", 8080),
    ("TCP", 8081),
    ("TCP", 9000),
    ("UDP", 53),
    ("UDP", 80),
    ("UDP", 81),
    ("SCTP", 80),
    ("SCTP", 9000),
];
/// Addresses outside the pod network.
pub const OUTSIDE: [&str; 2] = ["192.168.1.1", "172.16.0.9"];

pub fn labels(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
    kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// Named ports differ per pod so a name resolves to different numbers: `(name, protocol,
/// port)` of pod `a`, `b` or `c`.
pub fn pod_ports(pod: &str) -> Vec<(String, String, u16)> {
    let (web, alt) = match pod {
        "a" => (80, 8080),
        "b" => (81, 9000),
        _ => (8080, 81),
    };
    vec![
        ("web".into(), "TCP".into(), web),
        ("alt".into(), "TCP".into(), alt),
        ("dns".into(), "UDP".into(), if pod == "c" { 81 } else { 53 }),
    ]
}

pub struct World {
    pub pods: Vec<OPod>,
    pub ns_labels: BTreeMap<String, BTreeMap<String, String>>,
}

impl World {
    pub fn new() -> Self {
        let mut pods = Vec::new();
        let mut ns_labels = BTreeMap::new();
        for (i, ns) in NAMESPACES.iter().enumerate() {
            ns_labels.insert(
                ns.to_string(),
                labels(&[
                    ("ns", ns),
                    ("kubernetes.io/metadata.name", ns),
                    ("tier", if i == 2 { "back" } else { "front" }),
                ]),
            );
            for (j, pod) in PODS.iter().enumerate() {
                pods.push(OPod {
                    ns: ns.to_string(),
                    labels: labels(&[
                        ("pod", pod),
                        ("app", if j == 2 { "db" } else { "web" }),
                        ("pod-template-hash", &format!("h{i}{j}")),
                    ]),
                    ip: format!("10.0.{}.{}", i + 1, j + 2).parse().unwrap(),
                    ports: pod_ports(pod),
                });
            }
        }
        Self { pods, ns_labels }
    }

    pub fn namespaces(&self) -> Vec<NamespaceInfo> {
        self.ns_labels
            .iter()
            .map(|(n, l)| NamespaceInfo {
                name: n.clone(),
                labels: l.clone(),
            })
            .collect()
    }

    pub fn pod_infos(&self) -> Vec<PodInfo> {
        self.pods.iter().map(pod_info).collect()
    }
}

pub fn pod_info(p: &OPod) -> PodInfo {
    PodInfo {
        ns: p.ns.clone(),
        name: format!("{}-{}", p.labels["pod"], p.ip),
        labels: p.labels.clone(),
        ips: vec![p.ip],
        host_network: false,
        named_ports: p
            .ports
            .iter()
            .map(|(n, pr, pt)| (n.clone(), proto_num(pr), *pt))
            .collect(),
    }
}

pub fn proto_num(p: &str) -> u8 {
    match p {
        "TCP" => proto::TCP,
        "SCTP" => proto::SCTP,
        _ => proto::UDP,
    }
}

pub fn sel(kv: &[(&str, &str)]) -> LabelSelector {
    LabelSelector {
        match_labels: Some(labels(kv)),
        match_expressions: None,
    }
}

pub fn expr(key: &str, op: &str, values: &[&str]) -> LabelSelector {
    LabelSelector {
        match_labels: None,
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: (!values.is_empty()).then(|| values.iter().map(ToString::to_string).collect()),
        }]),
    }
}

pub fn any_selector(r: &mut impl Rng) -> LabelSelector {
    match r.random_range(0..7) {
        0 => LabelSelector::default(),
        1 => sel(&[("pod", PODS.choose(r).unwrap())]),
        2 => sel(&[("app", "web")]),
        3 => expr("pod", "In", &["a", "c"]),
        4 => expr("pod", "NotIn", &["b"]),
        5 => expr("app", "Exists", &[]),
        _ => expr("pod", "DoesNotExist", &[]),
    }
}

pub fn ns_selector(r: &mut impl Rng) -> LabelSelector {
    match r.random_range(0..5) {
        0 => LabelSelector::default(),
        1 => sel(&[("ns", NAMESPACES.choose(r).unwrap())]),
        2 => sel(&[("tier", "front")]),
        3 => expr("ns", "NotIn", &["x"]),
        _ => expr("kubernetes.io/metadata.name", "In", &["y", "z"]),
    }
}

/// The ipBlocks of the probe world: CIDR and excepts around its pod and outside addresses.
pub const IP_BLOCKS: [(&str, &[&str]); 7] = [
    ("10.0.0.0/16", &[]),
    ("10.0.2.0/24", &["10.0.2.3/32"]),
    ("0.0.0.0/0", &["10.0.1.0/24"]),
    ("192.168.0.0/16", &[]),
    ("10.0.3.4/32", &[]),
    ("10.0.0.0/8", &["10.0.1.0/24", "10.0.3.0/25"]),
    ("172.16.0.0/12", &["172.16.0.0/30"]),
];

/// The ipBlock vocabulary of [`policy_with`]: `(cidr, excepts)`.
pub type Blocks<'a> = &'a [(String, Vec<String>)];

/// [`IP_BLOCKS`] as [`Blocks`].
pub fn world_blocks() -> Vec<(String, Vec<String>)> {
    IP_BLOCKS
        .iter()
        .map(|(c, e)| (c.to_string(), e.iter().map(ToString::to_string).collect()))
        .collect()
}

fn ip_block(r: &mut impl Rng, blocks: Blocks<'_>) -> IPBlock {
    let (cidr, except) = blocks.choose(r).unwrap();
    IPBlock {
        cidr: cidr.clone(),
        except: (!except.is_empty()).then(|| except.clone()),
    }
}

fn peer(r: &mut impl Rng, allow_block: bool, blocks: Blocks<'_>) -> NetworkPolicyPeer {
    let k = r.random_range(0..if allow_block { 4 } else { 3 });
    match k {
        0 => NetworkPolicyPeer {
            pod_selector: Some(any_selector(r)),
            ..Default::default()
        },
        1 => NetworkPolicyPeer {
            namespace_selector: Some(ns_selector(r)),
            ..Default::default()
        },
        2 => NetworkPolicyPeer {
            pod_selector: Some(any_selector(r)),
            namespace_selector: Some(ns_selector(r)),
            ..Default::default()
        },
        _ => NetworkPolicyPeer {
            ip_block: Some(ip_block(r, blocks)),
            ..Default::default()
        },
    }
}

fn port(r: &mut impl Rng) -> NetworkPolicyPort {
    let p = |proto: &str, port: Option<IntOrString>, end: Option<i32>| NetworkPolicyPort {
        protocol: Some(proto.into()),
        port,
        end_port: end,
    };
    match r.random_range(0..12) {
        10 => p("SCTP", Some(IntOrString::Int(80)), None),
        11 => p("SCTP", Some(IntOrString::Int(8080)), Some(9000)),
        0 => p("TCP", Some(IntOrString::Int(80)), None),
        1 => p("UDP", Some(IntOrString::Int(53)), None),
        2 => p("TCP", Some(IntOrString::Int(80)), Some(81)),
        3 => p("TCP", Some(IntOrString::Int(8080)), Some(9000)),
        4 => p("UDP", None, None),
        5 => p("TCP", Some(IntOrString::String("web".into())), None),
        6 => p("UDP", Some(IntOrString::String("dns".into())), None),
        7 => p("TCP", Some(IntOrString::String("alt".into())), None),
        8 => NetworkPolicyPort {
            protocol: None,
            port: Some(IntOrString::Int(81)),
            end_port: None,
        },
        _ => p("UDP", Some(IntOrString::Int(1)), Some(65535)),
    }
}

fn list<T>(r: &mut impl Rng, f: impl FnMut(&mut dyn rand::RngCore) -> T) -> Option<Vec<T>> {
    let mut f = f;
    match r.random_range(0..6) {
        0 => None,
        1 => Some(vec![]),
        n => Some(
            (0..(n - 1).min(2))
                .map(|_| f(&mut *r as &mut dyn rand::RngCore))
                .collect(),
        ),
    }
}

/// A random policy in a random namespace. Egress rules never pair a named port with an
/// ipBlock (the compiler refuses that by design: see ir.rs).
pub fn policy(r: &mut impl Rng, name: &str) -> NetworkPolicy {
    policy_with(r, name, &world_blocks())
}

/// [`policy`] with the ipBlocks drawn from `blocks` (the lab's suite names its own
/// pods' addresses).
pub fn policy_with(r: &mut impl Rng, name: &str, blocks: Blocks<'_>) -> NetworkPolicy {
    let ns = NAMESPACES.choose(r).unwrap().to_string();
    let types = match r.random_range(0..4) {
        0 => None,
        1 => Some(vec!["Ingress".to_string()]),
        2 => Some(vec!["Egress".to_string()]),
        _ => Some(vec!["Ingress".to_string(), "Egress".to_string()]),
    };
    let n_in = r.random_range(0..3);
    let ingress = (0..n_in)
        .map(|_| NetworkPolicyIngressRule {
            from: list(r, |r| peer(&mut BoxRng(r), true, blocks)),
            ports: list(r, |r| port(&mut BoxRng(r))),
        })
        .collect::<Vec<_>>();
    let n_eg = r.random_range(0..3);
    let egress = (0..n_eg)
        .map(|_| {
            let ports = list(r, |r| port(&mut BoxRng(r)));
            let named = ports
                .iter()
                .flatten()
                .any(|p| matches!(p.port, Some(IntOrString::String(_))));
            NetworkPolicyEgressRule {
                to: list(r, |r| peer(&mut BoxRng(r), !named, blocks)),
                ports,
            }
        })
        .collect::<Vec<_>>();
    NetworkPolicy {
        metadata: ObjectMeta {
            namespace: Some(ns),
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(any_selector(r)),
            policy_types: types,
            ingress: (r.random_bool(0.8)).then_some(ingress),
            egress: (r.random_bool(0.8)).then_some(egress),
        }),
    }
}

/// `&mut dyn RngCore` as an `Rng`.
pub struct BoxRng<'a>(pub &'a mut dyn rand::RngCore);

impl rand::RngCore for BoxRng<'_> {
    fn next_u32(&mut self) -> u32 {
        self.0.next_u32()
    }
    fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }
    fn fill_bytes(&mut self, dst: &mut [u8]) {
        self.0.fill_bytes(dst);
    }
}
