//! NetworkPolicy on the default network: inputs, the translation of policies
//! ([`ir`]) and the incremental compiler ([`NpCompiler`]).

pub mod admin;
mod compiler;
pub mod ir;
mod tiers;

use std::net::IpAddr;

use k8s_openapi::api::core::v1::{Namespace, Pod};

pub use compiler::{NpCompiler, rule_id};

use crate::identity::NamedPort;
use crate::model::proto;
use crate::selector::Labels;

/// What the compiler needs of a Pod.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodInfo {
    /// Namespace.
    pub ns: String,
    /// Name.
    pub name: String,
    /// Labels.
    pub labels: Labels,
    /// `status.podIPs`.
    pub ips: Vec<IpAddr>,
    /// `spec.hostNetwork`: such a pod is its node to NetworkPolicy, never a subject or a
    /// selected peer.
    pub host_network: bool,
    /// Named container ports.
    pub named_ports: Vec<NamedPort>,
}

impl PodInfo {
    /// Read a Pod.
    pub fn from_k8s(p: &Pod) -> Self {
        let spec = p.spec.clone().unwrap_or_default();
        let named_ports = spec
            .containers
            .iter()
            .flat_map(|c| c.ports.iter().flatten())
            .filter_map(|cp| {
                let name = cp.name.clone()?;
                let pr = match cp.protocol.as_deref().unwrap_or("TCP") {
                    "TCP" => proto::TCP,
                    "UDP" => proto::UDP,
                    "SCTP" => proto::SCTP,
                    _ => return None,
                };
                Some((name, pr, u16::try_from(cp.container_port).ok()?))
            })
            .collect();
        let status = p.status.clone().unwrap_or_default();
        let ips = status
            .pod_ips
            .iter()
            .flatten()
            .filter_map(|i| i.ip.parse().ok())
            .chain(status.pod_ip.iter().filter_map(|i| i.parse().ok()))
            .fold(Vec::new(), |mut v: Vec<IpAddr>, ip| {
                if !v.contains(&ip) {
                    v.push(ip);
                }
                v
            });
        Self {
            ns: p.metadata.namespace.clone().unwrap_or_default(),
            name: p.metadata.name.clone().unwrap_or_default(),
            labels: p.metadata.labels.clone().unwrap_or_default(),
            ips,
            host_network: spec.host_network.unwrap_or(false),
            named_ports,
        }
    }
}

/// What the compiler needs of a Namespace: its labels.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NamespaceInfo {
    /// Name.
    pub name: String,
    /// Labels (the API server sets `kubernetes.io/metadata.name`).
    pub labels: Labels,
}

impl NamespaceInfo {
    /// Read a Namespace.
    pub fn from_k8s(n: &Namespace) -> Self {
        Self {
            name: n.metadata.name.clone().unwrap_or_default(),
            labels: n.metadata.labels.clone().unwrap_or_default(),
        }
    }
}

/// What the compiler needs of a Node: what AdminNetworkPolicy `nodes` peers select.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeInfo {
    /// Name.
    pub name: String,
    /// Labels.
    pub labels: Labels,
    /// `status.addresses` that are IP addresses.
    pub ips: Vec<IpAddr>,
}

impl NodeInfo {
    /// Read a Node.
    pub fn from_k8s(n: &k8s_openapi::api::core::v1::Node) -> Self {
        let mut ips: Vec<IpAddr> = n
            .status
            .iter()
            .flat_map(|s| s.addresses.iter().flatten())
            .filter_map(|a| a.address.parse().ok())
            .collect();
        ips.sort();
        ips.dedup();
        Self {
            name: n.metadata.name.clone().unwrap_or_default(),
            labels: n.metadata.labels.clone().unwrap_or_default(),
            ips,
        }
    }
}
