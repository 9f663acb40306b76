//! `FloatingIP`: a public address forwarded to one VPC address.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::LocalVPCRef;
use crate::List;

/// Desired state of a [`FloatingIP`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::schema::hoist_required)]
pub struct FloatingIPSpec {
    /// The VPC of the target, in this object's namespace.
    #[serde(default)]
    #[schemars(transform = crate::schema::mark_required)]
    pub vpc_ref: LocalVPCRef,
    /// The VPC address that receives the traffic (not checked when written).
    #[serde(default)]
    #[schemars(transform = crate::schema::mark_required)]
    pub target: String,
    /// `loadBalancerClass` of the owned LoadBalancer Service; empty means the cluster default.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub load_balancer_class: String,
    /// Name of an `IPAddressClaim` in this namespace supplying the address; passed through to
    /// the address controller as an annotation of the owned Service.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub address_claim_name: String,
    /// The family of the public address, `IPv4` or `IPv6` (the owned Service's
    /// `ipFamilies`); empty means the target's. `IPv4` for an IPv6 target gives a pod of an
    /// IPv6-only VPC an IPv4 address, translated on the way (NAT46 in, NAT64 out: the pod
    /// sees an IPv4 client as `64:ff9b::a.b.c.d`). `IPv6` for an IPv4 target is refused.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub ip_family: String,
}

/// Observed state of a [`FloatingIP`], written by the controller.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FloatingIPStatus {
    /// The external address assigned by the load balancer.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub address: String,
    /// `Ready` when the Service exists, has an address, and the target is live and not claimed
    /// by an older FloatingIP; otherwise `Pending`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub phase: String,
    /// Conditions of the floating IP; see [`conditions`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend(
        "x-kubernetes-list-type" = "map",
        "x-kubernetes-list-map-keys" = ["type"],
        "x-kubernetes-patch-strategy" = "merge",
        "x-kubernetes-patch-merge-key" = "type"
    ))]
    pub conditions: Vec<Condition>,
}

/// An external address (from a LoadBalancer Service) whose traffic is delivered, unchanged in
/// destination port, to one address in a VPC. If several FloatingIPs in a namespace target the
/// same address, only the oldest is served.
#[derive(Clone, Debug, Default, PartialEq, JsonSchema)]
#[schemars(transform = crate::schema::object_root::<FloatingIP>)]
pub struct FloatingIP {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// Desired state of the floating IP.
    pub spec: FloatingIPSpec,
    /// Observed state of the floating IP; written only through the `status` subresource.
    #[schemars(with = "FloatingIPStatus")]
    pub status: Option<FloatingIPStatus>,
}

crate::object::impl_kind!(FloatingIP {
    spec: FloatingIPSpec,
    status: FloatingIPStatus,
    scope: kube_core::NamespaceResourceScope,
    plural: "floatingips",
    singular: "floatingip",
    short_names: ["flip"],
});

/// A list of [`FloatingIP`]s.
pub type FloatingIPList = List<FloatingIP>;

/// Condition types and reasons of a [`FloatingIP`].
pub mod conditions {
    /// The owned LoadBalancer Service exists.
    pub const SERVICE_READY: &str = "ServiceReady";
    /// The load balancer has assigned the Service an address.
    pub const ADDRESS_ASSIGNED: &str = "AddressAssigned";
    /// A Port in the VPC holds the target address and is on a node.
    pub const TARGET_LIVE: &str = "TargetLive";
    /// No older FloatingIP in the namespace targets the same address.
    pub const TARGET_EXCLUSIVE: &str = "TargetExclusive";
    /// Reason of `TargetExclusive=False`.
    pub const REASON_TARGET_CONFLICT: &str = "TargetConflict";
}
