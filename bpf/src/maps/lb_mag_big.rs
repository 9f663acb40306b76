//! `sdn_lb_mag_big`: the Maglev lookup tables of the frontends whose `sdn_lb_svc` value has
//! [`LbSvc::F_BIG`](crate::abi::LbSvc::F_BIG): [`LB_BIG_SLOTS`] slots instead of
//! `sdn_lb_maglev`'s 1021, so that removing one of many backends moves few of the others'
//! slots. Stored as [`LB_BIG_CHUNKS`] chunks of [`LB_CHUNK_SLOTS`] slots, keyed
//! `{frontend id, chunk}` ([`LbChunkKey`]): 4 KiB kernel allocations instead of one of
//! 128 KiB. Written by the agent (`agent/src/core/lb/`) chunk by chunk: a packet may meet
//! old slots and new ones meanwhile, each naming a backend that still exists. C side:
//! `include/sdn/lb_maps.h`, `lib/lb.h`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_HASH` with `BPF_F_NO_PREALLOC`; pinned by name.

use std::borrow::{Borrow, BorrowMut};
use std::collections::BTreeSet;

use aya::maps::{MapData, MapError};

use super::{map_wrapper, optional};
use crate::abi::{LB_BIG_CHUNKS, LB_BIG_SLOTS, LB_CHUNK_SLOTS, LbChunk, LbChunkKey};

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_lb_mag_big";

/// `SDN_LB_BIG_MAX`: big tables the map holds (its entries are these many times
/// [`LB_BIG_CHUNKS`]). A table takes 120 KiB of kernel memory once written, so this bounds
/// big tables to 480 MiB.
pub const MAX: u32 = 4096;

map_wrapper!(
    /// Big Maglev tables by frontend id, in chunks.
    #[doc(alias = "sdn_lb_mag_big")]
    LbMagBigMap, HashMap<LbChunkKey, LbChunk>
);

impl<T: Borrow<MapData>> LbMagBigMap<T> {
    /// The table of frontend `id` ([`LB_BIG_SLOTS`] slots), `None` if it has no chunk here.
    /// A missing chunk (a table whose first write stopped halfway) reads as slots of no
    /// backend (0).
    pub fn get(&self, id: u32) -> Result<Option<Vec<u32>>, MapError> {
        let mut slots = vec![0; LB_BIG_CHUNKS as usize * LB_CHUNK_SLOTS];
        let mut any = false;
        for (chunk, out) in (0..LB_BIG_CHUNKS).zip(slots.chunks_mut(LB_CHUNK_SLOTS)) {
            if let Some(c) = optional(self.0.get(&LbChunkKey { id, chunk }, 0))? {
                out.copy_from_slice(&c.slot);
                any = true;
            }
        }
        slots.truncate(LB_BIG_SLOTS);
        Ok(any.then_some(slots))
    }

    /// Every frontend id with at least one chunk here, ascending.
    pub fn ids(&self) -> Result<Vec<u32>, MapError> {
        let ids: BTreeSet<u32> = self.0.keys().map(|k| k.map(|k| k.id)).collect::<Result<_, _>>()?;
        Ok(ids.into_iter().collect())
    }
}

impl<T: BorrowMut<MapData>> LbMagBigMap<T> {
    /// Write the table of frontend `id`, chunk by chunk: `slots` must hold exactly
    /// [`LB_BIG_SLOTS`] backend ids. Fails with `E2BIG` when the map is full and `id` has no
    /// table yet, possibly after some chunks were written (see [`LbMagBigMap::remove`]).
    ///
    /// # Panics
    /// If `slots` has another length (a programming error of the caller).
    pub fn set(&mut self, id: u32, slots: &[u32]) -> Result<(), MapError> {
        assert_eq!(slots.len(), LB_BIG_SLOTS, "a big table's slots");
        for (chunk, part) in (0..LB_BIG_CHUNKS).zip(slots.chunks(LB_CHUNK_SLOTS)) {
            // The last chunk's tail (past LB_BIG_SLOTS) is never read: zero.
            let mut c = LbChunk {
                slot: [0; LB_CHUNK_SLOTS],
            };
            c.slot[..part.len()].copy_from_slice(part);
            self.0.insert(LbChunkKey { id, chunk }, c, 0)?;
        }
        Ok(())
    }

    /// Remove the table of `id`, every chunk; absent ones are not an error.
    pub fn remove(&mut self, id: u32) -> Result<(), MapError> {
        for chunk in 0..LB_BIG_CHUNKS {
            optional(self.0.remove(&LbChunkKey { id, chunk }))?;
        }
        Ok(())
    }
}
