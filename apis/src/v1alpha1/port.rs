//! `Port`: one address claimed in a VPC, and where it lives.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::VPCRef;
use crate::List;
use crate::serde_util::is_false;

/// Desired state of a [`Port`]. `ip` and `vpcRef` are immutable; the rest follows the workload
/// (e.g. `node` and `nodeIP` change when a VM migrates).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::schema::hoist_required)]
pub struct PortSpec {
    /// The VPC the address belongs to.
    #[serde(default)]
    #[schemars(transform = crate::schema::mark_required)]
    pub vpc_ref: VPCRef,
    /// The claimed address, in canonical text form; the object's name is derived from it and
    /// the VPC's VNI (`v<vni>.<ip with . and : replaced by ->`).
    #[serde(default)]
    #[schemars(transform = crate::schema::mark_required)]
    pub ip: String,
    /// MAC address pinned to the address, set only for persistent (VM) Ports so the guest keeps
    /// it across migration; locally administered (`02:…`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mac: String,
    /// Name of the node the address is currently on.
    #[serde(default)]
    #[schemars(transform = crate::schema::mark_required)]
    pub node: String,
    /// Underlay address of that node: the tunnel endpoint for traffic to this Port.
    #[serde(default, rename = "nodeIP")]
    #[schemars(transform = crate::schema::mark_required)]
    pub node_ip: String,
    /// Namespace of the pod holding the address, if any.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pod_namespace: String,
    /// Name of the pod holding the address, if any.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pod_name: String,
    /// Marks the leg of the VPC's gateway pod (the VPC's `.1` address).
    #[serde(default, skip_serializing_if = "is_false")]
    pub gateway: bool,
}

/// Observed state of a [`Port`], written by the controller.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PortStatus {
    /// IDs (1–62) of the SecurityGroups of the Port's VPC that select its pod; empty means the
    /// pod is in no group.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub groups: Vec<i32>,
}

/// One address in a VPC and the node it is reachable at. The name is the claim: only one Port
/// (or ServiceVIP, which uses the twin name `sv<vni>.…`) can hold an address. Created by the CNI
/// plugin for each attached pod; not visible to tenants.
#[derive(Clone, Debug, Default, PartialEq, JsonSchema)]
#[schemars(transform = crate::schema::object_root::<Port>)]
pub struct Port {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// Desired state of the Port.
    pub spec: PortSpec,
    /// Observed state of the Port; written only through the `status` subresource.
    #[schemars(with = "PortStatus")]
    pub status: Option<PortStatus>,
}

crate::object::impl_kind!(Port {
    spec: PortSpec,
    status: PortStatus,
    scope: kube_core::ClusterResourceScope,
    plural: "ports",
    singular: "port",
    short_names: [],
});

/// A list of [`Port`]s.
pub type PortList = List<Port>;
