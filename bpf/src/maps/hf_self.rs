//! `sdn_hf_self`: this node's own addresses, the HostFirewall's subject. C side: `include/sdn/policy_maps.h`; design in `docs/policy.md`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_HASH`; pinned by name.

use std::borrow::{Borrow, BorrowMut};

use aya::maps::{MapData, MapError};

use super::{map_wrapper, optional};
use crate::abi::{Addr, HfSelf};

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_hf_self";

map_wrapper!(
    /// this node's own addresses, the HostFirewall's subject.
    #[doc(alias = "sdn_hf_self")]
    HfSelfMap, HashMap<Addr, HfSelf>
);

impl<T: Borrow<MapData>> HfSelfMap<T> {
    /// The entry for `k`, if any.
    pub fn get(&self, k: &Addr) -> Result<Option<HfSelf>, MapError> {
        optional(self.0.get(k, 0))
    }

    /// Every entry (a snapshot).
    pub fn entries(&self) -> Result<Vec<(Addr, HfSelf)>, MapError> {
        self.0.iter().collect()
    }
}

impl<T: BorrowMut<MapData>> HfSelfMap<T> {
    /// Insert or replace the entry for `k`.
    pub fn upsert(&mut self, k: Addr, v: HfSelf) -> Result<(), MapError> {
        self.0.insert(k, v, 0)
    }

    /// Remove the entry for `k`; absent is not an error.
    pub fn remove(&mut self, k: &Addr) -> Result<(), MapError> {
        optional(self.0.remove(k)).map(drop)
    }
}
