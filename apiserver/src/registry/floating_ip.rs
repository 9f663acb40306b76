//! Registry policy of `FloatingIP`: validation from `crate::validation` and its printer columns.

use cozyplane_apis::v1alpha1::FloatingIP;

use super::strategy::{self, Column};
use super::validate::{field::FieldErrors, validate_floating_ip, validate_floating_ip_update};

/// Create/update policy of `FloatingIP`.
pub struct Strategy;

impl strategy::Strategy for Strategy {
    type Object = FloatingIP;

    const COLUMNS: &'static [Column] = &[
        Column {
            name: "VPC",
            kind: "string",
            pointer: "/spec/vpcRef/name",
            priority: 0,
            description: "The VPC.",
        },
        Column {
            name: "Target",
            kind: "string",
            pointer: "/spec/target",
            priority: 0,
            description: "Address inside the VPC.",
        },
        Column {
            name: "Address",
            kind: "string",
            pointer: "/status/address",
            priority: 0,
            description: "The public address.",
        },
        Column {
            name: "Phase",
            kind: "string",
            pointer: "/status/phase",
            priority: 0,
            description: "Pending or Ready.",
        },
    ];

    fn validate(&self, obj: &FloatingIP) -> FieldErrors {
        validate_floating_ip(obj)
    }

    fn validate_update(&self, new: &FloatingIP, old: &FloatingIP) -> FieldErrors {
        validate_floating_ip_update(new, old)
    }

    fn validate_status_update(&self, new: &FloatingIP, _old: &FloatingIP) -> FieldErrors {
        use super::validate::status;
        let mut errs = FieldErrors::new();
        if let Some(st) = &new.status {
            status::phase(&mut errs, &st.phase, status::PHASES);
            status::conditions(&mut errs, &st.conditions);
            status::address(&mut errs, "address", &st.address, None);
        }
        errs
    }
}
