//! The node's own firewall on a pod trace's flow: a default-network pod to a node's address is
//! judged as that node's ingress (the datapath asks `sdn_hf_in` after the pod's egress), and a
//! node (or hostNetwork pod) to a pod of another node as the source node's egress
//! (`sdn_hf_out` on the tunnel device, before the destination's ingress). A node to its own
//! pods passes no firewall (their veths are not hooked by it: kubelet probes).
//!
//! The HostFirewalls are read from storage and compiled for that node by `cozyplane-policy`'s
//! `HfCompiler`, the agents' compiler, and judged by `verdict::hf`, the function the datapath
//! tests hold the kernel to. The node is known by its Node object (name, labels, the addresses
//! in its status): an agent adds its uplink's own addresses, which a pod's trace to such an
//! address does not see as the node's (a note says so).

use std::net::IpAddr;
use std::sync::Arc;

use cozyplane_apis::ApiKind;
use cozyplane_apis::v1alpha1::{
    API_SERVER_PORT, HostFirewall, PodTraceHostFirewall, PodTraceHostFirewallRule,
};
use cozyplane_policy::Dir;
use cozyplane_policy::hf::{HfCompiler, NodeInfo};
use cozyplane_policy::model::proto;
use cozyplane_policy::verdict::{self, Check};
use cozyplane_storage::{ListOptions, Storage};

use super::resolve::{Flow, Kind};
use super::world::PodWorld;
use crate::errors::{ApiError, Result};
use crate::registry::keys;

/// The kubelet's port: with the API server's, the node-to-node control ports the datapath
/// admits by destination port from a known node (`bpf/lib/hostfw.h`, `sdn_hf_control`).
const KUBELET_PORT: u16 = 10250;

/// Every HostFirewall, from storage.
pub async fn read(storage: &Arc<dyn Storage>) -> Result<Vec<HostFirewall>> {
    let listed = storage
        .list(&keys::prefix(&HostFirewall::INFO, None), &ListOptions::default())
        .await
        .map_err(|e| crate::alloc::storage_error(&e))?;
    listed
        .items
        .iter()
        .map(|kv| serde_json::from_slice(&kv.value).map_err(ApiError::internal))
        .collect()
}

fn node_info(w: &PodWorld, name: &str) -> Option<NodeInfo> {
    let n = w
        .nodes
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some(name))?;
    let mut addresses: Vec<IpAddr> = n
        .status
        .iter()
        .flat_map(|s| s.addresses.iter().flatten())
        .filter_map(|a| a.address.parse::<IpAddr>().ok().map(|a| a.to_canonical()))
        .collect();
    addresses.sort_unstable();
    addresses.dedup();
    Some(NodeInfo {
        name: name.to_string(),
        labels: n.metadata.labels.clone().unwrap_or_default(),
        addresses,
    })
}

fn dir_name(d: Dir) -> &'static str {
    match d {
        Dir::Ingress => "ingress",
        Dir::Egress => "egress",
    }
}

/// Which node's firewall the datapath asks, in which direction: `None` when the flow meets
/// none (pod to pod, a node to its own pods, anything with an outside end).
fn asked(flow: &Flow) -> Option<(&str, Dir)> {
    match (flow.src.kind, flow.dst.kind) {
        (Kind::Pod, Kind::Node) => Some((flow.dst.node.as_deref()?, Dir::Ingress)),
        (Kind::Node, Kind::Pod) => {
            let from = flow.src.node.as_deref()?;
            (flow.dst.node.as_deref() != Some(from)).then_some((from, Dir::Egress))
        }
        // Node to node: the destination's ingress (the source's egress is asked first on
        // the wire; a trace between two nodes is out of a tenant's namespace anyway).
        (Kind::Node, Kind::Node) => Some((flow.dst.node.as_deref()?, Dir::Ingress)),
        _ => None,
    }
}

/// Exempt before any rule (`sdn_hf_exempt`, `sdn_hf_control`): IPv6 neighbour and router
/// discovery and redirects; between two nodes, TCP to a control port.
fn exempt(flow: &Flow) -> bool {
    let icmp6_nd = flow.proto == proto::ICMPV6 && (133..=137).contains(&(flow.port >> 8));
    let control = flow.src.kind == Kind::Node
        && flow.dst.kind == Kind::Node
        && flow.proto == proto::TCP
        && (flow.port == API_SERVER_PORT || flow.port == KUBELET_PORT);
    icmp6_nd || control
}

/// The firewall's answer on `flow`, or `None` when the flow meets no node's firewall.
pub fn judge(w: &PodWorld, firewalls: &[HostFirewall], flow: &Flow) -> Option<PodTraceHostFirewall> {
    let (node, dir) = asked(flow)?;
    let mut c = HfCompiler::new(node_info(w, node)?);
    for f in firewalls
        .iter()
        .filter(|f| f.metadata.deletion_timestamp.is_none())
    {
        c.set_firewall(f);
    }
    let answer = |verdict: &str, decision: &str, rule| PodTraceHostFirewall {
        node: node.to_string(),
        direction: dir_name(dir).into(),
        verdict: verdict.into(),
        decision: decision.into(),
        rule,
    };
    let v = verdict::hf(c.tables(), flow.src.ip, flow.dst.ip, flow.proto, flow.port);
    let check = match dir {
        Dir::Ingress => v.ingress,
        Dir::Egress => v.egress,
    };
    Some(match check {
        Check::Open => answer("Allowed", "NotArmed", None),
        _ if exempt(flow) => answer("Allowed", "Exempt", None),
        Check::Denied => answer("Dropped", "DefaultDeny", None),
        Check::Rule(rid) => match c.rule_of(rid) {
            Some((name, d, _)) if name.is_empty() => answer(
                "Allowed",
                "Failsafe",
                Some(PodTraceHostFirewallRule {
                    direction: dir_name(d).into(),
                    ..PodTraceHostFirewallRule::default()
                }),
            ),
            Some((name, d, i)) => answer(
                "Allowed",
                "Rule",
                Some(PodTraceHostFirewallRule {
                    host_firewall: name,
                    direction: dir_name(d).into(),
                    index: i32::try_from(i).ok(),
                }),
            ),
            None => answer("Allowed", "Rule", None),
        },
    })
}
