//! `sdn_snat_addrs`: an address replies of NATed flows come back to → [`SnatAddr`] (whose:
//! net 0 for this node's masquerade address, else the VPC's VNI). Written by the agent
//! (`agent/src/uplink.rs` for the node's, `agent/src/egress.rs` for the VPCs'). C side:
//! `include/sdn/snat_maps.h`; read by `sdn_from_uplink` and `sdn_from_overlay`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_HASH` with `BPF_F_NO_PREALLOC`; pinned by name.

use std::borrow::{Borrow, BorrowMut};
use std::net::IpAddr;

use aya::maps::{MapData, MapError};

use super::{map_wrapper, optional};
use crate::abi::{Addr, SnatAddr};

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_snat_addrs";

map_wrapper!(
    /// NAT addresses and their nets.
    #[doc(alias = "sdn_snat_addrs")]
    SnatAddrsMap, HashMap<Addr, SnatAddr>
);

impl<T: Borrow<MapData>> SnatAddrsMap<T> {
    /// Every address and its net.
    pub fn entries(&self) -> Result<Vec<(IpAddr, u32)>, MapError> {
        self.0
            .iter()
            .map(|r| r.map(|(k, v)| (IpAddr::from(k), v.net)))
            .collect()
    }
}

impl<T: BorrowMut<MapData>> SnatAddrsMap<T> {
    /// Replies to `ip` belong to `net`.
    pub fn insert(&mut self, ip: IpAddr, net: u32) -> Result<(), MapError> {
        self.0.insert(Addr::from(ip), SnatAddr { net, flags: 0 }, 0)
    }

    /// Forget `ip`; absent is not an error.
    pub fn remove(&mut self, ip: IpAddr) -> Result<(), MapError> {
        optional(self.0.remove(&Addr::from(ip))).map(drop)
    }
}
