//! `sdn_pol_ct`: the connection table the three policy layers share, canonical flow → state. Written by the datapath; the agent only reads (trace, metrics) and deletes (flush). C side: `include/sdn/policy_maps.h`; design in `docs/policy.md`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_LRU_HASH`; pinned by name.

use std::borrow::{Borrow, BorrowMut};

use aya::maps::{MapData, MapError};

use super::{map_wrapper, optional};
use crate::abi::{Pct, PctKey};

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_pol_ct";

map_wrapper!(
    /// the connection table the three policy layers share, canonical flow → state. Written by the datapath; the agent only reads (trace, metrics) and deletes (flush).
    #[doc(alias = "sdn_pol_ct")]
    PolCtMap, HashMap<PctKey, Pct>
);

impl<T: Borrow<MapData>> PolCtMap<T> {
    /// The entry for `k`, if any.
    pub fn get(&self, k: &PctKey) -> Result<Option<Pct>, MapError> {
        optional(self.0.get(k, 0))
    }

    /// Every entry (a snapshot).
    pub fn entries(&self) -> Result<Vec<(PctKey, Pct)>, MapError> {
        self.0.iter().collect()
    }
}

impl<T: BorrowMut<MapData>> PolCtMap<T> {
    /// Insert or replace the entry for `k`.
    pub fn upsert(&mut self, k: PctKey, v: Pct) -> Result<(), MapError> {
        self.0.insert(k, v, 0)
    }

    /// Remove the entry for `k`; absent is not an error.
    pub fn remove(&mut self, k: &PctKey) -> Result<(), MapError> {
        optional(self.0.remove(k)).map(drop)
    }
}
