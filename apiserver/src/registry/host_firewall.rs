//! Registry policy of `HostFirewall`: validation from `crate::validation` and its printer columns.

use cozyplane_apis::v1alpha1::HostFirewall;

use super::strategy::{self, Column};
use super::validate::{
    default_host_firewall, field::FieldErrors, validate_host_firewall, validate_host_firewall_update,
};

/// Create/update policy of `HostFirewall`.
pub struct Strategy;

impl strategy::Strategy for Strategy {
    type Object = HostFirewall;

    const COLUMNS: &'static [Column] = &[Column {
        name: "Policy Types",
        kind: "string",
        pointer: "/spec/policyTypes",
        priority: 0,
        description: "Ingress and/or Egress.",
    }];

    fn default(&self, obj: &mut HostFirewall) {
        default_host_firewall(obj);
    }

    fn validate(&self, obj: &HostFirewall) -> FieldErrors {
        validate_host_firewall(obj)
    }

    fn validate_update(&self, new: &HostFirewall, old: &HostFirewall) -> FieldErrors {
        validate_host_firewall_update(new, old)
    }

    fn validate_status_update(&self, new: &HostFirewall, _old: &HostFirewall) -> FieldErrors {
        let mut errs = FieldErrors::new();
        if let Some(st) = &new.status {
            super::validate::status::conditions(&mut errs, &st.conditions);
        }
        errs
    }
}
