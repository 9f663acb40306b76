//! Peering's families, read from `sdn_xnet_allow` on each scrape:
//! `cozyplane_xnet_packets_total{from,to}`, `cozyplane_xnet_bytes_total{from,to}`: VPC peering
//! crossings this node let through, by source and destination net (a pair's counters start
//! over when its peering is re-created). Its maps' entries are in `cozyplane_bpf_map_entries`
//! ([`map_sizes`]).

use std::path::{Path, PathBuf};

use cozyplane_bpf::maps::xnet_allow::{self, XnetAllowMap};
use cozyplane_bpf::maps::xnet_routes::{self, XnetRoutesMap};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;

use crate::core::metrics::counter_family;

/// Reads `sdn_xnet_allow` under its pin directory on each scrape.
#[derive(Debug)]
pub struct CrossingCollector(pub PathBuf);

impl Collector for CrossingCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        // A map that cannot be opened (agent starting, pins wiped) is left out of the scrape.
        let Ok(allow) = XnetAllowMap::from_pin(&self.0) else {
            return Ok(());
        };
        let Ok(all) = allow.entries() else { return Ok(()) };
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
        )
    }
}

/// Entries of peering's maps.
pub fn map_sizes(dir: &Path) -> Vec<(&'static str, usize)> {
    let mut out = Vec::new();
    if let Ok(m) = XnetRoutesMap::from_pin(dir) {
        out.push((xnet_routes::NAME, m.inner().keys().count()));
    }
    if let Ok(m) = XnetAllowMap::from_pin(dir) {
        out.push((xnet_allow::NAME, m.inner().keys().count()));
    }
    out
}
