//! What the agent reads off a Node: the fabric blocks and the underlay address each agent
//! announces, with the Node's own spec and status as the fallback.

use std::net::{IpAddr, Ipv4Addr};

use k8s_openapi::api::core::v1::Node;

/// Announced by each agent on its Node: the fabric block it allocates from (which may be a
/// `--fabric-block` rather than the Node's `spec.podCIDR`).
pub const FABRIC_BLOCK_ANNOTATION: &str = "sdn.cozystack.io/fabric-block";
/// The same for the IPv6 fabric block of a dual-stack node.
pub const FABRIC_BLOCK6_ANNOTATION: &str = "sdn.cozystack.io/fabric-block6";
/// Announced by each agent on its Node: the underlay address its tunnel listens on (its
/// `--node-ip`, which on a multi-NIC node need not be the InternalIP).
pub const TUNNEL_IP_ANNOTATION: &str = "sdn.cozystack.io/tunnel-ip";

fn node_annotation<T: std::str::FromStr>(n: &Node, key: &str) -> Option<T> {
    n.metadata.annotations.as_ref()?.get(key)?.parse().ok()
}

/// A Node's fabric block: what its agent announced, else the first IPv4 block of its
/// `spec.podCIDRs` (or `spec.podCIDR`).
pub fn node_pod_block(n: &Node) -> Option<crate::core::ipam::Block> {
    node_annotation(n, FABRIC_BLOCK_ANNOTATION).or_else(|| node_spec_block(n))
}

/// A Node's IPv6 fabric block: what its agent announced, else the first IPv6 block of its
/// `spec.podCIDRs`.
pub fn node_pod_block6(n: &Node) -> Option<crate::core::ipam::Block6> {
    node_annotation(n, FABRIC_BLOCK6_ANNOTATION).or_else(|| node_spec_block6(n))
}

/// The first IPv6 block of a Node's `spec.podCIDRs` (or `spec.podCIDR`).
pub fn node_spec_block6(n: &Node) -> Option<crate::core::ipam::Block6> {
    let spec = n.spec.as_ref()?;
    spec.pod_cidrs
        .iter()
        .flatten()
        .chain(spec.pod_cidr.iter())
        .find_map(|c| c.parse().ok())
}

/// The first IPv4 block of a Node's `spec.podCIDRs` (or `spec.podCIDR`).
pub fn node_spec_block(n: &Node) -> Option<crate::core::ipam::Block> {
    let spec = n.spec.as_ref()?;
    spec.pod_cidrs
        .iter()
        .flatten()
        .chain(spec.pod_cidr.iter())
        .find_map(|c| c.parse().ok())
}

/// A Node's underlay address: what its agent announced (either family), else its first
/// IPv4 `InternalIP`, else its first IPv4 address.
pub fn node_address(n: &Node) -> Option<IpAddr> {
    if let Some(ip) = node_annotation(n, TUNNEL_IP_ANNOTATION) {
        return Some(ip);
    }
    let addrs = n.status.as_ref()?.addresses.as_ref()?;
    let v4 = |a: &&k8s_openapi::api::core::v1::NodeAddress| a.address.parse::<Ipv4Addr>().ok();
    addrs
        .iter()
        .filter(|a| a.type_ == "InternalIP")
        .find_map(|a| v4(&a))
        .or_else(|| addrs.iter().find_map(|a| v4(&a)))
        .map(IpAddr::V4)
}
