//! Command-line options and server start-up: `Options` (flags) → [`Options::complete`] →
//! [`Server`] (bound, ready to serve).
//!
//! Request path: TLS (client certificate requested, not required) → `cozyplane-authz`
//! authentication (front proxy, client certificate, TokenReview; anonymous only on health paths)
//! → authorization (SubjectAccessReview; `system:masters` and health paths short-circuit) →
//! admission context → router. `--standalone` replaces the delegated parts: the minted CA (plus
//! `--client-ca-file`) authenticates, and everything authenticated is allowed unless
//! `--authorization-kubeconfig` is given. A server with no kube-apiserver connection at all
//! (standalone without a kubeconfig) serves core `namespaces` itself (`registry::namespace`):
//! it creates the initial ones, admits creates against them and runs their controller.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use cozyplane_authz::{
    AlwaysAllow, AlwaysAllowPaths, AuthOptions, AuthenticationLayer, Authenticator, AuthorizationLayer,
    Authorizer, CaBundle, DelegatingAuthorizer, DynamicCertConfig, SubjectAccessReviewAuthorizer,
    TokenReviewAuthenticator,
};
use cozyplane_storage::{Config, Storage, embedded, etcd};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tower::ServiceBuilder;

use crate::admission::{self, Admission};
use crate::registry;
use crate::server::apiservice::{self, CaSource, Registration, ServiceRef};
use crate::server::router::{AppState, router};
use crate::server::serve::{Lifecycle, serve};
use crate::server::tls;

/// Command-line options of `cozyplane-apiserver`.
#[derive(Parser, Debug, Clone)]
#[command(name = "cozyplane-apiserver", version, about)]
pub struct Options {
    /// etcd client URLs, comma-separated. Without it the embedded store is used.
    #[arg(long, value_delimiter = ',')]
    pub etcd_servers: Vec<String>,
    /// CA bundle for etcd's serving certificate.
    #[arg(long)]
    pub etcd_cafile: Option<PathBuf>,
    /// Client certificate for etcd.
    #[arg(long)]
    pub etcd_certfile: Option<PathBuf>,
    /// Key of the etcd client certificate.
    #[arg(long)]
    pub etcd_keyfile: Option<PathBuf>,
    /// Learn etcd's members from etcd (its member list, re-read every 30 s), with
    /// `--etcd-servers` only the seed. `false` when the members' advertised client URLs cannot
    /// be reached from the server: then exactly `--etcd-servers` are used.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub etcd_discover_members: bool,
    /// Data directory of the embedded store.
    #[arg(long, default_value = "/var/lib/cozyplane")]
    pub data_dir: PathBuf,
    /// HTTPS port (0 picks a free one).
    #[arg(long, default_value_t = 8443)]
    pub secure_port: u16,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub bind_address: std::net::IpAddr,
    /// Serving certificate (PEM); a self-signed one is minted without it.
    #[arg(long, requires = "tls_private_key_file")]
    pub tls_cert_file: Option<PathBuf>,
    /// Key of the serving certificate (PEM).
    #[arg(long, requires = "tls_cert_file")]
    pub tls_private_key_file: Option<PathBuf>,
    /// Mint a CA and an admin client certificate; trust client certificates of that CA.
    #[arg(long)]
    pub standalone: bool,
    /// With --standalone: write a kubeconfig for the admin certificate here.
    #[arg(long, requires = "standalone")]
    pub write_kubeconfig: Option<PathBuf>,
    /// Kubeconfig of the kube-apiserver for namespace lifecycle, ResourceQuota and the
    /// APIService (default: --authentication-kubeconfig, else in-cluster; in standalone mode
    /// without either, namespace lifecycle and quota are off).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Register (create or patch) the APIService v1alpha1.sdn.cozystack.io for this Service,
    /// `<namespace>/<name>`, at start-up.
    #[arg(long, value_name = "NAMESPACE/SERVICE")]
    pub ensure_apiservice: Option<ServiceRef>,
    /// Where the APIService's caBundle comes from: `serving-cert`, `file:<path>` or
    /// `cert-manager:<namespace>/<secret>` (cert-manager's CA injector fills it).
    #[arg(long, default_value = "serving-cert", value_name = "SOURCE")]
    pub apiservice_ca_bundle_from: CaSource,
    /// spec.groupPriorityMinimum of the APIService.
    #[arg(long, default_value_t = 1000)]
    pub apiservice_group_priority_minimum: i32,
    /// spec.versionPriority of the APIService.
    #[arg(long, default_value_t = 15)]
    pub apiservice_version_priority: i32,
    /// The Service port of the APIService.
    #[arg(long, default_value_t = 443)]
    pub apiservice_service_port: i32,
    /// How often quota usage of our resources is recounted for every namespace.
    #[arg(long, default_value = "5m", value_parser = cozyplane_authz::parse_duration)]
    pub quota_resync_period: Duration,
    /// Port GC: how old a Port on a node never seen must be before it is deleted, and how long
    /// a persistent Port's workload must be gone before the Port is released (see
    /// `controllers::kube_loops`; needs a kube-apiserver connection).
    #[arg(long, default_value = "30s", value_parser = cozyplane_authz::parse_duration)]
    pub port_gc_grace: Duration,
    /// Largest request body accepted, in bytes; larger requests get 413 RequestEntityTooLarge
    /// (kube-apiserver's limit is 3 MiB).
    #[arg(
        long,
        default_value_t = crate::server::router::MAX_BODY as u64,
        value_name = "BYTES",
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub max_request_body_bytes: u64,
    /// After SIGTERM or SIGINT: how long the server keeps accepting and serving while
    /// `/readyz` fails, so that Endpoints and load balancers stop sending it new work (as
    /// kube-apiserver's flag of this name).
    #[arg(long, default_value = "0s", value_parser = cozyplane_authz::parse_duration)]
    pub shutdown_delay_duration: Duration,
    /// After the delay: how long requests in flight may take to finish once the listener is
    /// closed; watches end at once. The default leaves room in a pod's default 30 s
    /// terminationGracePeriodSeconds.
    #[arg(long, default_value = "25s", value_parser = cozyplane_authz::parse_duration)]
    pub shutdown_grace_period: Duration,
    /// Delegated authentication and authorization.
    #[command(flatten)]
    pub auth: AuthOptions,
}

/// Start-up failures.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The store did not open.
    #[error("opening storage")]
    Storage(#[from] cozyplane_storage::Error),
    /// Certificates could not be minted.
    #[error("minting certificates")]
    Mint(#[from] rcgen::Error),
    /// TLS configuration failed.
    #[error("configuring TLS")]
    Tls(#[from] tls::Error),
    /// I/O (listen, files).
    #[error("I/O")]
    Io(#[from] std::io::Error),
    /// Delegated authentication or authorization could not be set up.
    #[error("configuring authentication/authorization")]
    Auth(#[from] cozyplane_authz::Error),
    /// The initial namespaces could not be created.
    #[error("creating the initial namespaces: {0}")]
    Namespaces(String),
    /// The kube-apiserver connection could not be configured.
    #[error("configuring the kube-apiserver connection: {0}")]
    Kube(String),
}

/// A bound server, ready to [`run`](Server::run).
pub struct Server {
    listener: TcpListener,
    acceptor: TlsAcceptor,
    state: Arc<AppState>,
    authn: AuthenticationLayer,
    authz: AuthorizationLayer,
    /// Admission (virtual verbs, namespace lifecycle, quota).
    pub admission: Arc<Admission>,
    /// The address it listens on.
    pub addr: SocketAddr,
    /// The standalone PKI, if minted.
    pub pki: Option<tls::Pki>,
    /// The kube-backed control loops' configuration (with a kube connection).
    controllers_kube: Option<crate::controllers::kube_loops::KubeConfig>,
    /// The server's own namespaces (standalone without a kube connection).
    namespaces: Option<Arc<registry::Store<registry::namespace::Strategy>>>,
    lifecycle: Lifecycle,
}

impl Options {
    /// The storage configuration.
    pub fn storage_config(&self) -> Config {
        if self.etcd_servers.is_empty() {
            Config::Embedded(embedded::Config::new(&self.data_dir))
        } else {
            let mut c = etcd::Config::new(self.etcd_servers.clone());
            c.ca_file = self.etcd_cafile.clone();
            c.cert_file = self.etcd_certfile.clone();
            c.key_file = self.etcd_keyfile.clone();
            c.discover_members = self.etcd_discover_members;
            c.request_timeout = Duration::from_secs(10);
            Config::Etcd(c)
        }
    }

    /// Opens storage, prepares TLS and binds the port.
    pub async fn complete(self) -> Result<Server, Error> {
        let storage = cozyplane_storage::open(self.storage_config()).await?;
        self.complete_with(storage).await
    }

    /// As [`complete`](Self::complete), on an already opened store.
    pub async fn complete_with(self, storage: Arc<dyn Storage>) -> Result<Server, Error> {
        let service_names = self
            .ensure_apiservice
            .as_ref()
            .map(ServiceRef::dns_names)
            .unwrap_or_default();
        let pki = if self.standalone {
            Some(tls::Pki::mint_for(&service_names)?)
        } else {
            None
        };
        let serving = match (&self.tls_cert_file, &self.tls_private_key_file, &pki) {
            (Some(c), Some(k), _) => tls::read(c, k)?,
            (_, _, Some(p)) => p.serving.clone(),
            _ => tls::self_signed(&service_names)?,
        };
        let cfg = tls::server_config(&serving)?;
        let kinds = registry::kinds(&storage);
        let max_body = usize::try_from(self.max_request_body_bytes).unwrap_or(usize::MAX);
        let kube = self.kube_client().await?;
        // Without a kube-apiserver the server keeps its own namespaces (standalone).
        let namespaces = if kube.is_none() {
            let store = Arc::new(registry::Store::new(
                registry::namespace::Strategy,
                storage.clone(),
            ));
            registry::namespace::create_initial(&*store)
                .await
                .map_err(|e| Error::Namespaces(e.message))?;
            Some(store)
        } else {
            None
        };
        let core: Vec<Arc<dyn registry::Resource>> = namespaces
            .iter()
            .map(|n| n.clone() as Arc<dyn registry::Resource>)
            .collect();
        let state = AppState::with_core(kinds.clone(), core, storage, pki.is_some(), max_body);
        let (authn, authz) = self.auth_layers(pki.as_ref(), &state.informers).await?;
        let listener = TcpListener::bind(SocketAddr::new(self.bind_address, self.secure_port)).await?;
        let addr = listener.local_addr()?;
        if let (Some(p), Some(path)) = (&pki, &self.write_kubeconfig) {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)?;
            }
            let host = if addr.ip().is_unspecified() {
                "127.0.0.1".to_string()
            } else {
                addr.ip().to_string()
            };
            std::fs::write(path, p.kubeconfig(&format!("https://{host}:{}", addr.port())))?;
        }
        let kube = kube.map(|c| c.connect(state.informers.clone()));
        if let Some(k) = &kube {
            // Pod traces read the default network's objects with it.
            let _ = state.kube.set(k.client.clone());
        }
        let mut admission = Admission::new(authz.authorizer());
        if let Some(k) = &kube {
            admission = admission.with_kube(k);
            admission::quota::Reconciler::new(k.clone(), kinds.clone()).start(self.quota_resync_period);
        } else if let Some(store) = &namespaces {
            tracing::info!("no kube-apiserver connection: serving namespaces here; quota admission is off");
            admission = admission.with_local_namespaces(store.clone(), state.core.first().cloned());
        }
        if let Some(service) = &self.ensure_apiservice {
            let Some(k) = &kube else {
                return Err(Error::Kube(
                    "--ensure-apiservice needs a kube-apiserver connection".into(),
                ));
            };
            let registration = Registration {
                service: service.clone(),
                port: self.apiservice_service_port,
                group_priority_minimum: self.apiservice_group_priority_minimum,
                version_priority: self.apiservice_version_priority,
                ca: self.apiservice_ca_bundle_from.clone(),
            };
            let ca = pki
                .as_ref()
                .map_or_else(|| serving.cert.clone(), |p| p.ca.clone());
            tokio::spawn(ensure_apiservice(k.client.clone(), registration, ca));
        }
        let controllers_kube = kube.map(|kube| crate::controllers::kube_loops::KubeConfig {
            kube,
            port_gc_grace: self.port_gc_grace,
        });
        Ok(Server {
            listener,
            acceptor: TlsAcceptor::from(Arc::new(cfg)),
            state,
            authn,
            authz,
            admission: Arc::new(admission),
            addr,
            pki,
            controllers_kube,
            namespaces,
            lifecycle: Lifecycle {
                delay: self.shutdown_delay_duration,
                grace: self.shutdown_grace_period,
            },
        })
    }

    /// The authentication and authorization layers; see the module docs.
    async fn auth_layers(
        &self,
        pki: Option<&tls::Pki>,
        informers: &Arc<crate::informer::Informers>,
    ) -> Result<(AuthenticationLayer, AuthorizationLayer), Error> {
        let Some(pki) = pki else {
            let health: Arc<dyn cozyplane_authz::WatchHealth> = informers.clone();
            return Ok(self.auth.build_reporting(Some(health)).await?);
        };
        let a = &self.auth;
        let mut certs = a.cert_config_from_flags()?;
        let mut cas: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pki.ca.as_bytes())
            .collect::<Result<_, _>>()
            .map_err(tls::Error::from)?;
        if let Some(extra) = &certs.client_ca {
            cas.extend(extra.certificates().iter().cloned());
        }
        certs.client_ca = Some(CaBundle::from_der(cas)?);
        let paths = AlwaysAllowPaths::new(a.authorization_always_allow_paths.iter().cloned());
        let tokens = match &a.authentication_kubeconfig {
            Some(p) => Some(
                TokenReviewAuthenticator::new(kube_client(Some(p)).await?)
                    .authenticated_ttl(a.authentication_token_webhook_cache_ttl)
                    .unauthenticated_ttl(a.authentication_token_webhook_cache_ttl),
            ),
            None => None,
        };
        let authn = AuthenticationLayer::new(Authenticator::new(
            DynamicCertConfig::new(certs),
            tokens,
            paths.clone(),
        ));
        let inner: Arc<dyn Authorizer> = match &a.authorization_kubeconfig {
            Some(p) => Arc::new(
                SubjectAccessReviewAuthorizer::new(kube_client(Some(p)).await?)
                    .authorized_ttl(a.authorization_webhook_cache_authorized_ttl)
                    .unauthorized_ttl(a.authorization_webhook_cache_unauthorized_ttl),
            ),
            None => Arc::new(AlwaysAllow),
        };
        let authz = AuthorizationLayer::new(Arc::new(DelegatingAuthorizer::new(paths, inner)));
        Ok((authn, authz))
    }

    /// The kube-apiserver connection for admission, the controllers and the APIService, if any.
    async fn kube_client(&self) -> Result<Option<KubeClients>, Error> {
        match self
            .kubeconfig
            .as_ref()
            .or(self.auth.authentication_kubeconfig.as_ref())
        {
            Some(p) => Ok(Some(kube_clients(Some(p)).await?)),
            None if self.standalone => Ok(None),
            None => Ok(Some(kube_clients(None).await?)),
        }
    }
}

/// The clients of one kube-apiserver identity: requests with a read timeout, watches without
/// (a read timeout would end every quiet watch after that long; see [`crate::informer`]).
#[derive(Clone)]
pub struct KubeClients {
    /// For plain requests.
    pub requests: kube::Client,
    /// For watches.
    pub watches: kube::Client,
}

impl KubeClients {
    /// The connection the server's parts share, recording informer state in `informers`.
    pub fn connect(self, informers: Arc<crate::informer::Informers>) -> crate::informer::KubeConnection {
        crate::informer::KubeConnection {
            client: self.requests,
            watch_client: self.watches,
            informers,
        }
    }
}

/// How long a plain request to the kube-apiserver may take to connect, and to answer.
pub const KUBE_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// A kube client for plain requests (10 s read timeout) from a kubeconfig file, or the
/// in-cluster configuration.
pub async fn kube_client(kubeconfig: Option<&PathBuf>) -> Result<kube::Client, Error> {
    Ok(kube_clients(kubeconfig).await?.requests)
}

/// Both clients of [`KubeClients`] from a kubeconfig file, or the in-cluster configuration.
pub async fn kube_clients(kubeconfig: Option<&PathBuf>) -> Result<KubeClients, Error> {
    use kube::config::{KubeConfigOptions, Kubeconfig};
    let err = |what: &str, e: &dyn std::fmt::Display| Error::Kube(format!("{what}: {e}"));
    let mut config = match kubeconfig {
        Some(path) => {
            let file = Kubeconfig::read_from(path).map_err(|e| err(&path.display().to_string(), &e))?;
            kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
                .await
                .map_err(|e| err(&path.display().to_string(), &e))?
        }
        None => kube::Config::incluster().map_err(|e| err("in-cluster configuration", &e))?,
    };
    config.connect_timeout = Some(KUBE_REQUEST_TIMEOUT);
    let watches = kube::Client::try_from(config.clone()).map_err(|e| err("client", &e))?;
    config.read_timeout = Some(KUBE_REQUEST_TIMEOUT);
    // A pooled connection's idle time must not count against the next request's timeout.
    config.reset_reader_on_write = true;
    let requests = kube::Client::try_from(config).map_err(|e| err("client", &e))?;
    Ok(KubeClients { requests, watches })
}

/// Ensures the APIService, retrying until it succeeds.
async fn ensure_apiservice(client: kube::Client, r: Registration, ca: String) {
    let mut delay = Duration::from_secs(1);
    loop {
        match apiservice::ensure(client.clone(), &r, &ca).await {
            Ok(created) => {
                tracing::info!(name = %apiservice::name(), created, "APIService ensured");
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, source = ?std::error::Error::source(&e), "ensuring the APIService; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(30));
            }
        }
    }
}

impl Server {
    /// Serves until the task is dropped.
    pub async fn run(self) -> Result<(), Error> {
        self.run_until(std::future::pending()).await
    }

    /// Serves until `signal` resolves, then shuts down in order (`server/serve.rs`): `/readyz`
    /// fails for `--shutdown-delay-duration`, the listener closes, watches end and requests in
    /// flight get `--shutdown-grace-period` to finish.
    pub async fn run_until(self, signal: impl std::future::Future<Output = ()>) -> Result<(), Error> {
        // Control loops (issue 5): leader-elected over the store; aborted with the server.
        let controllers = crate::controllers::start(
            self.state.kinds.clone(),
            self.state.caches.clone(),
            self.state.storage.clone(),
            self.controllers_kube.clone(),
        );
        let _stop_controllers = AbortOnDrop(controllers);
        let _stop_namespaces = match (&self.namespaces, self.state.core.first()) {
            (Some(store), Some(cache)) => Some(AbortOnDrop(registry::namespace::controller::start(
                store.clone(),
                cache.clone(),
                self.state.kinds.clone(),
            ))),
            _ => None,
        };
        let app = router(self.state.clone()).layer(axum::middleware::from_fn_with_state(
            self.admission.clone(),
            admission::scope,
        ));
        let app = ServiceBuilder::new()
            .layer(self.authn.clone())
            .layer(self.authz.clone())
            .service(app);
        serve(
            self.listener,
            self.acceptor,
            app,
            self.state,
            self.lifecycle,
            signal,
        )
        .await;
        Ok(())
    }
}

/// Aborts a task when dropped (the control loops end with the server).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
