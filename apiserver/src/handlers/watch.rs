//! Watch: chunked JSON, one event per line, flushed per event.
//!
//! Initial state (legacy `resourceVersion` unset/`0`, or `sendInitialEvents=true`) is a snapshot
//! of the watch cache; changes come from the cache's history and broadcast after the snapshot's
//! revision, so nothing is missed or repeated. Selectors are applied server-side with ADDED/DELETED on
//! transitions. Failures after the headers are sent become one ERROR event.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cozyplane_storage::Revision;
use futures::{Stream, StreamExt};
use serde_json::{Value, json};

use super::table::{self, Include, Repr};
use crate::errors::ApiError;
use crate::registry::Resource;
use crate::registry::cache::{Change, WatchCache};
use crate::registry::store::ListParams;

/// A parsed watch request.
pub struct WatchRequest {
    /// Namespace, or all.
    pub namespace: Option<String>,
    /// Where to start (`None`: now, with initial events).
    pub start: Option<Revision>,
    /// Send the current state first.
    pub initial: bool,
    /// End the initial state with the `k8s.io/initial-events-end` bookmark.
    pub initial_end_bookmark: bool,
    /// Send bookmarks.
    pub bookmarks: bool,
    /// Filters.
    pub params: ListParams,
    /// Stream end.
    pub timeout: Duration,
    /// Representation of event objects.
    pub repr: Repr,
    /// Table `includeObject`.
    pub include: Include,
}

fn line(v: &Value) -> Bytes {
    let mut b = serde_json::to_vec(v).unwrap_or_default();
    b.push(b'\n');
    b.into()
}

struct Enc {
    r: Arc<dyn Resource>,
    repr: Repr,
    include: Include,
    first_table: bool,
}

impl Enc {
    fn event(&mut self, ty: &str, obj: &Value) -> Bytes {
        let o = match self.repr {
            Repr::Object => obj.clone(),
            Repr::Metadata => table::partial(obj),
            Repr::Table => {
                let rv = obj
                    .pointer("/metadata/resourceVersion")
                    .cloned()
                    .unwrap_or(json!(""));
                let t = table::table(
                    &*self.r,
                    std::slice::from_ref(obj),
                    &json!({"resourceVersion": rv}),
                    self.include,
                    self.first_table,
                );
                self.first_table = false;
                t
            }
        };
        line(&json!({ "type": ty, "object": o }))
    }

    fn bookmark(&self, rev: Revision, initial_end: bool) -> Bytes {
        let i = self.r.info();
        let (kind, api) = match self.repr {
            Repr::Object => (i.kind.to_string(), crate::registry::api_version(i)),
            Repr::Metadata => ("PartialObjectMetadata".into(), "meta.k8s.io/v1".into()),
            Repr::Table => ("Table".into(), "meta.k8s.io/v1".into()),
        };
        let mut meta = json!({ "resourceVersion": rev.to_string() });
        if initial_end {
            meta["annotations"] = json!({ "k8s.io/initial-events-end": "true" });
        }
        let obj = if self.repr == Repr::Table {
            json!({ "kind": kind, "apiVersion": api, "metadata": meta, "columnDefinitions": [], "rows": [] })
        } else {
            json!({ "kind": kind, "apiVersion": api, "metadata": meta })
        };
        line(&json!({ "type": "BOOKMARK", "object": obj }))
    }
}

fn error_event(e: &ApiError) -> Bytes {
    line(&json!({ "type": "ERROR", "object": e.to_status() }))
}

/// The event stream of a watch, served from the resource's watch cache.
pub fn stream(
    cache: Arc<WatchCache>,
    w: WatchRequest,
) -> impl Stream<Item = Result<Bytes, std::convert::Infallible>> + Send {
    let deadline = tokio::time::Instant::now() + w.timeout;
    let s = event_stream(cache, w);
    futures::stream::unfold((Box::pin(s), deadline), |(mut s, deadline)| async move {
        tokio::select! {
            item = s.next() => item.map(|b| (Ok(b), (s, deadline))),
            _ = tokio::time::sleep_until(deadline) => None,
        }
    })
}

/// Clients need bookmarks only now and then; the cache's progress ticks are far more frequent.
const BOOKMARK_EVERY: Duration = Duration::from_secs(5);

fn event_stream(cache: Arc<WatchCache>, w: WatchRequest) -> impl Stream<Item = Bytes> + Send {
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(64);
    tokio::spawn(async move {
        let r = cache.resource().clone();
        let mut enc = Enc {
            r: r.clone(),
            repr: w.repr,
            include: w.include,
            first_table: true,
        };
        let ns = w.namespace.as_deref();
        let in_ns =
            |v: &Value| ns.is_none() || v.pointer("/metadata/namespace").and_then(Value::as_str) == ns;
        let matches =
            |v: &Value| in_ns(v) && w.params.labels.matches_object(v) && w.params.fields.matches_object(v);
        let (initial, start, replay, mut live) = match cache.subscribe(ns, w.start, w.initial).await {
            Ok(s) => s,
            Err(e) => {
                let _ = tx.send(error_event(&e)).await;
                return;
            }
        };
        for item in initial.iter().filter(|o| matches(o)) {
            if tx.send(enc.event("ADDED", item)).await.is_err() {
                return;
            }
        }
        if w.initial_end_bookmark && tx.send(enc.bookmark(start, true)).await.is_err() {
            return;
        }
        let mut last = start;
        let mut last_bookmark = tokio::time::Instant::now();
        let mut pending: std::collections::VecDeque<Change> = replay.into();
        loop {
            let change = match pending.pop_front() {
                Some(c) => c,
                None => match live.recv().await {
                    Ok(c) => c,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        let e =
                            ApiError::gone(format!("too old resource version: {last} (watcher fell behind)"));
                        let _ = tx.send(error_event(&e)).await;
                        return;
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                },
            };
            let out = match &change {
                Change::Progress { revision } => {
                    if !w.bookmarks || *revision <= last || last_bookmark.elapsed() < BOOKMARK_EVERY {
                        continue;
                    }
                    last = *revision;
                    last_bookmark = tokio::time::Instant::now();
                    enc.bookmark(*revision, false)
                }
                Change::Put { obj, prev } => {
                    let rev = rv(obj);
                    if rev <= last {
                        continue;
                    }
                    last = rev;
                    let was = prev.as_ref().is_some_and(&matches);
                    match (was, matches(obj)) {
                        (false, true) => enc.event("ADDED", obj),
                        (true, true) => enc.event("MODIFIED", obj),
                        (true, false) => enc.event("DELETED", obj),
                        (false, false) => continue,
                    }
                }
                Change::Delete { obj } => {
                    let rev = rv(obj);
                    if rev <= last {
                        continue;
                    }
                    last = rev;
                    if !matches(obj) {
                        continue;
                    }
                    enc.event("DELETED", obj)
                }
            };
            if tx.send(out).await.is_err() {
                return;
            }
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

fn rv(obj: &Value) -> Revision {
    obj.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}
