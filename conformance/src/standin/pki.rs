//! The stand-in's certificates: a cluster CA (serving and client certificates) and a separate
//! request-header CA for the aggregation proxy's front-proxy client certificate.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, SanType,
};

/// A PEM certificate chain and its key.
#[derive(Clone, Debug)]
pub struct Pem {
    /// Certificate chain, PEM.
    pub cert: String,
    /// Private key, PEM.
    pub key: String,
}

/// Everything the stand-in mints at start.
#[derive(Clone, Debug)]
pub struct StandInPki {
    /// Cluster CA (PEM): signs the serving certificate and client certificates.
    pub ca: String,
    /// Serving certificate for `localhost`/`127.0.0.1`.
    pub serving: Pem,
    /// Admin client certificate (CN `kubernetes-admin`, O `system:masters`).
    pub admin: Pem,
    /// Request-header (front-proxy) CA (PEM).
    pub front_proxy_ca: String,
    /// Front-proxy client certificate (CN `front-proxy-client`).
    pub front_proxy_client: Pem,
    /// The two CAs' parameters and keys (PEM), for [`StandInPki::client_cert`].
    cas: [(CertificateParams, String); 2],
}

/// Which stand-in CA signs a certificate minted by [`StandInPki::client_cert`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ca {
    /// The cluster CA (`client-ca-file`): the certificate is a user.
    Cluster,
    /// The request-header CA (`requestheader-client-ca-file`): the certificate is a front proxy
    /// (if its CN is allowed).
    FrontProxy,
}

fn ca(cn: &str) -> Result<(CertificateParams, KeyPair, String), rcgen::Error> {
    let key = KeyPair::generate()?;
    let mut p = CertificateParams::new(Vec::<String>::new())?;
    p.distinguished_name.push(DnType::CommonName, cn);
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let cert = p.self_signed(&key)?;
    Ok((p, key, cert.pem()))
}

/// A client certificate for `cn` in `groups`, signed by the CA (`params`, `key`).
pub fn client_cert(
    params: &CertificateParams,
    key: &KeyPair,
    cn: &str,
    groups: &[&str],
) -> Result<Pem, rcgen::Error> {
    let issuer = Issuer::from_params(params, key);
    let k = KeyPair::generate()?;
    let mut p = CertificateParams::new(Vec::<String>::new())?;
    p.distinguished_name.push(DnType::CommonName, cn);
    for g in groups {
        p.distinguished_name.push(DnType::OrganizationName, *g);
    }
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let c = p.signed_by(&k, &issuer)?;
    Ok(Pem {
        cert: c.pem(),
        key: k.serialize_pem(),
    })
}

impl StandInPki {
    /// Mints both CAs and the certificates.
    pub fn mint() -> Result<Self, rcgen::Error> {
        let (ca_p, ca_k, ca_pem) = ca("standin-cluster-ca")?;
        let (fp_p, fp_k, fp_pem) = ca("standin-front-proxy-ca")?;
        let issuer = Issuer::from_params(&ca_p, &ca_k);
        let sk = KeyPair::generate()?;
        let mut sp = CertificateParams::new(vec![
            "localhost".to_string(),
            "kubernetes.default.svc".to_string(),
        ])?;
        sp.subject_alt_names
            .push(SanType::IpAddress(std::net::Ipv4Addr::LOCALHOST.into()));
        sp.distinguished_name.push(DnType::CommonName, "kube-apiserver");
        sp.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let serving = sp.signed_by(&sk, &issuer)?;
        Ok(Self {
            admin: client_cert(&ca_p, &ca_k, "kubernetes-admin", &["system:masters"])?,
            front_proxy_client: client_cert(&fp_p, &fp_k, "front-proxy-client", &[])?,
            serving: Pem {
                cert: serving.pem(),
                key: sk.serialize_pem(),
            },
            ca: ca_pem,
            front_proxy_ca: fp_pem,
            cas: [(ca_p, ca_k.serialize_pem()), (fp_p, fp_k.serialize_pem())],
        })
    }

    /// Another client certificate for `cn` in `groups` (O) signed by one of the stand-in's CAs,
    /// e.g. a request-header certificate whose CN is not in `requestheader-allowed-names`.
    pub fn client_cert(&self, ca: Ca, cn: &str, groups: &[&str]) -> Result<Pem, rcgen::Error> {
        let (params, key) = &self.cas[usize::from(ca == Ca::FrontProxy)];
        client_cert(params, &KeyPair::from_pem(key)?, cn, groups)
    }
}

/// A fresh CA nobody trusts and a client certificate for `cn` signed by it: (CA PEM, client).
pub fn untrusted_client_cert(cn: &str, groups: &[&str]) -> Result<(String, Pem), rcgen::Error> {
    let (p, k, pem) = ca("untrusted-ca")?;
    Ok((pem, client_cert(&p, &k, cn, groups)?))
}

/// The rustls server configuration: the serving certificate, ALPN h2/http1.1, and client
/// certificates of `client_ca` requested (not required, so token and anonymous requests work).
pub fn server_config(serving: &Pem, client_ca: &str) -> Result<rustls::ServerConfig, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(serving.cert.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    let key = PrivateKeyDer::from_pem_slice(serving.key.as_bytes()).map_err(|e| e.to_string())?;
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(client_ca.as_bytes()) {
        roots
            .add(c.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        std::sync::Arc::new(roots),
        provider.clone(),
    )
    .allow_unauthenticated()
    .build()
    .map_err(|e| e.to_string())?;
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .map_err(|e| e.to_string())?;
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(cfg)
}

/// The user (CN) and groups (O) of a verified client certificate chain, leaf first.
pub fn user_of(chain: Option<&[rustls::pki_types::CertificateDer<'_>]>) -> Option<(String, Vec<String>)> {
    use x509_parser::prelude::{FromDer, X509Certificate};
    let leaf = chain?.first()?;
    let (_, cert) = X509Certificate::from_der(leaf.as_ref()).ok()?;
    let subject = cert.subject();
    let name = subject.iter_common_name().next()?.as_str().ok()?.to_string();
    let groups = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(str::to_string))
        .collect();
    Some((name, groups))
}
