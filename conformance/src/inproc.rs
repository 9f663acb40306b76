//! The in-process tier: the API server's real axum router, driven with
//! [`tower::ServiceExt::oneshot`] — no TLS, no socket, no process.
//!
//! [`InProc::start`] builds what `Options::complete_with` and `Server::run_until` build for a
//! standalone server without a kube-apiserver (embedded store in a temp dir, the table of kinds,
//! their watch caches, the server's own namespaces with namespace lifecycle admission, the
//! control loops of our kinds and the namespace controller) and layers the router the same way:
//! `admission::scope` around it, and a fixed authenticated [`UserInfo`] in every request's
//! extensions where the authentication layer would have put it. Authorization is `AlwaysAllow`,
//! as in plain standalone mode. The handlers, watch caches, admission and controllers are the
//! real ones; only the transport (TLS, hyper, the HTTP edge) is left out, which the HTTPS tier
//! (`TestServer`) covers.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use cozyplane_apiserver::admission::{self, Admission};
use cozyplane_apiserver::registry::{self, Resource};
use cozyplane_apiserver::server::router::{AppState, MAX_BODY, router};
use cozyplane_authz::{AlwaysAllow, UserInfo};
use futures::StreamExt;
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;

/// The user every request of an [`InProc`] server is authenticated as.
pub const USER: &str = "inproc-admin";

/// A server driven in-process; its tasks end and its temp dir goes when dropped.
pub struct InProc {
    app: axum::Router,
    /// The shared state (table of kinds, watch caches, store).
    pub state: Arc<AppState>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl Drop for InProc {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// How long one request may take before the harness calls it a hang.
const HANG_GUARD: Duration = Duration::from_secs(30);

impl InProc {
    /// Starts a server on an embedded store in a fresh temp dir.
    pub async fn start() -> Self {
        let (dir, storage) = cozyplane_storage::testing::embedded().await;
        let kinds = registry::kinds(&storage);
        let namespaces = Arc::new(registry::Store::new(
            registry::namespace::Strategy,
            storage.clone(),
        ));
        registry::namespace::create_initial(&*namespaces)
            .await
            .expect("initial namespaces");
        let core: Vec<Arc<dyn Resource>> = vec![namespaces.clone()];
        let state = AppState::with_core(kinds.clone(), core, storage.clone(), true, MAX_BODY);
        let admission = Arc::new(
            Admission::new(Arc::new(AlwaysAllow))
                .with_local_namespaces(namespaces.clone(), Some(state.core[0].clone())),
        );
        let tasks = vec![
            cozyplane_apiserver::controllers::start(state.kinds.clone(), state.caches.clone(), storage, None),
            registry::namespace::controller::start(namespaces, state.core[0].clone(), kinds),
        ];
        let app =
            router(state.clone()).layer(axum::middleware::from_fn_with_state(admission, admission::scope));
        Self {
            app,
            state,
            tasks,
            _dir: dir,
        }
    }

    /// Sends `req` (as the authenticated [`USER`]) and returns the response.
    pub async fn send(&self, mut req: http::Request<Body>) -> http::Response<Body> {
        req.extensions_mut()
            .insert(UserInfo::new(USER, ["system:masters", "system:authenticated"]));
        let what = format!("{} {}", req.method(), req.uri());
        match tokio::time::timeout(HANG_GUARD, self.app.clone().oneshot(req)).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => match e {},
            Err(_) => panic!("{what}: no response in {HANG_GUARD:?}"),
        }
    }

    /// A request with an optional body of content type `ct`: status and body, parsed as JSON
    /// (a body that is not JSON comes back as a JSON string).
    pub async fn request(&self, method: &str, path: &str, ct: &str, body: Option<&Value>) -> (u16, Value) {
        let mut b = http::Request::builder().method(method).uri(path);
        let body = match body {
            Some(v) => {
                b = b.header(http::header::CONTENT_TYPE, ct);
                Body::from(v.to_string())
            }
            None => Body::empty(),
        };
        let r = self.send(b.body(body).expect("request builds")).await;
        let code = r.status().as_u16();
        let bytes = tokio::time::timeout(HANG_GUARD, r.into_body().collect())
            .await
            .unwrap_or_else(|_| panic!("{method} {path}: body not complete in {HANG_GUARD:?}"))
            .expect("body")
            .to_bytes();
        let v = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        (code, v)
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> (u16, Value) {
        self.request("GET", path, "", None).await
    }

    /// `POST path` with a JSON body.
    pub async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        self.request("POST", path, "application/json", Some(body)).await
    }

    /// `PUT path` with a JSON body.
    pub async fn put(&self, path: &str, body: &Value) -> (u16, Value) {
        self.request("PUT", path, "application/json", Some(body)).await
    }

    /// `PATCH path` with a body of patch type `ct` (`application/merge-patch+json`,
    /// `application/json-patch+json`, `application/apply-patch+yaml`, …).
    pub async fn patch(&self, path: &str, ct: &str, body: &Value) -> (u16, Value) {
        self.request("PATCH", path, ct, Some(body)).await
    }

    /// `DELETE path`.
    pub async fn delete(&self, path: &str) -> (u16, Value) {
        self.request("DELETE", path, "", None).await
    }

    /// Creates namespace `name` (core `v1`), tolerating one that exists.
    pub async fn namespace(&self, name: &str) {
        let body = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        let (code, v) = self.post("/api/v1/namespaces", &body).await;
        assert!(
            code == 201 || code == 409,
            "creating namespace {name}: {code} {v}"
        );
    }

    /// Starts a watch: `GET path` (which must ask for `watch=true`), asserting 200.
    pub async fn watch(&self, path: &str) -> Watch {
        let req = http::Request::builder()
            .uri(path)
            .body(Body::empty())
            .expect("request builds");
        let r = self.send(req).await;
        let code = r.status().as_u16();
        if code != 200 {
            let bytes = r.into_body().collect().await.expect("body").to_bytes();
            panic!("watch {path}: {code} {}", String::from_utf8_lossy(&bytes));
        }
        Watch {
            body: r.into_body().into_data_stream(),
            buf: Vec::new(),
        }
    }
}

/// The chunked body of a watch, read one event (`{"type":…,"object":…}`) at a time.
pub struct Watch {
    body: axum::body::BodyDataStream,
    buf: Vec<u8>,
}

impl Watch {
    /// The next event, or `None` when the stream ended or nothing came within `wait` (a hang
    /// guard, not an assertion on timing).
    pub async fn next(&mut self, wait: Duration) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let mut it = serde_json::Deserializer::from_slice(&self.buf).into_iter::<Value>();
            if let Some(Ok(v)) = it.next() {
                let used = it.byte_offset();
                self.buf.drain(..used);
                return Some(v);
            }
            match tokio::time::timeout_at(deadline, self.body.next()).await {
                Ok(Some(Ok(chunk))) => self.buf.extend_from_slice(&chunk),
                _ => return None,
            }
        }
    }
}
