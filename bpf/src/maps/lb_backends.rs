//! `sdn_lb_backends`: backend id → [`LbBackend`] (net, address, target port). Written by
//! the agent before any Maglev table names the id, removed after none does. C side:
//! `include/sdn/lb_maps.h`, `lib/lb.h`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_HASH` with `BPF_F_NO_PREALLOC`; pinned by name.

use std::borrow::{Borrow, BorrowMut};
use std::net::IpAddr;

use aya::maps::{MapData, MapError};

use super::{map_wrapper, optional};
use crate::abi::LbBackend;

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_lb_backends";

map_wrapper!(
    /// Backends by id.
    #[doc(alias = "sdn_lb_backends")]
    LbBackendsMap, HashMap<u32, LbBackend>
);

impl<T: Borrow<MapData>> LbBackendsMap<T> {
    /// `(net, address, port)` of backend `id`.
    pub fn get(&self, id: u32) -> Result<Option<(u32, IpAddr, u16)>, MapError> {
        Ok(optional(self.0.get(&id, 0))?.map(|b| (b.net, b.addr.into(), u16::from_be(b.port))))
    }

    /// Every backend id.
    pub fn ids(&self) -> Result<Vec<u32>, MapError> {
        self.0.keys().collect()
    }
}

impl<T: BorrowMut<MapData>> LbBackendsMap<T> {
    /// Insert or replace backend `id`: `addr:port` in `net`.
    pub fn upsert(&mut self, id: u32, net: u32, addr: IpAddr, port: u16) -> Result<(), MapError> {
        let v = LbBackend {
            net,
            addr: addr.into(),
            port: port.to_be(),
            pad: [0; 2],
        };
        self.0.insert(id, v, 0)
    }

    /// Remove backend `id`; absent is not an error.
    pub fn remove(&mut self, id: u32) -> Result<(), MapError> {
        optional(self.0.remove(&id)).map(drop)
    }
}
