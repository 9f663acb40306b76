//! One pool's hints: which values are taken, as this process last saw them, and which are
//! handed to creates in flight.
//!
//! A pool is the addresses of one VNI and family, the VNIs, or the group ids of one VPC. Its
//! taken set is kept by the [claim cache](super::cache) from the storage watch of the claim
//! keys and from this process's own committed writes; picks never list storage. The hints may
//! be wrong in both directions for a moment — storage decides — but a wrong hint only costs a
//! retry or a non-lowest pick, and an empty-looking pool is re-read from storage before a 507.
//! Each pool has its own lock, so creates in unrelated pools never wait for each other.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use cozyplane_storage::Revision;

use super::intervals::{self, IntervalSet};

/// The hints of one pool.
#[derive(Debug, Default)]
pub struct Pool {
    taken: IntervalSet,
    inflight: HashSet<u128>,
    /// This process's writes the watch has not delivered yet: value → (revision, taken). A
    /// watched change older than one of these is already superseded and must not undo it.
    local: HashMap<u128, (Revision, bool)>,
}

/// A pool behind its own lock.
pub type SharedPool = Arc<Mutex<Pool>>;

/// Locks a pool; a panic elsewhere cannot leave a pool in a state worse than a stale hint.
pub fn lock(p: &SharedPool) -> MutexGuard<'_, Pool> {
    p.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Pool {
    fn set(&mut self, v: u128, taken: bool) {
        if taken {
            self.taken.insert(v);
        } else {
            self.taken.remove(v);
        }
    }

    /// A change the storage watch delivered.
    pub fn watched(&mut self, v: u128, rev: Revision, taken: bool) {
        if let Some((local_rev, _)) = self.local.get(&v) {
            if rev < *local_rev {
                return;
            }
            self.local.remove(&v);
        }
        self.set(v, taken);
    }

    /// A change this process wrote (or saw in a failed transaction) at `rev`, before the watch
    /// delivers it.
    pub fn wrote(&mut self, v: u128, rev: Revision, taken: bool) {
        self.local.insert(v, (rev, taken));
        self.set(v, taken);
    }

    /// Replaces the taken set with a listing at `at`; local writes after it are kept.
    pub fn reset(&mut self, taken: IntervalSet, at: Revision) {
        self.taken = taken;
        self.local.retain(|_, (rev, _)| *rev > at);
        let local: Vec<(u128, bool)> = self.local.iter().map(|(v, (_, t))| (*v, *t)).collect();
        for (v, t) in local {
            self.set(v, t);
        }
    }

    /// Picks the first free value of `range` (from the top if `down`) that is not in flight
    /// and not in `avoid`, and marks it in flight.
    pub fn pick(&mut self, range: (u128, u128), down: bool, avoid: &BTreeSet<u128>) -> Option<u128> {
        let inflight = &self.inflight;
        let v = intervals::pick(&self.taken, range, down, |v| {
            inflight.contains(&v) || avoid.contains(&v)
        })?;
        self.inflight.insert(v);
        Some(v)
    }
}

/// A value handed out to one create attempt; no longer in flight once settled or dropped (so
/// an attempt that ends early cannot keep a value out of use). The taken set learns the
/// outcome from the transaction itself, see [`super::cache::ClaimCache`].
#[derive(Debug)]
pub struct Reservation {
    pool: SharedPool,
    value: u128,
}

impl Reservation {
    /// Reserves `value` of `pool` (already marked in flight by [`Pool::pick`]).
    pub fn new(pool: SharedPool, value: u128) -> Self {
        Self { pool, value }
    }

    /// The attempt is decided: the value is no longer in flight.
    pub fn settle(self) {}
}

impl Drop for Reservation {
    fn drop(&mut self) {
        lock(&self.pool).inflight.remove(&self.value);
    }
}
