//! DEL and GC: everything an ADD created, found from the attachment record.

use std::collections::BTreeSet;

use cozyplane_bpf::maps::ports::PortsMap;
use cozyplane_cni::spec::CniError;
use serde_json::Value;

use super::{AgentState, host_veth_name, internal};

impl AgentState {
    pub(super) async fn del(&self, container_id: &str, ifname: &str) -> Result<(), CniError> {
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
        if let Some(v) = alloc.as_ref().and_then(|a| a.vpc.as_ref()) {
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
        }
        if let Some(a) = &alloc {
            self.remove_maps(None, &a.fabric_ips(), a.vpc.as_ref())
                .map_err(|e| internal("removing map entries failed", e))?;
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
        if let (Some(v), Some(api)) = (alloc.as_ref().and_then(|a| a.vpc.as_ref()), &self.api) {
            for port in v.ports() {
                api.release_port(port).await?;
            }
        }
        self.ipam().release(container_id, ifname);
        self.persist().await
    }

    pub(super) async fn gc(&self, config: &Value) -> Result<(), CniError> {
        let valid: BTreeSet<(String, String)> = config["cni.dev/valid-attachments"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| {
                Some((
                    a["containerID"].as_str()?.to_string(),
                    a["ifname"].as_str()?.to_string(),
                ))
            })
            .collect();
        let stale: Vec<(String, String)> = {
            self.ipam()
                .all()
                .map(|a| (a.container_id.clone(), a.ifname.clone()))
                .filter(|k| !valid.contains(k))
                .collect()
        };
        for (cid, ifname) in stale {
            tracing::info!(container = %cid, %ifname, "gc: removing stale attachment");
            self.del(&cid, &ifname).await?;
        }
        Ok(())
    }
}
