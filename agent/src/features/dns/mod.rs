//! The node's split-horizon resolver for VPC pods (crate `cozyplane-resolver`) and the
//! DNS steering that brings their queries to it (`bpf/lib/dns.h`).
//!
//! With `--dns-resolver` the agent:
//! * serves the resolver on `<address>:<--dns-port>` (UDP and TCP) for each of its addresses
//!   (`--dns-addresses`; default `--node-ip` and the uplink's address of the other family),
//!   answering the cluster domain (`--cluster-domain`) from the querier's VPC's view and
//!   forwarding the rest to `--dns-upstream` (default: the nameservers of
//!   `--dns-resolv-conf`);
//! * writes `sdn_dns_cfg` (per family, that address and port: steering on; a family without
//!   an address is not steered) and `sdn_dns_pods` (each VPC pod of this node: its VPC
//!   address → its fabric address); what is steered is port 53 of the cluster-internal
//!   addresses, `sdn_internal` ([`crate::core::watch::internal`]);
//! * watches this node's Pods, Ports, VPCs (VNIs for the steering, `spec.dns64` for the
//!   view), VPCPeerings, ServiceVIPs, and cluster-wide Services and EndpointSlices, rebuilding
//!   the view ([`crate::features::dns::view`]) after each change.
//!
//! A query is steered within its family (no NAT46): an IPv6 query needs an IPv6 resolver
//! address here and the pod's IPv6 fabric address (a dual-stack default network).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use cozyplane_apis::v1alpha1::{Port, ServiceVIP, VPC, VPCPeering};
use cozyplane_bpf::maps::dns_cfg::DnsCfgMap;
use cozyplane_bpf::maps::dns_pods::DnsPodsMap;
use cozyplane_resolver::{Resolver, Upstreams, ViewHandle, Zone};
use futures::future::BoxFuture;
use futures::{StreamExt as _, stream::BoxStream};
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};

pub mod view;

use self::view::{Inputs, Key};
use crate::core::api::ApiClients;
use crate::core::feature::{Core, Feature, FeatureError};
use crate::core::metrics::MetricsBuilder;
use crate::core::watch::{Cache, changes_live, name_of, pinned, plan};

/// `cozyplane-agent` flags of the resolver.
#[derive(Clone, Debug, clap::Args)]
pub struct DnsFlags {
    /// Run the split-horizon resolver for VPC pods and steer their DNS to it (needs an API
    /// and an IPv4 `--node-ip`).
    #[arg(long, env = "COZYPLANE_DNS_RESOLVER")]
    pub dns_resolver: bool,
    /// The resolver's port on the node address (UDP and TCP).
    #[arg(long, env = "COZYPLANE_DNS_PORT", default_value_t = cozyplane_resolver::DEFAULT_PORT)]
    pub dns_port: u16,
    /// The cluster domain answered authoritatively (Cozystack: `cozy.local`).
    #[arg(long, env = "COZYPLANE_CLUSTER_DOMAIN", default_value = cozyplane_resolver::DEFAULT_DOMAIN)]
    pub cluster_domain: String,
    /// Upstream resolvers for other names (`ip` or `ip:port`, comma-separated). Default: the
    /// nameservers of `--dns-resolv-conf`.
    #[arg(long, env = "COZYPLANE_DNS_UPSTREAM", value_delimiter = ',', value_parser = parse_upstream)]
    pub dns_upstream: Vec<SocketAddr>,
    /// The node's resolv.conf, read for upstreams when `--dns-upstream` is not given.
    #[arg(long, env = "COZYPLANE_DNS_RESOLV_CONF", default_value = "/etc/resolv.conf")]
    pub dns_resolv_conf: PathBuf,
    /// How long each upstream may take before the next is tried (milliseconds).
    #[arg(long, default_value_t = 2000)]
    pub dns_upstream_timeout_ms: u64,
    /// The resolver's addresses on this node, at most one per family (comma-separated).
    /// Default: `--node-ip`, and the uplink's address of the other family if it has one.
    #[arg(long, env = "COZYPLANE_DNS_ADDRESSES", value_delimiter = ',')]
    pub dns_addresses: Vec<IpAddr>,
}

fn parse_upstream(s: &str) -> Result<SocketAddr, String> {
    s.parse::<SocketAddr>()
        .or_else(|_| s.parse::<IpAddr>().map(|ip| SocketAddr::new(ip, 53)))
        .map_err(|e| format!("{s:?}: {e}"))
}

/// Why the resolver could not start.
#[derive(Debug, thiserror::Error)]
pub enum DnsError {
    /// `--cluster-domain` is no DNS name.
    #[error(transparent)]
    Zone(#[from] cozyplane_resolver::answer::ZoneError),
    /// `--dns-addresses` names two addresses of one family.
    #[error("--dns-addresses: {0} and {1} are of one family (one address per family)")]
    Family(IpAddr, IpAddr),
    /// The resolver's sockets could not be bound.
    #[error("bind dns {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
    /// A pinned DNS map could not be opened or written.
    #[error("{map}: {source}")]
    Map {
        /// The map.
        map: &'static str,
        /// The error.
        source: aya::maps::MapError,
    },
}

/// The upstreams: the flag, else the resolv.conf's nameservers (none is allowed: every
/// forwarded query then gets SERVFAIL, and the cluster domain still works).
fn upstreams(flags: &DnsFlags) -> Vec<SocketAddr> {
    if !flags.dns_upstream.is_empty() {
        return flags.dns_upstream.clone();
    }
    match std::fs::read_to_string(&flags.dns_resolv_conf) {
        Ok(t) => cozyplane_resolver::forward::from_resolv_conf(&t),
        Err(e) => {
            tracing::warn!("{}: {e}; no upstream resolvers", flags.dns_resolv_conf.display());
            Vec::new()
        }
    }
}

/// The resolver's addresses, one per family: `flag` if given, else the node address and the
/// uplink's address (`uplink`, as `sdn_snat_conf` holds it) of the other family.
pub fn resolver_addrs(
    flag: &[IpAddr],
    node_ip: IpAddr,
    uplink: [Option<IpAddr>; 2],
) -> Result<Vec<IpAddr>, DnsError> {
    let mut out: Vec<IpAddr> = Vec::new();
    let candidates: Vec<IpAddr> = if flag.is_empty() {
        std::iter::once(node_ip)
            .chain(uplink.into_iter().flatten())
            .collect()
    } else {
        flag.to_vec()
    };
    for ip in candidates {
        match out.iter().find(|o| o.is_ipv4() == ip.is_ipv4()) {
            // The defaults: the node address wins over the uplink's of its family.
            Some(_) if flag.is_empty() => {}
            Some(o) => return Err(DnsError::Family(*o, ip)),
            None => out.push(ip),
        }
    }
    Ok(out)
}

/// The uplink's addresses from `sdn_snat_conf` (written at start-up, before the resolver).
fn uplink_addrs(pin_dir: &Path) -> [Option<IpAddr>; 2] {
    use cozyplane_bpf::abi::SnatConf;
    let Ok(c) = cozyplane_bpf::maps::snat_conf::SnatConfMap::from_pin(pin_dir).and_then(|m| m.get()) else {
        return [None, None];
    };
    [
        (c.flags & SnatConf::F_HAVE4 != 0).then(|| IpAddr::from(c.node4)),
        (c.flags & SnatConf::F_HAVE6 != 0).then(|| IpAddr::from(c.node6)),
    ]
}

/// Start the resolver and the steering; returns once the sockets are bound (the work
/// goes on in spawned tasks).
pub async fn start(
    api: ApiClients,
    pin_dir: PathBuf,
    flags: DnsFlags,
    metrics: cozyplane_resolver::Metrics,
) -> Result<(), DnsError> {
    let ips = resolver_addrs(&flags.dns_addresses, api.node_ip, uplink_addrs(&pin_dir))?;
    let zone = Zone::new(&flags.cluster_domain, cozyplane_resolver::DEFAULT_TTL)?;
    let ups = upstreams(&flags);
    tracing::info!(addrs = ?ips, port = flags.dns_port, domain = zone.domain(), upstreams = ?ups, "dns resolver");
    let view = ViewHandle::default();
    let resolver = Arc::new(Resolver::new(
        view.clone(),
        zone,
        Upstreams {
            servers: ups,
            timeout: Duration::from_millis(flags.dns_upstream_timeout_ms),
        },
        metrics,
    ));
    let mut steered = Vec::new();
    for ip in ips {
        let addr = SocketAddr::new(ip, flags.dns_port);
        let (udp, tcp) = cozyplane_resolver::server::bind(addr)
            .await
            .map_err(|source| DnsError::Bind { addr, source })?;
        tokio::spawn({
            let r = resolver.clone();
            async move {
                if let Err(e) = r.serve_udp(udp).await {
                    tracing::error!("dns udp {addr} stopped: {e}");
                }
            }
        });
        tokio::spawn({
            let r = resolver.clone();
            async move {
                if let Err(e) = r.serve_tcp(tcp).await {
                    tracing::error!("dns tcp {addr} stopped: {e}");
                }
            }
        });
        steered.push(addr);
    }
    if let Err(e) = set_config(&pin_dir, &steered) {
        tracing::warn!("dns steering not configured: {e}");
    }
    tokio::spawn(run(api, pin_dir, view));
    Ok(())
}

/// Steer each family to its resolver address in `addrs`; a family without one is not steered.
fn set_config(pin_dir: &Path, addrs: &[SocketAddr]) -> Result<(), DnsError> {
    let map = |source| DnsError::Map {
        map: cozyplane_bpf::maps::dns_cfg::NAME,
        source,
    };
    let mut m = DnsCfgMap::from_pin(pin_dir).map_err(map)?;
    for v6 in [false, true] {
        match addrs.iter().find(|a| a.is_ipv6() == v6) {
            Some(a) => m.set(*a),
            None => m.clear(v6),
        }
        .map_err(map)?;
    }
    Ok(())
}

enum Ev {
    Pod(Box<Result<Event<Pod>, watcher::Error>>),
    Port(Result<Event<Port>, watcher::Error>),
    Vpc(Result<Event<VPC>, watcher::Error>),
    Peering(Result<Event<VPCPeering>, watcher::Error>),
    Service(Box<Result<Event<Service>, watcher::Error>>),
    Slice(Box<Result<Event<EndpointSlice>, watcher::Error>>),
    Vip(Result<Event<ServiceVIP>, watcher::Error>),
}

/// The watches, feeding the view and `sdn_dns_pods` until the process ends.
async fn run(api: ApiClients, pin_dir: PathBuf, view: ViewHandle) {
    let cfg = watcher::Config::default();
    let streams: Vec<BoxStream<'static, Ev>> = vec![
        watcher::watcher(
            Api::<Pod>::all(api.kube.clone()),
            cfg.clone().fields(&format!("spec.nodeName={}", api.node)),
        )
        .default_backoff()
        .map(|e| Ev::Pod(Box::new(e)))
        .boxed(),
        watcher::watcher(Api::<Port>::all(api.sdn.clone()), cfg.clone())
            .default_backoff()
            .map(Ev::Port)
            .boxed(),
        watcher::watcher(Api::<VPC>::all(api.sdn.clone()), cfg.clone())
            .default_backoff()
            .map(Ev::Vpc)
            .boxed(),
        watcher::watcher(Api::<VPCPeering>::all(api.sdn.clone()), cfg.clone())
            .default_backoff()
            .map(Ev::Peering)
            .boxed(),
        watcher::watcher(Api::<Service>::all(api.kube.clone()), cfg.clone())
            .default_backoff()
            .map(|e| Ev::Service(Box::new(e)))
            .boxed(),
        watcher::watcher(Api::<EndpointSlice>::all(api.kube.clone()), cfg.clone())
            .default_backoff()
            .map(|e| Ev::Slice(Box::new(e)))
            .boxed(),
        watcher::watcher(Api::<ServiceVIP>::all(api.sdn.clone()), cfg)
            .default_backoff()
            .map(Ev::Vip)
            .boxed(),
    ];
    let mut events = futures::stream::select_all(streams);

    let mut pods: Cache<Key, Vec<IpAddr>> = Cache::new();
    let mut ports: Cache<String, view::PortRow> = Cache::new();
    let mut vpcs: Cache<Key, view::VpcRow> = Cache::new();
    let mut peerings: Cache<Key, (Key, Key)> = Cache::new();
    let mut services: Cache<Key, view::ServiceRow> = Cache::new();
    let mut slices: Cache<Key, (Key, Vec<view::SliceEndpoint>)> = Cache::new();
    let mut vips: Cache<Key, (Key, Key, IpAddr)> = Cache::new();
    let mut applied_pods: HashMap<(u32, IpAddr), IpAddr> =
        pinned(DnsPodsMap::from_pin(&pin_dir), DnsPodsMap::entries).collect();
    let mut generation = 0u32;

    while let Some(ev) = events.next().await {
        let res = match ev {
            Ev::Pod(r) => (*r).map(|e| {
                let live = matches!(e, Event::InitDone | Event::Apply(_) | Event::Delete(_));
                pods.apply(e, view::pod_row, |p| name_of(&p.metadata));
                live
            }),
            Ev::Port(r) => {
                let live = changes_live(&r);
                r.map(|e| {
                    ports.apply(e, view::port_row, |p| p.metadata.name.clone().unwrap_or_default());
                    live
                })
            }
            Ev::Vpc(r) => {
                let live = changes_live(&r);
                r.map(|e| {
                    vpcs.apply(e, view::vpc_row, |v| name_of(&v.metadata));
                    live
                })
            }
            Ev::Peering(r) => {
                let live = changes_live(&r);
                r.map(|e| {
                    peerings.apply(e, view::peering_row, |p| name_of(&p.metadata));
                    live
                })
            }
            Ev::Service(r) => (*r).map(|e| {
                let live = matches!(e, Event::InitDone | Event::Apply(_) | Event::Delete(_));
                services.apply(e, view::service_row, |s| name_of(&s.metadata));
                live
            }),
            Ev::Slice(r) => (*r).map(|e| {
                let live = matches!(e, Event::InitDone | Event::Apply(_) | Event::Delete(_));
                slices.apply(e, view::slice_row, |s| name_of(&s.metadata));
                live
            }),
            Ev::Vip(r) => {
                let live = changes_live(&r);
                r.map(|e| {
                    vips.apply(e, view::vip_row, |v| name_of(&v.metadata));
                    live
                })
            }
        };
        match res {
            Err(e) => {
                tracing::warn!("dns watch: {e}");
                continue;
            }
            Ok(false) => continue,
            Ok(true) => {}
        }
        generation = generation.wrapping_add(1);
        let inputs = Inputs {
            node: &api.node,
            pods: Some(&pods.live),
            ports: Some(&ports.live),
            vpcs: Some(&vpcs.live),
            peerings: Some(&peerings.live),
            services: Some(&services.live),
            slices: Some(&slices.live),
            vips: Some(&vips.live),
        };
        view.set(view::build(&inputs, generation));

        let want = view::steering_sources(&api.node, &pods.live, &ports.live, &vpcs.live);
        let synced = pods.synced && ports.synced && vpcs.synced;
        sync_pods(&pin_dir, &want, &mut applied_pods, synced);
    }
}

fn sync_pods(
    pin_dir: &Path,
    want: &HashMap<(u32, IpAddr), IpAddr>,
    applied: &mut HashMap<(u32, IpAddr), IpAddr>,
    synced: bool,
) {
    let (write, remove) = plan(want, applied, |_| synced);
    if write.is_empty() && remove.is_empty() {
        return;
    }
    let mut m = match DnsPodsMap::from_pin(pin_dir) {
        Ok(m) => m,
        Err(e) => return tracing::warn!("{}: {e}", cozyplane_bpf::maps::dns_pods::NAME),
    };
    for ((net, ip), fabric) in write {
        match m.upsert(net, ip, fabric) {
            Ok(()) => {
                applied.insert((net, ip), fabric);
            }
            Err(e) => tracing::warn!("dns steering source {net}/{ip}: {e}"),
        }
    }
    for (net, ip) in remove {
        match m.remove(net, ip) {
            Ok(()) => {
                applied.remove(&(net, ip));
            }
            Err(e) => tracing::warn!("dns steering source {net}/{ip}: {e}"),
        }
    }
}

/// The resolver and the steering, with `--dns-resolver`; its metrics are registered either way.
#[derive(Debug)]
pub struct Dns {
    flags: DnsFlags,
    metrics: Option<cozyplane_resolver::Metrics>,
}

impl Dns {
    /// The feature with its flags.
    pub fn new(flags: DnsFlags) -> Self {
        Self { flags, metrics: None }
    }

    /// The resolver's metrics, once [`Feature::metrics`] registered them.
    pub fn resolver_metrics(&self) -> Option<cozyplane_resolver::Metrics> {
        self.metrics.clone()
    }
}

impl Feature for Dns {
    fn name(&self) -> &'static str {
        "dns"
    }

    fn metrics(&mut self, m: &mut MetricsBuilder) {
        self.metrics = Some(cozyplane_resolver::Metrics::register(m.registry()));
    }

    fn start(self: Box<Self>, core: Core) -> BoxFuture<'static, Result<(), FeatureError>> {
        Box::pin(async move {
            if !self.flags.dns_resolver {
                return Ok(());
            }
            // The core registers every feature's metrics first; started without that, the
            // resolver counts into a registry nobody scrapes.
            let metrics = self.metrics.unwrap_or_else(|| {
                cozyplane_resolver::Metrics::register(&mut prometheus_client::registry::Registry::default())
            });
            start(core.api, core.pin_dir, self.flags, metrics).await?;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    fn ip(s: &str) -> std::net::IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn the_resolver_listens_on_the_node_address_and_the_uplinks_other_family() {
        use super::resolver_addrs;
        // Dual-stack uplink: the node address for v4, the uplink's for v6.
        let up = [Some(ip("192.168.77.9")), Some(ip("fd77::1"))];
        assert_eq!(
            resolver_addrs(&[], ip("192.168.77.1"), up).unwrap(),
            vec![ip("192.168.77.1"), ip("fd77::1")]
        );
        // A v6 node address (v6 underlay): the uplink gives the v4 one.
        assert_eq!(
            resolver_addrs(&[], ip("fd77::2"), up).unwrap(),
            vec![ip("fd77::2"), ip("192.168.77.9")]
        );
        // Single stack: one family, the other is not steered.
        assert_eq!(
            resolver_addrs(&[], ip("192.168.77.1"), [Some(ip("192.168.77.1")), None]).unwrap(),
            vec![ip("192.168.77.1")]
        );
        // The flag replaces the defaults, one address per family.
        assert_eq!(
            resolver_addrs(&[ip("fd00::53")], ip("192.168.77.1"), up).unwrap(),
            vec![ip("fd00::53")]
        );
        assert!(resolver_addrs(&[ip("10.0.0.1"), ip("10.0.0.2")], ip("192.168.77.1"), up).is_err());
    }
}
