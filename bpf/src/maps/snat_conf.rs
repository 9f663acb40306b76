//! `sdn_snat_conf`: the node's NAT settings, one [`SnatConf`] at index 0. Written by the
//! agent at start (`agent/src/uplink.rs`). C side: `include/sdn/snat_maps.h`, read by
//! `lib/snat.h` and `lib/egress.h`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_ARRAY`; pinned by name.

use std::borrow::{Borrow, BorrowMut};

use aya::maps::{MapData, MapError};

use super::map_wrapper;
use crate::abi::SnatConf;

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_snat_conf";

map_wrapper!(
    /// The node's NAT settings.
    #[doc(alias = "sdn_snat_conf")]
    SnatConfMap, Array<SnatConf>
);

impl<T: Borrow<MapData>> SnatConfMap<T> {
    /// The settings (zero until the agent wrote them).
    pub fn get(&self) -> Result<SnatConf, MapError> {
        self.0.get(&0, 0)
    }
}

impl<T: BorrowMut<MapData>> SnatConfMap<T> {
    /// Replace the settings.
    pub fn set(&mut self, c: SnatConf) -> Result<(), MapError> {
        self.0.set(0, c, 0)
    }
}
