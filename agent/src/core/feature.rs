//! The one interface a feature plugs into the core through ([`Feature`]), and what the core
//! hands it at each stage ([`DatapathCtx`], [`Core`]).
//!
//! A feature's life has three hooks, called by the start-up sequence (`core/run.rs`) in the order of the
//! composition root's list (`features/mod.rs`):
//!
//! 1. [`Feature::metrics`], before anything else: it registers its families and scrape-time
//!    collectors in the agent's one registry (so one `/metrics` serves them all);
//! 2. [`Feature::datapath`], while the core brings the node up: after the programs are loaded
//!    and the overlay attached, before the pods of a previous run are reconciled and before
//!    the CNI socket opens (what a feature attaches here is in place for the first pod);
//! 3. [`Feature::start`], once the core is up with an API: the feature starts its watches
//!    and reconcile loops (spawned tasks) and returns; an error stops the agent.
//!
//! A feature sees the core only through these types; it never names another feature.

use std::path::PathBuf;
use std::sync::Arc;

use futures::future::BoxFuture;

use crate::core::api::ApiClients;
use crate::core::cni::AgentState;
use crate::core::config::CoreConfig;
use crate::core::datapath::loader::Datapath;
use crate::core::datapath::netdev::NetDev;
use crate::core::ipam::Block;
use crate::core::lb::Lb;
use crate::core::metrics::{Metrics, MetricsBuilder, VpcNames};

/// Why a feature could not do its part; the core reports it with the feature's name.
pub type FeatureError = Box<dyn std::error::Error + Send + Sync>;

/// What a feature may touch while the core brings the datapath up ([`Feature::datapath`]).
pub struct DatapathCtx<'a> {
    /// The core's flags.
    pub config: &'a CoreConfig,
    /// The loaded programs and their pinned maps.
    pub datapath: &'a mut Datapath,
    /// The node's netlink handle.
    pub netdev: &'a NetDev,
    /// This node's fabric block.
    pub block: &'a Block,
}

/// The core as a started feature sees it ([`Feature::start`]): cheap to clone, so a feature
/// moves what it needs into its tasks.
#[derive(Clone)]
pub struct Core {
    /// The core's flags.
    pub config: Arc<CoreConfig>,
    /// The API clients, this node's identity and the watched view the CNI path reads.
    pub api: ApiClients,
    /// The pods' lifecycle: the attachments this node holds, their records and map entries.
    pub pods: Arc<AgentState>,
    /// The bpffs directory every map is pinned under.
    pub pin_dir: PathBuf,
    /// The agent's metrics (`sync_error`, the registry's handles).
    pub metrics: Metrics,
    /// VNI → VPC names, for the per-VPC metric labels.
    pub vpc_names: VpcNames,
    /// The load balancer's one writer, which every feature with frontends feeds.
    pub lb: Lb,
}

/// What [`Feature::start`] returns for a feature whose whole start is one loop: `task` is
/// spawned now, on the agent's runtime, and the start has succeeded.
pub fn spawned<F>(task: F) -> BoxFuture<'static, Result<(), FeatureError>>
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    tokio::spawn(task);
    Box::pin(async { Ok(()) })
}

/// A datapath feature of the agent (`docs/architecture.md`, "How to add a feature").
pub trait Feature: Send {
    /// Its name, in logs and errors (the folder under `features/`).
    fn name(&self) -> &'static str;

    /// Register its metrics (families it updates, collectors over its pinned maps).
    fn metrics(&mut self, _metrics: &mut MetricsBuilder) {}

    /// Its part of bringing the node up (see the module docs).
    fn datapath<'a>(&'a mut self, _ctx: DatapathCtx<'a>) -> BoxFuture<'a, Result<(), FeatureError>> {
        Box::pin(async { Ok(()) })
    }

    /// Start its watches and loops; returns once they run (or what it needed failed).
    fn start(self: Box<Self>, core: Core) -> BoxFuture<'static, Result<(), FeatureError>>;
}
