//! `sdn_lb_stats`: the load balancer's per-CPU counters (`SDN_LB_STAT_*`). Written by the
//! datapath (`lib/lb.h`); read by the agent's metrics. C side: `include/sdn/lb_maps.h`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_PERCPU_ARRAY`; pinned by name.

use std::borrow::Borrow;

use aya::maps::{MapData, MapError};

use super::map_wrapper;

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_lb_stats";

/// `SDN_LB_STAT_FLOWS`: flows pinned.
pub const FLOWS: u32 = 0;
/// `SDN_LB_STAT_SELECTIONS`: packets DNATed to a backend.
pub const SELECTIONS: u32 = 1;
/// `SDN_LB_STAT_MISSES`: packets to a VIP port without a backend.
pub const MISSES: u32 = 2;
/// `SDN_LB_STAT_SNAT`: packets from outside NATed to a backend on another node.
pub const SNAT: u32 = 3;
/// `SDN_LB_STAT_MAX`: entries of the array.
pub const MAX: u32 = 4;

map_wrapper!(
    /// Load-balancer counters.
    #[doc(alias = "sdn_lb_stats")]
    LbStatsMap, PerCpuArray<u64>
);

/// The counters summed over CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LbStats {
    /// Flows pinned (first packets of new flows).
    pub flows: u64,
    /// Packets DNATed to a backend.
    pub selections: u64,
    /// Packets to a VIP port that found no backend.
    pub misses: u64,
    /// Packets from outside the cluster NATed to a backend on another node
    /// (`externalTrafficPolicy: Cluster`, `lib/lb_snat.h`).
    pub snat: u64,
}

impl<T: Borrow<MapData>> LbStatsMap<T> {
    fn sum(&self, idx: u32) -> Result<u64, MapError> {
        Ok(self.0.get(&idx, 0)?.iter().sum())
    }

    /// Every counter, summed over CPUs.
    pub fn get(&self) -> Result<LbStats, MapError> {
        Ok(LbStats {
            flows: self.sum(FLOWS)?,
            selections: self.sum(SELECTIONS)?,
            misses: self.sum(MISSES)?,
            snat: self.sum(SNAT)?,
        })
    }
}
