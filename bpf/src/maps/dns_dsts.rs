//! `sdn_dns_dsts`: the destinations whose port 53 a VPC pod's traffic is steered to the
//! node resolver from (the cluster DNS address, the cluster's internal ranges), as
//! prefixes. Written by the agent. C side: `include/sdn/dns_maps.h`, `lib/dns.h`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_LPM_TRIE` with `BPF_F_NO_PREALLOC`; pinned by name.

use std::borrow::{Borrow, BorrowMut};
use std::net::IpAddr;

use aya::maps::lpm_trie::Key;
use aya::maps::{MapData, MapError};

use super::{map_wrapper, optional};
use crate::abi::{Addr, DnsDst};

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_dns_dsts";

map_wrapper!(
    /// Steered DNS destinations.
    #[doc(alias = "sdn_dns_dsts")]
    DnsDstsMap, LpmTrie<Addr, DnsDst>
);

/// A prefix as `(base, length in its own family)`.
pub type Prefix = (IpAddr, u8);

fn key((base, len): Prefix) -> Key<Addr> {
    let bits = match base {
        IpAddr::V4(_) => 96 + u32::from(len.min(32)),
        IpAddr::V6(_) => u32::from(len.min(128)),
    };
    Key::new(bits, base.into())
}

fn prefix(k: &Key<Addr>) -> Prefix {
    let ip = IpAddr::from(k.data());
    let len = match ip {
        IpAddr::V4(_) => k.prefix_len().saturating_sub(96),
        IpAddr::V6(_) => k.prefix_len(),
    };
    (ip, u8::try_from(len).unwrap_or(u8::MAX))
}

impl<T: Borrow<MapData>> DnsDstsMap<T> {
    /// Every steered prefix.
    pub fn prefixes(&self) -> Result<Vec<Prefix>, MapError> {
        self.0.keys().map(|k| k.map(|k| prefix(&k))).collect()
    }
}

impl<T: BorrowMut<MapData>> DnsDstsMap<T> {
    /// Steer port 53 of `p`.
    pub fn insert(&mut self, p: Prefix) -> Result<(), MapError> {
        self.0.insert(&key(p), DnsDst::default(), 0)
    }

    /// Stop steering `p`; absent is not an error.
    pub fn remove(&mut self, p: Prefix) -> Result<(), MapError> {
        optional(self.0.remove(&key(p))).map(drop)
    }
}
