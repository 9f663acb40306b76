//! Command-line flags, named as `k8s.io/apiserver` names them, and building the layers from them.

use std::{path::PathBuf, sync::Arc, time::Duration};

use kube::{
    Client, Config,
    config::{KubeConfigOptions, Kubeconfig},
};

use crate::{
    authn::{AuthenticationLayer, Authenticator},
    authz::{AuthorizationLayer, DelegatingAuthorizer, SubjectAccessReviewAuthorizer},
    configmap::{self, CertConfig, DynamicCertConfig, WatchHealth},
    error::{Error, Result},
    paths::AlwaysAllowPaths,
    request_header::{
        DEFAULT_EXTRA_HEADERS_PREFIX, DEFAULT_GROUP_HEADER, DEFAULT_USERNAME_HEADER, REMOTE_UID_HEADER,
        RequestHeaderConfig,
    },
    token::TokenReviewAuthenticator,
    x509::CaBundle,
};

/// Delegated authentication and authorization flags.
///
/// Flatten into the server's options with `#[command(flatten)]`, then call
/// [`build`](Self::build).
#[derive(clap::Args, Clone, Debug, PartialEq, Eq)]
pub struct AuthOptions {
    /// Kubeconfig with enough rights to create tokenreviews and read the
    /// extension-apiserver-authentication ConfigMap; in-cluster configuration when unset.
    #[arg(long = "authentication-kubeconfig")]
    pub authentication_kubeconfig: Option<PathBuf>,

    /// Kubeconfig with enough rights to create subjectaccessreviews; in-cluster configuration
    /// when unset.
    #[arg(long = "authorization-kubeconfig")]
    pub authorization_kubeconfig: Option<PathBuf>,

    /// Do not read the client and request-header CAs from the in-cluster ConfigMap.
    #[arg(long = "authentication-skip-lookup")]
    pub authentication_skip_lookup: bool,

    /// Start even if the in-cluster ConfigMap cannot be read (it is still watched).
    #[arg(long = "authentication-tolerate-lookup-failure")]
    pub authentication_tolerate_lookup_failure: bool,

    /// CA bundle for client certificates; the certificate's CN is the user, its O the groups.
    #[arg(long = "client-ca-file")]
    pub client_ca_file: Option<PathBuf>,

    /// CA bundle for front-proxy client certificates. When set, all requestheader-* settings come
    /// from flags instead of the ConfigMap.
    #[arg(long = "requestheader-client-ca-file")]
    pub requestheader_client_ca_file: Option<PathBuf>,

    /// Front-proxy certificate common names allowed to set X-Remote-* headers; empty allows any.
    #[arg(long = "requestheader-allowed-names", value_delimiter = ',')]
    pub requestheader_allowed_names: Vec<String>,

    /// Headers to read the user name from.
    #[arg(long = "requestheader-username-headers", value_delimiter = ',', default_value = DEFAULT_USERNAME_HEADER)]
    pub requestheader_username_headers: Vec<String>,

    /// Headers to read the user UID from; must include X-Remote-Uid when set.
    #[arg(long = "requestheader-uid-headers", value_delimiter = ',')]
    pub requestheader_uid_headers: Vec<String>,

    /// Headers to read groups from.
    #[arg(long = "requestheader-group-headers", value_delimiter = ',', default_value = DEFAULT_GROUP_HEADER)]
    pub requestheader_group_headers: Vec<String>,

    /// Header prefixes to read user extras from.
    #[arg(long = "requestheader-extra-headers-prefix", value_delimiter = ',', default_value = DEFAULT_EXTRA_HEADERS_PREFIX)]
    pub requestheader_extra_headers_prefix: Vec<String>,

    /// How long to cache TokenReview results.
    #[arg(long = "authentication-token-webhook-cache-ttl", default_value = "10s", value_parser = parse_duration)]
    pub authentication_token_webhook_cache_ttl: Duration,

    /// How long to cache allowed SubjectAccessReview results.
    #[arg(long = "authorization-webhook-cache-authorized-ttl", default_value = "10s", value_parser = parse_duration)]
    pub authorization_webhook_cache_authorized_ttl: Duration,

    /// How long to cache denied SubjectAccessReview results.
    #[arg(long = "authorization-webhook-cache-unauthorized-ttl", default_value = "10s", value_parser = parse_duration)]
    pub authorization_webhook_cache_unauthorized_ttl: Duration,

    /// Paths anyone may reach without authorization ("*" suffix = prefix match).
    #[arg(
        long = "authorization-always-allow-paths",
        value_delimiter = ',',
        default_value = "/healthz,/readyz,/livez"
    )]
    pub authorization_always_allow_paths: Vec<String>,
}

impl Default for AuthOptions {
    fn default() -> Self {
        Self {
            authentication_kubeconfig: None,
            authorization_kubeconfig: None,
            authentication_skip_lookup: false,
            authentication_tolerate_lookup_failure: false,
            client_ca_file: None,
            requestheader_client_ca_file: None,
            requestheader_allowed_names: Vec::new(),
            requestheader_username_headers: vec![DEFAULT_USERNAME_HEADER.to_owned()],
            requestheader_uid_headers: Vec::new(),
            requestheader_group_headers: vec![DEFAULT_GROUP_HEADER.to_owned()],
            requestheader_extra_headers_prefix: vec![DEFAULT_EXTRA_HEADERS_PREFIX.to_owned()],
            authentication_token_webhook_cache_ttl: Duration::from_secs(10),
            authorization_webhook_cache_authorized_ttl: Duration::from_secs(10),
            authorization_webhook_cache_unauthorized_ttl: Duration::from_secs(10),
            authorization_always_allow_paths: crate::paths::DEFAULT_ALWAYS_ALLOW_PATHS
                .iter()
                .map(|p| (*p).to_owned())
                .collect(),
        }
    }
}

impl AuthOptions {
    /// The certificate settings given by flags alone.
    pub fn cert_config_from_flags(&self) -> Result<CertConfig> {
        let client_ca = self
            .client_ca_file
            .as_deref()
            .map(CaBundle::from_file)
            .transpose()?;
        let request_header = match &self.requestheader_client_ca_file {
            None => None,
            Some(path) => {
                if !self.requestheader_uid_headers.is_empty()
                    && !self
                        .requestheader_uid_headers
                        .iter()
                        .any(|h| h.eq_ignore_ascii_case(REMOTE_UID_HEADER))
                {
                    return Err(Error::UidHeadersWithoutRemoteUid);
                }
                Some(RequestHeaderConfig {
                    client_ca: CaBundle::from_file(path)?,
                    allowed_names: self.requestheader_allowed_names.clone(),
                    username_headers: self.requestheader_username_headers.clone(),
                    uid_headers: self.requestheader_uid_headers.clone(),
                    group_headers: self.requestheader_group_headers.clone(),
                    extra_headers_prefixes: self.requestheader_extra_headers_prefix.clone(),
                })
            }
        };
        Ok(CertConfig {
            client_ca,
            request_header,
        })
    }

    /// Builds both layers.
    ///
    /// Loads the CA files, connects to the kube-apiserver(s), reads the
    /// `extension-apiserver-authentication` ConfigMap once (unless skipped or fully overridden
    /// by flags) and spawns a task that keeps it up to date, so this needs a Tokio runtime.
    pub async fn build(&self) -> Result<(AuthenticationLayer, AuthorizationLayer)> {
        self.build_reporting(None).await
    }

    /// As [`build`](Self::build), telling `health` how the ConfigMap watch fares.
    pub async fn build_reporting(
        &self,
        health: Option<Arc<dyn WatchHealth>>,
    ) -> Result<(AuthenticationLayer, AuthorizationLayer)> {
        let flags = self.cert_config_from_flags()?;
        let (authn_client, watch_client) = clients(self.authentication_kubeconfig.as_ref()).await?;
        let authz_client = match (&self.authorization_kubeconfig, &self.authentication_kubeconfig) {
            (a, b) if a == b => authn_client.clone(),
            (path, _) => clients(path.as_ref()).await?.0,
        };

        let certs = DynamicCertConfig::new(flags.clone());
        let needs_lookup = flags.client_ca.is_none() || flags.request_header.is_none();
        if !self.authentication_skip_lookup && needs_lookup {
            match configmap::lookup(authn_client.clone()).await {
                Ok(found) => certs.set(CertConfig::overlay(&flags, found.as_ref())),
                Err(error) if self.authentication_tolerate_lookup_failure => {
                    tracing::warn!(
                        error = &error as &dyn std::error::Error,
                        "continuing without the ConfigMap"
                    );
                }
                Err(error) => return Err(error),
            }
            tokio::spawn(configmap::reload_loop(watch_client, flags, certs.clone(), health));
        }

        let paths = AlwaysAllowPaths::new(self.authorization_always_allow_paths.iter().cloned());
        let tokens = TokenReviewAuthenticator::new(authn_client)
            .authenticated_ttl(self.authentication_token_webhook_cache_ttl)
            .unauthenticated_ttl(self.authentication_token_webhook_cache_ttl);
        let authentication = AuthenticationLayer::new(Authenticator::new(certs, Some(tokens), paths.clone()));

        let sar = SubjectAccessReviewAuthorizer::new(authz_client)
            .authorized_ttl(self.authorization_webhook_cache_authorized_ttl)
            .unauthorized_ttl(self.authorization_webhook_cache_unauthorized_ttl);
        let authorization =
            AuthorizationLayer::new(Arc::new(DelegatingAuthorizer::new(paths, Arc::new(sar))));
        Ok((authentication, authorization))
    }
}

/// Kube clients from a kubeconfig file, or the in-cluster configuration: one for the reviews
/// and lookups (a read timeout bounds each), one for the ConfigMap watch (none: a watch is quiet
/// for minutes and carries `timeoutSeconds` instead).
async fn clients(kubeconfig: Option<&PathBuf>) -> Result<(Client, Client)> {
    let mut config = match kubeconfig {
        Some(path) => {
            let boxed = |e: kube::config::KubeconfigError| Error::Kubeconfig {
                path: path.clone(),
                source: Box::new(e),
            };
            let file = Kubeconfig::read_from(path).map_err(boxed)?;
            Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
                .await
                .map_err(boxed)?
        }
        None => Config::incluster().map_err(Error::InCluster)?,
    };
    config.connect_timeout = Some(crate::authz::REVIEW_TIMEOUT);
    let watches = Client::try_from(config.clone()).map_err(Error::Client)?;
    config.read_timeout = Some(crate::authz::REVIEW_TIMEOUT);
    // A pooled connection's idle time must not count against the next review's timeout.
    config.reset_reader_on_write = true;
    Ok((Client::try_from(config).map_err(Error::Client)?, watches))
}

/// Parses a Go-style duration: `10s`, `5m`, `1h30m`, `250ms`, `0`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let invalid = || format!("invalid duration {text:?} (expected e.g. 10s, 5m, 1h30m, 250ms)");
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .ok_or_else(invalid)?;
        let value: f64 = rest[..digits].parse().map_err(|_| invalid())?;
        rest = &rest[digits..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit()).unwrap_or(rest.len());
        let seconds = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(invalid()),
        };
        total += Duration::from_secs_f64(value * seconds);
        rest = &rest[unit_len..];
    }
    if text.is_empty() {
        Err(invalid())
    } else {
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        auth: AuthOptions,
    }

    #[test]
    fn defaults_match_kubernetes() {
        let cli = Cli::parse_from(["x"]);
        assert_eq!(cli.auth, AuthOptions::default());
        assert_eq!(
            cli.auth.authorization_always_allow_paths,
            ["/healthz", "/readyz", "/livez"]
        );
        assert_eq!(cli.auth.requestheader_username_headers, ["x-remote-user"]);
    }

    #[test]
    fn flags_parse() {
        let cli = Cli::parse_from([
            "x",
            "--requestheader-allowed-names=front-proxy-client,aggregator",
            "--requestheader-uid-headers=X-Remote-Uid",
            "--authentication-token-webhook-cache-ttl=1m30s",
            "--authorization-webhook-cache-authorized-ttl=5m",
            "--authorization-webhook-cache-unauthorized-ttl=30s",
            "--authorization-always-allow-paths=/healthz,/readyz/*",
            "--authentication-skip-lookup",
            "--authentication-kubeconfig=/k",
        ]);
        let auth = cli.auth;
        assert_eq!(
            auth.requestheader_allowed_names,
            ["front-proxy-client", "aggregator"]
        );
        assert_eq!(
            auth.authentication_token_webhook_cache_ttl,
            Duration::from_secs(90)
        );
        assert_eq!(
            auth.authorization_webhook_cache_authorized_ttl,
            Duration::from_secs(300)
        );
        assert_eq!(
            auth.authorization_webhook_cache_unauthorized_ttl,
            Duration::from_secs(30)
        );
        assert!(auth.authentication_skip_lookup);
        assert_eq!(auth.authentication_kubeconfig, Some(PathBuf::from("/k")));
    }

    #[test]
    fn uid_headers_must_include_remote_uid() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = dir.path().join("ca.crt");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let key = rcgen::KeyPair::generate().expect("key");
        std::fs::write(&ca, params.self_signed(&key).expect("cert").pem()).expect("write");
        let options = AuthOptions {
            requestheader_client_ca_file: Some(ca),
            requestheader_uid_headers: vec!["X-Other".into()],
            ..AuthOptions::default()
        };
        assert!(matches!(
            options.cert_config_from_flags(),
            Err(Error::UidHeadersWithoutRemoteUid)
        ));
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("s").is_err());
    }
}
