//! The cozyplane node agent: a core ([`crate::core`]) that every node needs, and datapath
//! features ([`crate::features`]) that plug into it through one interface
//! ([`crate::core::feature::Feature`]). The agent turns the API's watch streams into eBPF
//! maps and serves the CNI plugin; its layout and how to add a feature are in
//! `docs/architecture.md`.
//!
//! This file is the composition root: the command line (the core's flags and each feature's,
//! flattened at one place), the features in start order, and nothing else. Start at [`run`].

pub mod core;
pub mod features;

use crate::core::config::CoreConfig;
use crate::core::error::StartError;
use crate::core::feature::Feature;

/// `cozyplane-agent` flags: the core's, then each feature's.
#[derive(Clone, Debug, clap::Parser)]
#[command(name = "cozyplane-agent", version, about = "cozyplane node agent")]
pub struct AgentConfig {
    /// The core's.
    #[command(flatten)]
    pub core: CoreConfig,
    /// The uplink's (masquerade).
    #[command(flatten)]
    pub uplink: features::uplink::Args,
    /// The policy layers'.
    #[command(flatten)]
    pub policy: features::policy::Args,
    /// The split-horizon resolver's for VPC pods.
    #[command(flatten)]
    pub dns: features::dns::DnsFlags,
    /// The Service proxy's.
    #[command(flatten)]
    pub kube_proxy: features::kubeproxy::Args,
    /// Guest autoconfiguration's (DHCPv4, DHCPv6, router advertisements).
    #[command(flatten)]
    pub autoconf: features::autoconf::AutoconfFlags,
}

/// The features, in start order (each hook runs over the list in this order):
///
/// 1. **uplink** first: its datapath hook attaches the uplink and writes `sdn_snat_conf` and
///    `sdn_snat_addrs` while the node comes up, and two features read those when they start
///    (dns: the resolver's default addresses; policy: the node's own addresses for the
///    HostFirewall).
/// 2. **dns** next: it binds the resolver's sockets, and a failure there stops the agent
///    before any other feature's watch starts or the node is announced.
/// 3. **peering**, **sever**, **migrate**, **doors**, **egress**, **services**, **kubeproxy**: independent
///    watches, each writing its own maps (services and kubeproxy feed the core's one load
///    balancer writer, each its own frontends); the order is the one they always started in.
///    **trust** with them: it only reads `sdn_forged` on each scrape (overlay trust's counters).
///    **autoconf** with them: it watches nothing, it answers the pods' DHCP and router
///    solicitations from the attachments' records.
/// 4. **policy** last: it writes nothing until every one of its eight watches has listed,
///    and its first compile is the largest start-up cost, so it queues behind the rest.
pub fn assemble(cfg: &AgentConfig) -> Vec<Box<dyn Feature>> {
    vec![
        Box::new(features::uplink::UplinkFeature(cfg.uplink.clone())),
        Box::new(features::dns::Dns::new(cfg.dns.clone())),
        Box::new(features::peering::Peering),
        Box::new(features::sever::Sever),
        Box::new(features::migrate::Migrate),
        Box::new(features::doors::Doors),
        Box::new(features::egress::Egress),
        Box::new(features::services::Services),
        Box::new(features::kubeproxy::KubeProxy::new(cfg.kube_proxy.clone())),
        Box::new(features::trust::Trust),
        Box::new(features::autoconf::Autoconf::new(cfg.autoconf.clone())),
        Box::new(features::policy::Policy::new(cfg.policy.clone())),
    ]
}

/// Bring the agent up and serve until the process is killed.
pub async fn run(cfg: AgentConfig) -> Result<(), StartError> {
    let features = assemble(&cfg);
    crate::core::run::run(cfg.core, features).await
}
