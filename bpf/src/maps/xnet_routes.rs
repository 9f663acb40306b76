//! `sdn_xnet_routes`: `{source net, destination prefix}` → [`XnetRoute`] (the net the
//! destination belongs to, seen from the source net). Written by the agent for programmed
//! peerings. C side: `include/sdn/maps.h`, `lib/crossnet.h`; read by `sdn_from_pod` and
//! `sdn_from_overlay`. Not a permission by itself: `sdn_xnet_allow` decides.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_LPM_TRIE` with `BPF_F_NO_PREALLOC` (4.11; key iteration 4.16); pinned by
//! name.

use std::borrow::{Borrow, BorrowMut};
use std::net::IpAddr;

use aya::maps::lpm_trie::Key;
use aya::maps::{MapData, MapError};

use super::{map_wrapper, optional};
use crate::abi::{EpKey, XnetRoute};

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_xnet_routes";

map_wrapper!(
    /// Peer nets' prefixes by source net.
    #[doc(alias = "sdn_xnet_routes")]
    XnetRoutesMap, LpmTrie<EpKey, XnetRoute>
);

/// A route's key: `(source net, prefix base, prefix length in its own family)`.
pub type Route = (u32, IpAddr, u8);

/// The LPM key of `r`: the net always matched whole, then the prefix in the 128-bit space.
/// Shared with [`super::internal`], keyed the same way.
pub(crate) fn key((net, base, len): Route) -> Key<EpKey> {
    let bits = match base {
        IpAddr::V4(_) => 32 + 96 + u32::from(len.min(32)),
        IpAddr::V6(_) => 32 + u32::from(len.min(128)),
    };
    Key::new(bits, EpKey { net, ip: base.into() })
}

/// The inverse of [`key`].
pub(crate) fn route(k: &Key<EpKey>) -> Route {
    let d = k.data();
    let ip = IpAddr::from(d.ip);
    let len = match ip {
        IpAddr::V4(_) => k.prefix_len().saturating_sub(32 + 96),
        IpAddr::V6(_) => k.prefix_len().saturating_sub(32),
    };
    (d.net, ip, u8::try_from(len).unwrap_or(u8::MAX))
}

impl<T: Borrow<MapData>> XnetRoutesMap<T> {
    /// The net `ip` belongs to, seen from `net` (longest prefix), if any.
    pub fn lookup(&self, net: u32, ip: IpAddr) -> Result<Option<u32>, MapError> {
        let bits = if ip.is_ipv4() { 32 } else { 128 };
        Ok(optional(self.0.get(&key((net, ip, bits)), 0))?.map(|r| r.net))
    }

    /// Every route and its target net.
    pub fn entries(&self) -> Result<Vec<(Route, u32)>, MapError> {
        self.0
            .iter()
            .map(|r| r.map(|(k, v)| (route(&k), v.net)))
            .collect()
    }
}

impl<T: BorrowMut<MapData>> XnetRoutesMap<T> {
    /// Insert or replace: from net `r.0`, prefix `r.1/r.2` belongs to net `to`.
    pub fn upsert(&mut self, r: Route, to: u32) -> Result<(), MapError> {
        self.0.insert(&key(r), XnetRoute { net: to, flags: 0 }, 0)
    }

    /// Remove a route; absent is not an error.
    pub fn remove(&mut self, r: Route) -> Result<(), MapError> {
        optional(self.0.remove(&key(r))).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::XnetKey;

    #[test]
    fn aya_key_has_the_abi_layout() {
        // aya's key is packed; the kernel reads it byte-wise, so size and order are what count.
        assert_eq!(size_of::<Key<EpKey>>(), size_of::<XnetKey>());
    }

    #[test]
    fn the_net_is_always_matched_whole() {
        let r: Route = (100, "10.1.0.0".parse().unwrap(), 24);
        let k = key(r);
        assert_eq!(k.prefix_len(), 32 + 96 + 24);
        assert_eq!(route(&k), r);
        let v6: Route = (7, "fd00:1::".parse().unwrap(), 64);
        assert_eq!(route(&key(v6)), v6);
    }
}
