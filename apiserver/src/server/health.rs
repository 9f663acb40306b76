//! `/healthz`, `/livez`, `/readyz`: per-check, `?verbose`, `?exclude=`, `/<endpoint>/<check>`.
//!
//! `/readyz` also has one `informer-<resource>` check per kube-apiserver informer
//! ([`crate::informer`]); a failing one shows the kube-apiserver's error (e.g. `nodes is
//! forbidden: …`), which names only the resource and the server's own account.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::router::AppState;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// Runs the checks of `endpoint` (`healthz`, `livez`, `readyz`); `only` selects one check.
pub async fn check(st: &Arc<AppState>, endpoint: &str, only: Option<&str>, query: &str) -> Response {
    let verbose = query
        .split('&')
        .any(|p| p == "verbose" || p.starts_with("verbose="));
    let excluded: Vec<&str> = query
        .split('&')
        .filter_map(|p| p.strip_prefix("exclude="))
        .collect();
    // Liveness must not depend on storage: a slow etcd should not get the process restarted.
    let mut checks: Vec<(String, Result<(), String>)> = vec![("ping".into(), Ok(()))];
    if endpoint != "livez" {
        let withheld = st
            .storage
            .health()
            .await
            .map_err(|_| "reason withheld".to_string());
        checks.push(("storage".into(), withheld));
    }
    if endpoint == "readyz" {
        // As k8s.io/apiserver: once shutdown has begun the server is no longer ready, so that
        // Endpoints drop it while it still serves (server/serve.rs).
        let draining = st.draining.load(Ordering::SeqCst);
        checks.push((
            "shutdown".into(),
            if draining {
                Err("the server is shutting down".into())
            } else {
                Ok(())
            },
        ));
        checks.extend(st.informers.checks());
    }
    let checks: Vec<_> = checks
        .into_iter()
        .filter(|(n, _)| only.is_none_or(|o| o == n) && !excluded.contains(&n.as_str()))
        .collect();
    if checks.is_empty() {
        return (StatusCode::NOT_FOUND, "404 page not found\n").into_response();
    }
    let ok = checks.iter().all(|(_, c)| c.is_ok());
    let mut body = String::new();
    if verbose || !ok {
        for (n, c) in &checks {
            match c {
                Ok(()) => body.push_str(&format!("[+]{n} ok\n")),
                Err(why) => body.push_str(&format!("[-]{n} failed: {why}\n")),
            }
        }
        body.push_str(&if ok {
            format!("{endpoint} check passed\n")
        } else {
            format!("{endpoint} check failed\n")
        });
    } else {
        body.push_str("ok");
    }
    let code = if ok {
        StatusCode::OK
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    };
    let mut r = (code, body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r.headers_mut()
        .insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    r
}
