//! `sdn_drops`: per-CPU drop counters indexed by `-DROP_*`. Written by the datapath
//! (`lib/drop.h`); read by the agent's metrics. C side: `include/sdn/drop_reasons.h`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_PERCPU_ARRAY`; pinned by name.

use std::borrow::Borrow;

use aya::maps::{MapData, MapError};

use super::map_wrapper;
use crate::abi::DropStats;
use crate::drop::DropReason;

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_drops";

map_wrapper!(
    /// Drops per reason.
    #[doc(alias = "sdn_drops")]
    DropsMap, PerCpuArray<DropStats>
);

impl<T: Borrow<MapData>> DropsMap<T> {
    /// Drops for `reason`, summed over CPUs.
    pub fn get(&self, reason: DropReason) -> Result<DropStats, MapError> {
        let mut sum = DropStats::default();
        for v in self.0.get(&reason.index(), 0)?.iter() {
            sum += *v;
        }
        Ok(sum)
    }

    /// Every known reason with its counters, summed over CPUs.
    pub fn all(&self) -> Result<Vec<(DropReason, DropStats)>, MapError> {
        DropReason::ALL
            .iter()
            .copied()
            .map(|r| Ok((r, self.get(r)?)))
            .collect()
    }
}
