//! `sdn_ct_rev`: bridged pod's reply → original addressing ([`CtRev`]). Written by
//! `sdn_to_pod`, read by `sdn_from_pod`. C side: `include/sdn/maps.h`, `lib/bridge.h`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_LRU_HASH`; pinned by name.

use std::borrow::Borrow;

use aya::maps::{MapData, MapError};

use super::map_wrapper;
use crate::abi::{CtRev, CtRevKey};

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_ct_rev";

map_wrapper!(
    /// Bridge conntrack, reverse direction.
    #[doc(alias = "sdn_ct_rev")]
    CtRevMap, HashMap<CtRevKey, CtRev>
);

impl<T: Borrow<MapData>> CtRevMap<T> {
    /// Every entry (a snapshot; the datapath keeps changing it).
    pub fn entries(&self) -> Result<Vec<(CtRevKey, CtRev)>, MapError> {
        self.0.iter().collect()
    }
}
