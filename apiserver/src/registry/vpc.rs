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

    fn validate_status_update(&self, new: &VPC, old: &VPC) -> FieldErrors {
        // The VNI is claimed in storage: only the allocator sets it, nobody changes it.
        let vni = |v: &VPC| v.status.as_ref().map_or(0, |s| s.vni);
        let mut errs = FieldErrors::new();
        if vni(new) != vni(old) {
            errs.push(super::validate::FieldError::invalid_int(
                super::validate::FieldPath::new("status").child("vni"),
                i64::from(vni(new)),
                "is allocated by the server and immutable",
            ));
        }
        errs
    }

    fn derive_status(&self, obj: &mut VPC) {
        // The status loop computes the same from the same object; doing it here means the
        // loop finds nothing to write after a create or a spec change.
        let Ok(json) = serde_json::to_value(&*obj) else {
            return;
        };
        let status = crate::controllers::loops::vpc_status(&json);
        if let Ok(status) = serde_json::from_value(status) {
            obj.status = Some(status);
        }
    }

    fn allocator(&self) -> Option<&dyn crate::alloc::Allocator<VPC>> {
        Some(&crate::alloc::kinds::VpcAllocator)
    }
}
