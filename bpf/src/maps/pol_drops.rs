//! `sdn_pol_drops`: per-CPU drop counters of the policy layers per `{net, layer, reason}`.
//! Created and written by the datapath (`lib/pol_drops.h`, called from `lib/policy.h`);
//! read by the agent's metrics. C side: `include/sdn/pol_drops_maps.h`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_PERCPU_HASH` with `BPF_F_NO_PREALLOC`; pinned by name.

use std::borrow::Borrow;

use aya::maps::{MapData, MapError};

use super::map_wrapper;
use crate::abi::{DropStats, PolDropKey};
use crate::drop::DropReason;

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_pol_drops";

map_wrapper!(
    /// Policy drops per net, layer and reason.
    #[doc(alias = "sdn_pol_drops")]
    PolDropsMap, PerCpuHashMap<PolDropKey, DropStats>
);

/// One row of [`PolDropsMap::all`]: the net (VNI; 0 for NetworkPolicy), the layer
/// (`abi::policy::LAYER_*`), the reason and the counters summed over CPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PolDrops {
    /// VNI; 0 for NetworkPolicy and HostFirewall.
    pub net: u32,
    /// `LAYER_SG`, `LAYER_NP` or `LAYER_HF`.
    pub layer: u8,
    /// Why.
    pub reason: DropReason,
    /// Packets and bytes.
    pub stats: DropStats,
}

impl<T: Borrow<MapData>> PolDropsMap<T> {
    /// Every row, summed over CPUs; keys whose reason this build does not know are
    /// left out.
    pub fn all(&self) -> Result<Vec<PolDrops>, MapError> {
        let mut out = Vec::new();
        for kv in self.0.iter() {
            let (k, per_cpu) = kv?;
            let Some(reason) = DropReason::from_index(u32::from(k.reason)) else {
                continue;
            };
            let mut stats = DropStats::default();
            for v in per_cpu.iter() {
                stats += *v;
            }
            out.push(PolDrops {
                net: k.net,
                layer: k.layer,
                reason,
                stats,
            });
        }
        out.sort_by_key(|r| (r.net, r.layer, r.reason.index()));
        Ok(out)
    }
}
