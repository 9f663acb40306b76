//! Registry policy of `VPC`: validation from `crate::validation` and its printer columns.

use cozyplane_apis::v1alpha1::{VPC, VPCStatus};

use super::condition::condition;

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
        if let Some(st) = &new.status {
            super::validate::status::phase(&mut errs, &st.phase, super::validate::status::PHASES);
            super::validate::status::conditions(&mut errs, &st.conditions);
        }
        errs
    }

    fn derive_status(&self, obj: &mut VPC) {
        // Everything the status says is known inside the write (the VNI is allocated by it), so
        // no controller writes a VPC's status afterwards.
        obj.status = Some(status(obj));
    }

    fn allocator(&self) -> Option<&dyn crate::alloc::Allocator<VPC>> {
        Some(&crate::alloc::kinds::VpcAllocator)
    }
}

/// The status of `vpc`: `Ready` (and the `Ready` condition) once its VNI is allocated.
pub fn status(vpc: &VPC) -> VPCStatus {
    let prev = vpc.status.clone().unwrap_or_default();
    let vni = prev.vni;
    let ready = vni != 0;
    let generation = vpc.metadata.generation.unwrap_or(1);
    let (reason, message) = if ready {
        ("VNIAllocated", format!("VNI {vni} is allocated"))
    } else {
        ("VNIPending", "no VNI is allocated".to_string())
    };
    VPCStatus {
        vni,
        phase: if ready { "Ready" } else { "Pending" }.to_string(),
        conditions: vec![condition(
            &prev.conditions,
            "Ready",
            ready,
            reason,
            &message,
            generation,
        )],
    }
}
