//! `sdn_internal`: `{net, prefix}` → [`Internal`]. Net 0: the cluster-internal ranges
//! (every node's fabric blocks and addresses, the Service CIDRs, `--internal-cidrs`); net N:
//! VPC N's own ranges. Read by net-0 masquerade, the VPC gateway's NAT, the Floating IP and
//! LoadBalancer doors and DNS steering (`lib/internal.h` says who asks what). Written by the
//! agent (`agent/src/internal.rs`) alone. C side: `include/sdn/internal_maps.h`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_LPM_TRIE` with `BPF_F_NO_PREALLOC`; pinned by name.

use aya::maps::{MapData, MapError};
use std::borrow::{Borrow, BorrowMut};

use super::xnet_routes::{key, route};
use super::{map_wrapper, optional};
use crate::abi::{EpKey, Internal};

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_internal";

/// A range: `(net, prefix base, prefix length in its own family)`.
pub type Range = super::xnet_routes::Route;

map_wrapper!(
    /// Ranges that stay inside the cluster, per net.
    #[doc(alias = "sdn_internal")]
    InternalMap, LpmTrie<EpKey, Internal>
);

impl<T: Borrow<MapData>> InternalMap<T> {
    /// Every range.
    pub fn entries(&self) -> Result<Vec<Range>, MapError> {
        self.0.keys().map(|k| k.map(|k| route(&k))).collect()
    }
}

impl<T: BorrowMut<MapData>> InternalMap<T> {
    /// Add a range (idempotent).
    pub fn insert(&mut self, r: Range) -> Result<(), MapError> {
        self.0.insert(&key(r), Internal::default(), 0)
    }

    /// Remove a range; absent is not an error.
    pub fn remove(&mut self, r: Range) -> Result<(), MapError> {
        optional(self.0.remove(&key(r))).map(drop)
    }
}
