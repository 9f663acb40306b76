//! The watch cache: one storage watch per resource feeds an in-memory copy of every object and
//! a bounded history of changes, from which lists and watches are served.
//!
//! Each object is kept as its JSON bytes, encoded once when the change arrives, with the compact
//! form selectors read ([`Cached`]); lists and watch events are assembled from those bytes.
//! Which lists the cache answers, and when storage does, is `cache/list.rs`'s concern. Watches
//! replay the history after their start revision and then follow a broadcast; a start revision
//! older than the history, or a watcher too slow for the broadcast, ends with `410 Gone` so the
//! client relists.

use std::collections::{BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use cozyplane_storage::{Event, ListOptions, Revision};
use futures::StreamExt;
use tokio::sync::{broadcast, watch};

use super::Resource;
use crate::errors::{ApiError, Result};

mod list;
mod object;

pub use object::Cached;
use object::Entry;

/// Whether `storage`'s progress notifications prove what a cache of it holds: etcd before
/// 3.4.25 / 3.5.8 may send one before the events it vouches for (etcd-io/etcd#15220; Debian
/// ships 3.4.23), there only events do. The embedded store's notifications follow its events.
fn trusts_progress(storage: &dyn cozyplane_storage::Storage) -> bool {
    storage.backend() != "etcd"
}

/// How often a cache's storage watch asks for progress. Where progress proves the cache
/// current, often: a consistent list served from the cache after a write to another kind
/// waits for the next one. Where it proves nothing (etcd), it only moves watchers' bookmarks,
/// which go out every [`PROGRESS_EVERY`]; asking more often costs etcd for nothing (an idle
/// server's 14 watch streams asking every 200 ms were 2.5 % of a core of etcd's CPU, 2026-12-03).
pub(crate) fn progress_interval(storage: &dyn cozyplane_storage::Storage) -> Duration {
    if trusts_progress(storage) {
        Duration::from_millis(200)
    } else {
        PROGRESS_EVERY
    }
}

/// How many changes a cache remembers for watches that start in the past (and for continue
/// pages it serves at a past revision).
const HISTORY: usize = 1024;

/// How often progress reaches the watchers (their bookmarks are at least 5 s apart).
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// How many encodings of one change [`EventLines`] holds: three event types (`ADDED`,
/// `MODIFIED`, `DELETED`) in each of five forms (the object, PartialObjectMetadata, and a Table
/// row with each `includeObject`).
pub const EVENT_FORMS: usize = 15;

/// The watch event lines of one change, encoded on first use and shared by every watcher that
/// sends the change in the same form.
#[derive(Debug, Default)]
pub struct EventLines([OnceLock<Bytes>; EVENT_FORMS]);

impl EventLines {
    /// The line in slot `index` (the watch handler numbers the forms), made by `make` the first
    /// time it is asked for.
    pub fn get(&self, index: usize, make: impl FnOnce() -> Bytes) -> Bytes {
        self.0[index.min(EVENT_FORMS - 1)].get_or_init(make).clone()
    }
}

/// One change as the cache saw it. Cloning shares the objects and their encoded events.
#[derive(Clone, Debug)]
pub enum Change {
    /// An object was created or replaced: its new state and, if it existed, its old one.
    Put {
        /// New state, with `resourceVersion`.
        obj: Arc<Cached>,
        /// Previous state.
        prev: Option<Arc<Cached>>,
        /// The change's watch events, encoded once.
        lines: Arc<EventLines>,
    },
    /// An object was deleted.
    Delete {
        /// Last state, with the deletion's `resourceVersion` (what a `DELETED` event carries).
        obj: Arc<Cached>,
        /// Last state as it was stored, with its own `resourceVersion`.
        prev: Arc<Cached>,
        /// The change's watch events, encoded once.
        lines: Arc<EventLines>,
    },
    /// Everything up to `revision` has been delivered.
    Progress {
        /// The revision.
        revision: Revision,
    },
}

impl Change {
    fn revision(&self) -> Revision {
        match self {
            Change::Put { obj, .. } | Change::Delete { obj, .. } => obj.rv(),
            Change::Progress { revision } => *revision,
        }
    }

    /// The object's key and its state before the change (`None`: absent).
    fn before(&self) -> Option<(&str, Option<&Arc<Cached>>)> {
        match self {
            Change::Put { obj, prev, .. } => Some((obj.key(), prev.as_ref())),
            Change::Delete { obj, prev, .. } => Some((obj.key(), Some(prev))),
            Change::Progress { .. } => None,
        }
    }
}

#[derive(Default)]
struct State {
    objects: BTreeSet<Entry>,
    /// The newest revision the cache has heard of (events and progress notifications).
    revision: Revision,
    /// The newest revision the cache's contents are proven to reflect: every change of the
    /// resource up to it has been applied. Progress notifications count only where the backend's
    /// can be trusted (see [`WatchCache::run`]).
    confirmed: Revision,
    /// Changes after `oldest`, in order.
    history: VecDeque<Change>,
    /// The history covers every change after this revision.
    oldest: Revision,
    /// A revision past `confirmed` that storage showed to differ from the cache's contents
    /// (`cache/list.rs`): not asked about again.
    unproven: Revision,
    ready: bool,
}

/// The cache of one resource.
pub struct WatchCache {
    resource: Arc<dyn Resource>,
    state: Mutex<State>,
    events: broadcast::Sender<Change>,
    revision: watch::Sender<Revision>,
}

impl WatchCache {
    /// Starts the cache of `resource`: a task lists and then watches the whole resource.
    pub fn start(resource: Arc<dyn Resource>) -> Arc<Self> {
        let (events, _) = broadcast::channel(HISTORY);
        let (revision, _) = watch::channel(0);
        let c = Arc::new(Self {
            resource,
            state: Mutex::new(State::default()),
            events,
            revision,
        });
        let weak = Arc::downgrade(&c);
        tokio::spawn(async move {
            loop {
                let Some(c) = weak.upgrade() else { return };
                if let Err(e) = c.run().await {
                    tracing::warn!(resource = c.resource.info().plural, error = %e, "watch cache restarts");
                }
                drop(c);
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        });
        c
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn cached(&self, key: &str, value: &[u8], rev: Revision) -> Result<Arc<Cached>> {
        Cached::decode(&*self.resource, key, value, rev).map(Arc::new)
    }

    /// Whether the backend's progress notifications prove what the cache holds.
    fn trusts_progress(&self) -> bool {
        trusts_progress(&**self.resource.storage())
    }

    /// One list-then-watch cycle; returns when the storage watch ends.
    async fn run(&self) -> Result<()> {
        let prefix = self.resource.prefix(None);
        let storage = self.resource.storage().clone();
        let trust_progress = self.trusts_progress();
        let mut objects = BTreeSet::new();
        let mut opts = ListOptions {
            limit: Some(500),
            ..Default::default()
        };
        let revision = loop {
            let page = storage
                .list(&prefix, &opts)
                .await
                .map_err(|e| ApiError::from_storage(self.resource.info(), "", e))?;
            for kv in &page.items {
                objects.insert(Entry(self.cached(&kv.key, &kv.value, kv.mod_revision)?));
            }
            match page.continue_token {
                Some(t) => opts.continue_token = Some(t),
                None => break page.revision,
            }
        };
        {
            let mut st = self.lock();
            // A relist invalidates every position before it: watchers from older revisions
            // must relist too.
            *st = State {
                objects,
                revision,
                confirmed: revision,
                history: VecDeque::new(),
                oldest: revision,
                unproven: 0,
                ready: true,
            };
        }
        self.revision.send_replace(revision);
        let mut progress_sent = tokio::time::Instant::now();
        let mut stream = self.resource.watch(None, Some(revision)).await?;
        while let Some(ev) = stream.next().await {
            let ev = ev.map_err(|e| ApiError::from_storage(self.resource.info(), "", e))?;
            // Decoding and encoding happen here, once per change, outside the lock.
            let change = match ev {
                Event::Put { kv, prev } => {
                    let obj = self.cached(&kv.key, &kv.value, kv.mod_revision)?;
                    let known = self.lock().objects.get(obj.key()).map(|e| e.0.clone());
                    let prev = match (known, prev) {
                        (Some(k), _) => Some(k),
                        (None, Some(p)) => Some(self.cached(&p.key, &p.value, p.mod_revision)?),
                        (None, None) => None,
                    };
                    Change::Put {
                        obj,
                        prev,
                        lines: Arc::default(),
                    }
                }
                Event::Delete {
                    key,
                    revision,
                    prev: Some(p),
                } => {
                    let obj = self.cached(&key, &p.value, revision)?;
                    let known = self.lock().objects.get(obj.key()).map(|e| e.0.clone());
                    let prev = match known {
                        Some(k) => k,
                        None => self.cached(&key, &p.value, p.mod_revision)?,
                    };
                    Change::Delete {
                        obj,
                        prev,
                        lines: Arc::default(),
                    }
                }
                Event::Delete {
                    revision, prev: None, ..
                } => Change::Progress { revision },
                Event::Progress { revision } => Change::Progress { revision },
            };
            let rev = change.revision();
            {
                let mut st = self.lock();
                match &change {
                    Change::Put { obj, .. } => {
                        st.objects.replace(Entry(obj.clone()));
                    }
                    Change::Delete { obj, .. } => {
                        st.objects.remove(obj.key());
                    }
                    Change::Progress { .. } => {}
                }
                st.revision = st.revision.max(rev);
                if trust_progress || !matches!(change, Change::Progress { .. }) {
                    st.confirmed = st.confirmed.max(rev);
                }
                if !matches!(change, Change::Progress { .. }) {
                    st.history.push_back(change.clone());
                    if st.history.len() > HISTORY
                        && let Some(old) = st.history.pop_front()
                    {
                        st.oldest = old.revision();
                    }
                }
                // Every subscriber wakes for every broadcast: progress (storage ticks several
                // times a second) goes out only as often as watchers can use it for bookmarks.
                let progress = matches!(change, Change::Progress { .. });
                if !progress || progress_sent.elapsed() >= PROGRESS_EVERY {
                    if progress {
                        progress_sent = tokio::time::Instant::now();
                    }
                    // Sent under the lock so a subscriber that snapshots under it sees each
                    // change exactly once: either in its snapshot or from the channel.
                    let _ = self.events.send(change);
                }
            }
            self.revision.send_replace(rev);
        }
        Ok(())
    }

    /// Object `name` in `ns` (`None` for a cluster-scoped kind) as the cache holds it, once it
    /// has listed; `None` if the cache does not know it (absent, created a moment ago, or the
    /// cache is not ready yet).
    pub fn object(&self, ns: Option<&str>, name: &str) -> Option<Arc<Cached>> {
        // Entries are keyed relative to the kind's prefix (see `Cached::key`).
        let key: std::borrow::Cow<'_, str> = match ns.filter(|_| self.resource.info().namespaced) {
            Some(ns) => format!("{ns}/{name}").into(),
            None => name.into(),
        };
        let st = self.lock();
        if !st.ready {
            return None;
        }
        st.objects.get(&*key).map(|e| e.0.clone())
    }

    /// Waits until the cache has heard of `rev` (at most `wait`); `false` if it has not.
    async fn caught_up(&self, rev: Revision, wait: Duration) -> bool {
        let mut rx = self.revision.subscribe();
        tokio::time::timeout(wait, rx.wait_for(|r| *r >= rev))
            .await
            .is_ok_and(|r| r.is_ok())
            && self.lock().ready
    }

    /// Subscribes from `from` (exclusive) or, with `initial`, from a snapshot: returns the
    /// snapshot objects of namespace `ns` (empty without `initial`), its revision, the replayed
    /// history and the live receiver.
    pub async fn subscribe(
        &self,
        ns: Option<&str>,
        from: Option<Revision>,
        initial: bool,
    ) -> Result<(
        Vec<Arc<Cached>>,
        Revision,
        Vec<Change>,
        broadcast::Receiver<Change>,
    )> {
        let target = match from {
            Some(r) if r > 0 => r,
            _ => self
                .resource
                .storage()
                .current_revision()
                .await
                .map_err(|e| ApiError::from_storage(self.resource.info(), "", e))?,
        };
        if !self.caught_up(target, Duration::from_secs(5)).await {
            return Err(ApiError::timeout(format!("Too large resource version: {target}")));
        }
        let st = self.lock();
        let rx = self.events.subscribe();
        if initial {
            let items = st
                .objects
                .iter()
                .filter(|e| ns.is_none_or(|ns| e.0.namespace() == ns))
                .map(|e| e.0.clone())
                .collect();
            return Ok((items, st.revision, Vec::new(), rx));
        }
        let from = from.unwrap_or(st.revision);
        if from < st.oldest {
            return Err(ApiError::gone(format!(
                "too old resource version: {from} ({})",
                st.oldest
            )));
        }
        let replay = st
            .history
            .iter()
            .filter(|c| c.revision() > from)
            .cloned()
            .collect();
        Ok((Vec::new(), from, replay, rx))
    }

    /// The resource this cache serves.
    pub fn resource(&self) -> &Arc<dyn Resource> {
        &self.resource
    }
}
