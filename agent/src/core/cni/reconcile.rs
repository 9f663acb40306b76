//! Start-up reconciliation: the kernel state made to match the IPAM records.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::Path;

use cozyplane_bpf::maps::bridges::BridgesMap;
use cozyplane_bpf::maps::endpoints::EndpointsMap;
use cozyplane_bpf::maps::ports::PortsMap;
use cozyplane_bpf::maps::sock_netns::SockNetnsMap;

use super::{AgentState, HOST_VETH_PREFIX, host_veth_name};
use crate::core::datapath::netdev::parse_mac;
use crate::core::datapath::netns_cookie;
use crate::core::ipam::Allocation;

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
        let mut live_eps: BTreeSet<(u32, IpAddr)> = BTreeSet::new();
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
                    self.ipam()
                        .set_host_ifindex((&a.container_id, &a.ifname), l.index);
                    let fabric = a.fabric_ips();
                    let (net, ips) = super::maps::endpoint_ips(&fabric, a.vpc.as_ref());
                    live_eps.extend(ips.into_iter().map(|ip| (net, ip)));
                    if a.vpc.is_some() {
                        live_bridges.extend(fabric.iter().copied());
                    }
                    let res = async {
                        self.datapath().attach_pod(&host).map_err(|e| e.to_string())?;
                        // Pinned TCX links are what agents before cls_bpf attach left; the
                        // filters replace them (unpinned, the links go).
                        self.datapath().detach(&host).map_err(|e| e.to_string())?;
                        self.write_maps(l.index, &fabric, a.vpc.as_ref(), mac)
                            .map_err(|e| e.to_string())?;
                        for ip in &fabric {
                            self.netdev
                                .pod_host_routes(l.index, *ip, mac)
                                .await
                                .map_err(|e| e.to_string())?;
                        }
                        Ok::<_, String>(())
                    }
                    .await;
                    if let Err(e) = res {
                        tracing::warn!(%host, "reconcile: {e}");
                        self.sync_error("reconcile");
                    }
                    kept += 1;
                    // The socket hooks' entry; a record from before cookies were recorded gets
                    // its pod's cookie now (its netns is there: so is its veth). A secondary
                    // interface has none: the netns is its primary attachment's.
                    if a.secondary.is_some() {
                        continue;
                    }
                    let cookie = match a.netns_cookie {
                        Some(c) => Ok(c),
                        None => netns_cookie::of_path(Path::new(&a.netns)).map_err(|e| e.to_string()),
                    };
                    let registered = cookie.and_then(|c| {
                        SockNetnsMap::from_pin(&self.pin_dir)
                            .and_then(|mut m| m.upsert(c, net))
                            .map_err(|e| e.to_string())?;
                        self.ipam().set_netns_cookie((&a.container_id, &a.ifname), c);
                        Ok(())
                    });
                    if let Err(e) = registered {
                        tracing::warn!(%host, "reconcile: the pod's sdn_sock_netns entry: {e}");
                        self.sync_error("reconcile");
                    }
                }
                _ => {
                    let _ = self.datapath().detach(&host);
                    let _ = self.netdev.delete(&host).await;
                    let _ = self.remove_maps(None, &a.fabric_ips(), a.vpc.as_ref());
                    if let Some(c) = a.netns_cookie {
                        let _ = SockNetnsMap::from_pin(&self.pin_dir).and_then(|mut m| m.remove(c));
                    }
                    if let (Some(v), Some(api)) = (&a.vpc, &self.api) {
                        for port in v.ports() {
                            if let Err(e) = api.discard_port(port).await {
                                tracing::warn!(%port, "reconcile: {e}");
                            }
                        }
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
            let stale: Vec<(u32, IpAddr)> = eps
                .inner()
                .keys()
                .filter_map(Result::ok)
                .map(|k| (k.net, IpAddr::from(k.ip)))
                .filter(|k| !live_eps.contains(k))
                .collect();
            for (net, ip) in stale {
                let _ = eps.remove(net, ip);
            }
        }
        if let Ok(mut br) = BridgesMap::from_pin(&self.pin_dir) {
            let stale: Vec<IpAddr> = br
                .inner()
                .keys()
                .filter_map(Result::ok)
                .map(IpAddr::from)
                .filter(|ip| !live_bridges.contains(ip))
                .collect();
            for ip in stale {
                let _ = br.remove(ip);
            }
        }
        if let Err(e) = self.persist().await {
            tracing::warn!("reconcile: {e}");
            self.sync_error("reconcile");
        }
        tracing::info!(kept, released, "reconciled pod attachments");
    }
}
