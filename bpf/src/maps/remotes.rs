//! `sdn_remotes`: `{net, ip}` → [`Remote`] (the node hosting an endpoint elsewhere).
//! Written by the agent (other nodes' Ports; net 0 goes by `sdn_node_blocks`). C side:
//! `include/sdn/maps.h`, `lib/overlay.h`; read by `sdn_from_pod`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_HASH` with `BPF_F_NO_PREALLOC`; pinned by name.

use std::borrow::{Borrow, BorrowMut};
use std::net::IpAddr;

use aya::maps::{MapData, MapError};

use super::{map_wrapper, optional};
use crate::abi::{EpKey, Remote};

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_remotes";

map_wrapper!(
    /// Remote endpoints by `{net, ip}`.
    #[doc(alias = "sdn_remotes")]
    RemotesMap, HashMap<EpKey, Remote>
);

fn key(net: u32, ip: IpAddr) -> EpKey {
    EpKey { net, ip: ip.into() }
}

impl<T: Borrow<MapData>> RemotesMap<T> {
    /// The node underlay address hosting `ip` of `net`, if known.
    pub fn get(&self, net: u32, ip: IpAddr) -> Result<Option<IpAddr>, MapError> {
        Ok(optional(self.0.get(&key(net, ip), 0))?.map(|r| r.node.into()))
    }
}

impl<T: BorrowMut<MapData>> RemotesMap<T> {
    /// Insert or replace: `ip` of `net` lives on the node reachable at `node`.
    pub fn upsert(&mut self, net: u32, ip: IpAddr, node: IpAddr) -> Result<(), MapError> {
        self.0.insert(
            key(net, ip),
            Remote {
                node: node.into(),
                flags: 0,
            },
            0,
        )
    }

    /// Remove `ip` of `net`; absent is not an error.
    pub fn remove(&mut self, net: u32, ip: IpAddr) -> Result<(), MapError> {
        optional(self.0.remove(&key(net, ip))).map(drop)
    }
}
