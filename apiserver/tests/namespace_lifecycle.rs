//! Namespace lifecycle admission of a standalone server, which keeps its own namespaces: a
//! create in a namespace the watch cache knows is admitted without a storage read (every create
//! of a namespaced kind asks, so a read here is one more etcd request per create); a namespace
//! created a moment ago, before the cache heard of it, is found in storage; a missing one is
//! refused with 404 and a terminating one with 403.

use std::sync::Arc;
use std::time::Duration;

use cozyplane_apis::ApiKind;
use cozyplane_apis::v1alpha1::FloatingIP;
use cozyplane_apiserver::admission::namespace::Lifecycle;
use cozyplane_apiserver::registry::cache::WatchCache;
use cozyplane_apiserver::registry::store::{DeleteOptions, WriteOptions};
use cozyplane_apiserver::registry::{Resource, Store, namespace};
use cozyplane_storage::Storage;
use cozyplane_storage::recording::{Call, Recording};
use serde_json::json;

struct World {
    recording: Arc<Recording>,
    namespaces: Arc<dyn Resource>,
    cache: Arc<WatchCache>,
    _dir: tempfile::TempDir,
}

async fn world() -> World {
    let (dir, inner) = cozyplane_storage::testing::embedded().await;
    let recording = Arc::new(Recording::new(inner));
    let storage: Arc<dyn Storage> = recording.clone();
    let namespaces: Arc<dyn Resource> = Arc::new(Store::new(namespace::Strategy, storage));
    let cache = WatchCache::start(namespaces.clone());
    World {
        recording,
        namespaces,
        cache,
        _dir: dir,
    }
}

fn ns(name: &str) -> serde_json::Value {
    json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": name } })
}

async fn cached(cache: &WatchCache, name: &str) {
    for _ in 0..200 {
        if cache.object(None, name).is_some() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the cache never heard of namespace {name}");
}

fn namespace_gets(r: &Recording) -> usize {
    r.count(|c| matches!(c, Call::Get(k) if k.starts_with("/registry/namespaces/")))
}

#[tokio::test]
async fn a_namespace_the_cache_knows_is_checked_without_reading_storage() {
    let w = world().await;
    w.namespaces
        .create(None, ns("t1"), &WriteOptions::server())
        .await
        .unwrap();
    cached(&w.cache, "t1").await;
    let lifecycle = Lifecycle::local(w.namespaces.clone(), Some(w.cache.clone()));
    let before = namespace_gets(&w.recording);
    for i in 0..10 {
        lifecycle
            .check(&FloatingIP::INFO, "t1", &format!("f{i}"))
            .await
            .unwrap();
    }
    assert_eq!(namespace_gets(&w.recording), before, "{:?}", w.recording.calls());
}

#[tokio::test]
async fn a_namespace_unknown_to_the_cache_is_read_from_storage() {
    let w = world().await;
    w.namespaces
        .create(None, ns("t1"), &WriteOptions::server())
        .await
        .unwrap();
    // No cache at all: what a namespace created a moment ago looks like to the check.
    let lifecycle = Lifecycle::local(w.namespaces.clone(), None);
    let before = namespace_gets(&w.recording);
    lifecycle.check(&FloatingIP::INFO, "t1", "f").await.unwrap();
    assert_eq!(namespace_gets(&w.recording), before + 1);

    let e = lifecycle
        .check(&FloatingIP::INFO, "missing", "f")
        .await
        .unwrap_err();
    assert_eq!(e.code, 404, "{e:?}");
}

#[tokio::test]
async fn a_terminating_namespace_in_the_cache_is_refused() {
    let w = world().await;
    w.namespaces
        .create(None, ns("t2"), &WriteOptions::server())
        .await
        .unwrap();
    // The namespace keeps its `kubernetes` finalizer (no controller runs here): marked, not gone.
    w.namespaces
        .delete(None, "t2", &DeleteOptions::default())
        .await
        .unwrap();
    let lifecycle = Lifecycle::local(w.namespaces.clone(), Some(w.cache.clone()));
    for _ in 0..200 {
        if w.cache
            .object(None, "t2")
            .is_some_and(|o| o.value().unwrap()["metadata"]["deletionTimestamp"].is_string())
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let before = namespace_gets(&w.recording);
    let e = lifecycle.check(&FloatingIP::INFO, "t2", "f").await.unwrap_err();
    assert_eq!(e.code, 403, "{e:?}");
    assert_eq!(namespace_gets(&w.recording), before);
}
