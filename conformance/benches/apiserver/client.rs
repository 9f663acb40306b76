//! The bench's HTTPS/HTTP2 client: a few connections with one client certificate, requests
//! round-robin over them. The same client drives both servers, so neither gets a cheaper client.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::Value;

/// What a client needs to reach a server: the CA that signed its serving certificate and a
/// client certificate (PEM) the server maps to an administrator.
#[derive(Clone)]
pub(crate) struct Creds {
    pub(crate) ca: Vec<u8>,
    pub(crate) cert: Vec<u8>,
    pub(crate) key: Vec<u8>,
}

impl Creds {
    /// The credentials of a kubeconfig written by `cozyplane-apiserver --write-kubeconfig`.
    pub(crate) fn from_kubeconfig(path: &Path) -> Self {
        let kc = std::fs::read_to_string(path).expect("kubeconfig");
        let field = |key: &str| {
            let line = kc
                .lines()
                .find_map(|l| l.trim().strip_prefix(&format!("{key}: ")).map(str::to_string))
                .unwrap_or_else(|| panic!("{key} in kubeconfig"));
            base64::engine::general_purpose::STANDARD
                .decode(line.trim())
                .expect("base64 in kubeconfig")
        };
        Self {
            ca: field("certificate-authority-data"),
            cert: field("client-certificate-data"),
            key: field("client-key-data"),
        }
    }
}

/// A few HTTP/2 connections with the admin certificate; requests go round-robin.
pub(crate) struct Client {
    conns: Vec<SendRequest<Full<Bytes>>>,
    next: AtomicUsize,
    authority: String,
}

impl Client {
    /// `n` connections to `addr`; `Err` when the server does not accept them (yet).
    pub(crate) async fn connect(creds: &Creds, addr: SocketAddr, n: usize) -> Result<Self, String> {
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(&creds.ca) {
            roots.add(c.expect("CA PEM")).expect("CA");
        }
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&creds.cert)
            .map(|c| c.expect("cert PEM"))
            .collect();
        let key = PrivateKeyDer::from_pem_slice(&creds.key).expect("key PEM");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .expect("client cert");
        cfg.alpn_protocols = vec![b"h2".to_vec()];
        let connector = tokio_rustls::TlsConnector::from(Arc::new(cfg));
        let mut conns = Vec::new();
        for _ in 0..n {
            let tcp = tokio::net::TcpStream::connect(addr)
                .await
                .map_err(|e| format!("connect {addr}: {e}"))?;
            tcp.set_nodelay(true).ok();
            let tls = connector
                .connect(ServerName::IpAddress(addr.ip().into()), tcp)
                .await
                .map_err(|e| format!("TLS handshake with {addr}: {e}"))?;
            if tls.get_ref().1.alpn_protocol() != Some(&b"h2"[..]) {
                return Err(format!("{addr} did not negotiate HTTP/2"));
            }
            let (send, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
                .initial_stream_window_size(4 << 20)
                .initial_connection_window_size(16 << 20)
                .max_concurrent_reset_streams(10_000)
                .handshake(TokioIo::new(tls))
                .await
                .map_err(|e| format!("HTTP/2 handshake with {addr}: {e}"))?;
            tokio::spawn(conn);
            conns.push(send);
        }
        Ok(Self {
            conns,
            next: AtomicUsize::new(0),
            authority: addr.to_string(),
        })
    }

    pub(crate) fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> hyper::Request<Full<Bytes>> {
        let b = hyper::Request::builder()
            .method(method)
            .uri(format!("https://{}{path}", self.authority))
            .header("accept", "application/json");
        match body {
            Some(v) => b
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(v.to_string()))),
            None => b.body(Full::new(Bytes::new())),
        }
        .expect("request")
    }

    pub(crate) async fn send(
        &self,
        req: hyper::Request<Full<Bytes>>,
    ) -> hyper::Response<hyper::body::Incoming> {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.conns.len();
        let mut s = self.conns[i].clone();
        s.ready().await.expect("connection ready");
        s.send_request(req).await.expect("response")
    }

    pub(crate) async fn call(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Bytes) {
        let resp = self.send(self.request(method, path, body)).await;
        let code = resp.status().as_u16();
        let bytes = resp.into_body().collect().await.expect("body").to_bytes();
        (code, bytes)
    }
}
