//! The unix-socket server the CNI plugin talks to, and the per-command logic for the
//! default network (net 0) and VPC attachments.
//!
//! A VPC pod gets a fabric address from the node block like any pod (reported as the pod
//! IP, bridged by the datapath), plus a Port of our API, normally made when the pod was
//! scheduled to this node ([`crate::core::api::prepare`]): the pod interface carries the Port's VPC
//! address and MAC, a link-local default gateway and the VPC MTU.
//!
//! Requests for different pods run in parallel; requests for the same attachment
//! (container ID + interface) are serialized by a per-attachment lock, because the order
//! of an ADD's steps (IPAM, netlink, maps) is what makes a concurrent DEL or a retried ADD
//! correct. IPAM and the program links sit behind short synchronous locks that are never
//! held across a netlink or API call, so one slow pod never stalls another; their blocking
//! parts (fsync, aya's netlink) leave the async workers to the other pods.
//!
//! Every ADD records how long each step took (`cozyplane_cni_add_step_seconds{step}` and
//! the `steps` field of its log line): `read` (from the accept: the wait for a worker and
//! the request), `resolve` (which network; VPC grant and VNI from the watch caches), `ipam`,
//! `port` (taking the Port made ahead, or making it: then the one API round trip of a VPC
//! ADD), `veth` (netlink, host and pod side), `attach` (program links), `maps`, `persist`.
//!
//! One file per concept: `add.rs` (ADD), `del.rs` (DEL and GC, from the attachment record
//! alone), `check.rs` (CHECK, STATUS), `maps.rs` (an attachment's map entries), `reconcile.rs`
//! (start-up); this file holds the shared state, the locks and the socket server.

mod add;
mod check;
mod del;
mod maps;
mod reconcile;

pub mod attachment;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use cozyplane_cni::env::Command;
use cozyplane_cni::proto::{MAX_MESSAGE, Request, Response};
use cozyplane_cni::spec::{CniError, ErrorCode};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::UnixListener;
use tokio::sync::Mutex;

use crate::core::api::ApiClients;
use crate::core::datapath::loader::Datapath;
use crate::core::datapath::netdev::NetDev;
use crate::core::ipam::Ipam;
use crate::core::metrics::Metrics;

/// What every pod's host veth is called: [`host_veth_name`].
pub const HOST_VETH_PREFIX: &str = "cph";

/// The name of the host side of a pod's veth: `cph` + 11 hex digits of a hash of the
/// attachment key. Deterministic, so DEL and restart find it without stored state.
pub fn host_veth_name(container_id: &str, ifname: &str) -> String {
    // FNV-1a 64: stable across builds and platforms, unlike std's hasher.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in container_id.bytes().chain([b'/']).chain(ifname.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{HOST_VETH_PREFIX}{:011x}", h & 0xfff_ffff_ffff)
}

type AttachmentKey = (String, String);

/// One async lock per attachment key, created on demand and dropped with its last user.
#[derive(Default)]
struct KeyLocks(std::sync::Mutex<HashMap<AttachmentKey, Arc<Mutex<()>>>>);

struct KeyGuard<'a> {
    locks: &'a KeyLocks,
    key: AttachmentKey,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl KeyLocks {
    async fn lock(&self, container_id: &str, ifname: &str) -> KeyGuard<'_> {
        let key = (container_id.to_string(), ifname.to_string());
        let m = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(key.clone())
            .or_default()
            .clone();
        KeyGuard {
            locks: self,
            key,
            guard: Some(m.lock_owned().await),
        }
    }
}

impl Drop for KeyGuard<'_> {
    fn drop(&mut self) {
        self.guard = None;
        let mut map = self.locks.0.lock().unwrap_or_else(PoisonError::into_inner);
        // Only the map holds it: nobody waits for this attachment any more.
        if map.get(&self.key).is_some_and(|m| Arc::strong_count(m) == 1) {
            map.remove(&self.key);
        }
    }
}

/// Durations of an ADD's steps, in order.
struct Steps {
    last: Instant,
    done: Vec<(&'static str, Duration)>,
}

impl Steps {
    fn since(start: Instant) -> Self {
        Self {
            last: start,
            done: Vec::with_capacity(10),
        }
    }

    fn mark(&mut self, step: &'static str) {
        let now = Instant::now();
        self.done.push((step, now - self.last));
        self.last = now;
    }

    fn render(&self) -> String {
        self.done
            .iter()
            .map(|(s, d)| format!("{s}={:.2}", d.as_secs_f64() * 1000.0))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Runs `f`, which blocks (an fsync, a netlink round trip through a blocking socket), so
/// that the runtime's few worker threads keep serving the other pods meanwhile.
fn blocking<R>(f: impl FnOnce() -> R) -> R {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

/// Everything a CNI request needs.
pub struct AgentState {
    ipam: std::sync::Mutex<Ipam>,
    /// The IPAM generation on disk; held while writing, so concurrent ADDs share a write.
    /// Async: the ADDs queued behind a write wait without holding a thread.
    ipam_saved: tokio::sync::Mutex<u64>,
    datapath: std::sync::Mutex<Datapath>,
    attachments: KeyLocks,
    netdev: NetDev,
    pin_dir: PathBuf,
    mtu: u32,
    metrics: OnceLock<Metrics>,
    api: Option<ApiClients>,
}

impl std::fmt::Debug for AgentState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentState")
            .field("pin_dir", &self.pin_dir)
            .field("mtu", &self.mtu)
            .finish_non_exhaustive()
    }
}

fn internal(what: &str, e: impl std::fmt::Display) -> CniError {
    CniError::new(ErrorCode::Internal, what.to_string(), e.to_string())
}

impl AgentState {
    /// The pods' lifecycle over a node the core brought up (`core/node.rs`): `ipam` opened
    /// on this node's blocks, the loaded `datapath`, pod interfaces of `mtu`. The attachments of
    /// a previous run are reconciled before it returns.
    pub async fn start(
        ipam: Ipam,
        datapath: Datapath,
        netdev: NetDev,
        mtu: u32,
        api: Option<ApiClients>,
    ) -> Self {
        let state = Self {
            ipam: std::sync::Mutex::new(ipam),
            ipam_saved: tokio::sync::Mutex::new(0),
            pin_dir: datapath.pin_dir().to_path_buf(),
            datapath: std::sync::Mutex::new(datapath),
            attachments: KeyLocks::default(),
            netdev,
            mtu,
            metrics: OnceLock::new(),
            api,
        };
        state.reconcile().await;
        state
    }

    /// The bpffs directory.
    pub fn pin_dir(&self) -> &Path {
        &self.pin_dir
    }

    /// Pod MTU (underlay minus encapsulation).
    pub fn mtu(&self) -> u32 {
        self.mtu
    }

    /// The attachment whose host veth has index `ifindex`, as its record holds it now (a
    /// copy): what a feature answering on the pod's link (`features/autoconf`) knows of the
    /// pod.
    pub fn attachment_by_ifindex(&self, ifindex: u32) -> Option<crate::core::ipam::Allocation> {
        self.ipam()
            .all()
            .find(|a| a.host_ifindex == Some(ifindex))
            .cloned()
    }

    /// Every attachment of this node with a host veth (copies of the records).
    pub fn attachments(&self) -> Vec<crate::core::ipam::Allocation> {
        self.ipam()
            .all()
            .filter(|a| a.host_ifindex.is_some())
            .cloned()
            .collect()
    }

    /// Install the metrics handle (once).
    pub fn set_metrics(&self, m: Metrics) {
        let _ = self.metrics.set(m);
    }

    fn ipam(&self) -> MutexGuard<'_, Ipam> {
        self.ipam.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Make the IPAM changes made so far durable. Group commit: whoever holds the write
    /// lock snapshots everything changed until then, so the callers queued behind it find
    /// their change already on disk and return without a write of their own.
    async fn persist(&self) -> Result<(), CniError> {
        let wanted = self.ipam().generation();
        let mut saved = self.ipam_saved.lock().await;
        if *saved >= wanted {
            return Ok(());
        }
        blocking(|| {
            let (generation, bytes, path) = {
                let ipam = self.ipam();
                let (g, b) = ipam.snapshot()?;
                (g, b, ipam.path().to_path_buf())
            };
            crate::core::ipam::write_file(&path, &bytes)?;
            *saved = generation;
            Ok(())
        })
        .map_err(|e: crate::core::ipam::IpamError| internal("persisting the fabric addresses failed", e))
    }

    /// [`Self::persist`], for a feature that changed a record (a live migration's relay).
    pub(crate) async fn save_records(&self) -> Result<(), CniError> {
        self.persist().await
    }

    fn datapath(&self) -> MutexGuard<'_, Datapath> {
        self.datapath.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn sync_error(&self, op: &'static str) {
        if let Some(m) = self.metrics.get() {
            m.sync_error(op);
        }
    }

    /// Serve one request.
    pub async fn handle(&self, req: Request) -> Response {
        self.handle_since(req, Instant::now()).await
    }

    /// Serve one request accepted at `accepted` (the wait for a worker and the read count
    /// as the `read` step).
    pub async fn handle_since(&self, req: Request, accepted: Instant) -> Response {
        let version = req.config["cniVersion"].as_str().unwrap_or_default().to_string();
        let started = accepted;
        let command = req.env.command;
        let mut steps = Steps::since(accepted);
        steps.mark("read");
        let res = match command {
            Command::Add => self.add(&req, &version, &mut steps).await,
            Command::Del => self
                .del(&req.env.container_id, &req.env.ifname)
                .await
                .map(|()| None),
            Command::Check => self.check(&req).await.map(|()| None),
            Command::Status => self.status().map(|()| None),
            Command::Gc => self.gc(&req.config).await.map(|()| None),
            Command::Version => Ok(None),
        };
        if let Some(m) = self.metrics.get() {
            m.cni_request(&format!("{command:?}").to_uppercase(), res.is_ok());
            if res.is_ok() {
                for (step, d) in &steps.done {
                    m.add_step(step, *d);
                }
            }
        }
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        let steps = steps.render();
        match res {
            Ok(result) => {
                tracing::info!(?command, container = %req.env.container_id, ms, steps, "ok");
                Response::Ok { result }
            }
            Err(e) => {
                tracing::warn!(?command, container = %req.env.container_id, ms, steps, "{e}");
                Response::Err {
                    error: e.in_version(&version),
                }
            }
        }
    }
}

/// Bind the CNI socket, replacing a stale one from a previous run.
pub fn bind(path: &Path) -> std::io::Result<UnixListener> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let l = UnixListener::bind(path)?;
    // Only root (kubelet's plugin invocations) may drive the agent.
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(l)
}

/// Accept connections forever; one request per connection.
pub async fn serve(listener: UnixListener, state: Arc<AgentState>) {
    loop {
        let (mut sock, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("accept: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let accepted = Instant::now();
        let state = state.clone();
        tokio::spawn(async move {
            let mut buf = Vec::new();
            let read = tokio::time::timeout(
                Duration::from_secs(10),
                (&mut sock).take(MAX_MESSAGE as u64 + 1).read_to_end(&mut buf),
            )
            .await;
            let resp = match read {
                Ok(Ok(_)) if buf.len() <= MAX_MESSAGE => match serde_json::from_slice::<Request>(&buf) {
                    Ok(req) => state.handle_since(req, accepted).await,
                    Err(e) => Response::Err {
                        error: CniError::new(ErrorCode::Decode, "undecodable request", e.to_string()),
                    },
                },
                _ => Response::Err {
                    error: CniError::plain(ErrorCode::Io, "reading the request failed"),
                },
            };
            if let Ok(bytes) = serde_json::to_vec(&resp) {
                let _ = sock.write_all(&bytes).await;
            }
            let _ = sock.shutdown().await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn attachment_locks_serialize_one_key_and_are_dropped_after_use() {
        let locks = Arc::new(KeyLocks::default());
        let g = locks.lock("c1", "eth0").await;
        // Another attachment proceeds while c1 is held.
        drop(locks.lock("c2", "eth0").await);
        let l2 = locks.clone();
        let waiter = tokio::spawn(async move {
            let _g = l2.lock("c1", "eth0").await;
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished(), "a second lock of c1 must wait");
        drop(g);
        waiter.await.unwrap();
        assert!(locks.0.lock().unwrap().is_empty(), "entries outlive their users");
    }

    #[test]
    fn host_veth_names_are_stable_short_and_distinct() {
        let a = host_veth_name("abc", "eth0");
        assert_eq!(a, host_veth_name("abc", "eth0"));
        assert_eq!(a.len(), 14);
        assert!(a.starts_with("cph"));
        assert_ne!(a, host_veth_name("abc", "eth1"));
        assert_ne!(a, host_veth_name("abd", "eth0"));
    }
}
