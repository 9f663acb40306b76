//! Standalone authentication: a client certificate verified against the standalone CA names the
//! user (CN) and groups (O). Real delegated authn/authz come with the authz crate; until then a
//! standalone server allows everything to an authenticated user and nothing but health checks
//! to anonymous ones.

use rustls::pki_types::CertificateDer;
use x509_parser::prelude::{FromDer, X509Certificate};

/// Who sent a request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct User {
    /// The user name (certificate CN).
    pub name: String,
    /// The groups (certificate O values).
    pub groups: Vec<String>,
}

/// The identity of a connection, attached to each of its requests as an extension.
#[derive(Clone, Debug, Default)]
pub struct Peer(pub Option<User>);

/// The user of a verified client certificate chain (leaf first); `None` without one.
///
/// rustls has already checked the chain against the CA, so only the subject is read here.
pub fn user_of(chain: Option<&[CertificateDer<'_>]>) -> Option<User> {
    let leaf = chain?.first()?;
    let (_, cert) = X509Certificate::from_der(leaf.as_ref()).ok()?;
    let subject = cert.subject();
    let name = subject.iter_common_name().next()?.as_str().ok()?.to_string();
    let groups = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(str::to_string))
        .collect();
    Some(User { name, groups })
}

/// Paths anonymous users may read (Go's `--authorization-always-allow-paths` default, plus the
/// public-info endpoints).
pub fn is_public(path: &str) -> bool {
    let first = path.trim_start_matches('/').split('/').next().unwrap_or_default();
    matches!(first, "healthz" | "livez" | "readyz" | "version")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_admin_certificate_names_admin_in_system_masters() {
        let pki = crate::server::tls::Pki::mint().unwrap();
        let der: Vec<CertificateDer<'static>> =
            rustls::pki_types::pem::PemObject::pem_slice_iter(pki.admin.cert.as_bytes())
                .collect::<Result<_, _>>()
                .unwrap();
        let u = user_of(Some(&der)).unwrap();
        assert_eq!(
            u,
            User {
                name: "admin".into(),
                groups: vec!["system:masters".into()]
            }
        );
        assert_eq!(user_of(None), None);
        assert!(is_public("/readyz/storage") && !is_public("/apis"));
    }
}
