//! `sdn_internal` (`bpf/include/sdn/internal_maps.h`), the cluster-internal ranges, written
//! here and nowhere else. Every feature that asks "is this address the cluster's own?"
//! reads it: net-0 masquerade (an internal destination keeps the pod's source), the VPC
//! gateway's NAT and the Floating IP and LoadBalancer doors (an internal destination, or
//! one in the VPC's own ranges, is never NATed out), and DNS steering (a VPC pod's port 53
//! to an internal address goes to the node's resolver).
//!
//! * **Net 0**: every node's fabric blocks (both families) and addresses (status
//!   `InternalIP`/`ExternalIP` and the announced tunnel address), from the Node watch; the
//!   Service CIDRs (`--service-cidr`); and `--internal-cidrs`, whatever else the operator
//!   counts as inside (a node-local DNS address, a range of hosts that must see pods
//!   un-NATed).
//! * **Net N**: VPC N's `spec.cidrs`.
//!
//! Why one set serves them all: each used to have its own map and flag (`sdn_snat_inside`
//! with `--service-cidr`, `sdn_internal` with `--internal-cidrs`, `sdn_dns_dsts` with
//! `--dns-internal-cidrs` and `--cluster-dns`), meant to name the same ranges. Growing
//! any reader's set is safe: NAT keeps more traffic inside (where isolation decides), and
//! steering turns what isolation would drop (a VPC pod's packet to a cluster address) into
//! an answer of the pod's own view. Steering needs every such address, not only the cluster
//! DNS's ClusterIP: a socket-level load balancer may have turned that into any backend's
//! pod or node address. The one real difference, whether the VPC's own ranges count
//! (gateway and doors: yes; masquerade and steering, which leave a VPC's own endpoints
//! alone: no), is which nets the reader looks up, so entries carry no per-feature flag.
//!
//! The core's watch of Nodes and VPCs ([`crate::core::watch`]) feeds it; this module is the
//! decision and the writes.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::Path;

use cozyplane_apis::net::IpNet;
use cozyplane_bpf::maps::internal::{InternalMap, NAME, Range};
use k8s_openapi::api::core::v1::Node;

use crate::core::api::{node_address, node_pod_block, node_pod_block6};

/// What one Node contributes: its fabric blocks and its addresses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct NodeRanges {
    /// Fabric blocks, both families.
    pub(crate) blocks: Vec<(IpAddr, u8)>,
    /// Its addresses (status, and the announced tunnel address).
    pub(crate) addrs: Vec<IpAddr>,
}

pub(crate) fn node_ranges(n: &Node) -> NodeRanges {
    let mut blocks: Vec<(IpAddr, u8)> = node_pod_block(n)
        .map(|b| (IpAddr::V4(b.base()), b.prefix()))
        .into_iter()
        .collect();
    blocks.extend(node_pod_block6(n).map(|b| (IpAddr::V6(b.base()), b.prefix())));
    let mut addrs: Vec<IpAddr> = n
        .status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .into_iter()
        .flatten()
        .filter(|a| a.type_ == "InternalIP" || a.type_ == "ExternalIP")
        .filter_map(|a| a.address.parse().ok())
        .collect();
    addrs.extend(node_address(n));
    NodeRanges { blocks, addrs }
}

/// The entries: `cluster` (`--service-cidr` and `--internal-cidrs`) and every node's ranges
/// at net 0, each VPC's ranges at its VNI (a VPC without one yet has no net).
pub(crate) fn desired<'a>(
    cluster: &[IpNet],
    nodes: impl IntoIterator<Item = &'a NodeRanges>,
    vpcs: impl IntoIterator<Item = (u32, &'a [(IpAddr, u8)])>,
) -> BTreeSet<Range> {
    let mut d: BTreeSet<Range> = cluster.iter().map(|c| (0, c.network(), c.prefix_len())).collect();
    for n in nodes {
        d.extend(n.blocks.iter().map(|(b, l)| (0, *b, *l)));
        d.extend(
            n.addrs
                .iter()
                .map(|a| (0, *a, if a.is_ipv4() { 32 } else { 128 })),
        );
    }
    for (vni, cidrs) in vpcs {
        if vni != 0 {
            d.extend(cidrs.iter().map(|(b, l)| (vni, *b, *l)));
        }
    }
    d
}

/// What is pinned now: adopted at start, so a restart removes only what the API lacks.
pub(crate) fn pinned(pin_dir: &Path) -> BTreeSet<Range> {
    crate::core::watch::pinned(InternalMap::from_pin(pin_dir), InternalMap::entries).collect()
}

/// Writes the difference: new ranges first (no door opens towards an internal range in
/// between), stale ones after, and only when `prunable` (every watch they come from listed).
pub(crate) fn sync(pin_dir: &Path, want: &BTreeSet<Range>, applied: &mut BTreeSet<Range>, prunable: bool) {
    if want == applied {
        return;
    }
    let Ok(mut map) = InternalMap::from_pin(pin_dir) else {
        tracing::warn!("{NAME} is not pinned under {}", pin_dir.display());
        return;
    };
    for r in want.difference(&applied.clone()) {
        match map.insert(*r) {
            Ok(()) => {
                applied.insert(*r);
            }
            Err(e) => tracing::warn!(range = ?r, "{NAME} insert: {e}"),
        }
    }
    if prunable {
        for r in applied.clone().difference(want) {
            match map.remove(*r) {
                Ok(()) => {
                    applied.remove(r);
                }
                Err(e) => tracing::warn!(range = ?r, "{NAME} remove: {e}"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn net_0_is_the_flags_and_every_nodes_blocks_and_addresses_and_each_vpc_has_its_own() {
        let n2 = NodeRanges {
            blocks: vec![(ip("10.244.2.0"), 24), (ip("fd00:244:2::"), 64)],
            addrs: vec![ip("192.168.77.2")],
        };
        let cluster: Vec<IpNet> = vec![
            "10.96.0.0/12".parse().unwrap(),
            "169.254.20.10/32".parse().unwrap(),
        ];
        let a = [(ip("10.30.0.0"), 24), (ip("fd00:a::"), 64)];
        let unnumbered = [(ip("10.9.0.0"), 24)];
        let got = desired(&cluster, [&n2], [(100, &a[..]), (0, &unnumbered[..])]);
        assert_eq!(
            got,
            BTreeSet::from([
                (0, ip("10.96.0.0"), 12),
                (0, ip("169.254.20.10"), 32),
                (0, ip("10.244.2.0"), 24),
                (0, ip("fd00:244:2::"), 64),
                (0, ip("192.168.77.2"), 32),
                (100, ip("10.30.0.0"), 24),
                (100, ip("fd00:a::"), 64),
            ])
        );
    }
}
