//! TLS: serving certificates (given, or minted with rcgen) and the standalone PKI.
//!
//! In standalone mode the server mints a CA, signs its serving certificate and an admin client
//! certificate with it; the authentication layer then trusts client certificates of that CA.
//!
//! The TLS layer itself only *requests* a client certificate (health probes come without one)
//! and proves the client holds its key; which CA vouches for it is decided per request by the
//! authentication layer of `cozyplane-authz`, so a reloaded client CA needs no new TLS config.

use std::path::Path;
use std::sync::Arc;

use base64::Engine;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, SanType,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// A PEM certificate chain and its key.
#[derive(Clone, Debug)]
pub struct Pem {
    /// Certificate chain, PEM.
    pub cert: String,
    /// Private key, PEM.
    pub key: String,
}

/// Everything standalone mode mints.
#[derive(Clone, Debug)]
pub struct Pki {
    /// The CA certificate (PEM).
    pub ca: String,
    /// The serving certificate, signed by the CA.
    pub serving: Pem,
    /// The admin client certificate (CN `admin`, O `system:masters`).
    pub admin: Pem,
}

fn serving_params(extra_names: &[String]) -> Result<CertificateParams, rcgen::Error> {
    let mut names = vec!["localhost".to_string()];
    names.extend(extra_names.iter().cloned());
    let mut p = CertificateParams::new(names)?;
    p.subject_alt_names.push(SanType::IpAddress(std::net::IpAddr::V4(
        std::net::Ipv4Addr::LOCALHOST,
    )));
    p.subject_alt_names.push(SanType::IpAddress(std::net::IpAddr::V6(
        std::net::Ipv6Addr::LOCALHOST,
    )));
    p.distinguished_name
        .push(DnType::CommonName, "cozyplane-apiserver");
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    Ok(p)
}

/// A self-signed serving certificate for loopback names and `extra_names` (e.g. the Service's
/// `<svc>.<ns>.svc`, which the aggregator dials).
pub fn self_signed(extra_names: &[String]) -> Result<Pem, rcgen::Error> {
    let key = KeyPair::generate()?;
    let cert = serving_params(extra_names)?.self_signed(&key)?;
    Ok(Pem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

impl Pki {
    /// Mints a CA, a serving certificate (loopback names plus `extra_names`) and an admin client
    /// certificate.
    pub fn mint_for(extra_names: &[String]) -> Result<Self, rcgen::Error> {
        let ca_key = KeyPair::generate()?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "cozyplane-ca");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_cert = ca_params.self_signed(&ca_key)?;
        let issuer = Issuer::from_params(&ca_params, &ca_key);

        let sk = KeyPair::generate()?;
        let serving = serving_params(extra_names)?.signed_by(&sk, &issuer)?;

        let ak = KeyPair::generate()?;
        let mut ap = CertificateParams::new(Vec::<String>::new())?;
        ap.distinguished_name.push(DnType::CommonName, "admin");
        ap.distinguished_name
            .push(DnType::OrganizationName, "system:masters");
        ap.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let admin = ap.signed_by(&ak, &issuer)?;
        Ok(Self {
            ca: ca_cert.pem(),
            serving: Pem {
                cert: serving.pem(),
                key: sk.serialize_pem(),
            },
            admin: Pem {
                cert: admin.pem(),
                key: ak.serialize_pem(),
            },
        })
    }

    /// Mints a CA, a loopback serving certificate and an admin client certificate.
    pub fn mint() -> Result<Self, rcgen::Error> {
        Self::mint_for(&[])
    }

    /// A kubeconfig for the admin certificate against `server` (e.g. `https://127.0.0.1:8443`).
    pub fn kubeconfig(&self, server: &str) -> String {
        let b = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: cozyplane\n  cluster:\n    server: {server}\n    certificate-authority-data: {}\nusers:\n- name: admin\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\ncontexts:\n- name: cozyplane\n  context:\n    cluster: cozyplane\n    user: admin\n    namespace: default\ncurrent-context: cozyplane\n",
            b(&self.ca),
            b(&self.admin.cert),
            b(&self.admin.key)
        )
    }
}

/// Reads a PEM certificate chain and key from files.
pub fn read(cert: &Path, key: &Path) -> std::io::Result<Pem> {
    Ok(Pem {
        cert: std::fs::read_to_string(cert)?,
        key: std::fs::read_to_string(key)?,
    })
}

/// Errors building the TLS configuration.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad PEM.
    #[error("reading PEM")]
    Pem(#[from] rustls::pki_types::pem::Error),
    /// rustls refused the configuration.
    #[error("configuring TLS")]
    Rustls(#[from] rustls::Error),
}

/// A rustls server config: TLS ≥ 1.2 (rustls has nothing older), ALPN h2 and http/1.1, and a
/// requested (not required) client certificate, judged later by the authentication layer.
pub fn server_config(serving: &Pem) -> Result<rustls::ServerConfig, Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(serving.cert.as_bytes()).collect::<Result<_, _>>()?;
    let key = PrivateKeyDer::from_pem_slice(serving.key.as_bytes())?;
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
        .with_client_cert_verifier(cozyplane_authz::client_cert_verifier(&provider))
        .with_single_cert(certs, key)?;
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(cfg)
}
