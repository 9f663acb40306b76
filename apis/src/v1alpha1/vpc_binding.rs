//! `VPCBinding`: consent for a namespace to attach to a VPC.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::VPCRef;
use crate::List;

/// Desired state of a [`VPCBinding`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::schema::hoist_required)]
pub struct VPCBindingSpec {
    /// The VPC that pods and Services in this binding's namespace may attach to. Creating the
    /// binding, or changing this reference, requires the `export` verb on that VPC. Attachment
    /// matches namespace and name exactly, so set the namespace even for a VPC in the same
    /// namespace.
    #[serde(default)]
    #[schemars(transform = crate::schema::mark_required)]
    pub vpc_ref: VPCRef,
}

/// Allows pods and Services in this namespace to attach to a VPC, which may belong to another
/// namespace. Every attachment needs one, even to a VPC in the same namespace.
///
/// Has no status. While it exists, Ports attached through it are kept; deleting it removes them
/// (finalizer `sdn.cozystack.io/reap-ports`) unless another binding here names the same VPC.
#[derive(Clone, Debug, Default, PartialEq, JsonSchema)]
#[schemars(transform = crate::schema::object_root::<VPCBinding>)]
pub struct VPCBinding {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// Desired state of the binding.
    pub spec: VPCBindingSpec,
}

crate::object::impl_kind!(VPCBinding {
    spec: VPCBindingSpec,
    status: none,
    scope: kube_core::NamespaceResourceScope,
    plural: "vpcbindings",
    singular: "vpcbinding",
    short_names: ["vpcb"],
});

/// A list of [`VPCBinding`]s.
pub type VPCBindingList = List<VPCBinding>;
