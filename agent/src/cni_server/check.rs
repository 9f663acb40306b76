//! CHECK and STATUS.

use std::net::IpAddr;

use cozyplane_bpf::maps::bridges::BridgesMap;
use cozyplane_bpf::maps::endpoints::EndpointsMap;
use cozyplane_bpf::maps::ports::PortsMap;
use cozyplane_cni::proto::Request;
use cozyplane_cni::spec::{CniError, ErrorCode};

use super::{AgentState, host_veth_name, internal};
use crate::datapath::netdev::format_mac;

impl AgentState {
    pub(super) async fn check(&self, req: &Request) -> Result<(), CniError> {
        let env = &req.env;
        let fail = |msg: String| CniError::new(ErrorCode::CheckFailed, "attachment check failed", msg);
        let _attachment = self.attachments.lock(&env.container_id, &env.ifname).await;
        let alloc = self
            .ipam()
            .get(&env.container_id, &env.ifname)
            .cloned()
            .ok_or_else(|| {
                CniError::new(
                    ErrorCode::UnknownContainer,
                    "unknown attachment",
                    format!("{}/{} was never added on this node", env.container_id, env.ifname),
                )
            })?;
        // The runtime's view (prevResult) must name our address.
        if let Some(prev) = req.config.get("prevResult") {
            let want = format!("{}/32", alloc.ip);
            let listed = prev["ips"]
                .as_array()
                .is_some_and(|ips| ips.iter().any(|i| i["address"].as_str() == Some(&want)));
            if !listed {
                return Err(fail(format!("prevResult does not list {want}")));
            }
        }
        let host = host_veth_name(&env.container_id, &env.ifname);
        let hl = self
            .netdev
            .link(&host)
            .await
            .map_err(|e| internal("netlink", e))?
            .ok_or_else(|| fail(format!("host veth {host} is missing")))?;
        if !hl.up {
            return Err(fail(format!("host veth {host} is down")));
        }
        let (net, pod_ip) = alloc.vpc.as_ref().map_or((0, alloc.ip), |v| (v.vni, v.ip));
        let port = PortsMap::from_pin(&self.pin_dir)
            .and_then(|p| p.get(hl.index))
            .map_err(|e| internal("reading sdn_ports", e))?;
        if port.map(|p| p.net) != Some(net) {
            return Err(fail(format!(
                "sdn_ports[{}] is {port:?}, want net {net}",
                hl.index
            )));
        }
        if net != 0 {
            let br = BridgesMap::from_pin(&self.pin_dir)
                .and_then(|m| m.get(IpAddr::V4(alloc.ip)))
                .map_err(|e| internal("reading sdn_bridges", e))?;
            if br != Some((net, IpAddr::V4(pod_ip))) {
                return Err(fail(format!(
                    "sdn_bridges[{}] is {br:?}, want ({net}, {pod_ip})",
                    alloc.ip
                )));
            }
        }
        let ep = EndpointsMap::from_pin(&self.pin_dir)
            .and_then(|m| m.get(net, IpAddr::V4(pod_ip)))
            .map_err(|e| internal("reading sdn_endpoints", e))?
            .ok_or_else(|| fail(format!("sdn_endpoints has no entry for {net}/{pod_ip}")))?;
        if ep.ifindex != hl.index {
            return Err(fail(format!(
                "sdn_endpoints[{pod_ip}] points at ifindex {}, want {}",
                ep.ifindex, hl.index
            )));
        }
        let pod = self
            .netdev
            .inspect_pod(&env.netns, &env.ifname)
            .await
            .map_err(|e| internal("inspecting the pod netns", e))?
            .ok_or_else(|| fail(format!("{} is missing in {}", env.ifname, env.netns)))?;
        if pod.link.mac != ep.mac {
            return Err(fail(format!(
                "{} has MAC {}, the datapath expects {}",
                env.ifname,
                format_mac(pod.link.mac),
                format_mac(ep.mac)
            )));
        }
        if !pod.addrs.contains(&(pod_ip, 32)) {
            return Err(fail(format!(
                "{} lacks {pod_ip}/32 (has {:?})",
                env.ifname, pod.addrs
            )));
        }
        Ok(())
    }

    pub(super) fn status(&self) -> Result<(), CniError> {
        let ipam = self.ipam();
        if ipam.free() == 0 {
            return Err(CniError::new(
                ErrorCode::NotAvailable,
                "plugin not available",
                format!("fabric block {} is exhausted", ipam.block()),
            ));
        }
        Ok(())
    }
}
