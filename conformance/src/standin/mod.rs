//! The kube stand-in: a small kube-apiserver for tests, never shipped.
//!
//! It serves what cozyplane and its agents consume from Kubernetes (core namespaces, pods,
//! nodes, services, configmaps, resourcequotas; endpointslices; networkpolicies; RBAC; the
//! access and token reviews; APIService and the aggregation proxy), built on the API server's
//! own machinery: every kind is an [`store::UnstructuredStore`] behind the apiserver's
//! [`WatchCache`] and REST handlers, on the embedded store. See `docs/testing.md`.
//!
//! [`StandIn::start`] mints its PKI, seeds the bootstrap objects and serves HTTPS on a loopback
//! port until dropped.

pub mod kinds;
pub mod lb;
pub mod pki;
pub mod protobuf;
pub mod proxy;
pub mod rbac;
pub mod server;
pub mod store;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use self::pki::Pem;
use axum::body::Body;
use axum::http::Request;
use base64::Engine;
use cozyplane_apiserver::errors::{ApiError, Result};
use cozyplane_apiserver::registry::Resource;
use cozyplane_apiserver::registry::cache::WatchCache;
use cozyplane_apiserver::registry::store::{DeleteOptions, ListParams, WriteOptions};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};

use self::proxy::Backend;
use self::rbac::Identity;
use self::store::UnstructuredStore;

/// Every stored kind: its store and its watch cache.
pub struct Registry {
    stores: Vec<Arc<UnstructuredStore>>,
    caches: Vec<Arc<WatchCache>>,
}

impl Registry {
    fn new(storage: &Arc<dyn cozyplane_storage::Storage>, service_families: &[String]) -> Self {
        let stores: Vec<Arc<UnstructuredStore>> = kinds::KINDS
            .iter()
            .map(|d| {
                let mut s = UnstructuredStore::new(*d, Arc::clone(storage));
                if d.info.plural == "services" {
                    s.serve_families(service_families);
                }
                Arc::new(s)
            })
            .collect();
        let caches = stores
            .iter()
            .map(|s| WatchCache::start(s.clone() as Arc<dyn Resource>))
            .collect();
        Self { stores, caches }
    }

    /// The store of a core or RBAC/apiregistration resource by plural (panics if unknown: the
    /// stand-in's own code names only kinds of its table).
    pub fn store(&self, plural: &str) -> &Arc<UnstructuredStore> {
        self.stores
            .iter()
            .find(|s| s.def().info.plural == plural)
            .expect("a kind of the stand-in's table")
    }

    /// The watch cache of `group`/`plural`.
    pub fn cache(&self, group: &str, plural: &str) -> Option<&Arc<WatchCache>> {
        self.caches
            .iter()
            .find(|c| c.resource().info().group == group && c.resource().info().plural == plural)
    }

    /// Every object of `plural` in `ns` (or everywhere); empty on error.
    pub async fn list(&self, plural: &str, ns: Option<&str>) -> Vec<Value> {
        self.store(plural)
            .list(ns, &ListParams::default())
            .await
            .map(|p| p.items)
            .unwrap_or_default()
    }
}

/// State shared by the server and the stand-in's controllers.
pub struct Shared {
    /// The kinds.
    pub reg: Registry,
    /// Static tokens: token → user (see [`StandIn::revoke_token`]).
    pub tokens: RwLock<HashMap<String, Identity>>,
    /// Service (`namespace/name`) → backend.
    pub backends: RwLock<HashMap<String, Backend>>,
    /// Certificates.
    pub pki: pki::StandInPki,
    /// `https://127.0.0.1:<port>`.
    pub url: String,
    /// Reviews answered, by kind (`TokenReview`, `SubjectAccessReview`, ...): lets tests see
    /// that a delegating server really asked.
    pub reviews: std::sync::Mutex<HashMap<String, u64>>,
    /// Resource requests after authentication, in arrival order: lets tests count a client's
    /// lists, watches and refusals and see when they came (see [`StandIn::requests`]).
    pub requests: std::sync::Mutex<Vec<RequestRecord>>,
    /// The LoadBalancer address pools, if the stand-in plays that part ([`Options::lb_pool`]).
    pub lb: Option<lb::LbPool>,
}

/// One resource request the stand-in received.
#[derive(Clone, Debug)]
pub struct RequestRecord {
    /// When it arrived.
    pub at: std::time::Instant,
    /// `list`, `watch`, `get`, …
    pub verb: String,
    /// Plural, with `/sub` for a subresource.
    pub resource: String,
    /// Whether RBAC allowed it (else it was answered 403).
    pub allowed: bool,
}

impl Shared {
    /// The user of a static token, if the token file (still) has it.
    pub fn token(&self, token: &str) -> Option<Identity> {
        self.tokens.read().expect("tokens lock").get(token).cloned()
    }

    /// The APIService (with a Service) serving `group`, preferring the highest `versionPriority`.
    pub async fn apiservice_for(&self, group: &str) -> Option<Value> {
        let mut svcs: Vec<Value> = self
            .reg
            .list("apiservices", None)
            .await
            .into_iter()
            .filter(|s| {
                s.pointer("/spec/group").and_then(Value::as_str) == Some(group)
                    && s.pointer("/spec/service").is_some_and(|v| !v.is_null())
            })
            .collect();
        svcs.sort_by_key(|s| {
            -s.pointer("/spec/versionPriority")
                .and_then(Value::as_i64)
                .unwrap_or(0)
        });
        svcs.into_iter().next()
    }

    /// Every aggregated APIService with its (group, version).
    pub async fn aggregated_groups(&self) -> Vec<(Value, (String, String))> {
        let mut out: Vec<(Value, (String, String))> = Vec::new();
        for s in self.reg.list("apiservices", None).await {
            if s.pointer("/spec/service").is_none_or(Value::is_null) {
                continue;
            }
            let g = s
                .pointer("/spec/group")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let v = s
                .pointer("/spec/version")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            if !out.iter().any(|(_, (og, _))| *og == g) {
                out.push((s, (g, v)));
            }
        }
        out
    }

    /// Forwards `req` to the backend of `apiservice` as `who`.
    pub async fn forward(
        &self,
        apiservice: &Value,
        who: &Identity,
        req: Request<Body>,
    ) -> Result<axum::http::Response<Body>> {
        let ns = apiservice
            .pointer("/spec/service/namespace")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let name = apiservice
            .pointer("/spec/service/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let backend = self
            .backends
            .read()
            .expect("backends lock")
            .get(&format!("{ns}/{name}"))
            .cloned();
        let Some(backend) = backend else {
            return Err(ApiError::unavailable(format!(
                "service {ns}/{name} has no endpoints in this test"
            )));
        };
        proxy::forward(apiservice, &backend, &self.pki.front_proxy_client, who, req).await
    }

    /// The aggregated-discovery item of an APIService's group, from its backend.
    pub async fn backend_v2(&self, apiservice: &Value) -> Option<Value> {
        let g = apiservice.pointer("/spec/group").and_then(Value::as_str)?;
        let who = Identity::new("system:kube-aggregator", &["system:masters"]);
        let req = proxy::internal_request("GET", "/apis", cozyplane_apiserver::server::discovery::V2_MEDIA);
        let resp = self.forward(apiservice, &who, req).await.ok()?;
        let (code, v) = proxy::read_json(resp).await.ok()?;
        if code != 200 {
            return None;
        }
        v.get("items")?
            .as_array()?
            .iter()
            .find(|i| i.pointer("/metadata/name").and_then(Value::as_str) == Some(g))
            .cloned()
    }
}

/// A static token (one line of the token file: `token,user,uid,"group1,group2"`).
#[derive(Clone, Debug)]
pub struct Token {
    /// The bearer token.
    pub token: String,
    /// User name.
    pub user: String,
    /// UID.
    pub uid: String,
    /// Groups.
    pub groups: Vec<String>,
}

impl Token {
    /// A token for `user` in `groups` (uid = user).
    pub fn new(token: &str, user: &str, groups: &[&str]) -> Self {
        Self {
            token: token.into(),
            user: user.into(),
            uid: user.into(),
            groups: groups.iter().map(|g| (*g).to_string()).collect(),
        }
    }
}

/// Parses a kube static token file.
pub fn parse_token_file(text: &str) -> HashMap<String, Identity> {
    let mut m = HashMap::new();
    for line in text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        // Fields are comma-separated; the fourth may be a quoted, comma-separated group list.
        let mut fields: Vec<String> = Vec::new();
        let mut cur = String::new();
        let mut quoted = false;
        for c in line.chars() {
            match c {
                '"' => quoted = !quoted,
                ',' if !quoted => fields.push(std::mem::take(&mut cur)),
                c => cur.push(c),
            }
        }
        fields.push(cur);
        if fields.len() < 3 {
            continue;
        }
        let groups = fields
            .get(3)
            .map(|g| {
                g.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        m.insert(
            fields[0].clone(),
            Identity {
                name: fields[1].clone(),
                uid: fields[2].clone(),
                groups,
                ..Default::default()
            },
        );
    }
    m
}

/// Options of [`StandIn::start`].
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Static tokens, written to the token file.
    pub tokens: Vec<Token>,
    /// Assign addresses to LoadBalancer Services from these pools ([`lb`]).
    pub lb: Option<lb::LbPool>,
    /// The Service IP families the "cluster" serves (empty: both): a Service asking for
    /// another is refused with 422 Invalid, as by a single-stack kube-apiserver.
    pub service_families: Vec<String>,
}

impl Options {
    /// Plays the LoadBalancer implementation with pools `v4` and `v6` (CIDRs; empty: none of
    /// that family) for Services without a `loadBalancerClass`.
    #[must_use]
    pub fn lb_pool(mut self, v4: &str, v6: &str) -> Self {
        self.lb = Some(lb::LbPool::new(v4, v6));
        self
    }

    /// Also serves LoadBalancer Services of `class`.
    #[must_use]
    pub fn lb_class(mut self, class: &str) -> Self {
        if let Some(p) = self.lb.as_mut() {
            p.classes.push(class.to_string());
        }
        self
    }

    /// Serves only the Service IP `families` (`IPv4`, `IPv6`).
    #[must_use]
    pub fn service_families(mut self, families: &[&str]) -> Self {
        self.service_families = families.iter().map(|f| (*f).to_string()).collect();
        self
    }
}

/// Files of the front-proxy (request-header) identity.
#[derive(Clone, Debug)]
pub struct FrontProxyFiles {
    /// The request-header CA.
    pub ca: PathBuf,
    /// The front-proxy client certificate (CN `front-proxy-client`).
    pub cert: PathBuf,
    /// Its key.
    pub key: PathBuf,
}

/// A running stand-in; stops (tasks aborted) when dropped.
pub struct StandIn {
    /// `https://127.0.0.1:<port>`.
    pub url: String,
    /// The cluster CA (serving certificate and client certificates).
    pub ca_file: PathBuf,
    /// The static token file.
    pub token_file: PathBuf,
    /// The front-proxy identity.
    pub front_proxy: FrontProxyFiles,
    /// Shared state.
    pub shared: Arc<Shared>,
    dir: tempfile::TempDir,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    _stop: tokio::sync::watch::Sender<()>,
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

async fn seed(reg: &Registry, pki: &pki::StandInPki) -> Result<()> {
    let o = WriteOptions::server();
    for ns in ["default", "kube-system", "kube-public"] {
        reg.store("namespaces")
            .create(None, json!({ "metadata": { "name": ns } }), &o)
            .await?;
    }
    let (roles, bindings) = rbac::bootstrap();
    for r in roles {
        reg.store("clusterroles").create(None, r, &o).await?;
    }
    for b in bindings {
        reg.store("clusterrolebindings").create(None, b, &o).await?;
    }
    let list = |s: &str| json!([s]).to_string();
    reg.store("configmaps")
        .create(
            Some("kube-system"),
            json!({
                "metadata": { "name": "extension-apiserver-authentication" },
                "data": {
                    "client-ca-file": pki.ca,
                    "requestheader-client-ca-file": pki.front_proxy_ca,
                    "requestheader-allowed-names": list("front-proxy-client"),
                    "requestheader-username-headers": list("X-Remote-User"),
                    "requestheader-uid-headers": list("X-Remote-Uid"),
                    "requestheader-group-headers": list("X-Remote-Group"),
                    "requestheader-extra-headers-prefix": list("X-Remote-Extra-"),
                },
            }),
            &o,
        )
        .await?;
    rbac::aggregate_once(reg).await;
    Ok(())
}

/// One pass of the namespace controller: empties every terminating namespace (local kinds, then
/// the aggregated groups' namespaced resources through the proxy with `deletecollection`) and
/// removes it once nothing is left.
pub async fn namespace_controller_once(st: &Shared) {
    let who = Identity::new(
        "system:serviceaccount:kube-system:namespace-controller",
        &["system:masters"],
    );
    for ns in st.reg.list("namespaces", None).await {
        if ns.pointer("/metadata/deletionTimestamp").is_none() {
            continue;
        }
        let name = ns
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let mut left = 0usize;
        for s in st.reg.stores.iter().filter(|s| s.def().info.namespaced) {
            for obj in st.reg.list(s.def().info.plural, Some(&name)).await {
                left += 1;
                if obj.pointer("/metadata/deletionTimestamp").is_none() {
                    let n = obj
                        .pointer("/metadata/name")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    let _ = s.delete(Some(&name), n, &DeleteOptions::default()).await;
                }
            }
        }
        for (svc, (g, v)) in st.aggregated_groups().await {
            let req = proxy::internal_request("GET", &format!("/apis/{g}/{v}"), "application/json");
            let Ok(resp) = st.forward(&svc, &who, req).await else {
                left += 1;
                continue;
            };
            let Ok((200, doc)) = proxy::read_json(resp).await else {
                left += 1;
                continue;
            };
            for r in doc
                .get("resources")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let plural = r.get("name").and_then(Value::as_str).unwrap_or_default();
                let verbs = r.get("verbs").cloned().unwrap_or(json!([]));
                if plural.contains('/')
                    || r.get("namespaced") != Some(&json!(true))
                    || !verbs
                        .as_array()
                        .is_some_and(|a| a.contains(&json!("deletecollection")))
                {
                    continue;
                }
                let path = format!("/apis/{g}/{v}/namespaces/{name}/{plural}");
                let del = proxy::internal_request("DELETE", &path, "application/json");
                let _ = st.forward(&svc, &who, del).await.map(proxy::read_json);
                let get = proxy::internal_request("GET", &path, "application/json");
                match st.forward(&svc, &who, get).await {
                    Ok(resp) => match proxy::read_json(resp).await {
                        Ok((200, l)) => left += l.get("items").and_then(Value::as_array).map_or(0, Vec::len),
                        _ => left += 1,
                    },
                    Err(_) => left += 1,
                }
            }
        }
        let finalizers = ns
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty());
        if left == 0 && !finalizers {
            let _ = st.reg.store("namespaces").remove(None, &name).await;
        }
    }
}

/// One pass of the APIService availability check: `GET /apis/<group>/<version>` through the
/// proxy as `system:kube-aggregator`, recorded as the `Available` condition.
pub async fn apiservice_controller_once(st: &Shared) {
    let who = Identity::new("system:kube-aggregator", &["system:masters"]);
    for svc in st.reg.list("apiservices", None).await {
        let name = svc
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let (ok, reason, message) = if svc.pointer("/spec/service").is_none_or(Value::is_null) {
            (
                true,
                "Local",
                "Local APIServices are always available".to_string(),
            )
        } else {
            let g = svc
                .pointer("/spec/group")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let v = svc
                .pointer("/spec/version")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let req = proxy::internal_request("GET", &format!("/apis/{g}/{v}"), "application/json");
            match st.forward(&svc, &who, req).await {
                Ok(resp) if resp.status().is_success() => (true, "Passed", "all checks passed".to_string()),
                Ok(resp) => (
                    false,
                    "FailedDiscoveryCheck",
                    format!(
                        "failing or missing response from {}: {}",
                        svc_url(&svc),
                        resp.status()
                    ),
                ),
                Err(e) => (false, "FailedDiscoveryCheck", e.message),
            }
        };
        let status = if ok { "True" } else { "False" };
        let cur = svc
            .pointer("/status/conditions/0")
            .cloned()
            .unwrap_or(Value::Null);
        if cur.get("status") == Some(&json!(status)) && cur.get("reason") == Some(&json!(reason)) {
            continue;
        }
        let mut next = svc.clone();
        next["status"] = json!({ "conditions": [{
            "type": "Available", "status": status, "reason": reason, "message": message,
            "lastTransitionTime": svc.pointer("/metadata/creationTimestamp").cloned().unwrap_or(Value::Null),
        }]});
        let _ = st
            .reg
            .store("apiservices")
            .update(None, &name, next, true, &WriteOptions::server())
            .await;
    }
}

fn svc_url(svc: &Value) -> String {
    format!(
        "https://{}.{}.svc",
        svc.pointer("/spec/service/name")
            .and_then(Value::as_str)
            .unwrap_or_default(),
        svc.pointer("/spec/service/namespace")
            .and_then(Value::as_str)
            .unwrap_or_default()
    )
}

fn every(
    period: Duration,
    st: &Arc<Shared>,
    f: fn(Arc<Shared>) -> futures::future::BoxFuture<'static, ()>,
) -> tokio::task::JoinHandle<()> {
    let st = Arc::downgrade(st);
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(period).await;
            let Some(s) = st.upgrade() else { return };
            f(s).await;
        }
    })
}

impl StandIn {
    /// Starts a stand-in on a free loopback port.
    pub async fn start(opts: Options) -> Self {
        use futures::FutureExt;
        let dir = tempfile::tempdir().expect("temp dir");
        let storage = cozyplane_storage::open(cozyplane_storage::Config::Embedded(
            cozyplane_storage::embedded::Config::new(dir.path().join("data")),
        ))
        .await
        .expect("embedded store opens");
        let pki = pki::StandInPki::mint().expect("stand-in PKI");
        let write = |name: &str, text: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).expect("write stand-in file");
            p
        };
        let ca_file = write("ca.crt", &pki.ca);
        let front_proxy = FrontProxyFiles {
            ca: write("front-proxy-ca.crt", &pki.front_proxy_ca),
            cert: write("front-proxy-client.crt", &pki.front_proxy_client.cert),
            key: write("front-proxy-client.key", &pki.front_proxy_client.key),
        };
        let csv: String = opts
            .tokens
            .iter()
            .map(|t| format!("{},{},{},\"{}\"\n", t.token, t.user, t.uid, t.groups.join(",")))
            .collect();
        let token_file = write("tokens.csv", &csv);
        let tokens = parse_token_file(&std::fs::read_to_string(&token_file).expect("token file"));

        let cfg = pki::server_config(&pki.serving, &pki.ca).expect("stand-in TLS");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!(
            "https://127.0.0.1:{}",
            listener.local_addr().expect("addr").port()
        );
        let reg = Registry::new(&storage, &opts.service_families);
        seed(&reg, &pki).await.expect("seed the stand-in");
        let shared = Arc::new(Shared {
            reg,
            tokens: RwLock::new(tokens),
            backends: RwLock::new(HashMap::new()),
            pki,
            url: url.clone(),
            reviews: std::sync::Mutex::new(HashMap::new()),
            requests: std::sync::Mutex::new(Vec::new()),
            lb: opts.lb.clone(),
        });
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
        let st = shared.clone();
        // Dropped with the stand-in: open connections end too, so a client with pooled
        // connections (a delegating server's review client) sees the stand-in go away.
        let (stop, stopped) = tokio::sync::watch::channel(());
        let serve = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                // As kube-apiserver (Go) does: no Nagle delay on small writes.
                let _ = tcp.set_nodelay(true);
                let acceptor = acceptor.clone();
                let st = st.clone();
                let mut stopped = stopped.clone();
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let peer = pki::user_of(tls.get_ref().1.peer_certificates());
                    let svc =
                        hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                            let st = st.clone();
                            let peer = peer.clone();
                            async move {
                                Ok::<_, std::convert::Infallible>(
                                    server::handle(st, peer, req.map(Body::new)).await,
                                )
                            }
                        });
                    let b = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                    tokio::select! {
                        _ = b.serve_connection(TokioIo::new(tls), svc) => {}
                        _ = stopped.changed() => {}
                    }
                });
            }
        });
        let mut tasks = vec![
            serve,
            every(Duration::from_millis(200), &shared, |s| {
                async move { rbac::aggregate_once(&s.reg).await }.boxed()
            }),
            every(Duration::from_millis(300), &shared, |s| {
                async move { namespace_controller_once(&s).await }.boxed()
            }),
            every(Duration::from_millis(500), &shared, |s| {
                async move { apiservice_controller_once(&s).await }.boxed()
            }),
        ];
        if shared.lb.is_some() {
            tasks.push(every(Duration::from_millis(100), &shared, |s| {
                async move { lb::assign_once(&s).await }.boxed()
            }));
        }
        Self {
            url,
            ca_file,
            token_file,
            front_proxy,
            shared,
            dir,
            tasks,
            _stop: stop,
        }
    }

    fn kubeconfig(&self, file: &str, user: &str) -> PathBuf {
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: standin\n  cluster:\n    server: {}\n    certificate-authority-data: {}\nusers:\n- name: u\n  user:\n{user}contexts:\n- name: standin\n  context:\n    cluster: standin\n    user: u\n    namespace: default\ncurrent-context: standin\n",
            self.url,
            b64(&self.shared.pki.ca),
        );
        let p = self.dir.path().join(file);
        std::fs::write(&p, text).expect("write kubeconfig");
        p
    }

    /// A kubeconfig for the admin client certificate (`kubernetes-admin`, `system:masters`).
    pub fn admin_kubeconfig(&self) -> PathBuf {
        let a = &self.shared.pki.admin;
        self.kubeconfig(
            "admin.kubeconfig",
            &format!(
                "    client-certificate-data: {}\n    client-key-data: {}\n",
                b64(&a.cert),
                b64(&a.key)
            ),
        )
    }

    /// A client with the admin certificate ([`admin_kubeconfig`](Self::admin_kubeconfig)).
    pub async fn admin_client(&self) -> kube::Client {
        let kc = kube::config::Kubeconfig::read_from(self.admin_kubeconfig()).expect("admin kubeconfig");
        let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .expect("admin kubeconfig loads");
        kube::Client::try_from(cfg).expect("client")
    }

    /// A kubeconfig that authenticates with a bearer token of the token file.
    pub fn token_kubeconfig(&self, token: &str) -> PathBuf {
        let file: String = token.chars().filter(char::is_ascii_alphanumeric).collect();
        self.kubeconfig(
            &format!("token-{file}.kubeconfig"),
            &format!("    token: {token}\n"),
        )
    }

    /// Maps a Service (`namespace/name`) of an APIService to a loopback backend.
    pub fn map_service(&self, service: &str, backend: Backend) {
        self.shared
            .backends
            .write()
            .expect("backends lock")
            .insert(service.to_string(), backend);
    }

    /// Runs kubectl with `kubeconfig` (see [`crate::kubectl_command`]).
    pub async fn kubectl(&self, kubeconfig: &Path, args: &[&str]) -> Output {
        crate::kubectl_command(kubeconfig)
            .args(args)
            .output()
            .await
            .expect("kubectl runs")
    }

    /// Applies a JSON object as the admin through the store (no HTTP): for test setup.
    pub async fn create(&self, plural: &str, ns: Option<&str>, obj: Value) -> Result<Value> {
        self.shared
            .reg
            .store(plural)
            .create(ns, obj, &WriteOptions::server())
            .await
    }

    /// Registers a cozyplane server in standalone mode (`TestServer`) as the backend of
    /// `v1alpha1.sdn.cozystack.io`: its CA becomes the caBundle and, since a standalone server
    /// trusts only its own CA, the proxy presents its admin certificate instead of the
    /// front-proxy one.
    pub async fn register_standalone(&self, server: &crate::TestServer) {
        let kc = std::fs::read_to_string(&server.kubeconfig).expect("server kubeconfig");
        let field = |k: &str| -> String {
            kc.lines()
                .find_map(|l| l.trim().strip_prefix(&format!("{k}: ")).map(str::to_string))
                .expect("kubeconfig field")
        };
        let dec = |s: String| {
            String::from_utf8(
                base64::engine::general_purpose::STANDARD
                    .decode(s)
                    .expect("base64"),
            )
            .expect("utf-8")
        };
        let addr = server
            .url
            .trim_start_matches("https://")
            .parse()
            .expect("server address");
        let client = Pem {
            cert: dec(field("client-certificate-data")),
            key: dec(field("client-key-data")),
        };
        self.map_service(
            "cozy-system/cozyplane",
            Backend {
                addr,
                client: Some(client),
            },
        );
        self.register_apiservice(&field("certificate-authority-data"))
            .await;
    }

    /// Creates the `v1alpha1.sdn.cozystack.io` APIService for Service `cozy-system/cozyplane`.
    pub async fn register_apiservice(&self, ca_bundle_b64: &str) {
        self.create(
            "apiservices",
            None,
            json!({
                "metadata": { "name": format!("{}.{}", cozyplane_apis::v1alpha1::VERSION, cozyplane_apis::GROUP) },
                "spec": {
                    "group": cozyplane_apis::GROUP, "version": cozyplane_apis::v1alpha1::VERSION,
                    "service": { "namespace": "cozy-system", "name": "cozyplane", "port": 443 },
                    "caBundle": ca_bundle_b64, "groupPriorityMinimum": 1000, "versionPriority": 15,
                },
            }),
        )
        .await
        .expect("APIService created");
    }
}

impl StandIn {
    /// Revokes a static token: removes its line from the token file and forgets it, so the
    /// stand-in's own authentication and its TokenReview answer "not authenticated" from now on
    /// (a delegating server sees that once its TokenReview cache expires).
    pub fn revoke_token(&self, token: &str) {
        self.shared.tokens.write().expect("tokens lock").remove(token);
        let text = std::fs::read_to_string(&self.token_file).expect("token file");
        let kept: String = text
            .lines()
            .filter(|l| l.split(',').next().map(str::trim) != Some(token))
            .map(|l| format!("{l}\n"))
            .collect();
        std::fs::write(&self.token_file, kept).expect("write token file");
    }

    /// How many `verb` requests (`list`, `watch`, …) on `resource` (plural, with `/sub` for a
    /// subresource) were received; `allowed` picks the authorized or the refused (403) ones.
    pub fn requests(&self, verb: &str, resource: &str, allowed: bool) -> usize {
        self.request_times(verb, resource, allowed).len()
    }

    /// When each of those requests arrived, oldest first.
    pub fn request_times(&self, verb: &str, resource: &str, allowed: bool) -> Vec<std::time::Instant> {
        self.shared
            .requests
            .lock()
            .expect("requests lock")
            .iter()
            .filter(|r| r.verb == verb && r.resource == resource && r.allowed == allowed)
            .map(|r| r.at)
            .collect()
    }

    /// How many resource requests were refused by RBAC (403), whatever the resource.
    pub fn forbidden_requests(&self) -> usize {
        self.shared
            .requests
            .lock()
            .expect("requests lock")
            .iter()
            .filter(|r| !r.allowed)
            .count()
    }

    /// How many reviews of `kind` the stand-in has answered.
    pub fn reviews(&self, kind: &str) -> u64 {
        self.shared
            .reviews
            .lock()
            .expect("reviews lock")
            .get(kind)
            .copied()
            .unwrap_or_default()
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// cozyplane-apiserver running in delegated mode against a stand-in; stopped when dropped.
pub struct Cozyplane {
    /// `https://127.0.0.1:<port>`.
    pub url: String,
    /// The stand-in's admin kubeconfig (its client certificate authenticates to our server too).
    admin_kubeconfig: PathBuf,
    /// The server's store (the embedded store in a temporary directory).
    pub storage: std::sync::Arc<dyn cozyplane_storage::Storage>,
    task: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

impl Cozyplane {
    /// `GET path` on our server directly (not through the stand-in's proxy) with the stand-in's
    /// admin certificate: status and body, e.g. for `/readyz?verbose` and `/metrics`.
    pub async fn get(&self, path: &str) -> (u16, String) {
        let kc = kube::config::Kubeconfig::read_from(&self.admin_kubeconfig).expect("admin kubeconfig");
        let mut cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .expect("admin kubeconfig loads");
        cfg.cluster_url = self.url.parse().expect("server url");
        // Our server's certificate is self-signed (the proxy checks it against the caBundle).
        cfg.root_cert = None;
        cfg.accept_invalid_certs = true;
        let client = kube::Client::try_from(cfg).expect("client");
        let req = http::Request::get(path)
            .body(kube::client::Body::from(Vec::new()))
            .expect("request");
        let resp = client.send(req).await.expect("our server answers");
        let code = resp.status().as_u16();
        let body = http_body_util::BodyExt::collect(resp.into_body())
            .await
            .expect("body")
            .to_bytes();
        (code, String::from_utf8_lossy(&body).into_owned())
    }
}

impl Drop for Cozyplane {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl StandIn {
    /// Starts OUR server configured like a real deployment behind this stand-in: TokenReview and
    /// SubjectAccessReview against it (`--authentication-kubeconfig`, `--authorization-kubeconfig`),
    /// the request-header CA from `kube-system/extension-apiserver-authentication`, namespace
    /// lifecycle and quota through `--kubeconfig`, and `--ensure-apiservice` registering
    /// `v1alpha1.sdn.cozystack.io` for Service `cozy-system/cozyplane`, which this stand-in maps
    /// to the server's loopback port. The proxy presents the front-proxy certificate.
    pub async fn start_cozyplane(&self) -> Cozyplane {
        self.start_cozyplane_with(&[]).await
    }

    /// As [`start_cozyplane`](Self::start_cozyplane), with `extra` flags appended.
    pub async fn start_cozyplane_with(&self, extra: &[&str]) -> Cozyplane {
        self.start_cozyplane_as(&self.admin_kubeconfig(), extra).await
    }

    /// As [`start_cozyplane_with`](Self::start_cozyplane_with), with `kubeconfig` as the
    /// `--kubeconfig` of the controllers, admission and the APIService (e.g. a token bound to
    /// the chart's role) instead of the admin's.
    pub async fn start_cozyplane_as(&self, kubeconfig: &Path, extra: &[&str]) -> Cozyplane {
        let dir = tempfile::tempdir().expect("temp dir");
        let kc = self.admin_kubeconfig();
        let mut args = vec![
            "cozyplane-apiserver".to_string(),
            "--secure-port=0".into(),
            format!("--data-dir={}", dir.path().join("data").display()),
            format!("--authentication-kubeconfig={}", kc.display()),
            format!("--authorization-kubeconfig={}", kc.display()),
            format!("--kubeconfig={}", kubeconfig.display()),
            "--ensure-apiservice=cozy-system/cozyplane".into(),
            "--authentication-token-webhook-cache-ttl=1s".into(),
            "--authorization-webhook-cache-authorized-ttl=1s".into(),
            "--authorization-webhook-cache-unauthorized-ttl=1s".into(),
        ];
        args.extend(extra.iter().map(|a| (*a).to_string()));
        let opts = <cozyplane_apiserver::options::Options as clap::Parser>::parse_from(args);
        let storage = cozyplane_storage::open(opts.storage_config())
            .await
            .expect("the embedded store opens");
        let server = opts
            .complete_with(storage.clone())
            .await
            .expect("cozyplane starts against the stand-in");
        let addr = server.addr;
        self.map_service("cozy-system/cozyplane", Backend { addr, client: None });
        let task = tokio::spawn(async move {
            let _ = server.run().await;
        });
        Cozyplane {
            url: format!("https://127.0.0.1:{}", addr.port()),
            admin_kubeconfig: kc,
            storage,
            task,
            _dir: dir,
        }
    }
}
