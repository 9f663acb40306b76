//! Control loops that run inside the API server process.
//!
//! The loops of our own kinds ([`loops`]) are work-queue controllers fed by the watch caches
//! through typed [`informer`] mirrors: a change enqueues the objects it can affect, one worker
//! reconciles them and writes only what differs. With several replicas only the [leader]
//! (a lease in the store) works. What every object of a kind gets is set inside its write by the
//! kind's strategy, not by a controller afterwards:
//!
//! * VPC status: `phase` (`Ready` once a VNI is allocated) and the `Ready` condition with
//!   `observedGeneration`, derived in the write that allocates the VNI;
//! * VPCBinding: the finalizer `sdn.cozystack.io/reap-ports`, set by its create.
//!
//! Reconciled:
//!
//! * VPCPeering status: `phase`, `peerVNI`, conditions `PeerMatched`, `VPCReady`,
//!   `PeerVPCReady`, `CIDRsDisjoint`.
//! * VPCGateway status: one boundary per VPC (oldest wins): `Exclusive`, `VPCResolved`,
//!   `NATReady`, `phase`.
//! * VPCBinding reap: deleting a binding deletes the Ports it authorized unless another live
//!   binding in the namespace grants the same VPC, then removes the finalizer.
//!
//! With a kube connection also ([`kube_loops`], level-triggered passes over the kube caches):
//! Port GC for Ports whose Node does not exist,
//! and SecurityGroup membership (`Port.status.groups` from pod labels). Without one (plain
//! `--standalone`) those two are off.
//!
//! Port sever (`sdn.cozystack.io/sever`) is the agent's finalizer: the server only keeps a
//! terminating Port (and its address claim) until the agent removes it; see
//! `docs/allocation.md`.

pub mod informer;
pub mod kube_loops;
pub mod leader;
pub mod loops;

use std::sync::Arc;
use std::time::Duration;

use cozyplane_storage::{Event, Storage, WatchOptions};
use futures::StreamExt;
use tokio::sync::{Notify, watch};

use crate::registry::Resource;
use crate::registry::cache::WatchCache;

/// How often the kube-backed passes run without any event.
pub const RESYNC: Duration = Duration::from_secs(30);

/// Watched for the kube-backed passes (Port GC and membership).
const WATCHED_KUBE: &[&str] = &["ports/", "securitygroups/"];

/// Starts the loops for the served `kinds`, fed by their watch `caches` (plus the kube-backed
/// ones when `kube` is given); they stop when the task is aborted.
pub fn start(
    kinds: Vec<Arc<dyn Resource>>,
    caches: Vec<Arc<WatchCache>>,
    storage: Arc<dyn Storage>,
    kube: Option<kube_loops::KubeConfig>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let (leading, mut leader) = watch::channel(false);
        let elector = leader::Elector::new(storage.clone());
        let _lease = AbortOnDrop(tokio::spawn(async move {
            loop {
                leading.send_replace(elector.try_lead().await);
                tokio::time::sleep(leader::RENEW).await;
            }
        }));
        let _own = AbortOnDrop(tokio::spawn(loops::run(kinds.clone(), caches, leader.clone())));
        let Some(kube) = kube else {
            return std::future::pending().await;
        };
        let dirty = Arc::new(Notify::new());
        let watcher = AbortOnDrop(tokio::spawn(watch_changes(
            storage.clone(),
            dirty.clone(),
            WATCHED_KUBE.to_vec(),
        )));
        let kube = kube_loops::KubeLoops::start(&kube, dirty.clone());
        loop {
            if leader.wait_for(|l| *l).await.is_err() {
                return;
            }
            let mut next = RESYNC;
            match kube.pass(&kinds).await {
                Ok(Some(due)) => next = next.min(due),
                Ok(None) => {}
                Err(e) => tracing::warn!(error = %e.message, "kube controller pass failed"),
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
    let prefix = crate::registry::keys::GROUP_PREFIX;
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
    key.strip_prefix(crate::registry::keys::GROUP_PREFIX)
        .is_some_and(|rest| watched.iter().any(|w| rest.starts_with(w)))
}
