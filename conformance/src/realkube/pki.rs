//! The real control plane's certificates and keys, minted fresh for every control plane: the
//! cluster CA (kube-apiserver's serving certificate, client certificates, kube-controller-manager's
//! cluster signing), a separate front-proxy CA for the aggregator's client certificate, and the
//! ServiceAccount token signing key.

use std::net::{IpAddr, Ipv4Addr};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, SanType,
};

use crate::standin::pki::{Pem, client_cert};

/// A CA: its certificate (PEM) and what signs with it.
pub struct Ca {
    /// The CA certificate, PEM.
    pub cert: String,
    /// The CA key, PEM.
    pub key: String,
    params: CertificateParams,
}

impl Ca {
    fn mint(cn: &str) -> Result<Self, rcgen::Error> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, cn);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key)?;
        Ok(Self {
            cert: cert.pem(),
            key: key.serialize_pem(),
            params,
        })
    }

    /// A client certificate for user `cn` in `groups` (O).
    pub fn client(&self, cn: &str, groups: &[&str]) -> Result<Pem, rcgen::Error> {
        client_cert(&self.params, &KeyPair::from_pem(&self.key)?, cn, groups)
    }

    /// A serving certificate for `names` (DNS) and `ips`.
    pub fn serving(&self, cn: &str, names: &[&str], ips: &[IpAddr]) -> Result<Pem, rcgen::Error> {
        let ca_key = KeyPair::from_pem(&self.key)?;
        let issuer = Issuer::from_params(&self.params, &ca_key);
        let key = KeyPair::generate()?;
        let mut p = CertificateParams::new(names.iter().map(|n| (*n).to_string()).collect::<Vec<_>>())?;
        p.subject_alt_names
            .extend(ips.iter().map(|ip| SanType::IpAddress(*ip)));
        p.distinguished_name.push(DnType::CommonName, cn);
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = p.signed_by(&key, &issuer)?;
        Ok(Pem {
            cert: cert.pem(),
            key: key.serialize_pem(),
        })
    }
}

/// Everything a control plane needs.
pub struct Pki {
    /// The cluster CA.
    pub ca: Ca,
    /// The front-proxy (request-header) CA.
    pub front_proxy_ca: Ca,
    /// kube-apiserver's serving certificate (loopback, `kubernetes.default.svc`).
    pub apiserver: Pem,
    /// `kubernetes-admin` in `system:masters`: the harness, kubectl set-up and
    /// kube-controller-manager.
    pub admin: Pem,
    /// The aggregator's client certificate (CN `front-proxy-client`).
    pub front_proxy_client: Pem,
    /// ServiceAccount token signing key (PKCS#8 PEM) and its public half (SPKI PEM).
    pub sa_key: Pem,
}

impl Pki {
    /// Mints a fresh PKI.
    pub fn mint() -> Result<Self, rcgen::Error> {
        let ca = Ca::mint("realkube-cluster-ca")?;
        let front_proxy_ca = Ca::mint("realkube-front-proxy-ca")?;
        let apiserver = ca.serving(
            "kube-apiserver",
            &[
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
            ],
            &[IpAddr::V4(Ipv4Addr::LOCALHOST)],
        )?;
        let sa = KeyPair::generate()?;
        Ok(Self {
            admin: ca.client("kubernetes-admin", &["system:masters"])?,
            front_proxy_client: front_proxy_ca.client("front-proxy-client", &[])?,
            apiserver,
            sa_key: Pem {
                cert: sa.public_key_pem(),
                key: sa.serialize_pem(),
            },
            ca,
            front_proxy_ca,
        })
    }
}
