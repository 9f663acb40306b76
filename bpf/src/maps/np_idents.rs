//! `sdn_np_idents`: a default-network pod address → its NetworkPolicy label-set identity. C side: `include/sdn/policy_maps.h`; design in `docs/policy.md`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_HASH`; pinned by name.

use std::borrow::{Borrow, BorrowMut};

use aya::maps::{MapData, MapError};

use super::{map_wrapper, optional};
use crate::abi::{Addr, NpIdent};

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_np_idents";

map_wrapper!(
    /// a default-network pod address → its NetworkPolicy label-set identity.
    #[doc(alias = "sdn_np_idents")]
    NpIdentsMap, HashMap<Addr, NpIdent>
);

impl<T: Borrow<MapData>> NpIdentsMap<T> {
    /// The entry for `k`, if any.
    pub fn get(&self, k: &Addr) -> Result<Option<NpIdent>, MapError> {
        optional(self.0.get(k, 0))
    }

    /// Every entry (a snapshot).
    pub fn entries(&self) -> Result<Vec<(Addr, NpIdent)>, MapError> {
        self.0.iter().collect()
    }
}

impl<T: BorrowMut<MapData>> NpIdentsMap<T> {
    /// Insert or replace the entry for `k`.
    pub fn upsert(&mut self, k: Addr, v: NpIdent) -> Result<(), MapError> {
        self.0.insert(k, v, 0)
    }

    /// Remove the entry for `k`; absent is not an error.
    pub fn remove(&mut self, k: &Addr) -> Result<(), MapError> {
        optional(self.0.remove(k)).map(drop)
    }
}
