//! The authentication and authorization layers against a fake kube-apiserver.
//!
//! The fake answers TokenReview and SubjectAccessReview from tables, serves the
//! `extension-apiserver-authentication` ConfigMap (get, list, watch), counts calls and can be
//! stopped. Requests go through the layers around a trivial router with `oneshot`; TLS peer
//! certificates are simulated with the `PeerCertificates` extension.

use std::{
    collections::HashMap,
    net::{IpAddr, Ipv4Addr},
    path::PathBuf,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use axum::{
    Json, Router,
    body::Body,
    extract::{Query, State},
    http::{Request, Response, StatusCode},
    routing::{get, post},
};
use base64::Engine as _;
use cozyplane_authz::{
    AuthOptions, AuthenticationLayer, AuthorizationLayer, AuthorizerExt, PeerCertificates, UserInfo,
};
use http_body_util::BodyExt;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    SanType,
};
use rustls_pki_types::PrivateKeyDer;
use serde_json::{Value, json};
use tokio::{net::TcpListener, sync::watch, task::JoinSet};
use tower::{ServiceBuilder, ServiceExt};

// ---------------------------------------------------------------------------------------------
// Certificates

struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Ca {
    fn new(cn: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, cn);
        let issuer =
            CertifiedIssuer::self_signed(params, KeyPair::generate().expect("CA key")).expect("CA cert");
        Self { issuer }
    }

    fn pem(&self) -> String {
        self.issuer.pem()
    }

    fn client_params(cn: &str, orgs: &[&str]) -> CertificateParams {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("leaf params");
        params.distinguished_name.push(DnType::CommonName, cn);
        for org in orgs {
            params.distinguished_name.push(DnType::OrganizationName, *org);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params
    }

    fn sign(&self, params: &CertificateParams) -> PeerCertificates {
        let key = KeyPair::generate().expect("leaf key");
        let cert = params.signed_by(&key, &self.issuer).expect("leaf cert");
        PeerCertificates::new(vec![cert.der().clone()])
    }

    fn client(&self, cn: &str, orgs: &[&str]) -> PeerCertificates {
        self.sign(&Self::client_params(cn, orgs))
    }

    fn expired_client(&self, cn: &str) -> PeerCertificates {
        let mut params = Self::client_params(cn, &[]);
        params.not_before = rcgen::date_time_ymd(2019, 1, 1);
        params.not_after = rcgen::date_time_ymd(2020, 1, 1);
        self.sign(&params)
    }
}

// ---------------------------------------------------------------------------------------------
// The fake kube-apiserver

#[derive(Default)]
struct FakeState {
    /// token → TokenReview `status.user`.
    tokens: Mutex<HashMap<String, Value>>,
    /// (user, verb, resource or path) that SubjectAccessReview allows.
    allowed: Mutex<Vec<(String, String, String)>>,
    token_calls: AtomicUsize,
    sar_calls: AtomicUsize,
    last_sar: Mutex<Option<Value>>,
    configmap: Mutex<Option<watch::Sender<Value>>>,
}

struct FakeApiserver {
    state: Arc<FakeState>,
    kubeconfig: PathBuf,
    server: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

impl FakeApiserver {
    async fn start() -> Self {
        let state = Arc::new(FakeState::default());
        let router = Router::new()
            .route("/apis/authentication.k8s.io/v1/tokenreviews", post(token_review))
            .route(
                "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                post(subject_access_review),
            )
            .route(
                "/api/v1/namespaces/kube-system/configmaps",
                get(list_or_watch_configmaps),
            )
            .route(
                "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication",
                get(get_configmap),
            )
            .with_state(state.clone());

        let mut params = CertificateParams::new(Vec::<String>::new()).expect("server params");
        params.subject_alt_names = vec![SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST))];
        let key = KeyPair::generate().expect("server key");
        let cert = params.self_signed(&key).expect("server cert");
        let tls =
            rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .expect("protocols")
                .with_no_client_auth()
                .with_single_cert(
                    vec![cert.der().clone()],
                    PrivateKeyDer::try_from(key.serialize_der()).expect("private key"),
                )
                .expect("server config");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");

        // Aborting this task drops the JoinSet, which aborts every open connection too.
        let server = tokio::spawn(async move {
            let mut connections = JoinSet::new();
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let acceptor = acceptor.clone();
                let router = router.clone();
                connections.spawn(async move {
                    let Ok(stream) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = hyper_util::service::TowerToHyperService::new(router);
                    let _ =
                        hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new())
                            .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                            .await;
                });
            }
        });

        let dir = tempfile::tempdir().expect("tempdir");
        let kubeconfig = dir.path().join("kubeconfig");
        let ca_data = base64::engine::general_purpose::STANDARD.encode(cert.pem());
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: https://{addr}\n    \
                 certificate-authority-data: {ca_data}\nusers:\n- name: fake\n  user:\n    token: server-token\n\
                 contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\ncurrent-context: fake\n"
            ),
        )
        .expect("write kubeconfig");
        Self {
            state,
            kubeconfig,
            server,
            _dir: dir,
        }
    }

    fn add_token(&self, token: &str, user: Value) {
        self.state
            .tokens
            .lock()
            .expect("lock")
            .insert(token.to_owned(), user);
    }

    fn allow(&self, user: &str, verb: &str, target: &str) {
        self.state
            .allowed
            .lock()
            .expect("lock")
            .push((user.into(), verb.into(), target.into()));
    }

    fn token_calls(&self) -> usize {
        self.state.token_calls.load(Ordering::SeqCst)
    }

    fn sar_calls(&self) -> usize {
        self.state.sar_calls.load(Ordering::SeqCst)
    }

    fn last_sar(&self) -> Value {
        self.state
            .last_sar
            .lock()
            .expect("lock")
            .clone()
            .expect("a SubjectAccessReview was sent")
    }

    fn set_configmap(&self, data: &Value) {
        let mut slot = self.state.configmap.lock().expect("lock");
        let rv = slot.as_ref().map_or(1, |tx| {
            tx.borrow()["metadata"]["resourceVersion"]
                .as_str()
                .map_or(1, |v| v.parse::<u64>().expect("rv") + 1)
        });
        let cm = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "extension-apiserver-authentication", "namespace": "kube-system", "resourceVersion": rv.to_string()},
            "data": data,
        });
        match slot.as_ref() {
            Some(tx) => {
                tx.send_replace(cm);
            }
            None => *slot = Some(watch::Sender::new(cm)),
        }
    }

    fn stop(&self) {
        self.server.abort();
    }

    fn options(&self) -> AuthOptions {
        AuthOptions {
            authentication_kubeconfig: Some(self.kubeconfig.clone()),
            authorization_kubeconfig: Some(self.kubeconfig.clone()),
            authentication_skip_lookup: true,
            ..AuthOptions::default()
        }
    }
}

impl Drop for FakeApiserver {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn token_review(State(state): State<Arc<FakeState>>, Json(review): Json<Value>) -> Json<Value> {
    state.token_calls.fetch_add(1, Ordering::SeqCst);
    let token = review["spec"]["token"].as_str().unwrap_or_default();
    let status = match state.tokens.lock().expect("lock").get(token) {
        Some(user) => json!({"authenticated": true, "user": user}),
        None => json!({"authenticated": false, "error": "token expired or revoked"}),
    };
    Json(
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": review["spec"], "status": status}),
    )
}

async fn subject_access_review(
    State(state): State<Arc<FakeState>>,
    Json(review): Json<Value>,
) -> Json<Value> {
    state.sar_calls.fetch_add(1, Ordering::SeqCst);
    *state.last_sar.lock().expect("lock") = Some(review.clone());
    let spec = &review["spec"];
    let user = spec["user"].as_str().unwrap_or_default();
    let (verb, target) = match (&spec["resourceAttributes"], &spec["nonResourceAttributes"]) {
        (Value::Object(r), _) => (r.get("verb"), r.get("resource")),
        (_, Value::Object(n)) => (n.get("verb"), n.get("path")),
        _ => (None, None),
    };
    let (verb, target) = (
        verb.and_then(Value::as_str).unwrap_or_default(),
        target.and_then(Value::as_str).unwrap_or_default(),
    );
    let allowed = state
        .allowed
        .lock()
        .expect("lock")
        .iter()
        .any(|(u, v, t)| u == user && v == verb && t == target);
    let status = if allowed {
        json!({"allowed": true})
    } else {
        json!({"allowed": false, "reason": "no RBAC policy matched"})
    };
    Json(
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec, "status": status}),
    )
}

fn not_found() -> Response<Body> {
    let body = json!({"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404,"message":"not found"});
    Response::builder()
        .status(StatusCode::NOT_FOUND)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .expect("response")
}

async fn get_configmap(State(state): State<Arc<FakeState>>) -> Response<Body> {
    match state.configmap.lock().expect("lock").as_ref() {
        Some(tx) => Response::new(Body::from(tx.borrow().to_string())),
        None => not_found(),
    }
}

async fn list_or_watch_configmaps(
    State(state): State<Arc<FakeState>>,
    Query(query): Query<HashMap<String, String>>,
) -> Response<Body> {
    let Some(tx) = state.configmap.lock().expect("lock").clone() else {
        return not_found();
    };
    if query.get("watch").is_some_and(|w| w == "true" || w == "1") {
        let rx = tx.subscribe();
        let stream = futures::stream::unfold(rx, |mut rx| async move {
            rx.changed().await.ok()?;
            let line = format!(
                "{}\n",
                json!({"type": "MODIFIED", "object": *rx.borrow_and_update()})
            );
            Some((Ok::<_, std::io::Error>(line), rx))
        });
        return Response::new(Body::from_stream(stream));
    }
    let cm = tx.borrow().clone();
    let list = json!({"apiVersion": "v1", "kind": "ConfigMapList", "metadata": {"resourceVersion": cm["metadata"]["resourceVersion"]}, "items": [cm]});
    Response::new(Body::from(list.to_string()))
}

// ---------------------------------------------------------------------------------------------
// The service under test

/// Echoes the user and every remaining `x-remote-*` / `authorization` header.
async fn echo(req: Request<Body>) -> Json<Value> {
    let user = req
        .extensions()
        .get::<UserInfo>()
        .cloned()
        .expect("UserInfo extension");
    let leaked: Vec<String> = req
        .headers()
        .keys()
        .map(|k| k.as_str().to_owned())
        .filter(|k| k.starts_with("x-remote-") || k == "authorization")
        .collect();
    Json(
        json!({"name": user.name, "uid": user.uid, "groups": user.groups, "extra": user.extra, "leaked": leaked}),
    )
}

struct Harness {
    fake: FakeApiserver,
    front_ca: Ca,
    client_ca: Ca,
    authn: AuthenticationLayer,
    authz: AuthorizationLayer,
    _files: tempfile::TempDir,
}

impl Harness {
    async fn new() -> Self {
        Self::with(|_| {}).await
    }

    async fn with(tweak: impl FnOnce(&mut AuthOptions)) -> Self {
        let fake = FakeApiserver::start().await;
        let (front_ca, client_ca) = (Ca::new("front-proxy-ca"), Ca::new("client-ca"));
        let files = tempfile::tempdir().expect("tempdir");
        let (front_path, client_path) = (files.path().join("front.crt"), files.path().join("client.crt"));
        std::fs::write(&front_path, front_ca.pem()).expect("write");
        std::fs::write(&client_path, client_ca.pem()).expect("write");
        let mut options = AuthOptions {
            client_ca_file: Some(client_path),
            requestheader_client_ca_file: Some(front_path),
            requestheader_allowed_names: vec!["front-proxy-client".into()],
            requestheader_uid_headers: vec!["X-Remote-Uid".into()],
            ..fake.options()
        };
        tweak(&mut options);
        let (authn, authz) = options.build().await.expect("build layers");
        Self {
            fake,
            front_ca,
            client_ca,
            authn,
            authz,
            _files: files,
        }
    }

    async fn send(&self, req: Request<Body>) -> (StatusCode, Value) {
        let svc = ServiceBuilder::new()
            .layer(self.authn.clone())
            .layer(self.authz.clone())
            .service(Router::new().fallback(echo));
        let response = svc.oneshot(req).await.expect("infallible");
        let status = response.status();
        let bytes = response.into_body().collect().await.expect("body").to_bytes();
        (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }
}

fn request(path: &str) -> axum::http::request::Builder {
    Request::builder().uri(path)
}

fn with_cert(builder: axum::http::request::Builder, peer: PeerCertificates) -> axum::http::request::Builder {
    builder.extension(peer)
}

const VPCS: &str = "/apis/sdn.cozystack.io/v1alpha1/namespaces/t1/vpcs";

#[track_caller]
fn assert_unauthorized(status: StatusCode, body: &Value) {
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(
        *body,
        json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401})
    );
}

// ---------------------------------------------------------------------------------------------
// Front proxy

#[tokio::test]
async fn remote_user_without_client_certificate_is_not_that_user() {
    let h = Harness::new().await;
    h.fake.allow("system:admin", "list", "vpcs");
    let req = request(VPCS)
        .header("x-remote-user", "system:admin")
        .header("x-remote-group", "system:masters");
    let (status, body) = h.send(req.body(Body::empty()).expect("request")).await;
    assert_unauthorized(status, &body);
    assert_eq!(h.fake.sar_calls(), 0);
}

#[tokio::test]
async fn remote_user_with_certificate_from_another_ca_is_rejected() {
    let h = Harness::new().await;
    let other = Ca::new("other-ca");
    let req =
        with_cert(request(VPCS), other.client("front-proxy-client", &[])).header("x-remote-user", "alice");
    let (status, body) = h.send(req.body(Body::empty()).expect("request")).await;
    assert_unauthorized(status, &body);
}

#[tokio::test]
async fn remote_user_from_client_ca_certificate_is_rejected() {
    // A user certificate (client CA) must not act as a front proxy, even with an allowed CN.
    let h = Harness::new().await;
    h.fake.allow("front-proxy-client", "list", "vpcs");
    let req = with_cert(request(VPCS), h.client_ca.client("front-proxy-client", &[]))
        .header("x-remote-user", "alice");
    let (status, body) = h.send(req.body(Body::empty()).expect("request")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body["name"], "front-proxy-client",
        "authenticated as the certificate, not as alice"
    );
    assert_eq!(body["leaked"], json!([]));
}

#[tokio::test]
async fn remote_user_with_disallowed_cn_is_rejected() {
    let h = Harness::new().await;
    let req = with_cert(request(VPCS), h.front_ca.client("evil-proxy", &[])).header("x-remote-user", "alice");
    let (status, body) = h.send(req.body(Body::empty()).expect("request")).await;
    assert_unauthorized(status, &body);
}

#[tokio::test]
async fn remote_user_with_expired_front_proxy_certificate_is_rejected() {
    let h = Harness::new().await;
    let req = with_cert(request(VPCS), h.front_ca.expired_client("front-proxy-client"))
        .header("x-remote-user", "alice");
    let (status, body) = h.send(req.body(Body::empty()).expect("request")).await;
    assert_unauthorized(status, &body);
}

#[tokio::test]
async fn front_proxy_request_is_the_remote_user_with_groups_uid_and_extras() {
    let h = Harness::new().await;
    h.fake.allow("alice", "list", "vpcs");
    let req = with_cert(request(VPCS), h.front_ca.client("front-proxy-client", &[]))
        .header("x-remote-user", "alice")
        .header("x-remote-uid", "uid-1")
        .header("x-remote-group", "g1")
        .header("x-remote-group", "")
        .header("x-remote-group", "g2")
        .header("x-remote-extra-scopes%2Fv1", "a")
        .header("x-remote-extra-scopes%2Fv1", "b")
        .header("X-Remote-Extra-Team", "net");
    let (status, body) = h.send(req.body(Body::empty()).expect("request")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["name"], "alice");
    assert_eq!(body["uid"], "uid-1");
    assert_eq!(body["groups"], json!(["g1", "g2", "system:authenticated"]));
    assert_eq!(body["extra"], json!({"scopes/v1": ["a", "b"], "team": ["net"]}));
    assert_eq!(body["leaked"], json!([]), "X-Remote-* headers reach the handler");

    let sar = h.fake.last_sar();
    assert_eq!(sar["spec"]["user"], "alice");
    assert_eq!(sar["spec"]["uid"], "uid-1");
    assert_eq!(sar["spec"]["groups"], json!(["g1", "g2", "system:authenticated"]));
    assert_eq!(
        sar["spec"]["extra"],
        json!({"scopes/v1": ["a", "b"], "team": ["net"]})
    );
    assert_eq!(
        sar["spec"]["resourceAttributes"],
        json!({"namespace": "t1", "verb": "list", "group": "sdn.cozystack.io", "version": "v1alpha1", "resource": "vpcs"})
    );
}

// ---------------------------------------------------------------------------------------------
// Client certificates

#[tokio::test]
async fn client_certificate_is_cn_and_organizations() {
    let h = Harness::new().await;
    h.fake.allow("bob", "get", "vpcs");
    let req = with_cert(
        request(&format!("{VPCS}/a")),
        h.client_ca.client("bob", &["team-a"]),
    );
    let (status, body) = h.send(req.body(Body::empty()).expect("request")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["name"], "bob");
    // rcgen keeps one value per attribute type, so one organization is all we can issue here.
    assert_eq!(body["groups"], json!(["team-a", "system:authenticated"]));
}

/// The server makes one `PeerCertificates` per connection and hands a clone to each of its
/// requests; the chain is verified for the first and remembered for the rest.
#[tokio::test]
async fn one_connection_verifies_its_client_certificate_once() {
    let h = Harness::new().await;
    h.fake.allow("bob", "get", "vpcs");
    let conn = h.client_ca.client("bob", &["team-a"]);
    let mut seen = Vec::new();
    for _ in 0..2 {
        let req = with_cert(request(&format!("{VPCS}/a")), conn.clone());
        let (status, body) = h.send(req.body(Body::empty()).expect("request")).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        seen.push((body["name"].clone(), body["groups"].clone()));
    }
    assert_eq!(seen[0], (json!("bob"), json!(["team-a", "system:authenticated"])));
    assert_eq!(seen[0], seen[1], "one connection, one identity");
    assert_eq!(
        conn.verifications(),
        1,
        "the chain is verified once per connection"
    );
    // Another connection with the same certificate verifies for itself.
    let other = PeerCertificates::new(conn.chain().to_vec());
    let req = with_cert(request(&format!("{VPCS}/a")), other.clone());
    let (status, body) = h.send(req.body(Body::empty()).expect("request")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(other.verifications(), 1);
    assert_eq!(conn.verifications(), 1);
}

/// The front proxy's certificate is verified once per connection too; the headers are read per
/// request, and a certificate that does not verify is refused on every request.
#[tokio::test]
async fn front_proxy_connection_verifies_once_and_failures_are_not_remembered() {
    let h = Harness::new().await;
    h.fake.allow("alice", "list", "vpcs");
    h.fake.allow("carol", "list", "vpcs");
    let conn = h.front_ca.client("front-proxy-client", &[]);
    for user in ["alice", "carol"] {
        let req = with_cert(request(VPCS), conn.clone()).header("x-remote-user", user);
        let (status, body) = h.send(req.body(Body::empty()).expect("request")).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["name"], user);
    }
    assert_eq!(conn.verifications(), 1);
    let expired = h.front_ca.expired_client("front-proxy-client");
    for _ in 0..2 {
        let req = with_cert(request(VPCS), expired.clone()).header("x-remote-user", "alice");
        let (status, body) = h.send(req.body(Body::empty()).expect("request")).await;
        assert_unauthorized(status, &body);
    }
    // The front-proxy CA, then the client CA: both refuse, on each request.
    assert_eq!(expired.verifications(), 4);
}

#[tokio::test]
async fn client_certificate_from_unknown_ca_is_rejected() {
    let h = Harness::new().await;
    let req = with_cert(request(VPCS), Ca::new("other").client("bob", &[]));
    let (status, body) = h.send(req.body(Body::empty()).expect("request")).await;
    assert_unauthorized(status, &body);
}

// ---------------------------------------------------------------------------------------------
// Bearer tokens

#[tokio::test]
async fn valid_token_is_its_user_and_is_cached() {
    let h = Harness::new().await;
    h.fake.add_token(
        "good",
        json!({"username": "carol", "uid": "u-c", "groups": ["devs"], "extra": {"k": ["v"]}}),
    );
    h.fake.allow("carol", "list", "vpcs");
    for _ in 0..3 {
        let req = request(VPCS)
            .header("authorization", "Bearer good")
            .header("x-remote-user", "mallory");
        let (status, body) = h.send(req.body(Body::empty()).expect("request")).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["name"], "carol");
        assert_eq!(body["uid"], "u-c");
        assert_eq!(body["groups"], json!(["devs", "system:authenticated"]));
        assert_eq!(body["extra"], json!({"k": ["v"]}));
        assert_eq!(
            body["leaked"],
            json!([]),
            "Authorization and X-Remote-* headers reach the handler"
        );
    }
    assert_eq!(h.fake.token_calls(), 1, "TokenReview results are cached");
    assert_eq!(h.fake.sar_calls(), 1, "SubjectAccessReview results are cached");
}

#[tokio::test]
async fn unknown_or_revoked_token_is_unauthorized() {
    let h = Harness::new().await;
    h.fake.allow("system:anonymous", "list", "vpcs");
    let req = request(VPCS).header("authorization", "Bearer revoked");
    let (status, body) = h.send(req.body(Body::empty()).expect("request")).await;
    assert_unauthorized(status, &body);
    // Even on an always-allow path a rejected token is an error, not anonymous.
    let req = request("/healthz").header("authorization", "Bearer revoked");
    let (status, body) = h.send(req.body(Body::empty()).expect("request")).await;
    assert_unauthorized(status, &body);
    assert_eq!(h.fake.token_calls(), 1, "negative results are cached too");
}

#[tokio::test]
async fn token_cache_expires_after_its_ttl() {
    let h = Harness::with(|o| o.authentication_token_webhook_cache_ttl = Duration::from_millis(200)).await;
    h.fake.add_token("good", json!({"username": "carol"}));
    h.fake.allow("carol", "list", "vpcs");
    let send = || {
        h.send(
            request(VPCS)
                .header("authorization", "Bearer good")
                .body(Body::empty())
                .expect("request"),
        )
    };
    assert_eq!(send().await.0, StatusCode::OK);
    assert_eq!(send().await.0, StatusCode::OK);
    assert_eq!(h.fake.token_calls(), 1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(send().await.0, StatusCode::OK);
    assert_eq!(h.fake.token_calls(), 2);
}

#[tokio::test]
async fn token_review_unreachable_is_unauthorized() {
    let h = Harness::new().await;
    h.fake.add_token("good", json!({"username": "carol"}));
    h.fake.stop();
    let req = request(VPCS).header("authorization", "Bearer good");
    let (status, body) = h.send(req.body(Body::empty()).expect("request")).await;
    assert_unauthorized(status, &body);
}

// ---------------------------------------------------------------------------------------------
// Authorization

async fn front_proxy_request(h: &Harness, method: &str, path: &str, user: &str) -> (StatusCode, Value) {
    let req = with_cert(
        Request::builder().method(method).uri(path),
        h.front_ca.client("front-proxy-client", &[]),
    )
    .header("x-remote-user", user);
    h.send(req.body(Body::empty()).expect("request")).await
}

#[tokio::test]
async fn denied_requests_get_kubernetes_forbidden_messages() {
    let h = Harness::new().await;
    let (status, body) = front_proxy_request(&h, "GET", &format!("{VPCS}/x"), "alice").await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(
        body,
        json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "Forbidden", "code": 403,
            "details": {"name": "x", "group": "sdn.cozystack.io", "kind": "vpcs"},
            "message": "vpcs.sdn.cozystack.io \"x\" is forbidden: User \"alice\" cannot get resource \"vpcs\" in API group \"sdn.cozystack.io\" in the namespace \"t1\": no RBAC policy matched",
        })
    );

    let (status, body) =
        front_proxy_request(&h, "GET", "/apis/sdn.cozystack.io/v1alpha1/vpcs?watch=1", "alice").await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(
        body["message"],
        "vpcs.sdn.cozystack.io is forbidden: User \"alice\" cannot watch resource \"vpcs\" in API group \"sdn.cozystack.io\" at the cluster scope: no RBAC policy matched"
    );

    let (status, body) = front_proxy_request(&h, "GET", "/openapi/v2", "alice").await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(
        body["message"],
        "forbidden: User \"alice\" cannot get path \"/openapi/v2\": no RBAC policy matched"
    );
    assert_eq!(
        h.fake.last_sar()["spec"]["nonResourceAttributes"],
        json!({"path": "/openapi/v2", "verb": "get"})
    );
}

#[tokio::test]
async fn allowed_requests_reach_the_handler_and_subresources_are_reviewed() {
    let h = Harness::new().await;
    h.fake.allow("alice", "update", "vpcs");
    let (status, body) = front_proxy_request(&h, "PUT", &format!("{VPCS}/a/status"), "alice").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let attrs = &h.fake.last_sar()["spec"]["resourceAttributes"];
    assert_eq!(
        (
            attrs["verb"].as_str(),
            attrs["subresource"].as_str(),
            attrs["name"].as_str()
        ),
        (Some("update"), Some("status"), Some("a"))
    );
}

#[tokio::test]
async fn masters_are_allowed_without_a_review() {
    let h = Harness::new().await;
    let req = with_cert(request(VPCS), h.front_ca.client("front-proxy-client", &[]))
        .header("x-remote-user", "system:kube-aggregator")
        .header("x-remote-group", "system:masters");
    let (status, body) = h.send(req.body(Body::empty()).expect("request")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(h.fake.sar_calls(), 0);
}

#[tokio::test]
async fn subject_access_review_unreachable_fails_closed() {
    let h = Harness::new().await;
    h.fake.allow("alice", "list", "vpcs");
    h.fake.stop();
    let (status, body) = front_proxy_request(&h, "GET", VPCS, "alice").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["reason"], "ServiceUnavailable");
    assert_eq!(body["kind"], "Status");
    // The failure is not cached as a decision either way.
    let (status, _) = front_proxy_request(&h, "GET", VPCS, "alice").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
}

#[tokio::test]
async fn decisions_are_cached_until_their_ttl() {
    let h = Harness::with(|o| {
        o.authorization_webhook_cache_authorized_ttl = Duration::from_secs(60);
        o.authorization_webhook_cache_unauthorized_ttl = Duration::from_millis(200);
    })
    .await;
    assert_eq!(
        front_proxy_request(&h, "GET", VPCS, "alice").await.0,
        StatusCode::FORBIDDEN
    );
    h.fake.allow("alice", "list", "vpcs");
    assert_eq!(
        front_proxy_request(&h, "GET", VPCS, "alice").await.0,
        StatusCode::FORBIDDEN,
        "deny is cached"
    );
    assert_eq!(h.fake.sar_calls(), 1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        front_proxy_request(&h, "GET", VPCS, "alice").await.0,
        StatusCode::OK
    );
    h.fake.stop();
    assert_eq!(
        front_proxy_request(&h, "GET", VPCS, "alice").await.0,
        StatusCode::OK,
        "allow is cached"
    );
    assert_eq!(h.fake.sar_calls(), 2);
}

#[tokio::test]
async fn virtual_verbs_can_be_checked_directly() {
    let h = Harness::new().await;
    h.fake.allow("alice", "export", "vpcs");
    let authorizer = h.authz.authorizer();
    let alice = UserInfo::new("alice", ["system:authenticated"]);
    let decision = authorizer
        .check(&alice, "export", "sdn.cozystack.io", "vpcs", "t1", "a")
        .await
        .expect("decision");
    assert!(decision.is_allowed());
    let decision = authorizer
        .check(&alice, "peer", "sdn.cozystack.io", "vpcs", "t1", "a")
        .await
        .expect("decision");
    assert!(!decision.is_allowed());
}

// ---------------------------------------------------------------------------------------------
// Anonymous

#[tokio::test]
async fn health_paths_work_anonymously_without_a_review() {
    let h = Harness::new().await;
    h.fake.stop();
    for path in ["/healthz", "/readyz", "/livez"] {
        let (status, body) = h.send(request(path).body(Body::empty()).expect("request")).await;
        assert_eq!(status, StatusCode::OK, "{path}: {body}");
        assert_eq!(body["name"], "system:anonymous");
        assert_eq!(body["groups"], json!(["system:unauthenticated"]));
    }
}

#[tokio::test]
async fn other_paths_are_unauthorized_anonymously() {
    let h = Harness::new().await;
    for path in [VPCS, "/apis", "/openapi/v2", "/metrics", "/healthz/etcd"] {
        let (status, body) = h.send(request(path).body(Body::empty()).expect("request")).await;
        assert_unauthorized(status, &body);
    }
    assert_eq!(h.fake.sar_calls(), 0);
}

// ---------------------------------------------------------------------------------------------
// The extension-apiserver-authentication ConfigMap

fn configmap_data(front_ca: &Ca) -> Value {
    json!({
        "requestheader-client-ca-file": front_ca.pem(),
        "requestheader-allowed-names": "[\"front-proxy-client\"]",
        "requestheader-username-headers": "[\"X-Remote-User\"]",
        "requestheader-group-headers": "[\"X-Remote-Group\"]",
        "requestheader-extra-headers-prefix": "[\"X-Remote-Extra-\"]",
    })
}

#[tokio::test]
async fn request_header_settings_come_from_the_configmap_and_reload() {
    let fake = FakeApiserver::start().await;
    let (first, second) = (Ca::new("front-proxy-ca-1"), Ca::new("front-proxy-ca-2"));
    fake.set_configmap(&configmap_data(&first));
    fake.allow("alice", "list", "vpcs");
    let options = AuthOptions {
        authentication_skip_lookup: false,
        ..fake.options()
    };
    let (authn, authz) = options.build().await.expect("build layers");
    let mut changes = authn.authenticator().cert_config().subscribe();
    let send = |ca: &Ca| {
        let svc = ServiceBuilder::new()
            .layer(authn.clone())
            .layer(authz.clone())
            .service(Router::new().fallback(echo));
        let req =
            with_cert(request(VPCS), ca.client("front-proxy-client", &[])).header("x-remote-user", "alice");
        svc.oneshot(req.body(Body::empty()).expect("request"))
    };
    assert_eq!(send(&first).await.expect("infallible").status(), StatusCode::OK);
    assert_eq!(
        send(&second).await.expect("infallible").status(),
        StatusCode::UNAUTHORIZED
    );

    // Rotate the front-proxy CA; the watcher picks it up.
    changes.mark_unchanged();
    fake.set_configmap(&configmap_data(&second));
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            changes.changed().await.expect("config sender alive");
            let current = changes.borrow_and_update().clone();
            let rotated = current
                .request_header
                .as_ref()
                .is_some_and(|rh| rh.client_ca.certificates()[0] == *second.issuer.der());
            if rotated {
                break;
            }
        }
    })
    .await
    .expect("ConfigMap change observed within 10s");
    assert_eq!(
        send(&first).await.expect("infallible").status(),
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(send(&second).await.expect("infallible").status(), StatusCode::OK);
}

#[tokio::test]
async fn flags_win_over_the_configmap() {
    let fake = FakeApiserver::start().await;
    let (from_cm, from_flag) = (Ca::new("cm-ca"), Ca::new("flag-ca"));
    fake.set_configmap(&configmap_data(&from_cm));
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("front.crt");
    std::fs::write(&path, from_flag.pem()).expect("write");
    let options = AuthOptions {
        authentication_skip_lookup: false,
        requestheader_client_ca_file: Some(path),
        ..fake.options()
    };
    let (authn, _) = options.build().await.expect("build layers");
    let current = authn.authenticator().cert_config().current();
    let rh = current.request_header.as_ref().expect("request header config");
    assert_eq!(rh.client_ca.certificates()[0], *from_flag.issuer.der());
    assert_eq!(
        rh.username_headers,
        ["x-remote-user"],
        "header flags (defaults) apply, not the ConfigMap's"
    );
}

#[tokio::test]
async fn configmap_lookup_failure_fails_the_build_unless_tolerated() {
    let fake = FakeApiserver::start().await;
    fake.stop();
    let options = AuthOptions {
        authentication_skip_lookup: false,
        ..fake.options()
    };
    assert!(options.build().await.is_err());
    let tolerant = AuthOptions {
        authentication_tolerate_lookup_failure: true,
        ..options
    };
    assert!(tolerant.build().await.is_ok());
}
