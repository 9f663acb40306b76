//! Registry policy of `VPCBinding`: validation from `crate::validation` and its printer columns.

use cozyplane_apis::v1alpha1::VPCBinding;

use super::strategy::{self, Column};
use super::validate::{
    default_vpc_binding, field::FieldErrors, validate_vpc_binding, validate_vpc_binding_update,
};

/// Create/update policy of `VPCBinding`.
pub struct Strategy;

impl strategy::Strategy for Strategy {
    type Object = VPCBinding;

    const COLUMNS: &'static [Column] = &[
        Column {
            name: "VPC Namespace",
            kind: "string",
            pointer: "/spec/vpcRef/namespace",
            priority: 0,
            description: "Namespace of the bound VPC.",
        },
        Column {
            name: "VPC",
            kind: "string",
            pointer: "/spec/vpcRef/name",
            priority: 0,
            description: "Name of the bound VPC.",
        },
    ];

    fn default(&self, obj: &mut VPCBinding) {
        default_vpc_binding(obj);
    }

    fn validate(&self, obj: &VPCBinding) -> FieldErrors {
        validate_vpc_binding(obj)
    }

    fn validate_update(&self, new: &VPCBinding, old: &VPCBinding) -> FieldErrors {
        validate_vpc_binding_update(new, old)
    }
}
