//! KubeVirt as the API sees it, for the live-migration labs: the VirtualMachineInstance CRD,
//! the VMI `vm1` in `t1`, and its status written as virt-controller and virt-handler do.

use cozyplane_apis::v1alpha1::Port;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::common::{Cp, KubeCp};

/// The VM's name (its launchers' `vm.kubevirt.io/name`).
pub(crate) const VM: (&str, &str) = ("vm.kubevirt.io/name", "vm1");

/// The VirtualMachineInstance CRD as KubeVirt installs it, reduced to what the API needs
/// (its schema keeps unknown fields, as KubeVirt's does).
const VMI_CRD: &str = r"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: virtualmachineinstances.kubevirt.io
spec:
  group: kubevirt.io
  scope: Namespaced
  names:
    kind: VirtualMachineInstance
    plural: virtualmachineinstances
    singular: virtualmachineinstance
    shortNames: [vmi]
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
";

/// Installs the CRD in the real kube-apiserver of `cp`.
pub(crate) async fn install_crd(cp: &Cp) {
    let KubeCp::Real(kcp) = &cp.kube_cp else {
        panic!("KubeVirt's CRD needs the real kube-apiserver (Cp::start_real)")
    };
    kcp.apply(VMI_CRD).await;
}

/// The VMIs of namespace `t1`.
pub(crate) fn vmi_api(cp: &Cp) -> Api<DynamicObject> {
    let ar = ApiResource {
        group: "kubevirt.io".into(),
        version: "v1".into(),
        api_version: "kubevirt.io/v1".into(),
        kind: "VirtualMachineInstance".into(),
        plural: "virtualmachineinstances".into(),
    };
    Api::namespaced_with(cp.kube.clone(), "t1", &ar)
}

/// Creates the VMI `t1/vm1`.
pub(crate) async fn create_vmi(vmis: &Api<DynamicObject>) {
    vmis.create(
        &PostParams::default(),
        &serde_json::from_value(
            json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": VM.1, "namespace": "t1"}, "spec": {"domain": {"devices": {}}}}),
        )
        .unwrap(),
    )
    .await
    .unwrap();
}

/// A new migration `uid` from `source` to `target` (`(node, pod)` each) in the VMI's status,
/// as virt-controller writes one per migration (the merge patch clears what the last one
/// left).
pub(crate) async fn migration_started(
    vmis: &Api<DynamicObject>,
    uid: &str,
    (source_node, source_pod): (&str, &str),
    (target_node, target_pod): (&str, &str),
) {
    let state = json!({"migrationUid": uid, "sourceNode": source_node, "sourcePod": source_pod,
        "targetNode": target_node, "targetPod": target_pod,
        "startTimestamp": k8s_openapi::jiff::Timestamp::now().to_string(), "completed": false,
        "failed": false, "targetNodeDomainDetected": false, "targetNodeDomainReadyTimestamp": null,
        "endTimestamp": null});
    vmi_status(vmis, json!({ "migrationState": state })).await;
}

/// The domain runs on `target_node`: the migration completed (virt-handler's write).
pub(crate) async fn migration_completed(vmis: &Api<DynamicObject>, target_node: &str) {
    let done = k8s_openapi::jiff::Timestamp::now().to_string();
    vmi_status(
        vmis,
        json!({"nodeName": target_node, "migrationState": {"targetNodeDomainDetected": true,
            "targetNodeDomainReadyTimestamp": done, "completed": true, "endTimestamp": done}}),
    )
    .await;
}

/// The migration failed (its target went before the cutover).
pub(crate) async fn migration_failed(vmis: &Api<DynamicObject>) {
    vmi_status(
        vmis,
        json!({"migrationState": {"completed": true, "failed": true}}),
    )
    .await;
}

/// Writes the VMI's status as virt-handler does (a merge patch of the status subresource).
pub(crate) async fn vmi_status(vmis: &Api<DynamicObject>, status: serde_json::Value) {
    vmis.patch_status(
        VM.1,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": status })),
    )
    .await
    .unwrap();
}

/// Condition `ty` of Port `p`: (status, reason), empty when it has none.
pub(crate) fn condition(p: &Port, ty: &str) -> (String, String) {
    p.status
        .iter()
        .flat_map(|s| &s.conditions)
        .find(|c| c.type_ == ty)
        .map(|c| (c.status.clone(), c.reason.clone()))
        .unwrap_or_default()
}
