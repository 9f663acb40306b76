//! `sdn_lb_maglev`: frontend id → its Maglev lookup table ([`LbTable`], a backend id per
//! slot). Built and written whole by the agent (`agent/src/services.rs`): one update
//! replaces a table, so a packet sees the old one or the new one. A frontend with many
//! backends has its table in `sdn_lb_mag_big` instead ([`super::lb_mag_big`]). C side:
//! `include/sdn/lb_maps.h`, `lib/lb.h`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_HASH` with `BPF_F_NO_PREALLOC`; pinned by name.

use std::borrow::{Borrow, BorrowMut};

use aya::maps::{MapData, MapError};

use super::{map_wrapper, optional};
use crate::abi::{LB_SLOTS, LbTable};

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_lb_maglev";

map_wrapper!(
    /// Maglev tables by frontend id.
    #[doc(alias = "sdn_lb_maglev")]
    LbMaglevMap, HashMap<u32, LbTable>
);

impl<T: Borrow<MapData>> LbMaglevMap<T> {
    /// The table of frontend `id`.
    pub fn get(&self, id: u32) -> Result<Option<Vec<u32>>, MapError> {
        Ok(optional(self.0.get(&id, 0))?.map(|t| t.slot.to_vec()))
    }

    /// Every frontend id with a table.
    pub fn ids(&self) -> Result<Vec<u32>, MapError> {
        self.0.keys().collect()
    }
}

impl<T: BorrowMut<MapData>> LbMaglevMap<T> {
    /// Write the table of frontend `id`: `slots` must hold exactly [`LB_SLOTS`] backend ids.
    ///
    /// # Panics
    /// If `slots` has another length (a programming error of the caller).
    pub fn set(&mut self, id: u32, slots: &[u32]) -> Result<(), MapError> {
        let mut t = LbTable { slot: [0; LB_SLOTS] };
        t.slot.copy_from_slice(slots);
        self.0.insert(id, t, 0)
    }

    /// Remove the table of `id`; absent is not an error.
    pub fn remove(&mut self, id: u32) -> Result<(), MapError> {
        optional(self.0.remove(&id)).map(drop)
    }
}
