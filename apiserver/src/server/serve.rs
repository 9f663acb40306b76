//! The serving loop: accept, TLS, one hyper connection per socket through the [`Edge`], and
//! the orderly shutdown.
//!
//! Shutdown, on the signal given to [`serve`] (SIGTERM or SIGINT in `main.rs`), follows
//! k8s.io/apiserver:
//! 1. `/readyz` fails (check `shutdown`) while the server still accepts and serves, for
//!    `--shutdown-delay-duration`, so that Endpoints and load balancers stop sending new work.
//! 2. The listener is closed: new connections are refused.
//! 3. Every connection is told to finish: HTTP/1.1 connections close after the request in
//!    progress (idle ones at once), HTTP/2 ones get a GOAWAY and finish their open streams.
//!    Watches end cleanly at an event boundary (the chunked response or the HTTP/2 stream is
//!    terminated normally), so client-go re-lists and re-watches against another replica.
//! 4. Requests in flight finish within `--shutdown-grace-period`; whatever is still open then is
//!    dropped, and `serve` returns.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, Response};
use cozyplane_authz::PeerCertificates;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use super::edge::{self, Edge};
use super::router::AppState;

/// Durations of the shutdown.
#[derive(Clone, Copy, Debug)]
pub struct Lifecycle {
    /// How long `/readyz` fails while the server still serves (`--shutdown-delay-duration`).
    pub delay: Duration,
    /// How long requests in flight may take once the listener is closed
    /// (`--shutdown-grace-period`).
    pub grace: Duration,
}

/// Serves `listener` with `app` until `signal` resolves, then shuts down as the module docs
/// describe.
pub async fn serve<S>(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    app: S,
    state: Arc<AppState>,
    lifecycle: Lifecycle,
    signal: impl Future<Output = ()>,
) where
    S: tower::Service<Request<Body>, Response = Response<Body>, Error = std::convert::Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let (stopping_tx, stopping) = watch::channel(false);
    let conns = Conns {
        acceptor,
        edge: Edge::new(state.max_body, stopping),
        app,
        graceful: GracefulShutdown::new(),
    };
    let mut backoff = Duration::from_millis(5);
    let mut signal = std::pin::pin!(signal);
    loop {
        tokio::select! {
            () = &mut signal => break,
            a = listener.accept() => conns.accepted(a, &mut backoff).await,
        }
    }
    state.draining.store(true, Ordering::SeqCst);
    tracing::info!(delay = ?lifecycle.delay, "shutting down: /readyz fails; still serving during the delay");
    let delay = tokio::time::sleep(lifecycle.delay);
    let mut delay = std::pin::pin!(delay);
    loop {
        tokio::select! {
            () = &mut delay => break,
            a = listener.accept() => conns.accepted(a, &mut backoff).await,
        }
    }
    drop(listener);
    stopping_tx.send_replace(true);
    let open = conns.graceful.count();
    tracing::info!(open, grace = ?lifecycle.grace, "listener closed; draining connections");
    if tokio::time::timeout(lifecycle.grace, conns.graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(grace = ?lifecycle.grace, "grace period over; dropping the connections still open");
    } else {
        tracing::info!("all connections ended");
    }
}

/// What every accepted connection needs.
struct Conns<S> {
    acceptor: TlsAcceptor,
    edge: Edge,
    app: S,
    graceful: GracefulShutdown,
}

impl<S> Conns<S>
where
    S: tower::Service<Request<Body>, Response = Response<Body>, Error = std::convert::Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    async fn accepted(&self, a: std::io::Result<(TcpStream, SocketAddr)>, backoff: &mut Duration) {
        match a {
            Ok((tcp, peer)) => {
                *backoff = Duration::from_millis(5);
                self.spawn(tcp, peer, self.graceful.watcher());
            }
            // Out of file descriptors or memory, a connection reset before it was accepted:
            // the listener itself is fine, so the server goes on (as Go's does).
            Err(e) => {
                tracing::warn!(error = %e, "accept failed; retrying in {backoff:?}");
                tokio::time::sleep(*backoff).await;
                *backoff = (*backoff * 2).min(Duration::from_secs(1));
            }
        }
    }

    /// Serves one connection; `watcher` (taken at accept, so a shutdown during the TLS
    /// handshake is seen) holds the shutdown back until the connection has ended.
    fn spawn(&self, tcp: TcpStream, peer: SocketAddr, watcher: Watcher) {
        // Watch events and HTTP/2 frames are small writes that must not wait for the peer's
        // delayed ACK (Nagle). Go servers, kube-apiserver among them, do the same.
        let _ = tcp.set_nodelay(true);
        let acceptor = self.acceptor.clone();
        let app = self.app.clone();
        let edge = self.edge.clone();
        tokio::spawn(async move {
            let tls = match acceptor.accept(tcp).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
            };
            let certs = tls
                .get_ref()
                .1
                .peer_certificates()
                .filter(|c| !c.is_empty())
                .map(|c| PeerCertificates::new(c.iter().map(|d| d.clone().into_owned()).collect()));
            let svc = hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
                if let Some(c) = &certs {
                    req.extensions_mut().insert(c.clone());
                }
                edge.clone().serve(req, app.clone())
            });
            let mut b = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            b.http1()
                .max_buf_size(edge::H1_MAX_BUF)
                .max_headers(edge::MAX_H1_HEADERS);
            // Watches are long-lived streams; the aggregator multiplexes many per connection.
            b.http2()
                .max_concurrent_streams(1000)
                .max_header_list_size(edge::H2_MAX_HEADER_LIST);
            let conn = b.serve_connection(TokioIo::new(tls), svc);
            if let Err(e) = watcher.watch(conn).await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
}
