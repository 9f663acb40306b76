//! A typed mirror of one kind, fed by the kind's watch cache (the server's own informer).
//!
//! Controllers read the objects they reconcile from mirrors, never by listing storage, and
//! learn what changed from the mirror's callback: the work per change is proportional to what
//! the change touches, not to the size of the collection.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde::de::DeserializeOwned;
use tokio::sync::broadcast::error::RecvError;

use crate::registry::cache::{Cached, Change, WatchCache};

/// `(namespace, name)`; the namespace is empty for cluster-scoped kinds.
pub type Key = (String, String);

/// One change of a mirrored object: its state before and after (`None`: absent).
pub struct Changed<'a, K> {
    /// The state before the change.
    pub old: Option<&'a K>,
    /// The state after the change.
    pub new: Option<&'a K>,
}

/// The objects of one kind, by namespace and name.
pub struct Mirror<K> {
    objects: RwLock<BTreeMap<Key, Arc<K>>>,
}

impl<K> Default for Mirror<K> {
    fn default() -> Self {
        Self {
            objects: RwLock::default(),
        }
    }
}

fn key_of(o: &Cached) -> Key {
    (o.namespace().to_string(), o.name().to_string())
}

impl<K: DeserializeOwned + Send + Sync + 'static> Mirror<K> {
    /// The object `ns`/`name`.
    pub fn get(&self, ns: &str, name: &str) -> Option<Arc<K>> {
        self.read().get(&(ns.to_string(), name.to_string())).cloned()
    }

    /// The objects of namespace `ns` (a range of the ordered map, not a scan of all).
    pub fn in_namespace(&self, ns: &str) -> Vec<Arc<K>> {
        let from = (ns.to_string(), String::new());
        self.read()
            .range(from..)
            .take_while(|((n, _), _)| n == ns)
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// Every object (for a resync).
    pub fn all(&self) -> Vec<Arc<K>> {
        self.read().values().cloned().collect()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<Key, Arc<K>>> {
        self.objects
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn apply(&self, key: Key, new: Option<Arc<K>>) -> Option<Arc<K>> {
        let mut m = self
            .objects
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match new {
            Some(n) => m.insert(key, n),
            None => m.remove(&key),
        }
    }

    /// Follows `cache` for as long as the task runs: fills the mirror from a snapshot, then
    /// applies every change, calling `on_change` after each. A snapshot reports every object
    /// as new; objects gone since the previous snapshot are reported deleted.
    pub fn follow<F>(self: &Arc<Self>, cache: Arc<WatchCache>, on_change: F) -> tokio::task::JoinHandle<()>
    where
        F: Fn(Changed<'_, K>) + Send + Sync + 'static,
    {
        let mirror = self.clone();
        tokio::spawn(async move {
            loop {
                let (items, _, _, mut rx) = match cache.subscribe(None, None, true).await {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::debug!(error = %e, "mirror waits for its watch cache");
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        continue;
                    }
                };
                let mut seen = std::collections::HashSet::new();
                for v in items {
                    let key = key_of(&v);
                    seen.insert(key.clone());
                    mirror.put(key, &v, &on_change);
                }
                let gone: Vec<Key> = mirror
                    .read()
                    .keys()
                    .filter(|k| !seen.contains(*k))
                    .cloned()
                    .collect();
                for key in gone {
                    if let Some(old) = mirror.apply(key, None) {
                        on_change(Changed {
                            old: Some(&old),
                            new: None,
                        });
                    }
                }
                loop {
                    match rx.recv().await {
                        Ok(Change::Put { obj, .. }) => mirror.put(key_of(&obj), &obj, &on_change),
                        Ok(Change::Delete { obj, .. }) => {
                            if let Some(old) = mirror.apply(key_of(&obj), None) {
                                on_change(Changed {
                                    old: Some(&old),
                                    new: None,
                                });
                            }
                        }
                        Ok(Change::Progress { .. }) => {}
                        // Too slow for the broadcast, or the cache restarted: take a new snapshot.
                        Err(RecvError::Lagged(_) | RecvError::Closed) => break,
                    }
                }
            }
        })
    }

    fn put<F: Fn(Changed<'_, K>)>(&self, key: Key, v: &Cached, on_change: &F) {
        let new = match serde_json::from_slice::<K>(v.json()) {
            Ok(n) => Arc::new(n),
            Err(e) => {
                tracing::warn!(?key, error = %e, "mirror skips an object it cannot decode");
                return;
            }
        };
        let old = self.apply(key, Some(new.clone()));
        on_change(Changed {
            old: old.as_deref(),
            new: Some(&new),
        });
    }
}
