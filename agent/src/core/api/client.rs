//! Building the agent's API clients: from a kubeconfig or the pod's service account, over
//! HTTP/2 where the server offers it.

use std::path::Path;
use std::time::Duration;

/// Builds a client from a kubeconfig file.
pub async fn client(path: &Path) -> Result<kube::Client, String> {
    let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .map_err(|e| format!("{}: {e}", path.display()))?;
    multiplexed(cfg).map_err(|e| format!("{}: {e}", path.display()))
}

/// A client from the pod's service account (in-cluster configuration).
pub fn in_cluster_client() -> Result<kube::Client, String> {
    let cfg = kube::Config::incluster().map_err(|e| format!("in-cluster configuration: {e}"))?;
    multiplexed(cfg).map_err(|e| format!("in-cluster client: {e}"))
}

/// A kube client that offers HTTP/2 (ALPN `h2`, falling back to HTTP/1.1), as client-go does:
/// the agent's watches and calls then share one TLS connection per API server instead of one
/// each. kube-rs's own builder speaks HTTP/1.1 only; this is its documented custom-client
/// path (its TLS configuration, base URI and auth layers around a hyper client).
fn multiplexed(cfg: kube::Config) -> Result<kube::Client, kube::Error> {
    use kube::client::ConfigExt as _;
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(Some(Duration::from_secs(5)));
    // HTTP/2 writes a request's HEADERS and DATA frames separately; with Nagle the second
    // waits for the server's delayed ACK, 40 ms a call (measured before this line).
    http.set_nodelay(true);
    let tls = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(cfg.rustls_client_config()?)
        .https_or_http();
    let tls = match &cfg.tls_server_name {
        Some(name) => tls.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(
            name.clone()
                .try_into()
                .map_err(|e| kube::Error::Service(Box::new(e)))?,
        )),
        None => tls,
    };
    let connector = tls.enable_all_versions().wrap_connector(http);
    let hyper = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .timer(hyper_util::rt::TokioTimer::new())
        .pool_timer(hyper_util::rt::TokioTimer::new())
        // A peer that vanished without closing is noticed by the pings, not the next watch.
        .http2_keep_alive_interval(Duration::from_secs(30))
        .http2_keep_alive_while_idle(true)
        .build(connector);
    let service = tower::ServiceBuilder::new()
        .layer(cfg.base_uri_layer())
        .option_layer(cfg.auth_layer()?)
        .map_err(tower::BoxError::from)
        .service(hyper);
    Ok(kube::Client::new(service, cfg.default_namespace))
}
