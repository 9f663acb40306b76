//! `VPCPeering`: one half of a peering; immutable once created.
//!
//! Rules: `spec.vpcRef.name`, `spec.peerRef.namespace` and `spec.peerRef.name` are required
//! DNS-1123 labels; the peer may not be the local VPC (same namespace and name); on update
//! every spec field is immutable (reported per field, so the client sees which one it changed).
//!
//! The `peer` authorization on the local VPC is the server's, not a validation rule.

use cozyplane_apis::v1alpha1::VPCPeering;

use super::common;
use super::field::{FieldError, FieldErrors, FieldPath};
use super::meta::{validate_object_meta, validate_object_meta_update};

/// Validates a new VPCPeering: metadata and spec.
pub fn validate_vpc_peering(peering: &VPCPeering) -> FieldErrors {
    let mut errs = validate_object_meta(&peering.metadata, true);
    let spec = &peering.spec;
    let path = FieldPath::new("spec");
    common::local_vpc_ref(&mut errs, &spec.vpc_ref, &path.child("vpcRef"));
    common::vpc_ref(&mut errs, &spec.peer_ref, &path.child("peerRef"));
    let own_ns = peering.metadata.namespace.as_deref().unwrap_or_default();
    if !spec.vpc_ref.name.is_empty()
        && spec.peer_ref.name == spec.vpc_ref.name
        && spec.peer_ref.namespace == own_ns
    {
        errs.push(FieldError::invalid(
            path.child("peerRef"),
            &format!("{}/{}", spec.peer_ref.namespace, spec.peer_ref.name),
            "must name another VPC: a VPC cannot peer with itself",
        ));
    }
    errs
}

/// Validates an update of a VPCPeering: the create rules, the metadata update rules, and an
/// unchanged spec.
pub fn validate_vpc_peering_update(new: &VPCPeering, old: &VPCPeering) -> FieldErrors {
    let mut errs = validate_vpc_peering(new);
    errs.extend(validate_object_meta_update(&new.metadata, &old.metadata));
    let path = FieldPath::new("spec");
    common::immutable(
        &mut errs,
        path.child("vpcRef").child("name"),
        &new.spec.vpc_ref.name,
        &old.spec.vpc_ref.name,
    );
    common::immutable_vpc_ref(
        &mut errs,
        &path.child("peerRef"),
        &new.spec.peer_ref,
        &old.spec.peer_ref,
    );
    errs
}

#[cfg(test)]
mod tests {
    use cozyplane_apis::v1alpha1::{LocalVPCRef, VPCPeeringSpec, VPCRef};
    use proptest::prelude::*;

    use super::*;
    use crate::validation::ErrorType;
    use crate::validation::test_util::assert_errors;

    fn peering(local: &str, peer_ns: &str, peer: &str) -> VPCPeering {
        let mut p = VPCPeering::new(
            "blue-to-red",
            VPCPeeringSpec {
                vpc_ref: LocalVPCRef { name: local.into() },
                peer_ref: VPCRef {
                    namespace: peer_ns.into(),
                    name: peer.into(),
                },
            },
        );
        p.metadata.namespace = Some("tenant-a".into());
        p
    }

    #[test]
    fn valid_peerings_pass() {
        assert_errors(&validate_vpc_peering(&peering("blue", "tenant-b", "red")), &[]);
        // Same namespace, other VPC.
        assert_errors(&validate_vpc_peering(&peering("blue", "tenant-a", "red")), &[]);
        // Other namespace, same VPC name.
        assert_errors(&validate_vpc_peering(&peering("blue", "tenant-b", "blue")), &[]);
    }

    #[test]
    fn refs_are_required() {
        assert_errors(
            &validate_vpc_peering(&peering("", "", "")),
            &[
                ("spec.vpcRef.name", ErrorType::Required),
                ("spec.peerRef.namespace", ErrorType::Required),
                ("spec.peerRef.name", ErrorType::Required),
            ],
        );
        assert_errors(
            &validate_vpc_peering(&peering("Blue", "tenant_b", "red")),
            &[
                ("spec.vpcRef.name", ErrorType::Invalid),
                ("spec.peerRef.namespace", ErrorType::Invalid),
            ],
        );
    }

    #[test]
    fn self_peering_is_rejected() {
        assert_errors(
            &validate_vpc_peering(&peering("blue", "tenant-a", "blue")),
            &[("spec.peerRef", ErrorType::Invalid)],
        );
    }

    #[test]
    fn spec_is_immutable() {
        let old = peering("blue", "tenant-b", "red");
        assert_errors(&validate_vpc_peering_update(&old.clone(), &old), &[]);
        assert_errors(
            &validate_vpc_peering_update(&peering("green", "tenant-c", "pink"), &old),
            &[
                ("spec.vpcRef.name", ErrorType::Invalid),
                ("spec.peerRef.namespace", ErrorType::Invalid),
                ("spec.peerRef.name", ErrorType::Invalid),
            ],
        );
        let mut labelled = old.clone();
        labelled.metadata.labels = Some([("a".to_owned(), "b".to_owned())].into());
        assert_errors(&validate_vpc_peering_update(&labelled, &old), &[]);
    }

    proptest! {
        #[test]
        fn random_refs_never_panic(a in "\\PC{0,70}", b in "\\PC{0,70}", c in "\\PC{0,70}") {
            let p = peering(&a, &b, &c);
            let _ = validate_vpc_peering(&p);
            let _ = validate_vpc_peering_update(&p, &peering(&c, &b, &a));
        }
    }
}
