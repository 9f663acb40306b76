//! `sdn_forged`: per-CPU counters of overlay packets the trust check refused, per sending
//! node and reason (issue 29). Created and written by the datapath
//! (`lib/overlay_trust.h`, called from `sdn_from_overlay`); read by the agent's metrics. C
//! side: `include/sdn/trust_maps.h`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_PERCPU_HASH` with `BPF_F_NO_PREALLOC`; pinned by name.

use std::borrow::Borrow;
use std::net::IpAddr;

use aya::maps::{MapData, MapError};

use super::map_wrapper;
use crate::abi::{DropStats, ForgedKey};
use crate::drop::DropReason;

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_forged";

map_wrapper!(
    /// Forged overlay packets per sending node and reason.
    #[doc(alias = "sdn_forged")]
    ForgedMap, PerCpuHashMap<ForgedKey, DropStats>
);

/// One row of [`ForgedMap::all`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Forged {
    /// The sending node's tunnel address.
    pub node: IpAddr,
    /// `OverlayForgedSrc` or `OverlayForgedTag`.
    pub reason: DropReason,
    /// Packets and bytes, summed over CPUs.
    pub stats: DropStats,
}

impl<T: Borrow<MapData>> ForgedMap<T> {
    /// Every row, summed over CPUs; keys whose reason this build does not know are left
    /// out.
    pub fn all(&self) -> Result<Vec<Forged>, MapError> {
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
            out.push(Forged {
                node: IpAddr::from(k.node),
                reason,
                stats,
            });
        }
        out.sort_by_key(|r| (r.node, r.reason.index()));
        Ok(out)
    }
}
