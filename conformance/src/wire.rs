//! One HTTPS connection to a test server with the protocol chosen by ALPN (`http/1.1` or `h2`),
//! for tests of the connection itself: several requests on the same connection, bodies sent at
//! the test's pace, raw HTTP/1.1 bytes. The admin credentials come from the server's kubeconfig.

use std::convert::Infallible;
use std::path::Path;
use std::sync::Arc;

use base64::Engine;
use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

/// A request body as the connections here take it.
pub type Body = BoxBody<Bytes, Infallible>;

/// A body of `bytes`, with its length announced.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed()
}

/// A body whose chunks the test sends through the returned sender, without a length (chunked
/// over HTTP/1.1); dropping the sender ends it.
pub fn streamed() -> (tokio::sync::mpsc::Sender<Bytes>, Body) {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Bytes>(4);
    let frames = futures::stream::poll_fn(move |cx| rx.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b)))));
    (tx, StreamBody::new(frames).boxed())
}

/// The protocol to negotiate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    /// `http/1.1`.
    H1,
    /// `h2`.
    H2,
}

/// Server address and admin credentials, read from a kubeconfig written by `--standalone`.
#[derive(Clone)]
pub struct Target {
    /// `127.0.0.1:<port>`.
    pub addr: String,
    tls: Arc<rustls::ClientConfig>,
    alpn_h2: Arc<rustls::ClientConfig>,
}

fn field(kubeconfig: &str, key: &str) -> String {
    kubeconfig
        .lines()
        .find_map(|l| l.trim().strip_prefix(key))
        .map(|v| v.trim().to_string())
        .unwrap_or_else(|| panic!("kubeconfig has no {key}"))
}

fn pem(kubeconfig: &str, key: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(field(kubeconfig, key))
        .expect("base64 in the kubeconfig")
}

impl Target {
    /// The server and admin certificate of `kubeconfig` (the format `Pki::kubeconfig` writes).
    pub fn from_kubeconfig(kubeconfig: &Path) -> Self {
        let kc = std::fs::read_to_string(kubeconfig).expect("kubeconfig readable");
        let addr = field(&kc, "server:").trim_start_matches("https://").to_string();
        let ca = pem(&kc, "certificate-authority-data:");
        let cert = pem(&kc, "client-certificate-data:");
        let key = pem(&kc, "client-key-data:");
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(&ca) {
            roots.add(c.expect("CA PEM")).expect("CA certificate");
        }
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert)
            .collect::<Result<_, _>>()
            .expect("client certificate PEM");
        let key = PrivateKeyDer::from_pem_slice(&key).expect("client key PEM");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = |alpn: &[u8]| {
            let mut c = rustls::ClientConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()
                .expect("TLS versions")
                .with_root_certificates(roots.clone())
                .with_client_auth_cert(chain.clone(), key.clone_key())
                .expect("client certificate");
            c.alpn_protocols = vec![alpn.to_vec()];
            Arc::new(c)
        };
        Self {
            addr,
            tls: config(b"http/1.1"),
            alpn_h2: config(b"h2"),
        }
    }

    /// A TLS connection that negotiated `proto`.
    pub async fn tls(&self, proto: Proto) -> std::io::Result<TlsStream<TcpStream>> {
        let tcp = TcpStream::connect(&self.addr).await?;
        let cfg = match proto {
            Proto::H1 => self.tls.clone(),
            Proto::H2 => self.alpn_h2.clone(),
        };
        let s = tokio_rustls::TlsConnector::from(cfg)
            .connect(ServerName::try_from("127.0.0.1").expect("name"), tcp)
            .await?;
        let want: &[u8] = match proto {
            Proto::H1 => b"http/1.1",
            Proto::H2 => b"h2",
        };
        assert_eq!(s.get_ref().1.alpn_protocol(), Some(want), "ALPN");
        Ok(s)
    }

    /// An HTTP connection speaking `proto`; its driver runs in a task.
    pub async fn connect(&self, proto: Proto) -> Conn {
        let io = TokioIo::new(self.tls(proto).await.expect("TLS connection"));
        match proto {
            Proto::H1 => {
                let (send, conn) = hyper::client::conn::http1::handshake(io)
                    .await
                    .expect("handshake");
                let driver = tokio::spawn(async move { conn.await.map_err(|e| e.to_string()) });
                Conn::H1(send, driver)
            }
            Proto::H2 => {
                let (send, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
                    .max_header_list_size(4 << 20)
                    .handshake(io)
                    .await
                    .expect("handshake");
                let driver = tokio::spawn(async move { conn.await.map_err(|e| e.to_string()) });
                Conn::H2(send, driver)
            }
        }
    }
}

/// One HTTP connection; requests go over it and nothing else.
pub enum Conn {
    /// HTTP/1.1.
    H1(
        hyper::client::conn::http1::SendRequest<Body>,
        tokio::task::JoinHandle<Result<(), String>>,
    ),
    /// HTTP/2.
    H2(
        hyper::client::conn::http2::SendRequest<Body>,
        tokio::task::JoinHandle<Result<(), String>>,
    ),
}

/// A response: status, headers and the body as text.
#[derive(Debug)]
pub struct Answer {
    /// Status code.
    pub code: u16,
    /// Headers.
    pub headers: http::HeaderMap,
    /// Body text.
    pub body: String,
}

impl Answer {
    /// The body as JSON (a `Status`, say); panics with the body otherwise.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

impl Conn {
    /// Sends a request, without reading the response body.
    pub async fn start(
        &mut self,
        req: http::Request<Body>,
    ) -> Result<http::Response<hyper::body::Incoming>, hyper::Error> {
        match self {
            Conn::H1(s, _) => {
                // HTTP/1.1 in origin form, the authority in `Host`.
                let (mut parts, body) = req.into_parts();
                if let Some(a) = parts.uri.authority() {
                    let host = http::HeaderValue::from_str(a.as_str()).expect("authority is a header value");
                    parts.headers.entry(http::header::HOST).or_insert(host);
                }
                if let Some(pq) = parts.uri.path_and_query().cloned() {
                    parts.uri = pq.into();
                }
                s.ready().await?;
                s.send_request(http::Request::from_parts(parts, body)).await
            }
            Conn::H2(s, _) => {
                s.ready().await?;
                s.send_request(req).await
            }
        }
    }

    /// Sends a request and reads the whole response.
    pub async fn send(&mut self, req: http::Request<Body>) -> Result<Answer, hyper::Error> {
        let resp = self.start(req).await?;
        read(resp).await
    }

    /// Whether the connection has ended (its driver finished).
    pub fn closed(&self) -> bool {
        match self {
            Conn::H1(_, d) | Conn::H2(_, d) => d.is_finished(),
        }
    }
}

/// Reads a whole response.
pub async fn read(resp: http::Response<hyper::body::Incoming>) -> Result<Answer, hyper::Error> {
    let code = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await?.to_bytes();
    Ok(Answer {
        code,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

/// A request to `path` (`Host` is set for HTTP/1.1; HTTP/2 takes the authority from the URI).
pub fn request(method: &str, path: &str, headers: &[(&str, &str)], body: Body) -> http::Request<Body> {
    let mut b = http::Request::builder()
        .method(method)
        .uri(format!("https://127.0.0.1{path}"));
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(body).expect("request builds")
}

/// HTTP/1.1 written and read by hand over one TLS connection, for bodies sent at the test's
/// pace and request targets longer than `http::Uri` holds. Responses must carry a
/// `Content-Length` (every non-streaming answer of the server does).
pub struct RawH1 {
    tls: TlsStream<TcpStream>,
    buf: Vec<u8>,
}

impl RawH1 {
    /// A new connection that negotiated `http/1.1`.
    pub async fn connect(t: &Target) -> Self {
        Self {
            tls: t.tls(Proto::H1).await.expect("TLS connection"),
            buf: Vec::new(),
        }
    }

    /// Writes a request head; `body_len` becomes `Content-Length`, `None` means no body.
    pub async fn head(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body_len: Option<usize>,
    ) -> std::io::Result<()> {
        use std::fmt::Write as _;
        let mut h = format!("{method} {path} HTTP/1.1\r\nhost: 127.0.0.1\r\n");
        for (k, v) in headers {
            let _ = write!(h, "{k}: {v}\r\n");
        }
        if let Some(n) = body_len {
            let _ = write!(h, "content-length: {n}\r\n");
        }
        h.push_str("\r\n");
        self.write(h.as_bytes()).await
    }

    /// Writes raw bytes (a body, or a part of one).
    pub async fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        use tokio::io::AsyncWriteExt;
        self.tls.write_all(bytes).await?;
        self.tls.flush().await
    }

    /// A whole request with a body.
    pub async fn send(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> std::io::Result<Answer> {
        self.head(method, path, headers, Some(body.len())).await?;
        self.write(body).await?;
        self.response().await
    }

    /// Reads one response.
    pub async fn response(&mut self) -> std::io::Result<Answer> {
        let eof = || std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "connection closed");
        let end = loop {
            if let Some(i) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            if self.fill().await? == 0 {
                return Err(eof());
            }
        };
        let head = String::from_utf8_lossy(&self.buf[..end]).into_owned();
        let mut lines = head.split("\r\n");
        let status = lines.next().unwrap_or_default();
        let code = status
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("status line {status:?}"));
        let mut headers = http::HeaderMap::new();
        for l in lines.filter(|l| !l.is_empty()) {
            let (k, v) = l.split_once(':').unwrap_or_else(|| panic!("header line {l:?}"));
            headers.append(
                http::HeaderName::from_bytes(k.trim().as_bytes()).expect("header name"),
                http::HeaderValue::from_str(v.trim()).expect("header value"),
            );
        }
        let len: usize = headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse().ok())
            .unwrap_or(0);
        while self.buf.len() < end + len {
            if self.fill().await? == 0 {
                return Err(eof());
            }
        }
        let body = String::from_utf8_lossy(&self.buf[end..end + len]).into_owned();
        self.buf.drain(..end + len);
        Ok(Answer { code, headers, body })
    }

    async fn fill(&mut self) -> std::io::Result<usize> {
        use tokio::io::AsyncReadExt;
        let mut chunk = [0u8; 16 * 1024];
        let n = self.tls.read(&mut chunk).await?;
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(n)
    }
}
