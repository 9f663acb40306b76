//! `VPC`: a tenant network, owned by its namespace.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::List;
use crate::serde_util::{is_false, is_zero};

/// Desired state of a [`VPC`].
// The API server validates every field (`apiserver/src/validation/vpc.rs`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VPCSpec {
    /// Address ranges of the VPC: up to five IPv4 and five IPv6 ranges, which may overlap other
    /// VPCs' ranges but not each other. Every range is routed; Pod and service addresses are
    /// allocated from the ranges of a family in the listed order; peering checks all ranges
    /// for overlap. A range that still holds addresses cannot be removed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub cidrs: Vec<String>,
    /// MTU of interfaces attached to the VPC; 0 means the node default.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub mtu: i32,
    /// Options for the VPC's guests that configure themselves from the network (agent
    /// `--autoconf`): defaults for every Port of the VPC, each field overridden by a Port's
    /// own `spec.dhcp` (see [`GuestConfig`](super::GuestConfig)).
    // Boxed: most objects set none, and agents' watch caches and events hold them all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "super::GuestConfig")]
    pub dhcp: Option<Box<super::GuestConfig>>,
    /// DNS64 (RFC 6147) in the VPC's resolver, for an IPv6-only VPC that reaches the IPv4
    /// internet through its gateway's NAT64: the VPC resolver synthesizes AAAA records
    /// (`64:ff9b::/96`, RFC 6052/6147) for names that have only A records. Only names the
    /// resolver forwards upstream are synthesized, never the cluster's own names (a VPC's
    /// Services answer their ServiceVIPs as they are). Requires an IPv6 range in `cidrs`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub dns64: bool,
}

/// Observed state of a [`VPC`], written by the controller.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VPCStatus {
    /// Overlay network identifier (Geneve VNI) allocated to the VPC, 100 or above; 0 until
    /// allocated.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub vni: i32,
    /// `Pending` until a VNI is allocated, then `Ready`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub phase: String,
    /// Conditions of the VPC (currently not written by any controller).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend(
        "x-kubernetes-list-type" = "map",
        "x-kubernetes-list-map-keys" = ["type"],
        "x-kubernetes-patch-strategy" = "merge",
        "x-kubernetes-patch-merge-key" = "type"
    ))]
    pub conditions: Vec<Condition>,
}

/// A virtual private cloud: an isolated tenant network, identified by its VNI, whose address
/// ranges may overlap those of other VPCs. The namespace that holds it owns it; other namespaces
/// attach to it through a [`VPCBinding`](super::VPCBinding).
#[derive(Clone, Debug, Default, PartialEq, JsonSchema)]
#[schemars(transform = crate::schema::object_root::<VPC>)]
pub struct VPC {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// Desired state of the VPC.
    pub spec: VPCSpec,
    /// Observed state of the VPC; written only through the `status` subresource.
    #[schemars(with = "VPCStatus")]
    pub status: Option<VPCStatus>,
}

crate::object::impl_kind!(VPC {
    spec: VPCSpec,
    status: VPCStatus,
    scope: kube_core::NamespaceResourceScope,
    plural: "vpcs",
    singular: "vpc",
    short_names: [],
});

/// A list of [`VPC`]s.
pub type VPCList = List<VPC>;
