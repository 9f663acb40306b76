//! Watches turned into datapath state: which address lives behind which node, and what the
//! CNI path may read without an API round trip.
//!
//! * **Net 0** from the kube API's **Nodes**: every other Node's fabric block (what its
//!   agent announced, else `spec.podCIDRs`/`podCIDR`) becomes `sdn_node_blocks[block] →
//!   tunnel IP` (announced, else InternalIP; see [`crate::core::api::node_pod_block`]). One entry
//!   per node, whatever its pod count: fabric addresses (every pod's, VPC pods' bridged
//!   ones included) come from the node's block, so the block says where a pod is, and a
//!   new pod is reachable from everywhere as soon as its own node wired it.
//! * **Host routes** for the same blocks: `block dev <tunnel> encap ip id <net0_vni> dst
//!   <node>`, so the node's own stack (node → pod on another node, the node's replies to
//!   such pods) uses the overlay like the pods do. The tunnel device is NOARP, so these
//!   frames carry the tunnel MAC and `sdn_from_overlay` delivers them on the other side.
//! * **VPC nets** from our API: every Port on another node (watched with the field
//!   selector `spec.node!=<this node>`) becomes `sdn_remotes[{vni, spec.ip}] →
//!   spec.nodeIP`; the VNI comes from the VPC watch. Local Ports are the CNI path's own.
//! * **Live migrations** of other nodes' Ports to a third node: `sdn_mig_peers`
//!   ([`mig_peers`]), which overlay trust reads beside `sdn_remotes`.
//! * **Overlay sources** from the same Nodes: every other node's tunnel address into
//!   `sdn_nodes` ([`crate::core::watch::tunnel_sources`]), and every Node's name by its tunnel
//!   address for the metrics that name an overlay packet's sender ([`NodeNames`], [`run_naming`]).
//! * **Cluster-internal ranges** from the same Nodes and VPCs, with the flags' static ranges:
//!   `sdn_internal` ([`internal`]), which masquerade, the gateway NAT, the doors and DNS
//!   steering all read.
//! * **The CNI path's caches**: this node's Pods (field selector `spec.nodeName=<node>`)
//!   for the `sdn.cozystack.io/vpc` annotation; VPCBindings and VPCs (VNI, MTU) for the
//!   grant ([`crate::core::api::Grants`]).
//!
//! One task holds the caches; after every event that changes one it recomputes the desired
//! entries and writes the difference. Entries are pruned only once the watches that own
//! them listed completely (blocks: Nodes; VPC nets: Ports and VPCs), so a restart first
//! adopts whatever is pinned and removes only what the API no longer has.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};

use cozyplane_apis::v1alpha1::{Port, VPC, VPCBinding};
use cozyplane_bpf::maps::node_blocks::NodeBlocksMap;
use cozyplane_bpf::maps::remotes::RemotesMap;
use futures::{StreamExt as _, stream::BoxStream};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::Api;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};

pub mod internal;
mod kit;
mod mig_peers;
pub mod tunnel_sources;

pub(crate) use self::kit::{Cache, changes_live, name_of, pinned, plan};

use cozyplane_apis::net::IpNet;

use crate::core::api::{ApiClients, Grants, PodFacts, binding_grant, node_address, node_pod_block};
use crate::core::metrics::NodeNames;

type Key = (u32, IpAddr);
/// An IPv4 block `(base, prefix length)`.
type Block = (IpAddr, u8);
/// What the watch keeps of a VPC with a VNI: the CNI path's facts and its ranges (for
/// `sdn_internal`), from one parse of each event.
#[derive(Clone, Debug, PartialEq, Eq)]
struct VpcRow {
    facts: crate::core::api::VpcFacts,
    ranges: Vec<Block>,
}

enum Ev {
    Pod(Box<Result<Event<Pod>, watcher::Error>>),
    Node(Box<Result<Event<Node>, watcher::Error>>),
    Vpc(Result<Event<VPC>, watcher::Error>),
    Port(Box<Result<Event<Port>, watcher::Error>>),
    Binding(Result<Event<VPCBinding>, watcher::Error>),
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct NodeRow {
    block: Option<Block>,
    /// The IPv6 fabric block of a dual-stack node.
    block6: Option<Block>,
    ip: Option<IpAddr>,
    /// Its cluster-internal ranges (blocks and addresses).
    ranges: internal::NodeRanges,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct PortRow {
    vpc: (String, String),
    ip: Option<IpAddr>,
    node: String,
    node_ip: Option<IpAddr>,
    /// A live migration's target: its node and address ([`mig_peers`]).
    target: Option<(String, IpAddr)>,
}

fn pod_row(p: &Pod) -> Option<((String, String), PodFacts)> {
    Some((name_of(&p.metadata), PodFacts::of(p)))
}

fn node_row(n: &Node) -> Option<(String, NodeRow)> {
    Some((
        n.metadata.name.clone()?,
        NodeRow {
            block: node_pod_block(n).map(|b| (IpAddr::V4(b.base()), b.prefix())),
            block6: crate::core::api::node_pod_block6(n).map(|b| (IpAddr::V6(b.base()), b.prefix())),
            ip: node_address(n),
            ranges: internal::node_ranges(n),
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
            target: p
                .spec
                .migration_target
                .as_ref()
                .and_then(|t| Some((t.node.clone(), t.node_ip.parse().ok()?))),
        },
    ))
}

fn vpc_row(v: &VPC) -> Option<((String, String), VpcRow)> {
    let vni = v.status.as_ref().and_then(|s| u32::try_from(s.vni).ok())?;
    let mtu = u32::try_from(v.spec.mtu).unwrap_or(0);
    let dual = crate::core::api::dual_stack(&v.spec.cidrs);
    let ranges = crate::core::api::vpc_ranges(&v.spec.cidrs);
    (vni != 0).then(|| {
        let facts = (vni, mtu, dual);
        (name_of(&v.metadata), VpcRow { facts, ranges })
    })
}

fn binding_row(b: &VPCBinding) -> Option<((String, String), (String, String))> {
    let key = name_of(&b.metadata);
    let grant = binding_grant(b, &key.0)?;
    Some((key, grant))
}

fn grants(
    bindings: &HashMap<(String, String), (String, String)>,
    vpcs: &HashMap<(String, String), VpcRow>,
) -> Grants {
    let mut g = Grants {
        vpcs: vpcs
            .iter()
            .map(|(k, r)| (k.clone(), (r.facts, r.ranges.clone())))
            .collect(),
        ..Grants::default()
    };
    for ((ns, _), grant) in bindings {
        g.bindings.entry(ns.clone()).or_default().push(grant.clone());
    }
    g
}

/// The other nodes' blocks. A node that claims this node's own block (a stale or
/// misconfigured Node) is ignored: our pods are ours.
fn desired_blocks(me: &str, mine: &[Block], nodes: &HashMap<String, NodeRow>) -> HashMap<Block, IpAddr> {
    nodes
        .iter()
        .filter(|(name, _)| name.as_str() != me)
        .flat_map(|(_, r)| [r.block, r.block6].into_iter().flatten().map(|b| (b, r.ip)))
        .filter_map(|(b, ip)| Some((b, ip?)))
        .filter(|(b, _)| !mine.contains(b))
        .collect()
}

/// The VPC entries of `sdn_remotes`: other nodes' Ports.
fn desired_remotes(
    me: &str,
    vpcs: &HashMap<(String, String), VpcRow>,
    ports: &HashMap<String, PortRow>,
) -> HashMap<Key, IpAddr> {
    ports
        .values()
        .filter(|r| r.node != me)
        .filter_map(|r| {
            let (vni, _, _) = vpcs.get(&r.vpc)?.facts;
            Some(((vni, r.ip?), r.node_ip?))
        })
        .collect()
}

fn pinned_remotes(pin_dir: &Path) -> HashMap<Key, IpAddr> {
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

fn pinned_blocks(pin_dir: &Path) -> HashMap<Block, IpAddr> {
    let Ok(m) = NodeBlocksMap::from_pin(pin_dir) else {
        return HashMap::new();
    };
    m.entries().unwrap_or_default().into_iter().collect()
}

/// Where the host routes to other nodes' blocks go.
#[derive(Clone, Debug)]
pub struct HostRoutes {
    /// The collect-metadata tunnel device.
    pub tunnel_dev: String,
    /// The VNI net 0 travels under.
    pub net0_vni: u32,
    /// This node's own block (never routed into the tunnel).
    pub own_block: crate::core::ipam::Block,
    /// This node's own IPv6 block, if any.
    pub own_block6: Option<crate::core::ipam::Block6>,
    /// The static cluster-internal ranges (`--service-cidr`, `--internal-cidrs`).
    pub cluster: Vec<IpNet>,
}

/// Runs the watches forever, writing `sdn_node_blocks`, `sdn_remotes` under `pin_dir`,
/// the host routes, and the CNI path's caches.
pub async fn run(api: ApiClients, pin_dir: PathBuf, routes: HostRoutes) {
    run_naming(api, pin_dir, routes, NodeNames::default()).await;
}

/// [`run`], also keeping `names` (every Node's tunnel address → its name) for the metrics
/// that name an overlay packet's sender.
pub async fn run_naming(api: ApiClients, pin_dir: PathBuf, routes: HostRoutes, names: NodeNames) {
    let netdev = match crate::core::datapath::netdev::NetDev::new() {
        Ok(n) => Some(n),
        Err(e) => {
            tracing::warn!("no host routes to remote pods: {e}");
            None
        }
    };
    let mut tunnel: Option<u32> = None;
    let mine: Vec<Block> = std::iter::once((IpAddr::V4(routes.own_block.base()), routes.own_block.prefix()))
        .chain(routes.own_block6.map(|b| (IpAddr::V6(b.base()), b.prefix())))
        .collect();

    let cfg = watcher::Config::default();
    let pods = watcher::watcher(
        Api::<Pod>::all(api.kube.clone()),
        cfg.clone().fields(&format!("spec.nodeName={}", api.node)),
    )
    .default_backoff()
    .map(|e| Ev::Pod(Box::new(e)));
    let nodes = watcher::watcher(Api::<Node>::all(api.kube.clone()), cfg.clone())
        .default_backoff()
        .map(|e| Ev::Node(Box::new(e)));
    let vpcs = watcher::watcher(Api::<VPC>::all(api.sdn.clone()), cfg.clone())
        .default_backoff()
        .map(Ev::Vpc);
    let bindings = watcher::watcher(Api::<VPCBinding>::all(api.sdn.clone()), cfg.clone())
        .default_backoff()
        .map(Ev::Binding);
    let ports = watcher::watcher(
        Api::<Port>::all(api.sdn.clone()),
        cfg.fields(&format!("spec.node!={}", api.node)),
    )
    .default_backoff()
    .map(|e| Ev::Port(Box::new(e)));
    let streams: Vec<BoxStream<'static, Ev>> = vec![
        pods.boxed(),
        nodes.boxed(),
        vpcs.boxed(),
        ports.boxed(),
        bindings.boxed(),
    ];
    let mut events = futures::stream::select_all(streams);

    let mut pod_cache: Cache<(String, String), PodFacts> = Cache::new();
    let mut node_cache: Cache<String, NodeRow> = Cache::new();
    let mut vpc_cache: Cache<(String, String), VpcRow> = Cache::new();
    let mut binding_cache: Cache<(String, String), (String, String)> = Cache::new();
    let mut port_cache: Cache<String, PortRow> = Cache::new();
    let mut applied = pinned_remotes(&pin_dir);
    let mut applied_blocks = pinned_blocks(&pin_dir);
    let mut applied_sources = tunnel_sources::pinned(&pin_dir);
    let mut applied_internal = internal::pinned(&pin_dir);
    let mut applied_mig = mig_peers::pinned(&pin_dir);
    // Host routes this process knows of. Seeded with the adopted blocks under an
    // unspecified node, so every wanted one is replaced once and stale ones are removed.
    let mut routed: HashMap<Block, IpAddr> = applied_blocks
        .keys()
        .map(|b| (*b, IpAddr::V4(Ipv4Addr::UNSPECIFIED)))
        .collect();
    tracing::info!(
        adopted_remotes = applied.len(),
        adopted_blocks = applied_blocks.len(),
        "watching Nodes, this node's Pods, VPCs, VPCBindings, other nodes' Ports"
    );

    while let Some(ev) = events.next().await {
        let recompute = match &ev {
            Ev::Pod(_) => false,
            Ev::Node(r) => changes_live(r),
            Ev::Vpc(r) => changes_live(r),
            Ev::Port(r) => changes_live(r),
            Ev::Binding(r) => changes_live(r),
        };
        let grants_changed = matches!(&ev, Ev::Vpc(_) | Ev::Binding(_)) && recompute;
        let res = match ev {
            Ev::Pod(r) => (*r).map(|e| {
                let publish = matches!(e, Event::InitDone | Event::Apply(_) | Event::Delete(_));
                match &e {
                    Event::Apply(p) | Event::InitApply(p) => api.pod_seen(p),
                    Event::Delete(p) => api.pod_gone(p),
                    Event::Init | Event::InitDone => {}
                }
                let listed = matches!(e, Event::InitDone);
                pod_cache.apply(e, pod_row, |p| name_of(&p.metadata));
                if listed {
                    api.pods_listed(|k| pod_cache.live.contains_key(k));
                }
                if publish && let Ok(mut m) = api.pods.write() {
                    m.clone_from(&pod_cache.live);
                }
            }),
            Ev::Node(r) => (*r).map(|e| {
                node_cache.apply(e, node_row, |n| n.metadata.name.clone().unwrap_or_default());
            }),
            Ev::Vpc(r) => r.map(|e| vpc_cache.apply(e, vpc_row, |v| name_of(&v.metadata))),
            Ev::Port(r) => (*r).map(|e| {
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
        let want_blocks = desired_blocks(&api.node, &mine, &node_cache.live);
        sync_blocks(&pin_dir, &want_blocks, &mut applied_blocks, node_cache.synced);
        let want_sources = tunnel_sources::desired(&api.node, node_cache.live.iter().map(|(n, r)| (n, r.ip)));
        tunnel_sources::sync(&pin_dir, &want_sources, &mut applied_sources, node_cache.synced);
        names.set(tunnel_sources::names(
            node_cache.live.iter().map(|(n, r)| (n, r.ip)),
        ));
        let want_internal = internal::desired(
            &routes.cluster,
            node_cache.live.values().map(|n| &n.ranges),
            vpc_cache.live.values().map(|v| (v.facts.0, v.ranges.as_slice())),
        );
        internal::sync(
            &pin_dir,
            &want_internal,
            &mut applied_internal,
            node_cache.synced && vpc_cache.synced,
        );
        // Net-0 exact entries are no longer written (blocks replaced them); ones an older
        // agent left behind go with the Node list.
        let want = desired_remotes(&api.node, &vpc_cache.live, &port_cache.live);
        let prunable = |net: u32| {
            if net == 0 {
                node_cache.synced
            } else {
                port_cache.synced && vpc_cache.synced
            }
        };
        sync_remotes(&pin_dir, &want, &mut applied, prunable);
        let want_mig = mig_peers::desired(
            &api.node,
            port_cache.live.values().map(|r| {
                let key = vpc_cache
                    .live
                    .get(&r.vpc)
                    .zip(r.ip)
                    .map(|(v, ip)| (v.facts.0, ip));
                (
                    key,
                    r.node.as_str(),
                    r.target.as_ref().map(|(n, ip)| (n.as_str(), *ip)),
                )
            }),
        );
        mig_peers::sync(
            &pin_dir,
            &want_mig,
            &mut applied_mig,
            port_cache.synced && vpc_cache.synced,
        );
        if let Some(nd) = &netdev {
            if tunnel.is_none() {
                tunnel = nd.link(&routes.tunnel_dev).await.ok().flatten().map(|l| l.index);
            }
            if let Some(t) = tunnel {
                sync_routes(
                    nd,
                    t,
                    routes.net0_vni,
                    &want_blocks,
                    &mut routed,
                    node_cache.synced,
                )
                .await;
            }
        }
    }
}

fn sync_blocks(
    pin_dir: &Path,
    want: &HashMap<Block, IpAddr>,
    applied: &mut HashMap<Block, IpAddr>,
    synced: bool,
) {
    let Ok(mut map) = NodeBlocksMap::from_pin(pin_dir) else {
        tracing::warn!("sdn_node_blocks is not pinned under {}", pin_dir.display());
        return;
    };
    let (write, remove) = plan(want, applied, |_| synced);
    for (b, node) in write {
        match map.upsert(b, node) {
            Ok(()) => {
                applied.insert(b, node);
            }
            Err(e) => tracing::warn!(block = %format!("{}/{}", b.0, b.1), "sdn_node_blocks upsert: {e}"),
        }
    }
    for b in remove {
        if map.remove(b).is_ok() {
            applied.remove(&b);
        }
    }
}

fn sync_remotes(
    pin_dir: &Path,
    want: &HashMap<Key, IpAddr>,
    applied: &mut HashMap<Key, IpAddr>,
    prunable: impl Fn(u32) -> bool,
) {
    let Ok(mut map) = RemotesMap::from_pin(pin_dir) else {
        tracing::warn!("sdn_remotes is not pinned under {}", pin_dir.display());
        return;
    };
    let (write, remove) = plan(want, applied, |k| prunable(k.0));
    let mut changed = 0usize;
    for (k, node) in write {
        match map.upsert(k.0, k.1, node) {
            Ok(()) => {
                applied.insert(k, node);
                changed += 1;
            }
            Err(e) => tracing::warn!(net = k.0, ip = %k.1, "sdn_remotes upsert: {e}"),
        }
    }
    for k in remove {
        if map.remove(k.0, k.1).is_ok() {
            applied.remove(&k);
            changed += 1;
        }
    }
    if changed > 0 {
        tracing::debug!(changed, total = applied.len(), "sdn_remotes updated");
    }
}

/// Bring the host routes in line with the wanted blocks. Removal waits for the Node list,
/// like the map entries.
async fn sync_routes(
    nd: &crate::core::datapath::netdev::NetDev,
    tunnel: u32,
    vni: u32,
    want: &HashMap<Block, IpAddr>,
    routed: &mut HashMap<Block, IpAddr>,
    synced: bool,
) {
    let (write, remove) = plan(want, routed, |_| synced);
    for (b, node) in write {
        match nd.remote_block_route(tunnel, b, vni, node).await {
            Ok(()) => {
                routed.insert(b, node);
            }
            Err(e) => tracing::warn!("{e}"),
        }
    }
    for b in remove {
        match nd.remove_remote_block_route(tunnel, b).await {
            Ok(()) => {
                routed.remove(&b);
            }
            Err(e) => tracing::warn!("{e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_writes_what_differs_and_removes_only_what_may_be_pruned() {
        let applied = HashMap::from([(1u32, 'a'), (2, 'b'), (3, 'c'), (4, 'd')]);
        let want = HashMap::from([(1u32, 'a'), (2, 'x'), (5, 'e')]);
        let (mut write, mut remove) = plan(&want, &applied, |k| *k != 4);
        write.sort_unstable();
        remove.sort_unstable();
        assert_eq!(write, vec![(2, 'x'), (5, 'e')], "changed and new entries");
        assert_eq!(remove, vec![3], "stale and prunable only");
        let (_, remove) = plan(&want, &applied, |_| false);
        assert!(
            remove.is_empty(),
            "nothing is removed before the owner's list completed"
        );
    }

    #[test]
    fn blocks_of_other_nodes_with_an_address_only() {
        let row = |b: Option<&str>, ip: Option<&str>| NodeRow {
            block: b.map(|b| {
                let b: crate::core::ipam::Block = b.parse().unwrap();
                (IpAddr::V4(b.base()), b.prefix())
            }),
            block6: None,
            ip: ip.map(|i| i.parse().unwrap()),
            ranges: Default::default(),
        };
        let mine = [(IpAddr::V4(Ipv4Addr::new(10, 244, 1, 0)), 24)];
        let nodes = HashMap::from([
            ("n1".to_string(), row(Some("10.244.1.0/24"), Some("192.168.0.1"))),
            ("n2".to_string(), row(Some("10.244.2.0/24"), Some("192.168.0.2"))),
            ("n3".to_string(), row(None, Some("192.168.0.3"))),
            ("n4".to_string(), row(Some("10.244.4.0/24"), None)),
            // Claims our block: ignored.
            ("n5".to_string(), row(Some("10.244.1.0/24"), Some("192.168.0.5"))),
        ]);
        let d = desired_blocks("n1", &mine, &nodes);
        assert_eq!(
            d,
            HashMap::from([(
                (IpAddr::V4(Ipv4Addr::new(10, 244, 2, 0)), 24),
                IpAddr::V4(Ipv4Addr::new(192, 168, 0, 2))
            )])
        );
        // A dual-stack node: both its blocks go to its tunnel address.
        let mut n2 = row(Some("10.244.2.0/24"), Some("192.168.0.2"));
        n2.block6 = Some(("fd44:0:0:2::".parse().unwrap(), 64));
        let d = desired_blocks("n1", &mine, &HashMap::from([("n2".to_string(), n2)]));
        assert_eq!(d.len(), 2);
        assert_eq!(
            d[&("fd44:0:0:2::".parse().unwrap(), 64)],
            IpAddr::V4(Ipv4Addr::new(192, 168, 0, 2))
        );
    }

    #[test]
    fn remotes_are_other_nodes_ports_of_known_vpcs() {
        let me = IpAddr::V4(Ipv4Addr::new(192, 168, 0, 1));
        let other = IpAddr::V4(Ipv4Addr::new(192, 168, 0, 2));
        let row = VpcRow {
            facts: (100, 0, false),
            ranges: vec![],
        };
        let vpcs = HashMap::from([(("t".to_string(), "blue".to_string()), row)]);
        let port = |node: &str, vpc: &str, ip: &str| PortRow {
            vpc: ("t".into(), vpc.into()),
            ip: ip.parse().ok(),
            node: node.into(),
            node_ip: Some(if node == "n1" { me } else { other }),
            target: None,
        };
        let ports = HashMap::from([
            ("p1".to_string(), port("n1", "blue", "172.16.0.2")),
            ("p2".to_string(), port("n2", "blue", "172.16.0.3")),
            ("p3".to_string(), port("n2", "gone", "172.16.0.4")),
        ]);
        let d = desired_remotes("n1", &vpcs, &ports);
        assert_eq!(d, HashMap::from([((100, "172.16.0.3".parse().unwrap()), other)]));
    }
}
