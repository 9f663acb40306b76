//! The `status` of a trace: the verdict, and what decided each direction, described
//! without naming another tenant's objects. Names are given only for objects of the
//! request's namespace (the one the caller was authorized in); a rule of a peered VPC of
//! another namespace is `redacted` (its VPC and direction only: the caller's own
//! VPCPeering already names that VPC), and so are the groups of an endpoint there.

use cozyplane_apis::v1alpha1::{
    SecurityGroup, VPCRef, VPCTraceDirection, VPCTraceResolved, VPCTraceRule, VPCTraceStatus,
};
use cozyplane_policy::Dir;
use cozyplane_policy::model::Tables;
use cozyplane_policy::sg::SgCompiler;
use cozyplane_policy::verdict::{Check, SgCheck, SgDetail};

use super::resolve::{End, Flow};
use super::world::World;

pub(super) const ALLOWED: &str = "Allowed";
pub(super) const DROPPED: &str = "Dropped";

fn visible(ns: &str, vpc: &VPCRef) -> bool {
    vpc.namespace == ns
}

pub(super) fn resolved(ns: &str, w: &World, t: Option<&Tables>, e: &End) -> VPCTraceResolved {
    let bits = t
        .and_then(|t| t.sg_members.get(&(e.vni, e.ip)).copied())
        .unwrap_or(0);
    let groups = if visible(ns, &e.vpc) {
        let mut names: Vec<String> = w
            .groups
            .iter()
            .filter(|g| in_vpc(g, &e.vpc))
            .filter(|g| {
                let id = g.status.as_ref().map_or(0, |s| s.id);
                (1..63).contains(&id) && bits & (1u64 << id) != 0
            })
            .filter_map(|g| g.metadata.name.clone())
            .collect();
        names.sort();
        names
    } else {
        Vec::new()
    };
    // The live Port of the address, named for the caller's own VPCs only.
    let port = w
        .ports
        .iter()
        .filter(|_| !e.external && visible(ns, &e.vpc))
        .filter(|p| p.metadata.deletion_timestamp.is_none() || severed_port(w, e))
        .find(|p| p.spec.vpc_ref == e.vpc && holds(p, e));
    VPCTraceResolved {
        address: e.ip.to_string(),
        vpc: e.vpc.clone(),
        external: e.external,
        severed: severed_port(w, e),
        groups,
        port: port.and_then(|p| p.metadata.name.clone()).unwrap_or_default(),
        interface: port.map(|p| p.spec.interface.clone()).unwrap_or_default(),
    }
}

fn holds(p: &cozyplane_apis::v1alpha1::Port, e: &End) -> bool {
    p.spec
        .ip
        .parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.to_canonical() == e.ip)
}

/// The end's address is held by a Port being deleted: its node has severed it (the agent
/// severs before it lets the delete finish, `agent/src/features/sever`).
pub fn severed_port(w: &World, e: &End) -> bool {
    !e.external
        && w.ports.iter().any(|p| {
            p.spec.vpc_ref == e.vpc
                && p.metadata.deletion_timestamp.is_some()
                && p.spec
                    .ip
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.to_canonical() == e.ip)
        })
}

/// The end's address is held by no Port (nor a ServiceVIP) of its VPC: nothing delivers to it
/// (the sender has no endpoint or remote for it) and nothing may send from it (the source
/// check).
pub fn unheld(w: &World, e: &End) -> bool {
    !e.external
        && !w.ports.iter().any(|p| {
            p.spec.vpc_ref == e.vpc
                && p.spec
                    .ip
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.to_canonical() == e.ip)
        })
        && !w.vips.iter().any(|(vpc, ip)| *vpc == e.vpc && *ip == e.ip)
}

/// The answer when an end's address is held by nothing ([`unheld`]).
pub fn no_port(ns: &str, w: &World, flow: &Flow) -> Option<VPCTraceStatus> {
    let (side, e) = if unheld(w, &flow.src) {
        ("source", &flow.src)
    } else if unheld(w, &flow.dst) {
        ("destination", &flow.dst)
    } else {
        return None;
    };
    Some(VPCTraceStatus {
        verdict: DROPPED.into(),
        layer: "Isolation".into(),
        reason: "NoPort".into(),
        message: format!(
            "Dropped: no Port of VPC {}/{} holds the {side} address {} (nothing is attached there, or its Port is gone)",
            e.vpc.namespace, e.vpc.name, e.ip
        ),
        source: resolved(ns, w, None, &flow.src),
        destination: resolved(ns, w, None, &flow.dst),
        ..VPCTraceStatus::default()
    })
}

/// The answer when an end is severed: the datapath drops the flow at the source's veth
/// (`sdn_sever_from_pod`) or at delivery, before any SecurityGroup.
pub fn severed(ns: &str, w: &World, flow: &Flow) -> Option<VPCTraceStatus> {
    let side = if severed_port(w, &flow.src) {
        "source"
    } else if severed_port(w, &flow.dst) {
        "destination"
    } else {
        return None;
    };
    Some(VPCTraceStatus {
        verdict: DROPPED.into(),
        layer: "Severed".into(),
        reason: "Severed".into(),
        message: format!(
            "Dropped: the {side}'s Port is being deleted (its VPCBinding was revoked or the Port removed) and its node has severed it from the VPC"
        ),
        source: resolved(ns, w, None, &flow.src),
        destination: resolved(ns, w, None, &flow.dst),
        ..VPCTraceStatus::default()
    })
}

fn in_vpc(g: &SecurityGroup, vpc: &VPCRef) -> bool {
    g.metadata.namespace.as_deref() == Some(vpc.namespace.as_str()) && g.spec.vpc_ref.name == vpc.name
}

fn dir_name(d: Dir) -> &'static str {
    match d {
        Dir::Ingress => "ingress",
        Dir::Egress => "egress",
    }
}

/// One direction: `me` is the subject (the source for egress, the destination for
/// ingress), `peer` the other end.
#[expect(clippy::too_many_arguments, reason = "one direction's context")]
fn direction(
    ns: &str,
    c: &SgCompiler,
    t: &Tables,
    flow: &Flow,
    dir: Dir,
    me: &End,
    peer: &End,
    k: SgCheck,
) -> VPCTraceDirection {
    let (verdict, decision, rule) = match (k.check, k.by) {
        (Check::Open, _) => (ALLOWED, "Ungrouped", None),
        (Check::Denied, _) => (DROPPED, "DefaultDeny", None),
        (Check::Rule(_), by) => {
            let rule = by.and_then(|(group, how)| {
                let peer_groups = t.sg_members.get(&(peer.vni, peer.ip)).copied().unwrap_or(0);
                c.explain(
                    me.vni,
                    dir,
                    group,
                    how,
                    (peer.vni, peer.ip, peer_groups),
                    flow.proto,
                    flow.port,
                )
            });
            let rule = rule.map(|r| {
                let vpc = VPCRef {
                    namespace: r.namespace.clone(),
                    name: r.vpc.clone(),
                };
                if visible(ns, &vpc) {
                    VPCTraceRule {
                        vpc,
                        security_group: r.name,
                        direction: dir_name(r.dir).into(),
                        index: i32::try_from(r.index).ok(),
                        redacted: false,
                    }
                } else {
                    VPCTraceRule {
                        vpc,
                        direction: dir_name(r.dir).into(),
                        redacted: true,
                        ..VPCTraceRule::default()
                    }
                }
            });
            (ALLOWED, "Rule", rule)
        }
    };
    VPCTraceDirection {
        verdict: verdict.into(),
        decision: decision.into(),
        rule,
    }
}

fn describe(side: &str, d: &VPCTraceDirection) -> String {
    match (d.decision.as_str(), &d.rule) {
        ("Ungrouped", _) => format!("the {side} is in no SecurityGroup (open)"),
        ("DefaultDeny", _) => format!("no rule of the {side}'s SecurityGroups admits it (default deny)"),
        (_, Some(r)) if !r.redacted => format!(
            "SecurityGroup {}/{} spec.{}[{}] admits it at the {side}",
            r.vpc.namespace,
            r.security_group,
            r.direction,
            r.index.unwrap_or_default()
        ),
        (_, Some(r)) => format!(
            "a SecurityGroup {} rule of peered VPC {}/{} admits it at the {side}",
            r.direction, r.vpc.namespace, r.vpc.name
        ),
        _ => format!("a rule admits it at the {side}"),
    }
}

/// The answer for connected ends, from the compiled tables' verdict `d`.
pub fn judged(ns: &str, w: &World, c: &SgCompiler, t: &Tables, flow: &Flow, d: &SgDetail) -> VPCTraceStatus {
    let egress = direction(ns, c, t, flow, Dir::Egress, &flow.src, &flow.dst, d.egress);
    let ingress = direction(ns, c, t, flow, Dir::Ingress, &flow.dst, &flow.src, d.ingress);
    let allowed = d.verdict().allowed();
    let reason = if !allowed {
        "DefaultDeny"
    } else if d.egress.check == Check::Open && d.ingress.check == Check::Open {
        "Ungrouped"
    } else {
        "Rule"
    };
    let message = format!(
        "{}: {}; {}",
        if allowed { ALLOWED } else { DROPPED },
        describe("source", &egress),
        describe("destination", &ingress)
    );
    VPCTraceStatus {
        verdict: if allowed { ALLOWED } else { DROPPED }.into(),
        layer: "SecurityGroup".into(),
        reason: reason.into(),
        message,
        source: resolved(ns, w, Some(t), &flow.src),
        destination: resolved(ns, w, Some(t), &flow.dst),
        egress: Some(egress),
        ingress: Some(ingress),
        ..VPCTraceStatus::default()
    }
}

/// The answer for ends in two VPCs the datapath does not connect (no Ready peering).
pub fn not_connected(ns: &str, w: &World, flow: &Flow) -> VPCTraceStatus {
    let other = if flow.src.local { &flow.dst } else { &flow.src };
    VPCTraceStatus {
        verdict: DROPPED.into(),
        layer: "Isolation".into(),
        reason: "NotConnected".into(),
        message: format!(
            "Dropped: VPC {}/{} is not connected to VPC {}/{} (the peering is not Ready)",
            w.nets[0].vpc.namespace, w.nets[0].vpc.name, other.vpc.namespace, other.vpc.name
        ),
        source: resolved(ns, w, None, &flow.src),
        destination: resolved(ns, w, None, &flow.dst),
        ..VPCTraceStatus::default()
    }
}
