//! `sdn_mig_peers`: where else another node's Port lives while KubeVirt migrates its VM (issue
//! 27, `bpf/lib/migrate.h`). Fed from the Port watch in [`crate::core::watch`]: a Port on
//! another node with a `spec.migrationTarget` on a third node (this node's own migrations are
//! the CNI's and the migrate feature's) becomes `{vni, spec.ip} → target's node address`, so
//! overlay trust takes the VM's packets from its target before the Port moves. Pinned entries
//! are adopted at start and pruned only once the Port and VPC watches listed.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;

use cozyplane_bpf::maps::mig_peers::MigPeersMap;

use crate::core::watch::plan;

type Key = (u32, IpAddr);

/// `((vni, ip), target)` of other nodes' Ports, each with its target's node and address.
pub(crate) fn desired<'a>(
    me: &str,
    ports: impl IntoIterator<Item = (Option<Key>, &'a str, Option<(&'a str, IpAddr)>)>,
) -> HashMap<Key, IpAddr> {
    ports
        .into_iter()
        .filter(|(_, node, _)| *node != me)
        .filter_map(|(k, _, t)| {
            let (tnode, tip) = t?;
            (tnode != me).then_some((k?, tip))
        })
        .collect()
}

/// What is pinned now.
pub(crate) fn pinned(pin_dir: &Path) -> HashMap<Key, IpAddr> {
    MigPeersMap::from_pin(pin_dir)
        .map(|m| m.entries().into_iter().collect())
        .unwrap_or_default()
}

/// Writes the difference; removal only once `synced`.
pub(crate) fn sync(
    pin_dir: &Path,
    want: &HashMap<Key, IpAddr>,
    applied: &mut HashMap<Key, IpAddr>,
    synced: bool,
) {
    let Ok(mut map) = MigPeersMap::from_pin(pin_dir) else {
        tracing::warn!("sdn_mig_peers is not pinned under {}", pin_dir.display());
        return;
    };
    let (write, remove) = plan(want, applied, |_| synced);
    for ((net, ip), node) in write {
        match map.upsert(net, ip, node) {
            Ok(()) => {
                applied.insert((net, ip), node);
            }
            Err(e) => tracing::warn!(net, %ip, "sdn_mig_peers upsert: {e}"),
        }
    }
    for (net, ip) in remove {
        if map.remove(net, ip).is_ok() {
            applied.remove(&(net, ip));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_nodes_ports_migrating_to_a_third_node() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let d = desired(
            "n1",
            [
                // n2 → n3: this node trusts n3 for it.
                (Some((100, ip("10.0.0.2"))), "n2", Some(("n3", ip("192.0.2.3")))),
                // n2 → n1 (here): the CNI's.
                (Some((100, ip("10.0.0.3"))), "n2", Some(("n1", ip("192.0.2.1")))),
                // Held here: the migrate feature's.
                (Some((100, ip("10.0.0.4"))), "n1", Some(("n3", ip("192.0.2.3")))),
                (Some((100, ip("10.0.0.5"))), "n2", None),
                (None, "n2", Some(("n3", ip("192.0.2.3")))),
            ],
        );
        assert_eq!(d, HashMap::from([((100, ip("10.0.0.2")), ip("192.0.2.3"))]));
    }
}
