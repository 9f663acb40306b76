//! Registry policy of `VPCBinding`: validation from `crate::validation`, its printer columns and
//! the `export` virtual verb.
//!
//! Binding a namespace to a VPC lets its pods join that VPC, so creating a binding (or pointing
//! an existing one at another VPC) needs `export` on the referenced `vpcs` object, decided by a
//! SubjectAccessReview for the requesting user (see `docs/tenancy.md`).

use cozyplane_apis::v1alpha1::VPCBinding;
use kube_core::Resource as _;

use super::hooks::VerbCheck;
use super::strategy::{self, Column};
use super::validate::{
    default_vpc_binding, field::FieldErrors, validate_vpc_binding, validate_vpc_binding_update,
};

/// The finalizer every binding carries from its create on: deleting the binding reaps the Ports
/// it authorized before the binding goes.
pub const REAP_PORTS: &str = "sdn.cozystack.io/reap-ports";

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

    fn prepare_for_create(&self, obj: &mut VPCBinding) {
        cozyplane_apis::HasSpecStatus::reset_status(obj);
        // Set inside the create, not by a controller afterwards: one write and one watch event
        // per binding.
        let f = obj.meta_mut().finalizers.get_or_insert_with(Vec::new);
        if !f.iter().any(|x| x == REAP_PORTS) {
            f.push(REAP_PORTS.to_string());
        }
    }

    fn default(&self, obj: &mut VPCBinding) {
        default_vpc_binding(obj);
    }

    fn validate(&self, obj: &VPCBinding) -> FieldErrors {
        validate_vpc_binding(obj)
    }

    fn validate_update(&self, new: &VPCBinding, old: &VPCBinding) -> FieldErrors {
        validate_vpc_binding_update(new, old)
    }

    fn create_checks(&self, obj: &VPCBinding) -> Vec<VerbCheck> {
        vec![export(obj)]
    }

    fn update_checks(&self, new: &VPCBinding, old: &VPCBinding) -> Vec<VerbCheck> {
        if new.spec.vpc_ref == old.spec.vpc_ref {
            Vec::new()
        } else {
            vec![export(new)]
        }
    }
}

/// The VPC a binding grants: `(namespace, name)`, the namespace defaulting to the binding's.
pub fn granted(b: &VPCBinding) -> (String, String) {
    let ns = match b.spec.vpc_ref.namespace.as_str() {
        "" => b.metadata.namespace.clone().unwrap_or_default(),
        n => n.to_string(),
    };
    (ns, b.spec.vpc_ref.name.clone())
}

/// `export` on the VPC a binding references.
fn export(obj: &VPCBinding) -> VerbCheck {
    VerbCheck {
        verb: "export",
        resource: "vpcs",
        namespace: obj.spec.vpc_ref.namespace.clone(),
        name: obj.spec.vpc_ref.name.clone(),
    }
}

#[cfg(test)]
mod tests {
    use cozyplane_apis::v1alpha1::{VPCBindingSpec, VPCRef};

    use super::*;
    use crate::registry::strategy::Strategy as _;

    fn binding(ns: &str, name: &str) -> VPCBinding {
        VPCBinding {
            spec: VPCBindingSpec {
                vpc_ref: VPCRef {
                    namespace: ns.into(),
                    name: name.into(),
                },
            },
            ..Default::default()
        }
    }

    #[test]
    fn export_is_checked_on_create_and_on_a_changed_reference() {
        let b = binding("t2", "v");
        assert_eq!(
            Strategy.create_checks(&b),
            vec![VerbCheck {
                verb: "export",
                resource: "vpcs",
                namespace: "t2".into(),
                name: "v".into()
            }]
        );
        assert!(Strategy.update_checks(&b, &b).is_empty());
        assert_eq!(Strategy.update_checks(&binding("t3", "v"), &b).len(), 1);
    }
}
