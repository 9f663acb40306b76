//! Port claimants: a live Port whose pod is gone is deleted.
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
use std::time::Duration;

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

#[cfg(test)]
mod tests {
    use super::*;

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
