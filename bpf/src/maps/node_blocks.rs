//! `sdn_node_blocks`: another node's block of fabric (net 0) addresses → [`Remote`] (that
//! node). Written by the agent from Nodes (announced block → tunnel IP). C side:
//! `include/sdn/maps.h`, `lib/endpoint.h` (`sdn_net0_remote_lookup`); read by
//! `sdn_from_pod` for net 0 when `sdn_remotes` has no exact entry.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_LPM_TRIE` with `BPF_F_NO_PREALLOC` (4.11; key iteration 4.16); pinned by
//! name.

use std::borrow::{Borrow, BorrowMut};
use std::net::IpAddr;

use aya::maps::lpm_trie::Key;
use aya::maps::{MapData, MapError};

use super::{map_wrapper, optional};
use crate::abi::{Addr, Remote};

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_node_blocks";

map_wrapper!(
    /// Other nodes' fabric blocks.
    #[doc(alias = "sdn_node_blocks")]
    NodeBlocksMap, LpmTrie<Addr, Remote>
);

/// A block as `(base, prefix length in its own family)`; IPv4 sits at /96 + len.
pub type Block = (IpAddr, u8);

fn key((base, len): Block) -> Key<Addr> {
    let bits = match base {
        IpAddr::V4(_) => 96 + u32::from(len.min(32)),
        IpAddr::V6(_) => u32::from(len.min(128)),
    };
    Key::new(bits, base.into())
}

fn block(k: &Key<Addr>) -> Block {
    let ip = IpAddr::from(k.data());
    let len = match ip {
        IpAddr::V4(_) => k.prefix_len().saturating_sub(96),
        IpAddr::V6(_) => k.prefix_len(),
    };
    (ip, u8::try_from(len).unwrap_or(u8::MAX))
}

impl<T: Borrow<MapData>> NodeBlocksMap<T> {
    /// The node whose block holds `ip` (longest prefix), if any.
    pub fn lookup(&self, ip: IpAddr) -> Result<Option<IpAddr>, MapError> {
        let bits = if ip.is_ipv4() { 32 } else { 128 };
        Ok(optional(self.0.get(&key((ip, bits)), 0))?.map(|r| r.node.into()))
    }

    /// Every block and its node.
    pub fn entries(&self) -> Result<Vec<(Block, IpAddr)>, MapError> {
        self.0
            .iter()
            .map(|r| r.map(|(k, v)| (block(&k), IpAddr::from(v.node))))
            .collect()
    }
}

impl<T: BorrowMut<MapData>> NodeBlocksMap<T> {
    /// Insert or replace: addresses of `b` live on the node reachable at `node`.
    pub fn upsert(&mut self, b: Block, node: IpAddr) -> Result<(), MapError> {
        self.0.insert(
            &key(b),
            Remote {
                node: node.into(),
                flags: 0,
            },
            0,
        )
    }

    /// Remove block `b`; absent is not an error.
    pub fn remove(&mut self, b: Block) -> Result<(), MapError> {
        optional(self.0.remove(&key(b))).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::BlockKey;

    #[test]
    fn aya_key_has_the_abi_layout() {
        // aya's key is packed; the kernel reads it byte-wise, so size and order are what count.
        assert_eq!(size_of::<Key<Addr>>(), size_of::<BlockKey>());
    }

    #[test]
    fn ipv4_blocks_sit_under_the_nat64_prefix() {
        let b: Block = ("10.244.3.0".parse().unwrap(), 24);
        let k = key(b);
        assert_eq!(k.prefix_len(), 120);
        assert_eq!(block(&k), b);
        let v6: Block = ("fd00:1::".parse().unwrap(), 64);
        assert_eq!(block(&key(v6)), v6);
    }
}
