//! Table and PartialObjectMetadata watch events are encoded once per change and form: two
//! watches asking for the same form receive the very same bytes (one buffer), apart from a
//! Table watch's first event, which carries the column definitions.

use std::time::Duration;

use bytes::Bytes;
use cozyplane_apiserver::handlers::table::{Include, Repr};
use cozyplane_apiserver::handlers::watch::{WatchRequest, stream};
use cozyplane_apiserver::registry::cache::WatchCache;
use cozyplane_apiserver::registry::store::{ListParams, WriteOptions};
use futures::StreamExt;
use serde_json::{Value, json};

fn vpc(name: &str) -> Value {
    json!({ "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "VPC",
        "metadata": { "name": name }, "spec": { "cidrs": ["10.0.0.0/24"] } })
}

fn request(repr: Repr) -> WatchRequest {
    WatchRequest {
        namespace: Some("t".into()),
        start: None,
        initial: false,
        initial_end_bookmark: false,
        bookmarks: false,
        params: ListParams::default(),
        timeout: Duration::from_secs(60),
        repr,
        include: Include::Metadata,
    }
}

type Events = std::pin::Pin<Box<dyn futures::Stream<Item = Result<Bytes, std::convert::Infallible>> + Send>>;

/// The next write of `s` (hang guard: 30 s).
async fn next(s: &mut Events) -> Bytes {
    tokio::time::timeout(Duration::from_secs(30), s.next())
        .await
        .expect("an event in time")
        .expect("the stream goes on")
        .unwrap()
}

#[tokio::test]
async fn table_and_metadata_events_are_encoded_once_per_form() {
    let (_dir, storage) = cozyplane_storage::testing::embedded().await;
    let kinds = cozyplane_apiserver::registry::kinds(&storage);
    let vpcs = kinds.iter().find(|k| k.info().plural == "vpcs").unwrap().clone();
    let cache = WatchCache::start(vpcs.clone());
    // Ready: a subscription waits for the cache to catch up with storage.
    cache.subscribe(None, None, false).await.unwrap();
    let mut watches: Vec<Events> = Vec::new();
    for repr in [Repr::Table, Repr::Table, Repr::Metadata, Repr::Metadata] {
        watches.push(Box::pin(stream(cache.clone(), request(repr))));
    }
    // The streams subscribe when first polled: poll each once before the first write.
    for w in &mut watches {
        assert!(
            tokio::time::timeout(Duration::from_millis(200), w.next())
                .await
                .is_err()
        );
    }
    let w = WriteOptions::server();
    vpcs.create(Some("t"), vpc("a"), &w).await.unwrap();
    let mut first = Vec::new();
    for w in &mut watches {
        first.push(next(w).await);
    }
    let t: Value = serde_json::from_slice(&first[0]).unwrap();
    assert_eq!(t["type"], "ADDED");
    assert_eq!(t["object"]["kind"], "Table");
    assert!(
        !t["object"]["columnDefinitions"].as_array().unwrap().is_empty(),
        "{t}"
    );
    assert_eq!(first[0], first[1]);
    let m: Value = serde_json::from_slice(&first[2]).unwrap();
    assert_eq!(m["object"]["kind"], "PartialObjectMetadata");
    assert_eq!(m["object"]["metadata"]["name"], "a");
    assert_eq!(first[2].as_ptr(), first[3].as_ptr(), "one encoding shared");
    vpcs.create(Some("t"), vpc("b"), &w).await.unwrap();
    let mut second = Vec::new();
    for w in &mut watches {
        second.push(next(w).await);
    }
    let t: Value = serde_json::from_slice(&second[0]).unwrap();
    assert_eq!(t["object"]["rows"][0]["cells"][0], "b");
    assert_eq!(t["object"]["columnDefinitions"], json!([]));
    assert_eq!(
        second[0].as_ptr(),
        second[1].as_ptr(),
        "one Table encoding shared"
    );
    assert_eq!(
        second[2].as_ptr(),
        second[3].as_ptr(),
        "one metadata encoding shared"
    );
}
