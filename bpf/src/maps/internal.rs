//! `sdn_internal`: `{net, prefix}` → flags. Net 0: the cluster-internal ranges (the agent's
//! `--internal-cidrs`); net N: VPC N's own ranges. A destination in either is never NATed
//! out of VPC N by a door (`lib/ns_out.h`). Written by the agent. C side:
//! `include/sdn/fip_maps.h`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_LPM_TRIE` with `BPF_F_NO_PREALLOC`; pinned by name.

use std::borrow::{Borrow, BorrowMut};
use std::net::IpAddr;

use aya::maps::lpm_trie::Key;
use aya::maps::{MapData, MapError};

use super::{map_wrapper, optional};
use crate::abi::EpKey;
use crate::maps::xnet_routes::Route;

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_internal";

map_wrapper!(
    /// Ranges that stay inside the cluster, per net.
    #[doc(alias = "sdn_internal")]
    InternalMap, LpmTrie<EpKey, u32>
);

fn key((net, base, len): Route) -> Key<EpKey> {
    let bits = match base {
        IpAddr::V4(_) => 32 + 96 + u32::from(len.min(32)),
        IpAddr::V6(_) => 32 + u32::from(len.min(128)),
    };
    Key::new(bits, EpKey { net, ip: base.into() })
}

fn range(k: &Key<EpKey>) -> Route {
    let d = k.data();
    let ip = IpAddr::from(d.ip);
    let len = match ip {
        IpAddr::V4(_) => k.prefix_len().saturating_sub(32 + 96),
        IpAddr::V6(_) => k.prefix_len().saturating_sub(32),
    };
    (d.net, ip, u8::try_from(len).unwrap_or(u8::MAX))
}

impl<T: Borrow<MapData>> InternalMap<T> {
    /// Every range `(net, base, prefix length)`.
    pub fn entries(&self) -> Result<Vec<Route>, MapError> {
        self.0.keys().map(|r| r.map(|k| range(&k))).collect()
    }
}

impl<T: BorrowMut<MapData>> InternalMap<T> {
    /// Insert `(net, base, len)`; an existing range is left as is.
    pub fn insert(&mut self, r: Route) -> Result<(), MapError> {
        self.0.insert(&key(r), 0, 0)
    }

    /// Remove a range; absent is not an error.
    pub fn remove(&mut self, r: Route) -> Result<(), MapError> {
        optional(self.0.remove(&key(r))).map(drop)
    }
}
