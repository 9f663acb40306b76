//! `VPCBinding`: the reference to the VPC a namespace may attach to.
//!
//! Rules: `spec.vpcRef.namespace` and `spec.vpcRef.name` are required DNS-1123 labels. The Go
//! server accepted an empty namespace, authorized it against the binding's own namespace, and
//! then the CNI never matched it (it compares namespaces exactly); here the namespace is
//! defaulted to the binding's own ([`default_vpc_binding`]) and required after that.
//!
//! The spec is mutable; the server re-runs the `export` authorization when `vpcRef` changes
//! (not a validation rule: it needs the requesting user).

use cozyplane_apis::v1alpha1::VPCBinding;

use super::common;
use super::field::{FieldErrors, FieldPath};
use super::meta::{validate_object_meta, validate_object_meta_update};

/// Validates a new VPCBinding: metadata and spec.
pub fn validate_vpc_binding(binding: &VPCBinding) -> FieldErrors {
    let mut errs = validate_object_meta(&binding.metadata, true);
    common::vpc_ref(
        &mut errs,
        &binding.spec.vpc_ref,
        &FieldPath::new("spec").child("vpcRef"),
    );
    errs
}

/// Validates an update of a VPCBinding: the create rules and the metadata update rules.
pub fn validate_vpc_binding_update(new: &VPCBinding, old: &VPCBinding) -> FieldErrors {
    let mut errs = validate_vpc_binding(new);
    errs.extend(validate_object_meta_update(&new.metadata, &old.metadata));
    errs
}

/// Defaults an empty `spec.vpcRef.namespace` to the binding's own namespace, which is what the
/// authorization check assumed and what a same-namespace binding means.
///
/// Call after the server has set `metadata.namespace` from the request path.
pub fn default_vpc_binding(binding: &mut VPCBinding) {
    if binding.spec.vpc_ref.namespace.is_empty()
        && let Some(ns) = binding.metadata.namespace.as_ref().filter(|ns| !ns.is_empty())
    {
        binding.spec.vpc_ref.namespace = ns.clone();
    }
}

#[cfg(test)]
mod tests {
    use cozyplane_apis::v1alpha1::{VPCBindingSpec, VPCRef};
    use proptest::prelude::*;

    use super::*;
    use crate::validation::ErrorType;
    use crate::validation::test_util::assert_errors;

    fn binding(ns: &str, name: &str) -> VPCBinding {
        let mut b = VPCBinding::new(
            "use-blue",
            VPCBindingSpec {
                vpc_ref: VPCRef {
                    namespace: ns.into(),
                    name: name.into(),
                },
            },
        );
        b.metadata.namespace = Some("consumer".into());
        b
    }

    #[test]
    fn valid_binding_passes() {
        assert_errors(&validate_vpc_binding(&binding("owner", "blue")), &[]);
    }

    #[test]
    fn ref_fields_are_required_labels() {
        assert_errors(
            &validate_vpc_binding(&binding("", "")),
            &[
                ("spec.vpcRef.namespace", ErrorType::Required),
                ("spec.vpcRef.name", ErrorType::Required),
            ],
        );
        assert_errors(
            &validate_vpc_binding(&binding("Owner", "blue.green")),
            &[
                ("spec.vpcRef.namespace", ErrorType::Invalid),
                ("spec.vpcRef.name", ErrorType::Invalid),
            ],
        );
    }

    #[test]
    fn defaulting_fills_the_own_namespace() {
        let mut b = binding("", "blue");
        default_vpc_binding(&mut b);
        assert_eq!(b.spec.vpc_ref.namespace, "consumer");
        assert_errors(&validate_vpc_binding(&b), &[]);
        let mut other = binding("owner", "blue");
        default_vpc_binding(&mut other);
        assert_eq!(other.spec.vpc_ref.namespace, "owner");
    }

    #[test]
    fn update_may_change_the_ref_but_not_the_name() {
        let old = binding("owner", "blue");
        assert_errors(
            &validate_vpc_binding_update(&binding("owner", "green"), &old),
            &[],
        );
        let mut renamed = old.clone();
        renamed.metadata.name = Some("x".into());
        assert_errors(
            &validate_vpc_binding_update(&renamed, &old),
            &[("metadata.name", ErrorType::Invalid)],
        );
    }

    proptest! {
        #[test]
        fn random_refs_never_panic(ns in "\\PC{0,70}", name in "\\PC{0,70}") {
            let _ = validate_vpc_binding(&binding(&ns, &name));
        }
    }
}
