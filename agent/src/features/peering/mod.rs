//! VPC peering turned into the datapath's cross-net maps (`bpf/lib/crossnet.h`):
//! `sdn_xnet_routes[{S, prefix of T}] → T` and `sdn_xnet_allow[{S, T}]`, both directions.
//!
//! Decided from the specs, not from the status loop's `status.phase` (which lags by a
//! loop round): a peering is programmed when both reciprocal halves exist, both VPCs have
//! a VNI, and no range of one overlaps a range of the other (every range of `spec.cidrs`,
//! secondary ones included, is routed and compared) — the same rule the status loop
//! calls `Ready`. Peering is not transitive: only the two VPCs of a pair of halves get
//! entries for each other. A source net whose peers' ranges overlap one another could not
//! tell them apart by destination, so every pair involved in such a clash is left out.
//!
//! The task has its own VPC and VPCPeering watches (cluster-wide: the halves of a pair
//! live in two tenants' namespaces). When a pair goes away (a half deleted, a CIDR change
//! that makes them overlap) the allow entries are removed first, in the event's own round:
//! that is what cuts established flows at once, on every node, since both the sending and
//! the receiving node's programs consult them. Pinned entries are adopted at start and
//! pruned only once both lists completed, so traffic keeps flowing while the API is away.

pub mod metrics;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use cozyplane_apis::net::{IpNet, cidrs_overlap, parse_cidr};
use cozyplane_apis::v1alpha1::{VPC, VPCPeering};
use cozyplane_bpf::maps::xnet_allow::XnetAllowMap;
use cozyplane_bpf::maps::xnet_routes::{Route, XnetRoutesMap};
use futures::{StreamExt as _, stream::BoxStream};
use kube::api::Api;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};

use crate::core::api::ApiClients;
use crate::core::watch::{Cache, changes_live, name_of, plan};
use futures::future::BoxFuture;

use crate::core::feature::{Core, Feature, FeatureError, spawned};
use crate::core::metrics::MetricsBuilder;

/// A VPC by `(namespace, name)`.
type VpcKey = (String, String);

/// What the peering decision needs of a VPC.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct VpcRow {
    /// 0 until the VPC has one.
    pub(crate) vni: u32,
    /// Every range of `spec.cidrs` that parses, as its network.
    pub(crate) cidrs: Vec<IpNet>,
}

/// One half: `local` (the peering's namespace) → `peer`.
pub(crate) type Half = (VpcKey, VpcKey);

/// The cross-net entries this node should hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Desired {
    pub(crate) routes: HashMap<Route, u32>,
    pub(crate) allow: HashSet<(u32, u32)>,
}

fn vpc_row(v: &VPC) -> Option<(VpcKey, VpcRow)> {
    let vni = v
        .status
        .as_ref()
        .and_then(|s| u32::try_from(s.vni).ok())
        .unwrap_or(0);
    let cidrs = v
        .spec
        .cidrs
        .iter()
        .filter_map(|c| parse_cidr(c).ok())
        .map(|n| n.trunc())
        .collect();
    Some((name_of(&v.metadata), VpcRow { vni, cidrs }))
}

fn half_row(p: &VPCPeering) -> Option<(VpcKey, Half)> {
    if p.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let key = name_of(&p.metadata);
    let peer_ns = if p.spec.peer_ref.namespace.is_empty() {
        key.0.clone()
    } else {
        p.spec.peer_ref.namespace.clone()
    };
    let local = (key.0.clone(), p.spec.vpc_ref.name.clone());
    let peer = (peer_ns, p.spec.peer_ref.name.clone());
    Some((key, (local, peer)))
}

fn overlap(a: &[IpNet], b: &[IpNet]) -> bool {
    a.iter().any(|x| b.iter().any(|y| cidrs_overlap(x, y)))
}

fn route_of(net: u32, c: &IpNet) -> Route {
    (net, c.network(), c.prefix_len())
}

/// The entries for `halves` over `vpcs` (see the module docs for the rule).
pub(crate) fn desired<'a>(
    vpcs: &HashMap<VpcKey, VpcRow>,
    halves: impl IntoIterator<Item = &'a Half>,
) -> Desired {
    let halves: HashSet<&Half> = halves.into_iter().collect();
    // Each programmable pair once, as (lower VNI side, higher VNI side).
    let mut pairs: Vec<(&VpcRow, &VpcRow)> = Vec::new();
    let mut seen = HashSet::new();
    for (local, peer) in &halves {
        if local == peer || !halves.contains(&(peer.clone(), local.clone())) {
            continue;
        }
        let (Some(a), Some(b)) = (vpcs.get(local), vpcs.get(peer)) else {
            continue;
        };
        if a.vni == 0 || b.vni == 0 || a.vni == b.vni || overlap(&a.cidrs, &b.cidrs) {
            continue;
        }
        let (a, b) = if a.vni < b.vni { (a, b) } else { (b, a) };
        if seen.insert((a.vni, b.vni)) {
            pairs.push((a, b));
        }
    }
    // Per source net, the prefixes of each target; a clash between two targets rules
    // out both pairs.
    let mut views: HashMap<u32, Vec<(u32, &IpNet)>> = HashMap::new();
    for (a, b) in &pairs {
        views
            .entry(a.vni)
            .or_default()
            .extend(b.cidrs.iter().map(|c| (b.vni, c)));
        views
            .entry(b.vni)
            .or_default()
            .extend(a.cidrs.iter().map(|c| (a.vni, c)));
    }
    let mut clashing: HashSet<(u32, u32)> = HashSet::new();
    for (src, view) in &views {
        for (i, (t, x)) in view.iter().enumerate() {
            for (u, y) in &view[i + 1..] {
                if t != u && cidrs_overlap(x, y) {
                    tracing::warn!(net = src, peers = ?(t, u), "peers' ranges overlap; neither pair is programmed");
                    clashing.insert(((*src).min(*t), (*src).max(*t)));
                    clashing.insert(((*src).min(*u), (*src).max(*u)));
                }
            }
        }
    }
    let mut d = Desired::default();
    for (a, b) in pairs {
        if clashing.contains(&(a.vni, b.vni)) {
            continue;
        }
        for (s, t) in [(a, b), (b, a)] {
            d.allow.insert((s.vni, t.vni));
            for c in &t.cidrs {
                d.routes.insert(route_of(s.vni, c), t.vni);
            }
        }
    }
    d
}

fn pinned(pin_dir: &Path) -> Desired {
    let routes = XnetRoutesMap::from_pin(pin_dir)
        .and_then(|m| m.entries())
        .unwrap_or_default()
        .into_iter()
        .collect();
    let allow = XnetAllowMap::from_pin(pin_dir)
        .and_then(|m| m.entries())
        .unwrap_or_default()
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    Desired { routes, allow }
}

/// Writes the difference: allow entries removed first (the cut), routes next, new allow
/// entries last (a path opens only once it leads somewhere).
fn sync(pin_dir: &Path, want: &Desired, applied: &mut Desired, prunable: bool) {
    let (Ok(mut routes), Ok(mut allow)) = (XnetRoutesMap::from_pin(pin_dir), XnetAllowMap::from_pin(pin_dir))
    else {
        tracing::warn!(
            "sdn_xnet_routes/sdn_xnet_allow are not pinned under {}",
            pin_dir.display()
        );
        return;
    };
    let as_map = |s: &HashSet<(u32, u32)>| s.iter().map(|k| (*k, ())).collect::<HashMap<_, _>>();
    let (add_allow, cut) = plan(&as_map(&want.allow), &as_map(&applied.allow), |_| prunable);
    for (s, t) in cut {
        match allow.remove(s, t) {
            Ok(()) => {
                applied.allow.remove(&(s, t));
                tracing::info!(from = s, to = t, "peering path removed");
            }
            Err(e) => tracing::warn!(from = s, to = t, "sdn_xnet_allow remove: {e}"),
        }
    }
    let (write, remove) = plan(&want.routes, &applied.routes, |_| prunable);
    for (r, to) in write {
        match routes.upsert(r, to) {
            Ok(()) => {
                applied.routes.insert(r, to);
            }
            Err(e) => tracing::warn!(route = ?r, "sdn_xnet_routes upsert: {e}"),
        }
    }
    for r in remove {
        if routes.remove(r).is_ok() {
            applied.routes.remove(&r);
        }
    }
    for ((s, t), ()) in add_allow {
        match allow.allow(s, t) {
            Ok(()) => {
                applied.allow.insert((s, t));
                tracing::info!(from = s, to = t, "peering path programmed");
            }
            Err(e) => tracing::warn!(from = s, to = t, "sdn_xnet_allow insert: {e}"),
        }
    }
}

enum Ev {
    Vpc(Result<Event<VPC>, watcher::Error>),
    Peering(Result<Event<VPCPeering>, watcher::Error>),
}

/// Runs the VPC and VPCPeering watches forever, keeping the cross-net maps under
/// `pin_dir` in line with them.
pub async fn run(api: ApiClients, pin_dir: PathBuf) {
    let cfg = watcher::Config::default();
    let vpcs = watcher::watcher(Api::<VPC>::all(api.sdn.clone()), cfg.clone())
        .default_backoff()
        .map(Ev::Vpc);
    let peerings = watcher::watcher(Api::<VPCPeering>::all(api.sdn.clone()), cfg)
        .default_backoff()
        .map(Ev::Peering);
    let streams: Vec<BoxStream<'static, Ev>> = vec![vpcs.boxed(), peerings.boxed()];
    let mut events = futures::stream::select_all(streams);

    let mut vpc_cache: Cache<VpcKey, VpcRow> = Cache::new();
    let mut half_cache: Cache<VpcKey, Half> = Cache::new();
    let mut applied = pinned(&pin_dir);
    tracing::info!(
        adopted_routes = applied.routes.len(),
        adopted_pairs = applied.allow.len(),
        "watching VPCs and VPCPeerings"
    );
    while let Some(ev) = events.next().await {
        let (recompute, res) = match ev {
            Ev::Vpc(r) => (
                changes_live(&r),
                r.map(|e| vpc_cache.apply(e, vpc_row, |v| name_of(&v.metadata))),
            ),
            Ev::Peering(r) => (
                changes_live(&r),
                r.map(|e| half_cache.apply(e, half_row, |p| name_of(&p.metadata))),
            ),
        };
        if let Err(e) = res {
            tracing::warn!("peering watch: {e}");
            continue;
        }
        if !recompute {
            continue;
        }
        let want = desired(&vpc_cache.live, half_cache.live.values());
        sync(
            &pin_dir,
            &want,
            &mut applied,
            vpc_cache.synced && half_cache.synced,
        );
    }
}

/// VPC peering: the routes and allowances between peered nets, and the crossing counters
/// ([`metrics`]).
#[derive(Debug, Default)]
pub struct Peering;

impl Feature for Peering {
    fn name(&self) -> &'static str {
        "peering"
    }

    fn metrics(&mut self, m: &mut MetricsBuilder) {
        m.collector(metrics::CrossingCollector(m.scope().pin_dir.clone()));
        m.map_sizes(metrics::map_sizes);
    }

    fn start(self: Box<Self>, core: Core) -> BoxFuture<'static, Result<(), FeatureError>> {
        spawned(run(core.api, core.pin_dir))
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::*;

    fn route(net: u32, cidr: &str) -> Route {
        let n: IpNet = cidr.parse().unwrap();
        let ip: IpAddr = n.network();
        (net, ip, n.prefix_len())
    }

    fn vpc(vni: u32, cidrs: &[&str]) -> VpcRow {
        VpcRow {
            vni,
            cidrs: cidrs.iter().map(|c| c.parse().unwrap()).collect(),
        }
    }

    fn key(ns: &str, name: &str) -> VpcKey {
        (ns.into(), name.into())
    }

    fn half(l: (&str, &str), p: (&str, &str)) -> Half {
        (key(l.0, l.1), key(p.0, p.1))
    }

    fn vpcs() -> HashMap<VpcKey, VpcRow> {
        HashMap::from([
            (key("ta", "a"), vpc(100, &["10.0.0.0/24"])),
            (key("tb", "b"), vpc(200, &["10.1.0.0/24"])),
            (key("tc", "c"), vpc(300, &["10.2.0.0/24"])),
            (key("td", "d"), vpc(400, &["10.0.0.0/16"])),
            (key("te", "e"), vpc(0, &["10.5.0.0/24"])),
        ])
    }

    #[test]
    fn both_halves_make_a_pair_with_routes_both_ways() {
        let h = [half(("ta", "a"), ("tb", "b")), half(("tb", "b"), ("ta", "a"))];
        let d = desired(&vpcs(), &h);
        assert_eq!(d.allow, HashSet::from([(100, 200), (200, 100)]));
        assert_eq!(
            d.routes,
            HashMap::from([(route(100, "10.1.0.0/24"), 200), (route(200, "10.0.0.0/24"), 100)])
        );
    }

    #[test]
    fn one_half_alone_programs_nothing() {
        let h = [half(("ta", "a"), ("tb", "b"))];
        assert_eq!(desired(&vpcs(), &h), Desired::default());
    }

    #[test]
    fn overlapping_or_vniless_vpcs_are_not_peered() {
        let h = [
            half(("ta", "a"), ("td", "d")),
            half(("td", "d"), ("ta", "a")),
            half(("ta", "a"), ("te", "e")),
            half(("te", "e"), ("ta", "a")),
        ];
        assert_eq!(desired(&vpcs(), &h), Desired::default());
    }

    #[test]
    fn peering_is_not_transitive() {
        let h = [
            half(("ta", "a"), ("tb", "b")),
            half(("tb", "b"), ("ta", "a")),
            half(("tb", "b"), ("tc", "c")),
            half(("tc", "c"), ("tb", "b")),
        ];
        let d = desired(&vpcs(), &h);
        assert!(!d.allow.contains(&(100, 300)) && !d.allow.contains(&(300, 100)));
        assert!(!d.routes.keys().any(|r| r.0 == 100 && d.routes[r] == 300));
        assert_eq!(d.allow.len(), 4);
    }

    #[test]
    fn every_range_is_routed_and_checked_for_overlap() {
        // Two ranges each: every range of the peer is a route, both ways.
        let mut v = vpcs();
        v.insert(key("ta", "a"), vpc(100, &["10.0.0.0/24", "10.30.0.0/24"]));
        v.insert(key("tb", "b"), vpc(200, &["10.1.0.0/24", "10.31.0.0/24"]));
        let h = [half(("ta", "a"), ("tb", "b")), half(("tb", "b"), ("ta", "a"))];
        let d = desired(&v, &h);
        assert_eq!(
            d.routes,
            HashMap::from([
                (route(100, "10.1.0.0/24"), 200),
                (route(100, "10.31.0.0/24"), 200),
                (route(200, "10.0.0.0/24"), 100),
                (route(200, "10.30.0.0/24"), 100),
            ])
        );
        // b's second range overlapping a's second: nothing is programmed.
        v.insert(key("tb", "b"), vpc(200, &["10.1.0.0/24", "10.30.0.128/25"]));
        assert_eq!(desired(&v, &h), Desired::default());
    }

    #[test]
    fn peers_that_clash_in_one_nets_view_are_both_left_out() {
        // b is peered with a (10.0.0.0/24) and d (10.0.0.0/16): b could not tell them
        // apart. c–b is unaffected.
        let h = [
            half(("ta", "a"), ("tb", "b")),
            half(("tb", "b"), ("ta", "a")),
            half(("td", "d"), ("tb", "b")),
            half(("tb", "b"), ("td", "d")),
            half(("tc", "c"), ("tb", "b")),
            half(("tb", "b"), ("tc", "c")),
        ];
        let d = desired(&vpcs(), &h);
        assert_eq!(d.allow, HashSet::from([(200, 300), (300, 200)]));
    }
}
