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
//!   `PeerVPCReady`, `CIDRsDisjoint`, `FamilyShared`.
//! * VPCGateway status: one boundary per VPC (oldest wins): `Exclusive`, `VPCResolved`,
//!   `NATReady`, `phase` (only without a kube connection; with one the gateway door loop below
//!   writes it, NAT addresses included).
//! * VPCBinding reap: deleting a binding deletes the Ports it authorized unless another live
//!   binding in the namespace grants the same VPC, then removes the finalizer.
//!
//! With a kube connection also ([`kube_loops`], the same pattern with the Node, Pod, Service and
//! EndpointSlice informers): Port GC for Ports whose Node does not exist, SecurityGroup
//! membership (`Port.status.groups` from pod labels), Port claimants, and the doors of VPCs: the
//! LoadBalancer Services and EndpointSlices of VPCGateways and FloatingIPs and their status.
//! Without one (plain `--standalone`) those are off.
//!
//! Port sever (`sdn.cozystack.io/sever`) is the agent's finalizer: the server only keeps a
//! terminating Port (and its address claim) until the agent removes it; see
//! `docs/allocation.md`.

pub mod informer;
pub mod kube_loops;
pub mod leader;
pub mod loops;
pub mod queue;

use std::sync::Arc;

use cozyplane_storage::Storage;
use tokio::sync::watch;

use crate::registry::Resource;
use crate::registry::cache::WatchCache;
use loops::AbortOnDrop;

/// Starts the loops for the served `kinds`, fed by their watch `caches` (plus the kube-backed
/// ones when `kube` is given); they stop when the task is aborted.
pub fn start(
    kinds: Vec<Arc<dyn Resource>>,
    caches: Vec<Arc<WatchCache>>,
    storage: Arc<dyn Storage>,
    kube: Option<kube_loops::KubeConfig>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let (leading, leader) = watch::channel(false);
        let elector = leader::Elector::new(storage.clone());
        let _lease = AbortOnDrop(tokio::spawn(async move {
            let mut lapses = elector.lapses().await;
            loop {
                let held = elector.try_lead().await;
                leading.send_replace(held);
                if held {
                    tokio::time::sleep(leader::RENEW).await;
                } else {
                    // A candidate campaigns again when the holder's lease lapses (etcd deletes
                    // the key), not at its next tick: the hand-over then takes what is left of
                    // the dead holder's lease, not that plus up to one renew period.
                    elector.until_lapse(&mut lapses).await;
                }
            }
        }));
        let _own = AbortOnDrop(tokio::spawn(loops::run(
            kinds.clone(),
            caches.clone(),
            leader.clone(),
            kube.is_some(),
        )));
        let _kube = kube.map(|k| kube_loops::KubeLoops::start(&k, &kinds, &caches, leader.clone()));
        std::future::pending::<()>().await;
    })
}
