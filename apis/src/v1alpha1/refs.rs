//! References to VPCs, shared by several kinds.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A VPC in any namespace (the VPC's owner namespace plus its name).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::schema::hoist_required)]
pub struct VPCRef {
    /// Namespace of the VPC (the namespace that owns it).
    #[serde(default)]
    #[schemars(transform = crate::schema::mark_required)]
    pub namespace: String,
    /// Name of the VPC.
    #[serde(default)]
    #[schemars(transform = crate::schema::mark_required)]
    pub name: String,
}

impl VPCRef {
    /// Neither field set.
    pub fn is_empty(&self) -> bool {
        self.namespace.is_empty() && self.name.is_empty()
    }
}

/// A VPC in the referring object's own namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::schema::hoist_required)]
pub struct LocalVPCRef {
    /// Name of the VPC, in the same namespace as the referring object.
    #[serde(default)]
    #[schemars(transform = crate::schema::mark_required)]
    pub name: String,
}
