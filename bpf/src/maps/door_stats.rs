//! `sdn_door_stats`: per-CPU counters of every crossing of a VPC's boundary, per
//! `{net, door, direction}`, and the refusals there. Created and written by the datapath
//! (`lib/meter.h`); read by the agent's metrics. C side: `include/sdn/meter_maps.h`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_PERCPU_HASH` with `BPF_F_NO_PREALLOC`; pinned by name.

use std::borrow::Borrow;

use aya::maps::{MapData, MapError};

use super::map_wrapper;
use crate::abi::{DoorKey, DoorStats};

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_door_stats";

map_wrapper!(
    /// Boundary crossings per VPC, door and direction.
    #[doc(alias = "sdn_door_stats")]
    DoorStatsMap, PerCpuHashMap<DoorKey, DoorStats>
);

impl<T: Borrow<MapData>> DoorStatsMap<T> {
    /// Every row, summed over CPUs.
    pub fn entries(&self) -> Result<Vec<(DoorKey, DoorStats)>, MapError> {
        self.0
            .iter()
            .map(|r| {
                r.map(|(k, per_cpu)| {
                    let mut sum = DoorStats::default();
                    for v in per_cpu.iter() {
                        sum += *v;
                    }
                    (k, sum)
                })
            })
            .collect()
    }
}
