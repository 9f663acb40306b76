//! Client certificates: which CA signed the peer's leaf, and who it names.
//!
//! The TLS server only *requests* a client certificate. Deciding what it proves happens here,
//! against the CA bundle in force at the moment of each request: a leaf that chains to the
//! request-header CA may vouch for `X-Remote-*` headers, one that chains to the client CA is a
//! user (CN = name, O = groups). Checking each bundle separately is what keeps a certificate
//! from the client CA from being accepted as a front proxy.
//!
//! The chain of a connection does not change, so a successful verification is remembered on
//! its [`PeerCertificates`] (shared by every request of the connection) for that exact bundle,
//! until the first certificate of the chain expires: the aggregator's many requests over one
//! HTTP/2 connection verify the chain once. A reloaded bundle, an expiry, or a failure verifies
//! again (failures are never remembered).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::{fmt, sync::Arc};

use rustls_pki_types::{CertificateDer, TrustAnchor, UnixTime, pem::PemObject};
use webpki::{EndEntityCert, KeyUsage};

use crate::error::{Error, Result};

/// The certificate chain the TLS peer presented, leaf first, with what verifying it proved.
///
/// The server makes one per connection where the client sent a certificate (from
/// `rustls::ServerConnection::peer_certificates()`) and inserts a clone as a request extension
/// for every request on it; clones share the chain and the remembered verifications. Requests
/// without it are treated as having no client certificate.
#[derive(Clone, Debug, Default)]
pub struct PeerCertificates {
    chain: Arc<[CertificateDer<'static>]>,
    verified: Arc<Mutex<Vec<Verified>>>,
    verifications: Arc<AtomicU64>,
}

/// One remembered verification of a chain.
#[derive(Debug)]
struct Verified {
    /// The bundle it verified against (held, so its address cannot be reused by another).
    bundle: Arc<[CertificateDer<'static>]>,
    identity: CertIdentity,
    /// When it was verified: a clock that went back verifies again.
    at: UnixTime,
    /// The earliest `notAfter` of the chain's certificates: it verifies again from then.
    until: UnixTime,
}

/// Chain verifications of every connection (remembered ones not counted), for metrics and tests.
static VERIFICATIONS: AtomicU64 = AtomicU64::new(0);

/// How many times a client certificate chain was verified against a CA bundle in this process.
pub fn chain_verifications_total() -> u64 {
    VERIFICATIONS.load(Ordering::Relaxed)
}

impl PeerCertificates {
    /// The chain of one connection, leaf first.
    pub fn new(chain: Vec<CertificateDer<'static>>) -> Self {
        Self {
            chain: chain.into(),
            ..Self::default()
        }
    }

    /// The chain, leaf first.
    pub fn chain(&self) -> &[CertificateDer<'static>] {
        &self.chain
    }

    /// How many times this chain was verified (each bundle once while the result holds).
    pub fn verifications(&self) -> u64 {
        self.verifications.load(Ordering::Relaxed)
    }
}

impl PartialEq for PeerCertificates {
    fn eq(&self, other: &Self) -> bool {
        self.chain == other.chain
    }
}

impl Eq for PeerCertificates {}

/// A set of trusted CA certificates.
#[derive(Clone)]
pub struct CaBundle {
    certificates: Arc<[CertificateDer<'static>]>,
    anchors: Arc<[TrustAnchor<'static>]>,
}

impl fmt::Debug for CaBundle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaBundle")
            .field("certificates", &self.certificates.len())
            .finish()
    }
}

impl PartialEq for CaBundle {
    fn eq(&self, other: &Self) -> bool {
        self.certificates == other.certificates
    }
}

impl CaBundle {
    /// Parses one or more PEM `CERTIFICATE` blocks. `origin` names the source in errors.
    pub fn from_pem(pem: &[u8], origin: &str) -> Result<Self> {
        let invalid = |reason: String| Error::InvalidCaBundle {
            origin: origin.to_owned(),
            reason,
        };
        let certificates = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| invalid(e.to_string()))?;
        Self::from_der(certificates).map_err(|e| match e {
            Error::InvalidCaBundle { reason, .. } => invalid(reason),
            other => other,
        })
    }

    /// Reads a PEM bundle from a file.
    pub fn from_file(path: &std::path::Path) -> Result<Self> {
        let pem = std::fs::read(path).map_err(|source| Error::ReadCaFile {
            path: path.to_owned(),
            source,
        })?;
        Self::from_pem(&pem, &path.display().to_string())
    }

    /// Builds a bundle from DER certificates.
    pub fn from_der(certificates: Vec<CertificateDer<'static>>) -> Result<Self> {
        let invalid = |reason: String| Error::InvalidCaBundle {
            origin: "DER certificates".to_owned(),
            reason,
        };
        if certificates.is_empty() {
            return Err(invalid("no certificates".to_owned()));
        }
        let anchors = certificates
            .iter()
            .map(|der| webpki::anchor_from_trusted_cert(der).map(|a| a.to_owned()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| invalid(e.to_string()))?;
        Ok(Self {
            certificates: certificates.into(),
            anchors: anchors.into(),
        })
    }

    /// The CA certificates, e.g. to build a TLS root store.
    pub fn certificates(&self) -> &[CertificateDer<'static>] {
        &self.certificates
    }

    /// Verifies that `chain` (leaf first, then intermediates) chains to one of this bundle's CAs,
    /// is valid at `now` and usable for client authentication, and returns the leaf's subject.
    pub fn verify(&self, chain: &[CertificateDer<'_>], now: UnixTime) -> Result<CertIdentity, CertError> {
        let (leaf, intermediates) = chain.split_first().ok_or(CertError::NoCertificate)?;
        let cert = EndEntityCert::try_from(leaf).map_err(CertError::Invalid)?;
        cert.verify_for_usage(
            webpki::ALL_VERIFICATION_ALGS,
            &self.anchors,
            intermediates,
            now,
            KeyUsage::client_auth(),
            None,
            None,
        )
        .map_err(CertError::Invalid)?;
        CertIdentity::from_der(leaf)
    }

    /// [`Self::verify`] for a connection's chain, remembered on `peer` (see the
    /// [module docs](self)): while this bundle is in force and no certificate of the chain has
    /// expired, later requests of the connection get the same identity without verifying.
    pub fn verify_peer(&self, peer: &PeerCertificates, now: UnixTime) -> Result<CertIdentity, CertError> {
        {
            let verified = peer.verified.lock().unwrap_or_else(PoisonError::into_inner);
            let hit = verified
                .iter()
                .find(|v| Arc::ptr_eq(&v.bundle, &self.certificates) && v.at <= now && now < v.until);
            if let Some(v) = hit {
                return Ok(v.identity.clone());
            }
        }
        peer.verifications.fetch_add(1, Ordering::Relaxed);
        VERIFICATIONS.fetch_add(1, Ordering::Relaxed);
        let identity = self.verify(&peer.chain, now)?;
        // A chain whose expiry cannot be read is verified on every request, as before.
        if let Some(until) = earliest_not_after(&peer.chain) {
            let mut verified = peer.verified.lock().unwrap_or_else(PoisonError::into_inner);
            verified.retain(|v| !Arc::ptr_eq(&v.bundle, &self.certificates));
            verified.push(Verified {
                bundle: self.certificates.clone(),
                identity: identity.clone(),
                at: now,
                until,
            });
        }
        Ok(identity)
    }
}

/// The earliest `notAfter` of `chain` (`None` if a certificate does not parse).
fn earliest_not_after(chain: &[CertificateDer<'_>]) -> Option<UnixTime> {
    let mut earliest: Option<u64> = None;
    for der in chain {
        let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
        let secs = u64::try_from(cert.validity().not_after.timestamp()).ok()?;
        earliest = Some(earliest.map_or(secs, |e| e.min(secs)));
    }
    earliest.map(|s| UnixTime::since_unix_epoch(std::time::Duration::from_secs(s)))
}

/// The subject of a verified client certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertIdentity {
    /// The subject's common name (the user name, or the front proxy's name).
    pub common_name: String,
    /// The subject's organizations (the user's groups).
    pub organizations: Vec<String>,
}

impl CertIdentity {
    fn from_der(der: &CertificateDer<'_>) -> Result<Self, CertError> {
        let (_, cert) =
            x509_parser::parse_x509_certificate(der).map_err(|e| CertError::Unparsable(e.to_string()))?;
        let subject = cert.subject();
        let text = |attr: &x509_parser::x509::AttributeTypeAndValue<'_>| {
            attr.as_str()
                .map(str::to_owned)
                .map_err(|e| CertError::Unparsable(e.to_string()))
        };
        let common_name = subject
            .iter_common_name()
            .next()
            .map(text)
            .transpose()?
            .unwrap_or_default();
        let organizations = subject
            .iter_organization()
            .map(text)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            common_name,
            organizations,
        })
    }
}

/// Why a client certificate proves nothing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CertError {
    /// The peer presented no certificate.
    #[error("no client certificate")]
    NoCertificate,
    /// The chain does not verify against the bundle (unknown CA, expired, wrong usage …).
    #[error("client certificate does not verify")]
    Invalid(#[source] webpki::Error),
    /// The leaf's subject could not be read.
    #[error("client certificate subject is unreadable: {0}")]
    Unparsable(String),
    /// The leaf verified, but its CN is not one of the allowed front-proxy names.
    #[error("subject with cn={0} is not in the allowed list")]
    NameNotAllowed(String),
    /// The leaf has no common name.
    #[error("common name of the provided certificate is empty")]
    EmptyCommonName,
}

/// A rustls client-certificate verifier that requests, but does not require, a client
/// certificate and leaves chain validation to the authentication layer.
///
/// This is Kubernetes' `tls.RequestClientCert`: the handshake proves the client holds the key
/// for the certificate it sent (the handshake signature is checked here), and
/// [`Authentication`](crate::Authentication) then decides per request which CA, if any, vouches for
/// it. Because no CA is baked into the TLS configuration, a reloaded
/// `extension-apiserver-authentication` ConfigMap takes effect without rebuilding it.
///
/// Only use it together with the authentication layer: on its own it trusts nobody, but it
/// also rejects nobody.
pub fn client_cert_verifier(
    provider: &rustls::crypto::CryptoProvider,
) -> Arc<dyn rustls::server::danger::ClientCertVerifier> {
    Arc::new(DeferredClientCertVerifier {
        algorithms: provider.signature_verification_algorithms,
    })
}

#[derive(Debug)]
struct DeferredClientCertVerifier {
    algorithms: rustls::crypto::WebPkiSupportedAlgorithms,
}

impl rustls::server::danger::ClientCertVerifier for DeferredClientCertVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        // No hints: clients then send their certificate whatever CA issued it.
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<rustls::server::danger::ClientCertVerified, rustls::Error> {
        // Reject what is not even a certificate; trust is decided per request.
        EndEntityCert::try_from(end_entity)
            .map_err(|_| rustls::Error::InvalidCertificate(rustls::CertificateError::BadEncoding))?;
        Ok(rustls::server::danger::ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}
