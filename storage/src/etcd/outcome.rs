//! Settling a write whose outcome is unknown: it was sent, then its member died, froze or gave
//! up waiting for its leader. etcd may or may not have applied it.
//!
//! Every write of the store is compare-guarded, so sending it again cannot apply it twice: it
//! either applies now, or its compare fails. A failed compare is then either somebody else's
//! write, or our own first attempt, which etcd's history tells apart. The *anchor* is a compared
//! key that the write also writes:
//!
//! * `ModRevision(k, r)`: the first change of `k` after `r` is ours if it is our put (the same
//!   bytes) or our delete.
//! * `Absent(k)`: the write that created `k` as it is now is ours if it stored our bytes.
//!
//! When it is ours, every other put of the transaction must hold our bytes at that revision too;
//! the response is then built as etcd would have sent it (the items each op replaced, read at
//! the revision before). A write with no anchor, or whose history was compacted in between,
//! stays unknown and fails with [`Error::Unavailable`]: the caller must read before retrying.

use etcd_client::GetOptions;
use futures::StreamExt;

use super::EtcdStore;
use super::members::{Failure, Kind};
use crate::{Compare, Error, Event, KeyValue, Op, Result, Revision, Storage, Txn, TxnResponse, WatchOptions};

impl EtcdStore {
    /// Sends `txn` again until it is decided (within the request timeout); when its compare
    /// fails, decides whether the first attempt applied it. `why` is how the first attempt
    /// ended.
    pub(super) async fn settle(&self, txn: &Txn, why: String) -> Result<TxnResponse> {
        tracing::debug!(reason = %why, "settling an etcd write of unknown outcome");
        let deadline = tokio::time::Instant::now() + self.members.request_timeout;
        let mut why = why;
        loop {
            match self.txn_once(txn).await {
                Ok(r) if r.succeeded => return Ok(r),
                Ok(r) => {
                    return match self.applied(txn).await? {
                        Some(ours) => Ok(ours),
                        None => Ok(r),
                    };
                }
                Err(Failure::Unknown(w)) if tokio::time::Instant::now() < deadline => why = w,
                Err(Failure::Unknown(w)) => {
                    return Err(Error::unavailable(format!(
                        "the write's outcome is unknown: {why}; then {w}"
                    )));
                }
                Err(f) => return Err(f.into_error()),
            }
        }
    }

    /// The response of `txn` if etcd applied it (its compare now fails because of it), `None`
    /// if somebody else's write made the compare fail.
    async fn applied(&self, txn: &Txn) -> Result<Option<TxnResponse>> {
        for c in &txn.compares {
            let Some(op) = txn.ops.iter().find(|op| op.key() == c.key()) else {
                continue;
            };
            let after = match c {
                Compare::ModRevision(_, r) => *r,
                Compare::Absent(k) => match self.get(k).await {
                    Ok(kv) => kv.create_revision - 1,
                    // Absent now: our create did not apply (or was deleted since, which only a
                    // reader of the object could have done after we told nobody).
                    Err(Error::NotFound { .. }) => return Ok(None),
                    Err(e) => return Err(e),
                },
                Compare::Exists(_) => continue,
            };
            let revision = match (self.first_change(c.key(), after).await?, op) {
                (Event::Put { kv, .. }, Op::Put { value, .. }) if kv.value == *value => kv.mod_revision,
                (Event::Delete { revision, .. }, Op::Delete { .. }) => revision,
                _ => return Ok(None),
            };
            return self.response_at(txn, revision).await;
        }
        Err(Error::unavailable(
            "the write's outcome is unknown and it compares no key it writes: read before retrying",
        ))
    }

    /// The first change of `key` after revision `after`, from etcd's history.
    async fn first_change(&self, key: &str, after: Revision) -> Result<Event> {
        let opts = WatchOptions {
            revision: Some(after),
            ..Default::default()
        };
        let mut w = self.watch(key, opts).await?;
        let timeout = self.members.request_timeout;
        match tokio::time::timeout(timeout, w.next()).await {
            Ok(Some(Ok(ev))) => Ok(ev),
            Ok(Some(Err(Error::Gone { .. }))) => Err(Error::unavailable(
                "the write's outcome is unknown: its history was compacted",
            )),
            Ok(Some(Err(e))) => Err(e),
            Ok(None) | Err(_) => Err(Error::unavailable(format!(
                "the write's outcome is unknown: no change of {key} after revision {after} within {timeout:?}"
            ))),
        }
    }

    /// `txn`'s response had etcd applied it at `revision`, if every put holds our bytes there.
    async fn response_at(&self, txn: &Txn, revision: Revision) -> Result<Option<TxnResponse>> {
        let mut prev = Vec::with_capacity(txn.ops.len());
        for op in &txn.ops {
            if let Op::Put { key, value } = op {
                let now = self.get_at(key, revision).await?;
                if !now.is_some_and(|kv| kv.mod_revision == revision && kv.value == *value) {
                    return Ok(None);
                }
            }
            prev.push(self.get_at(op.key(), revision - 1).await?);
        }
        tracing::info!(revision, "an etcd write of unknown outcome had applied");
        Ok(Some(TxnResponse {
            succeeded: true,
            revision,
            current: Vec::new(),
            prev,
        }))
    }

    /// `key` as it was at `revision`.
    async fn get_at(&self, key: &str, revision: Revision) -> Result<Option<KeyValue>> {
        if revision == 0 {
            return Ok(None);
        }
        let opts = GetOptions::new().with_revision(revision as i64);
        let mut resp = self.range(key.to_string(), Some(opts), Kind::Read).await?;
        resp.take_kvs().into_iter().next().map(super::to_kv).transpose()
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use crate::etcd::EtcdStore;
    use crate::testing::{EtcdServer, runtime};
    use crate::{Compare, Storage, Txn};

    /// A write settled after its first attempt applied (its answer lost) is acknowledged with
    /// the first attempt's revision; somebody else's write is not taken for ours.
    #[test]
    fn a_write_whose_answer_was_lost_is_recognised_as_ours() {
        let server = EtcdServer::start();
        runtime().block_on(async {
            let store = EtcdStore::connect(server.config()).await.unwrap();
            // Create: the first attempt applied; settling it again finds it ours.
            let value = Bytes::from_static(b"{\"uid\":\"ours\"}");
            let created = store.create("/o/a", value.clone()).await.unwrap();
            let create = Txn::new()
                .when(Compare::Absent("/o/a".into()))
                .put("/o/a", value.clone());
            let r = store.settle(&create, "test".into()).await.unwrap();
            assert!(r.succeeded, "our own create was taken for somebody else's");
            assert_eq!(r.revision, created.mod_revision);
            // Somebody else's create of the key, with other bytes: not ours.
            let theirs = Txn::new()
                .when(Compare::Absent("/o/a".into()))
                .put("/o/a", Bytes::from_static(b"{\"uid\":\"theirs\"}"));
            assert!(!store.settle(&theirs, "test".into()).await.unwrap().succeeded);

            // Update at a revision, then a later write by another: ours is still recognised
            // from history, with the item it replaced.
            let v2 = Bytes::from_static(b"{\"uid\":\"ours\",\"v\":2}");
            let updated = store
                .update("/o/a", v2.clone(), created.mod_revision)
                .await
                .unwrap();
            store
                .update("/o/a", Bytes::from_static(b"other"), updated.mod_revision)
                .await
                .unwrap();
            let update = Txn::new()
                .when(Compare::ModRevision("/o/a".into(), created.mod_revision))
                .put("/o/a", v2);
            let r = store.settle(&update, "test".into()).await.unwrap();
            assert!(r.succeeded, "our own update was taken for somebody else's");
            assert_eq!(r.revision, updated.mod_revision);
            assert_eq!(r.prev[0].as_ref().map(|kv| kv.value.clone()), Some(value));

            // A delete with a release, like the API server's removal of an allocating object.
            store
                .create("/o/claim", Bytes::from_static(b"/o/b"))
                .await
                .unwrap();
            let b = store.create("/o/b", Bytes::from_static(b"b")).await.unwrap();
            let remove = Txn::new()
                .when(Compare::ModRevision("/o/b".into(), b.mod_revision))
                .delete("/o/b")
                .delete("/o/claim");
            let done = store.txn(remove.clone()).await.unwrap();
            let r = store.settle(&remove, "test".into()).await.unwrap();
            assert!(r.succeeded, "our own delete was taken for somebody else's");
            assert_eq!(r.revision, done.revision);
            assert_eq!(r.prev, done.prev);

            // A guard that failed because of a write of somebody else's: not ours.
            let c = store.create("/o/c", Bytes::from_static(b"c")).await.unwrap();
            store
                .update("/o/c", Bytes::from_static(b"c2"), c.mod_revision)
                .await
                .unwrap();
            let stale = Txn::new()
                .when(Compare::ModRevision("/o/c".into(), c.mod_revision))
                .put("/o/c", Bytes::from_static(b"mine"));
            let r = store.settle(&stale, "test".into()).await.unwrap();
            assert!(!r.succeeded, "somebody else's update was taken for ours");
        });
    }
}
