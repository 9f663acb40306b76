//! The watch cache: one storage watch per resource feeds an in-memory copy of every object and
//! a bounded history of changes, from which lists and watches are served.
//!
//! Lists without paging state read the cache once it has caught up with the store's current
//! revision (a consistent read, as Go's cacher does since 1.31), and fall back to storage
//! otherwise. Watches replay the history after their start revision and then follow a broadcast;
//! a start revision older than the history, or a watcher too slow for the broadcast, ends with
//! `410 Gone` so the client relists.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cozyplane_storage::{Event, ListOptions, Revision};
use futures::StreamExt;
use serde_json::Value;
use tokio::sync::{broadcast, watch};

use super::Resource;
use super::store::{ListPage, ListParams};
use crate::errors::{ApiError, Result};

/// How many changes a cache remembers for watches that start in the past.
const HISTORY: usize = 1024;

/// One change as the cache saw it.
#[derive(Clone, Debug)]
pub enum Change {
    /// An object was created or replaced: its new state and, if it existed, its old one.
    Put {
        /// New state, with `resourceVersion`.
        obj: Value,
        /// Previous state.
        prev: Option<Value>,
    },
    /// An object was deleted: its last state, with the deletion's `resourceVersion`.
    Delete {
        /// Last state.
        obj: Value,
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
            Change::Put { obj, .. } | Change::Delete { obj } => rv_of(obj),
            Change::Progress { revision } => *revision,
        }
    }
}

fn rv_of(obj: &Value) -> Revision {
    obj.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn ns_of(obj: &Value) -> Option<&str> {
    obj.pointer("/metadata/namespace").and_then(Value::as_str)
}

#[derive(Default)]
struct State {
    objects: BTreeMap<String, Value>,
    revision: Revision,
    /// Changes after `oldest`, in order.
    history: VecDeque<Change>,
    /// The history covers every change after this revision.
    oldest: Revision,
    ready: bool,
}

/// The cache of one resource.
pub struct WatchCache {
    resource: Arc<dyn Resource>,
    state: Mutex<State>,
    events: broadcast::Sender<Change>,
    revision: watch::Sender<Revision>,
}

fn key_of(obj: &Value) -> String {
    let ns = ns_of(obj).unwrap_or_default();
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    format!("{ns}/{name}")
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

    /// One list-then-watch cycle; returns when the storage watch ends.
    async fn run(&self) -> Result<()> {
        let prefix = self.resource.prefix(None);
        let storage = self.resource.storage().clone();
        let mut objects = BTreeMap::new();
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
                let v = self.resource.decode(&kv.value, kv.mod_revision)?;
                objects.insert(key_of(&v), v);
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
                history: VecDeque::new(),
                oldest: revision,
                ready: true,
            };
        }
        self.revision.send_replace(revision);
        let mut stream = self.resource.watch(None, Some(revision)).await?;
        while let Some(ev) = stream.next().await {
            let ev = ev.map_err(|e| ApiError::from_storage(self.resource.info(), "", e))?;
            let change = match ev {
                Event::Put { kv, prev } => Change::Put {
                    obj: self.resource.decode(&kv.value, kv.mod_revision)?,
                    prev: prev
                        .map(|p| self.resource.decode(&p.value, p.mod_revision))
                        .transpose()?,
                },
                Event::Delete {
                    revision,
                    prev: Some(p),
                    ..
                } => Change::Delete {
                    obj: self.resource.decode(&p.value, revision)?,
                },
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
                        st.objects.insert(key_of(obj), obj.clone());
                    }
                    Change::Delete { obj } => {
                        st.objects.remove(&key_of(obj));
                    }
                    Change::Progress { .. } => {}
                }
                st.revision = st.revision.max(rev);
                if !matches!(change, Change::Progress { .. }) {
                    st.history.push_back(change.clone());
                    if st.history.len() > HISTORY
                        && let Some(old) = st.history.pop_front()
                    {
                        st.oldest = old.revision();
                    }
                }
                // Sent under the lock so a subscriber that snapshots under it sees each change
                // exactly once: either in its snapshot or from the channel.
                let _ = self.events.send(change);
            }
            self.revision.send_replace(rev);
        }
        Ok(())
    }

    /// Waits until the cache has seen `rev` (at most `wait`); `false` if it has not.
    async fn caught_up(&self, rev: Revision, wait: Duration) -> bool {
        let mut rx = self.revision.subscribe();
        tokio::time::timeout(wait, rx.wait_for(|r| *r >= rev))
            .await
            .is_ok_and(|r| r.is_ok())
            && self.lock().ready
    }

    /// Lists from memory when possible, else from storage.
    pub async fn list(&self, ns: Option<&str>, p: &ListParams) -> Result<ListPage> {
        // On etcd the cache's freshness rests on etcd's progress notifications, which etcd before
        // 3.4.25 / 3.5.8 may send before the events they vouch for (etcd-io/etcd#15220): a list
        // is read from etcd there, as Kubernetes does on such versions. Watches stay on the cache.
        if p.continue_token.is_some() || p.revision.is_some() || self.resource.storage().backend() == "etcd" {
            return self.resource.list(ns, p).await;
        }
        let target = match p.min_revision {
            Some(r) => r,
            None => self
                .resource
                .storage()
                .current_revision()
                .await
                .map_err(|e| ApiError::from_storage(self.resource.info(), "", e))?,
        };
        // Storage answers at once; waiting longer than a progress tick buys nothing.
        if !self.caught_up(target, Duration::from_millis(300)).await {
            return self.resource.list(ns, p).await;
        }
        // The guard must not live across an await (the future has to be Send).
        let page = {
            let st = self.lock();
            let matching = || {
                st.objects
                    .values()
                    .filter(|o| ns.is_none() || ns_of(o) == ns)
                    .filter(|o| p.labels.matches_object(o) && p.fields.matches_object(o))
            };
            // Paging needs storage's continue tokens: decide before copying anything, so a
            // paged list of a large collection costs one scan here, not a copy of all of it.
            let fits = match p.limit.filter(|l| *l > 0) {
                Some(l) => matching().nth(usize::try_from(l).unwrap_or(usize::MAX)).is_none(),
                None => true,
            };
            fits.then(|| ListPage {
                items: matching().cloned().collect(),
                revision: st.revision,
                continue_token: None,
                remaining: None,
            })
        };
        match page {
            Some(page) => Ok(page),
            None => self.resource.list(ns, p).await,
        }
    }

    /// Subscribes from `from` (exclusive) or, with `initial`, from a snapshot: returns the
    /// snapshot objects (empty without `initial`), its revision, the replayed history and the
    /// live receiver.
    pub async fn subscribe(
        &self,
        ns: Option<&str>,
        from: Option<Revision>,
        initial: bool,
    ) -> Result<(Vec<Value>, Revision, Vec<Change>, broadcast::Receiver<Change>)> {
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
                .values()
                .filter(|o| ns.is_none() || ns_of(o) == ns)
                .cloned()
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
