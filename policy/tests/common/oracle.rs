//! A small interpreter of NetworkPolicy semantics, written from the API reference and
//! deliberately sharing nothing with the compiler (no IR, no identities, no tries): it
//! reads the Kubernetes objects and answers one probe at a time.
//!
//! Semantics (upstream `networking.k8s.io/v1`): a pod is isolated for a direction when a
//! policy of its namespace selects it and has that policy type; an isolated pod allows
//! what the union of those policies' rules allows. `policyTypes` defaults to Ingress, plus
//! Egress when `spec.egress` has rules. A rule with no peers matches every peer, with no
//! ports every port. A named port names the destination pod's container port. ipBlock
//! matches by address, pods included. hostNetwork pods are not modelled.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::IpNet;
use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicyPeer, NetworkPolicyPort};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// A pod of the probe world.
#[derive(Clone, Debug)]
pub struct OPod {
    pub ns: String,
    pub labels: BTreeMap<String, String>,
    pub ip: IpAddr,
    /// (name, protocol "TCP"/"UDP", port)
    pub ports: Vec<(String, String, u16)>,
}

/// One end of a probe: a pod or a bare address.
#[derive(Clone, Debug)]
pub enum End<'a> {
    Pod(&'a OPod),
    Addr(IpAddr),
}

impl End<'_> {
    fn ip(&self) -> IpAddr {
        match self {
            End::Pod(p) => p.ip,
            End::Addr(a) => *a,
        }
    }
}

pub fn selector_matches(s: &LabelSelector, l: &BTreeMap<String, String>) -> bool {
    for (k, v) in s.match_labels.iter().flatten() {
        if l.get(k) != Some(v) {
            return false;
        }
    }
    for e in s.match_expressions.iter().flatten() {
        let vals = e.values.clone().unwrap_or_default();
        let have = l.get(&e.key);
        let ok = match e.operator.as_str() {
            "In" => have.is_some_and(|v| vals.contains(v)),
            "NotIn" => have.is_none_or(|v| !vals.contains(v)),
            "Exists" => have.is_some(),
            "DoesNotExist" => have.is_none(),
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    true
}

pub fn in_cidr(ip: IpAddr, cidr: &str) -> bool {
    cidr.parse::<IpNet>().is_ok_and(|n| n.contains(&ip))
}

fn peer_matches(
    p: &NetworkPolicyPeer,
    policy_ns: &str,
    other: &End,
    ns_labels: &BTreeMap<String, BTreeMap<String, String>>,
) -> bool {
    if let Some(b) = &p.ip_block {
        let ip = other.ip();
        return in_cidr(ip, &b.cidr) && !b.except.iter().flatten().any(|e| in_cidr(ip, e));
    }
    let End::Pod(pod) = other else { return false };
    let ns_ok = match &p.namespace_selector {
        None => pod.ns == policy_ns,
        Some(s) => selector_matches(s, ns_labels.get(&pod.ns).unwrap_or(&BTreeMap::new())),
    };
    let pod_ok = p
        .pod_selector
        .as_ref()
        .is_none_or(|s| selector_matches(s, &pod.labels));
    ns_ok && pod_ok
}

fn port_matches(p: &NetworkPolicyPort, dst: &End, proto: &str, port: u16) -> bool {
    if p.protocol.as_deref().unwrap_or("TCP") != proto {
        return false;
    }
    match &p.port {
        None => true,
        Some(IntOrString::Int(n)) => {
            let lo = *n as i64;
            let hi = p.end_port.map_or(lo, i64::from);
            (lo..=hi).contains(&i64::from(port))
        }
        Some(IntOrString::String(name)) => match dst {
            End::Pod(d) => d
                .ports
                .iter()
                .any(|(n, pr, pt)| n == name && pr == proto && *pt == port),
            End::Addr(_) => false,
        },
    }
}

fn types(np: &NetworkPolicy) -> (bool, bool) {
    let spec = np.spec.as_ref().unwrap();
    match &spec.policy_types {
        Some(t) => (t.iter().any(|x| x == "Ingress"), t.iter().any(|x| x == "Egress")),
        None => (true, spec.egress.as_ref().is_some_and(|e| !e.is_empty())),
    }
}

/// A rule's peers and ports, whatever its direction.
type RuleRef<'a> = (
    Option<&'a Vec<NetworkPolicyPeer>>,
    Option<&'a Vec<NetworkPolicyPort>>,
);

/// One direction of NetworkPolicy for `subject` (the source's egress when `ingress` is
/// false, the destination's ingress when true): `None` when no policy isolates it in that
/// direction, else whether the union of the selecting policies' rules admits the flow
/// `src` → `dst` on `proto` `port`.
#[allow(clippy::too_many_arguments)]
pub fn direction(
    policies: &[NetworkPolicy],
    ns_labels: &BTreeMap<String, BTreeMap<String, String>>,
    subject: &OPod,
    ingress: bool,
    src: &End,
    dst: &End,
    proto: &str,
    port: u16,
) -> Option<bool> {
    let pols: Vec<&NetworkPolicy> = policies
        .iter()
        .filter(|np| np.metadata.namespace.as_deref() == Some(subject.ns.as_str()))
        .filter(|np| {
            selector_matches(
                np.spec
                    .as_ref()
                    .unwrap()
                    .pod_selector
                    .as_ref()
                    .unwrap_or(&LabelSelector::default()),
                &subject.labels,
            )
        })
        .filter(|np| if ingress { types(np).0 } else { types(np).1 })
        .collect();
    if pols.is_empty() {
        return None;
    }
    let peer = if ingress { src } else { dst };
    Some(pols.iter().any(|np| {
        let ns = np.metadata.namespace.as_deref().unwrap();
        let spec = np.spec.as_ref().unwrap();
        let rules: Vec<RuleRef<'_>> = if ingress {
            spec.ingress
                .iter()
                .flatten()
                .map(|r| (r.from.as_ref(), r.ports.as_ref()))
                .collect()
        } else {
            spec.egress
                .iter()
                .flatten()
                .map(|r| (r.to.as_ref(), r.ports.as_ref()))
                .collect()
        };
        rules.into_iter().any(|(peers, ports)| {
            let peers_ok = peers
                .is_none_or(|ps| ps.is_empty() || ps.iter().any(|p| peer_matches(p, ns, peer, ns_labels)));
            let ports_ok =
                ports.is_none_or(|ps| ps.is_empty() || ps.iter().any(|p| port_matches(p, dst, proto, port)));
            peers_ok && ports_ok
        })
    }))
}

/// Does the policy set allow `src` → `dst` on `proto` ("TCP"/"UDP") `port`?
pub fn allowed(
    policies: &[NetworkPolicy],
    ns_labels: &BTreeMap<String, BTreeMap<String, String>>,
    src: &End,
    dst: &End,
    proto: &str,
    port: u16,
) -> bool {
    let egress_ok = match src {
        End::Addr(_) => true,
        End::Pod(s) => direction(policies, ns_labels, s, false, src, dst, proto, port).unwrap_or(true),
    };
    let ingress_ok = match dst {
        End::Addr(_) => true,
        End::Pod(d) => direction(policies, ns_labels, d, true, src, dst, proto, port).unwrap_or(true),
    };
    egress_ok && ingress_ok
}
