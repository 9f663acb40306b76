//! `sdn_net_stats`: per-CPU east-west counters per net. Created and written by the
//! datapath (`lib/stats.h`); read by the agent's metrics. C side: `include/sdn/maps.h`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_PERCPU_HASH` with `BPF_F_NO_PREALLOC`; pinned by name.

use std::borrow::Borrow;

use aya::maps::{MapData, MapError};

use super::{map_wrapper, optional};
use crate::abi::NetStats;

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_net_stats";

map_wrapper!(
    /// Traffic per net.
    #[doc(alias = "sdn_net_stats")]
    NetStatsMap, PerCpuHashMap<u32, NetStats>
);

impl<T: Borrow<MapData>> NetStatsMap<T> {
    /// Counters of `net` summed over CPUs; `None` if the net has seen no traffic.
    pub fn get(&self, net: u32) -> Result<Option<NetStats>, MapError> {
        Ok(optional(self.0.get(&net, 0))?.map(|per_cpu| {
            let mut sum = NetStats::default();
            for v in per_cpu.iter() {
                sum += *v;
            }
            sum
        }))
    }
}
