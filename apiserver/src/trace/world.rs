//! What a trace reads: the traced VPC, the VPCs its peering halves name (and whether each
//! pair is connected), their SecurityGroups and Ports, all read from storage at one
//! revision. Only the namespaces and VPCs involved are read: Port keys begin with their
//! VPC's VNI (`v<vni>.`), so a VPC's Ports are one prefix; groups and peerings are listed
//! per namespace.

use std::collections::BTreeMap;
use std::sync::Arc;

use cozyplane_apis::ApiKind;
use cozyplane_apis::net::{IpNet, parse_cidr};
use cozyplane_apis::v1alpha1::{Port, SecurityGroup, VPC, VPCPeering, VPCRef};
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
    let mut listed_ns: BTreeMap<String, Vec<SecurityGroup>> = BTreeMap::new();
    for n in nets.iter().filter(|n| n.connected && n.vni != 0) {
        if !listed_ns.contains_key(&n.vpc.namespace) {
            let gs = r
                .list(&keys::prefix(&SecurityGroup::INFO, Some(&n.vpc.namespace)))
                .await?;
            listed_ns.insert(n.vpc.namespace.clone(), gs);
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
    Ok(Some(World { nets, groups, ports }))
}
