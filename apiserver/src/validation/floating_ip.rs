//! `FloatingIP`: a public address forwarded to one VPC address.
//!
//! Rules (the Go server checked none):
//! - `metadata.name` is a DNS-1035 label: it prefixes the name of the owned LoadBalancer Service
//!   (`<fip>-…`, a DNS-1035 label) and is the value of its `sdn.cozystack.io/floating-ip` label;
//! - `spec.vpcRef.name` is a required DNS-1123 label;
//! - `spec.target` is a required canonical address outside the reserved ranges (it becomes an
//!   EndpointSlice address, which Kubernetes also requires to be canonical);
//! - `spec.loadBalancerClass`, when set, is a qualified name;
//! - `spec.addressClaimName`, when set, is an object name (DNS-1123 subdomain);
//! - `spec.ipFamily` is empty, `IPv4` or `IPv6`, and `IPv6` only for an IPv6 target.
//!
//! The spec stays mutable. Whether `target` lies in the VPC's range needs a read and is left to
//! the controller (condition `TargetLive`).

use cozyplane_apis::v1alpha1::FloatingIP;

use super::common;
use super::field::{FieldError, FieldErrors, FieldPath};
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
    ip_family(&mut errs, path.child("ipFamily"), spec);
    errs
}

/// `spec.ipFamily`: empty, `IPv4` or `IPv6`; an IPv6 public address of an IPv4 target would be
/// NAT64 into an IPv4 pod, which the datapath does not do.
fn ip_family(errs: &mut FieldErrors, path: FieldPath, spec: &cozyplane_apis::v1alpha1::FloatingIPSpec) {
    match spec.ip_family.as_str() {
        "" | "IPv4" => {}
        "IPv6" => {
            if spec.target.parse::<std::net::IpAddr>().is_ok_and(|t| t.is_ipv4()) {
                errs.push(FieldError::invalid(
                    path,
                    &spec.ip_family,
                    "an IPv6 public address needs an IPv6 target (only IPv4 is translated to IPv6 targets)",
                ));
            }
        }
        other => errs.push(FieldError::not_supported(path, other, &["IPv4", "IPv6"])),
    }
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
                ip_family: String::new(),
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
    fn the_ip_family_is_a_known_one_and_never_ipv6_for_an_ipv4_target() {
        let with = |target: &str, family: &str| {
            let mut f = fip("web", target);
            f.spec.ip_family = family.into();
            validate_floating_ip(&f)
        };
        assert_errors(&with("fd00:10::2", "IPv4"), &[]);
        assert_errors(&with("fd00:10::2", "IPv6"), &[]);
        assert_errors(&with("10.0.0.2", "IPv4"), &[]);
        assert_errors(
            &with("10.0.0.2", "IPv6"),
            &[("spec.ipFamily", ErrorType::Invalid)],
        );
        assert_errors(
            &with("10.0.0.2", "ipv4"),
            &[("spec.ipFamily", ErrorType::NotSupported)],
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
