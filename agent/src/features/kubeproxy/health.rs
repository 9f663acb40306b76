//! The health-check node ports of LoadBalancer Services with `externalTrafficPolicy: Local`,
//! answered as kube-proxy answers them: any GET on `<node>:<healthCheckNodePort>` gets
//! `{"service":{"namespace":…,"name":…},"localEndpoints":N,"serviceProxyHealthy":true}`,
//! `200` when this node has a ready endpoint of the Service, `503` when it has none, so a
//! cloud load balancer sends outside traffic only to nodes that can serve it locally.

use std::collections::{BTreeMap, HashMap};
use std::net::{Ipv6Addr, SocketAddr};
use std::sync::{Arc, RwLock};

use axum::http::StatusCode;
use axum::response::IntoResponse;

use super::state::Key;

/// The listeners, one per port, and what each answers.
#[derive(Default)]
pub struct HealthServers {
    answers: Arc<RwLock<HashMap<u16, (Key, usize)>>>,
    listeners: HashMap<u16, tokio::task::JoinHandle<()>>,
}

impl Drop for HealthServers {
    fn drop(&mut self) {
        for (_, l) in self.listeners.drain() {
            l.abort();
        }
    }
}

fn answer(key: &Key, local: usize) -> (StatusCode, String) {
    let body = serde_json::json!({
        "service": { "namespace": key.0, "name": key.1 },
        "localEndpoints": local,
        "serviceProxyHealthy": true,
    });
    let code = if local > 0 {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, body.to_string())
}

impl HealthServers {
    /// Serve exactly `want` (port → Service and its local endpoints): new ports are bound
    /// (every address, both families), gone ones closed, the others answer the new count.
    pub fn sync(&mut self, want: &BTreeMap<u16, (Key, usize)>) {
        {
            let mut a = self
                .answers
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            a.clear();
            a.extend(want.iter().map(|(p, v)| (*p, v.clone())));
        }
        self.listeners.retain(|port, task| {
            let keep = want.contains_key(port);
            if !keep {
                task.abort();
            }
            keep
        });
        for port in want.keys() {
            if self.listeners.contains_key(port) {
                continue;
            }
            let addr = SocketAddr::from((Ipv6Addr::UNSPECIFIED, *port));
            let listener = match std::net::TcpListener::bind(addr).and_then(|l| {
                l.set_nonblocking(true)?;
                tokio::net::TcpListener::from_std(l)
            }) {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!(port, "health-check node port: bind: {e}");
                    continue;
                }
            };
            let answers = self.answers.clone();
            let port_ = *port;
            let app = axum::Router::new().fallback(move || {
                let answers = answers.clone();
                async move {
                    let a = answers.read().unwrap_or_else(std::sync::PoisonError::into_inner);
                    match a.get(&port_) {
                        Some((key, n)) => answer(key, *n).into_response(),
                        None => StatusCode::NOT_FOUND.into_response(),
                    }
                }
            });
            let task = tokio::spawn(async move {
                if let Err(e) = axum::serve(listener, app).await {
                    tracing::warn!(port = port_, "health-check node port: {e}");
                }
            });
            tracing::info!(port, "health-check node port served");
            self.listeners.insert(*port, task);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_is_kube_proxys() {
        let key = ("ns".to_string(), "lb".to_string());
        let (code, body) = answer(&key, 2);
        assert_eq!(code, StatusCode::OK);
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["service"]["namespace"], "ns");
        assert_eq!(v["service"]["name"], "lb");
        assert_eq!(v["localEndpoints"], 2);
        assert_eq!(answer(&key, 0).0, StatusCode::SERVICE_UNAVAILABLE);
    }
}
