//! The ServiceVIP load balancer's families: `cozyplane_lb_flows_total`,
//! `cozyplane_lb_selections_total`, `cozyplane_lb_misses_total`, `cozyplane_lb_snat_total`
//! (`sdn_lb_stats`), and its hash
//! maps' entries in `cozyplane_bpf_map_entries` ([`map_sizes`]).

use std::path::{Path, PathBuf};

use cozyplane_bpf::maps::lb_backends::LbBackendsMap;
use cozyplane_bpf::maps::lb_mag_big::LbMagBigMap;
use cozyplane_bpf::maps::lb_maglev::LbMaglevMap;
use cozyplane_bpf::maps::lb_stats::LbStatsMap;
use cozyplane_bpf::maps::lb_svc::LbSvcMap;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric as _};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;

/// Reads `sdn_lb_stats` under its pin directory on each scrape (summed over CPUs).
#[derive(Debug)]
pub struct LbCollector(pub PathBuf);

impl Collector for LbCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Ok(s) = LbStatsMap::from_pin(&self.0).and_then(|m| m.get()) else {
            return Ok(());
        };
        for (name, help, v) in [
            (
                "cozyplane_lb_flows",
                "Flows to a ServiceVIP this node pinned to a backend",
                s.flows,
            ),
            (
                "cozyplane_lb_selections",
                "Packets to a ServiceVIP this node DNATed to a backend",
                s.selections,
            ),
            (
                "cozyplane_lb_misses",
                "Packets to a ServiceVIP port that found no backend",
                s.misses,
            ),
            (
                "cozyplane_lb_snat",
                "Packets from outside the cluster this node NATed to a Service backend on another node \
                 (externalTrafficPolicy: Cluster)",
                s.snat,
            ),
        ] {
            // Unlabelled: the counter is encoded on the descriptor itself (no `{}`).
            let m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
            ConstCounter::new(v).encode(m)?;
        }
        Ok(())
    }
}

/// Entries of the load balancer's hash maps, for `cozyplane_bpf_map_entries`.
pub fn map_sizes(dir: &Path) -> Vec<(&'static str, usize)> {
    use cozyplane_bpf::maps::{lb_affinity, lb_backends, lb_flows, lb_mag_big, lb_maglev, lb_rev, lb_svc};
    let mut out = Vec::new();
    if let Ok(m) = LbSvcMap::from_pin(dir) {
        out.push((lb_svc::NAME, m.inner().keys().count()));
    }
    if let Ok(m) = LbMaglevMap::from_pin(dir) {
        out.push((lb_maglev::NAME, m.inner().keys().count()));
    }
    // Chunks, LB_BIG_CHUNKS per big table.
    if let Ok(m) = LbMagBigMap::from_pin(dir) {
        out.push((lb_mag_big::NAME, m.inner().keys().count()));
    }
    if let Ok(m) = LbBackendsMap::from_pin(dir) {
        out.push((lb_backends::NAME, m.inner().keys().count()));
    }
    if let Ok(m) = lb_flows::LbFlowsMap::from_pin(dir) {
        out.push((lb_flows::NAME, m.inner().keys().count()));
    }
    if let Ok(m) = lb_rev::LbRevMap::from_pin(dir) {
        out.push((lb_rev::NAME, m.inner().keys().count()));
    }
    if let Ok(m) = lb_affinity::LbAffinityMap::from_pin(dir) {
        out.push((lb_affinity::NAME, m.inner().keys().count()));
    }
    out
}
