//! AdminNetworkPolicy and BaselineAdminNetworkPolicy → the compiler's rules (issue 29): the
//! cluster admin's tiers above and below NetworkPolicy, read from the upstream
//! network-policy-api objects ([`cozyplane_apis::admin_policy`]).
//!
//! Semantics (network-policy-api v1alpha1): for one direction of a subject pod, the ANP
//! rules that apply are tried in order of the policy's `priority` (lower first), then of
//! the rule's place in its list; the first that matches decides: `Allow` admits, `Deny`
//! refuses, `Pass` ends the ANP tier. Then NetworkPolicy decides if any selects the pod for
//! that direction; else the BANP's rules, first match, `Allow` or `Deny`; else the flow is
//! admitted. Two ANPs of one priority are ordered by a hash of their names (the API leaves
//! the order to the implementation).
//!
//! Refusals fail closed as the API asks: a peer this compiler cannot enforce (`domainNames`,
//! an unreadable selector or CIDR, no field set) makes an `Allow` rule match nothing (the
//! whole rule, its other peers too) and turns a `Deny` or `Pass` rule into "deny every peer
//! on every port"; a port it cannot
//! read is dropped from an `Allow` rule (which then matches less) and turns the others
//! into "deny every port" of their peers.
//!
//! One cozyplane extension ([`KUBE_APISERVER_ANNOTATION`]): the annotation
//! `policy.cozystack.io/kube-apiserver: "<rule name>[,<rule name>...]"` on an ANP or the BANP
//! names egress rules that also match the kube-apiserver's addresses
//! ([`AdminPeer::KubeApiserver`], the endpoints of the `default/kubernetes` Service), which no
//! ANP peer can name. A name no egress rule has is a [`Warning`] and is ignored.

use std::collections::BTreeSet;

use cozyplane_apis::admin_policy::{
    AdminNetworkPolicy, BaselineAdminNetworkPolicy, EgressPeer, NamespacedPod, PolicyPort, Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

use super::ir::PortSpec;
use crate::cidr::{Block, Prefix};
use crate::error::{Reason, Warning};
use crate::identity;
use crate::model::{ACTION_ALLOW, ACTION_DENY, ACTION_PASS, Dir, Layer, proto};
use crate::selector::Selector;

/// What a matching rule does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Admit; no later tier is asked.
    Allow,
    /// Refuse.
    Deny,
    /// End the ANP tier (ANP only).
    Pass,
}

impl Action {
    /// `ACTION_*` as the datapath stores it.
    pub fn code(self) -> u32 {
        match self {
            Self::Allow => ACTION_ALLOW,
            Self::Deny => ACTION_DENY,
            Self::Pass => ACTION_PASS,
        }
    }

    /// The action of an `ACTION_*` code.
    pub fn from_code(c: u32) -> Option<Self> {
        match c {
            ACTION_ALLOW => Some(Self::Allow),
            ACTION_DENY => Some(Self::Deny),
            ACTION_PASS => Some(Self::Pass),
            _ => None,
        }
    }
}

/// Pods by namespace labels AND pod labels.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PodSel {
    /// Namespaces.
    pub ns: Selector,
    /// Pods within them.
    pub pods: Selector,
}

/// The other end of an admin rule.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum AdminPeer {
    /// Pods (host-network pods excluded, as for every identity).
    Pods(PodSel),
    /// The addresses (`status.addresses`) of the nodes whose labels match.
    Nodes(Selector),
    /// Addresses (`networks`).
    Block(Block),
    /// The kube-apiserver's addresses (the endpoints of the `default/kubernetes` Service, as
    /// they change): a cozyplane extension, added to the egress rules that
    /// [`KUBE_APISERVER_ANNOTATION`] names.
    KubeApiserver,
    /// Every peer: what a refused peer of a `Deny` or `Pass` rule becomes.
    All,
}

/// One admin rule.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AdminRule {
    /// `name`, for the trace.
    pub name: String,
    /// What a match does (a refused `Pass` rule is a `Deny`).
    pub action: Action,
    /// `from` / `to`; any one matching is enough.
    pub peers: Vec<AdminPeer>,
    /// `ports`; `None`: every port of every protocol (ICMP and ICMPv6 included).
    pub ports: Option<Vec<PortSpec>>,
}

/// An ANP or the BANP as the compiler reads it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AdminPolicy {
    /// [`Layer::Anp`] or [`Layer::Banp`].
    pub layer: Layer,
    /// Name.
    pub name: String,
    /// ANP `priority` (0 for the BANP).
    pub priority: u32,
    /// The subjects; `None` when unreadable (then the policy selects nothing: an unread
    /// selector never puts a cluster-wide rule on every pod).
    pub subject: Option<PodSel>,
    /// Ingress rules, in order.
    pub ingress: Vec<AdminRule>,
    /// Egress rules, in order.
    pub egress: Vec<AdminRule>,
}

/// The annotation of an ANP or the BANP that names (comma-separated `name`s) the egress
/// rules that also match the kube-apiserver's addresses ([`AdminPeer::KubeApiserver`]).
pub const KUBE_APISERVER_ANNOTATION: &str = "policy.cozystack.io/kube-apiserver";

/// The highest ANP priority the API admits.
pub const MAX_PRIORITY: u32 = 1000;

/// The ordinal no rule has: the agent's write barrier ("deny any", tried before every rule
/// while a subject's admin entries change).
pub const BARRIER_ORDINAL: u32 = 0;

/// A rule's place in the order of its tier: lower is tried first. ANP: priority (10
/// bits), a 13-bit hash of the policy's name (ties between policies of one priority), the
/// rule's index (7 bits: at most 100 rules), plus one; BANP: the index plus one. The
/// datapath keeps, per lookup, the lowest ordinal of the rules covering the port, and takes
/// the lowest of its three lookups: the first matching rule.
pub fn ordinal(layer: Layer, priority: u32, name: &str, index: usize) -> u32 {
    let idx = u32::try_from(index).unwrap_or(u32::MAX).min(0x7f);
    let place = match layer {
        Layer::Anp => {
            let h = identity::fnv(&[name.as_bytes()]);
            (priority.min(MAX_PRIORITY) << 20) | (((h ^ (h >> 32)) as u32 & 0x1fff) << 7) | idx
        }
        _ => idx,
    };
    // 0 is the agent's write barrier (BARRIER_ORDINAL): below every rule.
    place + 1
}

impl AdminPolicy {
    /// The rules of one direction.
    pub fn rules(&self, dir: Dir) -> &[AdminRule] {
        match dir {
            Dir::Ingress => &self.ingress,
            Dir::Egress => &self.egress,
        }
    }

    /// Every peer of every rule.
    pub fn peers(&self) -> impl Iterator<Item = &AdminPeer> {
        self.ingress.iter().chain(&self.egress).flat_map(|r| &r.peers)
    }

    /// Every `networks` block.
    pub fn blocks(&self) -> impl Iterator<Item = &Block> {
        self.peers().filter_map(|p| match p {
            AdminPeer::Block(b) => Some(b),
            _ => None,
        })
    }

    /// Does any rule name nodes?
    pub fn has_nodes(&self) -> bool {
        self.peers().any(|p| matches!(p, AdminPeer::Nodes(_)))
    }

    /// Does any rule match the kube-apiserver (the annotation's extension)?
    pub fn has_kube_apiserver(&self) -> bool {
        self.peers().any(|p| matches!(p, AdminPeer::KubeApiserver))
    }

    /// `AdminNetworkPolicy name spec.egress[i] (rule name)`, for the trace.
    pub fn rule_name(&self, dir: Dir, i: usize) -> String {
        let kind = match self.layer {
            Layer::Anp => "AdminNetworkPolicy",
            _ => "BaselineAdminNetworkPolicy",
        };
        let (field, rule) = match dir {
            Dir::Ingress => ("ingress", self.ingress.get(i)),
            Dir::Egress => ("egress", self.egress.get(i)),
        };
        let named = rule
            .filter(|r| !r.name.is_empty())
            .map(|r| format!(" ({})", r.name));
        format!(
            "{kind} {} spec.{field}[{i}]{}",
            self.name,
            named.unwrap_or_default()
        )
    }
}

struct Reader {
    object: String,
    warnings: Vec<Warning>,
}

impl Reader {
    fn warn(&mut self, field: String, reason: Reason) {
        self.warnings.push(Warning {
            object: self.object.clone(),
            field,
            reason,
        });
    }

    fn selector(&mut self, s: &LabelSelector, field: String) -> Option<Selector> {
        Selector::parse(s)
            .map_err(|e| self.warn(field, Reason::Selector(e)))
            .ok()
    }

    fn pod_sel(&mut self, p: &NamespacedPod, field: &str) -> Option<PodSel> {
        let ns = self.selector(&p.namespace_selector, format!("{field}.namespaceSelector"));
        let pods = self.selector(&p.pod_selector, format!("{field}.podSelector"));
        Some(PodSel { ns: ns?, pods: pods? })
    }

    fn subject(&mut self, s: &Subject) -> Option<PodSel> {
        match (&s.namespaces, &s.pods) {
            (Some(n), None) => Some(PodSel {
                ns: self.selector(n, "spec.subject.namespaces".into())?,
                pods: Selector::default(),
            }),
            (None, Some(p)) => self.pod_sel(p, "spec.subject.pods"),
            _ => {
                self.warn(
                    "spec.subject".into(),
                    Reason::Peer("not exactly one of namespaces, pods".into()),
                );
                None
            }
        }
    }

    /// One peer; `networks` is one peer of several blocks, hence the list.
    fn peer(&mut self, p: &EgressPeer, field: &str) -> Option<Vec<AdminPeer>> {
        let set = [
            p.namespaces.is_some(),
            p.pods.is_some(),
            p.nodes.is_some(),
            p.networks.is_some(),
            p.domain_names.is_some(),
        ];
        if set.iter().filter(|s| **s).count() != 1 {
            self.warn(field.into(), Reason::Peer("not exactly one field".into()));
            return None;
        }
        if let Some(n) = &p.namespaces {
            return Some(vec![AdminPeer::Pods(PodSel {
                ns: self.selector(n, format!("{field}.namespaces"))?,
                pods: Selector::default(),
            })]);
        }
        if let Some(pods) = &p.pods {
            return self
                .pod_sel(pods, &format!("{field}.pods"))
                .map(|s| vec![AdminPeer::Pods(s)]);
        }
        if let Some(n) = &p.nodes {
            return self
                .selector(n, format!("{field}.nodes"))
                .map(|s| vec![AdminPeer::Nodes(s)]);
        }
        if let Some(nets) = &p.networks {
            // One CIDR that does not parse refuses the peer as a whole.
            let mut blocks = Vec::new();
            for (i, c) in nets.iter().enumerate() {
                match c.parse::<Prefix>() {
                    Ok(cidr) => blocks.push(AdminPeer::Block(Block {
                        cidr,
                        except: Vec::new(),
                    })),
                    Err(_) => {
                        self.warn(format!("{field}.networks[{i}]"), Reason::Cidr(c.clone()));
                        return None;
                    }
                }
            }
            if blocks.is_empty() {
                self.warn(format!("{field}.networks"), Reason::Peer("no CIDR".into()));
                return None;
            }
            return Some(blocks);
        }
        self.warn(
            format!("{field}.domainNames"),
            Reason::Peer("domainNames (not enforced)".into()),
        );
        None
    }

    fn port(&mut self, p: &PolicyPort, field: String) -> Option<Vec<PortSpec>> {
        let proto_of = |r: &mut Self, s: Option<&String>| match s.map_or("TCP", String::as_str) {
            "TCP" => Some(proto::TCP),
            "UDP" => Some(proto::UDP),
            "SCTP" => Some(proto::SCTP),
            other => {
                r.warn(field.clone(), Reason::Protocol(other.to_string()));
                None
            }
        };
        match (&p.port_number, &p.named_port, &p.port_range) {
            (Some(n), None, None) => {
                let pr = proto_of(self, n.protocol.as_ref())?;
                match u16::try_from(n.port).ok().filter(|p| *p > 0) {
                    Some(port) => Some(vec![PortSpec::Range(pr, port, port)]),
                    None => {
                        self.warn(field, Reason::Port(n.port.to_string()));
                        None
                    }
                }
            }
            (None, Some(name), None) => {
                if name.is_empty() || name.len() > 15 {
                    self.warn(field, Reason::Port(name.clone()));
                    return None;
                }
                // A named port carries no protocol: the container port's own.
                Some(
                    [proto::TCP, proto::UDP, proto::SCTP]
                        .into_iter()
                        .map(|pr| PortSpec::Named(pr, name.clone()))
                        .collect(),
                )
            }
            (None, None, Some(r)) => {
                let pr = proto_of(self, r.protocol.as_ref())?;
                let lo = u16::try_from(r.start).ok().filter(|p| *p > 0);
                let hi = u16::try_from(r.end).ok();
                match (lo, hi) {
                    (Some(lo), Some(hi)) if lo <= hi => Some(vec![PortSpec::Range(pr, lo, hi)]),
                    _ => {
                        self.warn(field, Reason::Port(format!("{}-{}", r.start, r.end)));
                        None
                    }
                }
            }
            _ => {
                self.warn(
                    field,
                    Reason::Port("not exactly one of portNumber, namedPort, portRange".into()),
                );
                None
            }
        }
    }
}

/// What [`translate_rule`] reads of one rule, whatever its direction.
struct RawRule<'a> {
    name: &'a str,
    action: &'a str,
    peers: Vec<EgressPeer>,
    ports: Option<&'a Vec<PolicyPort>>,
    /// Named by [`KUBE_APISERVER_ANNOTATION`] (egress only).
    kube_apiserver: bool,
}

fn translate_rule(r: &mut Reader, layer: Layer, dir: &str, i: usize, raw: &RawRule<'_>) -> AdminRule {
    let peer_field = if dir == "ingress" { "from" } else { "to" };
    let action = match (raw.action, layer) {
        ("Allow", _) => Action::Allow,
        ("Deny", _) => Action::Deny,
        ("Pass", Layer::Anp) => Action::Pass,
        (other, _) => {
            r.warn(
                format!("spec.{dir}[{i}].action"),
                Reason::Peer(format!("action {other:?}")),
            );
            Action::Deny
        }
    };
    let mut peers = Vec::new();
    // An action this compiler does not know: "deny all".
    let mut refused = !matches!(raw.action, "Allow" | "Deny" | "Pass");
    if raw.peers.is_empty() {
        r.warn(
            format!("spec.{dir}[{i}].{peer_field}"),
            Reason::Peer("nothing".into()),
        );
        refused = true;
    }
    let mut peer_refused = false;
    for (j, p) in raw.peers.iter().enumerate() {
        let field = format!("spec.{dir}[{i}].{peer_field}[{j}]");
        match r.peer(p, &field) {
            Some(ps) => peers.extend(ps),
            None => peer_refused = true,
        }
    }
    if raw.kube_apiserver {
        // One more peer; the rule's fail closed below takes it like the others.
        peers.push(AdminPeer::KubeApiserver);
    }
    refused |= peer_refused;
    let mut ports = raw.ports.map(|ps| {
        let mut out = Vec::new();
        for (j, p) in ps.iter().enumerate() {
            match r.port(p, format!("spec.{dir}[{i}].ports[{j}]")) {
                Some(specs) => out.extend(specs),
                None => refused = true,
            }
        }
        out
    });
    if dir == "egress" {
        let to_addr = peers.iter().any(|p| {
            matches!(
                p,
                AdminPeer::Block(_) | AdminPeer::Nodes(_) | AdminPeer::KubeApiserver
            )
        });
        if to_addr && ports.iter().flatten().any(|s| matches!(s, PortSpec::Named(..))) {
            // The CRD refuses this mix (and would, were the kube-apiserver a peer of its
            // own: addresses have no container port names); one that got past it is not
            // enforced: closed, as an unenforceable peer is.
            r.warn(
                format!("spec.egress[{i}].ports"),
                Reason::NamedPortToBlock(String::new()),
            );
            peer_refused = true;
            refused = true;
        }
    }
    let mut action = action;
    if peer_refused && action == Action::Allow {
        // The API: for an `Allow` rule, fail closed is "treat the rule as matching no
        // traffic" (not only the refused peer).
        peers.clear();
    }
    if refused && action != Action::Allow {
        // Fail closed: "deny all".
        action = Action::Deny;
        peers = vec![AdminPeer::All];
        ports = None;
    }
    AdminRule {
        name: raw.name.to_string(),
        action,
        peers,
        ports,
    }
}

/// The egress rules [`KUBE_APISERVER_ANNOTATION`] names, by index; a name no egress rule
/// has is a warning. Every rule of that name is named (the API does not make names unique);
/// a rule without a name cannot be.
fn kube_apiserver_rules(r: &mut Reader, meta: &ObjectMeta, egress: &[RawRule<'_>]) -> BTreeSet<usize> {
    let mut out = BTreeSet::new();
    let Some(value) = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(KUBE_APISERVER_ANNOTATION))
    else {
        return out;
    };
    for name in value.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let found: Vec<usize> = egress
            .iter()
            .enumerate()
            .filter(|(_, raw)| raw.name == name)
            .map(|(i, _)| i)
            .collect();
        if found.is_empty() {
            r.warn(
                format!("metadata.annotations[{KUBE_APISERVER_ANNOTATION}]"),
                Reason::Peer(format!("kube-apiserver: no egress rule named {name:?}")),
            );
        }
        out.extend(found);
    }
    out
}

fn translate(
    layer: Layer,
    meta: &ObjectMeta,
    priority: i32,
    subject: &Subject,
    ingress: Vec<RawRule<'_>>,
    mut egress: Vec<RawRule<'_>>,
) -> (AdminPolicy, Vec<Warning>) {
    let name = meta.name.as_deref().unwrap_or_default();
    let kind = if layer == Layer::Anp {
        "AdminNetworkPolicy"
    } else {
        "BaselineAdminNetworkPolicy"
    };
    let mut r = Reader {
        object: format!("{kind} {name}"),
        warnings: Vec::new(),
    };
    let priority = match u32::try_from(priority).ok().filter(|p| *p <= MAX_PRIORITY) {
        Some(p) => p,
        None => {
            r.warn("spec.priority".into(), Reason::Port(priority.to_string()));
            MAX_PRIORITY
        }
    };
    let subject = r.subject(subject);
    for i in kube_apiserver_rules(&mut r, meta, &egress) {
        egress[i].kube_apiserver = true;
    }
    let ingress = ingress
        .into_iter()
        .enumerate()
        .map(|(i, raw)| translate_rule(&mut r, layer, "ingress", i, &raw))
        .collect();
    let egress = egress
        .into_iter()
        .enumerate()
        .map(|(i, raw)| translate_rule(&mut r, layer, "egress", i, &raw))
        .collect();
    (
        AdminPolicy {
            layer,
            name: name.to_string(),
            priority,
            subject,
            ingress,
            egress,
        },
        r.warnings,
    )
}

fn ingress_raw(rules: &[cozyplane_apis::admin_policy::IngressRule]) -> Vec<RawRule<'_>> {
    rules
        .iter()
        .map(|x| RawRule {
            name: &x.name,
            action: &x.action,
            peers: x
                .from
                .iter()
                .map(|p| EgressPeer {
                    namespaces: p.namespaces.clone(),
                    pods: p.pods.clone(),
                    ..EgressPeer::default()
                })
                .collect(),
            ports: x.ports.as_ref(),
            kube_apiserver: false,
        })
        .collect()
}

fn egress_raw(rules: &[cozyplane_apis::admin_policy::EgressRule]) -> Vec<RawRule<'_>> {
    rules
        .iter()
        .map(|x| RawRule {
            name: &x.name,
            action: &x.action,
            peers: x.to.clone(),
            ports: x.ports.as_ref(),
            kube_apiserver: false,
        })
        .collect()
}

/// Read an AdminNetworkPolicy; every refused construct is a [`Warning`].
pub fn translate_anp(p: &AdminNetworkPolicy) -> (AdminPolicy, Vec<Warning>) {
    translate(
        Layer::Anp,
        &p.metadata,
        p.spec.priority,
        &p.spec.subject,
        ingress_raw(&p.spec.ingress),
        egress_raw(&p.spec.egress),
    )
}

/// Read the BaselineAdminNetworkPolicy; every refused construct is a [`Warning`].
pub fn translate_banp(p: &BaselineAdminNetworkPolicy) -> (AdminPolicy, Vec<Warning>) {
    translate(
        Layer::Banp,
        &p.metadata,
        0,
        &p.spec.subject,
        ingress_raw(&p.spec.ingress),
        egress_raw(&p.spec.egress),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinals_follow_priority_then_index() {
        let a = ordinal(Layer::Anp, 3, "x", 99);
        let b = ordinal(Layer::Anp, 4, "a", 0);
        assert!(a < b);
        assert!(ordinal(Layer::Anp, 3, "x", 1) < ordinal(Layer::Anp, 3, "x", 2));
        assert_eq!(ordinal(Layer::Banp, 0, "default", 5), 6);
        assert!(ordinal(Layer::Anp, 0, "", 0) > BARRIER_ORDINAL);
        assert!(ordinal(Layer::Anp, 1000, "zzz", 99) < u32::MAX >> 1);
    }
}
