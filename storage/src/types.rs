//! The values that cross the [`Storage`](crate::Storage) trait.

use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use futures::Stream;

use crate::Result;

/// A store-wide write counter; see the crate documentation.
pub type Revision = u64;

/// One stored item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyValue {
    /// The full key.
    pub key: String,
    /// The stored bytes, opaque to the store.
    pub value: Bytes,
    /// Revision of the write that created the key.
    pub create_revision: Revision,
    /// Revision of the latest write to the key (`metadata.resourceVersion`).
    pub mod_revision: Revision,
}

/// What [`Storage::delete`](crate::Storage::delete) removed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deleted {
    /// The revision of the delete.
    pub revision: Revision,
    /// The item as it was just before.
    pub prev: KeyValue,
}

/// How to list: at which revision, and which page.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListOptions {
    /// Read at this revision instead of the current one. Ignored with `continue_token`, which
    /// carries its own.
    pub revision: Option<Revision>,
    /// At most this many items; `None` or `Some(0)` for all.
    pub limit: Option<u64>,
    /// Resume a paged list where the previous page ended.
    pub continue_token: Option<String>,
}

/// One page of a list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListResult {
    /// The items in key order.
    pub items: Vec<KeyValue>,
    /// The revision the list was read at (`metadata.resourceVersion` of a list).
    pub revision: Revision,
    /// Present when more items follow; pass it back in [`ListOptions::continue_token`].
    pub continue_token: Option<String>,
    /// How many items follow this page, when a token is present.
    pub remaining: Option<u64>,
}

/// What [`Storage::summary`](crate::Storage::summary) tells of a prefix at one revision.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// How many keys the prefix held.
    pub count: u64,
    /// The newest `mod_revision` among them (0 when there were none).
    pub newest: Revision,
}

/// A condition of a [`Txn`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Compare {
    /// The key exists.
    Exists(String),
    /// The key does not exist.
    Absent(String),
    /// The key exists and its `mod_revision` is exactly this.
    ModRevision(String, Revision),
}

impl Compare {
    /// The key the condition is about.
    pub fn key(&self) -> &str {
        match self {
            Compare::Exists(k) | Compare::Absent(k) | Compare::ModRevision(k, _) => k,
        }
    }

    /// Whether the condition holds for `current`, the key's item or `None` if absent.
    pub fn holds(&self, current: Option<Revision>) -> bool {
        match self {
            Compare::Exists(_) => current.is_some(),
            Compare::Absent(_) => current.is_none(),
            Compare::ModRevision(_, rev) => current == Some(*rev),
        }
    }
}

/// A write of a [`Txn`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Store a value (create or replace).
    Put {
        /// The key.
        key: String,
        /// The new value.
        value: Bytes,
    },
    /// Remove a key; nothing happens if it is absent.
    Delete {
        /// The key.
        key: String,
    },
}

impl Op {
    /// The key the write is about.
    pub fn key(&self) -> &str {
        match self {
            Op::Put { key, .. } | Op::Delete { key } => key,
        }
    }
}

/// Compare-then-write over several keys, applied at one revision or not at all.
///
/// A key may appear in at most one write (etcd's rule, enforced by every backend).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Txn {
    /// All must hold for the writes to happen.
    pub compares: Vec<Compare>,
    /// The writes.
    pub ops: Vec<Op>,
}

impl Txn {
    /// An empty transaction.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add a condition.
    pub fn when(mut self, c: Compare) -> Self {
        self.compares.push(c);
        self
    }

    /// Add a put.
    pub fn put(mut self, key: impl Into<String>, value: impl Into<Bytes>) -> Self {
        self.ops.push(Op::Put {
            key: key.into(),
            value: value.into(),
        });
        self
    }

    /// Add a delete.
    pub fn delete(mut self, key: impl Into<String>) -> Self {
        self.ops.push(Op::Delete { key: key.into() });
        self
    }

    /// Rejects a transaction that writes one key twice.
    pub(crate) fn check(&self) -> Result<()> {
        let mut seen = std::collections::HashSet::new();
        for op in &self.ops {
            if !seen.insert(op.key()) {
                return Err(crate::Error::InvalidTxn {
                    reason: format!("key {:?} written twice", op.key()),
                });
            }
        }
        Ok(())
    }
}

/// The outcome of a [`Txn`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnResponse {
    /// Whether every comparison held and the writes were applied.
    pub succeeded: bool,
    /// The revision of the writes if they were applied, else the current revision.
    pub revision: Revision,
    /// When the comparisons failed: the current item of every compared key (`None` if absent),
    /// in the order of the comparisons, so the caller can say what it conflicted with.
    pub current: Vec<(String, Option<KeyValue>)>,
    /// When the writes were applied: the item each write replaced or removed (`None` if the key
    /// was absent), in the order of the writes.
    pub prev: Vec<Option<KeyValue>>,
}

/// How to watch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WatchOptions {
    /// Deliver changes strictly after this revision; `None` for changes from now on.
    pub revision: Option<Revision>,
    /// Watch every key under the given one instead of the key itself.
    pub prefix: bool,
    /// Send an [`Event::Progress`] at about this interval; `None` for none.
    pub progress_interval: Option<Duration>,
}

/// One item of a watch stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A key was created or replaced.
    Put {
        /// The item after the write.
        kv: KeyValue,
        /// The item before the write; `None` on create.
        prev: Option<KeyValue>,
    },
    /// A key was deleted.
    Delete {
        /// The deleted key.
        key: String,
        /// The revision of the delete.
        revision: Revision,
        /// The item just before the delete.
        prev: Option<KeyValue>,
    },
    /// Every change up to `revision` has been delivered.
    Progress {
        /// The revision.
        revision: Revision,
    },
}

impl Event {
    /// The revision the event stands at.
    pub fn revision(&self) -> Revision {
        match self {
            Event::Put { kv, .. } => kv.mod_revision,
            Event::Delete { revision, .. } | Event::Progress { revision } => *revision,
        }
    }

    /// The key of a put or delete; `None` for progress.
    pub fn key(&self) -> Option<&str> {
        match self {
            Event::Put { kv, .. } => Some(&kv.key),
            Event::Delete { key, .. } => Some(key),
            Event::Progress { .. } => None,
        }
    }
}

/// The stream [`Storage::watch`](crate::Storage::watch) returns. It ends after an error item.
pub type WatchStream = Pin<Box<dyn Stream<Item = Result<Event>> + Send>>;
