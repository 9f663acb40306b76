//! Prometheus metrics, read fresh from the pinned maps on every scrape (so they stay
//! right across agent restarts: the datapath counters live in the kernel, not here).
//!
//! The core's families (text exposition; counters get `_total`):
//! - `cozyplane_bpf_map_entries{map}`: entries in each hash map (the core's, and those each
//!   feature names through [`MetricsBuilder::map_sizes`]);
//! - `cozyplane_drops_packets_total{reason}`, `cozyplane_drops_bytes_total{reason}`;
//! - `cozyplane_net_packets_total{net,direction}`, `cozyplane_net_bytes_total{net,direction}`
//!   (per VPC; net 0 is the default network);
//! - `cozyplane_vpc_packets_total`, `cozyplane_vpc_bytes_total`
//!   `{vni,vpc_namespace,vpc,node,direction}`: east-west traffic per VPC (`sdn_net_stats`,
//!   `tx`/`rx`; net 0 is no VPC and is left out). VPC names come from [`VpcNames`]; empty
//!   until a VPC watch has seen the VPC;
//! - `cozyplane_sync_errors_total{op}`: agent-side failures to program the datapath;
//! - `cozyplane_cni_requests_total{command,outcome}`;
//! - `cozyplane_cni_add_step_seconds{step}`: where a pod ADD spends its time (histogram).
//!
//! Each feature registers its own families in the same registry ([`MetricsBuilder`], through
//! `Feature::metrics`) and lists them in its docs: the doors' per-VPC door counters, peering's
//! crossings, the ServiceVIP load balancer's counters, the policy layers' drops and writer
//! metrics, the resolver's `cozyplane_dns_*`, overlay trust's forged packets per sending node
//! ([`NodeNames`] names them).

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use cozyplane_bpf::maps::{self, drops::DropsMap, net_stats::NetStatsMap};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric as _, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// A family's labels, in the order they are rendered.
pub type Labels = Vec<(&'static str, String)>;

/// A feature's contribution to `cozyplane_bpf_map_entries`: its pinned hash maps under a pin
/// directory and their entry counts.
pub type MapSizes = fn(&Path) -> Vec<(&'static str, usize)>;

/// VNI → `(namespace, name)` of every VPC, read at each scrape for the per-VPC labels; kept
/// by a feature that watches every VPC (the doors do).
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

/// Tunnel address → Node name of every node, read at each scrape to name the sender of an
/// overlay packet; kept by the core's Node watch (`core/watch`), beside `sdn_nodes`.
#[derive(Clone, Debug, Default)]
pub struct NodeNames(Arc<RwLock<HashMap<IpAddr, String>>>);

impl NodeNames {
    /// Replace the whole table.
    pub fn set(&self, names: impl IntoIterator<Item = (IpAddr, String)>) {
        let fresh: HashMap<_, _> = names.into_iter().collect();
        if let Ok(mut t) = self.0.write() {
            *t = fresh;
        }
    }

    /// The Node name of tunnel address `ip`, if a Node has it.
    pub fn get(&self, ip: IpAddr) -> Option<String> {
        self.0.read().ok()?.get(&ip).cloned()
    }
}

/// The agent's registry and the counters the agent itself increments.
#[derive(Clone, Debug)]
pub struct Metrics {
    registry: Arc<Registry>,
    sync_errors: Family<Labels, Counter>,
    cni_requests: Family<Labels, Counter>,
    add_steps: Family<Labels, Histogram, fn() -> Histogram>,
}

/// What a per-VPC or per-node family needs to label its rows: the pins to read, this node's
/// name and the VPC names.
#[derive(Clone, Debug)]
pub struct Scope {
    /// The bpffs directory the maps are pinned under.
    pub pin_dir: PathBuf,
    /// This node's name (`node` label).
    pub node: String,
    /// VPC names by VNI.
    pub vpcs: VpcNames,
    /// Node names by tunnel address (filled by the core's Node watch).
    pub nodes: NodeNames,
}

impl Scope {
    /// `vni`, `vpc_namespace`, `vpc`, `node` of a VPC.
    pub fn vpc_labels(&self, vni: u32) -> Labels {
        let (ns, name) = self.vpcs.get(vni);
        vec![
            ("vni", vni.to_string()),
            ("vpc_namespace", ns),
            ("vpc", name),
            ("node", self.node.clone()),
        ]
    }
}

/// The registry while it is being filled: the core's families are in, each feature adds its
/// own (through `Feature::metrics`), then [`MetricsBuilder::build`] freezes it.
#[derive(Debug)]
pub struct MetricsBuilder {
    registry: Registry,
    scope: Scope,
    map_sizes: Vec<MapSizes>,
    sync_errors: Family<Labels, Counter>,
    cni_requests: Family<Labels, Counter>,
    add_steps: Family<Labels, Histogram, fn() -> Histogram>,
}

impl MetricsBuilder {
    /// The core's families over `pin_dir`, labelling per-VPC families with `node` and the
    /// VPC names from `vpcs`.
    pub fn new(pin_dir: PathBuf, node: String, vpcs: VpcNames) -> Self {
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
        Self {
            registry,
            scope: Scope {
                pin_dir,
                node,
                vpcs,
                nodes: NodeNames::default(),
            },
            map_sizes: Vec::new(),
            sync_errors,
            cni_requests,
            add_steps,
        }
    }

    /// The registry, to register a feature's families and collectors in.
    pub fn registry(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// Register a scrape-time collector (a feature's families read from its pinned maps).
    pub fn collector(&mut self, c: impl Collector + 'static) {
        self.registry.register_collector(Box::new(c));
    }

    /// Pins, node and VPC names, for a feature's collector.
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// Count a feature's hash maps in `cozyplane_bpf_map_entries` (one family for all maps).
    pub fn map_sizes(&mut self, sizes: MapSizes) {
        self.map_sizes.push(sizes);
    }

    /// The registry with the core's map collector, frozen.
    pub fn build(mut self) -> Metrics {
        self.registry.register_collector(Box::new(MapCollector {
            scope: self.scope,
            features: self.map_sizes,
        }));
        Metrics {
            registry: Arc::new(self.registry),
            sync_errors: self.sync_errors,
            cni_requests: self.cni_requests,
            add_steps: self.add_steps,
        }
    }
}

impl Metrics {
    /// The core's registry over `pin_dir`; per-VPC families unnamed, node label empty (see
    /// [`MetricsBuilder::new`]).
    pub fn new(pin_dir: PathBuf) -> Self {
        MetricsBuilder::new(pin_dir, String::new(), VpcNames::default()).build()
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
    scope: Scope,
    /// The features' map sizes.
    features: Vec<MapSizes>,
}

impl MapCollector {
    /// East-west traffic per VPC (net 0 left out).
    fn encode_vpcs(&self, enc: &mut DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        if let Ok(stats) = NetStatsMap::from_pin(&self.scope.pin_dir) {
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
                        let mut l = self.scope.vpc_labels(net);
                        l.push(("direction", dir.to_string()));
                        pk.push((l.clone(), p));
                        by.push((l, b));
                    }
                }
            }
            counter_family(enc, "cozyplane_vpc_packets", "East-west packets per VPC", &pk)?;
            counter_family(enc, "cozyplane_vpc_bytes", "East-west bytes per VPC", &by)?;
        }
        Ok(())
    }
}

/// Encodes one counter family from rows read at scrape time (for features' collectors too).
pub fn counter_family(
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
        let sizes: Vec<(Labels, i64)> = map_sizes(&self.scope.pin_dir)
            .into_iter()
            .chain(self.features.iter().flat_map(|f| f(&self.scope.pin_dir)))
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

        if let Ok(drops) = DropsMap::from_pin(&self.scope.pin_dir)
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

        if let Ok(stats) = NetStatsMap::from_pin(&self.scope.pin_dir) {
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

        Ok(())
    }
}

/// Entries of the core's hash maps, by walking their keys (the kernel keeps no count
/// userspace can read): those the agent and CNI write, and the datapath's flow tables.
fn map_sizes(dir: &std::path::Path) -> Vec<(&'static str, usize)> {
    use cozyplane_bpf::maps::{
        bridges::BridgesMap, ct_fwd::CtFwdMap, ct_rev::CtRevMap, dnat::DnatMap, endpoints::EndpointsMap,
        frags::FragsMap, node_blocks::NodeBlocksMap, nodes::NodesMap, ports::PortsMap, remotes::RemotesMap,
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
    if let Ok(m) = NodesMap::from_pin(dir) {
        out.push((maps::nodes::NAME, m.inner().keys().count()));
    }
    out
}
