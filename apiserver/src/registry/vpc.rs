//! Registry policy of `VPC`: validation from `crate::validation` and its printer columns.

use cozyplane_apis::v1alpha1::VPC;

use super::strategy::{self, Column};
use super::validate::{field::FieldErrors, validate_vpc, validate_vpc_update};

/// Create/update policy of `VPC`.
pub struct Strategy;

impl strategy::Strategy for Strategy {
    type Object = VPC;

    const COLUMNS: &'static [Column] = &[
        Column {
            name: "CIDRs",
            kind: "string",
            pointer: "/spec/cidrs",
            priority: 0,
            description: "Address ranges of the VPC.",
        },
        Column {
            name: "VNI",
            kind: "integer",
            pointer: "/status/vni",
            priority: 0,
            description: "Overlay network identifier.",
        },
        Column {
            name: "Phase",
            kind: "string",
            pointer: "/status/phase",
            priority: 0,
            description: "Pending or Ready.",
        },
        Column {
            name: "MTU",
            kind: "integer",
            pointer: "/spec/mtu",
            priority: 1,
            description: "Interface MTU (0: node default).",
        },
    ];

    fn validate(&self, obj: &VPC) -> FieldErrors {
        validate_vpc(obj)
    }

    fn validate_update(&self, new: &VPC, old: &VPC) -> FieldErrors {
        validate_vpc_update(new, old)
    }
}
