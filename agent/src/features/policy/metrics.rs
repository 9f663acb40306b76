//! The policy writer's own metrics, in the agent's registry ([`crate::core::metrics::Metrics`]):
//!
//! - `cozyplane_policy_compile_seconds{layer}`: time the compiler took for one change (`np`,
//!   `anp`, `banp`, `sg`, `hf`; `layer="all"`, for the full build after a start);
//! - `cozyplane_policy_apply_seconds`: time writing one change's entries to the maps;
//! - `cozyplane_policy_applied_entries_total{op}`: entries written (`upsert`) and deleted
//!   (`remove`);
//! - `cozyplane_policy_generation_bumps_total`: changes that narrowed and re-checked
//!   established flows;
//! - `cozyplane_policy_refused_total{layer,reason}`: constructs the compiler refused
//!   (`layer`: `np`, `sg`, `hf`, `anp`, `banp`);
//! - `cozyplane_policy_sync_state`: 0 until every watch listed and the maps were reconciled,
//!   then 1.
//!
//! Entries per policy map are in `cozyplane_bpf_map_entries{map}` with the other maps
//! ([`map_sizes`]). What the layers refused in the datapath is read from `sdn_pol_drops` on
//! each scrape ([`DropCollector`]): `cozyplane_policy_drops_packets_total`,
//! `cozyplane_policy_drops_bytes_total` `{layer,reason,vni,vpc_namespace,vpc,node}`, by layer
//! (`np`, `sg`, `hf`, `anp`, `banp`), reason (`DROP_POL_*`) and VPC (a SecurityGroup drop carries the VPC
//! whose groups the flow met; NetworkPolicy's are `vni="0"` with empty names).

use std::path::Path;

use cozyplane_bpf::maps::pol_drops::PolDropsMap;
use cozyplane_policy::{Reason, Warning};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::core::metrics::{Labels, Scope, counter_family};

/// The policy families; cheap to clone (shared counters).
#[derive(Clone, Debug)]
pub struct PolicyMetrics {
    compile: Family<Labels, Histogram, fn() -> Histogram>,
    apply: Histogram,
    entries: Family<Labels, Counter>,
    bumps: Counter,
    refused: Family<Labels, Counter>,
    synced: Gauge,
}

fn seconds() -> Histogram {
    // 10 µs .. ~5 s: one label change is microseconds, a full build of a large cluster seconds.
    Histogram::new(exponential_buckets(0.00001, 3.0, 13))
}

impl PolicyMetrics {
    /// Register the families in `r`.
    pub fn register(r: &mut Registry) -> Self {
        let m = Self {
            compile: Family::new_with_constructor(seconds),
            apply: seconds(),
            entries: Family::default(),
            bumps: Counter::default(),
            refused: Family::default(),
            synced: Gauge::default(),
        };
        r.register(
            "cozyplane_policy_compile_seconds",
            "Time the policy compiler took for one change, by layer (all: the build after a start)",
            m.compile.clone(),
        );
        r.register(
            "cozyplane_policy_apply_seconds",
            "Time writing one policy change to the maps",
            m.apply.clone(),
        );
        r.register(
            "cozyplane_policy_applied_entries",
            "Policy map entries written (upsert) and deleted (remove)",
            m.entries.clone(),
        );
        r.register(
            "cozyplane_policy_generation_bumps",
            "Policy changes that narrowed, making established flows be re-checked",
            m.bumps.clone(),
        );
        r.register(
            "cozyplane_policy_refused",
            "Policy constructs the compiler refused (compiled closed), by layer and reason",
            m.refused.clone(),
        );
        r.register(
            "cozyplane_policy_sync_state",
            "1 once every policy watch listed and the maps were reconciled",
            m.synced.clone(),
        );
        m
    }

    /// A compile step of `layer` took `s` seconds.
    pub fn compiled(&self, layer: &'static str, s: f64) {
        self.compile
            .get_or_create(&vec![("layer", layer.into())])
            .observe(s);
    }

    /// A change was written.
    pub fn applied(&self, a: &super::apply::Applied, d: &cozyplane_policy::Diff) {
        self.apply.observe(a.seconds);
        let up = d.rules.upsert.len()
            + d.cidrs.upsert.len()
            + d.sg_members.upsert.len()
            + d.np_idents.upsert.len()
            + d.hf_self.upsert.len();
        let rm = d.len() - up - usize::from(d.state_flags.is_some());
        self.entries
            .get_or_create(&vec![("op", "upsert".into())])
            .inc_by(up as u64);
        self.entries
            .get_or_create(&vec![("op", "remove".into())])
            .inc_by(rm as u64);
        if a.bumped {
            self.bumps.inc();
        }
    }

    /// A construct was refused.
    pub fn refused(&self, w: &Warning) {
        let layer = match w.object.split_once(' ').map(|(k, _)| k) {
            Some("NetworkPolicy") => "np",
            Some("SecurityGroup") => "sg",
            Some("HostFirewall") => "hf",
            Some("AdminNetworkPolicy") => "anp",
            Some("BaselineAdminNetworkPolicy") => "banp",
            _ => "unknown",
        };
        self.refused
            .get_or_create(&vec![
                ("layer", layer.into()),
                ("reason", reason_name(&w.reason).into()),
            ])
            .inc();
    }

    /// The maps were reconciled with the full compile.
    pub fn synced(&self) {
        self.synced.set(1);
    }
}

/// A short, bounded label value for a [`Reason`].
fn reason_name(r: &Reason) -> &'static str {
    match r {
        Reason::Protocol(_) => "protocol",
        Reason::Port(_) => "port",
        Reason::EndPort(_) => "end_port",
        Reason::Cidr(_) => "cidr",
        Reason::Selector(_) => "selector",
        Reason::Peer(_) => "peer",
        Reason::NamedPortToBlock(_) => "named_port_to_block",
        Reason::UnknownGroup(_) => "unknown_group",
        Reason::UnknownVpc(_) => "unknown_vpc",
    }
}

/// Reads `sdn_pol_drops` on each scrape.
#[derive(Debug)]
pub struct DropCollector(pub Scope);

impl Collector for DropCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        // A map that cannot be opened (agent starting, pins wiped) is left out of the scrape.
        let Ok(map) = PolDropsMap::from_pin(&self.0.pin_dir) else {
            return Ok(());
        };
        let Ok(rows) = map.all() else { return Ok(()) };
        let (mut pk, mut by) = (Vec::new(), Vec::new());
        for r in rows {
            let mut l = vec![
                ("layer", layer_name(r.layer).to_string()),
                ("reason", r.reason.c_name().to_string()),
            ];
            l.extend(self.0.vpc_labels(r.net));
            pk.push((l.clone(), r.stats.packets));
            by.push((l, r.stats.bytes));
        }
        counter_family(
            &mut enc,
            "cozyplane_policy_drops_packets",
            "Packets the policy layers refused, by layer, reason and VPC (vni 0: the default network)",
            &pk,
        )?;
        counter_family(
            &mut enc,
            "cozyplane_policy_drops_bytes",
            "Bytes the policy layers refused, by layer, reason and VPC (vni 0: the default network)",
            &by,
        )
    }
}

/// The label value of a policy layer (`SDN_LAYER_*`).
fn layer_name(layer: u8) -> &'static str {
    use cozyplane_bpf::abi::{LAYER_ANP, LAYER_BANP, LAYER_HF, LAYER_NP, LAYER_SG};
    match layer {
        LAYER_SG => "sg",
        LAYER_NP => "np",
        LAYER_HF => "hf",
        LAYER_ANP => "anp",
        LAYER_BANP => "banp",
        _ => "unknown",
    }
}

/// Entries of each policy map the agent writes, by walking their keys (the kernel keeps no
/// count); maps that are not pinned are left out.
pub fn map_sizes(dir: &Path) -> Vec<(&'static str, usize)> {
    use cozyplane_bpf::maps::{
        hf_self::{self, HfSelfMap},
        np_idents::{self, NpIdentsMap},
        pol_cidrs::{self, PolCidrsMap},
        pol_rules::{self, PolRulesMap},
        sg_members::{self, SgMembersMap},
    };
    let mut out = Vec::new();
    if let Ok(m) = PolRulesMap::from_pin(dir) {
        out.push((pol_rules::NAME, m.inner().keys().count()));
    }
    if let Ok(m) = PolCidrsMap::from_pin(dir) {
        out.push((pol_cidrs::NAME, m.inner().keys().count()));
    }
    if let Ok(m) = SgMembersMap::from_pin(dir) {
        out.push((sg_members::NAME, m.inner().keys().count()));
    }
    if let Ok(m) = NpIdentsMap::from_pin(dir) {
        out.push((np_idents::NAME, m.inner().keys().count()));
    }
    if let Ok(m) = HfSelfMap::from_pin(dir) {
        out.push((hf_self::NAME, m.inner().keys().count()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_and_sync_show_in_the_exposition() {
        let mut r = Registry::default();
        let m = PolicyMetrics::register(&mut r);
        m.refused(&Warning {
            object: "NetworkPolicy shop/x".into(),
            field: "spec.ingress[0].ports[0]".into(),
            reason: Reason::Protocol("ICMP".into()),
        });
        m.refused(&Warning {
            object: "AdminNetworkPolicy floor".into(),
            field: "spec.egress[0].to[0]".into(),
            reason: Reason::Peer("domainNames (not enforced)".into()),
        });
        m.refused(&Warning {
            object: "BaselineAdminNetworkPolicy default".into(),
            field: "spec.ingress[0].ports[0]".into(),
            reason: Reason::Port("0".into()),
        });
        m.synced();
        m.compiled("np", 0.001);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &r).unwrap();
        assert!(
            out.contains("cozyplane_policy_refused_total{layer=\"np\",reason=\"protocol\"} 1"),
            "{out}"
        );
        assert!(
            out.contains("cozyplane_policy_refused_total{layer=\"anp\",reason=\"peer\"} 1"),
            "{out}"
        );
        assert!(
            out.contains("cozyplane_policy_refused_total{layer=\"banp\",reason=\"port\"} 1"),
            "{out}"
        );
        assert_eq!(layer_name(cozyplane_bpf::abi::LAYER_ANP), "anp");
        assert_eq!(layer_name(cozyplane_bpf::abi::LAYER_BANP), "banp");
        assert!(out.contains("cozyplane_policy_sync_state 1"), "{out}");
        assert!(
            out.contains("cozyplane_policy_compile_seconds_count{layer=\"np\"} 1"),
            "{out}"
        );
    }
}
