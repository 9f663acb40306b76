//! Conflicts are typed: the store retries a stale read, never a failed precondition.
//!
//! The store reads the object once per attempt, so counting the storage reads of one request
//! tells how often it was attempted.

use std::sync::Arc;

use cozyplane_apiserver::errors::{ConflictKind, Reason};
use cozyplane_apiserver::registry::store::{DeleteOptions, WriteOptions};
use cozyplane_storage::Storage;
use cozyplane_storage::recording::{Call, Recording};
use serde_json::json;

fn gets(r: &Recording) -> usize {
    r.count(|c| matches!(c, Call::Get(_)))
}

#[tokio::test]
async fn a_failed_uid_precondition_is_answered_after_one_attempt() {
    let (_dir, inner) = cozyplane_storage::testing::embedded().await;
    let counting = Arc::new(Recording::new(inner));
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

    let before = gets(&counting);
    let o = DeleteOptions {
        uid: Some("not-the-uid".into()),
        ..DeleteOptions::default()
    };
    let e = vpcs.delete(Some("t1"), "a", &o).await.unwrap_err();
    let attempts = gets(&counting) - before;
    assert_eq!((e.code, e.reason), (409, Reason::Conflict), "{e}");
    assert_eq!(e.conflict, Some(ConflictKind::Precondition), "{e}");
    assert!(e.message.contains("the UID in the precondition"), "{e}");
    assert_eq!(attempts, 1, "a permanent conflict was retried");
    // The object is still there.
    vpcs.get(Some("t1"), "a").await.unwrap();
}
