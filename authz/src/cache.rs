//! A small time-to-live cache for review results.

use std::{
    collections::HashMap,
    hash::Hash,
    sync::Mutex,
    time::{Duration, Instant},
};

/// Entries beyond this count trigger a sweep of expired entries (and a reset if all are live),
/// so a flood of distinct tokens cannot grow memory without bound.
const MAX_ENTRIES: usize = 4096;

/// Maps keys to values that expire after a per-entry TTL.
#[derive(Debug)]
pub(crate) struct TtlCache<K, V> {
    entries: Mutex<HashMap<K, (Instant, V)>>,
}

impl<K: Eq + Hash, V: Clone> TtlCache<K, V> {
    pub(crate) fn new() -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// The live value for `key`, if any.
    pub(crate) fn get(&self, key: &K) -> Option<V> {
        let mut entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match entries.get(key) {
            Some((expires, value)) if *expires > Instant::now() => Some(value.clone()),
            Some(_) => {
                entries.remove(key);
                None
            }
            None => None,
        }
    }

    /// Stores `value` for `ttl`; a zero TTL stores nothing.
    pub(crate) fn insert(&self, key: K, value: V, ttl: Duration) {
        if ttl.is_zero() {
            return;
        }
        let now = Instant::now();
        let mut entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if entries.len() >= MAX_ENTRIES {
            entries.retain(|_, (expires, _)| *expires > now);
            if entries.len() >= MAX_ENTRIES {
                entries.clear();
            }
        }
        entries.insert(key, (now + ttl, value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_expire() {
        let cache = TtlCache::new();
        cache.insert("a", 1, Duration::from_millis(20));
        cache.insert("z", 2, Duration::ZERO);
        assert_eq!(cache.get(&"a"), Some(1));
        assert_eq!(cache.get(&"z"), None);
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(cache.get(&"a"), None);
    }

    #[test]
    fn size_is_bounded() {
        let cache = TtlCache::new();
        for i in 0..(MAX_ENTRIES * 2) {
            cache.insert(i, i, Duration::from_secs(60));
        }
        assert!(cache.entries.lock().expect("not poisoned").len() <= MAX_ENTRIES);
    }
}
