//! `sdn_sock_rev`: a translated socket's backend `{socket cookie, backend, port, proto}` →
//! the frontend it asked for ([`SockRev`]), so recvmsg and getpeername show the VIP.
//! Written by the socket hooks on connect and sendmsg (`lib/sock_lb.h`); an LRU. C side:
//! `include/sdn/sock_maps.h`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_LRU_HASH`; pinned by name.

use std::borrow::Borrow;

use aya::maps::{MapData, MapError};

use super::map_wrapper;
use crate::abi::{SockRev, SockRevKey};

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_sock_rev";

map_wrapper!(
    /// The way back of translated sockets.
    #[doc(alias = "sdn_sock_rev")]
    SockRevMap, HashMap<SockRevKey, SockRev>
);

impl<T: Borrow<MapData>> SockRevMap<T> {
    /// Every entry (tools and tests).
    pub fn entries(&self) -> Result<Vec<(SockRevKey, SockRev)>, MapError> {
        self.0.iter().collect()
    }
}
