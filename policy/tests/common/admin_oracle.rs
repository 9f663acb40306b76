//! An interpreter of AdminNetworkPolicy, NetworkPolicy and BaselineAdminNetworkPolicy
//! together, written from the network-policy-api v1alpha1 API reference (v0.1.8,
//! `apis/v1alpha1/*.go`) and sharing nothing with the compiler: it reads the objects and
//! answers one probe at a time. The NetworkPolicy tier is [`oracle::direction`].
//!
//! Semantics, per direction of a flow (the source's egress, the destination's ingress), for
//! a subject pod (host-network pods are never subjects: "host-networked pods are not
//! included in subject selection"):
//!
//! 1. The ANPs selecting the subject, lower `priority` first; within one, rules in the order
//!    written. The first rule whose peers and ports match decides: `Allow` admits ("even if
//!    it would otherwise have been denied by NetworkPolicy"), `Deny` refuses, `Pass` skips
//!    every remaining ANP rule.
//! 2. NetworkPolicy, if one selects the subject for the direction.
//! 3. The BANP, if it selects the subject: first matching rule, `Allow` or `Deny`.
//! 4. Else admitted.
//!
//! Peers: `namespaces` (every pod of the selected namespaces), `pods` (namespaceSelector AND
//! podSelector), neither including host-network pods; `nodes` (the addresses in
//! `status.addresses` of the selected nodes); `networks` (CIDRs, matched against any
//! address, pods' and nodes' included). A peer with no field set makes the whole rule fail
//! closed: "For Allow rules, fail closed means: treat the rule as matching no traffic. For
//! Deny and Pass rules, fail closed means: treat the rule as a Deny all rule". So does a
//! `domainNames` peer, which cozyplane does not enforce (an implementation that lacks an
//! experimental field sees what it cannot read). `ports` absent: every port of every
//! protocol; `portNumber` and `portRange` default to TCP; `namedPort` names a container
//! port of the destination pod (the subject for ingress, the peer for egress), of whatever
//! protocol that port has; an address has no named ports.
//!
//! The cozyplane extension for the entity ANP cannot name: the annotation
//! `policy.cozystack.io/kube-apiserver` on an ANP or the BANP lists (comma-separated) rule
//! names; each egress rule whose `name` is listed matches, besides its own peers, every
//! address of the kube-apiserver (given to [`allowed_with`]). The kube-apiserver is
//! addresses, which have no container port names: a listed rule with a `namedPort` is read
//! as the CRD reads `namedPort` with `nodes` or `networks` (refused), so it fails closed. A
//! listed name no egress rule has changes nothing.

use std::collections::BTreeMap;
use std::net::IpAddr;

use cozyplane_apis::admin_policy::{
    AdminNetworkPolicy, BaselineAdminNetworkPolicy, EgressPeer, NamespacedPod, PolicyPort, Subject,
};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::oracle::{self, End, OPod, in_cidr, selector_matches};

type Labels = BTreeMap<String, String>;

/// A node of the probe world.
#[derive(Clone, Debug)]
pub struct ONode {
    pub name: String,
    pub labels: Labels,
    /// `status.addresses`.
    pub ips: Vec<IpAddr>,
}

/// One end of a probe: a pod, one address of a node (a host-network pod is its node), or
/// an address outside the cluster.
#[derive(Clone, Debug)]
pub enum AEnd<'a> {
    Pod(&'a OPod),
    Node(&'a ONode, IpAddr),
    Addr(IpAddr),
}

impl AEnd<'_> {
    pub fn ip(&self) -> IpAddr {
        match self {
            AEnd::Pod(p) => p.ip,
            AEnd::Node(_, ip) | AEnd::Addr(ip) => *ip,
        }
    }

    fn np_end(&self) -> End<'_> {
        match self {
            AEnd::Pod(p) => End::Pod(p),
            _ => End::Addr(self.ip()),
        }
    }
}

/// Everything the oracle reads.
pub struct Cluster<'a> {
    pub ns_labels: &'a BTreeMap<String, Labels>,
    pub nodes: &'a [ONode],
    pub anps: &'a [AdminNetworkPolicy],
    pub banp: Option<&'a BaselineAdminNetworkPolicy>,
    pub nps: &'a [NetworkPolicy],
}

/// What a rule does to a flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hit {
    Allow,
    Deny,
    Pass,
}

fn ns_of<'a>(c: &'a Cluster<'_>, ns: &str) -> &'a Labels {
    static EMPTY: Labels = Labels::new();
    c.ns_labels.get(ns).unwrap_or(&EMPTY)
}

fn namespaced(c: &Cluster<'_>, s: &NamespacedPod, pod: &OPod) -> bool {
    selector_matches(&s.namespace_selector, ns_of(c, &pod.ns))
        && selector_matches(&s.pod_selector, &pod.labels)
}

fn subject_selects(c: &Cluster<'_>, s: &Subject, pod: &OPod) -> bool {
    match (&s.namespaces, &s.pods) {
        (Some(n), None) => selector_matches(n, ns_of(c, &pod.ns)),
        (None, Some(p)) => namespaced(c, p, pod),
        // Not exactly one field: selects nothing.
        _ => false,
    }
}

/// A peer: `None` when it cannot be enforced (no field set, more than one, `domainNames`),
/// else whether it matches `peer`.
fn peer_matches(c: &Cluster<'_>, p: &EgressPeer, peer: &AEnd) -> Option<bool> {
    let set = [
        p.namespaces.is_some(),
        p.pods.is_some(),
        p.nodes.is_some(),
        p.networks.is_some(),
        p.domain_names.is_some(),
    ];
    if set.iter().filter(|x| **x).count() != 1 {
        return None;
    }
    let ip = peer.ip();
    Some(if let Some(n) = &p.namespaces {
        matches!(peer, AEnd::Pod(pod) if selector_matches(n, ns_of(c, &pod.ns)))
    } else if let Some(s) = &p.pods {
        matches!(peer, AEnd::Pod(pod) if namespaced(c, s, pod))
    } else if let Some(n) = &p.nodes {
        c.nodes
            .iter()
            .any(|node| selector_matches(n, &node.labels) && node.ips.contains(&ip))
    } else if let Some(nets) = &p.networks {
        nets.iter().any(|cidr| in_cidr(ip, cidr))
    } else {
        // domainNames: not enforced.
        return None;
    })
}

fn port_matches(p: &PolicyPort, dst: &AEnd, proto: &str, port: u16) -> bool {
    let proto_is = |x: &Option<String>| x.as_deref().unwrap_or("TCP") == proto;
    if let Some(n) = &p.port_number {
        return proto_is(&n.protocol) && n.port == i32::from(port);
    }
    if let Some(r) = &p.port_range {
        return proto_is(&r.protocol) && (r.start..=r.end).contains(&i32::from(port));
    }
    if let Some(name) = &p.named_port {
        return match dst {
            AEnd::Pod(d) => d
                .ports
                .iter()
                .any(|(n, pr, pt)| n == name && pr == proto && *pt == port),
            _ => false,
        };
    }
    false
}

/// A rule as the oracle reads it.
struct ORule {
    action: String,
    peers: Vec<EgressPeer>,
    ports: Option<Vec<PolicyPort>>,
    /// Listed in the kube-apiserver annotation (egress only).
    apiserver: bool,
}

/// One rule against one flow; `peer` is the other end from the subject, `apiserver` the
/// kube-apiserver's addresses.
#[allow(clippy::too_many_arguments)]
fn rule(
    c: &Cluster<'_>,
    apiserver: &[IpAddr],
    r: &ORule,
    peer: &AEnd,
    dst: &AEnd,
    proto: &str,
    port: u16,
) -> Option<Hit> {
    let (peers, ports) = (&r.peers, r.ports.as_ref());
    let hit = match r.action.as_str() {
        "Allow" => Hit::Allow,
        "Deny" => Hit::Deny,
        "Pass" => Hit::Pass,
        _ => return Some(Hit::Deny),
    };
    let each: Vec<Option<bool>> = peers.iter().map(|p| peer_matches(c, p, peer)).collect();
    let named_to_apiserver = r.apiserver && ports.into_iter().flatten().any(|p| p.named_port.is_some());
    if peers.is_empty() || each.contains(&None) || named_to_apiserver {
        // Fail closed.
        return (hit != Hit::Allow).then_some(Hit::Deny);
    }
    let peer_ok = each.contains(&Some(true)) || (r.apiserver && apiserver.contains(&peer.ip()));
    let ports_ok = ports.is_none_or(|ps| ps.iter().any(|p| port_matches(p, dst, proto, port)));
    (peer_ok && ports_ok).then_some(hit)
}

/// The rule names the kube-apiserver annotation lists.
fn apiserver_names(meta: &ObjectMeta) -> Vec<String> {
    meta.annotations
        .iter()
        .flat_map(|a| a.get("policy.cozystack.io/kube-apiserver"))
        .flat_map(|v| v.split(','))
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())
        .collect()
}

/// The rules of a policy in one direction.
fn rules_of(
    meta: &ObjectMeta,
    ingress: &[cozyplane_apis::admin_policy::IngressRule],
    egress: &[cozyplane_apis::admin_policy::EgressRule],
    is_ingress: bool,
) -> Vec<ORule> {
    if is_ingress {
        ingress
            .iter()
            .map(|r| {
                let peers = r
                    .from
                    .iter()
                    .map(|p| EgressPeer {
                        namespaces: p.namespaces.clone(),
                        pods: p.pods.clone(),
                        ..EgressPeer::default()
                    })
                    .collect();
                ORule {
                    action: r.action.clone(),
                    peers,
                    ports: r.ports.clone(),
                    apiserver: false,
                }
            })
            .collect()
    } else {
        let listed = apiserver_names(meta);
        egress
            .iter()
            .map(|r| ORule {
                action: r.action.clone(),
                peers: r.to.clone(),
                ports: r.ports.clone(),
                apiserver: !r.name.is_empty() && listed.contains(&r.name),
            })
            .collect()
    }
}

/// One direction for `subject`: may the flow `src` → `dst` pass? `apiserver`: the
/// kube-apiserver's addresses.
#[allow(clippy::too_many_arguments)]
pub fn direction(
    c: &Cluster<'_>,
    apiserver: &[IpAddr],
    subject: &OPod,
    ingress: bool,
    src: &AEnd,
    dst: &AEnd,
    proto: &str,
    port: u16,
) -> bool {
    let peer = if ingress { src } else { dst };
    let mut anps: Vec<&AdminNetworkPolicy> = c
        .anps
        .iter()
        .filter(|a| subject_selects(c, &a.spec.subject, subject))
        .collect();
    // Equal priorities are the implementation's choice; the worlds given here have none.
    anps.sort_by_key(|a| a.spec.priority);
    'anp: for a in anps {
        for r in rules_of(&a.metadata, &a.spec.ingress, &a.spec.egress, ingress) {
            match rule(c, apiserver, &r, peer, dst, proto, port) {
                Some(Hit::Allow) => return true,
                Some(Hit::Deny) => return false,
                Some(Hit::Pass) => break 'anp,
                None => {}
            }
        }
    }
    if let Some(v) = oracle::direction(
        c.nps,
        c.ns_labels,
        subject,
        ingress,
        &src.np_end(),
        &dst.np_end(),
        proto,
        port,
    ) {
        return v;
    }
    if let Some(b) = c.banp.filter(|b| subject_selects(c, &b.spec.subject, subject)) {
        for mut r in rules_of(&b.metadata, &b.spec.ingress, &b.spec.egress, ingress) {
            // BANP has no Pass: an action it does not know fails closed.
            if r.action == "Pass" {
                r.action.clear();
            }
            match rule(c, apiserver, &r, peer, dst, proto, port) {
                Some(Hit::Allow) => return true,
                Some(_) => return false,
                None => {}
            }
        }
    }
    true
}

/// May `src` open a flow to `dst` on `proto` ("TCP", "UDP", "SCTP") `port`? A cluster
/// whose kube-apiserver has no known address.
pub fn allowed(c: &Cluster<'_>, src: &AEnd, dst: &AEnd, proto: &str, port: u16) -> bool {
    allowed_with(c, &[], src, dst, proto, port)
}

/// [`allowed`] with the kube-apiserver at `apiserver`.
pub fn allowed_with(
    c: &Cluster<'_>,
    apiserver: &[IpAddr],
    src: &AEnd,
    dst: &AEnd,
    proto: &str,
    port: u16,
) -> bool {
    let egress = match src {
        AEnd::Pod(s) => direction(c, apiserver, s, false, src, dst, proto, port),
        _ => true,
    };
    let ingress = match dst {
        AEnd::Pod(d) => direction(c, apiserver, d, true, src, dst, proto, port),
        _ => true,
    };
    egress && ingress
}
