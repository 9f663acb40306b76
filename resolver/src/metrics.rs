//! The resolver's Prometheus metrics, registered into the agent's registry.
//!
//! - `cozyplane_dns_queries_total{transport,answer}`: every query answered, by what the
//!   answer said (`answer`, `nodata`, `nxdomain`, `refused`, `formerr`, `notimp`,
//!   `badvers`, `servfail`, `forwarded` for upstream answers relayed, and `dns64` for
//!   AAAA answers synthesized from the upstream's A records, [`crate::dns64`]);
//! - `cozyplane_dns_forwarded_total{transport,outcome}`: queries sent upstream, `ok` or
//!   `failed` (all upstreams failed: the client got SERVFAIL); a DNS64 answer counts its
//!   AAAA and its A question;
//! - `cozyplane_dns_refused_total`: queries from a source that is no VPC pod of this node;
//! - `cozyplane_dns_dropped_total{reason}`: queries not answered at all (too short, a
//!   response, the in-flight limit);
//! - `cozyplane_dns_latency_seconds{path}`: time from receipt to answer, `local` or
//!   `forwarded` (histogram).

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

type Labels = Vec<(&'static str, &'static str)>;

/// Handles on the resolver's metric families (cheap to clone).
#[derive(Clone, Debug)]
pub struct Metrics {
    queries: Family<Labels, Counter>,
    forwarded: Family<Labels, Counter>,
    refused: Counter,
    dropped: Family<Labels, Counter>,
    latency: Family<Labels, Histogram, fn() -> Histogram>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            queries: Family::default(),
            forwarded: Family::default(),
            refused: Counter::default(),
            dropped: Family::default(),
            // 20 µs .. ~5 s: a local answer is microseconds, a forwarded one up to the timeout.
            latency: Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.00002, 2.0, 18))),
        }
    }
}

impl Metrics {
    /// New metrics, registered into `r`.
    pub fn register(r: &mut Registry) -> Self {
        let m = Self::default();
        r.register(
            "cozyplane_dns_queries",
            "DNS queries answered by the node resolver, by transport and answer",
            m.queries.clone(),
        );
        r.register(
            "cozyplane_dns_forwarded",
            "DNS queries forwarded to the upstream resolvers, by transport and outcome",
            m.forwarded.clone(),
        );
        r.register(
            "cozyplane_dns_refused",
            "DNS queries refused: the source is no VPC pod of this node",
            m.refused.clone(),
        );
        r.register(
            "cozyplane_dns_dropped",
            "DNS queries not answered at all, by reason",
            m.dropped.clone(),
        );
        r.register(
            "cozyplane_dns_latency_seconds",
            "Time from a query's receipt to its answer, local or forwarded",
            m.latency.clone(),
        );
        m
    }

    pub(crate) fn query(&self, transport: &'static str, answer: &'static str) {
        self.queries
            .get_or_create(&vec![("transport", transport), ("answer", answer)])
            .inc();
        if answer == "refused" {
            self.refused.inc();
        }
    }

    pub(crate) fn forwarded(&self, transport: &'static str, ok: bool) {
        let outcome = if ok { "ok" } else { "failed" };
        self.forwarded
            .get_or_create(&vec![("transport", transport), ("outcome", outcome)])
            .inc();
    }

    pub(crate) fn dropped(&self, reason: &'static str) {
        self.dropped.get_or_create(&vec![("reason", reason)]).inc();
    }

    pub(crate) fn latency(&self, path: &'static str, d: std::time::Duration) {
        self.latency
            .get_or_create(&vec![("path", path)])
            .observe(d.as_secs_f64());
    }
}
