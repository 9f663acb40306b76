//! `sdn_nodes`: tunnel (underlay) address of another node → [`NodeEntry`]. Written by the
//! agent from Nodes. C side: `include/sdn/maps.h`; read by `sdn_from_overlay`, which drops
//! a decapsulated packet whose outer source is not in it (`DROP_OVERLAY_SOURCE`).
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_HASH` with `BPF_F_NO_PREALLOC`; pinned by name.

use std::borrow::{Borrow, BorrowMut};
use std::net::IpAddr;

use aya::maps::{MapData, MapError};

use super::{map_wrapper, optional};
use crate::abi::{Addr, NodeEntry};

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_nodes";

map_wrapper!(
    /// Known nodes' tunnel addresses.
    #[doc(alias = "sdn_nodes")]
    NodesMap, HashMap<Addr, NodeEntry>
);

impl<T: Borrow<MapData>> NodesMap<T> {
    /// Every known tunnel address.
    pub fn addrs(&self) -> Result<Vec<IpAddr>, MapError> {
        self.0.keys().map(|k| k.map(IpAddr::from)).collect()
    }
}

impl<T: BorrowMut<MapData>> NodesMap<T> {
    /// Accept overlay packets from `ip`.
    pub fn insert(&mut self, ip: IpAddr) -> Result<(), MapError> {
        self.0.insert(Addr::from(ip), NodeEntry::default(), 0)
    }

    /// Stop accepting overlay packets from `ip`; absent is not an error.
    pub fn remove(&mut self, ip: IpAddr) -> Result<(), MapError> {
        optional(self.0.remove(&Addr::from(ip))).map(drop)
    }
}
