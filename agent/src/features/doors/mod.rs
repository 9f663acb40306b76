//! The north-south doors' watches: VPCs, Ports, FloatingIPs and VPCGateways (our API),
//! LoadBalancer Services and their EndpointSlices (kube API), all cluster-wide, turned into
//! the Floating IP maps ([`crate::features::doors::fip`]) and the LoadBalancer gate's maps
//! ([`crate::features::doors::lb_gate`]). Every node holds every entry: whichever node an address is
//! attracted to delivers it. What the doors never NAT to is [`crate::core::watch::internal`]'s. The same VPC watch names the VPCs for the metrics
//! ([`crate::core::metrics::VpcNames`]).
//!
//! Like the other watches, entries pinned by a previous agent are adopted at start and
//! pruned only once every list they depend on completed.

pub mod fip;
pub mod lb_gate;
pub mod metrics;

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::PathBuf;

use cozyplane_apis::v1alpha1::{FloatingIP, Port, VPC, VPCGateway};
use futures::{StreamExt as _, stream::BoxStream};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};

use self::fip::{FipRow, ObjKey};
use self::lb_gate::{GwRow, SliceRow, SvcRow};
use crate::core::api::ApiClients;
use crate::core::metrics::VpcNames;
use crate::core::watch::{Cache, changes_live, name_of};
use futures::future::BoxFuture;

use crate::core::feature::{Core, Feature, FeatureError, spawned};
use crate::core::metrics::MetricsBuilder;

/// What the doors need of a Port.
#[derive(Clone, Debug, PartialEq, Eq)]
struct PortRow {
    vpc: ObjKey,
    ip: Option<IpAddr>,
    pod: Option<ObjKey>,
}

/// What the doors need of a VPC: its VNI (0 until it has one).
fn vpc_vni(v: &VPC) -> Option<(ObjKey, u32)> {
    let vni = v
        .status
        .as_ref()
        .and_then(|s| u32::try_from(s.vni).ok())
        .unwrap_or(0);
    Some((name_of(&v.metadata), vni))
}

fn port_row(p: &Port) -> Option<(String, PortRow)> {
    if p.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let pod = (!p.spec.pod_name.is_empty()).then(|| (p.spec.pod_namespace.clone(), p.spec.pod_name.clone()));
    Some((
        p.metadata.name.clone()?,
        PortRow {
            vpc: (p.spec.vpc_ref.namespace.clone(), p.spec.vpc_ref.name.clone()),
            ip: p.spec.ip.parse().ok(),
            pod,
        },
    ))
}

enum Ev {
    Vpc(Result<Event<VPC>, watcher::Error>),
    Port(Result<Event<Port>, watcher::Error>),
    Fip(Result<Event<FloatingIP>, watcher::Error>),
    Gw(Result<Event<VPCGateway>, watcher::Error>),
    Svc(Box<Result<Event<Service>, watcher::Error>>),
    Slice(Box<Result<Event<EndpointSlice>, watcher::Error>>),
}

/// Runs the watches forever, keeping the door maps under `pin_dir` in line with them.
pub async fn run(api: ApiClients, pin_dir: PathBuf, names: VpcNames) {
    let cfg = watcher::Config::default();
    let streams: Vec<BoxStream<'static, Ev>> = vec![
        watcher::watcher(Api::<VPC>::all(api.sdn.clone()), cfg.clone())
            .default_backoff()
            .map(Ev::Vpc)
            .boxed(),
        watcher::watcher(Api::<Port>::all(api.sdn.clone()), cfg.clone())
            .default_backoff()
            .map(Ev::Port)
            .boxed(),
        watcher::watcher(Api::<FloatingIP>::all(api.sdn.clone()), cfg.clone())
            .default_backoff()
            .map(Ev::Fip)
            .boxed(),
        watcher::watcher(Api::<VPCGateway>::all(api.sdn.clone()), cfg.clone())
            .default_backoff()
            .map(Ev::Gw)
            .boxed(),
        watcher::watcher(Api::<Service>::all(api.kube.clone()), cfg.clone())
            .default_backoff()
            .map(|r| Ev::Svc(Box::new(r)))
            .boxed(),
        watcher::watcher(
            Api::<EndpointSlice>::all(api.kube.clone()),
            cfg.labels("kubernetes.io/service-name"),
        )
        .default_backoff()
        .map(|r| Ev::Slice(Box::new(r)))
        .boxed(),
    ];
    let mut events = futures::stream::select_all(streams);

    let mut vpcs: Cache<ObjKey, u32> = Cache::new();
    let mut ports: Cache<String, PortRow> = Cache::new();
    let mut fips: Cache<ObjKey, FipRow> = Cache::new();
    let mut gws: Cache<ObjKey, GwRow> = Cache::new();
    let mut svcs: Cache<ObjKey, SvcRow> = Cache::new();
    let mut slices: Cache<ObjKey, SliceRow> = Cache::new();
    let mut applied_fip = fip::pinned(&pin_dir);
    let (mut applied_lb, mut applied_gate) = lb_gate::pinned(&pin_dir);
    tracing::info!(
        floating_ips = applied_fip.inbound.len(),
        frontends = applied_lb.front.len(),
        "watching FloatingIPs, VPCGateways and LoadBalancer Services"
    );
    while let Some(ev) = events.next().await {
        let (live, res) = match ev {
            Ev::Vpc(r) => (
                changes_live(&r),
                r.map(|e| vpcs.apply(e, vpc_vni, |v| name_of(&v.metadata))),
            ),
            Ev::Port(r) => (
                changes_live(&r),
                r.map(|e| ports.apply(e, port_row, |p| p.metadata.name.clone().unwrap_or_default())),
            ),
            Ev::Fip(r) => (
                changes_live(&r),
                r.map(|e| fips.apply(e, fip::fip_row, |f| name_of(&f.metadata))),
            ),
            Ev::Gw(r) => (
                changes_live(&r),
                r.map(|e| gws.apply(e, lb_gate::gw_row, |g| name_of(&g.metadata))),
            ),
            Ev::Svc(r) => (
                changes_live(&r),
                r.map(|e| svcs.apply(e, lb_gate::svc_row, |s| name_of(&s.metadata))),
            ),
            Ev::Slice(r) => (
                changes_live(&r),
                r.map(|e| slices.apply(e, lb_gate::slice_row, |s| name_of(&s.metadata))),
            ),
        };
        if let Err(e) = res {
            tracing::warn!("doors watch: {e}");
            continue;
        }
        if !live {
            continue;
        }
        let vnis = &vpcs.live;
        names.set(
            vpcs.live
                .iter()
                .filter(|(_, v)| **v != 0)
                .map(|(k, v)| (*v, k.clone())),
        );

        let port_addrs = ports.live.values().filter_map(|p| Some((&p.vpc, p.ip?)));
        let want = fip::desired(vnis, port_addrs, &fips.live);
        fip::sync(
            &pin_dir,
            &want,
            &mut applied_fip,
            vpcs.synced && ports.synced && fips.synced,
        );

        let mut pod_addrs: HashMap<ObjKey, Vec<(u32, IpAddr)>> = HashMap::new();
        for p in ports.live.values() {
            if let (Some(pod), Some(ip), Some(&vni)) = (&p.pod, p.ip, vnis.get(&p.vpc))
                && vni != 0
            {
                pod_addrs.entry(pod.clone()).or_default().push((vni, ip));
            }
        }
        let want_lb = lb_gate::desired(&svcs.live, &slices.live, &pod_addrs, &[api.node_ip]);
        let want_gate = lb_gate::admitted(vnis, gws.live.values());
        let fronts_synced = vpcs.synced && ports.synced && svcs.synced && slices.synced;
        lb_gate::sync(
            &pin_dir,
            &want_lb,
            &want_gate,
            &mut applied_lb,
            &mut applied_gate,
            fronts_synced,
            vpcs.synced && gws.synced,
        );
    }
}

/// The north-south doors: Floating IPs ([`fip`]), the LoadBalancer gate ([`lb_gate`]) and the
/// door counters ([`metrics`]). It also keeps the VPC names the per-VPC metric labels read,
/// from its watch of every VPC.
#[derive(Debug, Default)]
pub struct Doors;

impl Feature for Doors {
    fn name(&self) -> &'static str {
        "doors"
    }

    fn metrics(&mut self, m: &mut MetricsBuilder) {
        m.collector(metrics::DoorCollector(m.scope().clone()));
    }

    fn start(self: Box<Self>, core: Core) -> BoxFuture<'static, Result<(), FeatureError>> {
        spawned(run(core.api, core.pin_dir, core.vpc_names))
    }
}
