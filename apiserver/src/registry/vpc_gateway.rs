//! Registry policy of `VPCGateway`: validation from `crate::validation` and its printer columns.

use cozyplane_apis::v1alpha1::VPCGateway;

use super::strategy::{self, Column};
use super::validate::{field::FieldErrors, validate_vpc_gateway, validate_vpc_gateway_update};

/// Create/update policy of `VPCGateway`.
pub struct Strategy;

impl strategy::Strategy for Strategy {
    type Object = VPCGateway;

    const COLUMNS: &'static [Column] = &[
        Column {
            name: "VPC",
            kind: "string",
            pointer: "/spec/vpcRef/name",
            priority: 0,
            description: "The VPC.",
        },
        Column {
            name: "NAT Address",
            kind: "string",
            pointer: "/status/natAddress",
            priority: 0,
            description: "Egress NAT address.",
        },
        Column {
            name: "Phase",
            kind: "string",
            pointer: "/status/phase",
            priority: 0,
            description: "Pending or Ready.",
        },
        Column {
            name: "NAT",
            kind: "boolean",
            pointer: "/spec/nat/enabled",
            priority: 1,
            description: "Egress NAT enabled.",
        },
    ];

    fn validate(&self, obj: &VPCGateway) -> FieldErrors {
        validate_vpc_gateway(obj)
    }

    fn validate_update(&self, new: &VPCGateway, old: &VPCGateway) -> FieldErrors {
        validate_vpc_gateway_update(new, old)
    }
}
