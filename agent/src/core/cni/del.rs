//! DEL and GC: everything an ADD created, found from the attachment record.

use std::collections::BTreeSet;

use cozyplane_bpf::maps::migrations::MigrationsMap;
use cozyplane_bpf::maps::ports::PortsMap;
use cozyplane_bpf::maps::sock_netns::SockNetnsMap;
use cozyplane_cni::spec::{CniError, ErrorCode};
use serde_json::Value;

use super::{AgentState, host_veth_name, internal};
use crate::core::ipam::Secondary;

impl AgentState {
    /// DEL of `(container_id, ifname)`; for the pod's network, the secondary interfaces its
    /// `sdn.cozystack.io/vpcs` listed go first (issue 37).
    pub(super) async fn del(&self, container_id: &str, ifname: &str) -> Result<(), CniError> {
        let listed: Vec<String> = {
            let ipam = self.ipam();
            // Only a recorded pod network cascades: the DEL of an interface this node has no
            // record of (a delegate's failed ADD, say) must not take the pod's listed ones.
            let primary = ipam
                .get(container_id, ifname)
                .is_some_and(|a| a.secondary.is_none());
            ipam.all()
                .filter(|a| {
                    primary && a.container_id == container_id && a.secondary == Some(Secondary::Listed)
                })
                .map(|a| a.ifname.clone())
                .collect()
        };
        for l in listed {
            self.del_one(container_id, &l).await?;
        }
        self.del_one(container_id, ifname).await
    }

    async fn del_one(&self, container_id: &str, ifname: &str) -> Result<(), CniError> {
        let _attachment = self.attachments.lock(container_id, ifname).await;
        let host = host_veth_name(container_id, ifname);
        let alloc = self.ipam().get(container_id, ifname).cloned();
        let link = self
            .netdev
            .link(&host)
            .await
            .map_err(|e| internal("looking up the pod veth failed", e))?;
        // The Port first: if our API is unreachable the DEL fails and is retried, with the
        // local state (and the record naming the Port) still in place.
        // A workload's Ports stay (issue 27): its next pod takes them, on any node.
        // A live migration's target going before the cutover: the holder keeps the Ports,
        // and is told to stop relaying (the Port's migrationTarget cleared).
        if let (Some(a), Some(api)) = (&alloc, &self.api)
            && let Some(v) = a
                .vpc
                .as_ref()
                .filter(|v| v.persistent && v.migration_peer.is_some())
            && let Some((ns, pod)) = a.pod.split_once('/')
        {
            for port in v.ports() {
                api.clear_migration_target(port, ns, pod).await?;
            }
        }
        if let Some(v) = alloc
            .as_ref()
            .and_then(|a| a.vpc.as_ref())
            .filter(|v| !v.persistent)
        {
            for port in v.ports() {
                match &self.api {
                    Some(api) => api.delete_port(port).await?,
                    None => tracing::warn!(%port, "no API configured: the Port is left behind"),
                }
            }
        }
        // sdn_ports is keyed by the host veth's ifindex. The runtime may have deleted the
        // sandbox netns before this DEL, and the veth (both ends) with it: then the record
        // names the ifindex. A freed ifindex may already belong to another pod's veth, whose
        // own record then names it: that entry is the other pod's and stays.
        let ifindex = link.as_ref().map(|l| l.index).or_else(|| {
            alloc
                .as_ref()
                .and_then(|a| a.host_ifindex)
                .filter(|i| !self.ipam().ifindex_owned_elsewhere(*i, container_id, ifname))
        });
        if let Some(i) = ifindex {
            PortsMap::from_pin(&self.pin_dir)
                .and_then(|mut p| p.remove(i))
                .map_err(|e| internal("removing map entries failed", e))?;
            // A live migration's relay of this veth (issue 27).
            if alloc
                .as_ref()
                .and_then(|a| a.vpc.as_ref())
                .is_some_and(|v| v.migration_peer.is_some())
            {
                MigrationsMap::from_pin(&self.pin_dir)
                    .and_then(|mut m| m.remove(i))
                    .map_err(|e| internal("removing map entries failed", e))?;
            }
        }
        if let Some(a) = &alloc {
            self.remove_maps(None, &a.fabric_ips(), a.vpc.as_ref())
                .map_err(|e| internal("removing map entries failed", e))?;
            // By the recorded cookie: the netns itself may be gone already.
            if let Some(c) = a.netns_cookie {
                SockNetnsMap::from_pin(&self.pin_dir)
                    .and_then(|mut m| m.remove(c))
                    .map_err(|e| internal("removing map entries failed", e))?;
            }
        }
        self.datapath()
            .detach(&host)
            .map_err(|e| internal("unpinning links failed", e))?;
        // Deleting the host end removes the pod end and the host route with it.
        self.netdev
            .delete(&host)
            .await
            .map_err(|e| internal("deleting the pod veth failed", e))?;
        // Nothing here uses the address any more: the server may release it. Before the record
        // goes, so a failure is retried by the runtime's next DEL.
        if let (Some(v), Some(api)) = (
            alloc
                .as_ref()
                .and_then(|a| a.vpc.as_ref())
                .filter(|v| !v.persistent),
            &self.api,
        ) {
            for port in v.ports() {
                api.release_port(port).await?;
            }
        }
        self.ipam().release(container_id, ifname);
        self.persist().await
    }

    /// CNI 1.1 `GC`: the runtime passes the attachments of this network it still holds, and
    /// every other attachment of this node goes (record, veth, map entries, Port). The spec
    /// names the key `cni.dev/attachments` and libcni sends the same list under both that and
    /// `cni.dev/valid-attachments` (containernetworking/cni#1101): either is read. Without a
    /// list the runtime said nothing about what it holds, so nothing is collected (reading a
    /// missing list as empty would tear down every pod of the node); a list that is not an
    /// array of `{containerID, ifname}` is refused whole (code 7) and removes nothing.
    pub(super) async fn gc(&self, config: &Value) -> Result<(), CniError> {
        let Some(list) = ["cni.dev/valid-attachments", "cni.dev/attachments"]
            .iter()
            .find_map(|k| config.get(*k).filter(|v| !v.is_null()))
        else {
            tracing::info!("gc: no list of valid attachments; nothing collected");
            return Ok(());
        };
        let invalid = |why: &str| {
            CniError::new(
                ErrorCode::InvalidConfig,
                "invalid cni.dev/valid-attachments",
                why.to_string(),
            )
        };
        let entries = list.as_array().ok_or_else(|| invalid("not an array"))?;
        let valid = entries
            .iter()
            .map(|a| {
                let field = |k: &str| a.get(k).and_then(Value::as_str).map(str::to_string);
                match (field("containerID"), field("ifname")) {
                    (Some(c), Some(i)) => Ok((c, i)),
                    _ => Err(invalid(&format!("{a}: needs containerID and ifname strings"))),
                }
            })
            .collect::<Result<BTreeSet<(String, String)>, CniError>>()?;
        // A secondary interface is the runtime's as long as its pod is: the runtime lists the
        // attachments of its own network, which a delegate's or a listed interface is not.
        let live: BTreeSet<&str> = valid.iter().map(|(c, _)| c.as_str()).collect();
        let stale: Vec<(String, String)> = {
            self.ipam()
                .all()
                .filter(|a| match a.secondary {
                    Some(_) => !live.contains(a.container_id.as_str()),
                    None => !valid.contains(&(a.container_id.clone(), a.ifname.clone())),
                })
                .map(|a| (a.container_id.clone(), a.ifname.clone()))
                .collect()
        };
        for (cid, ifname) in stale {
            tracing::info!(container = %cid, %ifname, "gc: removing stale attachment");
            self.del(&cid, &ifname).await?;
        }
        Ok(())
    }
}
