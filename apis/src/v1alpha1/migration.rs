//! A live migration's second holder of a [`super::Port`] (issue 27, item 2).
//!
//! During a KubeVirt live migration two launcher pods hold one Port: the source (the Port's
//! `spec.node`/`spec.podName`, the one the rest of the cluster sends to) and the target,
//! prepared on another node but not yet the VM's. The target's agent writes
//! `spec.migrationTarget` when it wires the target (CNI ADD of a pod labelled
//! `kubevirt.io/migrationJobUID`); cozyplane-apiserver's migration loop moves the Port to it
//! (`spec.node`, `spec.nodeIP`, the pod; `migrationTarget` cleared) at the cutover KubeVirt
//! reports, or clears it when the migration fails or the target goes. While it is set, both
//! nodes relay the VM's traffic to each other and every node accepts the VM's packets from
//! either (`bpf/lib/migrate.h`), so the cutover does not wait for the Port's update to reach
//! every node.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The pod and node a Port is prepared on while a live migration runs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::schema::hoist_required)]
pub struct PortMigrationTarget {
    /// The target's node.
    #[serde(default)]
    #[schemars(transform = crate::schema::mark_required)]
    pub node: String,
    /// That node's underlay address.
    #[serde(default, rename = "nodeIP")]
    #[schemars(transform = crate::schema::mark_required)]
    pub node_ip: String,
    /// The target launcher pod's namespace (the Port's `spec.podNamespace`).
    #[serde(default)]
    #[schemars(transform = crate::schema::mark_required)]
    pub pod_namespace: String,
    /// The target launcher pod.
    #[serde(default)]
    #[schemars(transform = crate::schema::mark_required)]
    pub pod_name: String,
    /// KubeVirt's migration job (`kubevirt.io/migrationJobUID` of the target pod), if known.
    #[serde(default, rename = "migrationUID", skip_serializing_if = "String::is_empty")]
    pub migration_uid: String,
}

/// The label KubeVirt puts on a live migration's target launcher pod: the migration job's UID.
pub const MIGRATION_JOB_LABEL: &str = "kubevirt.io/migrationJobUID";
