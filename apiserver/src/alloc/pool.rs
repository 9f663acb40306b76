//! The per-process hint cache: which values of a pool are taken, as last seen.
//!
//! A pool (the addresses of one VNI and family, the VNIs, the group ids of one VPC) is loaded
//! by listing its claim keys, at most once per [`REFRESH`] unless invalidated, and updated by
//! this process's own outcomes. Values handed to in-flight creates are *reserved* so that
//! concurrent requests of one process pick different candidates. The cache may be wrong in
//! both directions — storage decides — but a wrong hint only costs a retry or a non-lowest
//! pick until the next refresh.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use cozyplane_storage::{ListOptions, Storage};

use super::addr;
use crate::errors::Result;

/// How long a listing is trusted.
pub const REFRESH: Duration = Duration::from_secs(1);

#[derive(Default)]
struct Pool {
    taken: BTreeSet<u128>,
    inflight: BTreeSet<u128>,
    fetched: Option<Instant>,
}

static POOLS: LazyLock<Mutex<HashMap<String, Pool>>> = LazyLock::new(Default::default);

fn pools() -> std::sync::MutexGuard<'static, HashMap<String, Pool>> {
    POOLS.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The cache key of pool `name` on `storage` (several stores may live in one process).
pub fn cache_key(storage: &Arc<dyn Storage>, name: &str) -> String {
    format!("{:x}:{name}", Arc::as_ptr(storage).cast::<()>() as usize)
}

/// A value handed out to one create attempt.
#[derive(Debug)]
pub struct Reservation {
    pool: String,
    value: u128,
    key: String,
}

impl Reservation {
    /// Records the outcome: taken if committed or found taken (`lost` holds its key).
    pub fn settle(self, committed: bool, lost: &[String]) {
        let mut p = pools();
        let pool = p.entry(self.pool).or_default();
        pool.inflight.remove(&self.value);
        if committed || lost.contains(&self.key) {
            pool.taken.insert(self.value);
        }
    }
}

/// Makes every cached copy of pool `name` reload on next use (after a local release).
pub fn invalidate(name: &str) {
    let suffix = format!(":{name}");
    for (k, pool) in pools().iter_mut() {
        if k.ends_with(&suffix) {
            pool.fetched = None;
        }
    }
}

/// Loads pool `name` from the claim keys under `prefix` if the cache is stale. `parse` turns
/// the key suffix after `prefix` into a value (or `None` to skip the key).
pub async fn refresh(
    storage: &Arc<dyn Storage>,
    name: &str,
    prefix: &str,
    parse: impl Fn(&str) -> Option<u128>,
) -> Result<()> {
    let ck = cache_key(storage, name);
    let fresh = pools()
        .get(&ck)
        .and_then(|p| p.fetched)
        .is_some_and(|t| t.elapsed() < REFRESH);
    if fresh {
        return Ok(());
    }
    let r = storage
        .list(prefix, &ListOptions::default())
        .await
        .map_err(|e| super::storage_error(&e))?;
    let taken: BTreeSet<u128> = r
        .items
        .iter()
        .filter_map(|kv| kv.key.strip_prefix(prefix).and_then(&parse))
        .collect();
    let mut p = pools();
    let pool = p.entry(ck).or_default();
    pool.taken = taken;
    pool.fetched = Some(Instant::now());
    Ok(())
}

/// Picks and reserves the first value of `lo..=hi` (from the top if `down`) that is neither
/// cached as taken, reserved, nor in `avoid`. `key_of` names the claim key of a value.
pub fn pick(
    storage: &Arc<dyn Storage>,
    name: &str,
    (lo, hi): (u128, u128),
    down: bool,
    avoid: &BTreeSet<u128>,
    key_of: impl Fn(u128) -> String,
) -> Option<(u128, Reservation)> {
    let ck = cache_key(storage, name);
    let mut p = pools();
    let pool = p.entry(ck.clone()).or_default();
    let v = addr::first_free(lo, hi, down, &[&pool.taken, &pool.inflight, avoid])?;
    pool.inflight.insert(v);
    Some((
        v,
        Reservation {
            pool: ck,
            value: v,
            key: key_of(v),
        },
    ))
}
