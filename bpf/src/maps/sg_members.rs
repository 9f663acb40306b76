//! `sdn_sg_members`: an endpoint `{net, address}` → its SecurityGroups' bitmap, local and remote endpoints of VPCs with groups. C side: `include/sdn/policy_maps.h`; design in `docs/policy.md`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_HASH`; pinned by name.

use std::borrow::{Borrow, BorrowMut};

use aya::maps::{MapData, MapError};

use super::{map_wrapper, optional};
use crate::abi::{EpKey, SgMember};

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_sg_members";

map_wrapper!(
    /// an endpoint `{net, address}` → its SecurityGroups' bitmap, local and remote endpoints of VPCs with groups.
    #[doc(alias = "sdn_sg_members")]
    SgMembersMap, HashMap<EpKey, SgMember>
);

impl<T: Borrow<MapData>> SgMembersMap<T> {
    /// The entry for `k`, if any.
    pub fn get(&self, k: &EpKey) -> Result<Option<SgMember>, MapError> {
        optional(self.0.get(k, 0))
    }

    /// Every entry (a snapshot).
    pub fn entries(&self) -> Result<Vec<(EpKey, SgMember)>, MapError> {
        self.0.iter().collect()
    }
}

impl<T: BorrowMut<MapData>> SgMembersMap<T> {
    /// Insert or replace the entry for `k`.
    pub fn upsert(&mut self, k: EpKey, v: SgMember) -> Result<(), MapError> {
        self.0.insert(k, v, 0)
    }

    /// Remove the entry for `k`; absent is not an error.
    pub fn remove(&mut self, k: &EpKey) -> Result<(), MapError> {
        optional(self.0.remove(k)).map(drop)
    }
}
