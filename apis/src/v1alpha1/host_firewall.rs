//! `HostFirewall`: operator policy for nodes' own traffic.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, ObjectMeta};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::List;
use crate::serde_util::{is_default, is_zero};

/// Desired state of a [`HostFirewall`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HostFirewallSpec {
    /// Which nodes the policy applies to; empty selects all.
    #[serde(default, skip_serializing_if = "is_default")]
    pub node_selector: LabelSelector,
    /// Directions the policy restricts, `Ingress` and/or `Egress`. Empty means `Ingress`, plus
    /// `Egress` if `egress` has rules.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub policy_types: Vec<String>,
    /// Inbound traffic the nodes accept.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub ingress: Vec<HostFirewallIngressRule>,
    /// Outbound traffic the nodes may send.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub egress: Vec<HostFirewallEgressRule>,
}

/// Inbound traffic a [`HostFirewall`] allows.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HostFirewallIngressRule {
    /// Allowed sources; empty means any address.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub from: Vec<HostFirewallPeer>,
    /// Allowed destination ports; empty means every port of TCP, UDP and SCTP and every ICMP and ICMPv6 message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub ports: Vec<HostFirewallPort>,
}

/// Outbound traffic a [`HostFirewall`] allows.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HostFirewallEgressRule {
    /// Allowed destinations; empty means any address.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub to: Vec<HostFirewallPeer>,
    /// Allowed destination ports; empty means every port of TCP, UDP and SCTP and every ICMP and ICMPv6 message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub ports: Vec<HostFirewallPort>,
}

/// An address range in a [`HostFirewall`] rule.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::schema::hoist_required)]
pub struct HostFirewallPeer {
    /// The range.
    #[serde(default)]
    #[schemars(transform = crate::schema::mark_required)]
    pub cidr: String,
    /// Sub-ranges of `cidr` that are not included.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub except: Vec<String>,
}

/// A destination port or port range in a [`HostFirewall`] rule.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::schema::hoist_required)]
pub struct HostFirewallPort {
    /// `TCP`, `UDP`, `SCTP`, `ICMP` or `ICMPv6`.
    #[serde(default)]
    #[schemars(transform = crate::schema::mark_required)]
    pub protocol: String,
    /// The port, or the first of a range; 0 means every port of the protocol. ICMP and
    /// ICMPv6: the message type (any code), 0 every type.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub port: i32,
    /// The last port of a range starting at `port` (at most 64 ports); 0 means no range.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub end_port: i32,
}

/// Observed state of a [`HostFirewall`] (currently not written by anything).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HostFirewallStatus {
    /// Conditions of the policy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend(
        "x-kubernetes-list-type" = "map",
        "x-kubernetes-list-map-keys" = ["type"],
        "x-kubernetes-patch-strategy" = "merge",
        "x-kubernetes-patch-merge-key" = "type"
    ))]
    pub conditions: Vec<Condition>,
}

/// The annotation that lets a HostFirewall close the API server's port: `"true"` on any of the
/// firewalls selecting a node turns that node's failsafe off (docs/policy.md, "Lockout
/// protection"). Without it every node whose ingress or egress is restricted keeps
/// [`API_SERVER_PORT`] open in that direction.
pub const ALLOW_LOCKOUT_ANNOTATION: &str = "sdn.cozystack.io/allow-lockout";
/// The Kubernetes API server's port, which HostFirewalls keep open unless overridden.
pub const API_SERVER_PORT: u16 = 6443;

/// Policy for traffic to and from the selected nodes themselves (not their pods), written by
/// cluster operators. Kubernetes plumbing (kubelet, API server, probes) is never blocked.
#[derive(Clone, Debug, Default, PartialEq, JsonSchema)]
#[schemars(transform = crate::schema::object_root::<HostFirewall>)]
pub struct HostFirewall {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// Desired state of the policy.
    pub spec: HostFirewallSpec,
    /// Observed state of the policy; written only through the `status` subresource.
    #[schemars(with = "HostFirewallStatus")]
    pub status: Option<HostFirewallStatus>,
}

crate::object::impl_kind!(HostFirewall {
    spec: HostFirewallSpec,
    status: HostFirewallStatus,
    scope: kube_core::ClusterResourceScope,
    plural: "hostfirewalls",
    singular: "hostfirewall",
    short_names: ["hfw"],
});

/// A list of [`HostFirewall`]s.
pub type HostFirewallList = List<HostFirewall>;
