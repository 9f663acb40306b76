//! Registry policy of `VPCPeering`: validation from `crate::validation`, its printer columns and
//! the `peer` virtual verb.
//!
//! A peering half offers the local VPC to the peer, so creating one needs `peer` on the local
//! `vpcs` object (same namespace, `spec.vpcRef.name`), decided by a SubjectAccessReview for the
//! requesting user (see `docs/tenancy.md`). The other half, in the peer's namespace, needs the
//! same from its owner; the peering becomes Ready only when both exist.

use cozyplane_apis::net::cidr_lists_overlap;
use cozyplane_apis::v1alpha1::{VPC, VPCPeering, VPCPeeringStatus};

use super::condition::condition;

use super::hooks::VerbCheck;
use super::strategy::{self, Column};
use super::validate::{field::FieldErrors, validate_vpc_peering, validate_vpc_peering_update};

/// Create/update policy of `VPCPeering`.
pub struct Strategy;

impl strategy::Strategy for Strategy {
    type Object = VPCPeering;

    const COLUMNS: &'static [Column] = &[
        Column {
            name: "VPC",
            kind: "string",
            pointer: "/spec/vpcRef/name",
            priority: 0,
            description: "The local VPC.",
        },
        Column {
            name: "Peer",
            kind: "string",
            pointer: "/spec/peerRef/name",
            priority: 0,
            description: "The peer VPC.",
        },
        Column {
            name: "Phase",
            kind: "string",
            pointer: "/status/phase",
            priority: 0,
            description: "Pending or Ready.",
        },
        Column {
            name: "Peer Namespace",
            kind: "string",
            pointer: "/spec/peerRef/namespace",
            priority: 1,
            description: "Namespace of the peer VPC.",
        },
        Column {
            name: "Peer VNI",
            kind: "integer",
            pointer: "/status/peerVNI",
            priority: 1,
            description: "VNI of the peer VPC.",
        },
    ];

    fn validate(&self, obj: &VPCPeering) -> FieldErrors {
        validate_vpc_peering(obj)
    }

    fn validate_update(&self, new: &VPCPeering, old: &VPCPeering) -> FieldErrors {
        validate_vpc_peering_update(new, old)
    }

    fn validate_status_update(&self, new: &VPCPeering, _old: &VPCPeering) -> FieldErrors {
        use super::validate::{FieldError, FieldPath, status};
        let mut errs = FieldErrors::new();
        if let Some(st) = &new.status {
            status::phase(&mut errs, &st.phase, status::PHASES);
            status::conditions(&mut errs, &st.conditions);
            if !(0..=0x00ff_ffff).contains(&st.peer_vni) {
                errs.push(FieldError::invalid_int(
                    FieldPath::new("status").child("peerVNI"),
                    i64::from(st.peer_vni),
                    "must be a VNI (0 to 16777215)",
                ));
            }
        }
        errs
    }

    fn create_checks(&self, obj: &VPCPeering) -> Vec<VerbCheck> {
        vec![peer(obj)]
    }

    fn update_checks(&self, new: &VPCPeering, old: &VPCPeering) -> Vec<VerbCheck> {
        if new.spec.vpc_ref == old.spec.vpc_ref {
            Vec::new()
        } else {
            vec![peer(new)]
        }
    }
}

/// `peer` on the local VPC of a peering half.
fn peer(obj: &VPCPeering) -> VerbCheck {
    use kube_core::Resource as _;
    VerbCheck {
        verb: "peer",
        resource: "vpcs",
        namespace: obj.meta().namespace.clone().unwrap_or_default(),
        name: obj.spec.vpc_ref.name.clone(),
    }
}

/// Whether `q` is the live reciprocal half of `p` (in `p`'s peer namespace, naming `p`'s VPC).
pub fn reciprocates(p: &VPCPeering, q: &VPCPeering) -> bool {
    let ns = p.metadata.namespace.as_deref().unwrap_or_default();
    q.metadata.namespace.as_deref().unwrap_or_default() == p.spec.peer_ref.namespace
        && q.spec.vpc_ref.name == p.spec.peer_ref.name
        && q.spec.peer_ref.namespace == ns
        && q.spec.peer_ref.name == p.spec.vpc_ref.name
        && q.metadata.deletion_timestamp.is_none()
}

/// The status of peering half `p` given its local VPC, the peer VPC and whether the reciprocal
/// half exists: `Ready` only when both halves exist, both VPCs have a VNI and no CIDR of one
/// overlaps a CIDR of the other.
pub fn status(p: &VPCPeering, local: Option<&VPC>, remote: Option<&VPC>, matched: bool) -> VPCPeeringStatus {
    let prev = p.status.clone().unwrap_or_default();
    let vni = |v: Option<&VPC>| v.and_then(|v| v.status.as_ref()).map_or(0, |s| s.vni);
    let local_ready = vni(local) != 0;
    let peer_ready = vni(remote) != 0;
    let disjoint = match (local, remote) {
        (Some(l), Some(r)) => !cidr_lists_overlap(&l.spec.cidrs, &r.spec.cidrs),
        _ => false,
    };
    // A v4-only VPC and a v6-only one would share no address: their pods could only meet
    // through a translation, which cozyplane never does between tenants (issue 28).
    let shared = match (local, remote) {
        (Some(l), Some(r)) => {
            let (a, b) = (families(l), families(r));
            (a.0 && b.0) || (a.1 && b.1)
        }
        _ => false,
    };
    let generation = p.metadata.generation.unwrap_or(1);
    let c = |ty: &str, ok: bool, what: &str| {
        let (reason, message) = if ok {
            (ty.to_string(), what.to_string())
        } else {
            (format!("{ty}Missing"), format!("not {what}"))
        };
        condition(&prev.conditions, ty, ok, &reason, &message, generation)
    };
    let ready = matched && local_ready && peer_ready && disjoint && shared;
    VPCPeeringStatus {
        phase: if ready { "Ready" } else { "Pending" }.to_string(),
        peer_vni: vni(remote),
        conditions: vec![
            c("PeerMatched", matched, "matched by a reciprocal peering"),
            c("VPCReady", local_ready, "local VPC ready"),
            c("PeerVPCReady", peer_ready, "peer VPC ready"),
            c("CIDRsDisjoint", disjoint, "disjoint CIDRs"),
            c("FamilyShared", shared, "an address family in common"),
        ],
    }
}

/// Whether `vpc` has an IPv4 range, an IPv6 range.
fn families(vpc: &VPC) -> (bool, bool) {
    let nets = || {
        vpc.spec
            .cidrs
            .iter()
            .filter_map(|c| c.parse::<cozyplane_apis::net::IpNet>().ok())
    };
    (
        nets().any(|n| n.addr().is_ipv4()),
        nets().any(|n| n.addr().is_ipv6()),
    )
}

#[cfg(test)]
mod tests {
    use cozyplane_apis::v1alpha1::{LocalVPCRef, VPCPeeringSpec, VPCRef};

    use super::*;
    use crate::registry::strategy::Strategy as _;

    #[test]
    fn peer_is_checked_on_the_local_vpc() {
        let mut p = VPCPeering {
            spec: VPCPeeringSpec {
                vpc_ref: LocalVPCRef { name: "a".into() },
                peer_ref: VPCRef {
                    namespace: "t2".into(),
                    name: "b".into(),
                },
            },
            ..Default::default()
        };
        p.metadata.namespace = Some("t1".into());
        assert_eq!(
            Strategy.create_checks(&p),
            vec![VerbCheck {
                verb: "peer",
                resource: "vpcs",
                namespace: "t1".into(),
                name: "a".into()
            }]
        );
        assert!(Strategy.update_checks(&p, &p).is_empty());
    }

    fn vpc(ns: &str, name: &str, vni: i32, cidr: &str) -> VPC {
        let mut v = VPC::new(
            name,
            cozyplane_apis::v1alpha1::VPCSpec {
                cidrs: vec![cidr.into()],
                mtu: 0,
                dhcp: None,
                dns64: false,
            },
        );
        v.metadata.namespace = Some(ns.into());
        v.status = Some(cozyplane_apis::v1alpha1::VPCStatus {
            vni,
            ..Default::default()
        });
        v
    }

    fn half(ns: &str, local: &str, pns: &str, peer: &str) -> VPCPeering {
        let mut p = VPCPeering::new(
            &format!("{local}-{peer}"),
            VPCPeeringSpec {
                vpc_ref: LocalVPCRef { name: local.into() },
                peer_ref: VPCRef {
                    namespace: pns.into(),
                    name: peer.into(),
                },
            },
        );
        p.metadata.namespace = Some(ns.into());
        p.metadata.generation = Some(1);
        p
    }

    fn cond<'a>(
        st: &'a VPCPeeringStatus,
        ty: &str,
    ) -> &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
        st.conditions.iter().find(|c| c.type_ == ty).unwrap()
    }

    #[test]
    fn ready_only_with_a_reciprocal_half_and_disjoint_cidrs() {
        let (x, y) = (
            vpc("a", "x", 100, "10.0.0.0/24"),
            vpc("b", "y", 101, "10.1.0.0/24"),
        );
        let p = half("a", "x", "b", "y");
        let q = half("b", "y", "a", "x");
        assert!(reciprocates(&p, &q) && reciprocates(&q, &p));
        assert!(!reciprocates(&p, &half("b", "y", "a", "other")));
        let st = status(&p, Some(&x), Some(&y), false);
        assert_eq!(st.phase, "Pending");
        assert_eq!(cond(&st, "PeerMatched").reason, "PeerMatchedMissing");
        assert_eq!(st.peer_vni, 101);
        let st = status(&p, Some(&x), Some(&y), true);
        assert_eq!(st.phase, "Ready", "{st:?}");
        assert_eq!(cond(&st, "CIDRsDisjoint").status, "True");
        assert_eq!(cond(&st, "VPCReady").observed_generation, Some(1));
        let y = vpc("b", "y", 101, "10.0.0.0/16");
        let st = status(&p, Some(&x), Some(&y), true);
        assert_eq!(st.phase, "Pending");
        assert_eq!(cond(&st, "CIDRsDisjoint").status, "False");
    }

    #[test]
    fn a_v4_only_and_a_v6_only_vpc_are_never_peered() {
        let p = half("a", "x", "b", "y");
        let x = vpc("a", "x", 100, "10.0.0.0/24");
        let st = status(&p, Some(&x), Some(&vpc("b", "y", 101, "fd00:6::/64")), true);
        assert_eq!(st.phase, "Pending");
        assert_eq!(cond(&st, "FamilyShared").reason, "FamilySharedMissing");
        assert_eq!(cond(&st, "CIDRsDisjoint").status, "True");
        let mut dual = vpc("b", "y", 101, "fd00:6::/64");
        dual.spec.cidrs.push("10.1.0.0/24".into());
        let st = status(&p, Some(&x), Some(&dual), true);
        assert_eq!(
            (st.phase.as_str(), cond(&st, "FamilyShared").status.as_str()),
            ("Ready", "True")
        );
    }
}
