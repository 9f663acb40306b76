//! `ServiceVIP`: a Kubernetes Service's virtual address inside a VPC.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::VPCRef;
use crate::List;

/// Desired state of a [`ServiceVIP`]. `ip` and `vpcRef` are immutable.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::schema::hoist_required)]
pub struct ServiceVIPSpec {
    /// The VPC the address belongs to.
    #[serde(default)]
    #[schemars(transform = crate::schema::mark_required)]
    pub vpc_ref: VPCRef,
    /// The virtual address, in canonical text form; the object's name is derived from it and
    /// the VPC's VNI (`sv<vni>.<ip with . and : replaced by ->`).
    #[serde(default)]
    #[schemars(transform = crate::schema::mark_required)]
    pub ip: String,
    /// The Service this address belongs to.
    #[serde(default)]
    #[schemars(transform = crate::schema::mark_required)]
    pub service_ref: ServiceRef,
    /// The Service's ports.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub ports: Vec<ServiceVIPPort>,
    /// The Service's session affinity: `ClientIP`, or `None`/empty for none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub session_affinity: String,
}

/// A Service, by namespace and name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::schema::hoist_required)]
pub struct ServiceRef {
    /// Namespace of the Service.
    #[serde(default)]
    #[schemars(transform = crate::schema::mark_required)]
    pub namespace: String,
    /// Name of the Service.
    #[serde(default)]
    #[schemars(transform = crate::schema::mark_required)]
    pub name: String,
}

/// One port of a [`ServiceVIP`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::schema::hoist_required)]
pub struct ServiceVIPPort {
    /// Name of the Service port, if it has one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// `TCP` or `UDP`.
    #[serde(default)]
    #[schemars(transform = crate::schema::mark_required)]
    pub protocol: String,
    /// The port clients connect to on the virtual address.
    #[serde(default)]
    #[schemars(transform = crate::schema::mark_required)]
    pub port: i32,
}

/// Observed state of a [`ServiceVIP`], written by the controller.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceVIPStatus {
    /// The ready endpoints traffic is balanced across.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub backends: Vec<ServiceVIPBackend>,
    /// `Pending` or `Ready`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub phase: String,
    /// Conditions of the address (currently not written by any controller).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend(
        "x-kubernetes-list-type" = "map",
        "x-kubernetes-list-map-keys" = ["type"],
        "x-kubernetes-patch-strategy" = "merge",
        "x-kubernetes-patch-merge-key" = "type"
    ))]
    pub conditions: Vec<Condition>,
}

/// One endpoint behind a [`ServiceVIP`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::schema::hoist_required)]
pub struct ServiceVIPBackend {
    /// The endpoint's address in the VPC.
    #[serde(default)]
    #[schemars(transform = crate::schema::mark_required)]
    pub ip: String,
    /// Where each Service port is served on this endpoint.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub ports: Vec<ServiceVIPBackendPort>,
}

/// A Service port mapped to the port an endpoint serves it on.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::schema::hoist_required)]
pub struct ServiceVIPBackendPort {
    /// `TCP` or `UDP`.
    #[serde(default)]
    #[schemars(transform = crate::schema::mark_required)]
    pub protocol: String,
    /// The Service port (on the virtual address).
    #[serde(default)]
    #[schemars(transform = crate::schema::mark_required)]
    pub port: i32,
    /// The port on the endpoint that receives the traffic.
    #[serde(default)]
    #[schemars(transform = crate::schema::mark_required)]
    pub target_port: i32,
}

/// The virtual address of a Service attached to a VPC, and its ready endpoints. The name is the
/// address claim (`sv<vni>.…`), which shares the address space with Ports (`v<vni>.…`). Written
/// only by the controller, one per attached non-headless Service.
#[derive(Clone, Debug, Default, PartialEq, JsonSchema)]
#[schemars(transform = crate::schema::object_root::<ServiceVIP>)]
pub struct ServiceVIP {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// Desired state of the address.
    pub spec: ServiceVIPSpec,
    /// Observed state of the address; written only through the `status` subresource.
    #[schemars(with = "ServiceVIPStatus")]
    pub status: Option<ServiceVIPStatus>,
}

crate::object::impl_kind!(ServiceVIP {
    spec: ServiceVIPSpec,
    status: ServiceVIPStatus,
    scope: kube_core::ClusterResourceScope,
    plural: "servicevips",
    singular: "servicevip",
    short_names: ["svip"],
});

/// A list of [`ServiceVIP`]s.
pub type ServiceVIPList = List<ServiceVIP>;
