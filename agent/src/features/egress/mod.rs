//! What a VPC's egress through its gateway needs to know, from watches: which VPC may leave
//! through which NAT address, and which node owns which gateway port shard. (Which
//! destinations are inside and never NATed, `sdn_internal`, is the core's:
//! [`crate::core::watch::internal`].)
//!
//! * **Nodes** (kube API): every node's shard ([`crate::core::shards::shard_of`] of its block)
//!   maps to its tunnel address in `sdn_snat_shards`, so a reply to a VPC NAT address
//!   attracted to this node reaches the node that allocated its port.
//! * **VPCs**: a gateway's VPC gives its VNI.
//! * **VPCGateways**, cluster-wide: a VPC's effective gateway is the oldest one naming it that
//!   is not being deleted (ties by name, as the server's status loop decides). If it has
//!   `spec.nat.enabled` and a `status.natAddress`/`natAddress6`, the VPC's VNI gets those in
//!   `sdn_snat_gws` and the addresses go into `sdn_snat_addrs` (net = VNI) on every node:
//!   whichever node the address is attracted to must recognise the replies. Otherwise the
//!   VPC has no way out.
//!
//! One task holds the caches and writes the difference after each event; entries are pruned
//! only once all three watches have listed, so a restarted agent keeps the pinned state until
//! it knows better.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use cozyplane_apis::v1alpha1::{VPC, VPCGateway};
use cozyplane_bpf::maps::snat_addrs::SnatAddrsMap;
use cozyplane_bpf::maps::snat_gws::{Gw, SnatGwsMap};
use cozyplane_bpf::maps::snat_shards::SnatShardsMap;
use futures::{StreamExt as _, stream::BoxStream};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::Api;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};

use crate::core::api::{ApiClients, node_address, node_pod_block};
use crate::core::watch::{Cache, changes_live, name_of};
use futures::future::BoxFuture;

use crate::core::feature::{Core, Feature, FeatureError, spawned};

/// What one Node contributes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NodeFacts {
    /// Its IPv4 block, which names its shard.
    block4: Option<(Ipv4Addr, u8)>,
    /// Its tunnel address.
    tunnel: Option<IpAddr>,
}

/// What one VPC contributes: its VNI (the net its gateway's NAT addresses belong to).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct VpcFacts {
    vni: u32,
}

/// What one VPCGateway contributes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct GwFacts {
    vpc: String,
    /// Sort key of "oldest": creation time, then name.
    age: (Option<Time>, String),
    deleting: bool,
    nat: bool,
    addr4: Option<Ipv4Addr>,
    addr6: Option<Ipv6Addr>,
}

fn node_facts(n: &Node) -> Option<(String, NodeFacts)> {
    Some((
        n.metadata.name.clone()?,
        NodeFacts {
            block4: node_pod_block(n).map(|b| (b.base(), b.prefix())),
            tunnel: node_address(n),
        },
    ))
}

fn vpc_facts(v: &VPC) -> Option<((String, String), VpcFacts)> {
    let vni = u32::try_from(v.status.as_ref()?.vni).ok().filter(|v| *v > 0)?;
    Some((name_of(&v.metadata), VpcFacts { vni }))
}

fn gw_facts(g: &VPCGateway) -> Option<((String, String), GwFacts)> {
    let st = g.status.clone().unwrap_or_default();
    let name = g.metadata.name.clone()?;
    Some((
        name_of(&g.metadata),
        GwFacts {
            vpc: g.spec.vpc_ref.name.clone(),
            age: (g.metadata.creation_timestamp.clone(), name),
            deleting: g.metadata.deletion_timestamp.is_some(),
            nat: g.spec.nat.enabled,
            addr4: st.nat_address.parse().ok(),
            addr6: st.nat_address6.parse().ok(),
        },
    ))
}

/// Everything this node's SNAT maps should hold.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Desired {
    addrs: BTreeMap<IpAddr, u32>,
    gws: BTreeMap<u32, Gw>,
    shards: BTreeMap<u32, IpAddr>,
}

/// The effective gateway of each `(namespace, vpc)`: the oldest non-deleting one.
fn effective(gws: &HashMap<(String, String), GwFacts>) -> HashMap<(String, String), &GwFacts> {
    let mut best: HashMap<(String, String), &GwFacts> = HashMap::new();
    for ((ns, _), g) in gws.iter().filter(|(_, g)| !g.deleting) {
        let k = (ns.clone(), g.vpc.clone());
        match best.get(&k) {
            Some(b) if b.age <= g.age => {}
            _ => {
                best.insert(k, g);
            }
        }
    }
    best
}

pub(crate) fn desired(
    nodes: &HashMap<String, NodeFacts>,
    vpcs: &HashMap<(String, String), VpcFacts>,
    gws: &HashMap<(String, String), GwFacts>,
    shards: u16,
) -> Desired {
    let mut d = Desired::default();
    for n in nodes.values() {
        if let (Some(b), Some(t)) = (n.block4, n.tunnel) {
            d.shards
                .insert(u32::from(crate::core::shards::shard_of(b, shards)), t);
        }
    }
    for ((ns, vpc), g) in effective(gws) {
        let Some(v) = vpcs.get(&(ns, vpc)) else {
            continue;
        };
        if !g.nat || (g.addr4.is_none() && g.addr6.is_none()) {
            continue;
        }
        d.gws.insert(v.vni, (g.addr4, g.addr6));
        for a in [g.addr4.map(IpAddr::V4), g.addr6.map(IpAddr::V6)]
            .into_iter()
            .flatten()
        {
            d.addrs.insert(a, v.vni);
        }
    }
    d
}

/// Writes `want` over what is pinned; removals only when `prune`.
fn sync(pins: &Path, want: &Desired, prune: bool) -> Result<(), aya::maps::MapError> {
    let mut addrs = SnatAddrsMap::from_pin(pins)?;
    let have: BTreeMap<IpAddr, u32> = addrs.entries()?.into_iter().collect();
    for (a, net) in &want.addrs {
        if have.get(a) != Some(net) {
            addrs.insert(*a, *net)?;
        }
    }
    if prune {
        // Net 0 is the uplink's own addresses (the uplink feature writes them).
        for (a, net) in &have {
            if *net != 0 && !want.addrs.contains_key(a) {
                addrs.remove(*a)?;
            }
        }
    }

    let mut gws = SnatGwsMap::from_pin(pins)?;
    let have: BTreeMap<u32, Gw> = gws.entries()?.into_iter().collect();
    for (vni, g) in &want.gws {
        if have.get(vni) != Some(g) {
            gws.upsert(*vni, *g)?;
        }
    }
    if prune {
        for vni in have.keys().filter(|v| !want.gws.contains_key(v)) {
            gws.remove(*vni)?;
        }
    }

    let mut shards = SnatShardsMap::from_pin(pins)?;
    for (s, node) in &want.shards {
        if shards.get(*s)? != Some(*node) {
            shards.set(*s, Some(*node))?;
        }
    }
    if prune {
        for s in 0..cozyplane_bpf::maps::snat_shards::MAX {
            if !want.shards.contains_key(&s) && shards.get(s)?.is_some() {
                shards.set(s, None)?;
            }
        }
    }
    Ok(())
}

enum Ev {
    Node(Box<Result<Event<Node>, watcher::Error>>),
    Vpc(Result<Event<VPC>, watcher::Error>),
    Gw(Result<Event<VPCGateway>, watcher::Error>),
}

/// Runs the watches forever, keeping the SNAT maps under `pin_dir` in line.
pub async fn run(api: ApiClients, pin_dir: PathBuf, shards: u16) {
    let cfg = watcher::Config::default();
    let nodes = watcher::watcher(Api::<Node>::all(api.kube.clone()), cfg.clone())
        .default_backoff()
        .map(|e| Ev::Node(Box::new(e)));
    let vpcs = watcher::watcher(Api::<VPC>::all(api.sdn.clone()), cfg.clone())
        .default_backoff()
        .map(Ev::Vpc);
    let gws = watcher::watcher(Api::<VPCGateway>::all(api.sdn.clone()), cfg)
        .default_backoff()
        .map(Ev::Gw);
    let streams: Vec<BoxStream<'static, Ev>> = vec![nodes.boxed(), vpcs.boxed(), gws.boxed()];
    let mut events = futures::stream::select_all(streams);
    let mut node_cache: Cache<String, NodeFacts> = Cache::new();
    let mut vpc_cache: Cache<(String, String), VpcFacts> = Cache::new();
    let mut gw_cache: Cache<(String, String), GwFacts> = Cache::new();
    let mut last: Option<(Desired, bool)> = None;
    tracing::info!("watching Nodes, VPCs and VPCGateways for the north-south doors");
    while let Some(ev) = events.next().await {
        let res = match ev {
            Ev::Node(r) => (*r).map(|e| {
                let live = matches!(e, Event::InitDone | Event::Apply(_) | Event::Delete(_));
                node_cache.apply(e, node_facts, |n| n.metadata.name.clone().unwrap_or_default());
                live
            }),
            Ev::Vpc(r) => {
                let live = changes_live(&r);
                r.map(|e| {
                    vpc_cache.apply(e, vpc_facts, |v| name_of(&v.metadata));
                    live
                })
            }
            Ev::Gw(r) => {
                let live = changes_live(&r);
                r.map(|e| {
                    gw_cache.apply(e, gw_facts, |g| name_of(&g.metadata));
                    live
                })
            }
        };
        match res {
            Ok(true) => {}
            Ok(false) => continue,
            Err(e) => {
                tracing::warn!("egress watch: {e}");
                continue;
            }
        }
        let want = desired(&node_cache.live, &vpc_cache.live, &gw_cache.live, shards);
        let prune = node_cache.synced && vpc_cache.synced && gw_cache.synced;
        if let Some((l, p)) = &last
            && *l == want
            && *p == prune
        {
            continue;
        }
        match sync(&pin_dir, &want, prune) {
            Ok(()) => {
                tracing::debug!(gateways = want.gws.len(), "egress maps synced");
                last = Some((want, prune));
            }
            Err(e) => tracing::warn!("egress maps: {e}"),
        }
    }
}

/// A VPC's egress through its gateway's NAT address: the gateways, their addresses and every
/// node's shard of the NAT ports.
#[derive(Debug, Default)]
pub struct Egress;

impl Feature for Egress {
    fn name(&self) -> &'static str {
        "egress"
    }

    fn start(self: Box<Self>, core: Core) -> BoxFuture<'static, Result<(), FeatureError>> {
        spawned(run(core.api, core.pin_dir, core.config.nat_shards))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gw(vpc: &str, t: i64, name: &str, nat: bool, a: Option<&str>) -> GwFacts {
        let t = k8s_openapi::jiff::Timestamp::from_second(t).unwrap();
        GwFacts {
            vpc: vpc.into(),
            age: (Some(Time(t)), name.into()),
            deleting: false,
            nat,
            addr4: a.map(|a| a.parse().unwrap()),
            addr6: None,
        }
    }

    #[test]
    fn the_oldest_gateway_wins_and_needs_nat_and_an_address() {
        let vpcs: HashMap<_, _> = [(("t1".to_string(), "a".to_string()), VpcFacts { vni: 100 })].into();
        let mut gws: HashMap<(String, String), GwFacts> = HashMap::new();
        gws.insert(
            ("t1".into(), "young".into()),
            gw("a", 2, "young", true, Some("203.0.113.9")),
        );
        gws.insert(
            ("t1".into(), "old".into()),
            gw("a", 1, "old", true, Some("203.0.113.10")),
        );
        let d = desired(&HashMap::new(), &vpcs, &gws, 16);
        assert_eq!(d.gws[&100], (Some("203.0.113.10".parse().unwrap()), None));
        assert_eq!(d.addrs[&"203.0.113.10".parse::<IpAddr>().unwrap()], 100);

        // The oldest disables NAT: the VPC has no way out, the younger one does not step in.
        gws.get_mut(&("t1".to_string(), "old".to_string())).unwrap().nat = false;
        let d = desired(&HashMap::new(), &vpcs, &gws, 16);
        assert!(d.gws.is_empty() && d.addrs.is_empty());

        // Deleting the oldest makes the younger effective.
        gws.get_mut(&("t1".to_string(), "old".to_string()))
            .unwrap()
            .deleting = true;
        let d = desired(&HashMap::new(), &vpcs, &gws, 16);
        assert_eq!(d.gws[&100], (Some("203.0.113.9".parse().unwrap()), None));
    }

    #[test]
    fn nodes_give_shard_owners() {
        let nodes: HashMap<_, _> = [(
            "n2".to_string(),
            NodeFacts {
                block4: Some(("10.244.2.0".parse().unwrap(), 24)),
                tunnel: Some("192.168.77.2".parse().unwrap()),
            },
        )]
        .into();
        let d = desired(&nodes, &HashMap::new(), &HashMap::new(), 16);
        assert_eq!(d.shards[&2], "192.168.77.2".parse::<IpAddr>().unwrap());
    }
}
