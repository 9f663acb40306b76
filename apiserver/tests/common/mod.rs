//! The harness of the tenancy tests: a fake kube-apiserver (plain axum over TLS on loopback)
//! answering SubjectAccessReviews from a table and serving namespaces, resourcequotas and
//! apiservices from memory; users with client certificates of a test CA; our server started
//! standalone with `--authorization-kubeconfig` and `--kubeconfig` pointing at the fake.
//! Shared by `tenancy.rs` and `trace_tenancy.rs`. A grant names `resource` or
//! `resource/subresource`, as RBAC rules do.

#![allow(
    dead_code,
    unreachable_pub,
    reason = "each test binary uses a different subset"
)]

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use base64::Engine as _;
use cozyplane_apiserver::options::Options;

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
pub struct Fake {
    /// (user, verb, resource, namespace) allowed by SubjectAccessReview.
    pub allowed: Mutex<Vec<(String, String, String, String)>>,
    pub sar_down: Mutex<bool>,
    pub namespaces: Mutex<BTreeMap<String, Value>>,
    /// (namespace, name) → ResourceQuota.
    pub quotas: Mutex<BTreeMap<(String, String), Value>>,
    pub apiservices: Mutex<BTreeMap<String, Value>>,
    pub rv: Mutex<u64>,
}

pub type St = State<Arc<Fake>>;

impl Fake {
    pub fn next_rv(&self) -> String {
        let mut rv = self.rv.lock().unwrap();
        *rv += 1;
        rv.to_string()
    }
}

pub fn status(code: u16, reason: &str, message: &str) -> Response {
    let body = json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":message,"reason":reason,"code":code});
    (StatusCode::from_u16(code).unwrap(), Json(body)).into_response()
}

#[allow(clippy::needless_pass_by_value)]
pub fn list(kind: &str, items: Vec<Value>, rv: &str) -> Response {
    Json(json!({"kind": kind, "apiVersion": "v1", "metadata": {"resourceVersion": rv}, "items": items}))
        .into_response()
}

pub fn watch_forever() -> Response {
    Body::from_stream(futures::stream::pending::<Result<Bytes, std::io::Error>>()).into_response()
}

/// `resource` or `resource/subresource`, as RBAC names them.
fn resource_of(ra: &Value) -> String {
    let r = ra["resource"].as_str().unwrap_or_default();
    match ra["subresource"].as_str().unwrap_or_default() {
        "" => r.to_string(),
        sub => format!("{r}/{sub}"),
    }
}

pub async fn sar(State(f): St, Json(review): Json<Value>) -> Response {
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
                && *r == resource_of(ra)
                && (ns == "*" || ns == ra["namespace"].as_str().unwrap_or_default())
        });
    let mut out = review.clone();
    out["status"] = json!({ "allowed": allowed });
    Json(out).into_response()
}

pub async fn namespaces(State(f): St, Query(q): Query<BTreeMap<String, String>>) -> Response {
    if q.get("watch").is_some_and(|w| w == "true" || w == "1") {
        return watch_forever();
    }
    let items = f.namespaces.lock().unwrap().values().cloned().collect();
    list("NamespaceList", items, "1")
}

pub async fn namespace(State(f): St, Path(name): Path<String>) -> Response {
    match f.namespaces.lock().unwrap().get(&name) {
        Some(n) => Json(n.clone()).into_response(),
        None => status(404, "NotFound", &format!("namespaces \"{name}\" not found")),
    }
}

pub async fn all_quotas(State(f): St, Query(q): Query<BTreeMap<String, String>>) -> Response {
    if q.get("watch").is_some_and(|w| w == "true" || w == "1") {
        return watch_forever();
    }
    let items = f.quotas.lock().unwrap().values().cloned().collect();
    let rv = f.rv.lock().unwrap().to_string();
    list("ResourceQuotaList", items, &rv)
}

pub async fn ns_quotas(State(f): St, Path(ns): Path<String>) -> Response {
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

pub async fn put_quota_status(
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

pub async fn apiservice_item(
    State(f): St,
    method: Method,
    Path(name): Path<String>,
    body: Bytes,
) -> Response {
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

pub async fn apiservice_create(State(f): St, Json(mut o): Json<Value>) -> Response {
    let rv = f.next_rv();
    let name = o["metadata"]["name"].as_str().unwrap().to_string();
    o["metadata"]["resourceVersion"] = json!(rv);
    f.apiservices.lock().unwrap().insert(name, o.clone());
    (StatusCode::CREATED, Json(o)).into_response()
}

pub struct FakeApiserver {
    pub state: Arc<Fake>,
    pub kubeconfig: PathBuf,
    pub task: tokio::task::JoinHandle<()>,
    pub _dir: tempfile::TempDir,
}

impl Drop for FakeApiserver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeApiserver {
    pub async fn start() -> Self {
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

    pub fn allow(&self, user: &str, verb: &str, resource: &str, ns: &str) {
        self.state
            .allowed
            .lock()
            .unwrap()
            .push((user.into(), verb.into(), resource.into(), ns.into()));
    }

    pub fn add_namespace(&self, name: &str, terminating: bool) {
        let phase = if terminating { "Terminating" } else { "Active" };
        let ns = json!({"apiVersion":"v1","kind":"Namespace","metadata":{"name":name,"resourceVersion":"1"},"status":{"phase":phase}});
        self.state.namespaces.lock().unwrap().insert(name.into(), ns);
    }

    pub fn add_quota(&self, ns: &str, name: &str, hard: &Value) {
        let rv = self.state.next_rv();
        let q = json!({"apiVersion":"v1","kind":"ResourceQuota","metadata":{"name":name,"namespace":ns,"resourceVersion":rv},"spec":{"hard":hard}});
        self.state
            .quotas
            .lock()
            .unwrap()
            .insert((ns.into(), name.into()), q);
    }

    pub fn quota(&self, ns: &str, name: &str) -> Value {
        self.state.quotas.lock().unwrap()[&(ns.to_string(), name.to_string())].clone()
    }
}

// ---------------------------------------------------------------------------------------------
// The server and its clients

pub struct Users {
    pub ca: CertifiedIssuer<'static, KeyPair>,
    pub server_ca: String,
    pub url: String,
    pub dir: tempfile::TempDir,
}

impl Users {
    pub fn new(server_ca: String, url: String) -> Self {
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

    pub fn ca_file(&self) -> PathBuf {
        let p = self.dir.path().join("users-ca.pem");
        std::fs::write(&p, self.ca.pem()).unwrap();
        p
    }

    /// A kube client for `user` with a client certificate from `issuer` (None: no certificate).
    pub async fn client_with(
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

    pub async fn client(&self, user: &str) -> kube::Client {
        self.client_with(Some(&self.ca), user).await
    }
}

/// Sends a request; `Ok(body)` on 2xx, `Err((code, message))` otherwise.
pub async fn call(
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

pub fn path(ns: &str, plural: &str) -> String {
    format!("/apis/sdn.cozystack.io/v1alpha1/namespaces/{ns}/{plural}")
}

pub fn vpc(name: &str) -> Value {
    json!({"apiVersion":"sdn.cozystack.io/v1alpha1","kind":"VPC","metadata":{"name":name},"spec":{"cidrs":["10.0.0.0/24"]}})
}

pub struct Setup {
    pub fake: FakeApiserver,
    pub users: Users,
    pub task: tokio::task::JoinHandle<()>,
    pub _data: tempfile::TempDir,
}

impl Drop for Setup {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub async fn setup() -> Setup {
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
pub fn grant_tenant(fake: &FakeApiserver, user: &str, ns: &str) {
    for plural in ["vpcs", "vpcbindings", "vpcpeerings"] {
        for verb in ["create", "get", "list", "delete", "update", "patch"] {
            fake.allow(user, verb, plural, ns);
        }
    }
}
