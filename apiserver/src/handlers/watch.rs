//! Watch: chunked JSON, one event per line; the events pending for a connection go out in one
//! write.
//!
//! An event is encoded once per change and output form, and shared by every watcher that sends
//! it (see [`EventLines`]): the plain object is the cached object's bytes between a fixed head
//! and tail; Table and PartialObjectMetadata events are built from the object once too. Only a
//! watch's first Table event (it carries the column definitions) and its initial state are
//! encoded for that watch alone. Initial state (legacy `resourceVersion` unset/`0`, or
//! `sendInitialEvents=true`) is a snapshot of the watch cache; changes come from the cache's
//! history and broadcast after the snapshot's revision, so nothing is missed or repeated.
//! Selectors are applied server-side with ADDED/DELETED on transitions. Failures after the
//! headers are sent become one ERROR event.
//!
//! The response body reads the cache's broadcast itself (no task or channel per watch): each
//! time hyper asks for data it takes every change already waiting, so a busy watch costs one
//! wake-up and one write per batch, not per event.

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

/// The slot of [`EventLines`] that holds event type `ty` in form (`repr`, `include`).
fn slot(repr: Repr, include: Include, ty: usize) -> usize {
    match repr {
        Repr::Object => ty,
        Repr::Metadata => 3 + ty,
        Repr::Table => {
            6 + 3 * match include {
                Include::None => 0,
                Include::Metadata => 1,
                Include::Object => 2,
            } + ty
        }
    }
}

impl Enc {
    /// The event `TYPES[ty]` of `obj`; `lines` shares the encoded events between watchers.
    fn event(&mut self, ty: usize, obj: &Cached, lines: Option<&EventLines>) -> Bytes {
        // A watch's first Table event carries the column definitions: its own.
        let shared = lines.filter(|_| !(self.repr == Repr::Table && self.first_table));
        let first = std::mem::replace(&mut self.first_table, false) && self.repr == Repr::Table;
        match shared {
            Some(l) => l.get(slot(self.repr, self.include, ty), || {
                encode(&*self.r, self.repr, self.include, false, ty, obj)
            }),
            None => encode(&*self.r, self.repr, self.include, first, ty, obj),
        }
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

/// Event `TYPES[ty]` of `obj` in form `repr` (`with_columns`: a Table with its column
/// definitions).
fn encode(
    r: &dyn Resource,
    repr: Repr,
    include: Include,
    with_columns: bool,
    ty: usize,
    obj: &Cached,
) -> Bytes {
    let name = TYPES[ty];
    if repr == Repr::Object {
        return object_line(name, obj.json());
    }
    let obj = match obj.value() {
        Ok(v) => v,
        Err(e) => return error_event(&e),
    };
    let o = match repr {
        Repr::Object | Repr::Metadata => table::partial(&obj),
        Repr::Table => {
            let rv = obj
                .pointer("/metadata/resourceVersion")
                .cloned()
                .unwrap_or(json!(""));
            table::table(
                r,
                std::slice::from_ref(&obj),
                &json!({"resourceVersion": rv}),
                include,
                with_columns,
            )
        }
    };
    line(&json!({ "type": name, "object": o }))
}

fn error_event(e: &ApiError) -> Bytes {
    line(&json!({ "type": "ERROR", "object": e.to_status() }))
}

/// The most bytes of pending events sent in one write.
const BATCH: usize = 256 << 10;

/// Clients need bookmarks only now and then; the cache's progress ticks are more frequent.
const BOOKMARK_EVERY: Duration = Duration::from_secs(5);

/// The event stream of a watch, served from the resource's watch cache: each item is every
/// event pending at the time, joined.
pub fn stream(
    cache: Arc<WatchCache>,
    w: WatchRequest,
) -> impl Stream<Item = Result<Bytes, std::convert::Infallible>> + Send {
    let deadline = tokio::time::Instant::now() + w.timeout;
    futures::stream::unfold(Step::Start(cache, w), move |step| async move {
        let mut watch = match step {
            Step::Start(cache, w) => match Watch::start(cache, w).await {
                Ok(watch) => watch,
                Err(e) => return Some((Ok(error_event(&e)), Step::Done)),
            },
            Step::Next(watch) => watch,
            Step::Done => return None,
        };
        let batch = tokio::select! {
            b = watch.next_batch() => b,
            _ = tokio::time::sleep_until(deadline) => return None,
        };
        match batch {
            Batch::More(b) => Some((Ok(b), Step::Next(watch))),
            Batch::Last(b) => Some((Ok(b), Step::Done)),
            Batch::End => None,
        }
    })
}

enum Step {
    Start(Arc<WatchCache>, WatchRequest),
    Next(Box<Watch>),
    Done,
}

enum Batch {
    /// Events; more may follow.
    More(Bytes),
    /// The last events (an ERROR): the stream ends after them.
    Last(Bytes),
    /// The stream ends.
    End,
}

/// One watch's position in the cache.
struct Watch {
    enc: Enc,
    namespace: Option<String>,
    params: ListParams,
    selectable: &'static [(&'static str, &'static str)],
    bookmarks: bool,
    /// The initial state not sent yet, and the revision of the end bookmark if one is due.
    initial: std::vec::IntoIter<Arc<Cached>>,
    end_bookmark: Option<Revision>,
    replay: std::collections::VecDeque<Change>,
    live: tokio::sync::broadcast::Receiver<Change>,
    last: Revision,
    last_bookmark: tokio::time::Instant,
}

impl Watch {
    async fn start(cache: Arc<WatchCache>, w: WatchRequest) -> Result<Box<Self>, ApiError> {
        let r = cache.resource().clone();
        let selectable = r.selectable_fields();
        let (initial, start, replay, live) = cache
            .subscribe(w.namespace.as_deref(), w.start, w.initial)
            .await?;
        Ok(Box::new(Self {
            enc: Enc {
                r,
                repr: w.repr,
                include: w.include,
                first_table: true,
            },
            namespace: w.namespace,
            params: w.params,
            selectable,
            bookmarks: w.bookmarks,
            initial: initial.into_iter(),
            end_bookmark: w.initial_end_bookmark.then_some(start),
            replay: replay.into(),
            live,
            last: start,
            last_bookmark: tokio::time::Instant::now(),
        }))
    }

    fn matches(&self, o: &Cached) -> bool {
        self.namespace.as_deref().is_none_or(|ns| o.namespace() == ns)
            && o.matches(&self.params, self.selectable)
    }

    /// The event `change` makes for this watch, if any.
    fn event(&mut self, change: &Change) -> Option<Bytes> {
        match change {
            Change::Progress { revision } => {
                if !self.bookmarks || *revision <= self.last || self.last_bookmark.elapsed() < BOOKMARK_EVERY
                {
                    return None;
                }
                self.last = *revision;
                self.last_bookmark = tokio::time::Instant::now();
                Some(self.enc.bookmark(*revision, false))
            }
            Change::Put { obj, prev, lines } => {
                let rev = obj.rv();
                if rev <= self.last {
                    return None;
                }
                self.last = rev;
                let was = prev.as_ref().is_some_and(|p| self.matches(p));
                let ty = match (was, self.matches(obj)) {
                    (false, true) => 0,
                    (true, true) => 1,
                    (true, false) => 2,
                    (false, false) => return None,
                };
                Some(self.enc.event(ty, obj, Some(lines)))
            }
            Change::Delete { obj, lines, .. } => {
                let rev = obj.rv();
                if rev <= self.last {
                    return None;
                }
                self.last = rev;
                if !self.matches(obj) {
                    return None;
                }
                Some(self.enc.event(2, obj, Some(lines)))
            }
        }
    }

    /// The next change waiting (replayed history first), without waiting; `Err` ends the
    /// stream (with the ERROR event to send, if any).
    fn try_change(&mut self) -> Result<Option<Change>, Option<Bytes>> {
        use tokio::sync::broadcast::error::TryRecvError;
        if let Some(c) = self.replay.pop_front() {
            return Ok(Some(c));
        }
        match self.live.try_recv() {
            Ok(c) => Ok(Some(c)),
            Err(TryRecvError::Empty) => Ok(None),
            Err(TryRecvError::Lagged(_)) => Err(Some(self.lagged())),
            Err(TryRecvError::Closed) => Err(None),
        }
    }

    fn lagged(&self) -> Bytes {
        error_event(&ApiError::gone(format!(
            "too old resource version: {} (watcher fell behind)",
            self.last
        )))
    }

    /// Every event waiting, joined (up to [`BATCH`] bytes); waits for one if none is.
    async fn next_batch(&mut self) -> Batch {
        use tokio::sync::broadcast::error::RecvError;
        let mut out = Out::default();
        while out.len < BATCH
            && let Some(item) = self.initial.next()
        {
            if self.matches(&item) {
                out.push(self.enc.event(0, &item, None));
            }
        }
        if self.initial.len() == 0
            && let Some(rev) = self.end_bookmark.take()
        {
            out.push(self.enc.bookmark(rev, true));
        }
        loop {
            while out.len < BATCH {
                match self.try_change() {
                    Ok(Some(c)) => {
                        if let Some(e) = self.event(&c) {
                            out.push(e);
                        }
                    }
                    Ok(None) => break,
                    Err(last) => {
                        if let Some(e) = last {
                            out.push(e);
                        }
                        return match out.take() {
                            Some(b) => Batch::Last(b),
                            None => Batch::End,
                        };
                    }
                }
            }
            if let Some(b) = out.take() {
                return Batch::More(b);
            }
            match self.live.recv().await {
                Ok(c) => {
                    if let Some(e) = self.event(&c) {
                        out.push(e);
                    }
                }
                Err(RecvError::Lagged(_)) => return Batch::Last(self.lagged()),
                Err(RecvError::Closed) => return Batch::End,
            }
        }
    }
}

/// Events gathered for one write: a single event is sent as it is (its bytes shared with the
/// other watchers), several are joined.
#[derive(Default)]
struct Out {
    first: Option<Bytes>,
    joined: Option<bytes::BytesMut>,
    len: usize,
}

impl Out {
    fn push(&mut self, b: Bytes) {
        self.len += b.len();
        match (&mut self.joined, self.first.take()) {
            (Some(j), _) => j.extend_from_slice(&b),
            (None, None) => self.first = Some(b),
            (None, Some(f)) => {
                let mut j = bytes::BytesMut::with_capacity(f.len() + b.len() * 4);
                j.extend_from_slice(&f);
                j.extend_from_slice(&b);
                self.joined = Some(j);
            }
        }
    }

    fn take(&mut self) -> Option<Bytes> {
        self.len = 0;
        match (self.joined.take(), self.first.take()) {
            (Some(j), _) => Some(j.freeze()),
            (None, f) => f,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_and_type_has_its_own_slot() {
        let mut seen = std::collections::HashSet::new();
        for repr in [Repr::Object, Repr::Metadata, Repr::Table] {
            for include in [Include::None, Include::Metadata, Include::Object] {
                for ty in 0..3 {
                    let s = slot(repr, include, ty);
                    assert!(s < crate::registry::cache::EVENT_FORMS);
                    // Object and Metadata events do not depend on includeObject.
                    if repr == Repr::Table || include == Include::None {
                        assert!(seen.insert(s), "{repr:?} {include:?} {ty}");
                    }
                }
            }
        }
        assert_eq!(seen.len(), crate::registry::cache::EVENT_FORMS);
    }

    #[test]
    fn one_event_is_sent_as_shared_and_several_are_joined() {
        let a = Bytes::from_static(b"a\n");
        let mut out = Out::default();
        assert!(out.take().is_none());
        out.push(a.clone());
        let one = out.take().unwrap();
        assert_eq!(one.as_ptr(), a.as_ptr());
        for b in [&b"a\n"[..], b"bb\n", b"c\n"] {
            out.push(Bytes::copy_from_slice(b));
        }
        assert_eq!(out.len, 7);
        assert_eq!(&out.take().unwrap()[..], b"a\nbb\nc\n");
        assert_eq!(out.len, 0);
    }
}
