//! The admin tiers' write order ([`apply`](super::apply)'s module docs): a barrier around
//! every subject direction whose AdminNetworkPolicy or BaselineAdminNetworkPolicy entries,
//! or whose isolation marker's tiers, change.
//!
//! Admin entries are not monotone the way allow-only entries are: a `Deny` or `Pass` entry
//! added narrows, an `Allow` added may shadow a later `Deny`, a lower ordinal written
//! before the entry it overtakes is gone admits for a moment what neither state admits. So
//! such a subject direction (a [`Group`]: its identity and direction) is closed while its
//! entries change:
//!
//! 1. **raise** (narrow phase, before new CIDR classes): every ANP key of the group the old
//!    or the new state has, and the five barrier keys ([`barrier_keys`]: peer any, every
//!    port, TCP, UDP, SCTP, ICMP, ICMPv6), are written with [`BARRIER`] (ordinal 0,
//!    `Deny`), then the marker gets `MARK_ANP` (its other bits as they were; an absent
//!    marker counts as `MARK_NO_NP`). While the barrier keys are written one by one, each of
//!    the datapath's three lookups (the peer's identity, its class, any) returns either the
//!    old state's own result or the barrier, so the first match is the barrier's `Deny` or
//!    the old state's own first rule; once all are written every lookup that hits returns
//!    the barrier, and the lookup "any peer" always hits: every new flow of those five
//!    protocols is refused in the group's direction.
//! 2. **settle** (narrow phase, behind the complete barrier): the marker takes the new
//!    state's tiers, still with `MARK_ANP`, and `MARK_NO_NP` only if both states have it
//!    (NetworkPolicy isolation is what refuses the protocols no admin entry names); then the
//!    group's NetworkPolicy and BANP entries are written and removed in any order (the
//!    barrier shadows them for every protocol they name).
//! 3. **lift** (widen phase, after the old CIDR classes are gone, so every class lookup
//!    finds the new state's class): the ANP keys take their new values and the old-only
//!    ones go, in any order: each lookup returns the barrier or the new state's own result,
//!    so the first match is a `Deny` or the new state's first rule, and what that rule
//!    passes meets the new NetworkPolicy and BANP entries. Then the final marker (or its
//!    removal), then the barrier keys the new state does not have.
//!
//! The barrier's ordinal is [`BARRIER_ORDINAL`] (0), which the compiler reserves: every
//! rule's ordinal is above it ([`cozyplane_policy::np::admin::ordinal`]), so the barrier is
//! the first match wherever it is found. The argument does not even need that: were a real
//! rule to tie with it, the datapath would take the earlier lookup (identity, class, then
//! the barrier's "any"), and every lookup answers with the barrier or with the old (raise)
//! or new (lift) state's own answer, so the first match is still a `Deny` or that state's.

use std::collections::{BTreeMap, BTreeSet};

use cozyplane_policy::model::{
    ACTION_DENY, ALL, Diff, Dir, Layer, MARK_ANP, MARK_BANP, MARK_NO_NP, PEER_ANY, PEER_ISOLATED, RuleKey,
    RuleVal, Tables, proto,
};
use cozyplane_policy::np::admin::BARRIER_ORDINAL;
use cozyplane_policy::ports::PortBlock;

use super::maps::Op;

/// A subject direction of the default network's tiers: (identity, direction).
pub type Group = (u32, Dir);

/// What a barrier entry holds: every peer, the ordinal no rule has (below every rule's),
/// `Deny`.
pub const BARRIER: RuleVal = RuleVal {
    peers: ALL,
    rule: BARRIER_ORDINAL,
    flags: ACTION_DENY,
};

/// The protocols an admin entry can name, so the ones a barrier closes.
pub const PROTOS: [u8; 5] = [proto::TCP, proto::UDP, proto::SCTP, proto::ICMP, proto::ICMPV6];

/// The marker's bits the admin tiers read.
const ADMIN_BITS: u32 = MARK_NO_NP | MARK_ANP | MARK_BANP;

/// The group of a default-network tier's entry (NetworkPolicy, ANP, BANP: net 0).
pub fn group_of(k: &RuleKey) -> Option<Group> {
    (matches!(k.layer, Layer::Np | Layer::Anp | Layer::Banp) && k.net == 0).then_some((k.subject, k.dir))
}

/// The isolation marker of a group.
pub fn marker((subject, dir): Group) -> RuleKey {
    RuleKey {
        layer: Layer::Np,
        dir,
        net: 0,
        subject,
        peer: PEER_ISOLATED,
        proto: 0,
        port: PortBlock::ANY,
    }
}

/// The barrier keys of a group.
pub fn barrier_keys((subject, dir): Group) -> impl Iterator<Item = RuleKey> {
    PROTOS.into_iter().map(move |p| RuleKey {
        layer: Layer::Anp,
        dir,
        net: 0,
        subject,
        peer: PEER_ANY,
        proto: p,
        port: PortBlock::ANY,
    })
}

fn admin_bits(v: Option<&RuleVal>) -> u32 {
    v.map_or(0, |v| v.flags & ADMIN_BITS)
}

/// The tiers an isolation marker (or its absence: nothing applies, "no NetworkPolicy")
/// says.
fn tiers(v: Option<&RuleVal>) -> u32 {
    v.map_or(MARK_NO_NP, |v| v.flags)
}

/// Every entry of `layer` of a group in `t`.
fn entries(t: &BTreeMap<RuleKey, RuleVal>, layer: Layer, g: Group) -> BTreeMap<RuleKey, RuleVal> {
    t.range(entries_range(layer, g)).map(|(k, v)| (*k, *v)).collect()
}

/// One group's change: its entries before and after, by layer.
#[derive(Debug)]
struct Change {
    group: Group,
    old_marker: Option<RuleVal>,
    new_marker: Option<RuleVal>,
    old_anp: BTreeMap<RuleKey, RuleVal>,
    new_anp: BTreeMap<RuleKey, RuleVal>,
    /// NetworkPolicy (markers aside) and BANP entries to write and to delete.
    rest_upsert: Vec<(RuleKey, RuleVal)>,
    rest_remove: Vec<RuleKey>,
}

/// The barriers one diff needs.
#[derive(Debug, Default)]
pub struct Plan {
    groups: Vec<Change>,
    owned: BTreeSet<Group>,
}

impl Plan {
    /// The groups of `d` (applied to `have`) whose admin entries or marker tiers change.
    pub fn new(have: &Tables, d: &Diff) -> Self {
        let mut dirty = BTreeSet::new();
        for (k, v) in &d.rules.upsert {
            let Some(g) = group_of(k) else { continue };
            let admin = matches!(k.layer, Layer::Anp | Layer::Banp);
            let retiered = k.peer == PEER_ISOLATED
                && k.layer == Layer::Np
                && admin_bits(have.rules.get(k)) != admin_bits(Some(v));
            if admin || retiered {
                dirty.insert(g);
            }
        }
        for k in &d.rules.remove {
            let Some(g) = group_of(k) else { continue };
            let admin = matches!(k.layer, Layer::Anp | Layer::Banp);
            let retiered =
                k.peer == PEER_ISOLATED && k.layer == Layer::Np && admin_bits(have.rules.get(k)) != 0;
            if admin || retiered {
                dirty.insert(g);
            }
        }
        if dirty.is_empty() {
            return Self::default();
        }
        // The groups' entries after the diff.
        let mut after: BTreeMap<RuleKey, Option<RuleVal>> = BTreeMap::new();
        for (k, v) in &d.rules.upsert {
            if group_of(k).is_some_and(|g| dirty.contains(&g)) {
                after.insert(*k, Some(*v));
            }
        }
        for k in &d.rules.remove {
            if group_of(k).is_some_and(|g| dirty.contains(&g)) {
                after.insert(*k, None);
            }
        }
        let groups = dirty
            .iter()
            .map(|g| {
                let m = marker(*g);
                let new_of =
                    |k: &RuleKey, old: Option<&RuleVal>| after.get(k).copied().unwrap_or(old.copied());
                let old_anp = entries(&have.rules, Layer::Anp, *g);
                let mut new_anp = old_anp.clone();
                for (k, v) in after.range(entries_range(Layer::Anp, *g)) {
                    match v {
                        Some(v) => new_anp.insert(*k, *v),
                        None => new_anp.remove(k),
                    };
                }
                let mut rest_upsert = Vec::new();
                let mut rest_remove = Vec::new();
                for layer in [Layer::Np, Layer::Banp] {
                    for (k, v) in after.range(entries_range(layer, *g)) {
                        if *k == m {
                            continue;
                        }
                        match v {
                            Some(v) if have.rules.get(k) != Some(v) => rest_upsert.push((*k, *v)),
                            None if have.rules.contains_key(k) => rest_remove.push(*k),
                            _ => {}
                        }
                    }
                }
                Change {
                    group: *g,
                    old_marker: have.rules.get(&m).copied(),
                    new_marker: new_of(&m, have.rules.get(&m)),
                    old_anp,
                    new_anp,
                    rest_upsert,
                    rest_remove,
                }
            })
            .collect();
        Self { groups, owned: dirty }
    }

    /// Does a barrier write this entry (so the plain two-phase order must not)?
    pub fn owns(&self, k: &RuleKey) -> bool {
        !self.owned.is_empty() && group_of(k).is_some_and(|g| self.owned.contains(&g))
    }

    /// Step 1: the barriers go up (narrow phase, before new CIDR classes).
    pub fn raise(&self) -> Vec<Op> {
        let mut out = Vec::new();
        for c in &self.groups {
            let keys: BTreeSet<RuleKey> = c
                .old_anp
                .keys()
                .chain(c.new_anp.keys())
                .copied()
                .chain(barrier_keys(c.group))
                .collect();
            for k in keys {
                if c.old_anp.get(&k) != Some(&BARRIER) {
                    out.push(Op::Rule(k, BARRIER));
                }
            }
            let raised = Self::raised(c);
            if c.old_marker != Some(raised) {
                out.push(Op::Rule(marker(c.group), raised));
            }
        }
        out
    }

    /// Step 2: behind the barriers, the marker's new tiers and the other tiers' entries
    /// (narrow phase).
    pub fn settle(&self) -> Vec<Op> {
        let mut out = Vec::new();
        for c in &self.groups {
            let settled = Self::settled(c);
            if settled != Self::raised(c) {
                out.push(Op::Rule(marker(c.group), settled));
            }
            out.extend(c.rest_upsert.iter().map(|(k, v)| Op::Rule(*k, *v)));
            out.extend(c.rest_remove.iter().map(|k| Op::Unrule(*k)));
        }
        out
    }

    /// The marker while the barrier goes up: the old tiers and `MARK_ANP`.
    fn raised(c: &Change) -> RuleVal {
        RuleVal {
            flags: tiers(c.old_marker.as_ref()) | MARK_ANP,
            ..c.old_marker.unwrap_or(MARKER)
        }
    }

    /// The marker behind the complete barrier: the new tiers and `MARK_ANP`;
    /// `MARK_NO_NP` only if both states have it.
    fn settled(c: &Change) -> RuleVal {
        let (old, new) = (tiers(c.old_marker.as_ref()), tiers(c.new_marker.as_ref()));
        let flags = (new & !MARK_NO_NP) | MARK_ANP | (old & new & MARK_NO_NP);
        RuleVal {
            flags,
            ..c.new_marker.or(c.old_marker).unwrap_or(MARKER)
        }
    }

    /// Step 3: the barriers come down (widen phase, after the old CIDR classes are gone).
    pub fn lift(&self) -> Vec<Op> {
        let mut out = Vec::new();
        for c in &self.groups {
            let barrier: BTreeSet<RuleKey> = barrier_keys(c.group).collect();
            out.extend(
                c.new_anp
                    .iter()
                    .filter(|(_, v)| **v != BARRIER)
                    .map(|(k, v)| Op::Rule(*k, *v)),
            );
            out.extend(
                c.old_anp
                    .keys()
                    .filter(|k| !c.new_anp.contains_key(k) && !barrier.contains(k))
                    .map(|k| Op::Unrule(*k)),
            );
            let settled = Self::settled(c);
            match c.new_marker {
                Some(v) if v != settled => out.push(Op::Rule(marker(c.group), v)),
                Some(_) => {}
                None => out.push(Op::Unrule(marker(c.group))),
            }
            out.extend(
                barrier
                    .iter()
                    .filter(|k| !c.new_anp.contains_key(k))
                    .map(|k| Op::Unrule(*k)),
            );
        }
        out
    }
}

/// An isolation marker's value, its flags aside.
const MARKER: RuleVal = RuleVal {
    peers: ALL,
    rule: 0,
    flags: 0,
};

fn entries_range(layer: Layer, (subject, dir): Group) -> std::ops::RangeInclusive<RuleKey> {
    let at = |peer, proto, port| RuleKey {
        layer,
        dir,
        net: 0,
        subject,
        peer,
        proto,
        port,
    };
    at(0, 0, PortBlock::ANY)
        ..=at(
            u32::MAX,
            u8::MAX,
            PortBlock {
                value: u16::MAX,
                len: u8::MAX,
            },
        )
}
