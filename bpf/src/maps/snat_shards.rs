//! `sdn_snat_shards`: gateway port shard → the node that allocates from it ([`Remote`]: its
//! tunnel address; all zero = nobody). Written by the agent from Nodes
//! (`agent/src/egress.rs`). C side: `include/sdn/snat_maps.h`; read by `sdn_from_uplink`,
//! which sends a reply to a VPC NAT address on to the node owning its port's shard.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_ARRAY`; pinned by name.

use std::borrow::{Borrow, BorrowMut};
use std::net::IpAddr;

use aya::maps::{MapData, MapError};

use super::map_wrapper;
use crate::abi::{Addr, Remote};

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_snat_shards";

/// `SDN_SNAT_SHARDS_MAX`: the most shards a range can be cut into.
pub const MAX: u32 = 1024;

map_wrapper!(
    /// Shard owners.
    #[doc(alias = "sdn_snat_shards")]
    SnatShardsMap, Array<Remote>
);

impl<T: Borrow<MapData>> SnatShardsMap<T> {
    /// The owner of `shard`, if any.
    pub fn get(&self, shard: u32) -> Result<Option<IpAddr>, MapError> {
        let r = self.0.get(&shard, 0)?;
        Ok((r.node != Addr::default()).then(|| IpAddr::from(r.node)))
    }
}

impl<T: BorrowMut<MapData>> SnatShardsMap<T> {
    /// `shard` belongs to the node tunnelled to at `node` (None: nobody).
    pub fn set(&mut self, shard: u32, node: Option<IpAddr>) -> Result<(), MapError> {
        let r = Remote {
            node: node.map(Addr::from).unwrap_or_default(),
            ..Remote::default()
        };
        self.0.set(shard, r, 0)
    }
}
