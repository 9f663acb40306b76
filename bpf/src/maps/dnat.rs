//! `sdn_dnat`: flows the host DNATed into a pod of this node ([`DnatKey`]), so that their
//! replies go back through the host's conntrack. Written by `sdn_to_pod`, read by
//! `sdn_from_pod`. C side: `include/sdn/maps.h`, `lib/dnat.h`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_LRU_HASH`; pinned by name.

use std::borrow::Borrow;

use aya::maps::{MapData, MapError};

use super::map_wrapper;
use crate::abi::{Dnat, DnatKey};

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_dnat";

map_wrapper!(
    /// Flows the host DNATed into a local pod.
    #[doc(alias = "sdn_dnat")]
    DnatMap, HashMap<DnatKey, Dnat>
);

impl<T: Borrow<MapData>> DnatMap<T> {
    /// Every flow (a snapshot; the datapath keeps changing it).
    pub fn keys(&self) -> Result<Vec<DnatKey>, MapError> {
        self.0.keys().collect()
    }
}
