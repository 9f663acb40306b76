//! The Service proxy's families: per Service, `cozyplane_service_frontends` and
//! `cozyplane_service_backends` (what this node programmed for it),
//! `cozyplane_service_update_seconds` (an event of the watch to its maps written), and the
//! socket path's counters (`sdn_sock_stats`, [`SockCollector`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use cozyplane_bpf::maps::sock_stats::SockStatsMap;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric as _};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::core::lb::{Frontend, Want};

/// A Service's labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ServiceLabels {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub service: String,
}

fn update_histogram() -> Histogram {
    // 100 µs .. ~3 s.
    Histogram::new(exponential_buckets(0.0001, 2.0, 15))
}

/// The handles the watch loop updates.
#[derive(Clone, Debug)]
pub struct ServiceMetrics {
    frontends: Family<ServiceLabels, Gauge>,
    backends: Family<ServiceLabels, Gauge>,
    update: Histogram,
}

impl Default for ServiceMetrics {
    fn default() -> Self {
        Self {
            frontends: Family::default(),
            backends: Family::default(),
            update: update_histogram(),
        }
    }
}

fn labels(k: &(String, String)) -> ServiceLabels {
    ServiceLabels {
        namespace: k.0.clone(),
        service: k.1.clone(),
    }
}

impl ServiceMetrics {
    /// Register the families in `r`.
    pub fn register(r: &mut Registry) -> Self {
        let m = Self::default();
        r.register(
            "cozyplane_service_frontends",
            "Frontends (address, protocol, port) this node programmed for a Service",
            m.frontends.clone(),
        );
        r.register(
            "cozyplane_service_backends",
            "Backends of a Service's frontends on this node, summed over its frontends",
            m.backends.clone(),
        );
        r.register(
            "cozyplane_service_update_seconds",
            "From a Service or EndpointSlice event to its frontends written",
            m.update.clone(),
        );
        m
    }

    /// Record what `k` has now.
    pub fn set(&self, k: &(String, String), fronts: &BTreeMap<Frontend, Want>) {
        let l = labels(k);
        self.frontends.get_or_create(&l).set(fronts.len() as i64);
        let n: usize = fronts.values().map(|w| w.backends.len()).sum();
        self.backends.get_or_create(&l).set(n as i64);
    }

    /// Drop a Service that has no frontends any more.
    pub fn forget(&self, k: &(String, String)) {
        let l = labels(k);
        self.frontends.remove(&l);
        self.backends.remove(&l);
    }

    /// One update's time.
    pub fn observe_sync(&self, d: Duration) {
        self.update.observe(d.as_secs_f64());
    }
}

/// Reads `sdn_sock_stats` under its pin directory on each scrape (summed over CPUs).
#[derive(Debug)]
pub struct SockCollector(pub PathBuf);

impl Collector for SockCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Ok(s) = SockStatsMap::from_pin(&self.0).and_then(|m| m.get()) else {
            return Ok(());
        };
        for (name, help, v) in [
            (
                "cozyplane_sock_lb_connects",
                "connect() calls to a Service frontend made straight to a backend",
                s.connects,
            ),
            (
                "cozyplane_sock_lb_datagrams",
                "UDP datagrams to a Service frontend sent straight to a backend",
                s.datagrams,
            ),
            (
                "cozyplane_sock_lb_refused",
                "connect()/sendto() to a frontend without endpoints, refused",
                s.refused,
            ),
            (
                "cozyplane_sock_lb_reversed",
                "Peer addresses shown to the application as the frontend",
                s.reversed,
            ),
        ] {
            let m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
            ConstCounter::new(v).encode(m)?;
        }
        Ok(())
    }
}
