//! The one request router: health, version, metrics, discovery, OpenAPI and the group-version,
//! all dispatched from the path so every kind of the table is served by the same code.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use cozyplane_apis::{GROUP, v1alpha1::VERSION};
use cozyplane_storage::Storage;
use serde_json::{Value, json};

use super::{discovery, health, metrics::Metrics, metrics::RequestLabels, openapi::Docs};
use crate::errors::{ApiError, Result};
use crate::handlers::{self, Target};
use crate::registry::Resource;
use crate::registry::cache::WatchCache;
use crate::registry::hooks::Requester;

/// Default largest request body accepted (kube-apiserver's limit, 3 MiB); see
/// `--max-request-body-bytes`.
pub const MAX_BODY: usize = 3 * 1024 * 1024;

/// Shared state of every request.
pub struct AppState {
    /// The table of kinds.
    pub kinds: Vec<Arc<dyn Resource>>,
    /// One watch cache per kind, in table order.
    pub caches: Vec<Arc<WatchCache>>,
    /// The watch caches of the core `v1` kinds served under `/api/v1` (namespaces, on a
    /// standalone server; none otherwise).
    pub core: Vec<Arc<WatchCache>>,
    /// Aggregated discovery body of `/api` and its ETag.
    pub core_discovery_v2: (Vec<u8>, String),
    /// The store (health).
    pub storage: Arc<dyn Storage>,
    /// OpenAPI documents.
    pub docs: Docs,
    /// Aggregated discovery body and its ETag.
    pub discovery_v2: (Vec<u8>, String),
    /// Metrics.
    pub metrics: Metrics,
    /// The kube-apiserver informers (`/readyz` checks, metrics); none without a kube connection.
    pub informers: Arc<crate::informer::Informers>,
    /// Whether the server runs standalone (informational; authentication is the authz layers').
    pub require_authn: bool,
    /// Largest request body accepted; larger ones get 413 (`--max-request-body-bytes`).
    pub max_body: usize,
    /// Set when shutdown has begun: `/readyz` fails from then on.
    pub draining: std::sync::atomic::AtomicBool,
    /// The kube-apiserver client for plain requests (pod traces read Pods and policies with
    /// it); set once the connection is made, never on a standalone server without one.
    pub kube: std::sync::OnceLock<kube::Client>,
}

impl AppState {
    /// State for `kinds`, accepting request bodies up to `max_body` bytes.
    pub fn new(
        kinds: Vec<Arc<dyn Resource>>,
        storage: Arc<dyn Storage>,
        require_authn: bool,
        max_body: usize,
    ) -> Arc<Self> {
        Self::with_core(kinds, Vec::new(), storage, require_authn, max_body)
    }

    /// As [`new`](Self::new), also serving the core `v1` kinds `core` under `/api/v1`.
    pub fn with_core(
        kinds: Vec<Arc<dyn Resource>>,
        core: Vec<Arc<dyn Resource>>,
        storage: Arc<dyn Storage>,
        require_authn: bool,
        max_body: usize,
    ) -> Arc<Self> {
        use sha2::Digest;
        let tagged = |v: &Value| {
            let body = serde_json::to_vec(v).expect("a JSON value serializes");
            let etag = sha2::Sha512::digest(&body)
                .iter()
                .take(16)
                .map(|b| format!("{b:02X}"))
                .collect();
            (body, etag)
        };
        let docs = Docs::build(&kinds);
        let (v2, etag) = tagged(&discovery::aggregated(&kinds));
        let core_discovery_v2 = tagged(&discovery::core_aggregated(&core));
        let caches = kinds.iter().map(|k| WatchCache::start(k.clone())).collect();
        let core = core.into_iter().map(WatchCache::start).collect();
        let metrics = Metrics::default();
        let informers = Arc::new(crate::informer::Informers::default());
        metrics.register(|r| informers.register_metrics(r));
        Arc::new(Self {
            kinds,
            caches,
            core,
            core_discovery_v2,
            storage,
            docs,
            discovery_v2: (v2, etag),
            metrics,
            informers,
            require_authn,
            max_body,
            draining: std::sync::atomic::AtomicBool::new(false),
            kube: std::sync::OnceLock::new(),
        })
    }
}

/// The axum router.
pub fn router(state: Arc<AppState>) -> axum::Router {
    axum::Router::new().fallback(serve).with_state(state)
}

fn raw(code: StatusCode, ct: &'static str, body: impl Into<Body>) -> Response {
    let mut r = Response::new(body.into());
    *r.status_mut() = code;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
    r
}

fn json_ok(v: &Value) -> Response {
    raw(StatusCode::OK, "application/json", v.to_string())
}

fn etagged(headers: &HeaderMap, etag: &str, ct: &'static str, body: &[u8]) -> Response {
    let quoted = format!("\"{etag}\"");
    if headers.get(header::IF_NONE_MATCH).and_then(|v| v.to_str().ok()) == Some(quoted.as_str()) {
        let mut r = raw(StatusCode::NOT_MODIFIED, ct, Body::empty());
        r.headers_mut().insert(
            header::ETAG,
            HeaderValue::from_str(&quoted).expect("hex is a valid header"),
        );
        return r;
    }
    let mut r = raw(StatusCode::OK, ct, body.to_vec());
    r.headers_mut().insert(
        header::ETAG,
        HeaderValue::from_str(&quoted).expect("hex is a valid header"),
    );
    r.headers_mut()
        .insert(header::VARY, HeaderValue::from_static("Accept"));
    r
}

/// Query parameters, decoded as `application/x-www-form-urlencoded` (`+` is a space); a
/// repeated key keeps its last value.
fn query(q: Option<&str>) -> HashMap<String, String> {
    form_urlencoded::parse(q.unwrap_or_default().as_bytes())
        .into_owned()
        .collect()
}

async fn serve(State(st): State<Arc<AppState>>, req: Request) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let r = route(&st, req).await.unwrap_or_else(IntoResponse::into_response);
    tracing::debug!(%method, %path, code = r.status().as_u16(), "request");
    st.metrics
        .requests
        .get_or_create(&RequestLabels {
            verb: method.to_string(),
            code: r.status().as_u16(),
        })
        .inc();
    r
}

async fn route(st: &Arc<AppState>, req: Request) -> Result<Response> {
    // Authentication and authorization happened in the cozyplane-authz layers around the router.
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().trim_end_matches('/').to_string();
    let q = parts.uri.query().unwrap_or_default().to_string();
    let headers = parts.headers;
    let method = parts.method;
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match segs.as_slice() {
        [ep @ ("healthz" | "livez" | "readyz")] => return Ok(health::check(st, ep, None, &q).await),
        [ep @ ("healthz" | "livez" | "readyz"), check] => {
            return Ok(health::check(st, ep, Some(check), &q).await);
        }
        ["version"] => {
            return Ok(json_ok(&json!({
                "major": "1", "minor": "33", "gitVersion": concat!("v1.33.0-cozyplane-", env!("CARGO_PKG_VERSION")),
                "gitCommit": "", "gitTreeState": "clean", "buildDate": "", "goVersion": "", "compiler": "rustc", "platform": "linux/amd64",
            })));
        }
        ["metrics"] => {
            return Ok(raw(
                StatusCode::OK,
                "text/plain; version=0.0.4",
                st.metrics.encode(),
            ));
        }
        ["api"] => {
            if discovery::wants_v2(&accept) {
                let mut r = etagged(
                    &headers,
                    &st.core_discovery_v2.1,
                    discovery::V2_MEDIA,
                    &st.core_discovery_v2.0,
                );
                r.headers_mut()
                    .insert(header::CACHE_CONTROL, HeaderValue::from_static("public"));
                return Ok(r);
            }
            return Ok(json_ok(&discovery::core_versions(&core_kinds(st))));
        }
        ["api", "v1"] if !st.core.is_empty() => {
            return Ok(json_ok(&discovery::core_resource_list(&core_kinds(st))));
        }
        // The core kinds of a standalone server (namespaces).
        ["api", "v1", rest @ ..] if !st.core.is_empty() => {
            let mut target = resolve(&st.core, rest)?;
            target.requester = parts.extensions.get::<Requester>().cloned();
            let body = read_body(body, st.max_body).await?;
            return handlers::dispatch(target, &method, query(Some(&q)), &headers, body).await;
        }
        ["apis"] => {
            if discovery::wants_v2(&accept) {
                let mut r = etagged(
                    &headers,
                    &st.discovery_v2.1,
                    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
                    &st.discovery_v2.0,
                );
                r.headers_mut()
                    .insert(header::CACHE_CONTROL, HeaderValue::from_static("public"));
                return Ok(r);
            }
            return Ok(json_ok(&discovery::group_list()));
        }
        ["apis", g] if *g == GROUP => return Ok(json_ok(&discovery::group())),
        ["apis", g, v] if *g == GROUP && *v == VERSION => {
            return Ok(json_ok(&discovery::resource_list(&st.kinds)));
        }
        ["openapi", "v2"] => {
            return Ok(etagged(
                &headers,
                &st.docs.v2_etag,
                "application/json",
                &st.docs.v2,
            ));
        }
        ["openapi", "v3"] => return Ok(json_ok(&st.docs.v3_root())),
        ["openapi", "v3", "apis", g, v] if *g == GROUP && *v == VERSION => {
            let qm = query(Some(&q));
            if let Some(h) = qm.get("hash")
                && *h != st.docs.v3_hash
            {
                let mut r = raw(StatusCode::MOVED_PERMANENTLY, "text/plain", Body::empty());
                let loc = format!("/openapi/v3/apis/{GROUP}/{VERSION}?hash={}", st.docs.v3_hash);
                r.headers_mut().insert(
                    header::LOCATION,
                    HeaderValue::from_str(&loc).expect("a path is a valid header"),
                );
                return Ok(r);
            }
            let mut r = etagged(&headers, &st.docs.v3_hash, "application/json", &st.docs.v3_gv);
            if qm.contains_key("hash") {
                r.headers_mut().insert(
                    header::CACHE_CONTROL,
                    HeaderValue::from_static("public, immutable"),
                );
            }
            return Ok(r);
        }
        // Read-only projection of a VPC's addresses, computed on read (crate::alloc::projection).
        ["apis", g, v, "namespaces", ns, "vpcs", name, "allocations"] if *g == GROUP && *v == VERSION => {
            if method != axum::http::Method::GET {
                return Err(ApiError::method_not_allowed(method.as_str()));
            }
            return Ok(json_ok(
                &crate::alloc::projection::allocations(&st.storage, ns, name).await?,
            ));
        }
        // The SecurityGroup verdict of a flow, computed on request (crate::trace): a `create`
        // of subresource `vpcs/trace`, authorized as such by the authorization layer.
        ["apis", g, v, "namespaces", ns, "vpcs", name, "trace"] if *g == GROUP && *v == VERSION => {
            if method != axum::http::Method::POST {
                return Err(ApiError::method_not_allowed(method.as_str()));
            }
            let body = read_body(body, st.max_body).await?;
            let answer = crate::trace::trace(&st.storage, st.kube.get(), ns, name, &body).await?;
            let bytes = serde_json::to_vec(&answer).map_err(ApiError::internal)?;
            return Ok(raw(StatusCode::CREATED, "application/json", bytes));
        }
        // The default network's policy verdict of a flow of the namespace's pods, computed on
        // request from the kube-apiserver's objects (crate::trace::pod): a `create` of
        // `podtraces` in the namespace, authorized as such by the authorization layer.
        ["apis", g, v, "namespaces", ns, "podtraces"] if *g == GROUP && *v == VERSION => {
            if method != axum::http::Method::POST {
                return Err(ApiError::method_not_allowed(method.as_str()));
            }
            let body = read_body(body, st.max_body).await?;
            let answer = crate::trace::pod::trace(&st.storage, st.kube.get(), ns, &body).await?;
            let bytes = serde_json::to_vec(&answer).map_err(ApiError::internal)?;
            return Ok(raw(StatusCode::CREATED, "application/json", bytes));
        }
        ["apis", g, v, rest @ ..] if *g == GROUP && *v == VERSION => {
            let mut target = resolve(&st.caches, rest)?;
            target.requester = parts.extensions.get::<Requester>().cloned();
            let body = read_body(body, st.max_body).await?;
            return handlers::dispatch(target, &method, query(Some(&q)), &headers, body).await;
        }
        _ => {}
    }
    Err(ApiError::path_not_found())
}

fn core_kinds(st: &AppState) -> Vec<Arc<dyn Resource>> {
    st.core.iter().map(|c| c.resource().clone()).collect()
}

/// The request body, at most `max` bytes. A body announced larger is refused before a byte of
/// it is read (server/edge.rs disposes of it); one without a length is cut at the limit.
async fn read_body(body: Body, max: usize) -> Result<axum::body::Bytes> {
    if axum::body::HttpBody::size_hint(&body).lower() > max as u64 {
        return Err(ApiError::too_large());
    }
    axum::body::to_bytes(body, max)
        .await
        .map_err(|_| ApiError::too_large())
}

fn find(caches: &[Arc<WatchCache>], plural: &str) -> Result<Arc<WatchCache>> {
    caches
        .iter()
        .find(|c| c.resource().info().plural == plural)
        .cloned()
        .ok_or_else(ApiError::path_not_found)
}

fn resolve(caches: &[Arc<WatchCache>], rest: &[&str]) -> Result<Target> {
    let t = |c: Arc<WatchCache>, ns: Option<&str>, name: Option<&str>, status: bool| Target {
        resource: c.resource().clone(),
        cache: c,
        namespace: ns.map(str::to_string),
        name: name.map(str::to_string),
        status,
        requester: None,
    };
    match rest {
        ["namespaces", ns, plural, tail @ ..] => {
            let r = find(caches, plural)?;
            if !r.resource().info().namespaced {
                return Err(ApiError::path_not_found());
            }
            match tail {
                [] => Ok(t(r, Some(ns), None, false)),
                [name] => Ok(t(r, Some(ns), Some(name), false)),
                [name, "status"] if r.resource().info().has_status => Ok(t(r, Some(ns), Some(name), true)),
                _ => Err(ApiError::path_not_found()),
            }
        }
        [plural, tail @ ..] => {
            let r = find(caches, plural)?;
            match tail {
                [] => Ok(t(r, None, None, false)),
                [name] if !r.resource().info().namespaced => Ok(t(r, None, Some(name), false)),
                [name, "status"] if !r.resource().info().namespaced && r.resource().info().has_status => {
                    Ok(t(r, None, Some(name), true))
                }
                _ => Err(ApiError::path_not_found()),
            }
        }
        _ => Err(ApiError::path_not_found()),
    }
}
