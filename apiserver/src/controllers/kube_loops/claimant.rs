//! Port claimants: a live Port whose pod is gone is deleted; a persistent Port (issue 27)
//! whose workload is gone ([`Reconciler::workload_claimant`]).
//!
//! Normally the pod's CNI DEL deletes its Port. A pod deleted while its node's agent is down
//! never gets that DEL, so without this loop its Port (and the address and MAC it claims) would
//! stay forever. The rule: a Port naming a pod (`spec.podNamespace`/`spec.podName`) that the
//! Pod informer does not hold, or holds with another uid than the Port's
//! `sdn.cozystack.io/pod-uid` label, is deleted once the Port is older than the GC grace (a
//! Port is made right after its pod is scheduled, possibly before this process's informer saw
//! the pod) and a live `GET` of the pod agrees. The delete only marks the Port: the agent of its
//! node, once back, severs what is left of the pod and removes its `sdn.cozystack.io/sever`
//! finalizer; a node that is gone for good is Port GC's.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use cozyplane_apis::v1alpha1::{WorkloadRef, workload_of};
use kube::api::ApiResource;

use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::ObjectRef;

use super::{POD_UID, Reconciler, Work, pod_of};
use crate::errors::{ApiError, Result};
use crate::rbac::server as rbac;
use crate::registry::store::DeleteOptions;

/// Whether `pod` is the Port's claimant: it exists and, when the Port names a uid, has it.
fn claims(pod: Option<&Pod>, uid: &str) -> bool {
    pod.is_some_and(|p| uid.is_empty() || p.metadata.uid.as_deref() == Some(uid))
}

impl Reconciler {
    pub(super) async fn claimant(&self, name: &str) -> Result<()> {
        let sh = &self.shared;
        if !sh.pods_ready.load(Ordering::SeqCst) {
            return Ok(());
        }
        let Some(p) = sh.ports.get("", name) else {
            return Ok(());
        };
        if p.metadata.deletion_timestamp.is_some() {
            return Ok(());
        }
        if let Some(w) = p.workload() {
            return self.workload_claimant(name, &w).await;
        }
        let Some((ns, pod)) = pod_of(&p) else {
            return Ok(());
        };
        let uid = p
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(POD_UID))
            .cloned()
            .unwrap_or_default();
        let cached = sh.pods.get(&ObjectRef::new(&pod).within(&ns));
        if claims(cached.as_deref(), &uid) {
            return Ok(());
        }
        let age = p.metadata.creation_timestamp.as_ref().map_or(Duration::MAX, |t| {
            let ms = k8s_openapi::jiff::Timestamp::now().as_millisecond() - t.0.as_millisecond();
            Duration::from_millis(u64::try_from(ms).unwrap_or(0))
        });
        if age < sh.grace {
            // The informer may not have seen a pod scheduled a moment ago: look again later.
            let left = sh.grace - age + Duration::from_millis(100);
            sh.queue.add_after(Work::Claimant(name.to_string()), left);
            return Ok(());
        }
        let api = rbac::PODS.uses("get").api_namespaced::<Pod>(sh.kube.clone(), &ns);
        match api.get_opt(&pod).await {
            Ok(live) if claims(live.as_ref(), &uid) => return Ok(()),
            Ok(_) => {}
            Err(e) => {
                return Err(ApiError::unavailable(format!(
                    "port claimants: looking up pod {ns}/{pod}: {e}"
                )));
            }
        }
        tracing::info!(port = %name, pod = %format!("{ns}/{pod}"), "deleting a Port whose pod is gone");
        match self.ports.delete(None, name, &DeleteOptions::default()).await {
            Err(e) if !e.is_not_found() => Err(e),
            _ => Ok(()),
        }
    }
}

/// Whether `pod` is a live pod of workload `w`.
fn holds(pod: &Pod, w: &WorkloadRef) -> bool {
    let finished = matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    );
    pod.metadata.namespace.as_deref() == Some(w.namespace.as_str())
        && !finished
        && pod.metadata.deletion_timestamp.is_none()
        && workload_of(pod.metadata.labels.as_ref(), pod.metadata.annotations.as_ref()).as_deref()
            == Some(w.name.as_str())
}

pub(super) fn kubevirt(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: "kubevirt.io".into(),
        version: "v1".into(),
        api_version: "kubevirt.io/v1".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

impl Reconciler {
    /// A persistent Port (issue 27) belongs to its workload, not to one pod: it is released
    /// when the workload is gone for the grace period: no live pod of it (the Pod informer,
    /// then a live list), and for a KubeVirt VM neither its VirtualMachineInstance nor its
    /// VirtualMachine (a stopped VM keeps its addresses). While the workload lives the Port is
    /// looked at again every grace period (a VM deleted while it was stopped has no pod event).
    async fn workload_claimant(&self, name: &str, w: &WorkloadRef) -> Result<()> {
        let sh = &self.shared;
        let requeue = || sh.queue.add_after(Work::Claimant(name.to_string()), sh.grace);
        let orphaned = |set: bool| {
            let mut m = sh
                .orphaned
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if set {
                *m.entry(name.to_string()).or_insert_with(Instant::now)
            } else {
                m.remove(name);
                Instant::now()
            }
        };
        if sh.pods.state().iter().any(|p| holds(p, w)) {
            orphaned(false);
            return Ok(());
        }
        for (row, ar) in [
            (
                &rbac::VIRTUALMACHINEINSTANCES,
                kubevirt("VirtualMachineInstance", "virtualmachineinstances"),
            ),
            (
                &rbac::VIRTUALMACHINES,
                kubevirt("VirtualMachine", "virtualmachines"),
            ),
        ] {
            match row
                .uses("get")
                .api_dynamic(sh.kube.clone(), &w.namespace, &ar)
                .get_opt(&w.name)
                .await
            {
                Ok(Some(_)) => {
                    orphaned(false);
                    requeue();
                    return Ok(());
                }
                Ok(None) => {}
                // KubeVirt not installed: the group is not served (404 is None; a 403 or a
                // discovery error is not a VM either).
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 403 => {}
                Err(e) => {
                    return Err(ApiError::unavailable(format!(
                        "port claimants: looking up {} {}/{}: {e}",
                        ar.kind, w.namespace, w.name
                    )));
                }
            }
        }
        let since = orphaned(true);
        if since.elapsed() < sh.grace {
            // A VM restarting has no pod for a moment: look again when the grace is over.
            sh.queue.add_after(
                Work::Claimant(name.to_string()),
                sh.grace - since.elapsed() + Duration::from_millis(100),
            );
            return Ok(());
        }
        let api = rbac::PODS
            .uses("list")
            .api_namespaced::<Pod>(sh.kube.clone(), &w.namespace);
        match api.list(&kube::api::ListParams::default()).await {
            Ok(l) if l.items.iter().any(|p| holds(p, w)) => {
                orphaned(false);
                return Ok(());
            }
            Ok(_) => {}
            Err(e) => {
                return Err(ApiError::unavailable(format!(
                    "port claimants: listing the pods of {}: {e}",
                    w.namespace
                )));
            }
        }
        orphaned(false);
        tracing::info!(port = %name, workload = %format!("{}/{}", w.namespace, w.name),
            "deleting a persistent Port whose workload is gone");
        match self.ports.delete(None, name, &DeleteOptions::default()).await {
            Err(e) if !e.is_not_found() => Err(e),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workload_is_held_by_its_live_pods_of_its_namespace() {
        let pod = |ns: &str, labels: &[(&str, &str)], ann: &[(&str, &str)], phase: &str| {
            let mut p = Pod::default();
            p.metadata.namespace = Some(ns.into());
            p.metadata.labels = Some(labels.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect());
            p.metadata.annotations = Some(ann.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect());
            p.status = Some(k8s_openapi::api::core::v1::PodStatus {
                phase: Some(phase.into()),
                ..Default::default()
            });
            p
        };
        let w = WorkloadRef {
            namespace: "t1".into(),
            name: "vm1".into(),
        };
        let vm = [("vm.kubevirt.io/name", "vm1")];
        assert!(holds(&pod("t1", &vm, &[], "Running"), &w));
        assert!(holds(
            &pod(
                "t1",
                &[],
                &[("sdn.cozystack.io/persistent-port", "vm1")],
                "Pending"
            ),
            &w
        ));
        assert!(!holds(&pod("t2", &vm, &[], "Running"), &w), "another namespace");
        assert!(!holds(&pod("t1", &vm, &[], "Succeeded"), &w), "finished");
        assert!(!holds(
            &pod("t1", &[("vm.kubevirt.io/name", "vm2")], &[], "Running"),
            &w
        ));
        let mut deleting = pod("t1", &vm, &[], "Running");
        deleting.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::now(),
        ));
        assert!(!holds(&deleting, &w), "terminating");
    }

    #[test]
    fn a_pod_claims_its_port_only_with_the_named_uid() {
        let mut pod = Pod::default();
        pod.metadata.uid = Some("u1".into());
        assert!(claims(Some(&pod), ""), "a Port without a uid label");
        assert!(claims(Some(&pod), "u1"));
        assert!(!claims(Some(&pod), "u2"), "a pod of the same name, recreated");
        assert!(!claims(None, ""));
    }
}
