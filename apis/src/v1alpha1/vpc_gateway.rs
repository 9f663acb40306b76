//! `VPCGateway`: the north-south boundary of a VPC.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::LocalVPCRef;
use crate::List;
use crate::serde_util::{is_default, is_false};

/// Desired state of a [`VPCGateway`]; all of it may change after creation.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::schema::hoist_required)]
pub struct VPCGatewaySpec {
    /// The VPC this gateway is the boundary of, in the gateway's namespace.
    #[serde(default)]
    #[schemars(transform = crate::schema::mark_required)]
    pub vpc_ref: LocalVPCRef,
    /// `loadBalancerClass` of the LoadBalancer Services created for the NAT identities; empty
    /// means the cluster's default implementation.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub load_balancer_class: String,
    /// Outbound NAT: whether VPC pods may reach outside the VPC, and which external addresses
    /// they appear as.
    #[serde(default, skip_serializing_if = "is_default")]
    pub nat: VPCGatewayNAT,
    /// Inbound traffic: whether LoadBalancer Services may deliver to the VPC's pods.
    #[serde(default, skip_serializing_if = "is_default")]
    pub ingress: VPCGatewayIngress,
}

/// Outbound NAT settings of a [`VPCGateway`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VPCGatewayNAT {
    /// Translate traffic leaving the VPC to the gateway's external addresses; without it, VPC
    /// pods cannot initiate connections outside the VPC.
    #[serde(default, skip_serializing_if = "is_false")]
    pub enabled: bool,
    /// Name of an `IPAddressClaim` in this namespace that supplies the IPv4 NAT address; passed
    /// through to the address controller as an annotation of the owned Service.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub address_claim_name: String,
    /// Like `addressClaimName`, for the IPv6 NAT address.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub address_claim_name6: String,
}

/// Inbound settings of a [`VPCGateway`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VPCGatewayIngress {
    /// Accept LoadBalancer traffic to the VPC's pods; when false it is refused.
    #[serde(default, skip_serializing_if = "is_false")]
    pub load_balancer: bool,
}

/// Observed state of a [`VPCGateway`], written by the controller.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VPCGatewayStatus {
    /// The IPv4 address VPC traffic leaves as, once the load balancer has assigned one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub nat_address: String,
    /// The IPv6 address VPC traffic leaves as, once the load balancer has assigned one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub nat_address6: String,
    /// `Ready` when the VPC exists and this is its only (oldest) gateway; otherwise `Pending`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub phase: String,
    /// Conditions of the gateway; see [`conditions`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// The north-south boundary of a VPC: outbound NAT to external addresses and admission of
/// inbound LoadBalancer traffic. A VPC has at most one effective gateway, the oldest one naming
/// it; younger ones report a conflict and do nothing.
#[derive(Clone, Debug, Default, PartialEq, JsonSchema)]
#[schemars(transform = crate::schema::object_root::<VPCGateway>)]
pub struct VPCGateway {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// Desired state of the gateway.
    pub spec: VPCGatewaySpec,
    /// Observed state of the gateway; written only through the `status` subresource.
    #[schemars(with = "VPCGatewayStatus")]
    pub status: Option<VPCGatewayStatus>,
}

crate::object::impl_kind!(VPCGateway {
    spec: VPCGatewaySpec,
    status: VPCGatewayStatus,
    scope: kube_core::NamespaceResourceScope,
    plural: "vpcgateways",
    singular: "vpcgateway",
    short_names: ["vpcgw"],
});

/// A list of [`VPCGateway`]s.
pub type VPCGatewayList = List<VPCGateway>;

/// Condition types and reasons of a [`VPCGateway`].
pub mod conditions {
    /// The named VPC exists (also the reason).
    pub const VPC_RESOLVED: &str = "VPCResolved";
    /// NAT is disabled or at least one NAT address is assigned (also the reason when true).
    pub const NAT_READY: &str = "NATReady";
    /// Reason of `NATReady=False`: no NAT address assigned yet.
    pub const REASON_NAT_ADDRESS_PENDING: &str = "NATAddressPending";
    /// This is the VPC's effective gateway (also the reason when true).
    pub const EXCLUSIVE: &str = "Exclusive";
    /// Reason of `Exclusive=False`: an older gateway names the same VPC.
    pub const REASON_GATEWAY_CONFLICT: &str = "GatewayConflict";
}
