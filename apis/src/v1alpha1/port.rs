//! `Port`: one address claimed in a VPC, and where it lives.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{PortMigrationTarget, VPCRef};
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
    /// The pod's interface holding the address (`CNI_IFNAME`): empty for the pod's network
    /// (`eth0`), `net1`… for a secondary interface attached to this VPC under Multus or the
    /// pod's `sdn.cozystack.io/vpcs` list (issue 37). At most 15 characters.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub interface: String,
    /// Marks the leg of the VPC's gateway pod (the VPC's `.1` address).
    #[serde(default, skip_serializing_if = "is_false")]
    pub gateway: bool,
    /// Options for a guest configuring itself on this Port's link (agent `--autoconf`): each
    /// field set here overrides the VPC's `spec.dhcp` (see [`GuestConfig`](super::GuestConfig)).
    // Boxed: most objects set none, and agents' watch caches and events hold them all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "super::GuestConfig")]
    pub dhcp: Option<Box<super::GuestConfig>>,
    /// While a live migration runs: the target launcher pod the Port is prepared on besides
    /// `node` (see [`PortMigrationTarget`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "PortMigrationTarget")]
    pub migration_target: Option<PortMigrationTarget>,
}

/// Observed state of a [`Port`], written by the controller.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PortStatus {
    /// IDs (1–62) of the SecurityGroups of the Port's VPC that select its pod; empty means the
    /// pod is in no group.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub groups: Vec<i32>,
    /// Where the Port is attached and whether a live migration holds it (see [`conditions`]),
    /// derived by the server in the write that changes the spec.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend(
        "x-kubernetes-list-type" = "map",
        "x-kubernetes-list-map-keys" = ["type"],
        "x-kubernetes-patch-strategy" = "merge",
        "x-kubernetes-patch-merge-key" = "type"
    ))]
    pub conditions: Vec<Condition>,
}

/// Condition types and reasons of [`PortStatus`].
pub mod conditions {
    /// A pod holds the Port on a node (`spec.node`); the message names both.
    pub const ATTACHED: &str = "Attached";
    /// Reason of `Attached=True`.
    pub const REASON_ON_NODE: &str = "OnNode";
    /// Reason of `Attached=False`: a workload's Port kept between its pods (a VM's, issue 27).
    pub const REASON_DETACHED: &str = "Detached";
    /// A live migration's target pod is prepared (`spec.migrationTarget`): two pods hold the
    /// Port until the cutover moves it or the migration is rolled back.
    pub const MIGRATING: &str = "Migrating";
    /// Reason of `Migrating=True`.
    pub const REASON_TARGET_PREPARED: &str = "TargetPrepared";
    /// Reason of `Migrating=False`.
    pub const REASON_NO_MIGRATION: &str = "NoMigration";
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

/// Label of a persistent Port (issue 27): the workload identity it belongs to instead of one
/// pod. A Port carrying it outlives its pods: DEL keeps it, the next pod of the identity (on
/// any node) takes it with its address and MAC, and the server releases it once the identity
/// is gone ([`WorkloadRef`]).
pub const PORT_WORKLOAD_LABEL: &str = "sdn.cozystack.io/vm-name";

/// Label of a persistent Port: the pod interface (`CNI_IFNAME`) it is attached as, so a workload
/// with several interfaces keeps one Port per interface.
pub const PORT_INTERFACE_LABEL: &str = "sdn.cozystack.io/interface";

/// The label KubeVirt puts on a virt-launcher pod: the name of the VirtualMachineInstance it
/// runs (and of its VirtualMachine, which names its VMIs after itself).
pub const KUBEVIRT_VM_LABEL: &str = "vm.kubevirt.io/name";

/// Pod annotation naming a persistent identity for any pod (not a KubeVirt launcher): pods of
/// one namespace carrying the same value share a persistent Port, one at a time.
pub const PERSISTENT_PORT_ANNOTATION: &str = "sdn.cozystack.io/persistent-port";

/// Pod annotation pinning the address a persistent Port is made with (the first pod of the
/// workload; later pods take the Port as it is). The server refuses an address outside the
/// VPC's ranges or held by another object (422 on `spec.ip`). One address per family may be
/// given, comma-separated, for a dual-stack VPC.
pub const PIN_IP_ANNOTATION: &str = "sdn.cozystack.io/ip";

/// Pod annotation pinning the MAC a persistent Port is made with (a unicast MAC, locally
/// administered or not; the server refuses one held by another Port: 422 on `spec.mac`).
pub const PIN_MAC_ANNOTATION: &str = "sdn.cozystack.io/mac";

/// A pod's persistent identity: the explicit annotation, else the KubeVirt VM label; `None`
/// for an ordinary pod. A value that is no label value (over 63 characters, other characters)
/// is no identity: the Port's label could not carry it.
pub fn workload_of(
    labels: Option<&std::collections::BTreeMap<String, String>>,
    annotations: Option<&std::collections::BTreeMap<String, String>>,
) -> Option<String> {
    let explicit = annotations.and_then(|a| a.get(PERSISTENT_PORT_ANNOTATION));
    let vm = labels.and_then(|l| l.get(KUBEVIRT_VM_LABEL));
    explicit.or(vm).filter(|v| is_label_value(v)).cloned()
}

fn is_label_value(v: &str) -> bool {
    let b = v.as_bytes();
    !v.is_empty()
        && v.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// What a persistent Port belongs to: its pods' namespace and the identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkloadRef {
    /// The namespace of the pods (`spec.podNamespace`).
    pub namespace: String,
    /// The identity ([`PORT_WORKLOAD_LABEL`]).
    pub name: String,
}

impl Port {
    /// The workload of a persistent Port; `None` for a Port of one pod.
    pub fn workload(&self) -> Option<WorkloadRef> {
        let name = self.metadata.labels.as_ref()?.get(PORT_WORKLOAD_LABEL)?;
        Some(WorkloadRef {
            namespace: self.spec.pod_namespace.clone(),
            name: name.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn map(k: &str, v: &str) -> BTreeMap<String, String> {
        BTreeMap::from([(k.to_string(), v.to_string())])
    }

    #[test]
    fn the_annotation_wins_over_the_vm_label_and_bad_values_are_no_identity() {
        let vm = map(KUBEVIRT_VM_LABEL, "web-vm");
        let ann = map(PERSISTENT_PORT_ANNOTATION, "db-0");
        assert_eq!(workload_of(Some(&vm), None).as_deref(), Some("web-vm"));
        assert_eq!(workload_of(Some(&vm), Some(&ann)).as_deref(), Some("db-0"));
        assert_eq!(workload_of(None, None), None);
        let long = "a".repeat(64);
        assert_eq!(
            workload_of(None, Some(&map(PERSISTENT_PORT_ANNOTATION, &long))),
            None
        );
        assert_eq!(
            workload_of(None, Some(&map(PERSISTENT_PORT_ANNOTATION, "-x"))),
            None
        );
        assert_eq!(
            workload_of(None, Some(&map(PERSISTENT_PORT_ANNOTATION, "a b"))),
            None
        );
        assert_eq!(
            workload_of(None, Some(&map(PERSISTENT_PORT_ANNOTATION, ""))),
            None
        );
    }
}
