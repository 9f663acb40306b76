//! The watch kit the core's watch and every feature's share: a cache fed by list+watch
//! ([`Cache`]), and the difference between what is wanted and what is pinned ([`plan`],
//! [`pinned`]).

use std::collections::HashMap;

use kube::runtime::watcher::{self, Event};

/// Whether an event can change the live cache (a list's items land only at `InitDone`).
pub(crate) fn changes_live<O>(r: &Result<Event<O>, watcher::Error>) -> bool {
    matches!(r, Ok(Event::InitDone | Event::Apply(_) | Event::Delete(_)))
}

/// A cache fed by list+watch: `Init` starts a new list, `InitDone` swaps it in.
pub(crate) struct Cache<K, V> {
    pub(crate) live: HashMap<K, V>,
    pending: Option<HashMap<K, V>>,
    pub(crate) synced: bool,
}

impl<K: std::hash::Hash + Eq, V> Cache<K, V> {
    pub(crate) fn new() -> Self {
        Self {
            live: HashMap::new(),
            pending: None,
            synced: false,
        }
    }

    pub(crate) fn apply<O>(
        &mut self,
        ev: Event<O>,
        row: impl Fn(&O) -> Option<(K, V)>,
        key: impl Fn(&O) -> K,
    ) {
        match ev {
            Event::Init => self.pending = Some(HashMap::new()),
            Event::InitApply(o) => {
                if let (Some(p), Some((k, v))) = (self.pending.as_mut(), row(&o)) {
                    p.insert(k, v);
                }
            }
            Event::InitDone => {
                if let Some(p) = self.pending.take() {
                    self.live = p;
                }
                self.synced = true;
            }
            Event::Apply(o) => match row(&o) {
                Some((k, v)) => {
                    self.live.insert(k, v);
                }
                None => {
                    self.live.remove(&key(&o));
                }
            },
            Event::Delete(o) => {
                self.live.remove(&key(&o));
            }
        }
    }
}

pub(crate) fn name_of(m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> (String, String) {
    (
        m.namespace.clone().unwrap_or_default(),
        m.name.clone().unwrap_or_default(),
    )
}

/// What turns `applied` into `want`: the entries to write (new or changed) and the ones to
/// remove, which only `prunable` keys are (an owner's list has not completed otherwise).
pub(crate) fn plan<K: Copy + Eq + std::hash::Hash, V: Copy + PartialEq>(
    want: &HashMap<K, V>,
    applied: &HashMap<K, V>,
    prunable: impl Fn(&K) -> bool,
) -> (Vec<(K, V)>, Vec<K>) {
    let write = want
        .iter()
        .filter(|(k, v)| applied.get(k) != Some(v))
        .map(|(k, v)| (*k, *v))
        .collect();
    let remove = applied
        .keys()
        .filter(|k| !want.contains_key(k) && prunable(k))
        .copied()
        .collect();
    (write, remove)
}

/// The entries of a pinned map as `open` and `read` give them, or none when it cannot be
/// opened or read: a watch adopts them at start, so a restart removes only what the API
/// lacks (and with nothing adopted, it writes everything again).
pub(crate) fn pinned<M, T>(
    open: Result<M, aya::maps::MapError>,
    read: impl FnOnce(&M) -> Result<Vec<T>, aya::maps::MapError>,
) -> impl Iterator<Item = T> {
    open.and_then(|m| read(&m)).unwrap_or_default().into_iter()
}
