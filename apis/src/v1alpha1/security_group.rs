//! `SecurityGroup`: tenant policy inside a VPC.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, ObjectMeta};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{LocalVPCRef, VPCRef};
use crate::List;
use crate::serde_util::{is_default, is_zero};

/// Desired state of a [`SecurityGroup`]. `vpcRef` is immutable.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::schema::hoist_required)]
pub struct SecurityGroupSpec {
    /// The VPC whose pods the group selects, in this namespace.
    #[serde(default)]
    #[schemars(transform = crate::schema::mark_required)]
    pub vpc_ref: LocalVPCRef,
    /// Which of the VPC's pods are members; empty selects all of them.
    #[serde(default, skip_serializing_if = "is_default")]
    pub pod_selector: LabelSelector,
    /// Traffic members accept. Members are default-deny for new inbound TCP connections and UDP;
    /// each rule reopens some.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub ingress: Vec<SecurityGroupIngressRule>,
    /// Traffic members may send. Members are default-deny for new outbound TCP connections and
    /// UDP; each rule reopens some.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub egress: Vec<SecurityGroupEgressRule>,
}

/// Inbound traffic a [`SecurityGroup`] allows.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::schema::hoist_required)]
pub struct SecurityGroupIngressRule {
    /// Who may connect.
    #[serde(default)]
    #[schemars(transform = crate::schema::mark_required)]
    pub from: SecurityGroupPeer,
    /// Destination ports allowed; empty allows all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub ports: Vec<SecurityGroupPort>,
}

/// Outbound traffic a [`SecurityGroup`] allows.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::schema::hoist_required)]
pub struct SecurityGroupEgressRule {
    /// Where members may connect to.
    #[serde(default)]
    #[schemars(transform = crate::schema::mark_required)]
    pub to: SecurityGroupPeer,
    /// Destination ports allowed; empty allows all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub ports: Vec<SecurityGroupPort>,
}

/// The other end of a [`SecurityGroup`] rule: exactly one of `group` or `cidr`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecurityGroupPeer {
    /// Name of a SecurityGroup: its members are the peers. In this VPC unless `vpc` names a
    /// peered one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub group: String,
    /// The peered VPC holding `group`; only together with `group`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "VPCRef")]
    pub vpc: Option<VPCRef>,
    /// An address range outside the VPC (north-south or off-VPC traffic).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cidr: String,
}

/// A destination port in a [`SecurityGroup`] rule.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::schema::hoist_required)]
pub struct SecurityGroupPort {
    /// `TCP`, `UDP`, `SCTP`, `ICMP` or `ICMPv6`.
    #[serde(default)]
    #[schemars(transform = crate::schema::mark_required)]
    pub protocol: String,
    /// The port; 0 means every port of the protocol. For ICMP and ICMPv6, the type (any
    /// code); 0 means every type.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub port: i32,
}

/// Observed state of a [`SecurityGroup`], written by the controller.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecurityGroupStatus {
    /// The group's number within its VPC, 1–62 (63 is reserved for "the world"); 0 until
    /// allocated, or while the VPC has no free number.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub id: i32,
    /// `Ready` once an id is allocated; otherwise `Pending`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub phase: String,
    /// Conditions of the group (currently not written by any controller).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend(
        "x-kubernetes-list-type" = "map",
        "x-kubernetes-list-map-keys" = ["type"],
        "x-kubernetes-patch-strategy" = "merge",
        "x-kubernetes-patch-merge-key" = "type"
    ))]
    pub conditions: Vec<Condition>,
}

/// Stateful policy for the pods of one VPC. Pods in no group keep allow-all within their VPC;
/// a member only accepts and sends new TCP connections and UDP that some rule of one of its
/// groups allows. ICMP is never filtered.
#[derive(Clone, Debug, Default, PartialEq, JsonSchema)]
#[schemars(transform = crate::schema::object_root::<SecurityGroup>)]
pub struct SecurityGroup {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// Desired state of the group.
    pub spec: SecurityGroupSpec,
    /// Observed state of the group; written only through the `status` subresource.
    #[schemars(with = "SecurityGroupStatus")]
    pub status: Option<SecurityGroupStatus>,
}

crate::object::impl_kind!(SecurityGroup {
    spec: SecurityGroupSpec,
    status: SecurityGroupStatus,
    scope: kube_core::NamespaceResourceScope,
    plural: "securitygroups",
    singular: "securitygroup",
    short_names: ["sg"],
});

/// A list of [`SecurityGroup`]s.
pub type SecurityGroupList = List<SecurityGroup>;

/// Condition types of a [`SecurityGroup`] (defined; no controller writes them yet).
pub mod conditions {
    /// The group's VPC exists.
    pub const VPC_READY: &str = "VPCReady";
    /// The group has an id.
    pub const ID_ALLOCATED: &str = "IDAllocated";
}
