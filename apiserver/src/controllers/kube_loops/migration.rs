//! Live migration's cutover (issue 27, item 2): KubeVirt says where the VM runs, this loop
//! moves its Ports there.
//!
//! The target launcher's agent prepares the Port on its node and writes
//! `spec.migrationTarget` (the Port stays the source's: `spec.node` is where the cluster
//! sends). This loop watches VirtualMachineInstances and reads `status.migrationState` as
//! virt-handler writes it:
//!
//! * **Cutover** when the target node has the domain: `targetNodeDomainDetected: true` or
//!   `targetNodeDomainReadyTimestamp` set (virt-handler on the target writes them when the
//!   migrated domain starts there), or `completed: true` without `failed`. Every Port of the
//!   VM prepared for `targetPod` is moved to it in one write each: `spec.node`, `spec.nodeIP`
//!   and the pod become the target's and `migrationTarget` is cleared. Every agent then points
//!   its remote entry at the target; until then the two nodes relay the VM's traffic to each
//!   other (`bpf/lib/migrate.h`), so the cutover does not wait for this write.
//! * **Rollback** when the migration `failed` (or its abort succeeded): `migrationTarget` is
//!   cleared, the source keeps the Port. A target launcher deleted before the cutover clears
//!   it itself (its agent's DEL).
//! * A cutover whose target was never prepared (no agent on the target node, or its ADD
//!   failed) moves nothing: the source keeps the Port, and a Warning Event
//!   `MigrationTargetNotPrepared` on the VMI says why the VM has no network on the target.
//!
//! Counted in `cozyplane_port_migrations_total{result}` (`cutover`, `rolled_back`,
//! `not_prepared`); the time from the VMI's cutover signal to the Ports moved is
//! `cozyplane_port_migration_cutover_seconds`. Each Port's `Migrating` condition (derived by
//! its strategy) shows a migration in progress. A cluster without KubeVirt answers 404 for
//! the resource: the watch then looks again every 5 s, quietly.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use cozyplane_apis::v1alpha1::{PORT_WORKLOAD_LABEL, Port};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, DynamicObject, PostParams};
use kube::runtime::watcher;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use serde_json::Value;
use tokio::sync::watch;

use super::super::informer::Mirror;
use super::super::loops::AbortOnDrop;
use super::claimant::kubevirt;
use crate::errors::Result;
use crate::rbac::server as rbac;
use crate::registry::Resource;
use crate::registry::store::WriteOptions;

/// Labels of [`MIGRATIONS`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MigrationLabels {
    /// `cutover`, `rolled_back` or `not_prepared`.
    pub result: String,
}

/// `cozyplane_port_migrations_total{result}`: live migrations this process saw to an end.
pub static MIGRATIONS: LazyLock<Family<MigrationLabels, Counter>> = LazyLock::new(Family::default);

/// `cozyplane_port_migration_cutover_seconds`: from the VMI update that says the domain runs
/// on the target, as this loop received it, to every Port of the VM moved (the writes
/// acknowledged). The datapath's own cutover does not wait for it (the two nodes relay); this
/// is how long the relay carries the VM.
pub static CUTOVER: LazyLock<Histogram> =
    LazyLock::new(|| Histogram::new(exponential_buckets(0.001, 2.0, 14)));

fn count(result: &str) {
    MIGRATIONS
        .get_or_create(&MigrationLabels {
            result: result.into(),
        })
        .inc();
}

/// What `status.migrationState` says, as far as the Ports care.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    /// No migration, or one still copying.
    Running,
    /// The domain runs on the target: move the Ports to `target_pod`.
    CutOver { target_pod: String },
    /// The migration failed or was aborted: the source keeps the Ports.
    Failed { target_pod: String },
}

/// Reads a VMI's `status.migrationState`.
pub(super) fn phase(vmi: &Value) -> Phase {
    let ms = &vmi["status"]["migrationState"];
    let target_pod = ms["targetPod"].as_str().unwrap_or_default().to_string();
    if target_pod.is_empty() {
        return Phase::Running;
    }
    let failed = ms["failed"].as_bool() == Some(true) || ms["abortStatus"].as_str() == Some("Succeeded");
    if failed {
        return Phase::Failed { target_pod };
    }
    let on_target = ms["targetNodeDomainDetected"].as_bool() == Some(true)
        || ms["targetNodeDomainReadyTimestamp"]
            .as_str()
            .is_some_and(|t| !t.is_empty())
        || ms["completed"].as_bool() == Some(true);
    if on_target {
        Phase::CutOver { target_pod }
    } else {
        Phase::Running
    }
}

/// The Port as the cutover leaves it: moved to its target if it is prepared for `target_pod`
/// (`None`: nothing to do).
pub(super) fn cut_over(mut port: Value, target_pod: &str) -> Option<Value> {
    let t = port["spec"]["migrationTarget"].take();
    if t["podName"].as_str() != Some(target_pod) {
        return None;
    }
    let spec = &mut port["spec"];
    spec["node"] = t["node"].clone();
    spec["nodeIP"] = t["nodeIP"].clone();
    spec["podName"] = t["podName"].clone();
    if let Some(o) = spec.as_object_mut() {
        o.remove("migrationTarget");
    }
    Some(port)
}

/// The Port with its `migrationTarget` for `target_pod` cleared (`None`: not prepared for it).
pub(super) fn roll_back(mut port: Value, target_pod: &str) -> Option<Value> {
    if port["spec"]["migrationTarget"]["podName"].as_str() != Some(target_pod) {
        return None;
    }
    port["spec"].as_object_mut()?.remove("migrationTarget");
    Some(port)
}

struct Loop {
    kube: kube::Client,
    ports: Arc<dyn Resource>,
    mirror: Arc<Mirror<Port>>,
}

impl Loop {
    /// The Ports of VM `ns/name`.
    fn ports_of(&self, ns: &str, name: &str) -> Vec<Arc<Port>> {
        self.mirror
            .all()
            .into_iter()
            .filter(|p| {
                p.spec.pod_namespace == ns
                    && p.metadata.deletion_timestamp.is_none()
                    && p.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(PORT_WORKLOAD_LABEL))
                        .is_some_and(|w| w == name)
            })
            .collect()
    }

    /// Applies `edit` to each Port of the VM; how many it changed.
    async fn edit(
        &self,
        ports: &[Arc<Port>],
        target_pod: &str,
        edit: fn(Value, &str) -> Option<Value>,
    ) -> Result<usize> {
        let mut n = 0;
        for p in ports {
            let name = p.metadata.name.as_deref().unwrap_or_default();
            let pod = target_pod.to_string();
            let changed = std::sync::atomic::AtomicBool::new(false);
            let apply = |cur: Value| -> Result<Value> {
                match edit(cur.clone(), &pod) {
                    Some(v) => {
                        changed.store(true, std::sync::atomic::Ordering::SeqCst);
                        Ok(v)
                    }
                    None => Ok(cur),
                }
            };
            match self
                .ports
                .patch(None, name, &apply, false, &WriteOptions::server())
                .await
            {
                Ok(_) if changed.load(std::sync::atomic::Ordering::SeqCst) => n += 1,
                Ok(_) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
        }
        Ok(n)
    }

    async fn on_vmi(&self, vmi: &DynamicObject) {
        let (Some(ns), Some(name)) = (vmi.metadata.namespace.as_deref(), vmi.metadata.name.as_deref()) else {
            return;
        };
        // Most VMI updates are no migration's end: decided from the status alone, before the
        // Ports are looked at (`DynamicObject::data` is the object's spec and status).
        let phase = phase(&vmi.data);
        let target_pod = match &phase {
            Phase::Running => return,
            Phase::CutOver { target_pod } | Phase::Failed { target_pod } => target_pod.clone(),
        };
        let ports = self.ports_of(ns, name);
        if ports.is_empty() {
            return;
        }
        let prepared = ports.iter().any(|p| {
            p.spec
                .migration_target
                .as_ref()
                .is_some_and(|t| t.pod_name == target_pod)
        });
        let moved_already = ports.iter().all(|p| p.spec.pod_name == target_pod);
        let seen = std::time::Instant::now();
        let res = match phase {
            Phase::CutOver { .. } if prepared => self.edit(&ports, &target_pod, cut_over).await.map(|n| {
                CUTOVER.observe(seen.elapsed().as_secs_f64());
                tracing::info!(vmi = %format!("{ns}/{name}"), target_pod, ports = n,
                    took = ?seen.elapsed(), "live migration cut over: the VM's Ports moved to the target");
                count("cutover");
            }),
            Phase::CutOver { .. } if !moved_already => {
                self.not_prepared(vmi, ns, name, &target_pod).await;
                Ok(())
            }
            Phase::Failed { .. } if prepared => self.edit(&ports, &target_pod, roll_back).await.map(|n| {
                tracing::info!(vmi = %format!("{ns}/{name}"), target_pod, ports = n,
                    "live migration failed: the source keeps the VM's Ports");
                count("rolled_back");
            }),
            _ => Ok(()),
        };
        if let Err(e) = res {
            tracing::warn!(vmi = %format!("{ns}/{name}"), "live migration: moving the VM's Ports: {e}");
        }
    }

    /// The cutover of a target nobody prepared: counted, said once per target pod.
    async fn not_prepared(&self, vmi: &DynamicObject, ns: &str, name: &str, target_pod: &str) {
        let node = vmi.data["status"]["migrationState"]["targetNode"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let ev_name = format!("{name}.{target_pod}.not-prepared");
        let events = rbac::EVENTS
            .uses("create")
            .api_namespaced::<Event>(self.kube.clone(), ns);
        let ev = super::events::warning(
            kube::api::ObjectMeta {
                name: Some(ev_name),
                namespace: Some(ns.into()),
                ..Default::default()
            },
            k8s_openapi::api::core::v1::ObjectReference {
                api_version: Some("kubevirt.io/v1".into()),
                kind: Some("VirtualMachineInstance".into()),
                namespace: Some(ns.into()),
                name: Some(name.into()),
                uid: vmi.metadata.uid.clone(),
                ..Default::default()
            },
            "MigrationTargetNotPrepared",
            format!(
                "the migration target {target_pod} on node {node:?} has no cozyplane Port prepared (no agent there, or its network setup failed): the VM's addresses stay with the source"
            ),
        );
        match events.create(&PostParams::default(), &ev).await {
            Ok(_) => {
                count("not_prepared");
                tracing::warn!(vmi = %format!("{ns}/{name}"), target_pod, node,
                    "live migration cut over to a target without a prepared Port");
            }
            // Said already (the name is the target's).
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => tracing::warn!(vmi = %format!("{ns}/{name}"), "recording an Event: {e}"),
        }
    }
}

/// How long the watch waits before it looks again for a KubeVirt that is not installed (one
/// LIST answered 404 per period; KubeVirt installed after cozyplane is seen this soon).
const ABSENT_RETRY: Duration = Duration::from_secs(5);

/// Starts the loop: it acts while `leader` says this replica leads.
pub(super) fn start(
    kube: kube::Client,
    watch_client: kube::Client,
    ports: Arc<dyn Resource>,
    mirror: Arc<Mirror<Port>>,
    leader: watch::Receiver<bool>,
) -> AbortOnDrop {
    let ar = kubevirt("VirtualMachineInstance", "virtualmachineinstances");
    let api: Api<DynamicObject> = rbac::VIRTUALMACHINEINSTANCES
        .uses("list")
        .uses("watch")
        .api_dynamic_all(watch_client, &ar);
    let l = Loop { kube, ports, mirror };
    AbortOnDrop(tokio::spawn(async move {
        loop {
            let mut events = watcher::watcher(api.clone(), watcher::Config::default()).boxed();
            while let Some(ev) = events.next().await {
                match ev {
                    Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                        if *leader.borrow() {
                            l.on_vmi(&o).await;
                        }
                    }
                    Ok(_) => {}
                    Err(watcher::Error::InitialListFailed(kube::Error::Api(s))) if s.code == 404 => {
                        tracing::debug!(
                            "VirtualMachineInstances are not served (no KubeVirt): looking again later"
                        );
                        break;
                    }
                    Err(e) => {
                        tracing::warn!("watching VirtualMachineInstances: {e}");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            }
            tokio::time::sleep(ABSENT_RETRY).await;
        }
    }))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_migration_state_as_virt_handler_writes_it() {
        let vmi = |ms: Value| json!({"status": {"migrationState": ms}});
        assert_eq!(phase(&json!({})), Phase::Running);
        assert_eq!(
            phase(&vmi(json!({"targetPod": "t", "targetNode": "n2"}))),
            Phase::Running
        );
        let cut = Phase::CutOver {
            target_pod: "t".into(),
        };
        assert_eq!(
            phase(&vmi(json!({"targetPod": "t", "targetNodeDomainDetected": true}))),
            cut
        );
        assert_eq!(
            phase(&vmi(
                json!({"targetPod": "t", "targetNodeDomainReadyTimestamp": "2026-12-07T10:00:00Z"})
            )),
            cut
        );
        assert_eq!(phase(&vmi(json!({"targetPod": "t", "completed": true}))), cut);
        let failed = Phase::Failed {
            target_pod: "t".into(),
        };
        assert_eq!(
            phase(&vmi(json!({"targetPod": "t", "completed": true, "failed": true}))),
            failed
        );
        assert_eq!(
            phase(&vmi(json!({"targetPod": "t", "abortStatus": "Succeeded"}))),
            failed
        );
    }

    #[test]
    fn a_cutover_moves_only_a_port_prepared_for_that_target() {
        let port = json!({"spec": {"node": "n1", "nodeIP": "10.0.0.1", "podNamespace": "t1",
            "podName": "src", "migrationTarget": {"node": "n2", "nodeIP": "10.0.0.2",
            "podNamespace": "t1", "podName": "dst"}}});
        let moved = cut_over(port.clone(), "dst").unwrap();
        assert_eq!(
            moved["spec"],
            json!({"node": "n2", "nodeIP": "10.0.0.2", "podNamespace": "t1", "podName": "dst"})
        );
        assert!(cut_over(port.clone(), "other").is_none());
        assert!(cut_over(moved, "dst").is_none(), "twice is once");
        let back = roll_back(port.clone(), "dst").unwrap();
        assert_eq!(
            back["spec"],
            json!({"node": "n1", "nodeIP": "10.0.0.1", "podNamespace": "t1", "podName": "src"})
        );
        assert!(roll_back(port, "other").is_none());
    }
}
