//! Command-line options and server start-up: `Options` (flags) → [`Options::complete`] →
//! [`Server`] (bound, ready to serve).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use cozyplane_storage::{Config, Storage, embedded, etcd};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

use crate::registry;
use crate::server::authn::{self, Peer};
use crate::server::router::{AppState, router};
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
}

/// A bound server, ready to [`run`](Server::run).
pub struct Server {
    listener: TcpListener,
    acceptor: TlsAcceptor,
    state: Arc<AppState>,
    /// The address it listens on.
    pub addr: SocketAddr,
    /// The standalone PKI, if minted.
    pub pki: Option<tls::Pki>,
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
        let pki = if self.standalone {
            Some(tls::Pki::mint()?)
        } else {
            None
        };
        let serving = match (&self.tls_cert_file, &self.tls_private_key_file, &pki) {
            (Some(c), Some(k), _) => tls::read(c, k)?,
            (_, _, Some(p)) => p.serving.clone(),
            _ => tls::self_signed()?,
        };
        let cfg = tls::server_config(&serving, pki.as_ref().map(|p| p.ca.as_str()))?;
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
        let kinds = registry::kinds(&storage);
        let state = AppState::new(kinds, storage, pki.is_some());
        Ok(Server {
            listener,
            acceptor: TlsAcceptor::from(Arc::new(cfg)),
            state,
            addr,
            pki,
        })
    }
}

impl Server {
    /// Serves until the task is dropped or the listener fails.
    pub async fn run(self) -> Result<(), Error> {
        let app = router(self.state.clone());
        loop {
            let (tcp, peer) = self.listener.accept().await?;
            let acceptor = self.acceptor.clone();
            let app = app.clone();
            tokio::spawn(async move {
                let tls = match acceptor.accept(tcp).await {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::debug!(%peer, error = %e, "TLS handshake failed");
                        return;
                    }
                };
                let peer_user = Peer(authn::user_of(tls.get_ref().1.peer_certificates()));
                let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let mut req = req.map(axum::body::Body::new);
                    req.extensions_mut().insert(peer_user.clone());
                    app.clone().oneshot(req)
                });
                let mut b = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                // Watches are long-lived streams; the aggregator multiplexes many per connection.
                b.http2().max_concurrent_streams(1000);
                if let Err(e) = b.serve_connection(TokioIo::new(tls), svc).await {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                }
            });
        }
    }
}
