//! The unix-socket server the CNI plugin talks to, and the per-command logic for the
//! default network (net 0) and VPC attachments.
//!
//! A VPC pod gets a fabric address from the node block like any pod (reported as the pod
//! IP, bridged by the datapath), plus a Port of our API, normally made when the pod was
//! scheduled to this node ([`crate::prepare`]): the pod interface carries the Port's VPC
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

use std::collections::{BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use cozyplane_bpf::DatapathConfig;
use cozyplane_bpf::maps::bridges::BridgesMap;
use cozyplane_bpf::maps::endpoints::EndpointsMap;
use cozyplane_bpf::maps::ports::PortsMap;
use cozyplane_cni::env::Command;
use cozyplane_cni::proto::{MAX_MESSAGE, Request, Response};
use cozyplane_cni::spec::{CniError, CniResult, ErrorCode, Interface, IpConfig, Route};
use serde_json::Value;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::UnixListener;
use tokio::sync::Mutex;

use crate::StartError;
use crate::api::ApiClients;
use crate::attachment::{self, Attachment};
use crate::config::AgentConfig;
use crate::datapath::loader::Datapath;
use crate::datapath::netdev::{self, GATEWAY, NetDev, format_mac, parse_mac};
use crate::ipam::{Allocation, Block, Ipam, VpcAttachment};
use crate::metrics::Metrics;

/// What every pod's host veth is called: [`host_veth_name`].
const HOST_VETH_PREFIX: &str = "cph";

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
    /// Start-up: sysctls, tunnel device, datapath (reusing pins), IPAM, reconciliation.
    pub async fn start(cfg: &AgentConfig, block: Block, api: Option<ApiClients>) -> Result<Self, StartError> {
        // The host stack forwards net-0 traffic between pods and to the tunnel.
        std::fs::write("/proc/sys/net/ipv4/ip_forward", "1").map_err(|source| StartError::Io {
            what: "enable net.ipv4.ip_forward".into(),
            source,
        })?;
        let netdev = NetDev::new()?;
        let underlay = netdev.underlay_mtu(cfg.underlay_dev.as_deref()).await?;
        let mtu = underlay.saturating_sub(cfg.tunnel.overhead()).max(576);
        let dp_cfg = DatapathConfig {
            net0_vni: cfg.net0_vni,
            ..DatapathConfig::default()
        };
        let port = cfg.tunnel_port.unwrap_or_else(|| cfg.tunnel.default_port());
        // The device MAC is per node (from the node IP) when known: frames the host stack
        // sends into the tunnel carry it as inner source, and a VXLAN device drops received
        // frames whose inner source is its own MAC (loop check). The datapath never needs the
        // device MAC: it addresses overlay frames to `tunnel_mac` and the receiving program
        // redirects them whatever their destination MAC.
        let dev_mac = cfg.node_ip.map_or(dp_cfg.tunnel_mac, |ip| {
            let o = ip.octets();
            [0x02, 0xcf, o[0], o[1], o[2], o[3]]
        });
        let tunnel = netdev
            .ensure_tunnel(cfg.tunnel, &cfg.tunnel_dev, port, mtu, dev_mac)
            .await?;
        let dp_cfg = DatapathConfig {
            tunnel_ifindex: tunnel.index,
            ..dp_cfg
        };
        let mut datapath = Datapath::load(&cfg.bpffs_dir, &dp_cfg)?;
        tracing::info!(
            reused_maps = datapath.reused_maps,
            pin_dir = %cfg.bpffs_dir.display(),
            tunnel = %cfg.tunnel_dev,
            underlay_mtu = underlay,
            pod_mtu = mtu,
            "datapath loaded"
        );
        datapath.attach_overlay(&cfg.tunnel_dev)?;
        let ipam = Ipam::open(&cfg.state_dir, block)?;
        let state = Self {
            ipam: std::sync::Mutex::new(ipam),
            ipam_saved: tokio::sync::Mutex::new(0),
            datapath: std::sync::Mutex::new(datapath),
            attachments: KeyLocks::default(),
            netdev,
            pin_dir: cfg.bpffs_dir.clone(),
            mtu,
            metrics: OnceLock::new(),
            api,
        };
        state.reconcile().await;
        Ok(state)
    }

    /// The bpffs directory.
    pub fn pin_dir(&self) -> &Path {
        &self.pin_dir
    }

    /// Pod MTU (underlay minus encapsulation).
    pub fn mtu(&self) -> u32 {
        self.mtu
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
            crate::ipam::write_file(&path, &bytes)?;
            *saved = generation;
            Ok(())
        })
        .map_err(|e: crate::ipam::IpamError| internal("persisting the fabric addresses failed", e))
    }

    fn datapath(&self) -> MutexGuard<'_, Datapath> {
        self.datapath.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn sync_error(&self, op: &'static str) {
        if let Some(m) = self.metrics.get() {
            m.sync_error(op);
        }
    }

    /// Make the kernel state match the IPAM records after a restart, without tearing
    /// anything down: pods whose veth still exists get their map entries, routes and
    /// program links re-asserted (links are updated in place); pods whose veth is gone
    /// (deleted while the agent was down) are released; a host veth without a record (an
    /// ADD that never finished: the record is written last) is deleted, with the routes,
    /// neighbour and filters it carries; map entries nobody owns are pruned.
    async fn reconcile(&self) {
        let allocs: Vec<Allocation> = self.ipam().all().cloned().collect();
        let recorded: BTreeSet<String> = allocs
            .iter()
            .map(|a| host_veth_name(&a.container_id, &a.ifname))
            .collect();
        match self.netdev.link_names(HOST_VETH_PREFIX).await {
            Ok(names) => {
                for name in names.iter().filter(|n| !recorded.contains(*n)) {
                    tracing::info!(host = %name, "removing the veth of an ADD that never finished");
                    let _ = self.datapath().detach(name);
                    if let Err(e) = self.netdev.delete(name).await {
                        tracing::warn!(host = %name, "reconcile: {e}");
                        self.sync_error("reconcile");
                    }
                }
            }
            Err(e) => {
                tracing::warn!("reconcile: {e}");
                self.sync_error("reconcile");
            }
        }
        let mut live_ifindex = BTreeSet::new();
        let mut live_eps: BTreeSet<(u32, Ipv4Addr)> = BTreeSet::new();
        let mut live_bridges = BTreeSet::new();
        let (mut kept, mut released) = (0, 0);
        for a in allocs {
            let host = host_veth_name(&a.container_id, &a.ifname);
            let link = match self.netdev.link(&host).await {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!(%host, "reconcile: {e}");
                    self.sync_error("reconcile");
                    continue;
                }
            };
            match (link, a.mac.as_deref().and_then(parse_mac)) {
                (Some(l), Some(mac)) => {
                    live_ifindex.insert(l.index);
                    match &a.vpc {
                        None => live_eps.insert((0, a.ip)),
                        Some(v) => {
                            live_bridges.insert(a.ip);
                            live_eps.insert((v.vni, v.ip))
                        }
                    };
                    let res = async {
                        self.datapath().attach_pod(&host).map_err(|e| e.to_string())?;
                        // Pinned TCX links are what agents before cls_bpf attach left; the
                        // filters replace them (unpinned, the links go).
                        self.datapath().detach(&host).map_err(|e| e.to_string())?;
                        self.write_maps(l.index, a.ip, a.vpc.as_ref(), mac)
                            .map_err(|e| e.to_string())?;
                        self.netdev
                            .pod_host_routes(l.index, a.ip, mac)
                            .await
                            .map_err(|e| e.to_string())
                    }
                    .await;
                    if let Err(e) = res {
                        tracing::warn!(%host, "reconcile: {e}");
                        self.sync_error("reconcile");
                    }
                    kept += 1;
                }
                _ => {
                    let _ = self.datapath().detach(&host);
                    let _ = self.netdev.delete(&host).await;
                    let _ = self.remove_maps(None, a.ip, a.vpc.as_ref());
                    if let (Some(v), Some(api)) = (&a.vpc, &self.api)
                        && let Err(e) = api.delete_port(&v.port).await
                    {
                        tracing::warn!(port = %v.port, "reconcile: {e}");
                    }
                    self.ipam().release(&a.container_id, &a.ifname);
                    released += 1;
                }
            }
        }
        // Entries without an owner (e.g. a pod deleted while the agent was down).
        if let Ok(mut ports) = PortsMap::from_pin(&self.pin_dir) {
            let stale: Vec<u32> = ports
                .inner()
                .keys()
                .filter_map(Result::ok)
                .filter(|k| !live_ifindex.contains(k))
                .collect();
            for k in stale {
                let _ = ports.remove(k);
            }
        }
        if let Ok(mut eps) = EndpointsMap::from_pin(&self.pin_dir) {
            let stale: Vec<(u32, Ipv4Addr)> = eps
                .inner()
                .keys()
                .filter_map(Result::ok)
                .filter_map(|k| Some((k.net, k.ip.to_v4()?)))
                .filter(|k| !live_eps.contains(k))
                .collect();
            for (net, ip) in stale {
                let _ = eps.remove(net, IpAddr::V4(ip));
            }
        }
        if let Ok(mut br) = BridgesMap::from_pin(&self.pin_dir) {
            let stale: Vec<Ipv4Addr> = br
                .inner()
                .keys()
                .filter_map(Result::ok)
                .filter_map(cozyplane_bpf::Addr::to_v4)
                .filter(|ip| !live_bridges.contains(ip))
                .collect();
            for ip in stale {
                let _ = br.remove(IpAddr::V4(ip));
            }
        }
        if let Err(e) = self.persist().await {
            tracing::warn!("reconcile: {e}");
            self.sync_error("reconcile");
        }
        tracing::info!(kept, released, "reconciled pod attachments");
    }

    /// The map entries of one attachment: `fabric` is the node-block address; a VPC pod's
    /// endpoint is its VPC address in its VNI, and the fabric address is bridged to it.
    fn write_maps(
        &self,
        ifindex: u32,
        fabric: Ipv4Addr,
        vpc: Option<&VpcAttachment>,
        mac: [u8; 6],
    ) -> Result<(), aya::maps::MapError> {
        let (net, ip) = vpc.map_or((0, fabric), |v| (v.vni, v.ip));
        // Endpoint first: once the port exists, sdn_from_pod checks the source against it.
        EndpointsMap::from_pin(&self.pin_dir)?.upsert(net, IpAddr::V4(ip), ifindex, mac)?;
        if vpc.is_some() {
            BridgesMap::from_pin(&self.pin_dir)?.upsert(IpAddr::V4(fabric), net, IpAddr::V4(ip))?;
        }
        PortsMap::from_pin(&self.pin_dir)?.set(ifindex, net)
    }

    /// Removes what [`Self::write_maps`] wrote (tolerates "already gone").
    fn remove_maps(
        &self,
        ifindex: Option<u32>,
        fabric: Ipv4Addr,
        vpc: Option<&VpcAttachment>,
    ) -> Result<(), aya::maps::MapError> {
        if let Some(i) = ifindex {
            PortsMap::from_pin(&self.pin_dir)?.remove(i)?;
        }
        let (net, ip) = vpc.map_or((0, fabric), |v| (v.vni, v.ip));
        EndpointsMap::from_pin(&self.pin_dir)?.remove(net, IpAddr::V4(ip))?;
        if vpc.is_some() {
            BridgesMap::from_pin(&self.pin_dir)?.remove(IpAddr::V4(fabric))?;
        }
        Ok(())
    }

    /// Which network the pod asked for: the netconf/`CNI_ARGS` request, else the pod's
    /// annotation (watch cache, or a GET on a miss). No API configured: net 0.
    async fn requested(&self, req: &Request) -> Result<Attachment, CniError> {
        let att = attachment::classify(&req.env, &req.config);
        if att != Attachment::Default {
            return Ok(att);
        }
        let (Some(api), Some(pod)) = (&self.api, req.env.pod()) else {
            return Ok(att);
        };
        Ok(match api.requested_vpc(&pod.namespace, &pod.name).await? {
            Some(vpc) => Attachment::Vpc { vpc },
            None => Attachment::Default,
        })
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

    async fn add(&self, req: &Request, version: &str, steps: &mut Steps) -> Result<Option<Value>, CniError> {
        let att = self.requested(req).await?;
        let env = &req.env;
        let vpc = match (&att, &self.api) {
            (Attachment::Default, _) => None,
            (Attachment::Vpc { .. }, None) => {
                return Err(attachment::unsupported(&att).unwrap_or_else(|| {
                    CniError::plain(ErrorCode::VpcUnavailable, "VPC attachments need --kubeconfig")
                }));
            }
            (Attachment::Vpc { vpc }, Some(api)) => {
                // The namespace comes from the runtime (CNI_ARGS), never from the pod.
                let pod = env.pod().ok_or_else(|| {
                    CniError::new(
                        ErrorCode::InvalidEnv,
                        "a VPC attachment needs K8S_POD_NAMESPACE and K8S_POD_NAME in CNI_ARGS",
                        format!("requested VPC {vpc:?}"),
                    )
                })?;
                Some((api, api.resolve_vpc(&pod.namespace, &pod.name, vpc).await?, pod))
            }
        };
        steps.mark("resolve");
        let pod = env
            .pod()
            .map(|p| format!("{}/{}", p.namespace, p.name))
            .unwrap_or_default();
        let _attachment = self.attachments.lock(&env.container_id, &env.ifname).await;
        let (ip, previous, retried) = {
            let mut ipam = self.ipam();
            let retried = ipam.get(&env.container_id, &env.ifname).is_some();
            let ip = ipam
                .allocate(&env.container_id, &env.ifname, &env.netns, &pod)
                .map_err(|e| internal("fabric address allocation failed", e))?;
            // A repeated ADD (runtime retry) reuses the Port it created before.
            let previous = ipam
                .get(&env.container_id, &env.ifname)
                .and_then(|a| a.vpc.clone());
            (ip, previous, retried)
        };
        // The record goes to disk once, complete, before ADD returns; until then the address
        // is only held in memory. An ADD cut short by a crash leaves at most a host veth
        // without a record, which restart reconciliation deletes by its name.
        let host = host_veth_name(&env.container_id, &env.ifname);
        // A repeated ADD starts from a clean slate for this attachment. A first ADD has
        // nothing to clean: a failed ADD removes its veth, and so does a restart.
        if retried {
            let _ = self.datapath().detach(&host);
            let _ = self.netdev.delete(&host).await;
        }
        steps.mark("ipam");

        // The VPC side: the Port (reused on a retry), its address and MAC.
        let mut vpc_att: Option<VpcAttachment> = None;
        let mut vpc_mac: Option<[u8; 6]> = None;
        let mut mtu = self.mtu;
        if let Some((api, v, p)) = &vpc {
            let claimed = async {
                let existing = match &previous {
                    Some(prev) if prev.vni == v.vni => api.get_port(&prev.port).await?,
                    _ => None,
                };
                let uid = Some(p.uid.as_str()).filter(|u| !u.is_empty());
                let port = match existing {
                    Some(port) => port,
                    None => api.take_port(v, &p.namespace, &p.name, uid).await?,
                };
                let name = port.metadata.name.clone().unwrap_or_default();
                let vip: Ipv4Addr = port.spec.ip.parse().map_err(|_| {
                    internal(
                        "the Port has no IPv4 address",
                        format!("{name}: {:?}", port.spec.ip),
                    )
                })?;
                let mac = parse_mac(&port.spec.mac)
                    .ok_or_else(|| internal("the Port has no MAC", format!("{name}: {:?}", port.spec.mac)))?;
                Ok::<_, CniError>((
                    VpcAttachment {
                        vni: v.vni,
                        ip: vip,
                        port: name,
                        vpc: format!("{}/{}", v.namespace, v.name),
                    },
                    mac,
                ))
            }
            .await;
            match claimed {
                Ok((va, mac)) => {
                    vpc_att = Some(va);
                    vpc_mac = Some(mac);
                }
                Err(e) => {
                    self.ipam().release(&env.container_id, &env.ifname);
                    let _ = self.persist().await;
                    return Err(e);
                }
            }
            if v.mtu > 0 {
                mtu = mtu.min(v.mtu);
            }
            steps.mark("port");
        }
        let pod_ip = vpc_att.as_ref().map_or(ip, |v| v.ip);

        let setup = async {
            // The pod was stamped with the Port's address and MAC when the Port was made.
            let (hl, pod_mac) = self
                .netdev
                .create_pod_veth(&host, &env.netns, &env.ifname, pod_ip, vpc_mac, ip, mtu)
                .await
                .map_err(|e| match e {
                    netdev::NetdevError::Io { ref what, .. } if what.starts_with("open netns") => {
                        CniError::new(
                            ErrorCode::UnknownContainer,
                            "container netns not found",
                            e.to_string(),
                        )
                    }
                    e => internal("creating the pod interface failed", e),
                })?;
            steps.mark("veth");
            {
                // aya's tc requests take RTNL too: in turn with the netlink work, so the ADDs
                // waiting for it hold no thread.
                let _turn = netdev::rtnl_turn().await;
                blocking(|| self.datapath().attach_pod(&host))
                    .map_err(|e| internal("attaching the datapath failed", e))?;
            }
            steps.mark("attach");
            self.write_maps(hl.index, ip, vpc_att.as_ref(), pod_mac)
                .map_err(|e| internal("writing the datapath maps failed", e))?;
            steps.mark("maps");
            self.ipam().complete(ip, &format_mac(pod_mac), vpc_att.clone());
            self.persist().await?;
            steps.mark("persist");
            Ok::<_, CniError>((hl, pod_mac))
        }
        .await;
        let (hl, pod_mac) = match setup {
            Ok(v) => v,
            Err(e) => {
                self.sync_error("add");
                // Undo whatever part was done; each step tolerates "already gone".
                let l = self.netdev.link(&host).await.ok().flatten();
                let _ = self.remove_maps(l.map(|l| l.index), ip, vpc_att.as_ref());
                let _ = self.datapath().detach(&host);
                let _ = self.netdev.delete(&host).await;
                self.ipam().release(&env.container_id, &env.ifname);
                let _ = self.persist().await;
                if let (Some(va), Some((api, _, _))) = (&vpc_att, &vpc) {
                    let _ = api.delete_port(&va.port).await;
                }
                return Err(e);
            }
        };
        let result = CniResult {
            cni_version: String::new(),
            interfaces: vec![
                Interface {
                    name: host,
                    mac: format_mac(hl.mac),
                    mtu: Some(mtu),
                    sandbox: None,
                },
                Interface {
                    name: env.ifname.clone(),
                    mac: format_mac(pod_mac),
                    mtu: Some(mtu),
                    sandbox: Some(env.netns.clone()),
                },
            ],
            ips: vec![IpConfig {
                version: None,
                address: format!("{ip}/32"),
                gateway: Some(GATEWAY.to_string()),
                interface: Some(1),
            }],
            routes: vec![Route {
                dst: "0.0.0.0/0".into(),
                gw: Some(GATEWAY.to_string()),
            }],
            dns: Default::default(),
        }
        .for_version(version);
        serde_json::to_value(result)
            .map(Some)
            .map_err(|e| internal("encoding the result failed", e))
    }

    async fn del(&self, container_id: &str, ifname: &str) -> Result<(), CniError> {
        let _attachment = self.attachments.lock(container_id, ifname).await;
        let host = host_veth_name(container_id, ifname);
        let alloc = self.ipam().get(container_id, ifname).cloned();
        let link = self
            .netdev
            .link(&host)
            .await
            .map_err(|e| internal("looking up the pod veth failed", e))?;
        // The Port first: if our API is unreachable the DEL fails and is retried, with the
        // local state (and the record naming the Port) still in place.
        if let Some(v) = alloc.as_ref().and_then(|a| a.vpc.as_ref()) {
            match &self.api {
                Some(api) => api.delete_port(&v.port).await?,
                None => tracing::warn!(port = %v.port, "no API configured: the Port is left behind"),
            }
        }
        if let Some(l) = &link {
            PortsMap::from_pin(&self.pin_dir)
                .and_then(|mut p| p.remove(l.index))
                .map_err(|e| internal("removing map entries failed", e))?;
        }
        if let Some(a) = &alloc {
            self.remove_maps(None, a.ip, a.vpc.as_ref())
                .map_err(|e| internal("removing map entries failed", e))?;
        }
        self.datapath()
            .detach(&host)
            .map_err(|e| internal("unpinning links failed", e))?;
        // Deleting the host end removes the pod end and the host route with it.
        self.netdev
            .delete(&host)
            .await
            .map_err(|e| internal("deleting the pod veth failed", e))?;
        self.ipam().release(container_id, ifname);
        self.persist().await
    }

    async fn check(&self, req: &Request) -> Result<(), CniError> {
        let env = &req.env;
        let fail = |msg: String| CniError::new(ErrorCode::CheckFailed, "attachment check failed", msg);
        let _attachment = self.attachments.lock(&env.container_id, &env.ifname).await;
        let alloc = self
            .ipam()
            .get(&env.container_id, &env.ifname)
            .cloned()
            .ok_or_else(|| {
                CniError::new(
                    ErrorCode::UnknownContainer,
                    "unknown attachment",
                    format!("{}/{} was never added on this node", env.container_id, env.ifname),
                )
            })?;
        // The runtime's view (prevResult) must name our address.
        if let Some(prev) = req.config.get("prevResult") {
            let want = format!("{}/32", alloc.ip);
            let listed = prev["ips"]
                .as_array()
                .is_some_and(|ips| ips.iter().any(|i| i["address"].as_str() == Some(&want)));
            if !listed {
                return Err(fail(format!("prevResult does not list {want}")));
            }
        }
        let host = host_veth_name(&env.container_id, &env.ifname);
        let hl = self
            .netdev
            .link(&host)
            .await
            .map_err(|e| internal("netlink", e))?
            .ok_or_else(|| fail(format!("host veth {host} is missing")))?;
        if !hl.up {
            return Err(fail(format!("host veth {host} is down")));
        }
        let (net, pod_ip) = alloc.vpc.as_ref().map_or((0, alloc.ip), |v| (v.vni, v.ip));
        let port = PortsMap::from_pin(&self.pin_dir)
            .and_then(|p| p.get(hl.index))
            .map_err(|e| internal("reading sdn_ports", e))?;
        if port.map(|p| p.net) != Some(net) {
            return Err(fail(format!(
                "sdn_ports[{}] is {port:?}, want net {net}",
                hl.index
            )));
        }
        if net != 0 {
            let br = BridgesMap::from_pin(&self.pin_dir)
                .and_then(|m| m.get(IpAddr::V4(alloc.ip)))
                .map_err(|e| internal("reading sdn_bridges", e))?;
            if br != Some((net, IpAddr::V4(pod_ip))) {
                return Err(fail(format!(
                    "sdn_bridges[{}] is {br:?}, want ({net}, {pod_ip})",
                    alloc.ip
                )));
            }
        }
        let ep = EndpointsMap::from_pin(&self.pin_dir)
            .and_then(|m| m.get(net, IpAddr::V4(pod_ip)))
            .map_err(|e| internal("reading sdn_endpoints", e))?
            .ok_or_else(|| fail(format!("sdn_endpoints has no entry for {net}/{pod_ip}")))?;
        if ep.ifindex != hl.index {
            return Err(fail(format!(
                "sdn_endpoints[{pod_ip}] points at ifindex {}, want {}",
                ep.ifindex, hl.index
            )));
        }
        let pod = self
            .netdev
            .inspect_pod(&env.netns, &env.ifname)
            .await
            .map_err(|e| internal("inspecting the pod netns", e))?
            .ok_or_else(|| fail(format!("{} is missing in {}", env.ifname, env.netns)))?;
        if pod.link.mac != ep.mac {
            return Err(fail(format!(
                "{} has MAC {}, the datapath expects {}",
                env.ifname,
                format_mac(pod.link.mac),
                format_mac(ep.mac)
            )));
        }
        if !pod.addrs.contains(&(pod_ip, 32)) {
            return Err(fail(format!(
                "{} lacks {pod_ip}/32 (has {:?})",
                env.ifname, pod.addrs
            )));
        }
        Ok(())
    }

    fn status(&self) -> Result<(), CniError> {
        let ipam = self.ipam();
        if ipam.free() == 0 {
            return Err(CniError::new(
                ErrorCode::NotAvailable,
                "plugin not available",
                format!("fabric block {} is exhausted", ipam.block()),
            ));
        }
        Ok(())
    }

    async fn gc(&self, config: &Value) -> Result<(), CniError> {
        let valid: BTreeSet<(String, String)> = config["cni.dev/valid-attachments"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| {
                Some((
                    a["containerID"].as_str()?.to_string(),
                    a["ifname"].as_str()?.to_string(),
                ))
            })
            .collect();
        let stale: Vec<(String, String)> = {
            self.ipam()
                .all()
                .map(|a| (a.container_id.clone(), a.ifname.clone()))
                .filter(|k| !valid.contains(k))
                .collect()
        };
        for (cid, ifname) in stale {
            tracing::info!(container = %cid, %ifname, "gc: removing stale attachment");
            self.del(&cid, &ifname).await?;
        }
        Ok(())
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
