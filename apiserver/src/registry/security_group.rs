//! Registry policy of `SecurityGroup`: validation from `crate::validation` and its printer columns.

use cozyplane_apis::v1alpha1::SecurityGroup;

use super::strategy::{self, Column};
use super::validate::{
    default_security_group, field::FieldErrors, validate_security_group, validate_security_group_update,
};

/// Create/update policy of `SecurityGroup`.
pub struct Strategy;

impl strategy::Strategy for Strategy {
    type Object = SecurityGroup;

    const COLUMNS: &'static [Column] = &[
        Column {
            name: "VPC",
            kind: "string",
            pointer: "/spec/vpcRef/name",
            priority: 0,
            description: "The VPC.",
        },
        Column {
            name: "ID",
            kind: "integer",
            pointer: "/status/id",
            priority: 0,
            description: "Group ID in the datapath.",
        },
        Column {
            name: "Phase",
            kind: "string",
            pointer: "/status/phase",
            priority: 0,
            description: "Pending or Ready.",
        },
    ];

    fn default(&self, obj: &mut SecurityGroup) {
        default_security_group(obj);
    }

    fn validate(&self, obj: &SecurityGroup) -> FieldErrors {
        validate_security_group(obj)
    }

    fn validate_update(&self, new: &SecurityGroup, old: &SecurityGroup) -> FieldErrors {
        validate_security_group_update(new, old)
    }
}
