//! `sdn_lb_flows`: a client's flow to a VIP → the backend pinned for it ([`LbFlow`]).
//! Written and read by the datapath only (`lib/lb.h`); an LRU. C side:
//! `include/sdn/lb_maps.h`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_LRU_HASH`; pinned by name.

use std::borrow::Borrow;

use aya::maps::{MapData, MapError};

use super::map_wrapper;
use crate::abi::{LbFlow, LbFlowKey};

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_lb_flows";

map_wrapper!(
    /// Pinned flows.
    #[doc(alias = "sdn_lb_flows")]
    LbFlowsMap, HashMap<LbFlowKey, LbFlow>
);

impl<T: Borrow<MapData>> LbFlowsMap<T> {
    /// Every pinned flow (tools and tests).
    pub fn entries(&self) -> Result<Vec<(LbFlowKey, LbFlow)>, MapError> {
        self.0.iter().collect()
    }
}
