//! Registry policy of `VPCPeering`: validation from `crate::validation` and its printer columns.

use cozyplane_apis::v1alpha1::VPCPeering;

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
}
