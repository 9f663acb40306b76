//! `sdn_xnet_allow`: `{source net, destination net}` → [`XnetStats`]. Presence is the
//! permission ("may S talk to T?"), written by the agent for both directions of a
//! programmed peering; the counters are the crossings this node let through, written by
//! the datapath. C side: `include/sdn/maps.h`, `lib/crossnet.h`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_HASH` with `BPF_F_NO_PREALLOC`; pinned by name.

use std::borrow::{Borrow, BorrowMut};

use aya::maps::{MapData, MapError};

use super::{map_wrapper, optional};
use crate::abi::{XnetPair, XnetStats};

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_xnet_allow";

map_wrapper!(
    /// Allowed net pairs and their crossing counters.
    #[doc(alias = "sdn_xnet_allow")]
    XnetAllowMap, HashMap<XnetPair, XnetStats>
);

/// An allowed direction: `(source net, destination net)`.
pub type Pair = (u32, u32);

impl<T: Borrow<MapData>> XnetAllowMap<T> {
    /// Every allowed pair `(src, dst)` with its counters.
    pub fn entries(&self) -> Result<Vec<(Pair, XnetStats)>, MapError> {
        self.0
            .iter()
            .map(|r| r.map(|(k, v)| ((k.src, k.dst), v)))
            .collect()
    }
}

impl<T: BorrowMut<MapData>> XnetAllowMap<T> {
    /// Allow `src` → `dst`. An existing entry keeps its counters (`BPF_NOEXIST`).
    pub fn allow(&mut self, src: u32, dst: u32) -> Result<(), MapError> {
        const BPF_NOEXIST: u64 = 1;
        const EEXIST: i32 = 17;
        match self
            .0
            .insert(XnetPair { src, dst }, XnetStats::default(), BPF_NOEXIST)
        {
            Err(MapError::SyscallError(e)) if e.io_error.raw_os_error() == Some(EEXIST) => Ok(()),
            r => r,
        }
    }

    /// Forbid `src` → `dst`; absent is not an error.
    pub fn remove(&mut self, src: u32, dst: u32) -> Result<(), MapError> {
        optional(self.0.remove(&XnetPair { src, dst })).map(drop)
    }
}
