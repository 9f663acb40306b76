//! `VPCGateway`: the north-south boundary of a VPC.
//!
//! Rules:
//! - `metadata.name` is a DNS-1035 label: the gateway's name prefixes the names of the
//!   LoadBalancer Services it owns (`<gw>-v4-…`), which must be DNS-1035 labels, and is the
//!   value of their `sdn.cozystack.io/vpc-gateway` label (at most 63 characters);
//! - `spec.vpcRef.name` is a required DNS-1123 label;
//! - `spec.loadBalancerClass`, when set, is a qualified name (as Kubernetes requires of a
//!   Service's `loadBalancerClass`, where it is copied);
//! - `spec.nat.addressClaimName` and `addressClaimName6`, when set, are object names (DNS-1123
//!   subdomains) of `IPAddressClaim`s.
//!
//! The whole spec stays mutable, as in the Go server. Nothing is defaulted.

use cozyplane_apis::v1alpha1::VPCGateway;

use super::common;
use super::field::{FieldErrors, FieldPath};
use super::format;
use super::meta::{NameRule, validate_object_meta_named, validate_object_meta_update};

/// Validates a new VPCGateway: metadata and spec.
pub fn validate_vpc_gateway(gw: &VPCGateway) -> FieldErrors {
    let mut errs = validate_object_meta_named(&gw.metadata, true, NameRule::Dns1035Label);
    let spec = &gw.spec;
    let path = FieldPath::new("spec");
    common::local_vpc_ref(&mut errs, &spec.vpc_ref, &path.child("vpcRef"));
    common::optional_str(
        &mut errs,
        path.child("loadBalancerClass"),
        &spec.load_balancer_class,
        format::qualified_name,
    );
    let nat = path.child("nat");
    common::optional_str(
        &mut errs,
        nat.child("addressClaimName"),
        &spec.nat.address_claim_name,
        format::dns1123_subdomain,
    );
    common::optional_str(
        &mut errs,
        nat.child("addressClaimName6"),
        &spec.nat.address_claim_name6,
        format::dns1123_subdomain,
    );
    errs
}

/// Validates an update of a VPCGateway: the create rules and the metadata update rules.
pub fn validate_vpc_gateway_update(new: &VPCGateway, old: &VPCGateway) -> FieldErrors {
    let mut errs = validate_vpc_gateway(new);
    errs.extend(validate_object_meta_update(&new.metadata, &old.metadata));
    errs
}

#[cfg(test)]
mod tests {
    use cozyplane_apis::v1alpha1::{LocalVPCRef, VPCGatewayNAT, VPCGatewaySpec};
    use proptest::prelude::*;

    use super::*;
    use crate::validation::ErrorType;
    use crate::validation::test_util::assert_errors;

    fn gateway(name: &str, vpc: &str) -> VPCGateway {
        let mut g = VPCGateway::new(
            name,
            VPCGatewaySpec {
                vpc_ref: LocalVPCRef { name: vpc.into() },
                load_balancer_class: "example.com/lb".into(),
                nat: VPCGatewayNAT {
                    enabled: true,
                    address_claim_name: "egress-v4".into(),
                    address_claim_name6: String::new(),
                },
                ..VPCGatewaySpec::default()
            },
        );
        g.metadata.namespace = Some("tenant-a".into());
        g
    }

    #[test]
    fn valid_gateway_passes() {
        assert_errors(&validate_vpc_gateway(&gateway("edge", "blue")), &[]);
    }

    #[test]
    fn every_rule_has_a_path() {
        let mut g = gateway("1edge", "");
        g.spec.load_balancer_class = "/lb".into();
        g.spec.nat.address_claim_name = "Egress".into();
        g.spec.nat.address_claim_name6 = "a..b".into();
        assert_errors(
            &validate_vpc_gateway(&g),
            &[
                ("metadata.name", ErrorType::Invalid),
                ("spec.vpcRef.name", ErrorType::Required),
                ("spec.loadBalancerClass", ErrorType::Invalid),
                ("spec.nat.addressClaimName", ErrorType::Invalid),
                ("spec.nat.addressClaimName6", ErrorType::Invalid),
            ],
        );
    }

    #[test]
    fn names_with_dots_are_rejected() {
        assert_errors(
            &validate_vpc_gateway(&gateway("edge.a", "blue")),
            &[("metadata.name", ErrorType::Invalid)],
        );
    }

    #[test]
    fn update_may_change_the_spec() {
        let old = gateway("edge", "blue");
        let mut new = gateway("edge", "green");
        new.spec.nat.enabled = false;
        assert_errors(&validate_vpc_gateway_update(&new, &old), &[]);
    }

    proptest! {
        #[test]
        fn random_strings_never_panic(name in "\\PC{0,70}", vpc in "\\PC{0,70}", class in "\\PC{0,70}") {
            let mut g = gateway(&name, &vpc);
            g.spec.load_balancer_class = class.clone();
            g.spec.nat.address_claim_name = class;
            let _ = validate_vpc_gateway(&g);
        }
    }
}
