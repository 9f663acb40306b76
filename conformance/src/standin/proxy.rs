//! The aggregation proxy: requests for an APIService's group go to its backend over TLS with the
//! front-proxy client certificate and `X-Remote-*` headers; responses stream back unbuffered.

use std::net::SocketAddr;
use std::sync::Arc;

use super::pki::Pem;
use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, Request, Response, header};
use base64::Engine;
use cozyplane_apiserver::errors::ApiError;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::Value;

use super::rbac::Identity;

/// Where a Service of an APIService is reached in a test, and as whom.
#[derive(Clone, Debug)]
pub struct Backend {
    /// Loopback address of the backend (instead of the Service's cluster IP).
    pub addr: SocketAddr,
    /// A client certificate to present instead of the front-proxy one (for a backend in
    /// standalone mode, which trusts only its own CA). `X-Remote-*` headers are still sent.
    pub client: Option<Pem>,
}

fn unavailable(msg: String) -> ApiError {
    ApiError::unavailable(msg)
}

const HOP: &[&str] = &[
    "authorization",
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "impersonate-user",
    "impersonate-group",
    "impersonate-uid",
];

/// Percent-encodes an extra key for `X-Remote-Extra-<key>`.
fn encode_key(k: &str) -> String {
    let mut out = String::new();
    for b in k.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The TLS client configuration for `apiservice` as `client`.
fn client_config(apiservice: &Value, client: &Pem) -> Result<rustls::ClientConfig, ApiError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let bundle = apiservice
        .pointer("/spec/caBundle")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let pem = base64::engine::general_purpose::STANDARD
        .decode(bundle)
        .map_err(|e| unavailable(format!("bad caBundle: {e}")))?;
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(&pem) {
        let c = c.map_err(|e| unavailable(format!("bad caBundle: {e}")))?;
        roots
            .add(c)
            .map_err(|e| unavailable(format!("bad caBundle: {e}")))?;
    }
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(client.cert.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(ApiError::internal)?;
    let key = PrivateKeyDer::from_pem_slice(client.key.as_bytes()).map_err(ApiError::internal)?;
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(ApiError::internal)?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .map_err(ApiError::internal)?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(cfg)
}

/// Forwards `req` (path and query kept) to `backend` for `apiservice` as `who`.
pub async fn forward(
    apiservice: &Value,
    backend: &Backend,
    front_proxy: &Pem,
    who: &Identity,
    req: Request<Body>,
) -> Result<Response<Body>, ApiError> {
    let cfg = client_config(apiservice, backend.client.as_ref().unwrap_or(front_proxy))?;
    let tcp = tokio::net::TcpStream::connect(backend.addr)
        .await
        .map_err(|e| unavailable(format!("error trying to reach service: {e}")))?;
    let _ = tcp.set_nodelay(true);
    let name = ServerName::IpAddress(backend.addr.ip().into());
    let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(name, tcp)
        .await
        .map_err(|e| unavailable(format!("error trying to reach service: {e}")))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| unavailable(format!("error trying to reach service: {e}")))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let (mut parts, body) = req.into_parts();
    let remove: Vec<HeaderName> = parts
        .headers
        .keys()
        .filter(|k| {
            HOP.contains(&k.as_str())
                || k.as_str().starts_with("x-remote-")
                || k.as_str().starts_with("impersonate-extra-")
        })
        .cloned()
        .collect();
    for k in remove {
        parts.headers.remove(k);
    }
    let h = &mut parts.headers;
    let hv = |s: &str| {
        HeaderValue::from_str(s).map_err(|_| ApiError::bad_request("user info is not a valid header"))
    };
    h.insert(header::HOST, hv(&backend.addr.to_string())?);
    h.insert("x-remote-user", hv(&who.name)?);
    if !who.uid.is_empty() {
        h.insert("x-remote-uid", hv(&who.uid)?);
    }
    for g in &who.groups {
        h.append("x-remote-group", hv(g)?);
    }
    for (k, vs) in &who.extra {
        let name = HeaderName::from_bytes(format!("x-remote-extra-{}", encode_key(k)).as_bytes())
            .map_err(|_| ApiError::bad_request("extra key is not a valid header"))?;
        for v in vs {
            h.append(name.clone(), hv(v)?);
        }
    }
    let path = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    parts.uri = path.parse().map_err(ApiError::internal)?;
    parts.version = axum::http::Version::HTTP_11;
    let resp = sender
        .send_request(Request::from_parts(parts, body))
        .await
        .map_err(|e| unavailable(format!("error trying to reach service: {e}")))?;
    Ok(resp.map(Body::new))
}

/// A body-less request for the stand-in's own controllers.
pub fn internal_request(method: &str, path: &str, accept: &str) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(path)
        .header(header::ACCEPT, accept)
        .body(Body::empty())
        .expect("a static request builds")
}

/// Reads a whole JSON response (for small internal requests).
pub async fn read_json(resp: Response<Body>) -> Result<(u16, Value), ApiError> {
    let code = resp.status().as_u16();
    let bytes = axum::body::to_bytes(resp.into_body(), 64 * 1024 * 1024)
        .await
        .map_err(ApiError::internal)?;
    Ok((code, serde_json::from_slice(&bytes).unwrap_or(Value::Null)))
}
