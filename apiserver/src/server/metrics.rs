//! `/metrics`: Prometheus text exposition of request counters, of whether this replica leads
//! the controllers ([`crate::controllers::leader::LEADING`]) and of the kube-apiserver
//! informers ([`crate::informer`]).

use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// Labels of `apiserver_request_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// HTTP method.
    pub verb: String,
    /// HTTP status code.
    pub code: u16,
}

/// The server's metrics.
pub struct Metrics {
    registry: Mutex<Registry>,
    /// Requests by verb and code.
    pub requests: Family<RequestLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "apiserver_request",
            "Requests served, by verb and code",
            requests.clone(),
        );
        registry.register(
            "cozyplane_controller_leader",
            "1 while this replica holds the controller leader lease (its control loops work), else 0",
            crate::controllers::leader::LEADING.clone(),
        );
        registry.register(
            "cozyplane_port_migrations",
            "Live migrations of VMs whose Ports this replica moved (cutover), left with the source (rolled_back), or found without a prepared target (not_prepared)",
            crate::controllers::kube_loops::migration::MIGRATIONS.clone(),
        );
        registry.register(
            "cozyplane_port_migration_cutover_seconds",
            "From a VMI update saying the migrated domain runs on the target (as this replica received it) to every Port of the VM moved there",
            crate::controllers::kube_loops::migration::CUTOVER.clone(),
        );
        Self {
            registry: Mutex::new(registry),
            requests,
        }
    }
}

impl Metrics {
    /// Lets another part of the server register its metrics.
    pub fn register(&self, f: impl FnOnce(&mut Registry)) {
        f(&mut self
            .registry
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner));
    }

    /// Text exposition.
    pub fn encode(&self) -> String {
        let mut s = String::new();
        let r = self
            .registry
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let _ = prometheus_client::encoding::text::encode(&mut s, &r);
        s
    }
}
