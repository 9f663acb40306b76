//! Control loops that run inside the API server process.
//!
//! Every loop is level-triggered: a pass reads the whole current state of the kinds it cares
//! about and writes only what differs, so passes are idempotent and a restart simply runs the
//! next pass. Passes are triggered by storage watch events on the watched kinds (coalesced) and
//! by a periodic resync. With several replicas only the [leader](leader) runs them.
//!
//! * VPC status: `phase` (`Ready` once a VNI is allocated) and the `Ready` condition with
//!   `observedGeneration`.
//! * VPCPeering status: `phase`, `peerVNI`, conditions `PeerMatched`, `VPCReady`,
//!   `PeerVPCReady`, `CIDRsDisjoint`.
//! * VPCGateway status: one boundary per VPC (oldest wins): `Exclusive`, `VPCResolved`,
//!   `NATReady`, `phase`.
//! * VPCBinding reap: finalizer `sdn.cozystack.io/reap-ports`; deleting a binding deletes the
//!   Ports it authorized unless another live binding in the namespace grants the same VPC.
//!
//! With a kube connection also ([`kube_loops`]): Port GC for Ports whose Node does not exist,
//! and SecurityGroup membership (`Port.status.groups` from pod labels). Without one (plain
//! `--standalone`) those two are off.
//!
//! Port sever (`sdn.cozystack.io/sever`) is the agent's finalizer: the server only keeps a
//! terminating Port (and its address claim) until the agent removes it; see
//! `docs/allocation.md`.

pub mod kube_loops;
pub mod leader;
pub mod loops;

use std::sync::Arc;
use std::time::Duration;

use cozyplane_storage::{Event, Storage, WatchOptions};
use futures::StreamExt;
use tokio::sync::Notify;

use crate::registry::Resource;

/// How often a full pass runs without any event.
pub const RESYNC: Duration = Duration::from_secs(30);

/// The kinds whose changes trigger a pass.
const WATCHED: &[&str] = &["vpcs/", "vpcpeerings/", "vpcgateways/", "vpcbindings/"];
/// Also watched with a kube connection (Port GC and membership).
const WATCHED_KUBE: &[&str] = &["ports/", "securitygroups/"];

/// Starts the loops on `storage` for the served `kinds` (plus the kube-backed ones when `kube`
/// is given); they stop when the task is aborted.
pub fn start(
    kinds: Vec<Arc<dyn Resource>>,
    storage: Arc<dyn Storage>,
    kube: Option<kube_loops::KubeConfig>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let dirty = Arc::new(Notify::new());
        let mut watched = WATCHED.to_vec();
        if kube.is_some() {
            watched.extend_from_slice(WATCHED_KUBE);
        }
        let watcher = AbortOnDrop(tokio::spawn(watch_changes(
            storage.clone(),
            dirty.clone(),
            watched,
        )));
        let kube = kube.map(|k| kube_loops::KubeLoops::start(&k, dirty.clone()));
        let elector = leader::Elector::new(storage.clone());
        loop {
            elector.wait_leader().await;
            if let Err(e) = loops::pass(&kinds).await {
                tracing::warn!(error = %e.message, "controller pass failed");
            }
            let mut next = RESYNC;
            if let Some(k) = &kube {
                match k.pass(&kinds).await {
                    Ok(Some(due)) => next = next.min(due),
                    Ok(None) => {}
                    Err(e) => tracing::warn!(error = %e.message, "kube controller pass failed"),
                }
            }
            tokio::select! {
                () = dirty.notified() => {}
                () = tokio::time::sleep(next) => {}
            }
            if watcher.0.is_finished() {
                return;
            }
        }
    })
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn watch_changes(storage: Arc<dyn Storage>, dirty: Arc<Notify>, watched: Vec<&'static str>) {
    let prefix = "/registry/sdn.cozystack.io/";
    let mut after = None;
    loop {
        let opts = WatchOptions {
            revision: after,
            prefix: true,
            progress_interval: None,
        };
        let Ok(mut w) = storage.watch(prefix, opts).await else {
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        };
        while let Some(ev) = w.next().await {
            let Ok(ev) = ev else {
                after = None;
                dirty.notify_one();
                break;
            };
            after = Some(ev.revision());
            if let Event::Put { kv, .. } = &ev
                && is_watched(&watched, &kv.key)
            {
                dirty.notify_one();
            }
            if let Event::Delete { key, .. } = &ev
                && is_watched(&watched, key)
            {
                dirty.notify_one();
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn is_watched(watched: &[&str], key: &str) -> bool {
    key.strip_prefix("/registry/sdn.cozystack.io/")
        .is_some_and(|rest| watched.iter().any(|w| rest.starts_with(w)))
}
