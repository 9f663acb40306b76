//! Registry policy of `VPCPeering`: validation from `crate::validation`, its printer columns and
//! the `peer` virtual verb.
//!
//! A peering half offers the local VPC to the peer, so creating one needs `peer` on the local
//! `vpcs` object (same namespace, `spec.vpcRef.name`), decided by a SubjectAccessReview for the
//! requesting user (see `docs/tenancy.md`). The other half, in the peer's namespace, needs the
//! same from its owner; the peering becomes Ready only when both exist.

use cozyplane_apis::v1alpha1::VPCPeering;

use super::strategy::{self, Column};
use super::validate::{field::FieldErrors, validate_vpc_peering, validate_vpc_peering_update};
use crate::admission::VerbCheck;

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
}
