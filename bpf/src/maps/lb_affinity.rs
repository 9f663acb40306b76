//! `sdn_lb_affinity`: `sessionAffinity: ClientIP`, `{client net, client, frontend id}` →
//! the backend the client was last given and when ([`LbAff`]). Written and read by the
//! datapath (`lib/lb.h`); an LRU. C side: `include/sdn/lb_maps.h`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_LRU_HASH`; pinned by name.

use std::borrow::Borrow;

use aya::maps::{MapData, MapError};

use super::map_wrapper;
use crate::abi::{LbAff, LbAffKey};

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_lb_affinity";

map_wrapper!(
    /// Client affinities.
    #[doc(alias = "sdn_lb_affinity")]
    LbAffinityMap, HashMap<LbAffKey, LbAff>
);

impl<T: Borrow<MapData>> LbAffinityMap<T> {
    /// Every entry (tools and tests).
    pub fn entries(&self) -> Result<Vec<(LbAffKey, LbAff)>, MapError> {
        self.0.iter().collect()
    }
}
