//! Lists the watch cache answers: a continue page it serves after the collection changed shows
//! the collection as it was at the first page's revision (what storage's Exact read at that
//! revision shows), on both backends; so does a list storage answers with the cache's bytes; a
//! `resourceVersion=0` list equals storage's list. On etcd, a walk whose first page storage read
//! at a revision moved by another key's write is served by the cache from the second page on.

use std::sync::Arc;
use std::time::Duration;

use cozyplane_apiserver::registry::cache::WatchCache;
use cozyplane_apiserver::registry::store::{DeleteOptions, ListParams, WriteOptions};
use cozyplane_storage::Storage;
use cozyplane_storage::recording::{Call, Recording};
use cozyplane_storage::testing::EtcdServer;
use serde_json::{Value, json};

fn vpc(name: &str) -> Value {
    json!({ "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "VPC",
        "metadata": { "name": name }, "spec": { "cidrs": ["10.0.0.0/24"] } })
}

fn values(items: &[bytes::Bytes]) -> Vec<Value> {
    items
        .iter()
        .map(|b| serde_json::from_slice(b).expect("an item is JSON"))
        .collect()
}

fn any(limit: Option<u64>) -> ListParams {
    ListParams {
        any_revision: true,
        limit,
        ..Default::default()
    }
}

/// Waits until the cache lists exactly `names` in namespace `t`.
async fn settled(cache: &WatchCache, names: &[&str]) {
    let want: Vec<&str> = names.to_vec();
    for _ in 0..200 {
        let page = cache.list(Some("t"), &any(None)).await.unwrap();
        let got: Vec<String> = values(&page.items)
            .iter()
            .map(|v| v["metadata"]["name"].as_str().unwrap().to_string())
            .collect();
        if got == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the cache never listed {want:?}");
}

async fn continue_pages_show_the_first_pages_revision(storage: Arc<dyn Storage>) {
    let kinds = cozyplane_apiserver::registry::kinds(&storage);
    let vpcs = kinds.iter().find(|k| k.info().plural == "vpcs").unwrap().clone();
    let cache = WatchCache::start(vpcs.clone());
    let w = WriteOptions::server();
    for n in ["a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7"] {
        vpcs.create(Some("t"), vpc(n), &w).await.unwrap();
    }
    // Another namespace, around `t` in key order, never shows up.
    vpcs.create(Some("s"), vpc("x"), &w).await.unwrap();
    vpcs.create(Some("u"), vpc("x"), &w).await.unwrap();
    settled(&cache, &["a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7"]).await;

    let first = cache.list(Some("t"), &any(Some(3))).await.unwrap();
    let rev = first.revision;
    let mut token = first.continue_token.clone().expect("more pages");
    assert_eq!(first.remaining, Some(5));
    let mut walked = values(&first.items);

    // The collection changes behind the walk: before and after the token's key.
    vpcs.delete(Some("t"), "a5", &DeleteOptions::default())
        .await
        .unwrap();
    vpcs.delete(Some("t"), "a1", &DeleteOptions::default())
        .await
        .unwrap();
    vpcs.create(Some("t"), vpc("a35"), &w).await.unwrap();
    vpcs.patch(
        Some("t"),
        "a6",
        &|mut v: Value| {
            v["metadata"]["labels"] = json!({ "changed": "yes" });
            Ok(v)
        },
        false,
        &w,
    )
    .await
    .unwrap();
    settled(&cache, &["a0", "a2", "a3", "a35", "a4", "a6", "a7"]).await;

    loop {
        let p = ListParams {
            limit: Some(2),
            continue_token: Some(token.clone()),
            ..Default::default()
        };
        let page = cache.list(Some("t"), &p).await.unwrap();
        assert_eq!(page.revision, rev);
        walked.extend(values(&page.items));
        match page.continue_token {
            Some(t) => token = t,
            None => break,
        }
    }
    let exact = vpcs
        .list(
            Some("t"),
            &ListParams {
                revision: Some(rev),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(exact.items.len(), 8);
    assert_eq!(walked, exact.items);
    // An Exact read goes to storage, which may answer with the cache's bytes only for objects
    // unchanged since.
    let via_cache = cache
        .list(
            Some("t"),
            &ListParams {
                revision: Some(rev),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(values(&via_cache.items), exact.items);

    // A list at any revision is the cache as it stands, equal to storage's list at its revision.
    let now = cache.list(Some("t"), &any(None)).await.unwrap();
    let at = ListParams {
        revision: Some(now.revision),
        ..Default::default()
    };
    assert_eq!(values(&now.items), vpcs.list(Some("t"), &at).await.unwrap().items);
}

#[tokio::test]
async fn continue_pages_from_the_cache_embedded() {
    let (_dir, storage) = cozyplane_storage::testing::embedded().await;
    continue_pages_show_the_first_pages_revision(storage).await;
}

#[tokio::test]
async fn continue_pages_from_the_cache_etcd() {
    let etcd = tokio::task::spawn_blocking(EtcdServer::start).await.unwrap();
    let storage = cozyplane_storage::open(cozyplane_storage::Config::Etcd(etcd.config()))
        .await
        .unwrap();
    continue_pages_show_the_first_pages_revision(storage).await;
}

/// Page reads of VPC lists (more than one key asked for) recorded so far.
fn vpc_pages(r: &Recording) -> usize {
    r.count(|c| matches!(c, Call::List { prefix, limit } if prefix.contains("/vpcs/") && limit.is_none_or(|l| l > 1)))
}

#[tokio::test]
async fn a_walk_past_the_kinds_last_write_is_served_by_the_cache_etcd() {
    let etcd = tokio::task::spawn_blocking(EtcdServer::start).await.unwrap();
    let inner = cozyplane_storage::open(cozyplane_storage::Config::Etcd(etcd.config()))
        .await
        .unwrap();
    let counting = Arc::new(Recording::new(inner.clone()));
    let storage: Arc<dyn Storage> = counting.clone();
    let kinds = cozyplane_apiserver::registry::kinds(&storage);
    let vpcs = kinds.iter().find(|k| k.info().plural == "vpcs").unwrap().clone();
    let cache = WatchCache::start(vpcs.clone());
    let w = WriteOptions::server();
    let names = ["a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7"];
    for n in names {
        vpcs.create(Some("t"), vpc(n), &w).await.unwrap();
    }
    settled(&cache, &names).await;
    // Another key's write (as the controllers' lease renewal is) moves etcd's revision past
    // the kind's last event.
    inner
        .create(
            "/registry/sdn.cozystack.io/_other",
            bytes::Bytes::from_static(b"x"),
        )
        .await
        .unwrap();

    let before = vpc_pages(&counting);
    let first = cache
        .list(
            Some("t"),
            &ListParams {
                limit: Some(3),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(first.revision, inner.current_revision().await.unwrap());
    let mut walked = values(&first.items);
    let mut token = first.continue_token.expect("more pages");
    loop {
        let p = ListParams {
            limit: Some(2),
            continue_token: Some(token.clone()),
            ..Default::default()
        };
        let page = cache.list(Some("t"), &p).await.unwrap();
        assert_eq!(page.revision, first.revision);
        walked.extend(values(&page.items));
        match page.continue_token {
            Some(t) => token = t,
            None => break,
        }
    }
    // Storage read the first page only.
    assert_eq!(vpc_pages(&counting) - before, 1);
    let exact = vpcs
        .list(
            Some("t"),
            &ListParams {
                revision: Some(first.revision),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(walked, exact.items);
}
