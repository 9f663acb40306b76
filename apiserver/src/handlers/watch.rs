//! Watch: chunked JSON, one event per line; the events pending for a connection go out in one
//! write.
//!
//! A plain-object event is the cached object's bytes between a fixed head and tail: it is built
//! once per change and shared by every watcher (see [`EventLines`]); only Table and
//! PartialObjectMetadata events are built per watcher. Initial state (legacy `resourceVersion` unset/`0`, or `sendInitialEvents=true`) is a snapshot
//! of the watch cache; changes come from the cache's history and broadcast after the snapshot's
//! revision, so nothing is missed or repeated. Selectors are applied server-side with ADDED/DELETED on
//! transitions. Failures after the headers are sent become one ERROR event.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cozyplane_storage::Revision;
use futures::Stream;
use serde_json::{Value, json};

use super::table::{self, Include, Repr};
use crate::errors::ApiError;
use crate::registry::Resource;
use crate::registry::cache::{Cached, Change, EventLines, WatchCache};
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

const TYPES: [&str; 3] = ["ADDED", "MODIFIED", "DELETED"];

/// `{"object":<obj>,"type":"<ty>"}` and a newline: what serializing the event as a JSON tree
/// gives (keys sorted), from the object's bytes.
fn object_line(ty: &str, obj: &[u8]) -> Bytes {
    let mut b = Vec::with_capacity(obj.len() + 32);
    b.extend_from_slice(b"{\"object\":");
    b.extend_from_slice(obj);
    b.extend_from_slice(b",\"type\":\"");
    b.extend_from_slice(ty.as_bytes());
    b.extend_from_slice(b"\"}\n");
    b.into()
}

impl Enc {
    /// The event `TYPES[ty]` of `obj`; `lines` shares plain-object events between watchers.
    fn event(&mut self, ty: usize, obj: &Cached, lines: Option<&EventLines>) -> Bytes {
        let name = TYPES[ty];
        if self.repr == Repr::Object {
            return match lines {
                Some(l) => l.get(ty, || object_line(name, obj.json())),
                None => object_line(name, obj.json()),
            };
        }
        let obj = match obj.value() {
            Ok(v) => v,
            Err(e) => return error_event(&e),
        };
        let o = match self.repr {
            Repr::Object | Repr::Metadata => table::partial(&obj),
            Repr::Table => {
                let rv = obj
                    .pointer("/metadata/resourceVersion")
                    .cloned()
                    .unwrap_or(json!(""));
                let t = table::table(
                    &*self.r,
                    std::slice::from_ref(&obj),
                    &json!({"resourceVersion": rv}),
                    self.include,
                    self.first_table,
                );
                self.first_table = false;
                t
            }
        };
        line(&json!({ "type": name, "object": o }))
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

/// The most bytes of pending events sent in one write.
const BATCH: usize = 256 << 10;

/// The event stream of a watch, served from the resource's watch cache: each item is every
/// event pending at the time, joined.
pub fn stream(
    cache: Arc<WatchCache>,
    w: WatchRequest,
) -> impl Stream<Item = Result<Bytes, std::convert::Infallible>> + Send {
    let deadline = tokio::time::Instant::now() + w.timeout;
    let rx = event_stream(cache, w);
    futures::stream::unfold((rx, deadline), |(mut rx, deadline)| async move {
        let first = tokio::select! {
            item = rx.recv() => item?,
            _ = tokio::time::sleep_until(deadline) => return None,
        };
        let Ok(next) = rx.try_recv() else {
            return Some((Ok(first), (rx, deadline)));
        };
        let mut batch = bytes::BytesMut::with_capacity(first.len() + next.len());
        batch.extend_from_slice(&first);
        batch.extend_from_slice(&next);
        while batch.len() < BATCH {
            let Ok(more) = rx.try_recv() else { break };
            batch.extend_from_slice(&more);
        }
        Some((Ok(batch.freeze()), (rx, deadline)))
    })
}

/// Clients need bookmarks only now and then; the cache's progress ticks are far more frequent.
const BOOKMARK_EVERY: Duration = Duration::from_secs(5);

fn event_stream(cache: Arc<WatchCache>, w: WatchRequest) -> tokio::sync::mpsc::Receiver<Bytes> {
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
        let selectable = r.selectable_fields();
        let matches =
            |o: &Arc<Cached>| ns.is_none_or(|ns| o.namespace() == ns) && o.matches(&w.params, selectable);
        let (initial, start, replay, mut live) = match cache.subscribe(ns, w.start, w.initial).await {
            Ok(s) => s,
            Err(e) => {
                let _ = tx.send(error_event(&e)).await;
                return;
            }
        };
        for item in initial.iter().filter(|o| matches(o)) {
            if tx.send(enc.event(0, item, None)).await.is_err() {
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
                Change::Put { obj, prev, lines } => {
                    let rev = obj.rv();
                    if rev <= last {
                        continue;
                    }
                    last = rev;
                    let was = prev.as_ref().is_some_and(&matches);
                    let ty = match (was, matches(obj)) {
                        (false, true) => 0,
                        (true, true) => 1,
                        (true, false) => 2,
                        (false, false) => continue,
                    };
                    enc.event(ty, obj, Some(lines))
                }
                Change::Delete { obj, lines, .. } => {
                    let rev = obj.rv();
                    if rev <= last {
                        continue;
                    }
                    last = rev;
                    if !matches(obj) {
                        continue;
                    }
                    enc.event(2, obj, Some(lines))
                }
            };
            if tx.send(out).await.is_err() {
                return;
            }
        }
    });
    rx
}
