//! What a trace reads: the traced VPC, the VPCs its peering halves name (and whether each
//! pair is connected), their SecurityGroups and Ports, and the traced VPC's doors (its
//! FloatingIPs and VPCGateways), all read from storage at one revision. Only the namespaces and VPCs involved are read: Port keys begin with their
//! VPC's VNI (`v<vni>.`), so a VPC's Ports are one prefix; groups and peerings are listed
//! per namespace.

use std::collections::BTreeMap;
use std::sync::Arc;

use cozyplane_apis::ApiKind;
use cozyplane_apis::net::{IpNet, parse_cidr};
use cozyplane_apis::v1alpha1::{
    FloatingIP, Port, SecurityGroup, ServiceVIP, VPC, VPCGateway, VPCPeering, VPCRef,
};
use cozyplane_storage::{ListOptions, Revision, Storage};
use serde::de::DeserializeOwned;

use crate::alloc::kinds::vpc_vni;
use crate::errors::{ApiError, Result};
use crate::registry::{keys, vpc_peering};

/// A VPC of the trace and how it relates to the traced one.
#[derive(Clone, Debug)]
pub struct Net {
    /// Namespace and name.
    pub vpc: VPCRef,
    /// Its VNI (the datapath's net), 0 while it has none.
    pub vni: u32,
    /// Its ranges.
    pub cidrs: Vec<IpNet>,
    /// The traced VPC itself, or a peer whose pair is Ready (the datapath connects them).
    pub connected: bool,
}

/// The objects a trace of one VPC needs.
#[derive(Debug, Default)]
pub struct World {
    /// The traced VPC first, then the VPCs its peering halves name.
    pub nets: Vec<Net>,
    /// The SecurityGroups of the connected VPCs.
    pub groups: Vec<SecurityGroup>,
    /// The Ports of the connected VPCs.
    pub ports: Vec<Port>,
    /// The addresses of the connected VPCs' ServiceVIPs (`(vpc, address)`): held, though by
    /// no Port.
    pub vips: Vec<(VPCRef, std::net::IpAddr)>,
    /// The traced VPC's FloatingIPs.
    pub fips: Vec<FloatingIP>,
    /// The traced VPC's VPCGateways.
    pub gateways: Vec<VPCGateway>,
    /// The cluster's own ranges as the agents count them at net 0 (every Node's fabric blocks
    /// and addresses): an outside end in one is isolated, never let out by a door. Read from
    /// the kube-apiserver's Nodes ([`cluster_ranges`]); empty without a connection to it.
    pub internal: Vec<IpNet>,
}

struct Reader<'a> {
    storage: &'a Arc<dyn Storage>,
    revision: Option<Revision>,
}

impl Reader<'_> {
    async fn list<T: DeserializeOwned>(&mut self, prefix: &str) -> Result<Vec<T>> {
        let opts = ListOptions {
            revision: self.revision,
            ..ListOptions::default()
        };
        let listed = self
            .storage
            .list(prefix, &opts)
            .await
            .map_err(|e| crate::alloc::storage_error(&e))?;
        if self.revision.is_none() {
            self.revision = Some(listed.revision);
        }
        listed
            .items
            .iter()
            .map(|kv| serde_json::from_slice(&kv.value).map_err(ApiError::internal))
            .collect()
    }
}

fn key_of(v: &VPC) -> VPCRef {
    VPCRef {
        namespace: v.metadata.namespace.clone().unwrap_or_default(),
        name: v.metadata.name.clone().unwrap_or_default(),
    }
}

fn net_of(v: &VPC, connected: bool) -> Net {
    Net {
        vpc: key_of(v),
        vni: vpc_vni(v),
        cidrs: v.spec.cidrs.iter().filter_map(|c| parse_cidr(c).ok()).collect(),
        connected,
    }
}

/// Reads the world of VPC `ns/name`; `None` when there is no such VPC.
pub async fn read(storage: &Arc<dyn Storage>, ns: &str, name: &str) -> Result<Option<World>> {
    let mut r = Reader {
        storage,
        revision: None,
    };
    let mut vpcs: BTreeMap<String, Vec<VPC>> = BTreeMap::new();
    let local: Vec<VPC> = r.list(&keys::prefix(&VPC::INFO, Some(ns))).await?;
    let Some(me) = local
        .iter()
        .find(|v| v.metadata.name.as_deref() == Some(name))
        .cloned()
    else {
        return Ok(None);
    };
    vpcs.insert(ns.to_string(), local);
    let mut peerings: BTreeMap<String, Vec<VPCPeering>> = BTreeMap::new();
    peerings.insert(
        ns.to_string(),
        r.list(&keys::prefix(&VPCPeering::INFO, Some(ns))).await?,
    );
    let halves: Vec<VPCPeering> = peerings[ns]
        .iter()
        .filter(|p| p.spec.vpc_ref.name == name && p.metadata.deletion_timestamp.is_none())
        .cloned()
        .collect();
    let mut nets = vec![net_of(&me, true)];
    for p in &halves {
        let peer_ns = if p.spec.peer_ref.namespace.is_empty() {
            ns.to_string()
        } else {
            p.spec.peer_ref.namespace.clone()
        };
        if !vpcs.contains_key(&peer_ns) {
            let listed = r.list(&keys::prefix(&VPC::INFO, Some(&peer_ns))).await?;
            vpcs.insert(peer_ns.clone(), listed);
        }
        if !peerings.contains_key(&peer_ns) {
            let listed = r.list(&keys::prefix(&VPCPeering::INFO, Some(&peer_ns))).await?;
            peerings.insert(peer_ns.clone(), listed);
        }
        let Some(remote) = vpcs[&peer_ns]
            .iter()
            .find(|v| v.metadata.name.as_deref() == Some(p.spec.peer_ref.name.as_str()))
        else {
            continue;
        };
        let matched = peerings[&peer_ns].iter().any(|q| vpc_peering::reciprocates(p, q));
        let ready = vpc_peering::status(p, Some(&me), Some(remote), matched).phase == "Ready";
        let n = net_of(remote, ready);
        if !nets.iter().any(|m| m.vpc == n.vpc) {
            nets.push(n);
        }
    }
    let mut groups = Vec::new();
    let mut ports = Vec::new();
    let mut vips = Vec::new();
    let mut listed_ns: BTreeMap<String, Vec<SecurityGroup>> = BTreeMap::new();
    for n in nets.iter().filter(|n| n.connected && n.vni != 0) {
        if !listed_ns.contains_key(&n.vpc.namespace) {
            let gs = r
                .list(&keys::prefix(&SecurityGroup::INFO, Some(&n.vpc.namespace)))
                .await?;
            listed_ns.insert(n.vpc.namespace.clone(), gs);
            let vs: Vec<ServiceVIP> = r
                .list(&keys::prefix(&ServiceVIP::INFO, Some(&n.vpc.namespace)))
                .await?;
            for v in vs {
                let vpc = VPCRef {
                    namespace: if v.spec.vpc_ref.namespace.is_empty() {
                        n.vpc.namespace.clone()
                    } else {
                        v.spec.vpc_ref.namespace.clone()
                    },
                    name: v.spec.vpc_ref.name.clone(),
                };
                if let Ok(ip) = v.spec.ip.parse::<std::net::IpAddr>() {
                    vips.push((vpc, ip.to_canonical()));
                }
            }
        }
        groups.extend(
            listed_ns[&n.vpc.namespace]
                .iter()
                .filter(|g| g.spec.vpc_ref.name == n.vpc.name)
                .cloned(),
        );
        let prefix = format!("{}v{}.", keys::prefix(&Port::INFO, None), n.vni);
        let mine: Vec<Port> = r.list(&prefix).await?;
        ports.extend(mine.into_iter().filter(|p| p.spec.vpc_ref == n.vpc));
    }
    let fips: Vec<FloatingIP> = r.list(&keys::prefix(&FloatingIP::INFO, Some(ns))).await?;
    let gateways: Vec<VPCGateway> = r.list(&keys::prefix(&VPCGateway::INFO, Some(ns))).await?;
    Ok(Some(World {
        fips: fips.into_iter().filter(|f| f.spec.vpc_ref.name == name).collect(),
        gateways: gateways
            .into_iter()
            .filter(|g| g.spec.vpc_ref.name == name)
            .collect(),
        nets,
        groups,
        ports,
        vips,
        internal: Vec::new(),
    }))
}

/// The fabric-block annotations a node's agent announces its blocks in (the agent's
/// `core::api::nodes`); without them, a Node's `spec.podCIDRs` are its blocks.
const FABRIC_BLOCK_ANNOTATIONS: [&str; 2] =
    ["sdn.cozystack.io/fabric-block", "sdn.cozystack.io/fabric-block6"];

/// The cluster's own ranges of every Node: fabric blocks (announced, else `spec.podCIDRs`) and
/// the addresses of its status.
pub async fn cluster_ranges(kube: &kube::Client) -> Result<Vec<IpNet>> {
    use k8s_openapi::api::core::v1::Node;
    let api = crate::rbac::server::NODES
        .uses("list")
        .api_all::<Node>(kube.clone());
    let nodes = api.list(&kube::api::ListParams::default()).await.map_err(|e| {
        ApiError::unavailable(format!(
            "the trace could not read the Nodes from the kube-apiserver: {e}"
        ))
    })?;
    let mut out = Vec::new();
    for n in &nodes.items {
        let announced: Vec<IpNet> = n
            .metadata
            .annotations
            .iter()
            .flatten()
            .filter(|(k, _)| FABRIC_BLOCK_ANNOTATIONS.contains(&k.as_str()))
            .filter_map(|(_, v)| parse_cidr(v).ok())
            .collect();
        if announced.is_empty() {
            let spec = n.spec.as_ref();
            out.extend(
                spec.and_then(|s| s.pod_cidrs.clone())
                    .unwrap_or_default()
                    .iter()
                    .chain(spec.and_then(|s| s.pod_cidr.as_ref()))
                    .filter_map(|c| parse_cidr(c).ok()),
            );
        }
        out.extend(announced);
        out.extend(
            n.status
                .iter()
                .flat_map(|s| s.addresses.iter().flatten())
                .filter_map(|a| a.address.parse::<std::net::IpAddr>().ok())
                .map(|a| IpNet::from(a.to_canonical())),
        );
    }
    Ok(out)
}
