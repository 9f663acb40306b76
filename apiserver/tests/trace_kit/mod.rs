//! The in-process server the VPC trace tests ask (`trace.rs`, `trace_doors.rs`): the router
//! over embedded storage, every request made as the server itself (the authorization of a
//! trace is `tenancy.rs`'s and `trace_tenancy.rs`'s business). Test files are separate crates:
//! a helper one of them does not call is not dead code.
#![allow(dead_code)]

use axum::body::Body;
use axum::http::Request;
use cozyplane_apiserver::registry::hooks::Requester;
use cozyplane_apiserver::server::router::{AppState, MAX_BODY, router};
use serde_json::{Value, json};
use tower::ServiceExt as _;

pub(crate) const API: &str = "/apis/sdn.cozystack.io/v1alpha1";

pub(crate) struct Server {
    pub(crate) app: axum::Router,
    _dir: tempfile::TempDir,
}

impl Server {
    pub(crate) async fn start() -> Self {
        let (dir, storage) = cozyplane_storage::testing::embedded().await;
        let kinds = cozyplane_apiserver::registry::kinds(&storage);
        let app = router(AppState::new(kinds, storage, false, MAX_BODY));
        Self { app, _dir: dir }
    }

    /// `(code, body)` of a request made as the server itself.
    pub(crate) async fn call(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", "application/json")
            .body(Body::from(body.map(Value::to_string).unwrap_or_default()))
            .unwrap();
        req.extensions_mut().insert(Requester::Server);
        let r = self.app.clone().oneshot(req).await.unwrap();
        let code = r.status().as_u16();
        let bytes = axum::body::to_bytes(r.into_body(), usize::MAX).await.unwrap();
        (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }

    pub(crate) async fn ok(&self, method: &str, path: &str, body: &Value) -> Value {
        let (code, v) = self.call(method, path, Some(body)).await;
        assert!((200..300).contains(&code), "{method} {path}: {code} {v}");
        v
    }

    pub(crate) async fn trace_in(&self, ns: &str, vpc: &str, spec: &Value) -> (u16, Value) {
        let body = json!({"apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "VPCTrace", "spec": spec});
        self.call(
            "POST",
            &format!("{API}/namespaces/{ns}/vpcs/{vpc}/trace"),
            Some(&body),
        )
        .await
    }
}

pub(crate) fn typed(kind: &str, v: Value) -> Value {
    let mut v = v;
    v["apiVersion"] = json!("sdn.cozystack.io/v1alpha1");
    v["kind"] = json!(kind);
    v.as_object_mut().unwrap().remove("status");
    v
}
