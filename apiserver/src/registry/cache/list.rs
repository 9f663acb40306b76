//! Lists served from the watch cache, and when storage answers instead.
//!
//! - `resourceVersion=0` (any revision will do): the cache as it stands, on every backend.
//! - `resourceVersionMatch=NotOlderThan` at X: the cache once its contents are proven to reflect
//!   X (waiting briefly for it), else storage, which knows whether X is in the future.
//! - Consistent lists (no resourceVersion): on the embedded store the cache once it has caught up
//!   with the store's current revision (as Go's cacher does since 1.31). On etcd, storage: the
//!   cache's freshness there could rest only on progress notifications, which etcd before
//!   3.4.25 / 3.5.8 may send early (etcd-io/etcd#15220).
//! - Continue pages (of any of these): the cache rebuilds the list's revision from its history
//!   (the state before each later change) when the history reaches back to it and storage
//!   confirms the revision is not compacted (so an expired token is `410` as from storage). A
//!   revision past the cache's own events (on etcd, a first page read from storage after
//!   another kind's write) is proven unchanged for the kind by one storage summary, once per
//!   walk, and the cache serves the rest of the walk.
//! - `Exact` reads, and anything the cache cannot answer: storage.
//!
//! Pages from the cache carry storage's continue tokens, so a walk may move between the two.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cozyplane_storage::{ListOptions, Revision};

use super::{Cached, State, WatchCache};
use crate::errors::{ApiError, Result};
use crate::registry::store::{ListPage, ListParams, list_from_storage_as};

impl WatchCache {
    /// Lists (encoded items) from memory when the contract allows it, else from storage.
    pub async fn list(&self, ns: Option<&str>, p: &ListParams) -> Result<ListPage<Bytes>> {
        if p.revision.is_some() {
            return self.list_from_storage(ns, p).await;
        }
        if let Some(token) = &p.continue_token {
            let prefix = self.resource.prefix(ns);
            let Ok((rev, start)) = cozyplane_storage::continue_position(&prefix, token) else {
                return self.list_from_storage(ns, p).await;
            };
            if !self.servable(rev).await {
                return self.list_from_storage(ns, p).await;
            }
            let page = self.page(&self.lock(), ns, p, rev, Some(&start));
            return match page {
                Some(page) => Ok(page),
                None => self.list_from_storage(ns, p).await,
            };
        }
        let target = if p.any_revision {
            None
        } else if let Some(min) = p.min_revision {
            Some(min)
        } else if self.resource.storage().backend() == "etcd" {
            return self.list_from_storage(ns, p).await;
        } else {
            Some(
                self.resource
                    .storage()
                    .current_revision()
                    .await
                    .map_err(|e| ApiError::from_storage(self.resource.info(), "", e))?,
            )
        };
        // Storage answers at once; waiting longer than a progress tick buys nothing.
        if let Some(t) = target
            && !self.caught_up(t, Duration::from_millis(300)).await
        {
            return self.list_from_storage(ns, p).await;
        }
        // The guard must not live across an await (the future has to be Send).
        let page = {
            let st = self.lock();
            if !st.ready || target.is_some_and(|t| st.confirmed < t) {
                None
            } else {
                self.page(&st, ns, p, st.confirmed, None)
            }
        };
        match page {
            Some(page) => Ok(page),
            None => self.list_from_storage(ns, p).await,
        }
    }

    /// A list read from storage. An item the cache holds at the same revision is answered
    /// with the cache's bytes and filtered on its compact form: a key at a revision has one
    /// value, and the cache's bytes are exactly what decoding that value gives.
    async fn list_from_storage(&self, ns: Option<&str>, p: &ListParams) -> Result<ListPage<Bytes>> {
        let root = self.resource.prefix(None);
        let selectable = self.resource.selectable_fields();
        list_from_storage_as(&*self.resource, ns, p, |kv| {
            let rel = kv.key.strip_prefix(&root).unwrap_or(&kv.key);
            let known = self
                .lock()
                .objects
                .get(rel)
                .filter(|e| e.0.rv() == kv.mod_revision)
                .map(|e| e.0.clone());
            let obj = match known {
                Some(o) => o,
                None => self.cached(&kv.key, &kv.value, kv.mod_revision)?,
            };
            Ok(obj.matches(p, selectable).then(|| obj.json().clone()))
        })
        .await
    }

    /// Whether the cache may answer a continue page at `rev`: storage can still read `rev`
    /// (not compacted, not in the future: an expired token is `410` as from storage), and the
    /// cache's contents reflect `rev` — proven by its own events, or, for a revision past them
    /// (on etcd other keys' writes, the controllers' lease among them, move the revision a
    /// list is read at), by [`Storage::summary`](cozyplane_storage::Storage::summary): if the
    /// kind held at `rev` as many keys as the cache holds and none written after the cache's
    /// revision, nothing of the kind changed in between, and the cache's revision becomes
    /// `rev`. One such read serves every later page of the walk.
    async fn servable(&self, rev: Revision) -> bool {
        let (confirmed, count, unproven) = {
            let st = self.lock();
            (st.confirmed, st.objects.len() as u64, st.unproven)
        };
        let storage = self.resource.storage();
        if rev <= confirmed {
            // The smallest read at `rev`: a range no key can be in (names are never empty),
            // still refused at a compacted or future revision.
            let opts = ListOptions {
                revision: Some(rev),
                limit: Some(1),
                continue_token: None,
            };
            return storage
                .list(&format!("{}\0", self.resource.prefix(None)), &opts)
                .await
                .is_ok();
        }
        // Where progress notifications are trusted the cache catches up on its own; a state
        // once found changed stays changed.
        if self.trusts_progress() || rev == unproven {
            return false;
        }
        let Ok(sum) = storage.summary(&self.resource.prefix(None), rev).await else {
            return false;
        };
        let mut st = self.lock();
        // A relist in between only moves `confirmed` forward, to a state that is still `rev`'s.
        if sum.newest <= confirmed && sum.count == count && st.ready && st.confirmed >= confirmed {
            st.confirmed = st.confirmed.max(rev);
            st.revision = st.revision.max(rev);
            true
        } else {
            st.unproven = rev;
            false
        }
    }

    /// One page of the objects of `ns` as they were at `rev`, from `start` (an absolute storage
    /// key, inclusive) on; `None` if the cache cannot tell that state.
    fn page(
        &self,
        st: &State,
        ns: Option<&str>,
        p: &ListParams,
        rev: Revision,
        start: Option<&str>,
    ) -> Option<ListPage<Bytes>> {
        if !st.ready || rev < st.oldest || rev > st.confirmed {
            return None;
        }
        let root = self.resource.prefix(None);
        let prefix = self.resource.prefix(ns);
        // Keys in the cache are relative to the kind's prefix.
        let within = prefix.strip_prefix(&root)?;
        let from = match start {
            Some(s) => s.strip_prefix(&root)?.max(within),
            None => within,
        };
        // The state at `rev` of every key changed since: its state before the first later change.
        let mut before: BTreeMap<&str, Option<&Arc<Cached>>> = BTreeMap::new();
        let first_later = st.history.partition_point(|c| c.revision() <= rev);
        for c in st.history.range(first_later..) {
            if let Some((key, state)) = c.before() {
                before.entry(key).or_insert(state);
            }
        }
        let bounds = (Bound::Included(from), Bound::Unbounded);
        let current = st
            .objects
            .range::<str, _>(bounds)
            .map(|e| (e.0.key(), Some(&e.0)));
        let past = before.range::<&str, _>(bounds).map(|(k, v)| (*k, *v));
        let selectable = self.resource.selectable_fields();
        let mut matching = Merge::new(current, past)
            .take_while(|(k, _)| k.starts_with(within))
            .filter_map(|(_, o)| o)
            .filter(|o| o.matches(p, selectable));
        let limit = p
            .limit
            .filter(|l| *l > 0)
            .map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX));
        let items: Vec<&Arc<Cached>> = matching.by_ref().take(limit).collect();
        let mut rest = matching.peekable();
        let continue_token = match (rest.peek(), items.last()) {
            (Some(_), Some(last)) => Some(cozyplane_storage::continue_after(
                &prefix,
                &format!("{root}{}", last.key()),
                rev,
            )),
            _ => None,
        };
        // Storage counts what follows only for unfiltered lists; so does the cache.
        let filtered = !p.labels.is_empty() || !p.fields.is_empty();
        let remaining = (continue_token.is_some() && !filtered).then(|| rest.count() as u64);
        Some(ListPage {
            items: items.into_iter().map(|o| o.json().clone()).collect(),
            revision: rev,
            continue_token,
            remaining,
        })
    }
}

/// Two key-ordered sequences merged by key; on equal keys the second one's entry wins (the
/// state at the list's revision over the current one).
struct Merge<'a, A: Iterator, B: Iterator> {
    a: std::iter::Peekable<A>,
    b: std::iter::Peekable<B>,
    _keys: std::marker::PhantomData<&'a str>,
}

impl<'a, A, B> Merge<'a, A, B>
where
    A: Iterator<Item = (&'a str, Option<&'a Arc<Cached>>)>,
    B: Iterator<Item = (&'a str, Option<&'a Arc<Cached>>)>,
{
    fn new(a: A, b: B) -> Self {
        Self {
            a: a.peekable(),
            b: b.peekable(),
            _keys: std::marker::PhantomData,
        }
    }
}

impl<'a, A, B> Iterator for Merge<'a, A, B>
where
    A: Iterator<Item = (&'a str, Option<&'a Arc<Cached>>)>,
    B: Iterator<Item = (&'a str, Option<&'a Arc<Cached>>)>,
{
    type Item = (&'a str, Option<&'a Arc<Cached>>);

    fn next(&mut self) -> Option<Self::Item> {
        match (self.a.peek(), self.b.peek()) {
            (Some((ka, _)), Some((kb, _))) => match ka.cmp(kb) {
                std::cmp::Ordering::Less => self.a.next(),
                std::cmp::Ordering::Greater => self.b.next(),
                std::cmp::Ordering::Equal => {
                    self.a.next();
                    self.b.next()
                }
            },
            (Some(_), None) => self.a.next(),
            (None, _) => self.b.next(),
        }
    }
}
