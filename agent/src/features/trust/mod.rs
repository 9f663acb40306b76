//! Overlay trust per node (issue 29): a node may send into a net only the inner sources it
//! holds, with the groups they hold. The check is the datapath's (`bpf/lib/overlay_trust.h`,
//! called from `sdn_from_overlay`), over maps the core and the other features already write
//! (`sdn_nodes`, `sdn_node_blocks`, `sdn_remotes`, `sdn_endpoints`, `sdn_internal`,
//! `sdn_hf_self`, `sdn_sg_members`); this feature writes nothing. It exports what the check
//! refused, per sending node and reason, from `sdn_forged` ([`metrics`]), the sender named by
//! its Node through the core's [`crate::core::metrics::NodeNames`].
//!
//! What is checked and what a compromised node can still do: `docs/datapath.md`, "Overlay
//! trust".

pub mod metrics;

use futures::future::BoxFuture;

use crate::core::feature::{Core, Feature, FeatureError};
use crate::core::metrics::MetricsBuilder;

/// Overlay trust: the forged-packet counters ([`metrics`]).
#[derive(Debug, Default)]
pub struct Trust;

impl Feature for Trust {
    fn name(&self) -> &'static str {
        "trust"
    }

    fn metrics(&mut self, m: &mut MetricsBuilder) {
        m.collector(metrics::ForgedCollector(m.scope().clone()));
        m.map_sizes(metrics::map_sizes);
    }

    fn start(self: Box<Self>, _core: Core) -> BoxFuture<'static, Result<(), FeatureError>> {
        // Nothing to watch: the datapath counts, the collector reads on each scrape.
        Box::pin(async { Ok(()) })
    }
}
