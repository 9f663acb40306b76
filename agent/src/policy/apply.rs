//! Writing a compiler [`Diff`] to the maps in an order that never lets a packet meet a state
//! allowing what neither the old nor the new policy allows, then bumping the generation when
//! something may have narrowed.
//!
//! The datapath admits a peer if any of its three tokens (own identity or net, CIDR class,
//! any) finds an admitting rule, and an NP subject is isolated only while its marker entry
//! exists. So writing an allow entry can only widen, towards the new state; deleting one
//! or adding a marker can only narrow, towards it. The order:
//!
//! 1. rule upserts, allow entries first, then isolation markers: a subject becomes isolated
//!    only once the rules that reopen what the new policy allows are in;
//! 2. CIDR class upserts: an address moves to a new, longer class only once that class has
//!    its rules (until then it keeps its old class and old verdict);
//! 3. endpoint groups, identities and this node's addresses, written: an address takes its
//!    new token once every rule naming the token is in;
//! 4. the same, deleted (an address without a token is judged by its class and "any", which
//!    the new rules already answer for);
//! 5. the armed HostFirewall directions (arming after its rules; disarming before they go);
//! 6. CIDR class deletes, shortest prefix first: an address whose longest class goes falls
//!    back to the next longest, which is either kept (new rules) or about to go and still
//!    carries the old rules, so it is judged by the old or the new state, never a third;
//! 7. rule deletes, isolation markers first (a subject the new policy leaves open is opened
//!    before its rules go), then allow entries;
//! 8. if the change removed or overwrote anything ([`Diff::narrows`]), bump
//!    `sdn_pol_state.generation`, so established flows are re-checked on their next packet.
//!
//! A packet between two writes is judged against a state whose every lookup returns the old
//! or the new answer. The writes of steps 1–3 may deny for a moment what both allow (a class
//! or identity written before a rule of the other lookup order): fail closed, never open.

use std::time::Instant;

use cozyplane_policy::model::{Diff, PEER_ISOLATED, Tables};

use super::PolicyError;
use super::maps::{Op, PolicyMaps};

/// What [`apply`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// Entry writes and deletes.
    pub ops: usize,
    /// Whether the generation was bumped.
    pub bumped: bool,
    /// Seconds spent writing.
    pub seconds: f64,
}

/// The operations for `d`, in the order of the module docs (the generation bump last).
pub fn ops(d: &Diff) -> Vec<Op> {
    let mut out = Vec::with_capacity(d.len() + 1);
    let marker = |k: &cozyplane_policy::model::RuleKey| k.peer == PEER_ISOLATED;
    // 1. Rules: allow entries, then markers.
    out.extend(
        d.rules
            .upsert
            .iter()
            .filter(|(k, _)| !marker(k))
            .map(|(k, v)| Op::Rule(*k, *v)),
    );
    out.extend(
        d.rules
            .upsert
            .iter()
            .filter(|(k, _)| marker(k))
            .map(|(k, v)| Op::Rule(*k, *v)),
    );
    // 2. Classes.
    out.extend(d.cidrs.upsert.iter().map(|(k, c)| Op::Cidr(*k, *c)));
    // 3. Tokens written.
    out.extend(d.sg_members.upsert.iter().map(|(k, g)| Op::Member(*k, *g)));
    out.extend(d.np_idents.upsert.iter().map(|(ip, id)| Op::Ident(*ip, *id)));
    out.extend(d.hf_self.upsert.iter().map(|(ip, ())| Op::SelfAddr(*ip)));
    // 4. Tokens deleted.
    out.extend(d.sg_members.remove.iter().map(|k| Op::Unmember(*k)));
    out.extend(d.np_idents.remove.iter().map(|ip| Op::Unident(*ip)));
    out.extend(d.hf_self.remove.iter().map(|ip| Op::Unself(*ip)));
    // 5. Armed directions.
    out.extend(d.state_flags.map(Op::Flags));
    // 6. Classes deleted, shortest first.
    let mut cidrs = d.cidrs.remove.clone();
    cidrs.sort_by_key(|k| k.prefix.len);
    out.extend(cidrs.into_iter().map(Op::Uncidr));
    // 7. Rules deleted: markers, then allow entries.
    out.extend(d.rules.remove.iter().filter(|k| marker(k)).map(|k| Op::Unrule(*k)));
    out.extend(d.rules.remove.iter().filter(|k| !marker(k)).map(|k| Op::Unrule(*k)));
    // 8. Re-check established flows.
    if d.narrows() {
        out.push(Op::Bump);
    }
    out
}

/// Write `d` to `maps` (see the module docs). Stops at the first failed write: the maps
/// are then somewhere between the old and the new state, and the caller reconciles.
pub fn apply(maps: &mut impl PolicyMaps, d: &Diff) -> Result<Applied, PolicyError> {
    let started = Instant::now();
    let ops = ops(d);
    for op in &ops {
        maps.op(op)?;
    }
    Ok(Applied {
        ops: ops.len(),
        bumped: ops.last() == Some(&Op::Bump),
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// What a reconcile found and did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reconciled {
    /// Entries the maps held that the compilers agree with, left untouched.
    pub kept: usize,
    /// The writes.
    pub applied: Applied,
    /// Entries no compiler would write in any form, removed.
    pub purged: usize,
}

/// Bring whatever the maps hold (a previous agent's entries, a half-applied change) to
/// `want`, the compilers' full output: entries that agree stay as they are, the rest is
/// written as one [`Diff`] in the safe order. Entries this agent cannot read at all are
/// removed last (nothing of ours looks them up; a generation bump follows).
pub fn reconcile(maps: &mut impl PolicyMaps, want: &Tables) -> Result<Reconciled, PolicyError> {
    let (have, unreadable) = maps.read()?;
    let d = Diff::between(&have, want);
    let kept = same(&have.rules, &want.rules)
        + same(&have.cidrs, &want.cidrs)
        + same(&have.sg_members, &want.sg_members)
        + same(&have.np_idents, &want.np_idents)
        + have.hf_self.intersection(&want.hf_self).count();
    let mut applied = apply(maps, &d)?;
    let purged = if unreadable > 0 { maps.purge_unreadable()? } else { 0 };
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

fn same<K: Ord, V: PartialEq>(
    have: &std::collections::BTreeMap<K, V>,
    want: &std::collections::BTreeMap<K, V>,
) -> usize {
    have.iter().filter(|(k, v)| want.get(k) == Some(v)).count()
}

#[cfg(test)]
#[path = "apply_tests.rs"]
mod tests;
