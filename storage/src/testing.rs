//! The conformance suite every backend must pass, and a real etcd to run it against.
//!
//! [`cases`] lists the behaviours of the crate documentation as test cases; a backend's test
//! binary (`storage/tests/<backend>.rs`) runs each against a fresh store. [`EtcdServer`] starts
//! Debian's `etcd` on free loopback ports with a temporary data directory and stops it by PID;
//! [`EtcdCluster`] starts several members of it, for the failover tests (`tests/etcd_ha.rs`).
//!
//! Only for tests: enabled by the `test-util` feature.

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};

use crate::{
    Compare, Error, Event, ListOptions, Revision, Storage, Summary, Txn, WatchOptions, WatchStream, etcd,
};

mod cluster;

pub use cluster::{ClusterMember, EtcdCluster};

/// What a case gets: a store, and a key prefix no other case uses in it.
pub struct Ctx {
    /// The store under test.
    pub store: Arc<dyn Storage>,
    /// Keys of this case start with this (ends in `/`).
    pub prefix: String,
}

impl Ctx {
    /// A key under this case's prefix.
    pub fn key(&self, rest: &str) -> String {
        format!("{}{rest}", self.prefix)
    }
}

/// One behaviour of the storage contract.
pub struct Case {
    /// Test name, a sentence.
    pub name: &'static str,
    /// The case compacts or otherwise changes store-wide state, so it needs a store of its own
    /// (for etcd: its own server).
    pub exclusive: bool,
    /// The test body.
    pub run: fn(Ctx) -> BoxFuture<'static, ()>,
}

macro_rules! case {
    ($name:ident) => {
        Case {
            name: stringify!($name),
            exclusive: false,
            run: |cx| $name(cx).boxed(),
        }
    };
    ($name:ident, exclusive) => {
        Case {
            name: stringify!($name),
            exclusive: true,
            run: |cx| $name(cx).boxed(),
        }
    };
}

/// Every case of the suite.
pub fn cases() -> Vec<Case> {
    vec![
        case!(create_then_get_returns_the_revisions),
        case!(create_of_an_existing_key_is_already_exists),
        case!(get_of_a_missing_key_is_not_found),
        case!(update_at_the_current_revision_succeeds),
        case!(update_at_a_stale_revision_is_a_conflict_naming_both_revisions),
        case!(update_of_a_missing_key_is_not_found),
        case!(delete_is_guarded_by_the_revision),
        case!(every_write_moves_one_global_revision),
        case!(list_is_in_key_order_and_stays_inside_its_prefix),
        case!(list_pages_resume_at_the_revision_of_the_first_page),
        case!(list_at_a_past_revision_shows_that_moment),
        case!(list_at_a_future_revision_is_refused),
        case!(summary_counts_the_keys_and_names_the_newest_write),
        case!(tampered_continue_tokens_are_invalid),
        case!(continue_after_compaction_is_expired, exclusive),
        case!(list_at_a_compacted_revision_is_gone, exclusive),
        case!(compact_at_a_future_revision_is_refused),
        case!(txn_claims_several_keys_at_one_revision),
        case!(failed_txn_writes_nothing_and_reports_current_state),
        case!(txn_writing_a_key_twice_is_invalid),
        case!(concurrent_conflicting_updates_exactly_one_wins),
        case!(watch_of_a_prefix_from_a_revision_sees_later_events_with_prev_values),
        case!(watch_of_one_key_sees_only_that_key),
        case!(watch_from_now_sees_only_later_events),
        case!(watch_delivers_every_event_of_a_txn),
        case!(watch_is_ordered_with_concurrent_writers),
        case!(watch_sees_100k_writes_exactly_once_in_order),
        case!(watch_resumed_from_its_last_revision_misses_nothing),
        case!(watch_from_a_compacted_revision_ends_with_gone, exclusive),
        case!(watch_sends_progress_notifications_with_the_current_revision),
        case!(health_and_current_revision_answer),
        case!(hold_admits_one_holder_until_it_lapses),
    ]
}

// === helpers ===

const HANG: Duration = Duration::from_secs(30);

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

/// The next item of a watch; fails the test instead of hanging.
pub async fn next(w: &mut WatchStream) -> Option<crate::Result<Event>> {
    tokio::time::timeout(HANG, w.next())
        .await
        .expect("watch stream hung")
}

/// The next put or delete of a watch, skipping progress notifications.
pub async fn next_change(w: &mut WatchStream) -> Event {
    loop {
        match next(w).await.expect("watch ended").expect("watch error") {
            Event::Progress { .. } => continue,
            ev => return ev,
        }
    }
}

/// An embedded store in a fresh temporary directory, removed when the returned guard drops.
pub async fn embedded() -> (tempfile::TempDir, Arc<dyn crate::Storage>) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let store = crate::open(crate::Config::Embedded(crate::embedded::Config::new(dir.path())))
        .await
        .expect("the embedded store opens");
    (dir, store)
}

/// A tokio runtime for one test case or benchmark, sized for this project's 2-core machines.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// A watch of every key of the case, from now on.
async fn watch_all(cx: &Ctx) -> WatchStream {
    let opts = WatchOptions {
        prefix: true,
        ..Default::default()
    };
    cx.store.watch(&cx.prefix, opts).await.unwrap()
}

async fn put_n(cx: &Ctx, n: usize) -> Vec<Revision> {
    let mut revs = Vec::new();
    for i in 0..n {
        revs.push(
            cx.store
                .create(&cx.key(&format!("k{i:04}")), b("v"))
                .await
                .unwrap()
                .mod_revision,
        );
    }
    revs
}

fn keys(items: &[crate::KeyValue]) -> Vec<&str> {
    items.iter().map(|kv| kv.key.as_str()).collect()
}

// === reads and guarded writes ===

async fn create_then_get_returns_the_revisions(cx: Ctx) {
    let before = cx.store.current_revision().await.unwrap();
    let created = cx.store.create(&cx.key("a"), b("one")).await.unwrap();
    assert!(created.mod_revision > before);
    assert_eq!(created.create_revision, created.mod_revision);
    let got = cx.store.get(&cx.key("a")).await.unwrap();
    assert_eq!(got, created);
    assert_eq!(got.value, b("one"));
}

async fn create_of_an_existing_key_is_already_exists(cx: Ctx) {
    cx.store.create(&cx.key("a"), b("one")).await.unwrap();
    let err = cx.store.create(&cx.key("a"), b("two")).await.unwrap_err();
    assert!(
        matches!(err, Error::AlreadyExists { ref key } if *key == cx.key("a")),
        "{err:?}"
    );
    assert_eq!(cx.store.get(&cx.key("a")).await.unwrap().value, b("one"));
}

async fn get_of_a_missing_key_is_not_found(cx: Ctx) {
    let err = cx.store.get(&cx.key("missing")).await.unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err:?}");
}

async fn update_at_the_current_revision_succeeds(cx: Ctx) {
    let c = cx.store.create(&cx.key("a"), b("one")).await.unwrap();
    let u = cx
        .store
        .update(&cx.key("a"), b("two"), c.mod_revision)
        .await
        .unwrap();
    assert!(u.mod_revision > c.mod_revision);
    assert_eq!(u.create_revision, c.create_revision);
    assert_eq!(cx.store.get(&cx.key("a")).await.unwrap(), u);
}

async fn update_at_a_stale_revision_is_a_conflict_naming_both_revisions(cx: Ctx) {
    let c = cx.store.create(&cx.key("a"), b("one")).await.unwrap();
    let u = cx
        .store
        .update(&cx.key("a"), b("two"), c.mod_revision)
        .await
        .unwrap();
    let err = cx
        .store
        .update(&cx.key("a"), b("three"), c.mod_revision)
        .await
        .unwrap_err();
    match err {
        Error::Conflict { expected, actual, .. } => {
            assert_eq!(expected, c.mod_revision);
            assert_eq!(actual, u.mod_revision);
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(cx.store.get(&cx.key("a")).await.unwrap().value, b("two"));
}

async fn update_of_a_missing_key_is_not_found(cx: Ctx) {
    let err = cx.store.update(&cx.key("missing"), b("x"), 5).await.unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err:?}");
    assert!(matches!(
        cx.store.get(&cx.key("missing")).await,
        Err(Error::NotFound { .. })
    ));
}

async fn delete_is_guarded_by_the_revision(cx: Ctx) {
    let c = cx.store.create(&cx.key("a"), b("one")).await.unwrap();
    let u = cx
        .store
        .update(&cx.key("a"), b("two"), c.mod_revision)
        .await
        .unwrap();
    let err = cx
        .store
        .delete(&cx.key("a"), Some(c.mod_revision))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Conflict { actual, .. } if actual == u.mod_revision),
        "{err:?}"
    );
    let d = cx.store.delete(&cx.key("a"), Some(u.mod_revision)).await.unwrap();
    assert!(d.revision > u.mod_revision);
    assert_eq!(d.prev, u);
    assert!(matches!(
        cx.store.delete(&cx.key("a"), None).await,
        Err(Error::NotFound { .. })
    ));
    cx.store.create(&cx.key("b"), b("x")).await.unwrap();
    assert_eq!(
        cx.store.delete(&cx.key("b"), None).await.unwrap().prev.value,
        b("x")
    );
    assert!(matches!(
        cx.store.get(&cx.key("b")).await,
        Err(Error::NotFound { .. })
    ));
}

async fn every_write_moves_one_global_revision(cx: Ctx) {
    let a = cx.store.create(&cx.key("a"), b("1")).await.unwrap().mod_revision;
    let bb = cx.store.create(&cx.key("b"), b("1")).await.unwrap().mod_revision;
    let a2 = cx
        .store
        .update(&cx.key("a"), b("2"), a)
        .await
        .unwrap()
        .mod_revision;
    let d = cx.store.delete(&cx.key("b"), Some(bb)).await.unwrap().revision;
    assert!(a < bb && bb < a2 && a2 < d, "{a} {bb} {a2} {d}");
    assert!(cx.store.current_revision().await.unwrap() >= d);
}

// === lists ===

async fn list_is_in_key_order_and_stays_inside_its_prefix(cx: Ctx) {
    for k in ["ns-a/z", "ns-a/b", "ns-ab/c", "ns-a/m"] {
        cx.store.create(&cx.key(k), b(k)).await.unwrap();
    }
    let l = cx
        .store
        .list(&cx.key("ns-a/"), &ListOptions::default())
        .await
        .unwrap();
    assert_eq!(
        keys(&l.items),
        [cx.key("ns-a/b"), cx.key("ns-a/m"), cx.key("ns-a/z")]
    );
    assert!(l.continue_token.is_none() && l.remaining.is_none());
    assert!(l.revision >= l.items.iter().map(|i| i.mod_revision).max().unwrap());
    let all = cx.store.list(&cx.prefix, &ListOptions::default()).await.unwrap();
    assert_eq!(all.items.len(), 4);
}

async fn list_pages_resume_at_the_revision_of_the_first_page(cx: Ctx) {
    put_n(&cx, 10).await;
    let mut opts = ListOptions {
        limit: Some(4),
        ..Default::default()
    };
    let first = cx.store.list(&cx.prefix, &opts).await.unwrap();
    assert_eq!(first.items.len(), 4);
    assert_eq!(first.remaining, Some(6));
    // Writes between pages are not part of this list.
    cx.store.create(&cx.key("k0005a"), b("new")).await.unwrap();
    let k9 = cx.store.get(&cx.key("k0009")).await.unwrap();
    cx.store
        .delete(&cx.key("k0009"), Some(k9.mod_revision))
        .await
        .unwrap();
    let mut seen = keys(&first.items)
        .into_iter()
        .map(String::from)
        .collect::<Vec<_>>();
    opts.continue_token = first.continue_token.clone();
    loop {
        let page = cx.store.list(&cx.prefix, &opts).await.unwrap();
        assert_eq!(page.revision, first.revision);
        seen.extend(page.items.iter().map(|i| i.key.clone()));
        match page.continue_token {
            Some(t) => {
                assert!(page.remaining.unwrap() > 0);
                opts.continue_token = Some(t);
            }
            None => break,
        }
    }
    let want: Vec<String> = (0..10).map(|i| cx.key(&format!("k{i:04}"))).collect();
    assert_eq!(seen, want);
}

async fn list_at_a_past_revision_shows_that_moment(cx: Ctx) {
    let a = cx.store.create(&cx.key("a"), b("a1")).await.unwrap();
    let bb = cx.store.create(&cx.key("b"), b("b1")).await.unwrap();
    let at = cx.store.current_revision().await.unwrap();
    cx.store
        .update(&cx.key("a"), b("a2"), a.mod_revision)
        .await
        .unwrap();
    cx.store
        .delete(&cx.key("b"), Some(bb.mod_revision))
        .await
        .unwrap();
    cx.store.create(&cx.key("c"), b("c1")).await.unwrap();
    let then = cx
        .store
        .list(
            &cx.prefix,
            &ListOptions {
                revision: Some(at),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(then.revision, at);
    assert_eq!(keys(&then.items), [cx.key("a"), cx.key("b")]);
    assert_eq!(then.items[0], a);
    assert_eq!(then.items[1], bb);
    // Paging works at a past revision too.
    let page = cx
        .store
        .list(
            &cx.prefix,
            &ListOptions {
                revision: Some(at),
                limit: Some(1),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(keys(&page.items), [cx.key("a")]);
    let rest = cx
        .store
        .list(
            &cx.prefix,
            &ListOptions {
                continue_token: page.continue_token,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(keys(&rest.items), [cx.key("b")]);
    let now = cx.store.list(&cx.prefix, &ListOptions::default()).await.unwrap();
    assert_eq!(keys(&now.items), [cx.key("a"), cx.key("c")]);
    assert_eq!(now.items[0].value, b("a2"));
}

async fn list_at_a_future_revision_is_refused(cx: Ctx) {
    let now = cx.store.current_revision().await.unwrap();
    let err = cx
        .store
        .list(
            &cx.prefix,
            &ListOptions {
                revision: Some(now + 1000),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::FutureRevision { requested, .. } if requested == now + 1000),
        "{err:?}"
    );
}

async fn tampered_continue_tokens_are_invalid(cx: Ctx) {
    put_n(&cx, 3).await;
    for t in ["", "garbage!", "eyJ2IjoxLCJydiI6MCwic3RhcnQiOiJ4In0"] {
        let opts = ListOptions {
            continue_token: Some(t.into()),
            ..Default::default()
        };
        let err = cx.store.list(&cx.prefix, &opts).await.unwrap_err();
        assert!(matches!(err, Error::InvalidContinue { .. }), "{t:?}: {err:?}");
    }
}

async fn continue_after_compaction_is_expired(cx: Ctx) {
    put_n(&cx, 5).await;
    let first = cx
        .store
        .list(
            &cx.prefix,
            &ListOptions {
                limit: Some(2),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    put_n_more(&cx, 3).await;
    cx.store
        .compact(cx.store.current_revision().await.unwrap())
        .await
        .unwrap();
    let opts = ListOptions {
        continue_token: first.continue_token,
        ..Default::default()
    };
    let err = cx.store.list(&cx.prefix, &opts).await.unwrap_err();
    assert!(
        matches!(err, Error::Expired { requested, .. } if requested == first.revision),
        "{err:?}"
    );
}

async fn summary_counts_the_keys_and_names_the_newest_write(cx: Ctx) {
    let a = cx.store.create(&cx.key("a"), b("a1")).await.unwrap();
    let bb = cx.store.create(&cx.key("b"), b("b1")).await.unwrap();
    // A write outside the prefix moves the revision, not the prefix's summary.
    cx.store
        .create(&format!("{}-other", cx.prefix.trim_end_matches('/')), b("x"))
        .await
        .unwrap();
    let quiet = cx.store.current_revision().await.unwrap();
    let a2 = cx
        .store
        .update(&cx.key("a"), b("a2"), a.mod_revision)
        .await
        .unwrap();
    let del = cx
        .store
        .delete(&cx.key("b"), Some(bb.mod_revision))
        .await
        .unwrap();
    let s = |count, newest| Summary { count, newest };
    assert_eq!(
        cx.store.summary(&cx.prefix, bb.mod_revision).await.unwrap(),
        s(2, bb.mod_revision)
    );
    assert_eq!(
        cx.store.summary(&cx.prefix, quiet).await.unwrap(),
        s(2, bb.mod_revision)
    );
    assert_eq!(
        cx.store.summary(&cx.prefix, a2.mod_revision).await.unwrap(),
        s(2, a2.mod_revision)
    );
    // A delete shows in the count, not in the newest write.
    assert_eq!(
        cx.store.summary(&cx.prefix, del.revision).await.unwrap(),
        s(1, a2.mod_revision)
    );
    let err = cx
        .store
        .summary(&cx.prefix, del.revision + 1000)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::FutureRevision { .. }), "{err:?}");
}

async fn put_n_more(cx: &Ctx, n: usize) {
    for i in 0..n {
        cx.store
            .create(&cx.key(&format!("more{i}")), b("v"))
            .await
            .unwrap();
    }
}

async fn list_at_a_compacted_revision_is_gone(cx: Ctx) {
    let revs = put_n(&cx, 5).await;
    cx.store.compact(revs[4]).await.unwrap();
    let err = cx
        .store
        .list(
            &cx.prefix,
            &ListOptions {
                revision: Some(revs[1]),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Gone { requested, .. } if requested == revs[1]),
        "{err:?}"
    );
    // The compaction point itself stays readable.
    let l = cx
        .store
        .list(
            &cx.prefix,
            &ListOptions {
                revision: Some(revs[4]),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(l.items.len(), 5);
    // Compacting again at or below the point is a no-op.
    cx.store.compact(revs[2]).await.unwrap();
}

async fn compact_at_a_future_revision_is_refused(cx: Ctx) {
    let now = cx.store.current_revision().await.unwrap();
    let err = cx.store.compact(now + 1000).await.unwrap_err();
    assert!(matches!(err, Error::FutureRevision { .. }), "{err:?}");
}

// === transactions ===

async fn txn_claims_several_keys_at_one_revision(cx: Ctx) {
    let holder = cx.store.create(&cx.key("holder"), b("h1")).await.unwrap();
    let txn = Txn::new()
        .when(Compare::Absent(cx.key("claim/10.0.0.5")))
        .when(Compare::Absent(cx.key("claim/aa:bb")))
        .when(Compare::ModRevision(cx.key("holder"), holder.mod_revision))
        .put(cx.key("claim/10.0.0.5"), b("port-a"))
        .put(cx.key("claim/aa:bb"), b("port-a"))
        .put(cx.key("holder"), b("h2"));
    let r = cx.store.txn(txn).await.unwrap();
    assert!(r.succeeded);
    assert_eq!(r.prev.len(), 3);
    assert_eq!(r.prev[2].as_ref().unwrap().value, b("h1"));
    for k in ["claim/10.0.0.5", "claim/aa:bb", "holder"] {
        assert_eq!(
            cx.store.get(&cx.key(k)).await.unwrap().mod_revision,
            r.revision,
            "{k}"
        );
    }
    // Delete and put in one transaction.
    let r2 = cx
        .store
        .txn(
            Txn::new()
                .when(Compare::Exists(cx.key("claim/aa:bb")))
                .delete(cx.key("claim/aa:bb"))
                .put(cx.key("claim/aa:cc"), b("port-a")),
        )
        .await
        .unwrap();
    assert!(r2.succeeded && r2.revision > r.revision);
    assert!(matches!(
        cx.store.get(&cx.key("claim/aa:bb")).await,
        Err(Error::NotFound { .. })
    ));
    assert_eq!(r2.prev[0].as_ref().unwrap().value, b("port-a"));
    assert!(r2.prev[1].is_none());
}

async fn failed_txn_writes_nothing_and_reports_current_state(cx: Ctx) {
    let taken = cx.store.create(&cx.key("claim/1"), b("owner")).await.unwrap();
    let before = cx.store.current_revision().await.unwrap();
    let r = cx
        .store
        .txn(
            Txn::new()
                .when(Compare::Absent(cx.key("claim/0")))
                .when(Compare::Absent(cx.key("claim/1")))
                .put(cx.key("claim/0"), b("me"))
                .put(cx.key("claim/1"), b("me")),
        )
        .await
        .unwrap();
    assert!(!r.succeeded);
    assert_eq!(r.current.len(), 2);
    assert_eq!(r.current[0], (cx.key("claim/0"), None));
    assert_eq!(r.current[1], (cx.key("claim/1"), Some(taken)));
    assert!(matches!(
        cx.store.get(&cx.key("claim/0")).await,
        Err(Error::NotFound { .. })
    ));
    // Other cases may share the store and move its revision; this case's keys must not move.
    assert!(r.revision >= before);
    let mine = cx.store.list(&cx.prefix, &ListOptions::default()).await.unwrap();
    assert_eq!(keys(&mine.items), [cx.key("claim/1")]);
    assert_eq!(mine.items[0], r.current[1].1.clone().unwrap());
}

async fn txn_writing_a_key_twice_is_invalid(cx: Ctx) {
    let err = cx
        .store
        .txn(Txn::new().put(cx.key("a"), b("1")).delete(cx.key("a")))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidTxn { .. }), "{err:?}");
}

async fn concurrent_conflicting_updates_exactly_one_wins(cx: Ctx) {
    let c = cx.store.create(&cx.key("hot"), b("0")).await.unwrap();
    let tasks: Vec<_> = (0..32)
        .map(|i| {
            let (store, key) = (cx.store.clone(), cx.key("hot"));
            tokio::spawn(async move {
                store
                    .update(&key, b(&format!("writer-{i}")), c.mod_revision)
                    .await
            })
        })
        .collect();
    let mut won = Vec::new();
    for t in tasks {
        match t.await.unwrap() {
            Ok(kv) => won.push(kv),
            Err(Error::Conflict { expected, actual, .. }) => {
                assert_eq!(expected, c.mod_revision);
                assert!(actual > c.mod_revision);
            }
            Err(e) => panic!("unexpected error {e:?}"),
        }
    }
    assert_eq!(won.len(), 1, "exactly one writer must win");
    assert_eq!(cx.store.get(&cx.key("hot")).await.unwrap(), won[0]);
}

// === watches ===

async fn watch_of_a_prefix_from_a_revision_sees_later_events_with_prev_values(cx: Ctx) {
    let a = cx.store.create(&cx.key("a"), b("a1")).await.unwrap();
    let from = a.mod_revision;
    let a2 = cx
        .store
        .update(&cx.key("a"), b("a2"), a.mod_revision)
        .await
        .unwrap();
    let bb = cx.store.create(&cx.key("b"), b("b1")).await.unwrap();
    let d = cx.store.delete(&cx.key("a"), None).await.unwrap();
    let opts = WatchOptions {
        revision: Some(from),
        prefix: true,
        ..Default::default()
    };
    let mut w = cx.store.watch(&cx.prefix, opts).await.unwrap();
    assert_eq!(
        next_change(&mut w).await,
        Event::Put {
            kv: a2.clone(),
            prev: Some(a)
        }
    );
    assert_eq!(next_change(&mut w).await, Event::Put { kv: bb, prev: None });
    assert_eq!(
        next_change(&mut w).await,
        Event::Delete {
            key: cx.key("a"),
            revision: d.revision,
            prev: Some(a2)
        }
    );
    // And live events after the replay.
    let c = cx.store.create(&cx.key("c"), b("c1")).await.unwrap();
    assert_eq!(next_change(&mut w).await, Event::Put { kv: c, prev: None });
}

async fn watch_of_one_key_sees_only_that_key(cx: Ctx) {
    let opts = WatchOptions {
        prefix: false,
        ..Default::default()
    };
    let mut w = cx.store.watch(&cx.key("a"), opts).await.unwrap();
    cx.store.create(&cx.key("ab"), b("x")).await.unwrap();
    cx.store.create(&cx.key("b"), b("x")).await.unwrap();
    let a = cx.store.create(&cx.key("a"), b("x")).await.unwrap();
    assert_eq!(next_change(&mut w).await, Event::Put { kv: a, prev: None });
}

async fn watch_from_now_sees_only_later_events(cx: Ctx) {
    cx.store.create(&cx.key("old"), b("x")).await.unwrap();
    let mut w = watch_all(&cx).await;
    let n = cx.store.create(&cx.key("new"), b("x")).await.unwrap();
    assert_eq!(next_change(&mut w).await, Event::Put { kv: n, prev: None });
}

async fn watch_delivers_every_event_of_a_txn(cx: Ctx) {
    let mut w = watch_all(&cx).await;
    let r = cx
        .store
        .txn(Txn::new().put(cx.key("x"), b("1")).put(cx.key("y"), b("2")))
        .await
        .unwrap();
    let e1 = next_change(&mut w).await;
    let e2 = next_change(&mut w).await;
    assert_eq!((e1.revision(), e2.revision()), (r.revision, r.revision));
    let mut ks = vec![e1.key().unwrap().to_string(), e2.key().unwrap().to_string()];
    ks.sort();
    assert_eq!(ks, [cx.key("x"), cx.key("y")]);
}

/// Write `total` keys from `writers` concurrent tasks; return every revision acknowledged.
async fn write_concurrently(cx: &Ctx, writers: usize, total: usize) -> HashSet<Revision> {
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            // Spread the remainder so exactly `total` writes happen.
            let per = total / writers + usize::from(w < total % writers);
            let store = cx.store.clone();
            let prefix = cx.prefix.clone();
            tokio::spawn(async move {
                let mut revs = Vec::with_capacity(per);
                for i in 0..per {
                    let key = format!("{prefix}w{w:03}/{i:06}");
                    revs.push(
                        store
                            .create(&key, Bytes::from_static(b"value"))
                            .await
                            .unwrap()
                            .mod_revision,
                    );
                }
                revs
            })
        })
        .collect();
    let mut all = HashSet::new();
    for t in tasks {
        for r in t.await.unwrap() {
            assert!(all.insert(r), "revision {r} acknowledged twice");
        }
    }
    all
}

/// Read `want` changes from `w`: strictly increasing revisions, each key once.
async fn expect_in_order(w: &mut WatchStream, want: &HashSet<Revision>) {
    let mut last = 0;
    let mut seen_keys = HashSet::new();
    for _ in 0..want.len() {
        let ev = next_change(w).await;
        let rev = ev.revision();
        assert!(
            rev > last,
            "revision {rev} after {last}: out of order or duplicated"
        );
        assert!(want.contains(&rev), "revision {rev} was never acknowledged");
        assert!(
            seen_keys.insert(ev.key().unwrap().to_string()),
            "key delivered twice"
        );
        last = rev;
    }
}

async fn watch_is_ordered_with_concurrent_writers(cx: Ctx) {
    let mut w = watch_all(&cx).await;
    let revs = write_concurrently(&cx, 8, 2000).await;
    expect_in_order(&mut w, &revs).await;
}

async fn watch_sees_100k_writes_exactly_once_in_order(cx: Ctx) {
    let mut w = watch_all(&cx).await;
    // Consume while writing, so the watch is exercised live rather than as a replay.
    let store = cx.store.clone();
    let reader = tokio::spawn(async move {
        let mut got = Vec::with_capacity(100_000);
        while got.len() < 100_000 {
            got.push(next_change(&mut w).await.revision());
        }
        drop(store);
        got
    });
    let revs = write_concurrently(&cx, 64, 100_000).await;
    let got = reader.await.unwrap();
    assert!(
        got.windows(2).all(|p| p[0] < p[1]),
        "events out of order or duplicated"
    );
    assert_eq!(got.iter().copied().collect::<HashSet<_>>(), revs);
}

async fn watch_resumed_from_its_last_revision_misses_nothing(cx: Ctx) {
    let start = cx.store.current_revision().await.unwrap();
    let opts = WatchOptions {
        revision: Some(start),
        prefix: true,
        ..Default::default()
    };
    let mut w = cx.store.watch(&cx.prefix, opts.clone()).await.unwrap();
    let first = write_concurrently(&cx, 4, 200).await;
    let mut last = 0;
    for _ in 0..150 {
        last = next_change(&mut w).await.revision();
    }
    drop(w);
    let more: HashSet<Revision> = (0..100)
        .map(|i| cx.key(&format!("late/{i:03}")))
        .collect::<Vec<_>>()
        .into_iter()
        .map(|k| {
            let store = cx.store.clone();
            async move { store.create(&k, b("v")).await.unwrap().mod_revision }
        })
        .collect::<futures::stream::FuturesOrdered<_>>()
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect();
    let mut resumed = cx
        .store
        .watch(
            &cx.prefix,
            WatchOptions {
                revision: Some(last),
                ..opts
            },
        )
        .await
        .unwrap();
    let want: HashSet<Revision> = first.into_iter().filter(|r| *r > last).chain(more).collect();
    assert_eq!(want.len(), 150);
    expect_in_order(&mut resumed, &want).await;
}

async fn watch_from_a_compacted_revision_ends_with_gone(cx: Ctx) {
    let revs = put_n(&cx, 5).await;
    cx.store.compact(revs[4]).await.unwrap();
    let opts = WatchOptions {
        revision: Some(revs[0]),
        prefix: true,
        ..Default::default()
    };
    let mut w = cx.store.watch(&cx.prefix, opts).await.unwrap();
    match next(&mut w).await {
        Some(Err(Error::Gone { requested, .. })) => assert_eq!(requested, revs[0]),
        other => panic!("expected Gone, got {other:?}"),
    }
    assert!(next(&mut w).await.is_none(), "the stream must end after Gone");
    // From the compaction point on, watching works.
    let opts = WatchOptions {
        revision: Some(revs[4]),
        prefix: true,
        ..Default::default()
    };
    let mut w = cx.store.watch(&cx.prefix, opts).await.unwrap();
    let n = cx.store.create(&cx.key("after"), b("x")).await.unwrap();
    assert_eq!(next_change(&mut w).await, Event::Put { kv: n, prev: None });
}

async fn watch_sends_progress_notifications_with_the_current_revision(cx: Ctx) {
    let opts = WatchOptions {
        prefix: true,
        progress_interval: Some(Duration::from_millis(100)),
        ..Default::default()
    };
    let mut w = cx.store.watch(&cx.key("quiet/"), opts).await.unwrap();
    // Writes elsewhere move the revision without events for this watch.
    let elsewhere = cx
        .store
        .create(&cx.key("noisy"), b("x"))
        .await
        .unwrap()
        .mod_revision;
    let deadline = Instant::now() + HANG;
    loop {
        assert!(
            Instant::now() < deadline,
            "no progress notification reached the write"
        );
        match next(&mut w).await.expect("watch ended").expect("watch error") {
            Event::Progress { revision } if revision >= elsewhere => break,
            Event::Progress { .. } => continue,
            other => panic!("unexpected event {other:?}"),
        }
    }
}

async fn health_and_current_revision_answer(cx: Ctx) {
    cx.store.health().await.unwrap();
    let r1 = cx.store.current_revision().await.unwrap();
    let w = cx.store.create(&cx.key("a"), b("x")).await.unwrap();
    let r2 = cx.store.current_revision().await.unwrap();
    assert!(r1 < w.mod_revision && w.mod_revision <= r2);
    assert!(!cx.store.backend().is_empty());
}

// === a real etcd ===

/// A private etcd process on free loopback ports, stopped by PID when dropped.
pub struct EtcdServer {
    child: Option<Child>,
    /// `http://127.0.0.1:<port>`.
    pub client_url: String,
    peer_url: String,
    dir: tempfile::TempDir,
    extra_args: Vec<String>,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

impl EtcdServer {
    /// Start Debian's `etcd` (it must be installed: `make deps`); wait until it is healthy.
    pub fn start() -> Self {
        Self::start_with(Vec::new(), "http")
    }

    /// Start etcd with extra flags; `scheme` is that of the client URL (`https` with TLS flags).
    pub fn start_with(extra_args: Vec<String>, scheme: &str) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let mut s = Self {
            child: None,
            client_url: String::new(),
            peer_url: String::new(),
            dir,
            extra_args,
        };
        // A port found free can be taken (by another test's etcd or an outgoing connection)
        // before etcd binds it: then etcd exits at once, and new ports are tried.
        for attempt in 1.. {
            s.client_url = format!("{scheme}://127.0.0.1:{}", free_port());
            s.peer_url = format!("http://127.0.0.1:{}", free_port());
            match s.try_spawn() {
                Ok(()) => break,
                Err(log) if attempt < 5 && log.contains("address already in use") => {
                    let _ = std::fs::remove_dir_all(s.dir.path().join("data"));
                }
                Err(log) => panic!("etcd exited during start-up:\n{log}"),
            }
        }
        s
    }

    /// Where etcd keeps its data and log.
    pub fn dir(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }

    fn spawn(&mut self) {
        if let Err(log) = self.try_spawn() {
            panic!("etcd exited during start-up:\n{log}");
        }
    }

    /// Starts etcd and waits until it is healthy; `Err` with its log if it exits first.
    fn try_spawn(&mut self) -> Result<(), String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("etcd.log"))
            .expect("etcd log file");
        let child = Command::new(etcd_binary())
            .arg("--name=test")
            .arg(format!("--data-dir={}", self.dir.path().join("data").display()))
            .arg(format!("--listen-client-urls={}", self.client_url))
            .arg(format!("--advertise-client-urls={}", self.client_url))
            .arg(format!("--listen-peer-urls={}", self.peer_url))
            .arg(format!("--initial-advertise-peer-urls={}", self.peer_url))
            .arg(format!("--initial-cluster=test={}", self.peer_url))
            .arg("--log-level=error")
            .args(&self.extra_args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start etcd ({e}); install it with `make deps`"));
        self.child = Some(child);
        self.wait_ready()
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let port = self.client_url.rsplit(':').next().unwrap().to_string();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                self.child = None;
                let log = std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default();
                // The next attempt appends to the same file: start it afresh.
                let _ = std::fs::remove_file(self.dir.path().join("etcd.log"));
                return Err(format!("{status}\n{log}"));
            }
            // Plain-text /health answers when the client port serves http; with TLS an accepted
            // TCP connection is the best readiness signal without a client certificate.
            if let Ok(mut s) = TcpStream::connect(format!("127.0.0.1:{port}")) {
                if self.client_url.starts_with("https") {
                    return Ok(());
                }
                let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                let _ = s.write_all(b"GET /health HTTP/1.0\r\nHost: localhost\r\n\r\n");
                let mut out = String::new();
                let _ = s.read_to_string(&mut out);
                if out.contains("\"health\":\"true\"") {
                    return Ok(());
                }
            }
            assert!(
                Instant::now() < deadline,
                "etcd did not become healthy within 30s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stop the process (SIGTERM by PID, then wait).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(child.id().to_string())
                .status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while child.try_wait().ok().flatten().is_none() {
                if Instant::now() > deadline {
                    let _ = child.kill();
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.wait();
        }
    }

    /// Stop and start again on the same ports and data.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    /// A backend configuration that reaches this server.
    pub fn config(&self) -> etcd::Config {
        etcd::Config::new([self.client_url.clone()])
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn etcd_binary() -> String {
    std::env::var("ETCD_BIN").unwrap_or_else(|_| "etcd".into())
}

async fn hold_admits_one_holder_until_it_lapses(cx: Ctx) {
    let key = cx.key("leader");
    let ttl = Duration::from_secs(1);
    assert!(
        cx.store.hold(&key, "a", ttl).await.unwrap(),
        "a free key is taken"
    );
    assert!(
        !cx.store.hold(&key, "b", ttl).await.unwrap(),
        "a held key is not shared"
    );
    let before = cx.store.get(&key).await.unwrap();
    assert!(cx.store.hold(&key, "a", ttl).await.unwrap(), "the holder renews");
    let after = cx.store.get(&key).await.unwrap();
    if cx.store.backend() == "etcd" {
        // A lease keep-alive: the key (and etcd's revision) did not move.
        assert_eq!(after.mod_revision, before.mod_revision);
    } else {
        assert!(after.mod_revision > before.mod_revision);
    }
    // a stops renewing: its hold lapses (etcd rounds a lease up to its minimum TTL) and b
    // takes the key.
    let deadline = tokio::time::Instant::now() + HANG;
    while !cx.store.hold(&key, "b", ttl).await.unwrap() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the lapsed hold was never released"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        !cx.store.hold(&key, "a", ttl).await.unwrap(),
        "a lost the key to b"
    );
    assert!(cx.store.hold(&key, "b", ttl).await.unwrap());
}
