//! The `status` of a pod trace: the verdict, and what decided each direction, described
//! without naming another tenant's objects. A NetworkPolicy rule is named only when the policy
//! is of the request's namespace (the one the caller was authorized in); one of another
//! namespace is `redacted` (its kind and direction only). AdminNetworkPolicies and the
//! BaselineAdminNetworkPolicy are cluster objects of the cluster admin, named always. A pod is
//! named only when it is of the request's namespace or the caller named it.

use std::net::IpAddr;

use cozyplane_apis::v1alpha1::{
    PodTraceDirection, PodTraceHostFirewall, PodTraceResolved, PodTraceRule, PodTraceStatus,
};
use cozyplane_policy::Dir;
use cozyplane_policy::model::{
    ACTION_ALLOW, ACTION_DENY, ACTION_PASS, Layer, MARK_ANP, PEER_ISOLATED, RuleVal, Tables,
};
use cozyplane_policy::np::admin::{ordinal, translate_anp, translate_banp};
use cozyplane_policy::np::rule_id;
use cozyplane_policy::verdict::{self, Check, NpCheck, Tier};

use super::resolve::{End, Flow, Kind};
use super::world::PodWorld;

const ALLOWED: &str = "Allowed";
const DROPPED: &str = "Dropped";

fn dir_name(d: Dir) -> &'static str {
    match d {
        Dir::Ingress => "ingress",
        Dir::Egress => "egress",
    }
}

fn tier_name(t: Tier) -> &'static str {
    match t {
        Tier::None => "None",
        Tier::Anp => "AdminNetworkPolicy",
        Tier::Np => "NetworkPolicy",
        Tier::Banp => "BaselineAdminNetworkPolicy",
        Tier::Default => "Default",
    }
}

fn action_name(flags: u32) -> &'static str {
    match flags {
        ACTION_ALLOW => "Allow",
        ACTION_PASS => "Pass",
        // Deny, and what the datapath treats as one.
        _ => "Deny",
    }
}

/// The first matching admin rule of `layer` for subject `id` in `dir`: the ordinal a `Deny`
/// or `Pass` does not return in the verdict, found by the same lookups.
fn first_admin(t: &Tables, layer: Layer, dir: Dir, id: u32, peer: IpAddr, flow: &Flow) -> Option<RuleVal> {
    verdict::first_admin_rule(t, layer, dir, id, peer, flow.proto, flow.port)
}

/// The admin rule of `layer` and `dir` whose ordinal is `ord`, with the action it has in the
/// maps.
fn admin_rule(w: &PodWorld, layer: Layer, dir: Dir, ord: u32, action: u32) -> Option<PodTraceRule> {
    let policies: Vec<_> = if layer == Layer::Anp {
        w.anps.iter().map(|p| translate_anp(p).0).collect()
    } else {
        w.banps.iter().map(|p| translate_banp(p).0).collect()
    };
    policies.iter().find_map(|p| {
        let rules = p.rules(dir);
        (0..rules.len())
            .find(|i| ordinal(layer, p.priority, &p.name, *i) == ord)
            .map(|i| PodTraceRule {
                kind: tier_name(if layer == Layer::Anp {
                    Tier::Anp
                } else {
                    Tier::Banp
                })
                .into(),
                name: p.name.clone(),
                direction: dir_name(dir).into(),
                index: i32::try_from(i).ok(),
                rule_name: rules[i].name.clone(),
                action: action_name(action).into(),
                ..PodTraceRule::default()
            })
    })
}

/// The NetworkPolicy rule `rid` of the subject's namespace, redacted unless that namespace is
/// the request's.
fn np_rule(ns: &str, w: &PodWorld, me: &End, dir: Dir, rid: u32) -> Option<PodTraceRule> {
    let (pns, _) = me.pod.as_ref()?;
    w.policies
        .iter()
        .filter(|p| p.metadata.namespace.as_deref() == Some(pns.as_str()))
        .find_map(|p| {
            let name = p.metadata.name.clone().unwrap_or_default();
            let spec = p.spec.as_ref();
            let n = match dir {
                Dir::Ingress => spec.and_then(|s| s.ingress.as_ref()).map_or(0, Vec::len),
                Dir::Egress => spec.and_then(|s| s.egress.as_ref()).map_or(0, Vec::len),
            };
            (0..n).find(|i| rule_id(pns, &name, dir, *i) == rid).map(|i| {
                if pns == ns {
                    PodTraceRule {
                        kind: "NetworkPolicy".into(),
                        namespace: pns.clone(),
                        name,
                        direction: dir_name(dir).into(),
                        index: i32::try_from(i).ok(),
                        action: "Allow".into(),
                        ..PodTraceRule::default()
                    }
                } else {
                    PodTraceRule {
                        kind: "NetworkPolicy".into(),
                        direction: dir_name(dir).into(),
                        action: "Allow".into(),
                        redacted: true,
                        ..PodTraceRule::default()
                    }
                }
            })
        })
}

/// One direction: `me` is the subject (the source for egress, the destination for ingress),
/// `peer` the other end.
#[expect(clippy::too_many_arguments, reason = "one direction's context")]
fn direction(
    ns: &str,
    w: &PodWorld,
    t: &Tables,
    flow: &Flow,
    dir: Dir,
    me: &End,
    peer: &End,
    k: NpCheck,
) -> PodTraceDirection {
    let id = t.np_idents.get(&me.ip).copied();
    let layer = |tier| {
        if tier == Tier::Anp {
            Layer::Anp
        } else {
            Layer::Banp
        }
    };
    let (decision, rule) = match (k.tier, k.check) {
        (Tier::None, _) if id.is_some() => ("NotSelected", None),
        (Tier::None, _) => ("NotSubject", None),
        (Tier::Default, _) => ("DefaultAllow", None),
        (Tier::Np, Check::Rule(rid)) => ("Rule", np_rule(ns, w, me, dir, rid)),
        (Tier::Np, _) => ("DefaultDeny", None),
        (tier @ (Tier::Anp | Tier::Banp), Check::Rule(ord)) => {
            ("Rule", admin_rule(w, layer(tier), dir, ord, ACTION_ALLOW))
        }
        (tier @ (Tier::Anp | Tier::Banp), _) => {
            let rule = id
                .and_then(|id| first_admin(t, layer(tier), dir, id, peer.ip, flow))
                .and_then(|v| admin_rule(w, layer(tier), dir, v.rule, ACTION_DENY));
            ("Deny", rule)
        }
    };
    // An ANP `Pass` that handed the direction down to NetworkPolicy or the BANP.
    let passed = id
        .filter(|_| !matches!(k.tier, Tier::Anp | Tier::None))
        .filter(|id| {
            verdict::lookup(t, Layer::Np, dir, 0, *id, PEER_ISOLATED, 0, 0)
                .is_some_and(|m| m.flags & MARK_ANP != 0)
        })
        .and_then(|id| first_admin(t, Layer::Anp, dir, id, peer.ip, flow))
        .filter(|v| v.flags == ACTION_PASS)
        .and_then(|v| admin_rule(w, Layer::Anp, dir, v.rule, ACTION_PASS));
    PodTraceDirection {
        verdict: if k.check.allows() { ALLOWED } else { DROPPED }.into(),
        tier: tier_name(k.tier).into(),
        decision: decision.into(),
        rule,
        passed,
        exempt: false,
    }
}

fn rule_text(r: &PodTraceRule) -> String {
    if r.redacted {
        return format!("a NetworkPolicy {} rule of another namespace", r.direction);
    }
    let name = if r.namespace.is_empty() {
        r.name.clone()
    } else {
        format!("{}/{}", r.namespace, r.name)
    };
    let named = if r.rule_name.is_empty() {
        String::new()
    } else {
        format!(" ({})", r.rule_name)
    };
    format!(
        "{} {name} spec.{}[{}]{named}",
        r.kind,
        r.direction,
        r.index.unwrap_or_default()
    )
}

fn describe(side: &str, d: &PodTraceDirection) -> String {
    let text = match (d.decision.as_str(), &d.rule) {
        _ if d.exempt => format!(
            "the {side}'s ingress is not asked: the source is an address of the {side} pod's node (kubelet probes)"
        ),
        ("NotSubject", _) => format!("the {side} is not a default-network pod: no policy has it as subject"),
        ("NotSelected", _) => format!("no policy selects the {side}"),
        ("DefaultAllow", _) => format!(
            "an admin policy selects the {side} but none of its rules decides and no NetworkPolicy isolates it (admitted by default)"
        ),
        ("DefaultDeny", _) => {
            format!("NetworkPolicy isolates the {side} and no rule admits it (default deny)")
        }
        ("Deny", Some(r)) => format!("{} denies it at the {side}", rule_text(r)),
        ("Deny", None) => format!("{} denies it at the {side}", d.tier),
        (_, Some(r)) => format!("{} admits it at the {side}", rule_text(r)),
        _ => format!("a {} rule admits it at the {side}", d.tier),
    };
    match &d.passed {
        Some(p) => format!("{text}, after {} passed it on", rule_text(p)),
        None => text,
    }
}

fn resolved(ns: &str, e: &End) -> PodTraceResolved {
    let shown = e.pod.as_ref().filter(|(pns, _)| pns == ns || e.named).cloned();
    // A pod of another namespace the caller named: its address is not the caller's to learn.
    let foreign_named = e.named && e.pod.as_ref().is_some_and(|(pns, _)| pns != ns);
    PodTraceResolved {
        address: if foreign_named {
            String::new()
        } else {
            e.ip.to_string()
        },
        kind: match e.kind {
            Kind::Pod => "Pod",
            Kind::Node => "Node",
            Kind::External => "External",
        }
        .into(),
        namespace: shown.as_ref().map(|(n, _)| n.clone()).unwrap_or_default(),
        pod: shown.map(|(_, p)| p).unwrap_or_default(),
    }
}

/// Whether the datapath skips the destination's ingress: the source is an address of the
/// node the destination pod runs on (`sdn_hf_self` there; as its Node object lists them).
pub fn node_exempt(w: &PodWorld, flow: &Flow) -> bool {
    let Some(node) = flow.dst.node.as_deref().filter(|_| flow.dst.kind == Kind::Pod) else {
        return false;
    };
    w.nodes
        .iter()
        .filter(|n| n.metadata.name.as_deref() == Some(node))
        .flat_map(|n| n.status.iter().flat_map(|s| s.addresses.iter().flatten()))
        .any(|a| {
            a.address
                .parse::<IpAddr>()
                .is_ok_and(|a| a.to_canonical() == flow.src.ip)
        })
}

fn describe_hf(h: &PodTraceHostFirewall) -> String {
    let side = if h.direction == "ingress" {
        format!("into node {}", h.node)
    } else {
        format!("out of node {}", h.node)
    };
    match (h.decision.as_str(), &h.rule) {
        ("NotArmed", _) => format!("no HostFirewall restricts traffic {side}"),
        ("Exempt", _) => format!("the HostFirewall exempts it {side} (neighbour discovery, control ports)"),
        ("Failsafe", _) => format!("the HostFirewall's failsafe (the API server's port) admits it {side}"),
        ("DefaultDeny", _) => format!("the HostFirewall restricts traffic {side} and no rule admits it"),
        (_, Some(r)) => format!(
            "HostFirewall {} spec.{}[{}] admits it {side}",
            r.host_firewall,
            r.direction,
            r.index.unwrap_or_default()
        ),
        _ => format!("a HostFirewall rule admits it {side}"),
    }
}

/// The answer from the compiled tables' verdict `(egress, ingress)` and the node firewall's
/// answer `hf` (when the flow meets one).
pub fn judged(
    ns: &str,
    w: &PodWorld,
    t: &Tables,
    flow: &Flow,
    d: (NpCheck, NpCheck),
    hf: Option<PodTraceHostFirewall>,
) -> PodTraceStatus {
    let egress = direction(ns, w, t, flow, Dir::Egress, &flow.src, &flow.dst, d.0);
    let mut ingress = direction(ns, w, t, flow, Dir::Ingress, &flow.dst, &flow.src, d.1);
    let exempt = node_exempt(w, flow);
    ingress.exempt = exempt;
    let e_ok = d.0.check.allows();
    let i_ok = d.1.check.allows() || exempt;
    // The datapath's order: a node's egress firewall (host_out) before everything else, the
    // source pod's egress before the destination node's ingress firewall (sdn_hf_in).
    let hf_ok = hf.as_ref().is_none_or(|h| h.verdict == ALLOWED);
    let hf_first = hf.as_ref().is_some_and(|h| h.direction == "egress");
    let hf_layer = |h: &PodTraceHostFirewall| ("HostFirewall".to_string(), h.decision.clone());
    let (layer, reason) = match &hf {
        Some(h) if hf_first && !hf_ok => hf_layer(h),
        _ if !e_ok => (egress.tier.clone(), egress.decision.clone()),
        Some(h) if !hf_ok => hf_layer(h),
        _ if exempt => ("NodeExemption".to_string(), "NodeExempt".to_string()),
        _ if !i_ok => (ingress.tier.clone(), ingress.decision.clone()),
        _ => {
            // The most specific admission: a policy's rule, the firewall's rule, a default.
            let rule = [&ingress, &egress].into_iter().find(|x| x.decision == "Rule");
            let default = [&ingress, &egress].into_iter().find(|x| x.tier == "Default");
            match (rule, &hf, default) {
                (Some(by), _, _) => (by.tier.clone(), by.decision.clone()),
                (None, Some(h), _) if matches!(h.decision.as_str(), "Rule" | "Failsafe") => hf_layer(h),
                (None, _, Some(by)) => (by.tier.clone(), by.decision.clone()),
                (None, _, None) => (ingress.tier.clone(), ingress.decision.clone()),
            }
        }
    };
    let allowed = e_ok && i_ok && hf_ok;
    let verdict = if allowed { ALLOWED } else { DROPPED };
    let mut notes = Vec::new();
    if exempt {
        notes.push(
            "the source is an address of the destination pod's node: the datapath admits the flow whatever the destination's ingress policy says (kubelet probes)"
                .to_string(),
        );
    }
    match flow.dst.kind {
        Kind::Node => notes.push(
            "the destination is a node as its Node object lists its addresses; an address the node's agent adds from its uplink is judged the same way by the node's HostFirewall"
                .into(),
        ),
        Kind::External => notes.push(
            "the destination is neither a pod nor a node: if it is a Service address, the datapath decides the flow at the backend pod (trace the backend's address)"
                .into(),
        ),
        Kind::Pod => {}
    }
    let mut message = format!(
        "{verdict}: {}; {}",
        describe("source", &egress),
        describe("destination", &ingress)
    );
    if let Some(h) = &hf {
        message = format!("{message}; {}", describe_hf(h));
    }
    PodTraceStatus {
        verdict: verdict.into(),
        layer,
        reason,
        message,
        source: resolved(ns, &flow.src),
        destination: resolved(ns, &flow.dst),
        egress,
        ingress,
        node_exempt: exempt,
        host_firewall: hf,
        notes,
    }
}
