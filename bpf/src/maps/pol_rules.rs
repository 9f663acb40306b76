//! `sdn_pol_rules`: the one rule trie of the three policy layers, [`PruleKey`] →
//! [`Prule`]. Written by the agent from the `policy` crate's entries (adds before removes,
//! then a generation bump when something was removed); read by the datapath's policy
//! check. C side: `include/sdn/policy_maps.h`; design in `docs/policy.md`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_LPM_TRIE` with `BPF_F_NO_PREALLOC` (4.11; key iteration 4.16); pinned by
//! name.

use std::borrow::{Borrow, BorrowMut};

use aya::maps::lpm_trie::Key;
use aya::maps::{MapData, MapError};

use super::{map_wrapper, optional};
use crate::abi::{Prule, PruleKey};

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_pol_rules";

/// The bytes of [`PruleKey`] after `prefixlen`, which is what aya's [`Key`] carries.
pub type Body = [u8; 20];

map_wrapper!(
    /// Policy rules of every layer.
    #[doc(alias = "sdn_pol_rules")]
    PolRulesMap, LpmTrie<Body, Prule>
);

/// `k` without its `prefixlen`, laid out as the C struct (offsets checked in the tests).
pub fn body(k: &PruleKey) -> Body {
    let mut b = [0u8; 20];
    b[0..4].copy_from_slice(&k.net.to_ne_bytes());
    b[4..8].copy_from_slice(&k.subject.to_ne_bytes());
    b[8..12].copy_from_slice(&k.peer.to_ne_bytes());
    b[12] = k.layer;
    b[13] = k.dir;
    b[14] = k.proto;
    b[15] = k.pad;
    b[16..18].copy_from_slice(&k.port.to_ne_bytes());
    b[18..20].copy_from_slice(&k.pad2);
    b
}

/// The inverse of [`body`].
pub fn key_of(prefixlen: u32, b: &Body) -> PruleKey {
    let u32_at = |i: usize| u32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    PruleKey {
        prefixlen,
        net: u32_at(0),
        subject: u32_at(4),
        peer: u32_at(8),
        layer: b[12],
        dir: b[13],
        proto: b[14],
        pad: b[15],
        port: u16::from_ne_bytes([b[16], b[17]]),
        pad2: [b[18], b[19]],
    }
}

impl<T: Borrow<MapData>> PolRulesMap<T> {
    /// The longest-prefix match for `k` (its `prefixlen` should be the full 144).
    pub fn lookup(&self, k: &PruleKey) -> Result<Option<Prule>, MapError> {
        optional(self.0.get(&Key::new(k.prefixlen, body(k)), 0))
    }

    /// Every entry (a snapshot).
    pub fn entries(&self) -> Result<Vec<(PruleKey, Prule)>, MapError> {
        self.0
            .iter()
            .map(|r| r.map(|(k, v)| (key_of(k.prefix_len(), &k.data()), v)))
            .collect()
    }
}

impl<T: BorrowMut<MapData>> PolRulesMap<T> {
    /// Insert or replace one entry.
    pub fn upsert(&mut self, k: &PruleKey, v: Prule) -> Result<(), MapError> {
        self.0.insert(&Key::new(k.prefixlen, body(k)), v, 0)
    }

    /// Remove one entry; absent is not an error.
    pub fn remove(&mut self, k: &PruleKey) -> Result<(), MapError> {
        optional(self.0.remove(&Key::new(k.prefixlen, body(k)))).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::Abi;

    #[test]
    fn body_follows_the_abi_offsets() {
        let k = PruleKey {
            prefixlen: 140,
            net: 0x0102_0304,
            subject: 7,
            peer: 0x8000_0009,
            layer: 1,
            dir: 1,
            proto: 6,
            pad: 0,
            port: 80u16.to_be(),
            pad2: [0; 2],
        };
        let b = body(&k);
        for (field, off) in &PruleKey::LAYOUT.fields[1..] {
            let at = off - 4;
            match *field {
                "net" => assert_eq!(b[at..at + 4], k.net.to_ne_bytes()),
                "subject" => assert_eq!(b[at..at + 4], k.subject.to_ne_bytes()),
                "peer" => assert_eq!(b[at..at + 4], k.peer.to_ne_bytes()),
                "layer" => assert_eq!(b[at], k.layer),
                "dir" => assert_eq!(b[at], k.dir),
                "proto" => assert_eq!(b[at], k.proto),
                "port" => assert_eq!(b[at..at + 2], k.port.to_ne_bytes()),
                _ => {}
            }
        }
        assert_eq!(key_of(140, &b), k);
        assert_eq!(size_of::<Key<Body>>(), size_of::<PruleKey>());
    }
}
