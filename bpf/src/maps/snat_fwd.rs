//! `sdn_snat_fwd`: a NATed flow as it leaves the pod ([`SnatKey`]) → its NAT address and port
//! ([`SnatFwd`]). Written and read by the datapath only (`lib/snat.h`); the wrapper is for
//! tools and tests. C side: `include/sdn/snat_maps.h`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_LRU_HASH`; pinned by name.

use std::borrow::Borrow;

use aya::maps::{MapData, MapError};

use super::map_wrapper;
use crate::abi::{SnatFwd, SnatKey};

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_snat_fwd";

map_wrapper!(
    /// NATed flows, pod side.
    #[doc(alias = "sdn_snat_fwd")]
    SnatFwdMap, HashMap<SnatKey, SnatFwd>
);

impl<T: Borrow<MapData>> SnatFwdMap<T> {
    /// Every entry (a snapshot).
    pub fn entries(&self) -> Result<Vec<(SnatKey, SnatFwd)>, MapError> {
        self.0.iter().collect()
    }
}
