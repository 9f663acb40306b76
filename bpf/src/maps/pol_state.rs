//! `sdn_pol_state`: `[0]` is the policy generation and the armed layers
//! ([`PolState`]). Written by the agent: it bumps `generation` after applying a change that
//! removed or narrowed rule entries, so the datapath re-checks established flows admitted
//! under an older generation on their next packet. C side: `include/sdn/policy_maps.h`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_ARRAY`, one element; pinned by name.

use std::borrow::{Borrow, BorrowMut};

use aya::maps::{MapData, MapError};

use super::map_wrapper;
use crate::abi::PolState;

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_pol_state";

map_wrapper!(
    /// The policy generation and armed layers.
    #[doc(alias = "sdn_pol_state")]
    PolStateMap, Array<PolState>
);

impl<T: Borrow<MapData>> PolStateMap<T> {
    /// The current state.
    pub fn get(&self) -> Result<PolState, MapError> {
        self.0.get(&0, 0)
    }
}

impl<T: BorrowMut<MapData>> PolStateMap<T> {
    /// Replace the state.
    pub fn set(&mut self, s: PolState) -> Result<(), MapError> {
        self.0.set(0, s, 0)
    }

    /// Bump the generation (wrapping), keeping the flags; returns the new generation.
    pub fn bump(&mut self) -> Result<u32, MapError> {
        let mut s = self.get()?;
        s.generation = s.generation.wrapping_add(1);
        self.set(s)?;
        Ok(s.generation)
    }
}
