//! The verified client identity is computed once per connection (issue 16): two requests over
//! one HTTP/2 connection verify the client certificate chain once, a second connection verifies
//! again, and a certificate no CA vouches for is refused on every request of its connection.
//!
//! The count is process-wide (`chain_verifications_total`), so this file holds one test and
//! the server (standalone: no client of its own presents a certificate) runs in-process.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use cozyplane_apiserver::options::Options;
use cozyplane_authz::chain_verifications_total;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// One TLS connection speaking HTTP/2 (ALPN `h2` only) with a client certificate.
async fn connect(addr: SocketAddr, server_ca: &str, cert: &str, key: &str) -> SendRequest<Empty<Bytes>> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(server_ca.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert.as_bytes())
        .collect::<Result<_, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
    let mut cfg =
        rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .unwrap();
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    send
}

/// GETs `path` on the connection; the status code.
async fn get(send: &mut SendRequest<Empty<Bytes>>, path: &str) -> u16 {
    send.ready().await.unwrap();
    let req = hyper::Request::get(format!("https://localhost{path}"))
        .body(Empty::new())
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    let code = resp.status().as_u16();
    resp.into_body().collect().await.unwrap();
    code
}

#[tokio::test]
async fn one_http2_connection_verifies_its_client_certificate_once() {
    let data = tempfile::tempdir().unwrap();
    let args = vec![
        "cozyplane-apiserver".to_string(),
        "--secure-port=0".into(),
        "--standalone".into(),
        format!("--data-dir={}", data.path().join("data").display()),
    ];
    let server = <Options as clap::Parser>::parse_from(args)
        .complete()
        .await
        .unwrap();
    let addr = server.addr;
    let pki = server.pki.clone().unwrap();
    let task = tokio::spawn(async move {
        let _ = server.run().await;
    });
    const VPCS: &str = "/apis/sdn.cozystack.io/v1alpha1/vpcs";

    // The admin certificate (CN admin, O system:masters): both requests are admitted, one
    // verification for the connection.
    let before = chain_verifications_total();
    let mut admin = connect(addr, &pki.ca, &pki.admin.cert, &pki.admin.key).await;
    assert_eq!(get(&mut admin, VPCS).await, 200);
    assert_eq!(get(&mut admin, VPCS).await, 200);
    assert_eq!(
        chain_verifications_total() - before,
        1,
        "two requests, one verification"
    );
    // A second connection verifies its own chain.
    let mut again = connect(addr, &pki.ca, &pki.admin.cert, &pki.admin.key).await;
    assert_eq!(get(&mut again, VPCS).await, 200);
    assert_eq!(get(&mut admin, VPCS).await, 200);
    assert_eq!(chain_verifications_total() - before, 2);

    // A certificate of an unknown CA: 401 on every request, verified (and refused) each time.
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let other = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
    let mut leaf = CertificateParams::new(Vec::<String>::new()).unwrap();
    leaf.distinguished_name.push(DnType::CommonName, "admin");
    leaf.distinguished_name
        .push(DnType::OrganizationName, "system:masters");
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let key = KeyPair::generate().unwrap();
    let cert = leaf.signed_by(&key, &other).unwrap();
    let mut mallory = connect(addr, &pki.ca, &cert.pem(), &key.serialize_pem()).await;
    let before = chain_verifications_total();
    assert_eq!(get(&mut mallory, VPCS).await, 401);
    assert_eq!(get(&mut mallory, VPCS).await, 401);
    assert_eq!(
        chain_verifications_total() - before,
        2,
        "a refusal is not remembered"
    );
    task.abort();
}
