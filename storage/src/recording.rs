//! [`Recording`]: a [`Storage`] that passes every call to another backend and remembers which
//! calls were made, for tests that prove what a caller did *not* ask storage (a check answered
//! from a cache, a walk served from memory).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

use crate::{
    Deleted, KeyValue, ListOptions, ListResult, Result, Revision, Storage, Summary, Txn, TxnResponse,
    WatchOptions, WatchStream,
};

/// One call made through a [`Recording`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    /// A read of one key.
    Get(String),
    /// A range read.
    List {
        /// The prefix read.
        prefix: String,
        /// The page size asked for.
        limit: Option<u64>,
    },
    /// [`Storage::summary`] of a prefix.
    Summary(String),
    /// A write of one key: create, update or delete.
    Write(String),
    /// A transaction (its keys are not recorded).
    Txn,
    /// A watch from a key or prefix.
    Watch(String),
}

/// Delegates to `inner` and records every call; see the [module documentation](self).
pub struct Recording {
    inner: Arc<dyn Storage>,
    calls: Mutex<Vec<Call>>,
}

impl Recording {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Storage>) -> Self {
        Self {
            inner,
            calls: Mutex::default(),
        }
    }

    fn note(&self, c: Call) {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner).push(c);
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// How many calls so far matched `f`.
    pub fn count(&self, f: impl Fn(&Call) -> bool) -> usize {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|c| f(c))
            .count()
    }
}

#[async_trait]
impl Storage for Recording {
    async fn get(&self, key: &str) -> Result<KeyValue> {
        self.note(Call::Get(key.into()));
        self.inner.get(key).await
    }
    async fn list(&self, prefix: &str, opts: &ListOptions) -> Result<ListResult> {
        self.note(Call::List {
            prefix: prefix.into(),
            limit: opts.limit,
        });
        self.inner.list(prefix, opts).await
    }
    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue> {
        self.note(Call::Write(key.into()));
        self.inner.create(key, value).await
    }
    async fn update(&self, key: &str, value: Bytes, expected: Revision) -> Result<KeyValue> {
        self.note(Call::Write(key.into()));
        self.inner.update(key, value, expected).await
    }
    async fn delete(&self, key: &str, expected: Option<Revision>) -> Result<Deleted> {
        self.note(Call::Write(key.into()));
        self.inner.delete(key, expected).await
    }
    async fn txn(&self, txn: Txn) -> Result<TxnResponse> {
        self.note(Call::Txn);
        self.inner.txn(txn).await
    }
    async fn summary(&self, prefix: &str, revision: Revision) -> Result<Summary> {
        self.note(Call::Summary(prefix.into()));
        self.inner.summary(prefix, revision).await
    }
    async fn hold(&self, key: &str, holder: &str, ttl: Duration) -> Result<bool> {
        self.inner.hold(key, holder, ttl).await
    }
    async fn watch(&self, key: &str, opts: WatchOptions) -> Result<WatchStream> {
        self.note(Call::Watch(key.into()));
        self.inner.watch(key, opts).await
    }
    async fn compact(&self, revision: Revision) -> Result<()> {
        self.inner.compact(revision).await
    }
    async fn current_revision(&self) -> Result<Revision> {
        self.inner.current_revision().await
    }
    async fn health(&self) -> Result<()> {
        self.inner.health().await
    }
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }
}
