//! Per-scope CIDR classes and port-block union, shared by the SG and HF compilers (which
//! recompile a whole scope at a time; NP keeps its classes incrementally).

use std::collections::{BTreeMap, BTreeSet};

use crate::cidr::{Block, Prefix};
use crate::identity;
use crate::model::{ALL, CidrKey, Dir, Layer, PEER_CLASS, RuleKey, RuleVal};
use crate::ports::{self, PortBlock};

/// The classes of one scope: every prefix its blocks name → a class id.
pub fn assign(scope: u32, layer: Layer, blocks: &[&Block]) -> BTreeMap<Prefix, u32> {
    let prefixes: BTreeSet<Prefix> = blocks.iter().flat_map(|b| b.prefixes().copied()).collect();
    let mut taken = BTreeSet::new();
    let mut out = BTreeMap::new();
    for p in prefixes {
        let seed = identity::fnv(&[
            &scope.to_be_bytes(),
            &[layer as u8, p.len, u8::from(p.v6)],
            &p.bits.to_be_bytes(),
        ]);
        let c = identity::allocate(seed, &|c| taken.contains(&c));
        taken.insert(c);
        out.insert(p, c);
    }
    out
}

/// The cidr map entries of a scope's classes.
pub fn cidr_entries(scope: u32, layer: Layer, classes: &BTreeMap<Prefix, u32>) -> BTreeMap<CidrKey, u32> {
    classes
        .iter()
        .map(|(p, c)| {
            (
                CidrKey {
                    scope,
                    layer,
                    prefix: *p,
                },
                *c,
            )
        })
        .collect()
}

/// The class tokens of a block.
pub fn tokens(b: &Block, classes: &BTreeMap<Prefix, u32>) -> Vec<u32> {
    classes
        .iter()
        .filter(|(p, _)| b.holds_class(p))
        .map(|(_, c)| PEER_CLASS | c)
        .collect()
}

/// Contributions of rules to one scope, before the port union.
#[derive(Default)]
pub struct Contrib(BTreeMap<(Dir, u32, u32, u8), BTreeMap<PortBlock, RuleVal>>);

impl Contrib {
    /// Rule `rule` admits `peers` of token `peer` to `subject` on `proto` `[lo, hi]`.
    #[expect(clippy::too_many_arguments, reason = "one rule key's worth of fields")]
    pub fn add(
        &mut self,
        dir: Dir,
        subject: u32,
        peer: u32,
        proto: u8,
        blocks: &[PortBlock],
        peers: u64,
        rule: u32,
    ) {
        let m = self.0.entry((dir, subject, peer, proto)).or_default();
        for b in blocks {
            let e = m.entry(*b).or_insert(RuleVal {
                peers: 0,
                rule,
                flags: 0,
            });
            e.peers |= peers;
            e.rule = e.rule.min(rule);
        }
    }

    /// The rule entries, with every block holding the union of its enclosing blocks.
    pub fn entries(self, layer: Layer, net: u32) -> BTreeMap<RuleKey, RuleVal> {
        let mut out = BTreeMap::new();
        for ((dir, subject, peer, proto), m) in self.0 {
            for (port, v) in ports::union_down(&m, |a, o| {
                a.peers |= o.peers;
                a.rule = a.rule.min(o.rule);
            }) {
                out.insert(
                    RuleKey {
                        layer,
                        dir,
                        net,
                        subject,
                        peer,
                        proto,
                        port,
                    },
                    v,
                );
            }
        }
        out
    }
}

/// `ALL`, for callers that admit a token as a whole.
pub const WHOLE: u64 = ALL;
