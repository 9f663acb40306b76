//! `VPCPeering`: one half of a peering between two VPCs.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{LocalVPCRef, VPCRef};
use crate::List;
use crate::serde_util::is_zero;

/// Desired state of a [`VPCPeering`]; immutable after creation.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::schema::hoist_required)]
pub struct VPCPeeringSpec {
    /// The local VPC, in this peering's namespace. Creating the peering requires the `peer`
    /// verb on it.
    #[serde(default)]
    #[schemars(transform = crate::schema::mark_required)]
    pub vpc_ref: LocalVPCRef,
    /// The remote VPC. Its owner consents by creating the reciprocal half; it may not be the
    /// local VPC itself.
    #[serde(default)]
    #[schemars(transform = crate::schema::mark_required)]
    pub peer_ref: VPCRef,
}

/// Observed state of a [`VPCPeering`], written by the controller for observability only: the
/// datapath is programmed from the specs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VPCPeeringStatus {
    /// `Ready` when the reciprocal half exists, both VPCs have a VNI and their CIDRs are
    /// disjoint; otherwise `Pending`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub phase: String,
    /// VNI of the remote VPC; 0 while unknown.
    #[serde(default, rename = "peerVNI", skip_serializing_if = "is_zero")]
    pub peer_vni: i32,
    /// Conditions of the peering; see [`conditions`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend(
        "x-kubernetes-list-type" = "map",
        "x-kubernetes-list-map-keys" = ["type"],
        "x-kubernetes-patch-strategy" = "merge",
        "x-kubernetes-patch-merge-key" = "type"
    ))]
    pub conditions: Vec<Condition>,
}

/// One half of a peering: connects the local VPC to a VPC in another (or the same) namespace.
/// Traffic flows once both owners have created matching halves and the address ranges do not
/// overlap.
#[derive(Clone, Debug, Default, PartialEq, JsonSchema)]
#[schemars(transform = crate::schema::object_root::<VPCPeering>)]
pub struct VPCPeering {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// Desired state of the peering.
    pub spec: VPCPeeringSpec,
    /// Observed state of the peering; written only through the `status` subresource.
    #[schemars(with = "VPCPeeringStatus")]
    pub status: Option<VPCPeeringStatus>,
}

crate::object::impl_kind!(VPCPeering {
    spec: VPCPeeringSpec,
    status: VPCPeeringStatus,
    scope: kube_core::NamespaceResourceScope,
    plural: "vpcpeerings",
    singular: "vpcpeering",
    short_names: ["vpcp"],
});

/// A list of [`VPCPeering`]s.
pub type VPCPeeringList = List<VPCPeering>;

/// Condition types (and the reason of each when true; `…Missing` when false) of a
/// [`VPCPeering`].
pub mod conditions {
    /// The remote VPC's owner has created the reciprocal half.
    pub const PEER_MATCHED: &str = "PeerMatched";
    /// Reason of `PeerMatched=True`.
    pub const REASON_RECIPROCAL_HALF: &str = "ReciprocalHalf";
    /// Reason of `PeerMatched=False`.
    pub const REASON_RECIPROCAL_HALF_MISSING: &str = "ReciprocalHalfMissing";
    /// The local VPC exists and has a VNI (also the reason when true).
    pub const VPC_READY: &str = "VPCReady";
    /// Reason of `VPCReady=False`.
    pub const REASON_VPC_READY_MISSING: &str = "VPCReadyMissing";
    /// The remote VPC exists and has a VNI (also the reason when true).
    pub const PEER_VPC_READY: &str = "PeerVPCReady";
    /// Reason of `PeerVPCReady=False`.
    pub const REASON_PEER_VPC_READY_MISSING: &str = "PeerVPCReadyMissing";
    /// No CIDR of one VPC overlaps a CIDR of the other (also the reason when true).
    pub const CIDRS_DISJOINT: &str = "CIDRsDisjoint";
    /// Reason of `CIDRsDisjoint=False`.
    pub const REASON_CIDRS_DISJOINT_MISSING: &str = "CIDRsDisjointMissing";
    /// The two VPCs have an address family in common (also the reason when true). A v4-only
    /// and a v6-only VPC are never peered: nothing translates between tenants.
    pub const FAMILY_SHARED: &str = "FamilyShared";
    /// Reason of `FamilyShared=False`.
    pub const REASON_FAMILY_SHARED_MISSING: &str = "FamilySharedMissing";
}
