//! Conflicts are typed: the store retries a stale read, never a failed precondition.
//!
//! The store reads the object once per attempt, so counting the storage reads of one request
//! tells how often it was attempted.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use cozyplane_apiserver::errors::{ConflictKind, Reason};
use cozyplane_apiserver::registry::store::{DeleteOptions, WriteOptions};
use cozyplane_storage::{
    KeyValue, ListOptions, ListResult, Result, Revision, Storage, Txn, TxnResponse, WatchOptions, WatchStream,
};
use serde_json::json;

/// A store that counts `get`s and delegates everything to the embedded backend.
struct CountingGets {
    inner: Arc<dyn Storage>,
    gets: AtomicUsize,
}

#[async_trait]
impl Storage for CountingGets {
    async fn get(&self, key: &str) -> Result<KeyValue> {
        self.gets.fetch_add(1, Ordering::SeqCst);
        self.inner.get(key).await
    }
    async fn list(&self, prefix: &str, opts: &ListOptions) -> Result<ListResult> {
        self.inner.list(prefix, opts).await
    }
    async fn txn(&self, txn: Txn) -> Result<TxnResponse> {
        self.inner.txn(txn).await
    }
    async fn watch(&self, key: &str, opts: WatchOptions) -> Result<WatchStream> {
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

#[tokio::test]
async fn a_failed_uid_precondition_is_answered_after_one_attempt() {
    let dir = tempfile::tempdir().unwrap();
    let inner = cozyplane_storage::open(cozyplane_storage::Config::Embedded(
        cozyplane_storage::embedded::Config::new(dir.path()),
    ))
    .await
    .unwrap();
    let counting = Arc::new(CountingGets {
        inner,
        gets: AtomicUsize::new(0),
    });
    let storage: Arc<dyn Storage> = counting.clone();
    let kinds = cozyplane_apiserver::registry::kinds(&storage);
    let vpcs = kinds.iter().find(|k| k.info().plural == "vpcs").unwrap();
    let body = json!({
        "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "VPC",
        "metadata": {"name": "a"}, "spec": {"cidrs": ["10.1.0.0/24"]},
    });
    vpcs.create(Some("t1"), body, &WriteOptions::server())
        .await
        .unwrap();

    let before = counting.gets.load(Ordering::SeqCst);
    let o = DeleteOptions {
        uid: Some("not-the-uid".into()),
        ..DeleteOptions::default()
    };
    let e = vpcs.delete(Some("t1"), "a", &o).await.unwrap_err();
    let attempts = counting.gets.load(Ordering::SeqCst) - before;
    assert_eq!((e.code, e.reason), (409, Reason::Conflict), "{e}");
    assert_eq!(e.conflict, Some(ConflictKind::Precondition), "{e}");
    assert!(e.message.contains("the UID in the precondition"), "{e}");
    assert_eq!(attempts, 1, "a permanent conflict was retried");
    // The object is still there.
    vpcs.get(Some("t1"), "a").await.unwrap();
}
