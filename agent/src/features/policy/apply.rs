//! Writing a compiler [`Diff`] to the maps so that no packet meets a state allowing what
//! neither the old nor the new policy allows, then bumping the generation when something
//! may have narrowed.
//!
//! A flow must pass its source's egress and its destination's ingress, each of which admits
//! a peer if any of the peer's tokens (identity or net, CIDR class, any) finds an admitting
//! rule. Writing entries one by one from the old set to the new in any fixed order of maps
//! gets this wrong somewhere: lifting the source's egress isolation before the
//! destination's old ingress rules are gone admits, for a moment, a flow the old state
//! stopped at the source and the new one stops at the destination. So the writes come in
//! two phases, and every write is **monotone** in its phase:
//!
//! * **narrow** (each write only ever removes from what is allowed, so every state in
//!   this phase allows a subset of the old): isolation markers and armed HostFirewall
//!   directions added; this node's new addresses added; new CIDR classes added (a new class
//!   id no rule names yet: addresses moving to it are denied by class until the widen
//!   phase); rule entries lowered to what both states allow (the intersection of an SG
//!   group bitmap) or removed; every address whose identity or groups change parked on the
//!   quarantine identity ([`QUARANTINE`]) or group bitmap ([`QUARANTINE_GROUPS`]), which
//!   deny both ways and match no rule;
//! * **widen** (each write only ever adds, so every state in this phase allows a subset of
//!   the new): rule entries added or raised to their new value; addresses moved from the
//!   quarantine to their new identity or groups (or dropped); CIDR classes removed (their
//!   rules went in the narrow phase, so an address falls back to a class that has its new
//!   rules); this node's old addresses and disarmed directions removed; isolation markers
//!   removed; the quarantine's own markers removed.
//!
//! That is the order for the allow-only entries (SecurityGroups, NetworkPolicy,
//! HostFirewall). The **admin tiers** (AdminNetworkPolicy, BaselineAdminNetworkPolicy) are not
//! monotone: a `Deny` or `Pass` entry added narrows, an `Allow` added may shadow a later
//! `Deny` (the first matching rule decides), and changing an isolation marker's tiers moves
//! the decision between tiers. So every subject direction whose ANP or BANP entries, or
//! whose marker's `MARK_ANP | MARK_BANP | MARK_NO_NP` bits, change is closed by a
//! **barrier** while they change ([`barrier`]):
//!
//! * narrow phase, before the new CIDR classes: every ANP key of the direction (old, new,
//!   and five barrier keys: peer any, every port, TCP/UDP/SCTP/ICMP/ICMPv6) written as
//!   `{ALL, ordinal 0, Deny}`, then the marker with `MARK_ANP` and its old tiers: every new
//!   flow of the direction is refused (each write only ever replaces a lookup's answer by
//!   the barrier's `Deny`, so it is monotone like the rest of the phase);
//! * still narrow, behind the barrier: the marker with the new tiers (keeping `MARK_ANP`, and
//!   `MARK_NO_NP` only if both states have it), the direction's NetworkPolicy and BANP
//!   entries written and removed;
//! * widen phase, after the old CIDR classes are removed: the ANP keys take their new values
//!   (each lookup answers with the barrier or the new state's own answer, so nothing beyond
//!   the new state is admitted), old ANP keys removed, the final marker, and last the barrier
//!   keys the new state does not have.
//!
//! For that last step the widen phase removes old CIDR classes before the barriers come
//! down: an address still in an old class would find none of the new state's ANP entries
//! and could slip past a `Deny` to an `Allow` of "any peer". The barrier's ordinal is the
//! one the compiler reserves below every rule's (`BARRIER_ORDINAL`, 0); the argument holds
//! even for a tie ([`barrier`]'s docs).
//!
//! Rule entries are monotone in this sense because the compiler stores in every port block
//! the union of the blocks enclosing it (`ports::union_down`), so a longer block never
//! admits less than a shorter one of the same state, and the narrow phase keeps that true
//! of the intersections. Then, if anything was removed or overwritten
//! ([`Diff::narrows`]), `sdn_pol_state.generation` is bumped so established flows are
//! re-checked on their next packet. `apply_tests.rs` checks every intermediate state
//! against the compiler's verdict, for single changes and for restarts between two
//! arbitrary compiles; `apply_admin_tests.rs` does the same with the admin tiers.
//!
//! The quarantine relies on the datapath following `verdict.rs`: an identity with both
//! isolation markers and no rule admits nothing, and an endpoint whose group bitmap is
//! non-zero but names no group (bit 63) is grouped and admits nothing.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Instant;

use cozyplane_policy::model::{ALL, Diff, Dir, Layer, PEER_ISOLATED, RuleKey, RuleVal, Tables};
use cozyplane_policy::ports::PortBlock;

use super::maps::{Op, PolicyMaps};
use super::{PolicyError, barrier};

/// The NetworkPolicy identity an address is parked on while its identity changes:
/// isolated both ways, no rules, named by no rule. Below the compiler's first id (16), in
/// the range it keeps reserved, so no label set ever has it.
pub const QUARANTINE: u32 = 15;

/// The group bitmap an endpoint is parked on while its groups change: non-zero (so the
/// endpoint is grouped, default-deny) but no group id (those are bits 1..=62), and no rule's
/// group bitmap has it. Bit 63, not bit 0: bit 0 is the tunnel tag's "exact" flag, which the
/// receiving node strips, so a source parked on it would arrive ungrouped (open).
pub const QUARANTINE_GROUPS: u64 = 1 << 63;

/// What [`apply`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Applied {
    /// Entry writes and deletes.
    pub ops: usize,
    /// Whether the generation was bumped.
    pub bumped: bool,
    /// Seconds spent writing.
    pub seconds: f64,
}

fn quarantine_marker(dir: Dir) -> RuleKey {
    RuleKey {
        layer: Layer::Np,
        dir,
        net: 0,
        subject: QUARANTINE,
        peer: PEER_ISOLATED,
        proto: 0,
        port: PortBlock::ANY,
    }
}

fn is_marker(k: &RuleKey) -> bool {
    k.peer == PEER_ISOLATED
}

/// The operations that take the maps from `have` to `have` with `d` applied, in the two
/// phases of the module docs (the generation bump last).
pub fn ops(have: &Tables, d: &Diff) -> Vec<Op> {
    let mut narrow = Vec::new();
    let mut widen = Vec::new();

    // Tokens that change are parked first (their identities' markers before them).
    let idents: BTreeMap<IpAddr, Option<u32>> = d
        .np_idents
        .upsert
        .iter()
        .map(|(ip, id)| (*ip, Some(*id)))
        .chain(d.np_idents.remove.iter().map(|ip| (*ip, None)))
        .filter(|(ip, id)| have.np_idents.get(ip).copied() != *id)
        .collect();
    let park = !idents.is_empty();
    if park {
        let isolated = RuleVal {
            peers: ALL,
            rule: 0,
            flags: 0,
        };
        for dir in [Dir::Ingress, Dir::Egress] {
            if have.rules.get(&quarantine_marker(dir)) != Some(&isolated) {
                narrow.push(Op::Rule(quarantine_marker(dir), isolated));
            }
        }
    }
    for ip in idents.keys() {
        if have.np_idents.get(ip) != Some(&QUARANTINE) {
            narrow.push(Op::Ident(*ip, QUARANTINE));
        }
    }
    let members: BTreeMap<(u32, IpAddr), Option<u64>> = d
        .sg_members
        .upsert
        .iter()
        .map(|(k, g)| (*k, Some(*g)))
        .chain(d.sg_members.remove.iter().map(|k| (*k, None)))
        .filter(|(k, g)| have.sg_members.get(k).copied() != *g)
        .collect();
    for k in members.keys() {
        if have.sg_members.get(k) != Some(&QUARANTINE_GROUPS) {
            narrow.push(Op::Member(*k, QUARANTINE_GROUPS));
        }
    }

    // The node as a HostFirewall subject: more addresses and armed directions narrow.
    narrow.extend(d.hf_self.upsert.iter().map(|(ip, ())| Op::SelfAddr(*ip)));
    if let Some(f) = d.state_flags {
        let union = f | have.state_flags;
        if union != have.state_flags {
            narrow.push(Op::Flags(union));
        }
        if union != f {
            widen.push(Op::Flags(f));
        }
    }

    // The admin tiers' barriers go up, before any new class moves an address.
    let admin = barrier::Plan::new(have, d);
    narrow.extend(admin.raise());

    // New classes (no rule names their ids yet).
    narrow.extend(d.cidrs.upsert.iter().map(|(k, c)| Op::Cidr(*k, *c)));

    // Behind the barriers, their subjects' other tiers.
    narrow.extend(admin.settle());

    // Rules: markers added; values lowered to the intersection; entries removed.
    let upserts = || d.rules.upsert.iter().filter(|(k, _)| !admin.owns(k));
    for (k, v) in upserts().filter(|(k, _)| is_marker(k)) {
        narrow.push(Op::Rule(*k, *v));
    }
    for (k, v) in upserts().filter(|(k, _)| !is_marker(k)) {
        if let Some(old) = have.rules.get(k) {
            let both = old.peers & v.peers;
            if both != old.peers {
                narrow.push(Op::Rule(
                    *k,
                    RuleVal {
                        peers: both,
                        rule: old.rule,
                        flags: old.flags,
                    },
                ));
            }
        }
    }
    let removes = || d.rules.remove.iter().filter(|k| !admin.owns(k));
    narrow.extend(removes().filter(|k| !is_marker(k)).map(|k| Op::Unrule(*k)));

    // Widen: rules added or raised to their value.
    widen.extend(
        upserts()
            .filter(|(k, _)| !is_marker(k))
            .map(|(k, v)| Op::Rule(*k, *v)),
    );
    // Tokens leave the quarantine.
    for (ip, id) in &idents {
        widen.push(match id {
            Some(id) => Op::Ident(*ip, *id),
            None => Op::Unident(*ip),
        });
    }
    for (k, g) in &members {
        widen.push(match g {
            Some(g) => Op::Member(*k, *g),
            None => Op::Unmember(*k),
        });
    }
    // Classes whose rules are gone; then the barriers come down (each class lookup now
    // finds the new state's class); the node's old addresses; markers.
    widen.extend(d.cidrs.remove.iter().map(|k| Op::Uncidr(*k)));
    widen.extend(admin.lift());
    widen.extend(d.hf_self.remove.iter().map(|ip| Op::Unself(*ip)));
    widen.extend(removes().filter(|k| is_marker(k)).map(|k| Op::Unrule(*k)));
    if park {
        for dir in [Dir::Ingress, Dir::Egress] {
            let k = quarantine_marker(dir);
            if !d.rules.remove.contains(&k) {
                widen.push(Op::Unrule(k));
            }
        }
    }

    narrow.extend(widen);
    if d.narrows() {
        narrow.push(Op::Bump);
    }
    narrow
}

/// Write `d` to `maps`, whose content `mirror` is (kept equal, operation by operation).
/// Stops at the first failed write: the maps are then somewhere between the old and the new
/// state, `mirror` says where, and the caller reconciles.
pub fn apply(maps: &mut impl PolicyMaps, mirror: &mut Tables, d: &Diff) -> Result<Applied, PolicyError> {
    let started = Instant::now();
    let ops = ops(mirror, d);
    let mut generation = 0;
    for op in &ops {
        maps.op(op)?;
        super::maps::Memory::step(mirror, &mut generation, op);
    }
    Ok(Applied {
        ops: ops.len(),
        bumped: ops.last() == Some(&Op::Bump),
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// What a reconcile found and did.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Reconciled {
    /// Entries the maps held that the compilers agree with, left untouched.
    pub kept: usize,
    /// The writes.
    pub applied: Applied,
    /// Entries no compiler would write in any form, removed.
    pub purged: usize,
}

/// Bring whatever the maps hold (a previous agent's entries, a half-applied change) to
/// `want`, the compilers' full output: the maps are read back into `mirror`, entries that
/// agree stay as they are, and the difference is written like any change (the two phases
/// make a restart between two arbitrary compiles as safe as one change). Entries this agent
/// cannot read at all are removed last (nothing of ours looks them up; a bump follows).
pub fn reconcile(
    maps: &mut impl PolicyMaps,
    mirror: &mut Tables,
    want: &Tables,
) -> Result<Reconciled, PolicyError> {
    let (have, unreadable) = maps.read()?;
    let kept = same(&have.rules, &want.rules)
        + same(&have.cidrs, &want.cidrs)
        + same(&have.sg_members, &want.sg_members)
        + same(&have.np_idents, &want.np_idents)
        + have.hf_self.intersection(&want.hf_self).count();
    *mirror = have;
    let d = Diff::between(mirror, want);
    let mut applied = apply(maps, mirror, &d)?;
    let purged = if unreadable > 0 {
        maps.purge_unreadable()?
    } else {
        0
    };
    if purged > 0 && !applied.bumped {
        maps.op(&Op::Bump)?;
        applied.bumped = true;
    }
    Ok(Reconciled {
        kept,
        applied,
        purged,
    })
}

fn same<K: Ord, V: PartialEq>(have: &BTreeMap<K, V>, want: &BTreeMap<K, V>) -> usize {
    have.iter().filter(|(k, v)| want.get(k) == Some(v)).count()
}

#[cfg(test)]
#[path = "apply_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "apply_admin_tests.rs"]
mod admin_tests;
