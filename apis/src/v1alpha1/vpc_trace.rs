//! `VPCTrace`: the question a tenant asks of its VPC's SecurityGroups, and the answer. Not a
//! stored kind: it is the body of `POST .../namespaces/<ns>/vpcs/<vpc>/trace` (a `create` of
//! subresource `vpcs/trace`), answered with the same object and its `status` filled in.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

use super::VPCRef;

/// The kind name of a trace request and its answer.
pub const TRACE_KIND: &str = "VPCTrace";

/// One end of the traced flow: a Port of the VPC by name, or an address (of the VPC, of a VPC
/// it is peered with, or outside every VPC: a north-south flow, whose other end must be the
/// traced VPC's). Exactly one of the two.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VPCTraceEndpoint {
    /// The name of a Port of the traced VPC (`v<VNI>.<address>`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub port: String,
    /// An address; its VPC is the traced one, or the peer whose range holds it; an address
    /// in neither is outside (the flow crosses a door of the traced VPC).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub address: String,
}

/// The flow to judge: its first packet.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VPCTraceSpec {
    /// Who opens the flow.
    #[serde(default)]
    pub source: VPCTraceEndpoint,
    /// Who receives it.
    #[serde(default)]
    pub destination: VPCTraceEndpoint,
    /// `TCP`, `UDP`, `SCTP`, `ICMP` or `ICMPv6`.
    #[serde(default)]
    pub protocol: String,
    /// The destination port (TCP, UDP, SCTP: 1 to 65535; unset for ICMP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
    /// ICMP type (0 to 255); an echo request (8, ICMPv6 128) when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icmp_type: Option<i32>,
    /// ICMP code (0 to 255); 0 when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icmp_code: Option<i32>,
}

/// A SecurityGroup rule that decided a direction. A rule of a group outside the caller's
/// namespace (a peered tenant's) is `redacted`: only its VPC and direction are given.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VPCTraceRule {
    /// The VPC of the group.
    pub vpc: VPCRef,
    /// The group's name (in the VPC's namespace); empty when redacted.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub security_group: String,
    /// `ingress` or `egress`: the list of the group's spec the rule is in.
    pub direction: String,
    /// The rule's index in that list; absent when redacted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<i32>,
    /// The group belongs to another namespace than the request's: its name and rule are
    /// not shown.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub redacted: bool,
}

/// The decision of one direction: the source's egress or the destination's ingress.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VPCTraceDirection {
    /// `Allowed` or `Dropped`.
    pub verdict: String,
    /// `Rule` (admitted by `rule`), `Ungrouped` (the endpoint is in no group: open) or
    /// `DefaultDeny` (grouped, and no rule of its groups admits the flow).
    pub decision: String,
    /// The admitting rule, for `Rule`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<VPCTraceRule>,
}

/// The door of the traced VPC a north-south flow crosses.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VPCTraceDoor {
    /// `FloatingIP` (in or out, 1:1) or `VPCGateway` (out, NATed).
    pub kind: String,
    /// The FloatingIP's or VPCGateway's name (in the VPC's namespace).
    pub name: String,
    /// `in` (from outside) or `out` (to outside).
    pub direction: String,
    /// The public address the flow wears outside (the FloatingIP's, the gateway's NAT
    /// address of the flow's family).
    pub address: String,
}

/// An end of the flow as the server resolved it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VPCTraceResolved {
    /// The address.
    pub address: String,
    /// Its VPC (absent for an address outside every VPC).
    #[serde(default, skip_serializing_if = "VPCRef::is_empty")]
    pub vpc: VPCRef,
    /// The address is outside every VPC the trace knows: the flow is north-south.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub external: bool,
    /// The Port holding the address is being deleted and its node has severed it: nothing
    /// passes from or to it in its VPC any more (its fabric address still answers probes).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub severed: bool,
    /// The groups it is in (names; for endpoints of the request's namespace only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// The Port holding the address (for endpoints of the request's namespace only).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub port: String,
    /// The pod interface that Port is attached as, when it is a secondary interface (`net1`…,
    /// the Port's `spec.interface`); absent for the pod's network.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub interface: String,
}

/// The answer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VPCTraceStatus {
    /// `Allowed` or `Dropped`.
    pub verdict: String,
    /// The layer that decided: `SecurityGroup`; `Isolation` (the two VPCs are not connected:
    /// different VPCs without a Ready peering; an address of a VPC no Port or ServiceVIP holds;
    /// or an outside end that is the cluster's own, which no door serves); `NorthSouth` (the door an outside flow crosses, or that there is
    /// none); `Severed` (an end's Port was revoked).
    pub layer: String,
    /// `Rule`, `Ungrouped`, `DefaultDeny`, `NotConnected`, `NoPort`, `ClusterInternal`, `FloatingIP`,
    /// `Gateway`, `NoGateway` (out: the VPC has no NAT gateway with an address of the flow's
    /// family), `NoDoor` (in: no FloatingIP of the destination) or `Severed`.
    pub reason: String,
    /// One sentence saying the same.
    pub message: String,
    /// The source as resolved.
    pub source: VPCTraceResolved,
    /// The destination as resolved.
    pub destination: VPCTraceResolved,
    /// The source's egress (absent when not connected).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<VPCTraceDirection>,
    /// The destination's ingress (absent when not connected).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress: Option<VPCTraceDirection>,
    /// The door a north-south flow crosses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub door: Option<VPCTraceDoor>,
    /// What the answer does not cover.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// A trace request (`spec`) and its answer (`status`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VPCTrace {
    /// `sdn.cozystack.io/v1alpha1`.
    #[serde(default)]
    pub api_version: String,
    /// `VPCTrace`.
    #[serde(default)]
    pub kind: String,
    /// Ignored on a request; the answer carries the VPC's name and namespace.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The question.
    #[serde(default)]
    pub spec: VPCTraceSpec,
    /// The answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<VPCTraceStatus>,
}
