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
        let mut errs = validate_security_group_update(new, old);
        if new.spec.vpc_ref != old.spec.vpc_ref && old.status.as_ref().is_some_and(|s| s.id != 0) {
            // The id is claimed within the VPC: moving the group would need a new one.
            errs.push(super::validate::FieldError::invalid(
                super::validate::FieldPath::new("spec")
                    .child("vpcRef")
                    .child("name"),
                &new.spec.vpc_ref.name,
                "field is immutable once a group id is allocated",
            ));
        }
        errs
    }

    fn validate_status_update(&self, new: &SecurityGroup, old: &SecurityGroup) -> FieldErrors {
        let id = |g: &SecurityGroup| g.status.as_ref().map_or(0, |s| s.id);
        let mut errs = FieldErrors::new();
        if id(new) != id(old) {
            errs.push(super::validate::FieldError::invalid_int(
                super::validate::FieldPath::new("status").child("id"),
                i64::from(id(new)),
                "is allocated by the server and immutable",
            ));
        }
        if let Some(st) = &new.status {
            super::validate::status::phase(&mut errs, &st.phase, super::validate::status::PHASES);
            super::validate::status::conditions(&mut errs, &st.conditions);
        }
        errs
    }

    fn allocator(&self) -> Option<&dyn crate::alloc::Allocator<cozyplane_apis::v1alpha1::SecurityGroup>> {
        Some(&crate::alloc::kinds::SecurityGroupAllocator)
    }
}
