//! `sdn_lb_rev`: a backend's reply as it leaves the backend → what the client must see
//! ([`LbRev`]). Written by the datapath on the client's node with the flow, read where the
//! reply meets that node (`lib/lb.h`); an LRU. C side: `include/sdn/lb_maps.h`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_LRU_HASH`; pinned by name.

use std::borrow::Borrow;

use aya::maps::{MapData, MapError};

use super::map_wrapper;
use crate::abi::{LbRev, LbRevKey};

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_lb_rev";

map_wrapper!(
    /// Reverse NAT of balanced flows.
    #[doc(alias = "sdn_lb_rev")]
    LbRevMap, HashMap<LbRevKey, LbRev>
);

impl<T: Borrow<MapData>> LbRevMap<T> {
    /// Every entry (tools and tests).
    pub fn entries(&self) -> Result<Vec<(LbRevKey, LbRev)>, MapError> {
        self.0.iter().collect()
    }
}
