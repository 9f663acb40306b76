//! `sdn_ct_fwd`: fabric client flow → gateway port ([`CtFwd`]). Written by `sdn_to_pod`
//! only; userspace reads it for debugging. C side: `include/sdn/maps.h`, `lib/bridge.h`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_LRU_HASH`; pinned by name.

use std::borrow::Borrow;

use aya::maps::{MapData, MapError};

use super::map_wrapper;
use crate::abi::{CtFwd, CtFwdKey};

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_ct_fwd";

map_wrapper!(
    /// Bridge conntrack, forward direction.
    #[doc(alias = "sdn_ct_fwd")]
    CtFwdMap, HashMap<CtFwdKey, CtFwd>
);

impl<T: Borrow<MapData>> CtFwdMap<T> {
    /// Every entry (a snapshot; the datapath keeps changing it).
    pub fn entries(&self) -> Result<Vec<(CtFwdKey, CtFwd)>, MapError> {
        self.0.iter().collect()
    }
}
