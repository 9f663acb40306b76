//! Overlay trust's families, read from `sdn_forged` on each scrape:
//! `cozyplane_overlay_forged_packets_total{node,address,reason}` and
//! `cozyplane_overlay_forged_bytes_total{node,address,reason}`: overlay packets from a known
//! node that this node dropped because they claimed what the sender does not hold. `node` is
//! the **sending** node's name (its tunnel address when no Node has that address now, e.g. a
//! Node deleted since), `address` its tunnel address, `reason` `source` (an inner source, or
//! net, the sender does not hold: `DROP_OVERLAY_FORGED_SRC`) or `tag` (a group tag that is not
//! the inner source's groups: `DROP_OVERLAY_FORGED_TAG`). The same packets are in
//! `cozyplane_drops_packets_total` under those reasons, without the sender. The map's entries
//! are in `cozyplane_bpf_map_entries` ([`map_sizes`]).

use std::net::IpAddr;
use std::path::Path;

use cozyplane_bpf::DropReason;
use cozyplane_bpf::maps::forged::{self, Forged, ForgedMap};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;

use crate::core::metrics::{Labels, Scope, counter_family};

/// Reads `sdn_forged` under the scope's pin directory on each scrape.
#[derive(Debug)]
pub struct ForgedCollector(pub Scope);

impl Collector for ForgedCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        // A map that cannot be opened (agent starting, pins wiped, a datapath without the
        // check) is left out of the scrape.
        let Ok(map) = ForgedMap::from_pin(&self.0.pin_dir) else {
            return Ok(());
        };
        let Ok(all) = map.all() else { return Ok(()) };
        let (pk, by) = rows(&all, |ip| self.0.nodes.get(ip));
        counter_family(
            &mut enc,
            "cozyplane_overlay_forged_packets",
            "Overlay packets dropped as forged (an inner source, net or group tag the sending node does not hold), by sending node and reason",
            &pk,
        )?;
        counter_family(
            &mut enc,
            "cozyplane_overlay_forged_bytes",
            "Bytes of overlay packets dropped as forged, by sending node and reason",
            &by,
        )
    }
}

/// The `reason` label of a forged-packet reason.
fn reason_label(r: DropReason) -> &'static str {
    match r {
        DropReason::OverlayForgedSrc => "source",
        DropReason::OverlayForgedTag => "tag",
        other => other.c_name(),
    }
}

/// Rows of one counter family: labels and value.
type Rows = Vec<(Labels, u64)>;

/// The packet and byte rows of `all`, each sender named by `name` (its tunnel address when
/// `name` knows none).
fn rows(all: &[Forged], name: impl Fn(IpAddr) -> Option<String>) -> (Rows, Rows) {
    let (mut pk, mut by) = (Vec::new(), Vec::new());
    for f in all {
        let address = f.node.to_string();
        let l: Labels = vec![
            ("node", name(f.node).unwrap_or_else(|| address.clone())),
            ("address", address),
            ("reason", reason_label(f.reason).to_string()),
        ];
        pk.push((l.clone(), f.stats.packets));
        by.push((l, f.stats.bytes));
    }
    (pk, by)
}

/// Entries of `sdn_forged` (senders × reasons seen since the map was created).
pub fn map_sizes(dir: &Path) -> Vec<(&'static str, usize)> {
    match ForgedMap::from_pin(dir) {
        Ok(m) => vec![(forged::NAME, m.inner().keys().count())],
        Err(_) => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use cozyplane_bpf::abi::DropStats;
    use prometheus_client::registry::Registry;

    use super::*;
    use crate::core::metrics::{MetricsBuilder, NodeNames, VpcNames};

    fn row(node: &str, reason: DropReason, packets: u64) -> Forged {
        Forged {
            node: node.parse().unwrap(),
            reason,
            stats: DropStats {
                packets,
                bytes: packets * 100,
            },
        }
    }

    #[test]
    fn senders_are_named_by_node_else_by_address() {
        let names = HashMap::from([
            ("192.168.0.1".parse::<IpAddr>().unwrap(), "n1".to_string()),
            ("fd77::2".parse().unwrap(), "n2".to_string()),
        ]);
        let all = [
            row("192.168.0.1", DropReason::OverlayForgedSrc, 3),
            row("192.168.0.1", DropReason::OverlayForgedTag, 1),
            row("fd77::2", DropReason::OverlayForgedSrc, 2),
            // A node no Node has the address of (deleted since): its address.
            row("192.168.0.9", DropReason::OverlayForgedTag, 5),
        ];
        let (pk, by) = rows(&all, |ip| names.get(&ip).cloned());
        let l = |n: &str, a: &str, r: &str| -> Labels {
            vec![("node", n.into()), ("address", a.into()), ("reason", r.into())]
        };
        assert_eq!(
            pk,
            vec![
                (l("n1", "192.168.0.1", "source"), 3),
                (l("n1", "192.168.0.1", "tag"), 1),
                (l("n2", "fd77::2", "source"), 2),
                (l("192.168.0.9", "192.168.0.9", "tag"), 5),
            ]
        );
        assert_eq!(by[3], (l("192.168.0.9", "192.168.0.9", "tag"), 500));
    }

    #[test]
    fn other_reasons_keep_their_c_name() {
        assert_eq!(reason_label(DropReason::OverlayForgedSrc), "source");
        assert_eq!(reason_label(DropReason::OverlayForgedTag), "tag");
        assert_eq!(reason_label(DropReason::OverlaySource), "DROP_OVERLAY_SOURCE");
    }

    #[test]
    fn names_the_core_sets_later_reach_the_collector() {
        let dir = tempfile::tempdir().unwrap();
        let b = MetricsBuilder::new(dir.path().to_path_buf(), "n2".into(), VpcNames::default());
        let collector = ForgedCollector(b.scope().clone());
        // What run.rs hands the Node watch, filled after the collector was registered.
        let names: NodeNames = b.scope().nodes.clone();
        let n1: IpAddr = "192.168.0.1".parse().unwrap();
        names.set([(n1, "n1".to_string())]);
        assert_eq!(collector.0.nodes.get(n1).as_deref(), Some("n1"));
        assert_eq!(collector.0.nodes.get("192.168.0.2".parse().unwrap()), None);
        // Without a pinned map the collector adds nothing and fails nothing.
        let mut r = Registry::default();
        r.register_collector(Box::new(collector));
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &r).unwrap();
        assert!(!out.contains("cozyplane_overlay_forged"), "{out}");
    }
}
