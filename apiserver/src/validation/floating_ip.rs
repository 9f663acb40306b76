//! `FloatingIP`: a public address forwarded to one VPC address.
//!
//! Rules (the Go server checked none):
//! - `metadata.name` is a DNS-1035 label: it prefixes the name of the owned LoadBalancer Service
//!   (`<fip>-…`, a DNS-1035 label) and is the value of its `sdn.cozystack.io/floating-ip` label;
//! - `spec.vpcRef.name` is a required DNS-1123 label;
//! - `spec.target` is a required canonical address outside the reserved ranges (it becomes an
//!   EndpointSlice address, which Kubernetes also requires to be canonical);
//! - `spec.loadBalancerClass`, when set, is a qualified name;
//! - `spec.addressClaimName`, when set, is an object name (DNS-1123 subdomain).
//!
//! The spec stays mutable. Whether `target` lies in the VPC's range needs a read and is left to
//! the controller (condition `TargetLive`).

use cozyplane_apis::v1alpha1::FloatingIP;

use super::common;
use super::field::{FieldErrors, FieldPath};
use super::format;
use super::meta::{NameRule, validate_object_meta_named, validate_object_meta_update};

/// Validates a new FloatingIP: metadata and spec.
pub fn validate_floating_ip(fip: &FloatingIP) -> FieldErrors {
    let mut errs = validate_object_meta_named(&fip.metadata, true, NameRule::Dns1035Label);
    let spec = &fip.spec;
    let path = FieldPath::new("spec");
    common::local_vpc_ref(&mut errs, &spec.vpc_ref, &path.child("vpcRef"));
    common::host_ip(&mut errs, path.child("target"), &spec.target);
    common::optional_str(
        &mut errs,
        path.child("loadBalancerClass"),
        &spec.load_balancer_class,
        format::qualified_name,
    );
    common::optional_str(
        &mut errs,
        path.child("addressClaimName"),
        &spec.address_claim_name,
        format::dns1123_subdomain,
    );
    errs
}

/// Validates an update of a FloatingIP: the create rules and the metadata update rules.
pub fn validate_floating_ip_update(new: &FloatingIP, old: &FloatingIP) -> FieldErrors {
    let mut errs = validate_floating_ip(new);
    errs.extend(validate_object_meta_update(&new.metadata, &old.metadata));
    errs
}

#[cfg(test)]
mod tests {
    use cozyplane_apis::v1alpha1::{FloatingIPSpec, LocalVPCRef};
    use proptest::prelude::*;

    use super::*;
    use crate::validation::ErrorType;
    use crate::validation::test_util::assert_errors;

    fn fip(name: &str, target: &str) -> FloatingIP {
        let mut f = FloatingIP::new(
            name,
            FloatingIPSpec {
                vpc_ref: LocalVPCRef { name: "blue".into() },
                target: target.into(),
                load_balancer_class: String::new(),
                address_claim_name: "public-1".into(),
            },
        );
        f.metadata.namespace = Some("tenant-a".into());
        f
    }

    #[test]
    fn valid_floating_ips_pass() {
        assert_errors(&validate_floating_ip(&fip("web", "10.0.0.2")), &[]);
        assert_errors(&validate_floating_ip(&fip("web6", "fd00:10::2")), &[]);
    }

    #[test]
    fn target_rules() {
        assert_errors(
            &validate_floating_ip(&fip("web", "")),
            &[("spec.target", ErrorType::Required)],
        );
        for bad in [
            "10.0.0",
            "10.0.0.2/32",
            "FD00::2",
            "169.254.1.1",
            "ff02::1",
            "web-0",
        ] {
            assert_errors(
                &validate_floating_ip(&fip("web", bad)),
                &[("spec.target", ErrorType::Invalid)],
            );
        }
    }

    #[test]
    fn all_problems_are_reported() {
        let mut f = fip("9web", "x");
        f.spec.vpc_ref.name.clear();
        f.spec.load_balancer_class = "a/b/c".into();
        f.spec.address_claim_name = "Public".into();
        assert_errors(
            &validate_floating_ip(&f),
            &[
                ("metadata.name", ErrorType::Invalid),
                ("spec.vpcRef.name", ErrorType::Required),
                ("spec.target", ErrorType::Invalid),
                ("spec.loadBalancerClass", ErrorType::Invalid),
                ("spec.addressClaimName", ErrorType::Invalid),
            ],
        );
    }

    #[test]
    fn update_may_retarget() {
        let old = fip("web", "10.0.0.2");
        assert_errors(&validate_floating_ip_update(&fip("web", "10.0.0.3"), &old), &[]);
    }

    proptest! {
        #[test]
        fn random_strings_never_panic(name in "\\PC{0,70}", target in "\\PC{0,45}") {
            let _ = validate_floating_ip(&fip(&name, &target));
        }
    }
}
