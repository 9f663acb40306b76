//! `sdn_frags`: a bridged datagram's later fragments follow its first ([`FragKey`] →
//! [`Frag`]). Written by the bridge on a first fragment, read on the later ones, in both
//! `sdn_to_pod` and `sdn_from_pod`. C side: `include/sdn/maps.h`, `lib/frag.h`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_LRU_HASH`; pinned by name.

use std::borrow::Borrow;

use aya::maps::{MapData, MapError};

use super::map_wrapper;
use crate::abi::{Frag, FragKey};

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_frags";

map_wrapper!(
    /// Bridged datagrams whose first fragment was translated.
    #[doc(alias = "sdn_frags")]
    FragsMap, HashMap<FragKey, Frag>
);

impl<T: Borrow<MapData>> FragsMap<T> {
    /// Every entry (a snapshot; the datapath keeps changing it).
    pub fn entries(&self) -> Result<Vec<(FragKey, Frag)>, MapError> {
        self.0.iter().collect()
    }
}
