//! `sdn_pol_cidrs`: the CIDR classes of the policy layers, [`PcidrKey`] → [`Pcidr`]: the
//! longest prefix any rule of a scope names (excepts included) → the class that is the
//! peer token in `sdn_pol_rules`. Written by the agent from the `policy` crate's entries.
//! C side: `include/sdn/policy_maps.h`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_LPM_TRIE` with `BPF_F_NO_PREALLOC`; pinned by name.

use std::borrow::{Borrow, BorrowMut};

use aya::maps::lpm_trie::Key;
use aya::maps::{MapData, MapError};

use super::{map_wrapper, optional};
use crate::abi::{Addr, Pcidr, PcidrKey};

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_pol_cidrs";

/// The bytes of [`PcidrKey`] after `prefixlen`.
pub type Body = [u8; 24];

map_wrapper!(
    /// CIDR classes of every policy scope.
    #[doc(alias = "sdn_pol_cidrs")]
    PolCidrsMap, LpmTrie<Body, Pcidr>
);

/// `k` without its `prefixlen`, laid out as the C struct.
pub fn body(k: &PcidrKey) -> Body {
    let mut b = [0u8; 24];
    b[0..4].copy_from_slice(&k.scope.to_ne_bytes());
    b[4] = k.layer;
    b[5] = k.v6;
    b[6..8].copy_from_slice(&k.pad);
    b[8..24].copy_from_slice(&k.ip.b);
    b
}

/// The inverse of [`body`].
pub fn key_of(prefixlen: u32, b: &Body) -> PcidrKey {
    let mut ip = Addr::default();
    ip.b.copy_from_slice(&b[8..24]);
    PcidrKey {
        prefixlen,
        scope: u32::from_ne_bytes([b[0], b[1], b[2], b[3]]),
        layer: b[4],
        v6: b[5],
        pad: [b[6], b[7]],
        ip,
    }
}

impl<T: Borrow<MapData>> PolCidrsMap<T> {
    /// The class of the longest prefix holding `k.ip` (`k.prefixlen` 64 + 128).
    pub fn lookup(&self, k: &PcidrKey) -> Result<Option<Pcidr>, MapError> {
        optional(self.0.get(&Key::new(k.prefixlen, body(k)), 0))
    }

    /// Every entry (a snapshot).
    pub fn entries(&self) -> Result<Vec<(PcidrKey, Pcidr)>, MapError> {
        self.0
            .iter()
            .map(|r| r.map(|(k, v)| (key_of(k.prefix_len(), &k.data()), v)))
            .collect()
    }
}

impl<T: BorrowMut<MapData>> PolCidrsMap<T> {
    /// Insert or replace one class prefix.
    pub fn upsert(&mut self, k: &PcidrKey, v: Pcidr) -> Result<(), MapError> {
        self.0.insert(&Key::new(k.prefixlen, body(k)), v, 0)
    }

    /// Remove one class prefix; absent is not an error.
    pub fn remove(&mut self, k: &PcidrKey) -> Result<(), MapError> {
        optional(self.0.remove(&Key::new(k.prefixlen, body(k)))).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::Abi;

    #[test]
    fn body_follows_the_abi_offsets() {
        let off = |f: &str| PcidrKey::LAYOUT.fields.iter().find(|(n, _)| *n == f).unwrap().1 - 4;
        assert_eq!((off("scope"), off("layer"), off("v6"), off("ip")), (0, 4, 5, 8));
        let k = PcidrKey {
            prefixlen: 64 + 120,
            scope: 9,
            layer: 2,
            v6: 0,
            pad: [0; 2],
            ip: Addr::from_v4([10, 0, 0, 0].into()),
        };
        assert_eq!(key_of(k.prefixlen, &body(&k)), k);
        assert_eq!(size_of::<Key<Body>>(), size_of::<PcidrKey>());
    }
}
