//! `sdn_snat_inside`: `{net, prefix}` → [`SnatInside`]. Net 0 holds the cluster-internal
//! ranges (fabric blocks, node addresses, service CIDRs), which are never NATed; net N holds
//! VPC N's own ranges, which its gateway never NATs either. Written by the agent
//! (`agent/src/egress.rs`). C side: `include/sdn/snat_maps.h`, `lib/snat.h`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_LPM_TRIE` with `BPF_F_NO_PREALLOC`; pinned by name.

use std::borrow::{Borrow, BorrowMut};
use std::net::IpAddr;

use aya::maps::lpm_trie::Key;
use aya::maps::{MapData, MapError};

use super::{map_wrapper, optional};
use crate::abi::{EpKey, SnatInside};

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_snat_inside";

map_wrapper!(
    /// Ranges never NATed, by net.
    #[doc(alias = "sdn_snat_inside")]
    SnatInsideMap, LpmTrie<EpKey, SnatInside>
);

/// A range: `(net, prefix base, prefix length in its own family)`.
pub type Range = (u32, IpAddr, u8);

fn key((net, base, len): Range) -> Key<EpKey> {
    let bits = match base {
        IpAddr::V4(_) => 32 + 96 + u32::from(len.min(32)),
        IpAddr::V6(_) => 32 + u32::from(len.min(128)),
    };
    Key::new(bits, EpKey { net, ip: base.into() })
}

fn range(k: &Key<EpKey>) -> Range {
    let d = k.data();
    let ip = IpAddr::from(d.ip);
    let len = match ip {
        IpAddr::V4(_) => k.prefix_len().saturating_sub(32 + 96),
        IpAddr::V6(_) => k.prefix_len().saturating_sub(32),
    };
    (d.net, ip, u8::try_from(len).unwrap_or(u8::MAX))
}

impl<T: Borrow<MapData>> SnatInsideMap<T> {
    /// Whether `ip` is inside some range of `net`.
    pub fn contains(&self, net: u32, ip: IpAddr) -> Result<bool, MapError> {
        let bits = if ip.is_ipv4() { 32 } else { 128 };
        Ok(optional(self.0.get(&key((net, ip, bits)), 0))?.is_some())
    }

    /// Every range.
    pub fn ranges(&self) -> Result<Vec<Range>, MapError> {
        self.0.keys().map(|k| k.map(|k| range(&k))).collect()
    }
}

impl<T: BorrowMut<MapData>> SnatInsideMap<T> {
    /// Add a range (idempotent).
    pub fn insert(&mut self, r: Range) -> Result<(), MapError> {
        self.0.insert(&key(r), SnatInside::default(), 0)
    }

    /// Remove a range; absent is not an error.
    pub fn remove(&mut self, r: Range) -> Result<(), MapError> {
        optional(self.0.remove(&key(r))).map(drop)
    }
}
