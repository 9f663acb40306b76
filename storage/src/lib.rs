//! Storage with Kubernetes semantics for the cozyplane API server.
//!
//! The API server owns its storage, the way kube-apiserver owns etcd. This crate knows nothing
//! about HTTP or about individual kinds: it stores opaque bytes under keys, versions every write
//! with a store-wide revision and streams changes. Start with the [`Storage`] trait; pick a
//! backend with [`Config`] and [`open`]; the suite every backend must pass is in `testing`
//! (feature `test-util`).
//!
//! # Keys
//!
//! An object lives at `/<prefix>/<group>/<resource>/<namespace>/<name>`; cluster-scoped kinds
//! leave the namespace out. [`ObjectKey`] builds these paths and the prefixes that list them.
//! A list prefix always ends in `/`, so that namespace `a` never lists namespace `ab`.
//!
//! # Revisions
//!
//! Every successful write moves one global counter, the *revision*, forward and returns the new
//! value. Every stored item carries two revisions: `create_revision`, the revision of the write
//! that created the key, and `mod_revision`, the revision of the last write to it.
//! `mod_revision` is what the API server shows as `metadata.resourceVersion`; because it is
//! global, resource versions of different objects can be compared, which is what watch resume
//! and list-at-revision rely on. A write that changes nothing (a transaction whose conditions
//! failed, a delete of a missing key inside a transaction) does not move the revision.
//!
//! # Reads
//!
//! * [`Storage::get`] returns the current value of one key, or [`Error::NotFound`].
//! * [`Storage::list`] returns the keys under a prefix in key order, either at the current
//!   revision or at a given past one. With a `limit` it returns one page plus an opaque continue
//!   token; the token pins the revision of the first page, so every page of one list is a view
//!   of the same moment even while writes continue. A token whose revision has since been
//!   compacted is refused with [`Error::Expired`]; a token that was tampered with, with
//!   [`Error::InvalidContinue`]. A list at a compacted revision fails with [`Error::Gone`], at a
//!   revision the store has not reached yet with [`Error::FutureRevision`].
//!
//! # Writes
//!
//! * [`Storage::create`] fails with [`Error::AlreadyExists`] if the key exists.
//! * [`Storage::update`] and [`Storage::delete`] are guarded by the `mod_revision` the caller
//!   last read: if the key changed since, they fail with [`Error::Conflict`], naming both
//!   revisions, and the caller re-reads and retries (optimistic concurrency, as
//!   `metadata.resourceVersion` preconditions work in Kubernetes). An update of a missing key is
//!   [`Error::NotFound`].
//! * [`Storage::txn`] is the general form: compare the existence or the `mod_revision` of any
//!   number of keys, and if all comparisons hold, apply puts and deletes to several keys at one
//!   revision. Allocators use it to claim an address and store the object that owns it in one
//!   step. When a comparison fails nothing is written and the response carries the current
//!   state of every compared key.
//!
//! # Watch
//!
//! [`Storage::watch`] streams the changes to one key or to every key under a prefix that
//! happened strictly after a given revision (or after "now"), in revision order, each exactly
//! once, each put and delete with the value it replaced. The stream also carries periodic
//! [`Event::Progress`] notifications with a revision up to which everything has been delivered;
//! the API server turns them into watch bookmarks. A consumer that remembers the last revision
//! it saw can start a new watch from it and miss nothing. A watch from a revision whose history
//! has been compacted ends with one [`Error::Gone`] item — never a silent or hanging stream —
//! and the consumer must re-list.
//!
//! One caveat, from etcd itself: etcd before 3.4.25 / 3.5.8 can send a progress notification
//! to a watcher that fell behind before its remaining events (etcd-io/etcd#15220). On such an
//! etcd a progress revision is a hint, not a proof of freshness; the etcd backend therefore never
//! resumes a broken stream from one (it resumes from the last delivered event), and consumers
//! that need a consistent read should read from storage. The embedded backend's notifications
//! are exact.
//!
//! Backends keep a watch alive across their own failures where they can: the etcd backend
//! reconnects after an etcd restart and resumes from the last revision it delivered, or ends
//! with [`Error::Gone`] if that revision was compacted in the meantime.
//!
//! # Compaction
//!
//! [`Storage::compact`] drops the history before a revision: afterwards reads at older
//! revisions and watches from older revisions fail as described above. The embedded backend
//! also compacts by itself to keep a bounded event history ([`embedded::Config::history`]).
//!
//! # Backends
//!
//! * [`etcd::EtcdStore`]: etcd v3 through `etcd-client`, with TLS and authentication, for
//!   clusters.
//! * [`embedded::EmbeddedStore`]: in-process, persisted in one file under a data directory, every
//!   acknowledged write durable on disk (it survives `kill -9`). The default for a single machine.

mod config;
pub mod embedded;
mod error;
pub mod etcd;
mod hold;
mod key;
mod progress;
#[cfg(feature = "test-util")]
pub mod recording;
#[cfg(feature = "test-util")]
pub mod testing;
mod token;
mod types;

pub use config::{Config, open};
pub use error::{Error, Result};
pub use key::{ObjectKey, prefix_end};
pub use types::{
    Compare, Deleted, Event, KeyValue, ListOptions, ListResult, Op, Revision, Summary, Txn, TxnResponse,
    WatchOptions, WatchStream,
};

use async_trait::async_trait;

/// The continue token that resumes a list of `prefix` after `last_key` at `revision`, for a
/// caller that stops inside a page it was given (a filtered list that has filled its page: the
/// rest of the storage page was not scanned, so storage's own token would skip it).
pub fn continue_after(prefix: &str, last_key: &str, revision: Revision) -> String {
    token::encode(prefix, last_key, revision)
}

/// Where a continue token issued for `prefix` resumes: `(revision, first key)`, the key
/// absolute and inclusive (for a caller that serves pages from a copy of its own).
pub fn continue_position(prefix: &str, token: &str) -> Result<(Revision, String)> {
    token::decode(prefix, token).map(|c| (c.revision, c.start))
}

/// Turns the response of a one-key guarded write into its item before the write, or the error
/// a caller of `update`/`delete` expects.
fn guarded_outcome(
    key: &str,
    expected: Revision,
    succeeded: bool,
    current: Vec<(String, Option<KeyValue>)>,
    prev: Vec<Option<KeyValue>>,
) -> Result<KeyValue> {
    if succeeded {
        return prev
            .into_iter()
            .next()
            .flatten()
            .ok_or_else(|| Error::internal("guarded write without a prior item"));
    }
    match current.into_iter().next().and_then(|(_, kv)| kv) {
        None => Err(Error::NotFound { key: key.into() }),
        Some(kv) => Err(Error::Conflict {
            key: key.into(),
            expected,
            actual: kv.mod_revision,
        }),
    }
}
use bytes::Bytes;

/// A versioned key-value store with the semantics the Kubernetes API needs.
///
/// See the [crate documentation](crate) for the contract every backend keeps. Methods take
/// `&self` and may be called from many tasks at once; implementations are cheap to share behind
/// an `Arc`.
#[async_trait]
pub trait Storage: Send + Sync + 'static {
    /// The current value of `key`, or [`Error::NotFound`].
    async fn get(&self, key: &str) -> Result<KeyValue>;

    /// The keys under `prefix`, in key order, at the revision and page that `opts` ask for.
    async fn list(&self, prefix: &str, opts: &ListOptions) -> Result<ListResult>;

    /// Store `value` under a new `key`; [`Error::AlreadyExists`] if it exists.
    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue> {
        let r = self
            .txn(
                Txn::new()
                    .when(Compare::Absent(key.into()))
                    .put(key, value.clone()),
            )
            .await?;
        if !r.succeeded {
            return Err(Error::AlreadyExists { key: key.into() });
        }
        Ok(KeyValue {
            key: key.into(),
            value,
            create_revision: r.revision,
            mod_revision: r.revision,
        })
    }

    /// Replace the value of `key` if its `mod_revision` is still `expected`.
    ///
    /// [`Error::Conflict`] if it changed, [`Error::NotFound`] if it is gone.
    async fn update(&self, key: &str, value: Bytes, expected: Revision) -> Result<KeyValue> {
        let r = self
            .txn(
                Txn::new()
                    .when(Compare::ModRevision(key.into(), expected))
                    .put(key, value.clone()),
            )
            .await?;
        let prev = guarded_outcome(key, expected, r.succeeded, r.current, r.prev)?;
        Ok(KeyValue {
            key: key.into(),
            value,
            create_revision: prev.create_revision,
            mod_revision: r.revision,
        })
    }

    /// Delete `key`, if `expected` is given only while its `mod_revision` is still that.
    ///
    /// [`Error::NotFound`] if the key does not exist, [`Error::Conflict`] if it changed.
    async fn delete(&self, key: &str, expected: Option<Revision>) -> Result<Deleted> {
        let cond = match expected {
            Some(rev) => Compare::ModRevision(key.into(), rev),
            None => Compare::Exists(key.into()),
        };
        let r = self.txn(Txn::new().when(cond).delete(key)).await?;
        let prev = guarded_outcome(key, expected.unwrap_or(0), r.succeeded, r.current, r.prev)?;
        Ok(Deleted {
            revision: r.revision,
            prev,
        })
    }

    /// Apply several writes at one revision if all comparisons hold.
    ///
    /// A failed comparison is not an error: the response says `succeeded: false`. Errors are
    /// for malformed transactions ([`Error::InvalidTxn`]) and an unreachable store.
    async fn txn(&self, txn: Txn) -> Result<TxnResponse>;

    /// How many keys `prefix` held at `revision` and the newest `mod_revision` among them:
    /// what a cache needs to prove that its copy of the prefix at an older revision is still
    /// the state at `revision` (nothing under the prefix was written or deleted in between).
    /// [`Error::Gone`] for a compacted revision, [`Error::FutureRevision`] for one not reached.
    ///
    /// The default reads every key; a backend answers it more cheaply where it can.
    async fn summary(&self, prefix: &str, revision: Revision) -> Result<Summary> {
        let mut opts = ListOptions {
            revision: Some(revision),
            limit: Some(1000),
            continue_token: None,
        };
        let mut sum = Summary::default();
        loop {
            let page = self.list(prefix, &opts).await?;
            sum.count += page.items.len() as u64;
            sum.newest = page.items.iter().fold(sum.newest, |n, kv| n.max(kv.mod_revision));
            match page.continue_token {
                Some(t) => opts.continue_token = Some(t),
                None => return Ok(sum),
            }
        }
    }

    /// Takes or keeps `key` for `holder`: `true` while `holder` holds it. A hold lapses `ttl`
    /// after its last renewal (a call that returned `true`); then another holder may take it.
    /// Leader election calls this every few seconds from each candidate.
    ///
    /// The default keeps the expiry in the key and renews it by compare-and-swap, a write per
    /// renewal; etcd binds the key to a lease and renews with keep-alives, which write nothing.
    async fn hold(&self, key: &str, holder: &str, ttl: std::time::Duration) -> Result<bool> {
        hold::by_compare_and_swap(self, key, holder, ttl).await
    }

    /// Stream changes of `key` (or of every key under it, if `opts.prefix`).
    async fn watch(&self, key: &str, opts: WatchOptions) -> Result<WatchStream>;

    /// Drop history before `revision`.
    async fn compact(&self, revision: Revision) -> Result<()>;

    /// The revision of the latest write.
    async fn current_revision(&self) -> Result<Revision>;

    /// `Ok` when the store answers reads and writes can reach it.
    async fn health(&self) -> Result<()>;

    /// A short name of the backend (`"etcd"`, `"embedded"`), for logs and metrics labels.
    fn backend(&self) -> &'static str;
}
