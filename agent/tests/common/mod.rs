//! What the agent's integration tests share.

use std::path::PathBuf;

use cozyplane_agent::AgentConfig;
use cozyplane_agent::core::metrics::{Metrics, MetricsBuilder, VpcNames};

/// The agent's registry as it starts with its default flags: the core's families and every
/// feature's of the composition root, labelled with `node` and the names in `vpcs`.
pub(crate) fn agent_metrics(pin_dir: PathBuf, node: &str, vpcs: VpcNames) -> Metrics {
    let cfg = <AgentConfig as clap::Parser>::parse_from(["cozyplane-agent"]);
    let mut builder = MetricsBuilder::new(pin_dir, node.to_string(), vpcs);
    for f in &mut cozyplane_agent::assemble(&cfg) {
        f.metrics(&mut builder);
    }
    builder.build()
}
