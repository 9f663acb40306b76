//! Ports as the last, longest-prefix-matched bits of a rule key.
//!
//! A range `[lo, hi]` becomes at most 30 aligned blocks (never one entry per port), so
//! `endPort` costs nothing extra. ICMP uses the same 16 bits as `type << 8 | code`: "this
//! type, any code" is an 8-bit block.

use std::collections::BTreeMap;

/// An aligned block of the 16-bit port space: the `len` leading bits of `value`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PortBlock {
    /// The block's first port (bits below `len` are 0).
    pub value: u16,
    /// Prefix length, 0..=16.
    pub len: u8,
}

impl PortBlock {
    /// Every port.
    pub const ANY: Self = Self { value: 0, len: 0 };

    /// The single port `p`.
    pub fn exact(p: u16) -> Self {
        Self { value: p, len: 16 }
    }

    /// The block of length `len` holding `p`.
    pub fn containing(p: u16, len: u8) -> Self {
        Self {
            value: p & mask(len),
            len,
        }
    }

    /// First and last port of the block.
    pub fn bounds(self) -> (u16, u16) {
        (self.value, self.value | !mask(self.len))
    }

    /// Does the block hold `p`?
    pub fn contains(self, p: u16) -> bool {
        p & mask(self.len) == self.value
    }

    /// Is `o` inside this block (or equal)?
    pub fn covers(self, o: Self) -> bool {
        o.len >= self.len && self.contains(o.value)
    }

    /// The enclosing block one bit shorter.
    pub fn parent(self) -> Option<Self> {
        (self.len > 0).then(|| Self::containing(self.value, self.len - 1))
    }
}

fn mask(len: u8) -> u16 {
    if len == 0 {
        0
    } else {
        u16::MAX << (16 - u32::from(len.min(16)))
    }
}

/// A protocol and the port blocks a rule admits for it.
pub type ProtoBlocks = (u8, Vec<PortBlock>);

/// The fewest aligned blocks whose union is exactly `[lo, hi]` (empty when `lo > hi`).
pub fn blocks(lo: u16, hi: u16) -> Vec<PortBlock> {
    let mut out = Vec::new();
    let (mut lo, hi) = (u32::from(lo), u32::from(hi));
    while lo <= hi {
        // The largest aligned block starting at lo that ends at or before hi.
        let mut len = 16u8;
        while len > 0 {
            let size = 1u32 << (16 - u32::from(len - 1));
            if lo % size != 0 || lo + size - 1 > hi {
                break;
            }
            len -= 1;
        }
        out.push(PortBlock {
            value: lo as u16,
            len,
        });
        lo += 1 << (16 - u32::from(len));
    }
    out
}

/// Turn per-block contributions into the entries a longest-prefix lookup needs: each
/// block's value is the union (`merge`) of every contribution at that block or an enclosing
/// one, so the longest match alone decides. Blocks that add nothing to their enclosing
/// entry are still kept: a rule's own blocks are its entries, which keeps a change to one
/// rule a change to its own blocks and those nested in them.
pub fn union_down<V: Clone>(
    contrib: &BTreeMap<PortBlock, V>,
    merge: impl Fn(&mut V, &V),
) -> BTreeMap<PortBlock, V> {
    let mut out = BTreeMap::new();
    for (b, v) in contrib {
        let mut acc = v.clone();
        let mut p = b.parent();
        while let Some(pb) = p {
            if let Some(pv) = contrib.get(&pb) {
                merge(&mut acc, pv);
            }
            p = pb.parent();
        }
        out.insert(*b, acc);
    }
    out
}

/// The longest block of `entries` holding `p`, as a trie lookup finds it.
pub fn longest<V>(entries: impl Fn(PortBlock) -> Option<V>, p: u16) -> Option<V> {
    (0..=16u8)
        .rev()
        .find_map(|len| entries(PortBlock::containing(p, len)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn covered(bs: &[PortBlock]) -> Vec<u16> {
        (0..=u16::MAX)
            .filter(|p| bs.iter().any(|b| b.contains(*p)))
            .collect()
    }

    #[test]
    fn a_range_is_exactly_its_blocks() {
        for (lo, hi) in [
            (0, 65535),
            (80, 80),
            (1, 65534),
            (8080, 8090),
            (1024, 2047),
            (5, 4),
        ] {
            let bs = blocks(lo, hi);
            assert_eq!(covered(&bs), (lo..=hi).collect::<Vec<_>>(), "{lo}-{hi}");
            assert!(bs.len() <= 30, "{lo}-{hi}: {}", bs.len());
        }
        assert_eq!(blocks(0, 65535), vec![PortBlock::ANY]);
        assert_eq!(blocks(1, 65534).len(), 30);
    }

    #[test]
    fn union_down_gives_the_longest_match_every_covering_rule() {
        let mut c = BTreeMap::new();
        for b in blocks(1000, 2000) {
            c.insert(b, 1u64);
        }
        for b in blocks(1500, 1500) {
            *c.entry(b).or_insert(0) |= 2;
        }
        let e = union_down(&c, |a, b| *a |= *b);
        assert_eq!(longest(|b| e.get(&b).copied(), 1500), Some(3));
        assert_eq!(longest(|b| e.get(&b).copied(), 1501), Some(1));
        assert_eq!(longest(|b| e.get(&b).copied(), 999), None);
    }
}
