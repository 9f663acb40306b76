//! The policy layers' writer (issue 14, `docs/policy.md`): watches NetworkPolicies, Pods,
//! Namespaces and Nodes (kube API), AdminNetworkPolicies and the
//! BaselineAdminNetworkPolicy (`policy.networking.k8s.io` CRDs, issue 29) and the
//! kube-apiserver's EndpointSlices (their `policy.cozystack.io/kube-apiserver` extension), VPCs,
//! SecurityGroups, Ports and HostFirewalls (our API), feeds the `cozyplane-policy` compilers
//! and writes the entry diffs they return to the pinned policy maps (`sdn_pol_rules`,
//! `sdn_pol_cidrs`, `sdn_sg_members`, `sdn_np_idents`, `sdn_hf_self`, `sdn_pol_state`).
//!
//! * **Fail static.** Nothing is written until every watch has listed once (an admin kind
//!   whose CRD is not installed counts as listed and empty, [`watch`]). Then the
//!   compilers are built from the lists and the maps reconciled with their full output
//!   ([`apply::reconcile`]): entries a previous agent left that still hold are kept as they
//!   are, the rest is written in the safe order and stale ones removed. While the agent is
//!   down or listing, the datapath keeps judging by what is pinned.
//! * **Incremental.** After that, each watch event is one compiler call whose [`Diff`]
//!   holds only the entries it touches, written in the order of [`apply`] (no transient
//!   state allows what neither the old nor the new policy allows; the admin tiers behind a
//!   [`barrier`]), then the generation is bumped if anything narrowed.
//! * **Loud refusals.** A construct the compiler refuses compiles closed; it is logged and
//!   raised as an Event on its object ([`events`]) and counted ([`metrics`]).
//! * A failed write (a full map) leaves the maps between two states; the next tick
//!   reconciles them with the compilers' full output again.
//!
//! Where the datapath has no policy maps (an object built without `policy_maps.h`), the
//! task says so once and stops: there is nothing to enforce with.
//!
//! [`Diff`]: cozyplane_policy::Diff

pub mod apply;
pub mod barrier;
pub mod events;
pub mod feed;
pub mod host_devices;
pub mod lite;
pub mod maps;
pub mod metrics;
pub mod watch;

use std::collections::BTreeSet;
use std::path::PathBuf;

use futures::StreamExt as _;
use futures::future::BoxFuture;

use self::feed::{Change, Feed, Listings, WarningKey};
use self::maps::Pinned;
use self::watch::{Ev, changes, streams};
use crate::core::api::ApiClients;
use crate::core::feature::{Core, DatapathCtx, Feature, FeatureError};
use crate::core::metrics::MetricsBuilder;

/// The policy layers' flags.
#[derive(Clone, Debug, clap::Args)]
// Every feature's struct is `Args`: clap's default group id (the struct's name) would clash.
#[group(skip)]
pub struct Args {
    /// The policy layers (SecurityGroups, NetworkPolicy, HostFirewall; `docs/policy.md`):
    /// `on` watches the policy objects and writes the compiled entries to the policy maps
    /// ([`crate::policy`]); `off` leaves those maps as they are.
    #[arg(long, env = "COZYPLANE_POLICY", value_enum, default_value = "on")]
    pub policy: Mode,
    /// The node's devices besides the uplink where traffic can come in (a second NIC, a VLAN
    /// device), comma-separated: each is hooked like the uplink, so HostFirewall judges it
    /// ([`host_devices`]). A device that does not exist stops the agent.
    #[arg(long, env = "COZYPLANE_HOST_DEVICES", value_delimiter = ',')]
    pub host_devices: Vec<String>,
}

/// `--policy`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// Feed the compilers and write the policy maps.
    #[default]
    On,
    /// Leave the policy maps alone (whatever they hold stays; an empty map enforces nothing).
    Off,
}

/// Why the policy maps could not be written.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// A policy map is not pinned: the datapath objects do not create it.
    #[error("{map} is not pinned")]
    NotPinned {
        /// The map.
        map: &'static str,
        /// Opening the pin.
        #[source]
        source: aya::maps::MapError,
    },
    /// Writing, deleting or reading an entry failed (a full map, a kernel error).
    #[error("{map}")]
    Map {
        /// The map.
        map: &'static str,
        /// The syscall's error.
        #[source]
        source: aya::maps::MapError,
    },
}

/// The writer's state between events.
struct Writer {
    api: ApiClients,
    maps: Pinned,
    /// What the maps hold (the old values a write needs), kept in step with every write.
    mirror: cozyplane_policy::Tables,
    metrics: crate::core::metrics::Metrics,
    policy: metrics::PolicyMetrics,
    feed: Option<Feed>,
    reported: BTreeSet<WarningKey>,
    /// A write failed: reconcile on the next tick.
    dirty: bool,
}

impl Writer {
    /// Report constructs refused since the last call (each once, while it stays refused).
    fn report(&mut self) {
        let Some(feed) = &self.feed else { return };
        let now = feed.warnings();
        for w in now.difference(&self.reported) {
            events::refused(&self.api.kube, &self.api.node, &w.0);
            self.policy.refused(&w.0);
        }
        self.reported = now;
    }

    fn reconcile(&mut self) {
        let Some(feed) = &self.feed else { return };
        let want = feed.tables();
        match apply::reconcile(&mut self.maps, &mut self.mirror, &want) {
            Ok(r) => {
                self.dirty = false;
                self.policy.synced();
                tracing::info!(
                    kept = r.kept,
                    written = r.applied.ops,
                    purged = r.purged,
                    bumped = r.applied.bumped,
                    rules = want.rules.len(),
                    members = want.sg_members.len(),
                    identities = want.np_idents.len(),
                    "policy maps reconciled with the full compile"
                );
            }
            Err(e) => {
                self.dirty = true;
                self.metrics.sync_error("policy");
                tracing::warn!("policy maps: reconcile failed, retrying: {e}");
            }
        }
    }

    fn change(&mut self, c: Change) {
        let Some(feed) = &mut self.feed else { return };
        let (layer, d, secs) = feed.timed_step(c);
        self.policy.compiled(layer, secs);
        if d.is_empty() {
            return;
        }
        match apply::apply(&mut self.maps, &mut self.mirror, &d) {
            Ok(a) => {
                self.policy.applied(&a, &d);
                tracing::debug!(layer, entries = a.ops, bumped = a.bumped, "policy change written");
            }
            Err(e) => {
                // The maps are between two states; the full reconcile puts them right.
                self.dirty = true;
                self.metrics.sync_error("policy");
                tracing::warn!(layer, "policy maps: {e}; reconciling at the next tick");
            }
        }
    }
}

/// Runs the watches forever, writing the policy maps under `pin_dir` (see the module docs);
/// failures count in `metrics`, the writer's own figures in `policy`.
pub async fn run(
    api: ApiClients,
    pin_dir: PathBuf,
    metrics: crate::core::metrics::Metrics,
    policy: metrics::PolicyMetrics,
    host_addrs: Vec<std::net::IpAddr>,
) {
    let maps = match Pinned::open(&pin_dir) {
        Ok(m) => m,
        Err(e) => {
            tracing::warn!("policy layers not enforced: the datapath has no policy maps ({e})");
            return;
        }
    };
    // This node's own addresses beyond its Node object's: the tunnel's, `--host-devices`'
    // and the uplink's (the masquerade addresses of net 0, which the uplink wrote while the
    // node came up), so the HostFirewall judges the uplink's IPv6 too.
    let mut own = vec![api.node_ip];
    own.extend(host_addrs);
    match cozyplane_bpf::maps::snat_addrs::SnatAddrsMap::from_pin(&pin_dir).and_then(|m| m.entries()) {
        Ok(addrs) => own.extend(addrs.into_iter().filter(|(_, net)| *net == 0).map(|(ip, _)| ip)),
        Err(e) => tracing::warn!("HostFirewall: the uplink's addresses are unknown ({e})"),
    }
    own.sort_unstable();
    own.dedup();
    let bare_node = cozyplane_policy::hf::NodeInfo {
        name: api.node.clone(),
        addresses: own.clone(),
        ..Default::default()
    };
    let mut events = streams(&api);
    let node = api.node.clone();
    let mut listings = Listings::default();
    let mut w = Writer {
        api,
        maps,
        mirror: cozyplane_policy::Tables::default(),
        metrics,
        policy,
        feed: None,
        reported: BTreeSet::new(),
        dirty: false,
    };
    tracing::info!(
        "watching NetworkPolicies, AdminNetworkPolicies, BaselineAdminNetworkPolicies, the kube-apiserver's EndpointSlices, Pods, Namespaces, Nodes, VPCs, SecurityGroups, Ports, HostFirewalls for the policy maps"
    );
    while let Some(ev) = events.next().await {
        let tick = matches!(ev, Ev::Tick);
        let changes = match changes(&mut listings, ev, &node, &own) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("policy watch: {e}");
                continue;
            }
        };
        if w.feed.is_none() {
            if !listings.synced() {
                continue;
            }
            let started = std::time::Instant::now();
            w.feed = Some(Feed::build(&listings, bare_node.clone()));
            w.policy.compiled("all", started.elapsed().as_secs_f64());
            w.reconcile();
            w.report();
            continue;
        }
        let any = !changes.is_empty();
        for c in changes {
            w.change(c);
        }
        if tick && w.dirty {
            w.reconcile();
        }
        if any {
            w.report();
        }
    }
}

/// The policy layers' writer, with `--policy=on`; its metrics are registered either way.
#[derive(Debug)]
pub struct Policy {
    args: Args,
    metrics: Option<metrics::PolicyMetrics>,
    /// The global addresses of `--host-devices`, found when they were hooked.
    host_addrs: Vec<std::net::IpAddr>,
}

impl Policy {
    /// The feature with its flags.
    pub fn new(args: Args) -> Self {
        Self {
            args,
            metrics: None,
            host_addrs: Vec::new(),
        }
    }

    /// The writer's metrics, once [`Feature::metrics`] registered them.
    pub fn writer_metrics(&self) -> Option<metrics::PolicyMetrics> {
        self.metrics.clone()
    }
}

impl Feature for Policy {
    fn name(&self) -> &'static str {
        "policy"
    }

    fn metrics(&mut self, m: &mut MetricsBuilder) {
        self.metrics = Some(metrics::PolicyMetrics::register(m.registry()));
        m.collector(metrics::DropCollector(m.scope().clone()));
        m.map_sizes(metrics::map_sizes);
    }

    fn datapath<'a>(&'a mut self, ctx: DatapathCtx<'a>) -> BoxFuture<'a, Result<(), FeatureError>> {
        Box::pin(async move {
            self.host_addrs = host_devices::attach(ctx.datapath, ctx.netdev, &self.args.host_devices).await?;
            Ok(())
        })
    }

    fn start(self: Box<Self>, core: Core) -> BoxFuture<'static, Result<(), FeatureError>> {
        Box::pin(async move {
            if self.args.policy == Mode::On {
                // The core registers every feature's metrics first; started without that, the
                // writer counts into a registry nobody scrapes.
                let pm = self.metrics.unwrap_or_else(|| {
                    metrics::PolicyMetrics::register(&mut prometheus_client::registry::Registry::default())
                });
                tokio::spawn(run(core.api, core.pin_dir, core.metrics, pm, self.host_addrs));
            }
            Ok(())
        })
    }
}
