//! Start-up reconciliation: the kernel state made to match the IPAM records.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};

use cozyplane_bpf::maps::bridges::BridgesMap;
use cozyplane_bpf::maps::endpoints::EndpointsMap;
use cozyplane_bpf::maps::ports::PortsMap;

use super::{AgentState, HOST_VETH_PREFIX, host_veth_name};
use crate::datapath::netdev::parse_mac;
use crate::ipam::Allocation;

impl AgentState {
    /// Make the kernel state match the IPAM records after a restart, without tearing
    /// anything down: pods whose veth still exists get their map entries, routes and
    /// program links re-asserted (links are updated in place); pods whose veth is gone
    /// (deleted while the agent was down) are released; a host veth without a record (an
    /// ADD that never finished: the record is written last) is deleted, with the routes,
    /// neighbour and filters it carries; map entries nobody owns are pruned.
    pub(super) async fn reconcile(&self) {
        let allocs: Vec<Allocation> = self.ipam().all().cloned().collect();
        let recorded: BTreeSet<String> = allocs
            .iter()
            .map(|a| host_veth_name(&a.container_id, &a.ifname))
            .collect();
        match self.netdev.link_names(HOST_VETH_PREFIX).await {
            Ok(names) => {
                for name in names.iter().filter(|n| !recorded.contains(*n)) {
                    tracing::info!(host = %name, "removing the veth of an ADD that never finished");
                    let _ = self.datapath().detach(name);
                    if let Err(e) = self.netdev.delete(name).await {
                        tracing::warn!(host = %name, "reconcile: {e}");
                        self.sync_error("reconcile");
                    }
                }
            }
            Err(e) => {
                tracing::warn!("reconcile: {e}");
                self.sync_error("reconcile");
            }
        }
        let mut live_ifindex = BTreeSet::new();
        let mut live_eps: BTreeSet<(u32, Ipv4Addr)> = BTreeSet::new();
        let mut live_bridges = BTreeSet::new();
        let (mut kept, mut released) = (0, 0);
        for a in allocs {
            let host = host_veth_name(&a.container_id, &a.ifname);
            let link = match self.netdev.link(&host).await {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!(%host, "reconcile: {e}");
                    self.sync_error("reconcile");
                    continue;
                }
            };
            match (link, a.mac.as_deref().and_then(parse_mac)) {
                (Some(l), Some(mac)) => {
                    live_ifindex.insert(l.index);
                    self.ipam().set_host_ifindex(a.ip, l.index);
                    match &a.vpc {
                        None => live_eps.insert((0, a.ip)),
                        Some(v) => {
                            live_bridges.insert(a.ip);
                            live_eps.insert((v.vni, v.ip))
                        }
                    };
                    let res = async {
                        self.datapath().attach_pod(&host).map_err(|e| e.to_string())?;
                        // Pinned TCX links are what agents before cls_bpf attach left; the
                        // filters replace them (unpinned, the links go).
                        self.datapath().detach(&host).map_err(|e| e.to_string())?;
                        self.write_maps(l.index, a.ip, a.vpc.as_ref(), mac)
                            .map_err(|e| e.to_string())?;
                        self.netdev
                            .pod_host_routes(l.index, a.ip, mac)
                            .await
                            .map_err(|e| e.to_string())
                    }
                    .await;
                    if let Err(e) = res {
                        tracing::warn!(%host, "reconcile: {e}");
                        self.sync_error("reconcile");
                    }
                    kept += 1;
                }
                _ => {
                    let _ = self.datapath().detach(&host);
                    let _ = self.netdev.delete(&host).await;
                    let _ = self.remove_maps(None, a.ip, a.vpc.as_ref());
                    if let (Some(v), Some(api)) = (&a.vpc, &self.api)
                        && let Err(e) = api.discard_port(&v.port).await
                    {
                        tracing::warn!(port = %v.port, "reconcile: {e}");
                    }
                    self.ipam().release(&a.container_id, &a.ifname);
                    released += 1;
                }
            }
        }
        // Entries without an owner (e.g. a pod deleted while the agent was down).
        if let Ok(mut ports) = PortsMap::from_pin(&self.pin_dir) {
            let stale: Vec<u32> = ports
                .inner()
                .keys()
                .filter_map(Result::ok)
                .filter(|k| !live_ifindex.contains(k))
                .collect();
            for k in stale {
                let _ = ports.remove(k);
            }
        }
        if let Ok(mut eps) = EndpointsMap::from_pin(&self.pin_dir) {
            let stale: Vec<(u32, Ipv4Addr)> = eps
                .inner()
                .keys()
                .filter_map(Result::ok)
                .filter_map(|k| Some((k.net, k.ip.to_v4()?)))
                .filter(|k| !live_eps.contains(k))
                .collect();
            for (net, ip) in stale {
                let _ = eps.remove(net, IpAddr::V4(ip));
            }
        }
        if let Ok(mut br) = BridgesMap::from_pin(&self.pin_dir) {
            let stale: Vec<Ipv4Addr> = br
                .inner()
                .keys()
                .filter_map(Result::ok)
                .filter_map(cozyplane_bpf::Addr::to_v4)
                .filter(|ip| !live_bridges.contains(ip))
                .collect();
            for ip in stale {
                let _ = br.remove(IpAddr::V4(ip));
            }
        }
        if let Err(e) = self.persist().await {
            tracing::warn!("reconcile: {e}");
            self.sync_error("reconcile");
        }
        tracing::info!(kept, released, "reconciled pod attachments");
    }
}
