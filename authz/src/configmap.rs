//! The certificate settings in force: flags, overlaid on the in-cluster
//! `kube-system/extension-apiserver-authentication` ConfigMap, reloaded when it changes.
//!
//! As in Kubernetes, each half is taken whole from one source: `--client-ca-file` replaces the
//! ConfigMap's `client-ca-file`, and `--requestheader-client-ca-file` replaces every
//! `requestheader-*` key (the header flags then apply, with their defaults).

use std::{collections::BTreeMap, sync::Arc};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api, Client,
    runtime::watcher::{self, DefaultBackoff},
};
use tokio::sync::watch;

use crate::{
    error::{Error, Result},
    request_header::RequestHeaderConfig,
    x509::CaBundle,
};

/// Namespace of the authentication ConfigMap.
pub const CONFIGMAP_NAMESPACE: &str = "kube-system";
/// Name of the authentication ConfigMap.
pub const CONFIGMAP_NAME: &str = "extension-apiserver-authentication";

/// The CAs and front-proxy settings used to judge client certificates.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CertConfig {
    /// CA of client certificates that authenticate users directly (CN = user, O = groups).
    pub client_ca: Option<CaBundle>,
    /// Front-proxy settings; `None` disables `X-Remote-*` authentication.
    pub request_header: Option<RequestHeaderConfig>,
}

impl CertConfig {
    /// Parses the ConfigMap's data.
    pub fn from_configmap_data(data: &BTreeMap<String, String>) -> Result<Self> {
        let non_empty = |key: &str| data.get(key).map(String::as_str).filter(|v| !v.trim().is_empty());
        let client_ca =
            non_empty("client-ca-file").map(|pem| CaBundle::from_pem(pem.as_bytes(), "client-ca-file"));
        let request_header = match non_empty("requestheader-client-ca-file") {
            None => None,
            Some(pem) => Some(RequestHeaderConfig {
                client_ca: CaBundle::from_pem(pem.as_bytes(), "requestheader-client-ca-file")?,
                allowed_names: json_list(data, "requestheader-allowed-names")?,
                username_headers: json_list(data, "requestheader-username-headers")?,
                uid_headers: json_list(data, "requestheader-uid-headers")?,
                group_headers: json_list(data, "requestheader-group-headers")?,
                extra_headers_prefixes: json_list(data, "requestheader-extra-headers-prefix")?,
            }),
        };
        Ok(Self {
            client_ca: client_ca.transpose()?,
            request_header,
        })
    }

    /// `flags` where they set something, else `configmap`.
    pub fn overlay(flags: &CertConfig, configmap: Option<&CertConfig>) -> CertConfig {
        CertConfig {
            client_ca: flags
                .client_ca
                .clone()
                .or_else(|| configmap.and_then(|c| c.client_ca.clone())),
            request_header: flags
                .request_header
                .clone()
                .or_else(|| configmap.and_then(|c| c.request_header.clone())),
        }
    }

    /// Every CA certificate of both halves, e.g. to build a TLS root store.
    pub fn all_ca_certificates(&self) -> Vec<rustls_pki_types::CertificateDer<'static>> {
        let client = self.client_ca.iter().flat_map(CaBundle::certificates);
        let front = self
            .request_header
            .iter()
            .flat_map(|rh| rh.client_ca.certificates());
        client.chain(front).cloned().collect()
    }
}

fn json_list(data: &BTreeMap<String, String>, key: &str) -> Result<Vec<String>> {
    match data.get(key).map(|v| v.trim()).filter(|v| !v.is_empty()) {
        None => Ok(Vec::new()),
        Some(raw) => serde_json::from_str(raw).map_err(|source| Error::InvalidListValue {
            key: key.to_owned(),
            source,
        }),
    }
}

/// The current [`CertConfig`], shared between the authentication layer and the reload task.
///
/// Cloning is cheap; all clones see the same value. [`subscribe`](Self::subscribe) to learn about
/// changes (e.g. to refresh a TLS root store).
#[derive(Clone, Debug)]
pub struct DynamicCertConfig {
    tx: Arc<watch::Sender<Arc<CertConfig>>>,
}

impl DynamicCertConfig {
    /// Starts with `initial`.
    pub fn new(initial: CertConfig) -> Self {
        Self {
            tx: Arc::new(watch::Sender::new(Arc::new(initial))),
        }
    }

    /// The configuration in force now.
    pub fn current(&self) -> Arc<CertConfig> {
        self.tx.borrow().clone()
    }

    /// Replaces the configuration, notifying subscribers if it changed.
    pub fn set(&self, config: CertConfig) {
        self.tx.send_if_modified(|current| {
            if **current == config {
                return false;
            }
            *current = Arc::new(config);
            true
        });
    }

    /// A receiver that sees every change.
    pub fn subscribe(&self) -> watch::Receiver<Arc<CertConfig>> {
        self.tx.subscribe()
    }
}

/// Reads the ConfigMap once. `Ok(None)` when it does not exist.
pub(crate) async fn lookup(client: Client) -> Result<Option<CertConfig>> {
    let api: Api<ConfigMap> = Api::namespaced(client, CONFIGMAP_NAMESPACE);
    let Some(cm) = api.get_opt(CONFIGMAP_NAME).await.map_err(Error::Lookup)? else {
        return Ok(None);
    };
    CertConfig::from_configmap_data(&cm.data.unwrap_or_default()).map(Some)
}

/// Told how a watch of the kube-apiserver fares, e.g. to show it in `/readyz` and metrics.
pub trait WatchHealth: Send + Sync {
    /// The watch of `resource` starts (it has not listed yet).
    fn started(&self, resource: &'static str);
    /// It listed `resource` and is watching.
    fn synced(&self, resource: &'static str);
    /// Listing or watching `resource` failed with `error`; it is retried after a backoff.
    fn failed(&self, resource: &'static str, error: String);
}

/// The resource the ConfigMap watch reports as.
pub const WATCHED_RESOURCE: &str = "configmaps";

/// `timeoutSeconds` of the ConfigMap watch (the kube-apiserver ends it; it is re-opened from
/// the last resourceVersion).
pub(crate) const WATCH_TIMEOUT_SECS: u32 = 290;

/// Watches the ConfigMap for ever, publishing `flags` overlaid on its content into `dynamic`.
/// `client` should have no read timeout (the watch is quiet until the ConfigMap changes).
///
/// A ConfigMap that fails to parse leaves the previous configuration in force; a deleted one
/// leaves only the flags. A failed list or watch is retried after client-go's reflector backoff
/// (800 ms doubling to 30 s, jittered), which starts over only after 2 minutes without a
/// failure — not on the retry's own first event, as kube-runtime's `StreamBackoff` would.
pub(crate) async fn reload_loop(
    client: Client,
    flags: CertConfig,
    dynamic: DynamicCertConfig,
    health: Option<Arc<dyn WatchHealth>>,
) {
    if let Some(h) = &health {
        h.started(WATCHED_RESOURCE);
    }
    let api: Api<ConfigMap> = Api::namespaced(client, CONFIGMAP_NAMESPACE);
    let config = watcher::Config::default()
        .fields(&format!("metadata.name={CONFIGMAP_NAME}"))
        .timeout(WATCH_TIMEOUT_SECS);
    let mut events = watcher::watcher(api, config).boxed();
    let mut backoff = DefaultBackoff::default();
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Apply(cm) | watcher::Event::InitApply(cm)) => {
                match CertConfig::from_configmap_data(&cm.data.unwrap_or_default()) {
                    Ok(parsed) => {
                        tracing::info!("loaded {CONFIGMAP_NAMESPACE}/{CONFIGMAP_NAME}");
                        dynamic.set(CertConfig::overlay(&flags, Some(&parsed)));
                    }
                    Err(error) => {
                        tracing::warn!(
                            error = &error as &dyn std::error::Error,
                            "ignoring invalid {CONFIGMAP_NAME}"
                        );
                    }
                }
            }
            Ok(watcher::Event::Delete(_)) => {
                tracing::warn!("{CONFIGMAP_NAMESPACE}/{CONFIGMAP_NAME} deleted; using flags only");
                dynamic.set(flags.clone());
            }
            Ok(watcher::Event::InitDone) => {
                if let Some(h) = &health {
                    h.synced(WATCHED_RESOURCE);
                }
            }
            Ok(watcher::Event::Init) => {}
            Err(error) => {
                if let Some(h) = &health {
                    h.failed(WATCHED_RESOURCE, error_text(&error));
                }
                let delay = backoff.next().unwrap_or(std::time::Duration::from_secs(30));
                tracing::warn!(
                    error = &error as &dyn std::error::Error,
                    retry_in = ?delay,
                    "watching {CONFIGMAP_NAME}"
                );
                tokio::time::sleep(delay).await;
            }
        }
    }
}

/// The kube-apiserver's message for an API error, else the error itself.
fn error_text(e: &watcher::Error) -> String {
    use watcher::Error as W;
    match e {
        W::InitialListFailed(kube::Error::Api(s))
        | W::WatchStartFailed(kube::Error::Api(s))
        | W::WatchFailed(kube::Error::Api(s))
        | W::WatchError(s) => format!("{} ({} {})", s.message, s.code, s.reason),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ca_pem(cn: &str) -> String {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.distinguished_name.push(rcgen::DnType::CommonName, cn);
        let key = rcgen::KeyPair::generate().expect("key");
        params.self_signed(&key).expect("self-signed").pem()
    }

    fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn parses_every_key() {
        let client = ca_pem("client-ca");
        let front = ca_pem("front-proxy-ca");
        let parsed = CertConfig::from_configmap_data(&data(&[
            ("client-ca-file", &client),
            ("requestheader-client-ca-file", &front),
            ("requestheader-allowed-names", r#"["front-proxy-client"]"#),
            ("requestheader-username-headers", r#"["X-Remote-User"]"#),
            ("requestheader-uid-headers", r#"["X-Remote-Uid"]"#),
            ("requestheader-group-headers", r#"["X-Remote-Group"]"#),
            ("requestheader-extra-headers-prefix", r#"["X-Remote-Extra-"]"#),
        ]))
        .expect("valid");
        assert!(parsed.client_ca.is_some());
        let rh = parsed.request_header.expect("request header config");
        assert_eq!(rh.allowed_names, ["front-proxy-client"]);
        assert_eq!(rh.username_headers, ["X-Remote-User"]);
        assert_eq!(rh.uid_headers, ["X-Remote-Uid"]);
        assert_eq!(rh.group_headers, ["X-Remote-Group"]);
        assert_eq!(rh.extra_headers_prefixes, ["X-Remote-Extra-"]);
    }

    #[test]
    fn missing_request_header_ca_disables_front_proxy() {
        let parsed =
            CertConfig::from_configmap_data(&data(&[("requestheader-allowed-names", "[]")])).expect("valid");
        assert_eq!(parsed, CertConfig::default());
    }

    #[test]
    fn invalid_values_are_errors() {
        let front = ca_pem("front-proxy-ca");
        let bad_list = data(&[
            ("requestheader-client-ca-file", &front),
            ("requestheader-allowed-names", "front"),
        ]);
        assert!(matches!(
            CertConfig::from_configmap_data(&bad_list),
            Err(Error::InvalidListValue { .. })
        ));
        let bad_pem = data(&[("client-ca-file", "not a certificate")]);
        assert!(matches!(
            CertConfig::from_configmap_data(&bad_pem),
            Err(Error::InvalidCaBundle { .. })
        ));
    }

    #[test]
    fn flags_win_per_half() {
        let flag_ca = CaBundle::from_pem(ca_pem("flag").as_bytes(), "flag").expect("ca");
        let cm = CertConfig::from_configmap_data(&data(&[
            ("client-ca-file", &ca_pem("cm-client")),
            ("requestheader-client-ca-file", &ca_pem("cm-front")),
        ]))
        .expect("valid");
        let flags = CertConfig {
            client_ca: Some(flag_ca.clone()),
            request_header: None,
        };
        let merged = CertConfig::overlay(&flags, Some(&cm));
        assert_eq!(merged.client_ca, Some(flag_ca));
        assert_eq!(merged.request_header, cm.request_header);
        assert_eq!(merged.all_ca_certificates().len(), 2);
    }

    #[test]
    fn dynamic_config_notifies_on_change_only() {
        let dynamic = DynamicCertConfig::new(CertConfig::default());
        let mut rx = dynamic.subscribe();
        dynamic.set(CertConfig::default());
        assert!(!rx.has_changed().expect("open"));
        let ca = CaBundle::from_pem(ca_pem("x").as_bytes(), "x").expect("ca");
        dynamic.set(CertConfig {
            client_ca: Some(ca),
            request_header: None,
        });
        assert!(rx.has_changed().expect("open"));
        assert!(dynamic.current().client_ca.is_some());
        rx.mark_unchanged();
    }
}
