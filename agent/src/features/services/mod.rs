//! ServiceVIPs turned into the load balancer's maps (`bpf/lib/lb.h`): for every port of
//! every ServiceVIP whose VPC has a VNI, a frontend `sdn_lb_svc[{vni, vip, proto, port}]`,
//! its backends in `sdn_lb_backends` (`status.backends`, each at the target port of that
//! Service port) and its Maglev table in `sdn_lb_maglev` ([`maglev`]). Every node programs
//! every ServiceVIP: the client's node balances, wherever the backends are.
//!
//! The task watches ServiceVIPs and VPCs cluster-wide (the VNI comes from the VPC's
//! status). Ids are this node's own: a backend `{net, address, port}` keeps its id while
//! any table names it, a frontend keeps its id for life; both are adopted from the pins at
//! start, so a restarted agent rewrites nothing that did not change. Order of writes: new
//! backends first, then each changed table, then its frontend; a removed frontend goes
//! before its table, an unused backend last. A packet therefore never meets an id that
//! leads nowhere. Pinned entries are pruned only once both lists completed. Flows already
//! pinned by the datapath keep their backend whatever the tables become.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use cozyplane_apis::v1alpha1::{ServiceVIP, VPC};
use cozyplane_bpf::abi::{LB_SLOTS, LbSvc};
use cozyplane_bpf::maps::lb_backends::LbBackendsMap;
use cozyplane_bpf::maps::lb_maglev::LbMaglevMap;
use cozyplane_bpf::maps::lb_svc::{Frontend, LbSvcMap};
use futures::{StreamExt as _, stream::BoxStream};
use kube::api::Api;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};

use crate::core::api::ApiClients;
use crate::core::watch::{Cache, changes_live, name_of};

pub mod maglev;
pub mod metrics;
use futures::future::BoxFuture;

use crate::core::feature::{Core, Feature, FeatureError, spawned};
use crate::core::metrics::MetricsBuilder;

/// `sessionAffinity: ClientIP`'s timeout: Kubernetes' default (the ServiceVIP carries no
/// timeout of its own).
pub const AFFINITY_SECONDS: u32 = 10_800;

/// A VPC by `(namespace, name)`.
type VpcKey = (String, String);

/// A backend as the datapath sees it: `(net, address, target port)`.
pub type Backend = (u32, IpAddr, u16);

/// What one frontend should be.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Want {
    /// Distinct, sorted.
    pub backends: Vec<Backend>,
    /// ClientIP affinity timeout in seconds; 0 for none.
    pub affinity: u32,
}

fn proto_number(p: &str) -> Option<u8> {
    match p {
        "TCP" | "" => Some(6),
        "UDP" => Some(17),
        _ => None,
    }
}

/// A ServiceVIP as `(its VPC, frontends without the net)`: the VNI is filled in later
/// from the VPC cache.
type VipRow = (VpcKey, Vec<(IpAddr, u8, u16, Want)>);

fn vip_row(v: &ServiceVIP) -> Option<(String, VipRow)> {
    if v.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let name = v.metadata.name.clone()?;
    let vip: IpAddr = v.spec.ip.parse().ok()?;
    let vpc_ns = if v.spec.vpc_ref.namespace.is_empty() {
        v.spec.service_ref.namespace.clone()
    } else {
        v.spec.vpc_ref.namespace.clone()
    };
    let affinity = if v.spec.session_affinity == "ClientIP" {
        AFFINITY_SECONDS
    } else {
        0
    };
    let backends = v
        .status
        .as_ref()
        .map(|s| s.backends.as_slice())
        .unwrap_or_default();
    let mut fronts = Vec::new();
    for p in &v.spec.ports {
        let (Some(proto), Ok(port)) = (proto_number(&p.protocol), u16::try_from(p.port)) else {
            continue;
        };
        let mut set = BTreeSet::new();
        for b in backends {
            let Ok(ip) = b.ip.parse::<IpAddr>() else { continue };
            // Only a backend of the VIP's own family can be reached by rewriting addresses.
            if ip.is_ipv4() != vip.is_ipv4() {
                continue;
            }
            let target = b
                .ports
                .iter()
                .find(|bp| proto_number(&bp.protocol) == Some(proto) && bp.port == p.port)
                .and_then(|bp| u16::try_from(bp.target_port).ok())
                .filter(|t| *t != 0);
            if let Some(t) = target {
                set.insert((0, ip, t));
            }
        }
        fronts.push((
            vip,
            proto,
            port,
            Want {
                backends: set.into_iter().collect(),
                affinity,
            },
        ));
    }
    Some((name, ((vpc_ns, v.spec.vpc_ref.name.clone()), fronts)))
}

/// The frontends this node should hold, from the ServiceVIP rows and the VPCs' VNIs.
pub(crate) fn desired<'a>(
    vnis: &HashMap<VpcKey, u32>,
    vips: impl IntoIterator<Item = &'a VipRow>,
) -> BTreeMap<Frontend, Want> {
    let mut out = BTreeMap::new();
    for (vpc, fronts) in vips {
        let Some(&net) = vnis.get(vpc).filter(|v| **v != 0) else {
            continue;
        };
        for (vip, proto, port, want) in fronts {
            let mut w = want.clone();
            for b in &mut w.backends {
                b.0 = net;
            }
            out.insert(
                Frontend {
                    net,
                    vip: *vip,
                    proto: *proto,
                    port: *port,
                },
                w,
            );
        }
    }
    out
}

/// The identity Maglev hashes a backend by: address and port (the net is the frontend's).
fn identity(b: &Backend) -> Vec<u8> {
    let mut v = match b.1 {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    };
    v.extend_from_slice(&b.2.to_be_bytes());
    v
}

/// What this node has written, with the ids it gave out.
#[derive(Debug, Default)]
pub(crate) struct Applied {
    fronts: HashMap<Frontend, (u32, Want)>,
    backends: HashMap<Backend, u32>,
    next_front: u32,
    next_backend: u32,
}

impl Applied {
    /// Adopt what is pinned: the frontends (with their backends read back from the tables)
    /// and the backend ids.
    fn from_pins(pin_dir: &Path) -> Self {
        let mut a = Self::default();
        let (Ok(svc), Ok(tables), Ok(bes)) = (
            LbSvcMap::from_pin(pin_dir),
            LbMaglevMap::from_pin(pin_dir),
            LbBackendsMap::from_pin(pin_dir),
        ) else {
            return a;
        };
        let mut by_id = HashMap::new();
        for id in bes.ids().unwrap_or_default() {
            if let Ok(Some(b)) = bes.get(id) {
                a.backends.insert(b, id);
                by_id.insert(id, b);
                a.next_backend = a.next_backend.max(id);
            }
        }
        for f in svc.frontends().unwrap_or_default() {
            let Ok(Some(v)) = svc.get(f) else { continue };
            let mut set: BTreeSet<Backend> = BTreeSet::new();
            if let Ok(Some(t)) = tables.get(v.id) {
                set.extend(t.iter().filter_map(|id| by_id.get(id).copied()));
            }
            a.next_front = a.next_front.max(v.id);
            let want = Want {
                backends: set.into_iter().collect(),
                affinity: v.affinity,
            };
            a.fronts.insert(f, (v.id, want));
        }
        a
    }
}

/// Id 0 means "no backend" in a table slot, so ids start at 1.
fn next_id(counter: &mut u32, taken: impl Fn(u32) -> bool) -> u32 {
    loop {
        *counter = counter.wrapping_add(1);
        if *counter != 0 && !taken(*counter) {
            return *counter;
        }
    }
}

/// Writes the difference between `want` and `applied` (order in the module docs).
pub(crate) fn sync(pin_dir: &Path, want: &BTreeMap<Frontend, Want>, applied: &mut Applied, prunable: bool) {
    let (Ok(mut svc), Ok(mut tables), Ok(mut bes)) = (
        LbSvcMap::from_pin(pin_dir),
        LbMaglevMap::from_pin(pin_dir),
        LbBackendsMap::from_pin(pin_dir),
    ) else {
        tracing::warn!(
            "the load balancer's maps are not pinned under {}",
            pin_dir.display()
        );
        return;
    };
    // New backends.
    for w in want.values() {
        for b in &w.backends {
            if applied.backends.contains_key(b) {
                continue;
            }
            let used: BTreeSet<u32> = applied.backends.values().copied().collect();
            let id = next_id(&mut applied.next_backend, |i| used.contains(&i));
            match bes.upsert(id, b.0, b.1, b.2) {
                Ok(()) => {
                    applied.backends.insert(*b, id);
                }
                Err(e) => tracing::warn!(backend = ?b, "sdn_lb_backends upsert: {e}"),
            }
        }
    }
    // Changed tables, then their frontends.
    for (f, w) in want {
        if applied.fronts.get(f).is_some_and(|(_, have)| have == w) {
            continue;
        }
        let id = match applied.fronts.get(f) {
            Some((id, _)) => *id,
            None => {
                let used: BTreeSet<u32> = applied.fronts.values().map(|(i, _)| *i).collect();
                next_id(&mut applied.next_front, |i| used.contains(&i))
            }
        };
        // A backend whose id could not be written is left out of the table.
        let ready: Vec<(Backend, u32)> = w
            .backends
            .iter()
            .filter_map(|b| applied.backends.get(b).map(|id| (*b, *id)))
            .collect();
        let names: Vec<Vec<u8>> = ready.iter().map(|(b, _)| identity(b)).collect();
        let slots: Vec<u32> = if ready.is_empty() {
            vec![0; LB_SLOTS]
        } else {
            maglev::table(&names, LB_SLOTS)
                .into_iter()
                .map(|i| ready[i].1)
                .collect()
        };
        let value = LbSvc {
            id,
            count: ready.len() as u32,
            affinity: w.affinity,
            flags: 0,
        };
        let res = tables.set(id, &slots).and_then(|()| svc.upsert(*f, value));
        match res {
            Ok(()) => {
                let have = Want {
                    backends: ready.iter().map(|(b, _)| *b).collect(),
                    affinity: w.affinity,
                };
                tracing::info!(frontend = ?f, backends = ready.len(), "service frontend programmed");
                applied.fronts.insert(*f, (id, have));
            }
            Err(e) => tracing::warn!(frontend = ?f, "sdn_lb_svc/sdn_lb_maglev write: {e}"),
        }
    }
    if !prunable {
        return;
    }
    // Frontends no longer wanted: the frontend first, then its table.
    let gone: Vec<Frontend> = applied
        .fronts
        .keys()
        .filter(|f| !want.contains_key(f))
        .copied()
        .collect();
    for f in gone {
        let id = applied.fronts[&f].0;
        if svc.remove(f).is_ok() && tables.remove(id).is_ok() {
            applied.fronts.remove(&f);
            tracing::info!(frontend = ?f, "service frontend removed");
        }
    }
    // Backends no table names any more.
    let named: BTreeSet<Backend> = applied
        .fronts
        .values()
        .flat_map(|(_, w)| w.backends.iter().copied())
        .collect();
    let unused: Vec<Backend> = applied
        .backends
        .keys()
        .filter(|b| !named.contains(b))
        .copied()
        .collect();
    for b in unused {
        if bes.remove(applied.backends[&b]).is_ok() {
            applied.backends.remove(&b);
        }
    }
}

enum Ev {
    Vpc(Result<Event<VPC>, watcher::Error>),
    Vip(Result<Event<ServiceVIP>, watcher::Error>),
}

fn vni_row(v: &VPC) -> Option<(VpcKey, u32)> {
    let vni = v
        .status
        .as_ref()
        .and_then(|s| u32::try_from(s.vni).ok())
        .unwrap_or(0);
    Some((name_of(&v.metadata), vni))
}

/// Runs the ServiceVIP and VPC watches forever, keeping the load balancer's maps under
/// `pin_dir` in line with them.
pub async fn run(api: ApiClients, pin_dir: PathBuf) {
    let cfg = watcher::Config::default();
    let vpcs = watcher::watcher(Api::<VPC>::all(api.sdn.clone()), cfg.clone())
        .default_backoff()
        .map(Ev::Vpc);
    let vips = watcher::watcher(Api::<ServiceVIP>::all(api.sdn.clone()), cfg)
        .default_backoff()
        .map(Ev::Vip);
    let streams: Vec<BoxStream<'static, Ev>> = vec![vpcs.boxed(), vips.boxed()];
    let mut events = futures::stream::select_all(streams);

    let mut vpc_cache: Cache<VpcKey, u32> = Cache::new();
    let mut vip_cache: Cache<String, VipRow> = Cache::new();
    let mut applied = Applied::from_pins(&pin_dir);
    tracing::info!(
        adopted_frontends = applied.fronts.len(),
        adopted_backends = applied.backends.len(),
        "watching ServiceVIPs"
    );
    while let Some(ev) = events.next().await {
        let (recompute, res) = match ev {
            Ev::Vpc(r) => (
                changes_live(&r),
                r.map(|e| vpc_cache.apply(e, vni_row, |v| name_of(&v.metadata))),
            ),
            Ev::Vip(r) => (
                changes_live(&r),
                r.map(|e| {
                    vip_cache.apply(e, vip_row, |v| v.metadata.name.clone().unwrap_or_default());
                }),
            ),
        };
        if let Err(e) = res {
            tracing::warn!("service watch: {e}");
            continue;
        }
        if !recompute {
            continue;
        }
        let want = desired(&vpc_cache.live, vip_cache.live.values());
        sync(
            &pin_dir,
            &want,
            &mut applied,
            vpc_cache.synced && vip_cache.synced,
        );
    }
}

/// ServiceVIPs: the VPC load balancer's maps, and its counters ([`metrics`]).
#[derive(Debug, Default)]
pub struct Services;

impl Feature for Services {
    fn name(&self) -> &'static str {
        "services"
    }

    fn metrics(&mut self, m: &mut MetricsBuilder) {
        m.collector(metrics::LbCollector(m.scope().pin_dir.clone()));
        m.map_sizes(metrics::map_sizes);
    }

    fn start(self: Box<Self>, core: Core) -> BoxFuture<'static, Result<(), FeatureError>> {
        spawned(run(core.api, core.pin_dir))
    }
}

#[cfg(test)]
mod tests {
    use cozyplane_apis::v1alpha1::{
        ServiceVIPBackend, ServiceVIPBackendPort, ServiceVIPPort, ServiceVIPStatus,
    };

    use super::*;

    fn vip(ip: &str, affinity: &str, backends: &[(&str, i32)]) -> ServiceVIP {
        let mut v = ServiceVIP::default();
        v.metadata.name = Some(format!("sv100.{ip}"));
        v.spec.ip = ip.into();
        v.spec.vpc_ref.namespace = "t".into();
        v.spec.vpc_ref.name = "a".into();
        v.spec.session_affinity = affinity.into();
        v.spec.ports = vec![
            ServiceVIPPort {
                name: "http".into(),
                protocol: "TCP".into(),
                port: 80,
            },
            ServiceVIPPort {
                name: "dns".into(),
                protocol: "UDP".into(),
                port: 53,
            },
        ];
        v.status = Some(ServiceVIPStatus {
            backends: backends
                .iter()
                .map(|(ip, t)| ServiceVIPBackend {
                    ip: (*ip).into(),
                    ports: vec![ServiceVIPBackendPort {
                        protocol: "TCP".into(),
                        port: 80,
                        target_port: *t,
                    }],
                })
                .collect(),
            ..Default::default()
        });
        v
    }

    #[test]
    fn a_vip_becomes_one_frontend_per_port_with_the_vpcs_vni() {
        let v = vip(
            "10.0.0.254",
            "ClientIP",
            &[("10.0.0.3", 8080), ("10.0.0.2", 8080), ("fd00::2", 80)],
        );
        let (_, row) = vip_row(&v).unwrap();
        let vnis = HashMap::from([(("t".to_string(), "a".to_string()), 100)]);
        let d = desired(&vnis, [&row]);
        let tcp = Frontend {
            net: 100,
            vip: "10.0.0.254".parse().unwrap(),
            proto: 6,
            port: 80,
        };
        assert_eq!(
            d[&tcp].backends,
            vec![
                (100, "10.0.0.2".parse().unwrap(), 8080),
                (100, "10.0.0.3".parse().unwrap(), 8080)
            ],
            "sorted, same family only"
        );
        assert_eq!(d[&tcp].affinity, AFFINITY_SECONDS);
        let udp = Frontend {
            proto: 17,
            port: 53,
            ..tcp
        };
        assert!(d[&udp].backends.is_empty(), "no backend serves the UDP port");
        // No VNI yet: nothing.
        assert!(desired(&HashMap::new(), [&row]).is_empty());
    }
}
