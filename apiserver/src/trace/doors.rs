//! North-south flows of a VPC trace: one end in the traced VPC, the other outside every VPC
//! the trace knows. The answer follows the datapath's order (`docs/datapath.md`, "North-south
//! doors of a VPC"):
//!
//! * **out** (`sdn_from_pod`, no net reaches the destination): an outside end that is the
//!   cluster's own (a node's fabric block or address) is isolated, never NATed out; then the
//!   source's FloatingIP (its SecurityGroups' egress first); then the VPC's gateway: without
//!   an effective one with a NAT address of the flow's family the flow is refused before any
//!   SecurityGroup (`DROP_NO_GATEWAY`), with one the source's egress decides.
//! * **in** (`sdn_from_uplink`): only a FloatingIP of the destination lets a flow from outside
//!   in, and the destination's SecurityGroups' ingress decides; without one nothing does.
//!
//! Which door serves is what the agents compute from the same objects: a FloatingIP the
//! server's controller made `Ready` (its address assigned, its target a live Port, the oldest
//! for that target) with an address of the target's family; the VPC's effective gateway, its
//! oldest non-deleting VPCGateway (creation time, then name), with `spec.nat.enabled` and a
//! NAT address of the family.

use std::net::IpAddr;

use cozyplane_apis::v1alpha1::{FloatingIP, VPCGateway, VPCTraceDoor, VPCTraceStatus};
use cozyplane_policy::model::Tables;
use cozyplane_policy::sg::SgCompiler;
use cozyplane_policy::verdict::SgDetail;

use super::answer::{self, DROPPED};
use super::resolve::{End, Flow};
use super::world::World;

type Age = (
    Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    String,
);

fn age(m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Age {
    (m.creation_timestamp.clone(), m.name.clone().unwrap_or_default())
}

/// The FloatingIP serving `target`, and its public address of the target's family.
fn floating_ip(w: &World, target: IpAddr) -> Option<(&FloatingIP, IpAddr)> {
    let mut fips: Vec<&FloatingIP> = w
        .fips
        .iter()
        .filter(|f| f.metadata.deletion_timestamp.is_none())
        .filter(|f| {
            f.spec
                .target
                .parse::<IpAddr>()
                .is_ok_and(|t| t.to_canonical() == target)
        })
        .collect();
    fips.sort_by_key(|f| age(&f.metadata));
    let f = fips.into_iter().next()?;
    let st = f.status.as_ref().filter(|s| s.phase == "Ready")?;
    let public = st.address.parse::<IpAddr>().ok()?.to_canonical();
    (public.is_ipv4() == target.is_ipv4()).then_some((f, public))
}

/// The VPC's effective gateway and its NAT address of the family of `v6`, when it NATs.
fn gateway(w: &World, v6: bool) -> Option<(&VPCGateway, IpAddr)> {
    let g = w
        .gateways
        .iter()
        .filter(|g| g.metadata.deletion_timestamp.is_none())
        .min_by_key(|g| age(&g.metadata))?;
    if !g.spec.nat.enabled {
        return None;
    }
    let st = g.status.as_ref()?;
    let address = if v6 { &st.nat_address6 } else { &st.nat_address };
    let nat = address.parse::<IpAddr>().ok()?.to_canonical();
    (nat.is_ipv6() == v6).then_some((g, nat))
}

fn door(kind: &str, name: Option<String>, out: bool, address: IpAddr) -> VPCTraceDoor {
    VPCTraceDoor {
        kind: kind.into(),
        name: name.unwrap_or_default(),
        direction: if out { "out" } else { "in" }.into(),
        address: address.to_string(),
    }
}

/// A refusal before any SecurityGroup: no direction was asked.
fn refused(
    ns: &str,
    w: &World,
    flow: &Flow,
    (layer, reason): (&str, &str),
    message: String,
    notes: Vec<String>,
) -> VPCTraceStatus {
    VPCTraceStatus {
        verdict: DROPPED.into(),
        layer: layer.into(),
        reason: reason.into(),
        message,
        source: answer::resolved(ns, w, None, &flow.src),
        destination: answer::resolved(ns, w, None, &flow.dst),
        notes,
        ..VPCTraceStatus::default()
    }
}

/// The answer for a north-south flow; `d` is the SecurityGroup verdict of the flow with the
/// outside end in the traced VPC's net and no groups.
pub fn judged(ns: &str, w: &World, c: &SgCompiler, t: &Tables, flow: &Flow, d: &SgDetail) -> VPCTraceStatus {
    let out = flow.dst.external;
    let (inside, outside): (&End, &End) = if out {
        (&flow.src, &flow.dst)
    } else {
        (&flow.dst, &flow.src)
    };
    let vpc = &w.nets[0].vpc;
    let mut notes = Vec::new();
    if w.internal.is_empty() {
        notes.push(
            "this server has no connection to the kube-apiserver: the nodes' ranges, which no door serves, are not known to the answer".to_string(),
        );
    }
    notes.push(
        "the agents' --service-cidr and --internal-cidrs ranges are the cluster's own too (no door serves them); the server does not know them".to_string(),
    );
    if w.internal.iter().any(|n| n.contains(&outside.ip)) {
        return refused(
            ns,
            w,
            flow,
            ("Isolation", "ClusterInternal"),
            format!(
                "Dropped: {} is the cluster's own (a node's address or fabric block): VPC {}/{} does not reach it, and no door serves it",
                outside.ip, vpc.namespace, vpc.name
            ),
            notes,
        );
    }
    let through = match (floating_ip(w, inside.ip), out) {
        (Some((f, public)), _) => door("FloatingIP", f.metadata.name.clone(), out, public),
        (None, true) => match gateway(w, inside.ip.is_ipv6()) {
            Some((g, nat)) => door("VPCGateway", g.metadata.name.clone(), true, nat),
            None => {
                return refused(
                    ns,
                    w,
                    flow,
                    ("NorthSouth", "NoGateway"),
                    format!(
                        "Dropped: VPC {}/{} has no way out for {}: no FloatingIP of the source, and no effective VPCGateway with NAT and an {} NAT address",
                        vpc.namespace,
                        vpc.name,
                        inside.ip,
                        if inside.ip.is_ipv6() { "IPv6" } else { "IPv4" }
                    ),
                    notes,
                );
            }
        },
        (None, false) => {
            notes.push(
                "a LoadBalancer Service backed by the destination is a door in too, admitted by the VPCGateway's spec.ingress.loadBalancer; it is not part of this answer".to_string(),
            );
            return refused(
                ns,
                w,
                flow,
                ("NorthSouth", "NoDoor"),
                format!(
                    "Dropped: nothing lets a flow from outside in to {}: it has no FloatingIP (replies to flows it opened pass)",
                    inside.ip
                ),
                notes,
            );
        }
    };
    let mut st = answer::judged(ns, w, c, t, flow, d);
    if st.verdict != DROPPED {
        st.layer = "NorthSouth".into();
        st.reason = if through.kind == "FloatingIP" {
            "FloatingIP"
        } else {
            "Gateway"
        }
        .into();
        st.message = format!(
            "{} through {} {} ({} as {})",
            st.message,
            through.kind,
            through.name,
            if out { "leaves" } else { "enters" },
            through.address
        );
    }
    st.door = Some(through);
    st.notes = notes;
    st
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::world::Net;
    use cozyplane_apis::net::parse_cidr;
    use cozyplane_apis::v1alpha1::VPCRef;
    use cozyplane_policy::verdict::{self, Endpoint};

    /// An outside end in a node's fabric block or address is the cluster's own: isolated
    /// before any door is looked for, even with a gateway that would NAT it.
    #[test]
    fn an_outside_end_of_the_cluster_is_isolated() {
        let vpc = VPCRef {
            namespace: "t1".into(),
            name: "va".into(),
        };
        let mut w = World {
            nets: vec![Net {
                vpc: vpc.clone(),
                vni: 5,
                cidrs: vec![parse_cidr("10.1.0.0/24").unwrap()],
                connected: true,
            }],
            internal: vec![
                parse_cidr("10.244.1.0/24").unwrap(),
                parse_cidr("192.168.10.1/32").unwrap(),
            ],
            ..World::default()
        };
        w.gateways.push(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "gw", "namespace": "t1"},
                "spec": {"vpcRef": {"name": "va"}, "nat": {"enabled": true}},
                "status": {"natAddress": "198.51.100.1"}}))
            .unwrap(),
        );
        let end = |ip: &str, external: bool| End {
            ip: ip.parse().unwrap(),
            vpc: if external { VPCRef::default() } else { vpc.clone() },
            vni: 5,
            connected: true,
            local: !external,
            external,
        };
        let c = SgCompiler::build(std::iter::once(("t1".into(), "va".into(), 5)), &[], &[]);
        let t = c.tables();
        for (dst, want) in [
            ("10.244.1.7", ("Dropped", "Isolation", "ClusterInternal")),
            ("192.168.10.1", ("Dropped", "Isolation", "ClusterInternal")),
            ("192.0.2.1", ("Allowed", "NorthSouth", "Gateway")),
        ] {
            let flow = Flow {
                src: end("10.1.0.2", false),
                dst: end(dst, true),
                proto: 6,
                port: 443,
            };
            let ep = |e: &End| Endpoint { net: e.vni, ip: e.ip };
            let d = verdict::sg_detail(&t, ep(&flow.src), ep(&flow.dst), flow.proto, flow.port);
            let st = judged("t1", &w, &c, &t, &flow, &d);
            assert_eq!(
                (st.verdict.as_str(), st.layer.as_str(), st.reason.as_str()),
                want,
                "{dst}: {st:?}"
            );
        }
    }
}
