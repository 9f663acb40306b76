//! `--ensure-apiservice`: registers `v1alpha1.sdn.cozystack.io` with the aggregator at start-up.
//!
//! The APIService is created, or merge-patched when it exists (e.g. left `Local` by an older
//! CRD-based install, or pointing at another Service), with the Service, the priorities and the
//! CA bundle the aggregator verifies our serving certificate with. The bundle comes from
//! [`CaSource`]: the serving certificate itself (self-signed or minted), a PEM file, or
//! cert-manager's CA injector (annotation `cert-manager.io/inject-ca-from-secret`, caBundle left
//! to cert-manager).

use std::path::PathBuf;
use std::str::FromStr;

use cozyplane_apis::{GROUP, v1alpha1::VERSION};
use k8s_openapi::ByteString;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

/// The annotation cert-manager's CA injector fills `spec.caBundle` from.
pub const CERT_MANAGER_INJECT: &str = "cert-manager.io/inject-ca-from-secret";

/// The APIService name: `v1alpha1.sdn.cozystack.io`.
pub fn name() -> String {
    format!("{VERSION}.{GROUP}")
}

/// Where `spec.caBundle` comes from (`--apiservice-ca-bundle-from`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CaSource {
    /// `serving-cert`: the PEM of the serving certificate (chain), or the minted CA.
    ServingCert,
    /// `file:<path>`: a PEM bundle.
    File(PathBuf),
    /// `cert-manager:<namespace>/<secret>`: cert-manager injects the secret's `ca.crt`.
    CertManager(String),
}

impl FromStr for CaSource {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s == "serving-cert" {
            return Ok(Self::ServingCert);
        }
        if let Some(p) = s.strip_prefix("file:").filter(|p| !p.is_empty()) {
            return Ok(Self::File(PathBuf::from(p)));
        }
        if let Some(r) = s.strip_prefix("cert-manager:")
            && let Some((ns, secret)) = r.split_once('/')
            && !ns.is_empty()
            && !secret.is_empty()
            && !secret.contains('/')
        {
            return Ok(Self::CertManager(r.to_string()));
        }
        Err(format!(
            "invalid CA bundle source {s:?}: expected serving-cert, file:<path> or cert-manager:<namespace>/<secret>"
        ))
    }
}

/// A `<namespace>/<name>` Service reference (`--ensure-apiservice`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceRef {
    /// Namespace of the Service.
    pub namespace: String,
    /// Name of the Service.
    pub name: String,
}

impl FromStr for ServiceRef {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.split_once('/') {
            Some((ns, n)) if !ns.is_empty() && !n.is_empty() && !n.contains('/') => Ok(Self {
                namespace: ns.into(),
                name: n.into(),
            }),
            _ => Err(format!("invalid service {s:?}: expected <namespace>/<name>")),
        }
    }
}

impl ServiceRef {
    /// The DNS names the aggregator may dial: `<svc>.<ns>.svc` first.
    pub fn dns_names(&self) -> Vec<String> {
        let (n, ns) = (&self.name, &self.namespace);
        vec![
            format!("{n}.{ns}.svc"),
            format!("{n}.{ns}.svc.cluster.local"),
            format!("{n}.{ns}"),
            n.clone(),
        ]
    }
}

/// What to register.
#[derive(Clone, Debug)]
pub struct Registration {
    /// The Service in front of the server.
    pub service: ServiceRef,
    /// Its port.
    pub port: i32,
    /// `spec.groupPriorityMinimum`.
    pub group_priority_minimum: i32,
    /// `spec.versionPriority`.
    pub version_priority: i32,
    /// Where the CA bundle comes from.
    pub ca: CaSource,
}

/// Errors ensuring the APIService.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The kube-apiserver refused or could not be reached.
    #[error("kube-apiserver")]
    Kube(#[from] kube::Error),
    /// The CA file could not be read.
    #[error("reading the CA bundle")]
    Io(#[from] std::io::Error),
}

/// The merge patch (and, for a create, the object) of the APIService; `serving_ca` is the PEM
/// used for [`CaSource::ServingCert`].
pub fn desired(r: &Registration, serving_ca: &str) -> Result<serde_json::Value, Error> {
    let mut annotations = serde_json::Map::new();
    let mut spec = json!({
        "group": GROUP,
        "version": VERSION,
        "service": { "namespace": r.service.namespace, "name": r.service.name, "port": r.port },
        "groupPriorityMinimum": r.group_priority_minimum,
        "versionPriority": r.version_priority,
        "insecureSkipTLSVerify": false,
    });
    let bundle = match &r.ca {
        CaSource::ServingCert => Some(serving_ca.as_bytes().to_vec()),
        CaSource::File(p) => Some(std::fs::read(p)?),
        CaSource::CertManager(secret) => {
            annotations.insert(CERT_MANAGER_INJECT.into(), json!(secret));
            None
        }
    };
    if let Some(b) = bundle {
        spec["caBundle"] = serde_json::to_value(ByteString(b)).expect("bytes serialize");
    }
    Ok(json!({
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": { "name": name(), "annotations": annotations },
        "spec": spec,
    }))
}

/// Creates the APIService, or patches it to [`desired`]. Returns whether it was created.
pub async fn ensure(client: Client, r: &Registration, serving_ca: &str) -> Result<bool, Error> {
    use crate::rbac::server::{APISERVICES, APISERVICES_CREATE};
    let api: Api<APIService> = APISERVICES.uses("get").uses("patch").api_all(client);
    APISERVICES_CREATE.uses("create");
    let want = desired(r, serving_ca)?;
    if api.get_opt(&name()).await?.is_none() {
        let obj: APIService = serde_json::from_value(want.clone()).map_err(kube::Error::SerdeError)?;
        match api.create(&PostParams::default(), &obj).await {
            Ok(_) => return Ok(true),
            // Created concurrently by another replica: patch it like an existing one.
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    api.patch(&name(), &PatchParams::default(), &Patch::Merge(&want))
        .await?;
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_parse() {
        assert_eq!("serving-cert".parse(), Ok(CaSource::ServingCert));
        assert_eq!(
            "cert-manager:cozy/tls".parse(),
            Ok(CaSource::CertManager("cozy/tls".into()))
        );
        assert_eq!("file:/ca.pem".parse(), Ok(CaSource::File("/ca.pem".into())));
        assert!("cert-manager:x".parse::<CaSource>().is_err());
        assert!("other".parse::<CaSource>().is_err());
        let s: ServiceRef = "cozy-sdn/cozyplane".parse().unwrap();
        assert_eq!(s.dns_names()[0], "cozyplane.cozy-sdn.svc");
        assert!("nope".parse::<ServiceRef>().is_err());
    }

    #[test]
    fn cert_manager_leaves_the_bundle_to_the_injector() {
        let r = Registration {
            service: "ns/svc".parse().unwrap(),
            port: 443,
            group_priority_minimum: 1000,
            version_priority: 15,
            ca: CaSource::CertManager("ns/tls".into()),
        };
        let d = desired(&r, "PEM").unwrap();
        assert_eq!(d["metadata"]["annotations"][CERT_MANAGER_INJECT], "ns/tls");
        assert!(d["spec"].get("caBundle").is_none());
        let r = Registration {
            ca: CaSource::ServingCert,
            ..r
        };
        assert_eq!(desired(&r, "PEM").unwrap()["spec"]["caBundle"], "UEVN");
    }
}
