//! `sdn_snat_rev`: a reply as it arrives from outside ([`SnatRkey`]) → the pod's side of the
//! flow ([`SnatRev`]). Written and read by the datapath only (`lib/snat.h`); inserted with
//! `BPF_NOEXIST`, which keeps NAT ports unique. C side: `include/sdn/snat_maps.h`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_LRU_HASH`; pinned by name.

use std::borrow::Borrow;

use aya::maps::{MapData, MapError};

use super::map_wrapper;
use crate::abi::{SnatRev, SnatRkey};

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_snat_rev";

map_wrapper!(
    /// NATed flows, outside side.
    #[doc(alias = "sdn_snat_rev")]
    SnatRevMap, HashMap<SnatRkey, SnatRev>
);

impl<T: Borrow<MapData>> SnatRevMap<T> {
    /// Every entry (a snapshot).
    pub fn entries(&self) -> Result<Vec<(SnatRkey, SnatRev)>, MapError> {
        self.0.iter().collect()
    }
}
