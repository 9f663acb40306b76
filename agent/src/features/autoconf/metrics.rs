//! Guest autoconfiguration's families: `cozyplane_autoconf_answers_total{kind}` (offer, ack,
//! nak, advertise, reply, release, decline, ra, ra_periodic, other_server),
//! `cozyplane_autoconf_drops_total{reason}` (malformed, no_port, mac, no_address,
//! unsupported), `cozyplane_autoconf_ignored_total{reason}` (no_ipv6: requests that are normal
//! traffic with no answer here, apart from the drops so that `rate(drops) > 0` can page) and
//! `cozyplane_autoconf_answer_seconds` (from the request read to the answer sent).

use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::Drop;
use crate::core::metrics::Labels;

/// The handles; cheap to clone.
#[derive(Clone, Debug)]
pub struct AutoconfMetrics {
    answers: Family<Labels, Counter>,
    drops: Family<Labels, Counter>,
    ignored: Family<Labels, Counter>,
    seconds: Histogram,
}

impl AutoconfMetrics {
    /// Register the families in `r`.
    pub fn register(r: &mut Registry) -> Self {
        let m = Self {
            answers: Family::default(),
            drops: Family::default(),
            ignored: Family::default(),
            // 10 µs .. ~80 ms.
            seconds: Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
                1e-5, 2.0, 14,
            )),
        };
        r.register(
            "cozyplane_autoconf_answers",
            "Guest DHCPv4/DHCPv6/router-solicitation requests answered, by answer kind",
            m.answers.clone(),
        );
        r.register(
            "cozyplane_autoconf_drops",
            "Guest autoconfiguration requests dropped without an answer, by reason",
            m.drops.clone(),
        );
        r.register(
            "cozyplane_autoconf_ignored",
            "Guest autoconfiguration requests left unanswered as normal traffic (a router \
             solicitation from a Port without IPv6), by reason",
            m.ignored.clone(),
        );
        r.register(
            "cozyplane_autoconf_answer_seconds",
            "Time from reading a guest's request to sending its answer",
            m.seconds.clone(),
        );
        m
    }

    /// One answer of `kind`, taking `d`.
    pub fn answer(&self, kind: &'static str, d: Duration) {
        self.answers
            .get_or_create(&vec![("kind", kind.to_string())])
            .inc();
        if !d.is_zero() {
            self.seconds.observe(d.as_secs_f64());
        }
    }

    /// One drop.
    pub fn drop(&self, d: Drop) {
        self.drops
            .get_or_create(&vec![("reason", d.label().to_string())])
            .inc();
    }

    /// One request left unanswered as normal traffic ([`super::Outcome::Ignored`]).
    pub fn ignored(&self, reason: &'static str) {
        self.ignored
            .get_or_create(&vec![("reason", reason.to_string())])
            .inc();
    }
}
