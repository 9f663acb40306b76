//! Watches turned into `sdn_remotes` entries: which endpoint lives behind which node.
//!
//! * **Net 0** from the kube API: every Pod with `status.podIP` and `status.hostIP` on
//!   another node (host-network pods, whose pod IP is the host IP, are skipped) becomes
//!   `{0, podIP} → hostIP`. Per-pod entries, not per-node blocks: `sdn_remotes` is an exact
//!   hash, and pod entries also cover VPC pods' fabric addresses (the bridge). The same
//!   watch fills the pod cache the CNI path reads the `sdn.cozystack.io/vpc` annotation from.
//! * **VPC nets** from our API: every Port on another node (watched with the field
//!   selector `spec.node!=<this node>`) becomes `{vni, spec.ip} → spec.nodeIP`; the VNI
//!   comes from the VPC watch. Local Ports are written by the CNI path itself.
//! * **Grants** for the CNI path: VPCBindings and VPCs (VNI, MTU), so a VPC ADD resolves
//!   its VPC without an API round trip ([`crate::api::Grants`]).
//!
//! * **Host routes** to the net-0 entries: each remote `{0, podIP} → hostIP` also becomes a
//!   kernel route `podIP/32 dev <tunnel> encap ip id <net0_vni> dst hostIP`, so the node's
//!   own stack (node → pod on another node, the node's replies to such pods) uses the
//!   overlay like the pods do. The tunnel device is NOARP, so these frames carry the shared
//!   tunnel MAC and `sdn_from_overlay` delivers them on the other side.
//!
//! One task holds the three caches; after every event it recomputes the desired entries
//! and writes the difference. Entries are pruned only once the watches that own them
//! listed completely (net 0: Pods; VPC nets: Ports and VPCs), so a restart first adopts
//! whatever is pinned and removes only what the API no longer has.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use cozyplane_apis::v1alpha1::{Port, VPC, VPCBinding};
use cozyplane_bpf::maps::remotes::RemotesMap;
use futures::{StreamExt as _, stream::BoxStream};
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};

use crate::api::{ApiClients, Grants, PodFacts, VPC_ANNOTATION, binding_grant};

type Key = (u32, IpAddr);

enum Ev {
    Pod(Box<Result<Event<Pod>, watcher::Error>>),
    Vpc(Result<Event<VPC>, watcher::Error>),
    Port(Result<Event<Port>, watcher::Error>),
    Binding(Result<Event<VPCBinding>, watcher::Error>),
}

/// Whether an event can change the live cache (a list's items land only at `InitDone`).
fn changes_live<O>(r: &Result<Event<O>, watcher::Error>) -> bool {
    matches!(r, Ok(Event::InitDone | Event::Apply(_) | Event::Delete(_)))
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct PodRow {
    ip: Option<IpAddr>,
    host: Option<IpAddr>,
    facts: PodFacts,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct PortRow {
    vpc: (String, String),
    ip: Option<IpAddr>,
    node: String,
    node_ip: Option<IpAddr>,
}

/// A cache fed by list+watch: `Init` starts a new list, `InitDone` swaps it in.
struct Cache<K, V> {
    live: HashMap<K, V>,
    pending: Option<HashMap<K, V>>,
    synced: bool,
}

impl<K: std::hash::Hash + Eq, V> Cache<K, V> {
    fn new() -> Self {
        Self {
            live: HashMap::new(),
            pending: None,
            synced: false,
        }
    }

    fn apply<O>(&mut self, ev: Event<O>, row: impl Fn(&O) -> Option<(K, V)>, key: impl Fn(&O) -> K) {
        match ev {
            Event::Init => self.pending = Some(HashMap::new()),
            Event::InitApply(o) => {
                if let (Some(p), Some((k, v))) = (self.pending.as_mut(), row(&o)) {
                    p.insert(k, v);
                }
            }
            Event::InitDone => {
                if let Some(p) = self.pending.take() {
                    self.live = p;
                }
                self.synced = true;
            }
            Event::Apply(o) => match row(&o) {
                Some((k, v)) => {
                    self.live.insert(k, v);
                }
                None => {
                    self.live.remove(&key(&o));
                }
            },
            Event::Delete(o) => {
                self.live.remove(&key(&o));
            }
        }
    }
}

fn name_of(m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> (String, String) {
    (
        m.namespace.clone().unwrap_or_default(),
        m.name.clone().unwrap_or_default(),
    )
}

fn pod_row(p: &Pod) -> Option<((String, String), PodRow)> {
    let status = p.status.as_ref();
    let parse = |s: Option<&String>| s.and_then(|s| s.parse::<IpAddr>().ok());
    Some((
        name_of(&p.metadata),
        PodRow {
            ip: parse(status.and_then(|s| s.pod_ip.as_ref())),
            host: parse(status.and_then(|s| s.host_ip.as_ref())),
            facts: PodFacts {
                vpc: p
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(VPC_ANNOTATION))
                    .filter(|v| !v.is_empty())
                    .cloned(),
            },
        },
    ))
}

fn port_row(p: &Port) -> Option<(String, PortRow)> {
    Some((
        p.metadata.name.clone()?,
        PortRow {
            vpc: (p.spec.vpc_ref.namespace.clone(), p.spec.vpc_ref.name.clone()),
            ip: p.spec.ip.parse().ok(),
            node: p.spec.node.clone(),
            node_ip: p.spec.node_ip.parse().ok(),
        },
    ))
}

fn vpc_row(v: &VPC) -> Option<((String, String), (u32, u32))> {
    let vni = v.status.as_ref().and_then(|s| u32::try_from(s.vni).ok())?;
    let mtu = u32::try_from(v.spec.mtu).unwrap_or(0);
    (vni != 0).then(|| (name_of(&v.metadata), (vni, mtu)))
}

fn binding_row(b: &VPCBinding) -> Option<((String, String), (String, String))> {
    let key = name_of(&b.metadata);
    let grant = binding_grant(b, &key.0)?;
    Some((key, grant))
}

fn grants(
    bindings: &HashMap<(String, String), (String, String)>,
    vpcs: &HashMap<(String, String), (u32, u32)>,
) -> Grants {
    let mut g = Grants {
        vpcs: vpcs.clone(),
        ..Grants::default()
    };
    for ((ns, _), grant) in bindings {
        g.bindings.entry(ns.clone()).or_default().push(grant.clone());
    }
    g
}

/// The entries the caches ask for.
fn desired(
    me: &str,
    my_ip: IpAddr,
    pods: &HashMap<(String, String), PodRow>,
    vpcs: &HashMap<(String, String), (u32, u32)>,
    ports: &HashMap<String, PortRow>,
) -> HashMap<Key, IpAddr> {
    let mut out = HashMap::new();
    for r in pods.values() {
        if let (Some(ip), Some(host)) = (r.ip, r.host)
            && host != my_ip
            && ip != host
        {
            out.insert((0, ip), host);
        }
    }
    for r in ports.values() {
        if r.node == me {
            continue;
        }
        if let (Some(ip), Some(node), Some((vni, _))) = (r.ip, r.node_ip, vpcs.get(&r.vpc)) {
            out.insert((*vni, ip), node);
        }
    }
    out
}

fn pinned(pin_dir: &Path) -> HashMap<Key, IpAddr> {
    let Ok(m) = RemotesMap::from_pin(pin_dir) else {
        return HashMap::new();
    };
    let keys: Vec<_> = m.inner().keys().filter_map(Result::ok).collect();
    keys.into_iter()
        .filter_map(|k| {
            let ip = IpAddr::from(k.ip);
            Some(((k.net, ip), m.get(k.net, ip).ok()??))
        })
        .collect()
}

/// Where the host routes to remote net-0 pods go.
#[derive(Clone, Debug)]
pub struct HostRoutes {
    /// The collect-metadata tunnel device.
    pub tunnel_dev: String,
    /// The VNI net 0 travels under.
    pub net0_vni: u32,
}

/// Runs the watches forever, writing `sdn_remotes` under `pin_dir` and the host routes.
pub async fn run(api: ApiClients, pin_dir: PathBuf, routes: HostRoutes) {
    let netdev = match crate::datapath::netdev::NetDev::new() {
        Ok(n) => Some(n),
        Err(e) => {
            tracing::warn!("no host routes to remote pods: {e}");
            None
        }
    };
    let mut tunnel: Option<u32> = None;
    // Routes installed by this process (after a restart every one is replaced once).

    let cfg = watcher::Config::default();
    let pods = watcher::watcher(Api::<Pod>::all(api.kube.clone()), cfg.clone())
        .default_backoff()
        .map(|e| Ev::Pod(Box::new(e)));
    let vpcs = watcher::watcher(Api::<VPC>::all(api.sdn.clone()), cfg.clone())
        .default_backoff()
        .map(Ev::Vpc);
    let bindings = watcher::watcher(Api::<VPCBinding>::all(api.sdn.clone()), cfg.clone())
        .default_backoff()
        .map(Ev::Binding);
    // Local Ports are the CNI path's own; only the other nodes' ones become routes.
    let remote_ports = cfg.fields(&format!("spec.node!={}", api.node));
    let ports = watcher::watcher(Api::<Port>::all(api.sdn.clone()), remote_ports)
        .default_backoff()
        .map(Ev::Port);
    let streams: Vec<BoxStream<'static, Ev>> =
        vec![pods.boxed(), vpcs.boxed(), ports.boxed(), bindings.boxed()];
    let mut events = futures::stream::select_all(streams);

    let mut pod_cache: Cache<(String, String), PodRow> = Cache::new();
    let mut vpc_cache: Cache<(String, String), (u32, u32)> = Cache::new();
    let mut binding_cache: Cache<(String, String), (String, String)> = Cache::new();
    let mut port_cache: Cache<String, PortRow> = Cache::new();
    let mut applied = pinned(&pin_dir);
    let my_ip = IpAddr::V4(api.node_ip);
    // Host routes this process knows of. Seeded with the adopted net-0 entries under an
    // unspecified node, so every wanted one is replaced once and stale ones are removed.
    let mut routed: HashMap<IpAddr, IpAddr> = applied
        .keys()
        .filter(|k| k.0 == 0)
        .map(|k| (k.1, IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)))
        .collect();
    tracing::info!(
        adopted = applied.len(),
        "remote endpoints: watching Pods, VPCs, VPCBindings, remote Ports"
    );

    while let Some(ev) = events.next().await {
        let recompute = match &ev {
            Ev::Pod(r) => changes_live(r),
            Ev::Vpc(r) => changes_live(r),
            Ev::Port(r) => changes_live(r),
            Ev::Binding(r) => changes_live(r),
        };
        let grants_changed = matches!(&ev, Ev::Vpc(_) | Ev::Binding(_)) && recompute;
        let res = match ev {
            Ev::Pod(r) => (*r).map(|e| {
                pod_cache.apply(e, pod_row, |p| name_of(&p.metadata));
                if let Ok(mut m) = api.pods.write() {
                    *m = pod_cache
                        .live
                        .iter()
                        .map(|(k, v)| (k.clone(), v.facts.clone()))
                        .collect();
                }
            }),
            Ev::Vpc(r) => r.map(|e| vpc_cache.apply(e, vpc_row, |v| name_of(&v.metadata))),
            Ev::Port(r) => r.map(|e| {
                port_cache.apply(e, port_row, |p| p.metadata.name.clone().unwrap_or_default());
            }),
            Ev::Binding(r) => r.map(|e| binding_cache.apply(e, binding_row, |b| name_of(&b.metadata))),
        };
        if let Err(e) = res {
            tracing::warn!("watch: {e}");
            continue;
        }
        if grants_changed && let Ok(mut g) = api.grants.write() {
            *g = grants(&binding_cache.live, &vpc_cache.live);
        }
        if !recompute {
            continue;
        }
        let want = desired(
            &api.node,
            my_ip,
            &pod_cache.live,
            &vpc_cache.live,
            &port_cache.live,
        );
        let Ok(mut map) = RemotesMap::from_pin(&pin_dir) else {
            tracing::warn!("sdn_remotes is not pinned under {}", pin_dir.display());
            continue;
        };
        let mut changed = 0usize;
        for (k, node) in &want {
            if applied.get(k) != Some(node) {
                match map.upsert(k.0, k.1, *node) {
                    Ok(()) => {
                        applied.insert(*k, *node);
                        changed += 1;
                    }
                    Err(e) => tracing::warn!(net = k.0, ip = %k.1, "sdn_remotes upsert: {e}"),
                }
            }
        }
        let prunable = |net: u32| {
            if net == 0 {
                pod_cache.synced
            } else {
                port_cache.synced && vpc_cache.synced
            }
        };
        let stale: HashSet<Key> = applied
            .keys()
            .filter(|k| !want.contains_key(k) && prunable(k.0))
            .copied()
            .collect();
        for k in stale {
            if map.remove(k.0, k.1).is_ok() {
                applied.remove(&k);
                changed += 1;
            }
        }
        if changed > 0 {
            tracing::debug!(changed, total = applied.len(), "sdn_remotes updated");
        }
        if let Some(nd) = &netdev {
            if tunnel.is_none() {
                tunnel = nd.link(&routes.tunnel_dev).await.ok().flatten().map(|l| l.index);
            }
            if let Some(t) = tunnel {
                sync_routes(nd, t, routes.net0_vni, &want, &mut routed, pod_cache.synced).await;
            }
        }
    }
}

/// Bring the host routes in line with the net-0 entries of `want` (IPv4 only). Removal
/// waits for the Pod list, like the map entries.
async fn sync_routes(
    nd: &crate::datapath::netdev::NetDev,
    tunnel: u32,
    vni: u32,
    want: &HashMap<Key, IpAddr>,
    routed: &mut HashMap<IpAddr, IpAddr>,
    synced: bool,
) {
    for ((net, ip), node) in want {
        if *net != 0 || routed.get(ip) == Some(node) {
            continue;
        }
        if let (IpAddr::V4(ip4), IpAddr::V4(node4)) = (ip, node) {
            match nd.remote_pod_route(tunnel, *ip4, vni, *node4).await {
                Ok(()) => {
                    routed.insert(*ip, *node);
                }
                Err(e) => tracing::warn!("{e}"),
            }
        }
    }
    if !synced {
        return;
    }
    let stale: Vec<IpAddr> = routed
        .keys()
        .filter(|ip| !want.contains_key(&(0, **ip)))
        .copied()
        .collect();
    for ip in stale {
        if let IpAddr::V4(ip4) = ip {
            match nd.remove_remote_pod_route(tunnel, ip4).await {
                Ok(()) => {
                    routed.remove(&ip);
                }
                Err(e) => tracing::warn!("{e}"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    #[test]
    fn desired_entries_skip_local_and_host_network() {
        let me = IpAddr::V4(Ipv4Addr::new(192, 168, 0, 1));
        let other = IpAddr::V4(Ipv4Addr::new(192, 168, 0, 2));
        let row = |ip: &str, host: IpAddr| PodRow {
            ip: ip.parse().ok(),
            host: Some(host),
            facts: PodFacts::default(),
        };
        let pods = HashMap::from([
            (("a".into(), "local".into()), row("10.0.0.2", me)),
            (("a".into(), "remote".into()), row("10.0.1.2", other)),
            (("a".into(), "hostnet".into()), row("192.168.0.2", other)),
        ]);
        let vpcs = HashMap::from([(("t".to_string(), "blue".to_string()), (100u32, 0u32))]);
        let port = |node: &str, ip: &str| PortRow {
            vpc: ("t".into(), "blue".into()),
            ip: ip.parse().ok(),
            node: node.into(),
            node_ip: Some(if node == "n1" { me } else { other }),
        };
        let ports = HashMap::from([
            ("p1".to_string(), port("n1", "172.16.0.2")),
            ("p2".to_string(), port("n2", "172.16.0.3")),
        ]);
        let d = desired("n1", me, &pods, &vpcs, &ports);
        assert_eq!(d.len(), 2, "{d:?}");
        assert_eq!(d[&(0, "10.0.1.2".parse().unwrap())], other);
        assert_eq!(d[&(100, "172.16.0.3".parse().unwrap())], other);
    }
}
