//! The HTTP edge of every request, whatever its route: the header limit, the request body the
//! route did not read, and the end of long-running responses when the server shuts down.
//!
//! A route may answer before it reads the request body: `404` for an unknown subresource, `413`
//! for a body announced (`Content-Length`) or found larger than the limit. Dropping the unread
//! body at that moment hurts the client: hyper then gives up on an HTTP/1.1 connection (the
//! client, still sending, often sees it closed instead of the answer). So the route's body is a
//! [`Guarded`] one that *parks* itself when dropped unread, and once the answer exists:
//!
//! - HTTP/2: the unread body is dropped. h2 then discards (and gives back the flow-control window
//!   of) whatever else arrives for the stream, and since hyper holds the stream until the
//!   response is sent, the stream ends with the complete response followed by `RST_STREAM`
//!   `NO_ERROR`, as RFC 9113 §8.1 provides for a complete response to an incomplete request.
//! - HTTP/1.1: the rest of the body is read and discarded (up to [`Edge::drain_limit`] bytes,
//!   within [`DRAIN_TIME`]) so the connection carries the next request. A body announced larger
//!   than that, or one the client only sends after a `100 Continue` it never got, ends the
//!   connection instead, announced with `Connection: close` on the answer.
//!
//! Headers: Go's HTTP server, kube-apiserver's, accepts up to 1 MiB of request line and headers
//! ([`MAX_HEADER_BYTES`]); beyond that this edge answers `431` with a `Status`, up to hyper's
//! HTTP/1.1 read buffer ([`H1_MAX_BUF`]), where hyper answers a bare `431` itself. One limit is
//! the `http` crate's and cannot be raised: a request target of 64 KiB or more is no `Uri`.
//! Over HTTP/1.1 hyper answers it with a bare `414`; over HTTP/2 h2 could only reset the stream
//! with PROTOCOL_ERROR, which Go clients retry without end (kubectl loops). So HTTP/2 advertises
//! a header list of at most [`H2_MAX_HEADER_LIST`] (64 KiB), and a larger one gets h2's own
//! `431` (kubectl: "the server responded with the status code 431").

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, Request, Response, Version, header, request::Parts};
use axum::response::IntoResponse;
use bytes::Bytes;
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use tokio::sync::watch;
use tower::ServiceExt;

use crate::errors::ApiError;

/// Largest request line plus headers answered normally: Go's `http.DefaultMaxHeaderBytes`, the
/// limit of kube-apiserver. Each header counts its name, its value and 4 bytes (`: `, CRLF).
pub const MAX_HEADER_BYTES: usize = 1 << 20;

/// hyper's HTTP/1.1 read buffer: above [`MAX_HEADER_BYTES`] so that the edge, not hyper,
/// answers the first megabyte beyond it.
pub const H1_MAX_BUF: usize = 2 << 20;

/// HTTP/2 `SETTINGS_MAX_HEADER_LIST_SIZE`: a header list holding a `:path` the `http` crate
/// cannot represent (65 535 bytes and more, counted with RFC 7541's 32 bytes per field) is over
/// it, so it is answered `431` rather than reset.
pub const H2_MAX_HEADER_LIST: u32 = 64 * 1024;

/// Header fields per HTTP/1.1 request (hyper's default is 100; the front proxy sends one
/// `X-Remote-Group` per group of the user).
pub const MAX_H1_HEADERS: usize = 1024;

/// The least an HTTP/1.1 connection reads and discards after an early answer.
const DRAIN_MIN: u64 = 16 << 20;

/// How long an HTTP/1.1 connection reads and discards after an early answer.
pub const DRAIN_TIME: Duration = Duration::from_secs(10);

/// The per-connection edge; cheap to clone.
#[derive(Clone)]
pub struct Edge {
    drain_limit: u64,
    stopping: watch::Receiver<bool>,
}

/// A request body the route dropped before its end.
struct Unread {
    body: Incoming,
    /// Whether the route polled it (for `Expect: 100-continue`: hyper then sent the `100`).
    polled: bool,
}

type Parked = Arc<Mutex<Option<Unread>>>;

impl Edge {
    /// An edge for bodies up to `max_body` bytes; long-running responses end when `stopping`
    /// turns true.
    pub fn new(max_body: usize, stopping: watch::Receiver<bool>) -> Self {
        let drain_limit = u64::try_from(max_body)
            .unwrap_or(u64::MAX)
            .saturating_mul(2)
            .max(DRAIN_MIN);
        Self {
            drain_limit,
            stopping,
        }
    }

    /// How many bytes of an unread HTTP/1.1 body are read and discarded to keep the connection:
    /// twice `--max-request-body-bytes`, at least 16 MiB.
    pub fn drain_limit(&self) -> u64 {
        self.drain_limit
    }

    /// Serves `req` with `app`, see the module docs.
    pub async fn serve<S>(self, req: Request<Incoming>, app: S) -> Result<Response<Body>, S::Error>
    where
        S: tower::Service<Request<Body>, Response = Response<Body>>,
    {
        let version = req.version();
        let (parts, incoming) = req.into_parts();
        let expects_continue = version == Version::HTTP_11
            && parts
                .headers
                .get(header::EXPECT)
                .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
        let long_running = is_watch(parts.uri.query());
        let parked = Parked::default();
        let body = Guarded {
            inner: Some(incoming),
            polled: false,
            parked: parked.clone(),
        };
        let mut resp = if header_bytes(&parts) > MAX_HEADER_BYTES {
            drop(body);
            ApiError::headers_too_large(MAX_HEADER_BYTES).into_response()
        } else {
            app.oneshot(Request::from_parts(parts, Body::new(body))).await?
        };
        let unread = parked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(u) = unread.filter(|_| version != Version::HTTP_2) {
            if (expects_continue && !u.polled) || u.body.size_hint().lower() > self.drain_limit {
                resp.headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            } else {
                tokio::spawn(drain(u.body, self.drain_limit));
            }
        }
        let stop = long_running.then(|| {
            let mut rx = self.stopping.clone();
            Box::pin(async move {
                let _ = rx.wait_for(|s| *s).await;
            }) as Pin<Box<dyn Future<Output = ()> + Send>>
        });
        Ok(resp.map(|inner| Body::new(Finish { inner, stop })))
    }
}

/// Request line and headers in bytes, counted as on the HTTP/1.1 wire.
fn header_bytes(p: &Parts) -> usize {
    let target = p.uri.path_and_query().map_or(1, |pq| pq.as_str().len());
    p.headers
        .iter()
        .fold(p.method.as_str().len() + target + 11, |n, (k, v)| {
            n + k.as_str().len() + v.len() + 4
        })
}

/// Whether the query asks for a watch (`watch=true`, `1`, `t`… as Go's `strconv.ParseBool`).
fn is_watch(query: Option<&str>) -> bool {
    form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .filter(|(k, _)| k == "watch")
        .last()
        .is_some_and(|(_, v)| matches!(&*v, "1" | "t" | "T" | "true" | "TRUE" | "True"))
}

/// Reads and discards an unread HTTP/1.1 body, at most `limit` bytes within [`DRAIN_TIME`];
/// dropping it unfinished makes hyper close the connection after the answer.
async fn drain(mut body: Incoming, limit: u64) {
    let read = async {
        let mut n = 0u64;
        while !body.is_end_stream()
            && let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await
        {
            let Ok(frame) = frame else { return };
            if let Some(d) = frame.data_ref() {
                n = n.saturating_add(d.len() as u64);
                if n > limit {
                    tracing::debug!(limit, "unread request body over the drain limit; closing");
                    return;
                }
            }
        }
    };
    if tokio::time::timeout(DRAIN_TIME, read).await.is_err() {
        tracing::debug!("unread request body not drained in time; closing");
    }
}

/// The request body as the route sees it; parks the rest of itself when dropped unread.
struct Guarded {
    inner: Option<Incoming>,
    polled: bool,
    parked: Parked,
}

impl HttpBody for Guarded {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        self.polled = true;
        match self.inner.as_mut() {
            Some(b) => Pin::new(b).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(HttpBody::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), HttpBody::size_hint)
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        if let Some(body) = self.inner.take().filter(|b| !b.is_end_stream()) {
            *self
                .parked
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Unread {
                body,
                polled: self.polled,
            });
        }
    }
}

/// The response body as hyper sees it: ends a long-running response (a watch) cleanly, between
/// two events, when the server stops.
struct Finish {
    inner: Body,
    stop: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
}

impl HttpBody for Finish {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        if let Some(stop) = self.stop.as_mut()
            && stop.as_mut().poll(cx).is_ready()
        {
            return Poll::Ready(None);
        }
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_flags_follow_parse_bool() {
        assert!(is_watch(Some("watch=true")));
        assert!(is_watch(Some("labelSelector=a&watch=1")));
        assert!(!is_watch(Some("watch=false")));
        assert!(!is_watch(Some("watch=0&x=1")));
        assert!(!is_watch(None));
    }
}
