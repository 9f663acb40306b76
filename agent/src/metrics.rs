//! Prometheus metrics, read fresh from the pinned maps on every scrape (so they stay
//! right across agent restarts: the datapath counters live in the kernel, not here).
//!
//! Exported (text exposition; counters get `_total`):
//! - `cozyplane_bpf_map_entries{map}`: entries in each hash map;
//! - `cozyplane_drops_packets_total{reason}`, `cozyplane_drops_bytes_total{reason}`;
//! - `cozyplane_net_packets_total{net,direction}`, `cozyplane_net_bytes_total{net,direction}`
//!   (per VPC; net 0 is the default network);
//! - `cozyplane_xnet_packets_total{from,to}`, `cozyplane_xnet_bytes_total{from,to}`: VPC
//!   peering crossings this node let through (from `sdn_xnet_allow`; a pair's counters
//!   start over when its peering is re-created);
//! - `cozyplane_vpc_door_packets_total`, `cozyplane_vpc_door_bytes_total`
//!   `{vni,vpc_namespace,vpc,node,door,direction}`: what crossed a VPC's boundary through a
//!   door (`gateway`, `eip`, `loadbalancer`) in a direction (`in`, `out`) on this node
//!   (from `sdn_door_stats`); `cozyplane_vpc_door_refused_packets_total`,
//!   `cozyplane_vpc_door_refused_bytes_total`, same labels: what the boundary refused there;
//! - `cozyplane_vpc_packets_total`, `cozyplane_vpc_bytes_total`
//!   `{vni,vpc_namespace,vpc,node,direction}`: east-west traffic per VPC (`sdn_net_stats`,
//!   `tx`/`rx`; net 0 is no VPC and is left out). VPC names come from the VPC watch
//!   ([`VpcNames`]); empty until it has seen the VPC;
//! - `cozyplane_policy_drops_packets_total`, `cozyplane_policy_drops_bytes_total`
//!   `{layer,reason,vni,vpc_namespace,vpc,node}`: what the policy layers refused on this
//!   node (`sdn_pol_drops`), by layer (`np`, `sg`, `hf`), reason (`DROP_POL_*`) and VPC (a
//!   SecurityGroup drop carries the VPC whose groups the flow met; NetworkPolicy's are
//!   `vni="0"` with empty names);
//! - `cozyplane_lb_flows_total`, `cozyplane_lb_selections_total`, `cozyplane_lb_misses_total`:
//!   the ServiceVIP load balancer's counters (`sdn_lb_stats`, [`crate::services`]);
//! - `cozyplane_policy_*`: the policy writer's compile and write times, refused constructs
//!   ([`crate::policy::metrics`]); policy map sizes are in `cozyplane_bpf_map_entries`;
//! - `cozyplane_sync_errors_total{op}`: agent-side failures to program the datapath;
//! - `cozyplane_cni_requests_total{command,outcome}`;
//! - `cozyplane_cni_add_step_seconds{step}`: where a pod ADD spends its time (histogram);
//! - `cozyplane_dns_*`: the VPC resolver's queries by answer, forwards, refusals, drops and
//!   latency ([`cozyplane_resolver::metrics`]).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use cozyplane_bpf::abi::DoorKey;
use cozyplane_bpf::maps::{
    self, door_stats::DoorStatsMap, drops::DropsMap, net_stats::NetStatsMap, pol_drops::PolDropsMap,
    xnet_allow::XnetAllowMap,
};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric as _, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

type Labels = Vec<(&'static str, String)>;

/// VNI → `(namespace, name)` of every VPC, kept by the doors' VPC watch
/// ([`crate::doors`]) and read at each scrape for the per-VPC labels.
#[derive(Clone, Debug, Default)]
pub struct VpcNames(Arc<RwLock<HashMap<u32, (String, String)>>>);

impl VpcNames {
    /// Replace the whole table.
    pub fn set(&self, names: impl IntoIterator<Item = (u32, (String, String))>) {
        let fresh: HashMap<_, _> = names.into_iter().collect();
        if let Ok(mut t) = self.0.write() {
            *t = fresh;
        }
    }

    /// `(namespace, name)` of `vni`, empty strings if unknown.
    pub fn get(&self, vni: u32) -> (String, String) {
        self.0
            .read()
            .ok()
            .and_then(|t| t.get(&vni).cloned())
            .unwrap_or_default()
    }
}

/// The label value of a door (`SDN_DOOR_*`).
fn door_name(door: u8) -> &'static str {
    match door {
        DoorKey::GATEWAY => "gateway",
        DoorKey::EIP => "eip",
        DoorKey::LOADBALANCER => "loadbalancer",
        _ => "unknown",
    }
}

/// The agent's registry and the counters the agent itself increments.
#[derive(Clone, Debug)]
pub struct Metrics {
    registry: Arc<Registry>,
    sync_errors: Family<Labels, Counter>,
    cni_requests: Family<Labels, Counter>,
    add_steps: Family<Labels, Histogram, fn() -> Histogram>,
    dns: cozyplane_resolver::Metrics,
    policy: crate::policy::metrics::PolicyMetrics,
}

impl Metrics {
    /// A registry with the map collector over `pin_dir`; per-VPC families unnamed, node
    /// label empty (see [`Metrics::with_identity`]).
    pub fn new(pin_dir: PathBuf) -> Self {
        Self::with_identity(pin_dir, String::new(), VpcNames::default())
    }

    /// A registry with the map collector over `pin_dir`, labelling per-VPC families with
    /// `node` and the VPC names from `vpcs`.
    pub fn with_identity(pin_dir: PathBuf, node: String, vpcs: VpcNames) -> Self {
        let mut registry = Registry::default();
        let sync_errors = Family::<Labels, Counter>::default();
        let cni_requests = Family::<Labels, Counter>::default();
        registry.register(
            "cozyplane_sync_errors",
            "Failures to program the datapath (maps, links, netlink)",
            sync_errors.clone(),
        );
        registry.register(
            "cozyplane_cni_requests",
            "CNI requests served",
            cni_requests.clone(),
        );
        // 0.1 ms .. ~0.8 s: a step is a syscall batch or one API round trip.
        let add_steps = Family::<Labels, Histogram, fn() -> Histogram>::new_with_constructor(|| {
            Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
                0.0001, 2.0, 14,
            ))
        });
        registry.register(
            "cozyplane_cni_add_step_seconds",
            "Time a pod ADD spends in each step",
            add_steps.clone(),
        );
        registry.register_collector(Box::new(MapCollector { pin_dir, node, vpcs }));
        let dns = cozyplane_resolver::Metrics::register(&mut registry);
        let policy = crate::policy::metrics::PolicyMetrics::register(&mut registry);
        Self {
            registry: Arc::new(registry),
            sync_errors,
            cni_requests,
            add_steps,
            dns,
            policy,
        }
    }

    /// The resolver's metrics (`cozyplane_dns_*`, see [`cozyplane_resolver::metrics`]).
    pub fn dns(&self) -> cozyplane_resolver::Metrics {
        self.dns.clone()
    }

    /// The policy writer's metrics (`cozyplane_policy_*`, see [`crate::policy::metrics`]).
    pub fn policy(&self) -> crate::policy::metrics::PolicyMetrics {
        self.policy.clone()
    }

    /// Count a failed datapath operation.
    pub fn sync_error(&self, op: &'static str) {
        self.sync_errors
            .get_or_create(&vec![("op", op.to_string())])
            .inc();
    }

    /// Count a CNI request.
    pub fn cni_request(&self, command: &str, ok: bool) {
        let outcome = if ok { "ok" } else { "error" };
        self.cni_requests
            .get_or_create(&vec![
                ("command", command.to_string()),
                ("outcome", outcome.to_string()),
            ])
            .inc();
    }

    /// Record how long one step of an ADD took.
    pub fn add_step(&self, step: &'static str, d: std::time::Duration) {
        self.add_steps
            .get_or_create(&vec![("step", step.to_string())])
            .observe(d.as_secs_f64());
    }

    /// The exposition text.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::warn!("encoding metrics: {e}");
        }
        out
    }

    /// Serves `GET /metrics` until the listener fails.
    pub async fn serve(self, listener: tokio::net::TcpListener) -> std::io::Result<()> {
        const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
        let app = axum::Router::new().route(
            "/metrics",
            axum::routing::get(move || {
                let me = self.clone();
                async move { ([(axum::http::header::CONTENT_TYPE, OPENMETRICS)], me.render()) }
            }),
        );
        axum::serve(listener, app).await
    }
}

/// Reads the pinned maps on each scrape.
#[derive(Debug)]
struct MapCollector {
    pin_dir: PathBuf,
    node: String,
    vpcs: VpcNames,
}

impl MapCollector {
    /// `vni`, `vpc_namespace`, `vpc`, `node` of a VPC.
    fn vpc_labels(&self, vni: u32) -> Labels {
        let (ns, name) = self.vpcs.get(vni);
        vec![
            ("vni", vni.to_string()),
            ("vpc_namespace", ns),
            ("vpc", name),
            ("node", self.node.clone()),
        ]
    }

    /// The per-VPC families: doors, refusals, east-west.
    fn encode_vpcs(&self, enc: &mut DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        if let Ok(doors) = DoorStatsMap::from_pin(&self.pin_dir)
            && let Ok(rows) = doors.entries()
        {
            let (mut pk, mut by, mut rpk, mut rby) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for (k, v) in rows.into_iter().filter(|(k, _)| k.net != 0) {
                let mut l = self.vpc_labels(k.net);
                l.push(("door", door_name(k.door).to_string()));
                let dir = if k.dir == DoorKey::IN { "in" } else { "out" };
                l.push(("direction", dir.to_string()));
                pk.push((l.clone(), v.packets));
                by.push((l.clone(), v.bytes));
                rpk.push((l.clone(), v.refused_packets));
                rby.push((l, v.refused_bytes));
            }
            counter_family(
                enc,
                "cozyplane_vpc_door_packets",
                "Packets through a VPC's door, by direction",
                &pk,
            )?;
            counter_family(
                enc,
                "cozyplane_vpc_door_bytes",
                "Bytes through a VPC's door, by direction",
                &by,
            )?;
            counter_family(
                enc,
                "cozyplane_vpc_door_refused_packets",
                "Packets the VPC boundary refused at a door",
                &rpk,
            )?;
            counter_family(
                enc,
                "cozyplane_vpc_door_refused_bytes",
                "Bytes the VPC boundary refused at a door",
                &rby,
            )?;
        }
        if let Ok(stats) = NetStatsMap::from_pin(&self.pin_dir) {
            let nets: Vec<u32> = stats
                .inner()
                .keys()
                .filter_map(Result::ok)
                .filter(|n| *n != 0)
                .collect();
            let (mut pk, mut by) = (Vec::new(), Vec::new());
            for net in nets {
                if let Ok(Some(s)) = stats.get(net) {
                    for (dir, p, b) in [("tx", s.tx_packets, s.tx_bytes), ("rx", s.rx_packets, s.rx_bytes)] {
                        let mut l = self.vpc_labels(net);
                        l.push(("direction", dir.to_string()));
                        pk.push((l.clone(), p));
                        by.push((l, b));
                    }
                }
            }
            counter_family(enc, "cozyplane_vpc_packets", "East-west packets per VPC", &pk)?;
            counter_family(enc, "cozyplane_vpc_bytes", "East-west bytes per VPC", &by)?;
        }
        self.encode_policy_drops(enc)
    }

    /// The policy layers' drops per layer, reason and VPC (`sdn_pol_drops`).
    fn encode_policy_drops(&self, enc: &mut DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let Ok(map) = PolDropsMap::from_pin(&self.pin_dir) else {
            return Ok(());
        };
        let Ok(rows) = map.all() else { return Ok(()) };
        let (mut pk, mut by) = (Vec::new(), Vec::new());
        for r in rows {
            let mut l = vec![
                ("layer", layer_name(r.layer).to_string()),
                ("reason", r.reason.c_name().to_string()),
            ];
            l.extend(self.vpc_labels(r.net));
            pk.push((l.clone(), r.stats.packets));
            by.push((l, r.stats.bytes));
        }
        counter_family(
            enc,
            "cozyplane_policy_drops_packets",
            "Packets the policy layers refused, by layer, reason and VPC (vni 0: the default network)",
            &pk,
        )?;
        counter_family(
            enc,
            "cozyplane_policy_drops_bytes",
            "Bytes the policy layers refused, by layer, reason and VPC (vni 0: the default network)",
            &by,
        )
    }
}

/// The label value of a policy layer (`SDN_LAYER_*`).
fn layer_name(layer: u8) -> &'static str {
    use cozyplane_bpf::abi::{LAYER_HF, LAYER_NP, LAYER_SG};
    match layer {
        LAYER_SG => "sg",
        LAYER_NP => "np",
        LAYER_HF => "hf",
        _ => "unknown",
    }
}

fn counter_family(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    rows: &[(Labels, u64)],
) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, v) in rows {
        m.encode_family(labels)?
            .encode_counter::<NoLabelSet, u64, u64>(v, None)?;
    }
    Ok(())
}

impl Collector for MapCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        // A map that cannot be opened (agent starting, pins wiped) is left out of the
        // scrape rather than failing it.
        let sizes: Vec<(Labels, i64)> = map_sizes(&self.pin_dir)
            .into_iter()
            .map(|(name, n)| (vec![("map", name.to_string())], n as i64))
            .collect();
        {
            let mut g = enc.encode_descriptor(
                "cozyplane_bpf_map_entries",
                "Entries in each pinned hash map",
                None,
                MetricType::Gauge,
            )?;
            for (labels, v) in &sizes {
                prometheus_client::metrics::gauge::ConstGauge::new(*v).encode(g.encode_family(labels)?)?;
            }
        }

        if let Ok(drops) = DropsMap::from_pin(&self.pin_dir)
            && let Ok(all) = drops.all()
        {
            let pk: Vec<_> = all
                .iter()
                .map(|(r, s)| (vec![("reason", r.c_name().to_string())], s.packets))
                .collect();
            let by: Vec<_> = all
                .iter()
                .map(|(r, s)| (vec![("reason", r.c_name().to_string())], s.bytes))
                .collect();
            counter_family(
                &mut enc,
                "cozyplane_drops_packets",
                "Packets dropped by the datapath, by reason",
                &pk,
            )?;
            counter_family(
                &mut enc,
                "cozyplane_drops_bytes",
                "Bytes dropped by the datapath, by reason",
                &by,
            )?;
        }

        if let Ok(stats) = NetStatsMap::from_pin(&self.pin_dir) {
            let nets: Vec<u32> = stats.inner().keys().filter_map(Result::ok).collect();
            let (mut pk, mut by) = (Vec::new(), Vec::new());
            for net in nets {
                if let Ok(Some(s)) = stats.get(net) {
                    let l = |d: &str| vec![("net", net.to_string()), ("direction", d.to_string())];
                    pk.push((l("tx"), s.tx_packets));
                    pk.push((l("rx"), s.rx_packets));
                    by.push((l("tx"), s.tx_bytes));
                    by.push((l("rx"), s.rx_bytes));
                }
            }
            counter_family(
                &mut enc,
                "cozyplane_net_packets",
                "East-west packets per net (VNI; 0 = default network)",
                &pk,
            )?;
            counter_family(
                &mut enc,
                "cozyplane_net_bytes",
                "East-west bytes per net (VNI; 0 = default network)",
                &by,
            )?;
        }

        self.encode_vpcs(&mut enc)?;

        if let Ok(allow) = XnetAllowMap::from_pin(&self.pin_dir)
            && let Ok(all) = allow.entries()
        {
            let l = |(s, t): (u32, u32)| vec![("from", s.to_string()), ("to", t.to_string())];
            let pk: Vec<_> = all.iter().map(|(k, v)| (l(*k), v.packets)).collect();
            let by: Vec<_> = all.iter().map(|(k, v)| (l(*k), v.bytes)).collect();
            counter_family(
                &mut enc,
                "cozyplane_xnet_packets",
                "Packets this node let across a VPC peering, by source and destination net",
                &pk,
            )?;
            counter_family(
                &mut enc,
                "cozyplane_xnet_bytes",
                "Bytes this node let across a VPC peering, by source and destination net",
                &by,
            )?;
        }
        crate::services::encode_metrics(&mut enc, &self.pin_dir)?;
        Ok(())
    }
}

/// Entries of every hash map, by walking their keys (the kernel keeps no count userspace
/// can read): those the agent and CNI write, and the datapath's flow tables.
fn map_sizes(dir: &std::path::Path) -> Vec<(&'static str, usize)> {
    use cozyplane_bpf::maps::{
        bridges::BridgesMap, ct_fwd::CtFwdMap, ct_rev::CtRevMap, dnat::DnatMap, endpoints::EndpointsMap,
        frags::FragsMap, node_blocks::NodeBlocksMap, nodes::NodesMap, ports::PortsMap, remotes::RemotesMap,
        xnet_routes::XnetRoutesMap,
    };
    let mut out = Vec::new();
    if let Ok(m) = PortsMap::from_pin(dir) {
        out.push((maps::ports::NAME, m.inner().keys().count()));
    }
    if let Ok(m) = EndpointsMap::from_pin(dir) {
        out.push((maps::endpoints::NAME, m.inner().keys().count()));
    }
    if let Ok(m) = RemotesMap::from_pin(dir) {
        out.push((maps::remotes::NAME, m.inner().keys().count()));
    }
    if let Ok(m) = NodeBlocksMap::from_pin(dir) {
        out.push((maps::node_blocks::NAME, m.inner().keys().count()));
    }
    if let Ok(m) = BridgesMap::from_pin(dir) {
        out.push((maps::bridges::NAME, m.inner().keys().count()));
    }
    if let Ok(m) = CtFwdMap::from_pin(dir) {
        out.push((maps::ct_fwd::NAME, m.inner().keys().count()));
    }
    if let Ok(m) = CtRevMap::from_pin(dir) {
        out.push((maps::ct_rev::NAME, m.inner().keys().count()));
    }
    if let Ok(m) = DnatMap::from_pin(dir) {
        out.push((maps::dnat::NAME, m.inner().keys().count()));
    }
    if let Ok(m) = FragsMap::from_pin(dir) {
        out.push((maps::frags::NAME, m.inner().keys().count()));
    }
    if let Ok(m) = XnetRoutesMap::from_pin(dir) {
        out.push((maps::xnet_routes::NAME, m.inner().keys().count()));
    }
    if let Ok(m) = XnetAllowMap::from_pin(dir) {
        out.push((maps::xnet_allow::NAME, m.inner().keys().count()));
    }
    if let Ok(m) = NodesMap::from_pin(dir) {
        out.push((maps::nodes::NAME, m.inner().keys().count()));
    }
    out.extend(crate::services::map_sizes(dir));
    out.extend(crate::policy::metrics::map_sizes(dir));
    out
}
