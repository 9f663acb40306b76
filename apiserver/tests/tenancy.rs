//! Tenancy end to end against a fake kube-apiserver: delegated authorization of the virtual verbs
//! `export`/`peer`, namespace lifecycle, ResourceQuota charge/refuse/replenish and the APIService
//! registration.
//!
//! The fake (plain axum over TLS on loopback) answers SubjectAccessReviews from a table, serves
//! namespaces, resourcequotas (with optimistic `resourceVersion`s) and apiservices from memory.
//! The server runs standalone (`--standalone`, so the test's client CA is trusted) with
//! `--authorization-kubeconfig` and `--kubeconfig` pointing at the fake.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use base64::Engine as _;
use cozyplane_apiserver::options::Options;
use cozyplane_apiserver::server::apiservice::{self, CaSource, Registration};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    SanType,
};
use rustls::pki_types::PrivateKeyDer;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinSet;

// ---------------------------------------------------------------------------------------------
// The fake kube-apiserver

#[derive(Default)]
struct Fake {
    /// (user, verb, resource, namespace) allowed by SubjectAccessReview.
    allowed: Mutex<Vec<(String, String, String, String)>>,
    sar_down: Mutex<bool>,
    namespaces: Mutex<BTreeMap<String, Value>>,
    /// (namespace, name) → ResourceQuota.
    quotas: Mutex<BTreeMap<(String, String), Value>>,
    apiservices: Mutex<BTreeMap<String, Value>>,
    rv: Mutex<u64>,
}

type St = State<Arc<Fake>>;

impl Fake {
    fn next_rv(&self) -> String {
        let mut rv = self.rv.lock().unwrap();
        *rv += 1;
        rv.to_string()
    }
}

fn status(code: u16, reason: &str, message: &str) -> Response {
    let body = json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":message,"reason":reason,"code":code});
    (StatusCode::from_u16(code).unwrap(), Json(body)).into_response()
}

#[allow(clippy::needless_pass_by_value)]
fn list(kind: &str, items: Vec<Value>, rv: &str) -> Response {
    Json(json!({"kind": kind, "apiVersion": "v1", "metadata": {"resourceVersion": rv}, "items": items}))
        .into_response()
}

fn watch_forever() -> Response {
    Body::from_stream(futures::stream::pending::<Result<Bytes, std::io::Error>>()).into_response()
}

async fn sar(State(f): St, Json(review): Json<Value>) -> Response {
    let spec = &review["spec"];
    // "Down" for the virtual verbs only, so the request itself still gets through the
    // authorization layer (whose own fail-closed behaviour the authz crate tests).
    if *f.sar_down.lock().unwrap() && spec["resourceAttributes"]["verb"] == "export" {
        return status(500, "InternalError", "down");
    }
    let user = spec["user"].as_str().unwrap_or_default();
    let ra = &spec["resourceAttributes"];
    let allowed = !ra.is_null()
        && f.allowed.lock().unwrap().iter().any(|(u, v, r, ns)| {
            u == user
                && v == ra["verb"].as_str().unwrap_or_default()
                && r == ra["resource"].as_str().unwrap_or_default()
                && (ns == "*" || ns == ra["namespace"].as_str().unwrap_or_default())
        });
    let mut out = review.clone();
    out["status"] = json!({ "allowed": allowed });
    Json(out).into_response()
}

async fn namespaces(State(f): St, Query(q): Query<BTreeMap<String, String>>) -> Response {
    if q.get("watch").is_some_and(|w| w == "true" || w == "1") {
        return watch_forever();
    }
    let items = f.namespaces.lock().unwrap().values().cloned().collect();
    list("NamespaceList", items, "1")
}

async fn namespace(State(f): St, Path(name): Path<String>) -> Response {
    match f.namespaces.lock().unwrap().get(&name) {
        Some(n) => Json(n.clone()).into_response(),
        None => status(404, "NotFound", &format!("namespaces \"{name}\" not found")),
    }
}

async fn all_quotas(State(f): St, Query(q): Query<BTreeMap<String, String>>) -> Response {
    if q.get("watch").is_some_and(|w| w == "true" || w == "1") {
        return watch_forever();
    }
    let items = f.quotas.lock().unwrap().values().cloned().collect();
    let rv = f.rv.lock().unwrap().to_string();
    list("ResourceQuotaList", items, &rv)
}

async fn ns_quotas(State(f): St, Path(ns): Path<String>) -> Response {
    let items = f
        .quotas
        .lock()
        .unwrap()
        .iter()
        .filter(|((n, _), _)| *n == ns)
        .map(|(_, v)| v.clone())
        .collect();
    let rv = f.rv.lock().unwrap().to_string();
    list("ResourceQuotaList", items, &rv)
}

async fn put_quota_status(
    State(f): St,
    Path((ns, name)): Path<(String, String)>,
    Json(body): Json<Value>,
) -> Response {
    let rv = f.next_rv();
    let mut quotas = f.quotas.lock().unwrap();
    let Some(cur) = quotas.get_mut(&(ns, name.clone())) else {
        return status(404, "NotFound", "not found");
    };
    if body["metadata"]["resourceVersion"] != cur["metadata"]["resourceVersion"] {
        return status(
            409,
            "Conflict",
            &format!("Operation cannot be fulfilled on resourcequotas \"{name}\""),
        );
    }
    cur["status"] = body["status"].clone();
    cur["metadata"]["resourceVersion"] = json!(rv);
    Json(cur.clone()).into_response()
}

async fn apiservice_item(State(f): St, method: Method, Path(name): Path<String>, body: Bytes) -> Response {
    let rv = f.next_rv();
    let mut all = f.apiservices.lock().unwrap();
    match (method.as_str(), all.get_mut(&name)) {
        ("GET", Some(o)) => Json(o.clone()).into_response(),
        ("PATCH", Some(o)) => {
            let patch: Value = serde_json::from_slice(&body).unwrap();
            json_patch::merge(o, &patch);
            o["metadata"]["resourceVersion"] = json!(rv);
            Json(o.clone()).into_response()
        }
        _ => status(404, "NotFound", "not found"),
    }
}

async fn apiservice_create(State(f): St, Json(mut o): Json<Value>) -> Response {
    let rv = f.next_rv();
    let name = o["metadata"]["name"].as_str().unwrap().to_string();
    o["metadata"]["resourceVersion"] = json!(rv);
    f.apiservices.lock().unwrap().insert(name, o.clone());
    (StatusCode::CREATED, Json(o)).into_response()
}

struct FakeApiserver {
    state: Arc<Fake>,
    kubeconfig: PathBuf,
    task: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

impl Drop for FakeApiserver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeApiserver {
    async fn start() -> Self {
        let state = Arc::new(Fake::default());
        let router = Router::new()
            .route("/apis/authorization.k8s.io/v1/subjectaccessreviews", post(sar))
            .route("/api/v1/namespaces", get(namespaces))
            .route("/api/v1/namespaces/{name}", get(namespace))
            .route("/api/v1/resourcequotas", get(all_quotas))
            .route("/api/v1/namespaces/{ns}/resourcequotas", get(ns_quotas))
            .route(
                "/api/v1/namespaces/{ns}/resourcequotas/{name}/status",
                put(put_quota_status),
            )
            .route(
                "/apis/apiregistration.k8s.io/v1/apiservices",
                post(apiservice_create),
            )
            .route(
                "/apis/apiregistration.k8s.io/v1/apiservices/{name}",
                get(apiservice_item).patch(apiservice_item),
            )
            .with_state(state.clone());
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.subject_alt_names = vec![SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST))];
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let tls =
            rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(
                    vec![cert.der().clone()],
                    PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
                )
                .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let mut conns = JoinSet::new();
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let acceptor = acceptor.clone();
                let router = router.clone();
                conns.spawn(async move {
                    let Ok(stream) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let svc = hyper_util::service::TowerToHyperService::new(router);
                    let _ =
                        hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new())
                            .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                            .await;
                });
            }
        });
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("fake-kubeconfig");
        let ca = base64::engine::general_purpose::STANDARD.encode(cert.pem());
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: https://{addr}\n    certificate-authority-data: {ca}\nusers:\n- name: fake\n  user:\n    token: t\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\ncurrent-context: fake\n"
            ),
        )
        .unwrap();
        Self {
            state,
            kubeconfig,
            task,
            _dir: dir,
        }
    }

    fn allow(&self, user: &str, verb: &str, resource: &str, ns: &str) {
        self.state
            .allowed
            .lock()
            .unwrap()
            .push((user.into(), verb.into(), resource.into(), ns.into()));
    }

    fn add_namespace(&self, name: &str, terminating: bool) {
        let phase = if terminating { "Terminating" } else { "Active" };
        let ns = json!({"apiVersion":"v1","kind":"Namespace","metadata":{"name":name,"resourceVersion":"1"},"status":{"phase":phase}});
        self.state.namespaces.lock().unwrap().insert(name.into(), ns);
    }

    fn add_quota(&self, ns: &str, name: &str, hard: &Value) {
        let rv = self.state.next_rv();
        let q = json!({"apiVersion":"v1","kind":"ResourceQuota","metadata":{"name":name,"namespace":ns,"resourceVersion":rv},"spec":{"hard":hard}});
        self.state
            .quotas
            .lock()
            .unwrap()
            .insert((ns.into(), name.into()), q);
    }

    fn quota(&self, ns: &str, name: &str) -> Value {
        self.state.quotas.lock().unwrap()[&(ns.to_string(), name.to_string())].clone()
    }
}

// ---------------------------------------------------------------------------------------------
// The server and its clients

struct Users {
    ca: CertifiedIssuer<'static, KeyPair>,
    server_ca: String,
    url: String,
    dir: tempfile::TempDir,
}

impl Users {
    fn new(server_ca: String, url: String) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, "test-users");
        let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        Self {
            ca,
            server_ca,
            url,
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn ca_file(&self) -> PathBuf {
        let p = self.dir.path().join("users-ca.pem");
        std::fs::write(&p, self.ca.pem()).unwrap();
        p
    }

    /// A kube client for `user` with a client certificate from `issuer` (None: no certificate).
    async fn client_with(
        &self,
        issuer: Option<&CertifiedIssuer<'static, KeyPair>>,
        user: &str,
    ) -> kube::Client {
        let b = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let user_part = match issuer {
            Some(i) => {
                let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
                p.distinguished_name.push(DnType::CommonName, user);
                p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
                let key = KeyPair::generate().unwrap();
                let cert = p.signed_by(&key, i).unwrap();
                format!(
                    "    client-certificate-data: {}\n    client-key-data: {}\n",
                    b(&cert.pem()),
                    b(&key.serialize_pem())
                )
            }
            None => "    username: \"\"\n".to_string(),
        };
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority-data: {}\nusers:\n- name: u\n  user:\n{user_part}contexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\n",
            self.url,
            b(&self.server_ca)
        );
        let kc: kube::config::Kubeconfig = kube::config::Kubeconfig::from_yaml(&text).unwrap();
        let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .unwrap();
        kube::Client::try_from(cfg).unwrap()
    }

    async fn client(&self, user: &str) -> kube::Client {
        self.client_with(Some(&self.ca), user).await
    }
}

/// Sends a request; `Ok(body)` on 2xx, `Err((code, message))` otherwise.
async fn call(
    c: &kube::Client,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> Result<Value, (u16, String)> {
    let req = axum::http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(body.map(|b| b.to_string().into_bytes()).unwrap_or_default())
        .unwrap();
    match c.request::<Value>(req).await {
        Ok(v) => Ok(v),
        Err(kube::Error::Api(s)) => Err((s.code, s.message)),
        Err(e) => Err((0, e.to_string())),
    }
}

fn path(ns: &str, plural: &str) -> String {
    format!("/apis/sdn.cozystack.io/v1alpha1/namespaces/{ns}/{plural}")
}

fn vpc(name: &str) -> Value {
    json!({"apiVersion":"sdn.cozystack.io/v1alpha1","kind":"VPC","metadata":{"name":name},"spec":{"cidrs":["10.0.0.0/24"]}})
}

struct Setup {
    fake: FakeApiserver,
    users: Users,
    task: tokio::task::JoinHandle<()>,
    _data: tempfile::TempDir,
}

impl Drop for Setup {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn setup() -> Setup {
    let fake = FakeApiserver::start().await;
    let data = tempfile::tempdir().unwrap();
    // The users' CA must exist before the server starts; the server CA is known only after.
    let mut users = Users::new(String::new(), String::new());
    let args = vec![
        "cozyplane-apiserver".to_string(),
        "--secure-port=0".into(),
        "--standalone".into(),
        format!("--data-dir={}", data.path().join("data").display()),
        format!("--client-ca-file={}", users.ca_file().display()),
        format!("--authorization-kubeconfig={}", fake.kubeconfig.display()),
        format!("--kubeconfig={}", fake.kubeconfig.display()),
        "--authorization-webhook-cache-authorized-ttl=0".into(),
        "--authorization-webhook-cache-unauthorized-ttl=0".into(),
    ];
    let server = <Options as clap::Parser>::parse_from(args)
        .complete()
        .await
        .unwrap();
    users.url = format!("https://127.0.0.1:{}", server.addr.port());
    users.server_ca = server.pki.as_ref().unwrap().ca.clone();
    let task = tokio::spawn(async move {
        let _ = server.run().await;
    });
    Setup {
        fake,
        users,
        task,
        _data: data,
    }
}

/// Tenant `alice` owns namespace `t1` (the tenant-edit verbs there), `t2` belongs to someone else.
fn grant_tenant(fake: &FakeApiserver, user: &str, ns: &str) {
    for plural in ["vpcs", "vpcbindings", "vpcpeerings"] {
        for verb in ["create", "get", "list", "delete", "update", "patch"] {
            fake.allow(user, verb, plural, ns);
        }
    }
}

#[tokio::test]
async fn virtual_verbs_export_and_peer() {
    let s = setup().await;
    s.fake.add_namespace("t1", false);
    s.fake.add_namespace("t2", false);
    grant_tenant(&s.fake, "alice", "t1");
    s.fake.allow("alice", "export", "vpcs", "t1");
    let alice = s.users.client("alice").await;

    call(&alice, "POST", &path("t1", "vpcs"), Some(vpc("v")))
        .await
        .unwrap();
    let binding = |ns: &str| json!({"apiVersion":"sdn.cozystack.io/v1alpha1","kind":"VPCBinding","metadata":{"name":"b1"},"spec":{"vpcRef":{"namespace":ns,"name":"v"}}});
    let err = call(&alice, "POST", &path("t1", "vpcbindings"), Some(binding("t2")))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        (
            403,
            "vpcbindings.sdn.cozystack.io \"b1\" is forbidden: User \"alice\" cannot export resource \"vpcs\" in API group \"sdn.cozystack.io\" in the namespace \"t2\"".into()
        )
    );
    call(&alice, "POST", &path("t1", "vpcbindings"), Some(binding("t1")))
        .await
        .unwrap();

    let peering = json!({"apiVersion":"sdn.cozystack.io/v1alpha1","kind":"VPCPeering","metadata":{"name":"p"},"spec":{"vpcRef":{"name":"v"},"peerRef":{"namespace":"t2","name":"w"}}});
    let err = call(&alice, "POST", &path("t1", "vpcpeerings"), Some(peering.clone()))
        .await
        .unwrap_err();
    assert_eq!(err.0, 403);
    assert!(err.1.contains("cannot peer resource \"vpcs\""), "{}", err.1);
    s.fake.allow("alice", "peer", "vpcs", "t1");
    call(&alice, "POST", &path("t1", "vpcpeerings"), Some(peering))
        .await
        .unwrap();

    // Not granted at all: the authorization layer refuses before admission.
    let err = call(&alice, "GET", &path("t2", "vpcs"), None).await.unwrap_err();
    assert_eq!(err.0, 403);
    let err = call(&alice, "GET", "/apis/sdn.cozystack.io/v1alpha1/ports", None)
        .await
        .unwrap_err();
    assert_eq!(err.0, 403);

    // SubjectAccessReview failing for the virtual verb → fail closed.
    *s.fake.state.sar_down.lock().unwrap() = true;
    let b2 = json!({"apiVersion":"sdn.cozystack.io/v1alpha1","kind":"VPCBinding","metadata":{"name":"b2"},"spec":{"vpcRef":{"namespace":"t1","name":"v"}}});
    let err = call(&alice, "POST", &path("t1", "vpcbindings"), Some(b2))
        .await
        .unwrap_err();
    assert_eq!(err.0, 403, "{err:?}");
    assert!(err.1.contains("could not be reached"), "{}", err.1);
}

#[tokio::test]
async fn authentication_needs_a_trusted_certificate() {
    let s = setup().await;
    s.fake.add_namespace("t1", false);
    grant_tenant(&s.fake, "alice", "t1");
    // No certificate: anonymous, only health paths.
    let anon = s.users.client_with(None, "").await;
    assert_eq!(
        call(&anon, "GET", &path("t1", "vpcs"), None).await.unwrap_err().0,
        401
    );
    // A certificate of another CA is not alice.
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let other = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
    let mallory = s.users.client_with(Some(&other), "alice").await;
    assert_eq!(
        call(&mallory, "GET", &path("t1", "vpcs"), None)
            .await
            .unwrap_err()
            .0,
        401
    );
    // X-Remote-User without a front-proxy certificate is ignored.
    let req = axum::http::Request::builder()
        .uri(path("t1", "vpcs"))
        .header("x-remote-user", "alice")
        .header("x-remote-group", "system:masters")
        .body(Vec::new())
        .unwrap();
    match anon.request::<Value>(req).await {
        Err(kube::Error::Api(st)) => assert_eq!(st.code, 401),
        other => panic!("expected 401, got {other:?}"),
    }
    let alice = s.users.client("alice").await;
    call(&alice, "GET", &path("t1", "vpcs"), None).await.unwrap();
}

#[tokio::test]
async fn namespace_lifecycle() {
    let s = setup().await;
    s.fake.add_namespace("gone", true);
    for ns in ["nope", "gone"] {
        grant_tenant(&s.fake, "alice", ns);
    }
    let alice = s.users.client("alice").await;
    assert_eq!(
        call(&alice, "POST", &path("nope", "vpcs"), Some(vpc("v")))
            .await
            .unwrap_err(),
        (404, "namespaces \"nope\" not found".into())
    );
    assert_eq!(
        call(&alice, "POST", &path("gone", "vpcs"), Some(vpc("v"))).await.unwrap_err(),
        (
            403,
            "vpcs.sdn.cozystack.io \"v\" is forbidden: unable to create new content in namespace gone because it is being terminated".into()
        )
    );
    // Namespace deletion: the namespace controller's deletecollection empties every namespaced kind.
    s.fake.add_namespace("t1", false);
    grant_tenant(&s.fake, "alice", "t1");
    s.fake.allow("alice", "deletecollection", "vpcs", "t1");
    s.fake.allow("alice", "export", "vpcs", "t1");
    call(&alice, "POST", &path("t1", "vpcs"), Some(vpc("a")))
        .await
        .unwrap();
    call(&alice, "POST", &path("t1", "vpcs"), Some(vpc("b")))
        .await
        .unwrap();
    let gone = call(
        &alice,
        "DELETE",
        &path("t1", "vpcs"),
        Some(json!({"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Background"})),
    )
    .await
    .unwrap();
    assert_eq!(gone["items"].as_array().unwrap().len(), 2);
    let left = call(&alice, "GET", &path("t1", "vpcs"), None).await.unwrap();
    assert!(left["items"].as_array().unwrap().is_empty());
}

async fn wait_for(mut f: impl FnMut() -> bool, what: &str) {
    for _ in 0..100 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test]
async fn quota_charges_refuses_and_replenishes() {
    let s = setup().await;
    s.fake.add_namespace("t1", false);
    grant_tenant(&s.fake, "alice", "t1");
    const R: &str = "count/vpcs.sdn.cozystack.io";
    s.fake.add_quota("t1", "q1", &json!({ R: "2", "pods": "10" }));
    // The reconciler fills in status.hard/used for our resource.
    wait_for(
        || s.fake.quota("t1", "q1")["status"]["used"][R] == "0",
        "quota initialization",
    )
    .await;
    let alice = s.users.client("alice").await;
    call(&alice, "POST", &path("t1", "vpcs"), Some(vpc("v1")))
        .await
        .unwrap();
    // dryRun charges nothing.
    call(
        &alice,
        "POST",
        &format!("{}?dryRun=All", path("t1", "vpcs")),
        Some(vpc("dry")),
    )
    .await
    .unwrap();
    assert_eq!(s.fake.quota("t1", "q1")["status"]["used"][R], "1");
    call(&alice, "POST", &path("t1", "vpcs"), Some(vpc("v2")))
        .await
        .unwrap();
    let err = call(&alice, "POST", &path("t1", "vpcs"), Some(vpc("v3")))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        (
            403,
            "vpcs.sdn.cozystack.io \"v3\" is forbidden: exceeded quota: q1, requested: count/vpcs.sdn.cozystack.io=1, used: count/vpcs.sdn.cozystack.io=2, limited: count/vpcs.sdn.cozystack.io=2".into()
        )
    );
    let q = s.fake.quota("t1", "q1");
    assert_eq!(q["status"]["used"][R], "2");
    assert_eq!(q["status"]["hard"][R], "2");
    assert!(
        q["status"]["used"].get("pods").is_none(),
        "only our resources are touched"
    );
    // Deleting one lets the next through once the reconciler recounted.
    call(&alice, "DELETE", &format!("{}/v1", path("t1", "vpcs")), None)
        .await
        .unwrap();
    wait_for(
        || s.fake.quota("t1", "q1")["status"]["used"][R] == "1",
        "recount after delete",
    )
    .await;
    call(&alice, "POST", &path("t1", "vpcs"), Some(vpc("v3")))
        .await
        .unwrap();
}

#[tokio::test]
async fn apiservice_is_created_then_patched() {
    let fake = FakeApiserver::start().await;
    let client = cozyplane_apiserver::options::kube_client(Some(&fake.kubeconfig))
        .await
        .unwrap();
    let mut r = Registration {
        service: "cozy-sdn/cozyplane-apiserver".parse().unwrap(),
        port: 443,
        group_priority_minimum: 1000,
        version_priority: 15,
        ca: CaSource::ServingCert,
    };
    assert!(apiservice::ensure(client.clone(), &r, "CA1").await.unwrap());
    let name = "v1alpha1.sdn.cozystack.io";
    let o = fake.state.apiservices.lock().unwrap()[name].clone();
    assert_eq!(o["spec"]["service"]["name"], "cozyplane-apiserver");
    assert_eq!(o["spec"]["groupPriorityMinimum"], 1000);
    assert_eq!(
        o["spec"]["caBundle"],
        base64::engine::general_purpose::STANDARD.encode("CA1")
    );
    r.version_priority = 20;
    r.ca = CaSource::CertManager("cozy-sdn/cozyplane-tls".into());
    assert!(!apiservice::ensure(client, &r, "CA2").await.unwrap());
    let o = fake.state.apiservices.lock().unwrap()[name].clone();
    assert_eq!(o["spec"]["versionPriority"], 20);
    assert_eq!(
        o["metadata"]["annotations"]["cert-manager.io/inject-ca-from-secret"],
        "cozy-sdn/cozyplane-tls"
    );
}
