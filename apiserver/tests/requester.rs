//! A write names who makes it: a client's write passes admission, the server's own does not,
//! and a write that reaches a handler without a requester is refused rather than admitted as
//! the server (the failure mode of an ambient, task-local request context).

use std::sync::Arc;

use axum::http::{HeaderMap, Method};
use cozyplane_apiserver::admission::Admission;
use cozyplane_apiserver::handlers::{self, Target};
use cozyplane_apiserver::registry::cache::WatchCache;
use cozyplane_apiserver::registry::hooks::Requester;
use cozyplane_authz::{Attributes, Authorizer, Decision, UserInfo};

#[derive(Debug)]
struct DenyAll;

#[async_trait::async_trait]
impl Authorizer for DenyAll {
    async fn authorize(&self, _: &UserInfo, _: &Attributes) -> cozyplane_authz::Result<Decision> {
        Ok(Decision::Deny {
            reason: "denied in this test".into(),
        })
    }
}

async fn create_binding(cache: &Arc<WatchCache>, requester: Option<Requester>, name: &str) -> u16 {
    let t = Target {
        resource: cache.resource().clone(),
        cache: cache.clone(),
        namespace: Some("t1".into()),
        name: None,
        status: false,
        requester,
    };
    let body = format!(
        r#"{{"apiVersion":"sdn.cozystack.io/v1alpha1","kind":"VPCBinding","metadata":{{"name":"{name}"}},"spec":{{"vpcRef":{{"namespace":"t2","name":"v"}}}}}}"#
    );
    let r = handlers::dispatch(
        t,
        &Method::POST,
        Default::default(),
        &HeaderMap::new(),
        body.into(),
    )
    .await
    .unwrap_or_else(axum::response::IntoResponse::into_response);
    r.status().as_u16()
}

#[tokio::test]
async fn writes_are_admitted_by_their_explicit_requester() {
    let (_dir, storage) = cozyplane_storage::testing::embedded().await;
    let kinds = cozyplane_apiserver::registry::kinds(&storage);
    let bindings = kinds.iter().find(|k| k.info().plural == "vpcbindings").unwrap();
    let cache = WatchCache::start(bindings.clone());

    // A client without `export` on the VPC is refused by admission.
    let client = Requester::Client {
        user: UserInfo::new("mallory", ["system:authenticated"]),
        admission: Arc::new(Admission::new(Arc::new(DenyAll))),
    };
    assert_eq!(create_binding(&cache, Some(client), "b1").await, 403);
    // No requester: refused, never admitted as the server.
    assert_eq!(create_binding(&cache, None, "b2").await, 500);
    // The server's own write is not admitted (it acts with its own authority).
    assert_eq!(create_binding(&cache, Some(Requester::Server), "b3").await, 201);
}
