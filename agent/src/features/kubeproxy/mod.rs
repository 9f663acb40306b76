//! The cluster's Service proxy (`--kube-proxy-replacement`): Kubernetes Services and their
//! EndpointSlices, watched cluster-wide, become frontends of the load balancer on the default
//! network (net 0), which the datapath serves at the socket for this node and its net-0 pods
//! (`bpf/lib/sock_lb.h`, attached here to the cgroup2 root) and per packet for what the socket
//! hooks did not translate (`bpf/lib/lb.h`, at `sdn_from_pod`). What a Service becomes is
//! [`model`]'s; [`state`] keeps the maps equal to it, one Service at a time.
//!
//! Fail static: nothing is written before both watches have listed (the pinned frontends of a
//! previous run keep serving meanwhile); the first full list replaces this owner's frontends
//! at once ([`Lb::sync`]), every later event rewrites only the frontends of the one Service
//! it touches ([`Lb::update`]), and a watch that fails keeps the maps as they are until it
//! lists again.

pub mod health;
pub mod metrics;
pub mod model;
pub mod state;

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::time::Instant;

use futures::future::BoxFuture;
use futures::{StreamExt as _, stream::BoxStream};
use k8s_openapi::api::core::v1::{LoadBalancerStatus, Node, Pod, Service, ServiceSpec, ServiceStatus};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use kube::core::{ApiResource, Object};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};

use self::model::{Me, NodeAddrs, NodePortAddresses, SELECTOR};
use self::state::Proxy;
use crate::core::api::ApiClients;
use crate::core::datapath::cgroup::cgroup2_root;
use crate::core::feature::{Core, DatapathCtx, Feature, FeatureError, spawned};
use crate::core::lb::{Lb, Owner};
use crate::core::metrics::MetricsBuilder;

/// The feature's flags.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct Args {
    /// Be the cluster's Service proxy: balance every Kubernetes Service's ClusterIPs,
    /// external IPs and load balancer IPs in eBPF, so the cluster needs no kube-proxy. Off:
    /// Services are kube-proxy's (the coexistence `--dnat-mark` describes).
    #[arg(long, env = "COZYPLANE_KUBE_PROXY_REPLACEMENT", default_value_t = false,
          action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub kube_proxy_replacement: bool,
    /// The cgroup2 directory the socket-level load balancer is attached to (every process
    /// below it has its connections to Services made straight to a backend). Default: the
    /// root of the cgroup2 hierarchy (`/sys/fs/cgroup`, or the unified mount of a hybrid host).
    #[arg(long, env = "COZYPLANE_CGROUP_ROOT")]
    pub cgroup_root: Option<std::path::PathBuf>,
    /// The node addresses NodePorts are served at, as kube-proxy's flag of that name:
    /// comma-separated CIDRs (a family none of them is of keeps every address), or
    /// `primary` (each node's first `InternalIP`, else `ExternalIP`, of each family). Unset
    /// or empty: every `InternalIP` and `ExternalIP` of every node. A malformed CIDR stops
    /// the agent at start.
    #[arg(long, env = "COZYPLANE_NODEPORT_ADDRESSES", value_name = "CIDRS|primary",
          default_value = "", hide_default_value = true, value_parser = NodePortAddresses::parse)]
    pub nodeport_addresses: NodePortAddresses,
}

/// Of a Service's status, what the proxy reads: the load balancer's ingress.
#[derive(Clone, Debug, Default, serde::Deserialize, serde::Serialize)]
pub struct LbStatusOnly {
    /// `status.loadBalancer`.
    #[serde(rename = "loadBalancer", default, skip_serializing_if = "Option::is_none")]
    pub load_balancer: Option<LoadBalancerStatus>,
}

/// A Service as the watch reads it: its status conditions are left unread. kube-apiserver
/// sends a condition's `lastTransitionTime` as `null` when its writer set none, which
/// k8s-openapi's `Condition` cannot read, and one such Service made the typed watch fail on
/// each of its events and back off for seconds (seen with the upstream suite's Service status
/// test); every other Service's change waited meanwhile.
pub type ServiceRead = Object<ServiceSpec, LbStatusOnly>;

/// The Service [`model`] reads, from what the watch read.
pub fn service_of(o: ServiceRead) -> Service {
    Service {
        metadata: o.metadata,
        spec: Some(o.spec),
        status: o.status.map(|s| ServiceStatus {
            load_balancer: s.load_balancer,
            ..ServiceStatus::default()
        }),
    }
}

fn service_event(e: Event<ServiceRead>) -> Event<Service> {
    match e {
        Event::Init => Event::Init,
        Event::InitApply(o) => Event::InitApply(service_of(o)),
        Event::InitDone => Event::InitDone,
        Event::Apply(o) => Event::Apply(service_of(o)),
        Event::Delete(o) => Event::Delete(service_of(o)),
    }
}

/// One event of a watch (boxed: a Service is twice a slice's size on the stack).
enum Ev {
    Svc(Box<Result<Event<Service>, watcher::Error>>),
    Slice(Box<Result<Event<EndpointSlice>, watcher::Error>>),
    Node(Box<Result<Event<Node>, watcher::Error>>),
    Pod(Box<Result<Event<Pod>, watcher::Error>>),
}

/// A node's addresses a NodePort may be reached at: its `InternalIP`s and `ExternalIP`s.
fn node_addresses(n: &Node) -> Vec<IpAddr> {
    n.status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .into_iter()
        .flatten()
        .filter(|a| a.type_ == "InternalIP" || a.type_ == "ExternalIP")
        .filter_map(|a| a.address.parse().ok())
        .collect()
}

/// A node's addresses and, of them, its primary ones ([`model::primary_addresses`]).
type Addresses = (Vec<IpAddr>, Vec<IpAddr>);

fn addresses_of(n: &Node) -> Addresses {
    (node_addresses(n), model::primary_addresses(n))
}

/// The Node watch's view: every node's addresses.
#[derive(Default)]
struct Nodes {
    live: HashMap<String, Addresses>,
    pending: Option<HashMap<String, Addresses>>,
}

impl Nodes {
    /// Apply one event; the nodes' addresses (`me`: this node's name) once a list completed.
    fn apply(&mut self, e: Event<Node>, me: &str) -> Option<NodeAddrs> {
        let name = |n: &Node| n.metadata.name.clone().unwrap_or_default();
        match e {
            Event::Init => self.pending = Some(HashMap::new()),
            Event::InitApply(n) => {
                if let Some(p) = self.pending.as_mut() {
                    p.insert(name(&n), addresses_of(&n));
                }
                return None;
            }
            Event::InitDone => {
                if let Some(p) = self.pending.take() {
                    self.live = p;
                }
            }
            Event::Apply(n) => {
                self.live.insert(name(&n), addresses_of(&n));
            }
            Event::Delete(n) => {
                self.live.remove(&name(&n));
            }
        }
        if self.pending.is_some() {
            return None;
        }
        let all: BTreeSet<IpAddr> = self.live.values().flat_map(|a| &a.0).copied().collect();
        let mine: BTreeSet<IpAddr> = self
            .live
            .get(me)
            .into_iter()
            .flat_map(|a| &a.0)
            .copied()
            .collect();
        let primary: BTreeSet<IpAddr> = self.live.values().flat_map(|a| &a.1).copied().collect();
        Some(NodeAddrs {
            all: all.into_iter().collect(),
            mine: mine.into_iter().collect(),
            primary: primary.into_iter().collect(),
        })
    }
}

/// This node's zone label, read once (a node's zone does not move under a running agent).
async fn me(api: &ApiClients) -> Me {
    let zone = Api::<Node>::all(api.kube.clone())
        .get_opt(&api.node)
        .await
        .ok()
        .flatten()
        .and_then(|n| n.metadata.labels)
        .and_then(|l| l.get("topology.kubernetes.io/zone").cloned());
    Me {
        node: api.node.clone(),
        zone,
    }
}

/// Runs the two watches forever, keeping the Service frontends equal to them; NodePorts on
/// the node addresses `node_ports` admits.
pub async fn run(api: ApiClients, lb: Lb, metrics: metrics::ServiceMetrics, node_ports: NodePortAddresses) {
    let me = me(&api).await;
    let cfg = watcher::Config::default().labels(SELECTOR);
    let services = ApiResource::erase::<Service>(&());
    let svcs = watcher::watcher(
        Api::<ServiceRead>::all_with(api.kube.clone(), &services),
        cfg.clone(),
    )
    .default_backoff()
    .map(|e| Ev::Svc(Box::new(e.map(service_event))));
    let slices = watcher::watcher(Api::<EndpointSlice>::all(api.kube.clone()), cfg)
        .default_backoff()
        .map(|e| Ev::Slice(Box::new(e)));
    let nodes = watcher::watcher(Api::<Node>::all(api.kube.clone()), watcher::Config::default())
        .default_backoff()
        .map(|e| Ev::Node(Box::new(e)));
    // This node's pods, for their hostPorts.
    let on_node = watcher::Config::default().fields(&format!("spec.nodeName={}", api.node));
    let pods = watcher::watcher(Api::<Pod>::all(api.kube.clone()), on_node)
        .default_backoff()
        .map(|e| Ev::Pod(Box::new(e)));
    let streams: Vec<BoxStream<'static, Ev>> =
        vec![svcs.boxed(), slices.boxed(), nodes.boxed(), pods.boxed()];
    let mut node_view = Nodes::default();
    let mut events = futures::stream::select_all(streams);
    tracing::info!(adopted_frontends = lb.held(Owner::KubeService), zone = ?me.zone,
        ?node_ports, "watching Services and EndpointSlices");
    let mut st = Proxy::new(me).with_node_ports(node_ports);
    let mut health = health::HealthServers::default();
    while let Some(ev) = events.next().await {
        let t0 = Instant::now();
        let change = match ev {
            Ev::Svc(e) => match *e {
                Ok(e) => st.service_event(e),
                Err(e) => {
                    tracing::warn!("Service watch: {e}");
                    continue;
                }
            },
            Ev::Slice(e) => match *e {
                Ok(e) => st.slice_event(e),
                Err(e) => {
                    tracing::warn!("EndpointSlice watch: {e}");
                    continue;
                }
            },
            Ev::Pod(e) => match *e {
                Ok(e) => st.pod_event(e),
                Err(e) => {
                    tracing::warn!("Pod watch: {e}");
                    continue;
                }
            },
            Ev::Node(e) => match *e {
                Ok(e) => match node_view.apply(e, &api.node) {
                    Some(addrs) => st.set_nodes(addrs),
                    None => continue,
                },
                Err(e) => {
                    tracing::warn!("Node watch: {e}");
                    continue;
                }
            },
        };
        st.commit(change, &lb, &metrics, t0);
        health.sync(st.health());
    }
}

/// The Service proxy (off unless `--kube-proxy-replacement`).
#[derive(Debug, Default)]
pub struct KubeProxy {
    args: Args,
    metrics: Option<metrics::ServiceMetrics>,
}

impl KubeProxy {
    /// The feature with its flags.
    pub fn new(args: Args) -> Self {
        Self { args, metrics: None }
    }
}

impl Feature for KubeProxy {
    fn name(&self) -> &'static str {
        "kubeproxy"
    }

    fn metrics(&mut self, m: &mut MetricsBuilder) {
        if self.args.kube_proxy_replacement {
            self.metrics = Some(metrics::ServiceMetrics::register(m.registry()));
            m.collector(metrics::SockCollector(m.scope().pin_dir.clone()));
        }
    }

    /// The socket-level path (`bpf/lib/sock_lb.h`) on the cgroup2 root, as pinned links a
    /// restart updates in place; off, the links of an earlier run are removed.
    fn datapath<'a>(&'a mut self, ctx: DatapathCtx<'a>) -> BoxFuture<'a, Result<(), FeatureError>> {
        Box::pin(async move {
            if !self.args.kube_proxy_replacement {
                ctx.datapath.detach_sock()?;
                return Ok(());
            }
            let cgroup = match &self.args.cgroup_root {
                Some(p) => p.clone(),
                None => cgroup2_root()?,
            };
            let outcome = ctx.datapath.attach_sock(&cgroup)?;
            tracing::info!(cgroup = %cgroup.display(), ?outcome, "socket load balancer attached");
            Ok(())
        })
    }

    fn start(self: Box<Self>, core: Core) -> BoxFuture<'static, Result<(), FeatureError>> {
        if !self.args.kube_proxy_replacement {
            return Box::pin(async { Ok(()) });
        }
        let metrics = self.metrics.unwrap_or_default();
        spawned(run(core.api, core.lb, metrics, self.args.nodeport_addresses))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // `--nodeport-addresses` as the agent's command line reads it: a malformed CIDR is
    // clap's error naming it (the agent exits with it at start), never a panic.
    #[test]
    fn nodeport_addresses_parse_on_the_command_line_and_a_malformed_cidr_is_refused() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        use clap::Parser as _;
        let parse = |a: &[&str]| Cli::try_parse_from(std::iter::once("agent").chain(a.iter().copied()));
        assert_eq!(
            parse(&[]).unwrap().args.nodeport_addresses,
            NodePortAddresses::All
        );
        assert_eq!(
            parse(&["--nodeport-addresses=primary"])
                .unwrap()
                .args
                .nodeport_addresses,
            NodePortAddresses::Primary
        );
        assert_eq!(
            parse(&["--nodeport-addresses", "192.168.0.0/16,fd00::/64"])
                .unwrap()
                .args
                .nodeport_addresses,
            NodePortAddresses::Cidrs(vec![
                "192.168.0.0/16".parse().unwrap(),
                "fd00::/64".parse().unwrap()
            ])
        );
        let Err(e) = parse(&["--nodeport-addresses=192.168.0.0/33"]) else {
            panic!("a prefix of 33 bits was accepted");
        };
        assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation);
        let msg = e.to_string();
        assert!(
            msg.contains("--nodeport-addresses") && msg.contains("192.168.0.0/33"),
            "{msg}"
        );
    }

    // A condition without a transition time, as kube-apiserver returns one a client wrote
    // without it: the typed Service cannot be read, the proxy's can, with what it needs.
    #[test]
    fn a_service_with_a_null_condition_time_is_read() {
        let json = serde_json::json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"namespace": "ns", "name": "s"},
            "spec": {"clusterIP": "10.96.0.10", "ports": [{"port": 80}]},
            "status": {
                "conditions": [{"type": "X", "status": "True", "reason": "R", "message": "",
                                "lastTransitionTime": null}],
                "loadBalancer": {"ingress": [{"ip": "203.0.113.1"}]}
            }
        });
        assert!(serde_json::from_value::<Service>(json.clone()).is_err());
        let s = service_of(serde_json::from_value::<ServiceRead>(json).unwrap());
        assert_eq!(s.spec.unwrap().cluster_ip.as_deref(), Some("10.96.0.10"));
        let ingress = s.status.unwrap().load_balancer.unwrap().ingress.unwrap();
        assert_eq!(ingress[0].ip.as_deref(), Some("203.0.113.1"));
    }
}
