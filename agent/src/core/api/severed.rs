//! Uids of this node's Ports seen terminating or gone: written by the revocation feature
//! (`features/sever`) when it severs, read by ADD after it recorded an attachment (an
//! ADD racing the reap fails instead of wiring a revoked pod). Shared by the two, so it is
//! the core's.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long a severed Port's uid is remembered: far longer than an ADD takes (the race it is
/// for), short enough that pod churn does not grow the table.
const REMEMBER: Duration = Duration::from_secs(600);

/// Uids of this node's Ports seen terminating or gone (uids, not names: a Port's name is made
/// from its address, and the next Port of that address has the same one).
#[derive(Debug, Default)]
pub struct Severed(Mutex<HashMap<String, Instant>>);

impl Severed {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the Port of `uid` was seen terminating or gone.
    pub fn contains(&self, uid: &str) -> bool {
        self.map().contains_key(uid)
    }

    /// Note that the Port of `uid` is terminating or gone.
    pub fn insert(&self, uid: &str) {
        let mut m = self.map();
        let now = Instant::now();
        m.retain(|_, at| now.duration_since(*at) < REMEMBER);
        m.insert(uid.to_string(), now);
    }
}
