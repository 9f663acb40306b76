//! CHECK and STATUS.

use std::net::IpAddr;

use cozyplane_bpf::maps::bridges::BridgesMap;
use cozyplane_bpf::maps::endpoints::EndpointsMap;
use cozyplane_bpf::maps::ports::PortsMap;
use cozyplane_cni::proto::Request;
use cozyplane_cni::spec::{CniError, ErrorCode};

use super::{AgentState, host_veth_name, internal};
use crate::core::datapath::netdev::format_mac;

fn fail(msg: String) -> CniError {
    CniError::new(ErrorCode::CheckFailed, "attachment check failed", msg)
}

impl AgentState {
    pub(super) async fn check(&self, req: &Request) -> Result<(), CniError> {
        let env = &req.env;
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
        // The runtime's view (prevResult) must name our address: the fabric one, or a
        // secondary interface's VPC addresses.
        if let Some(prev) = req.config.get("prevResult") {
            let reported: Vec<IpAddr> = match (&alloc.secondary, &alloc.vpc) {
                (Some(_), Some(v)) => v.ips().collect(),
                _ => alloc.fabric_ips(),
            };
            for f in reported {
                let want = super::add::host_prefix(f);
                let listed = prev["ips"]
                    .as_array()
                    .is_some_and(|ips| ips.iter().any(|i| i["address"].as_str() == Some(&want)));
                if !listed {
                    return Err(fail(format!("prevResult does not list {want}")));
                }
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
        let fabric = alloc.fabric_ips();
        let (net, pod_ips) = super::maps::endpoint_ips(&fabric, alloc.vpc.as_ref());
        let port = PortsMap::from_pin(&self.pin_dir)
            .and_then(|p| p.get(hl.index))
            .map_err(|e| internal("reading sdn_ports", e))?;
        if port.map(|p| p.net) != Some(net) {
            return Err(fail(format!(
                "sdn_ports[{}] is {port:?}, want net {net}",
                hl.index
            )));
        }
        if let Some(v) = &alloc.vpc {
            for (f, vip) in super::maps::bridged(&fabric, v) {
                let br = BridgesMap::from_pin(&self.pin_dir)
                    .and_then(|m| m.get(f))
                    .map_err(|e| internal("reading sdn_bridges", e))?;
                if br != Some((net, vip)) {
                    return Err(fail(format!("sdn_bridges[{f}] is {br:?}, want ({net}, {vip})")));
                }
            }
        }
        let pod = self
            .netdev
            .inspect_pod(&env.netns, &env.ifname)
            .await
            .map_err(|e| internal("inspecting the pod netns", e))?
            .ok_or_else(|| fail(format!("{} is missing in {}", env.ifname, env.netns)))?;
        for pod_ip in pod_ips {
            self.check_endpoint(&env.ifname, &pod, hl.index, net, pod_ip)?;
        }
        Ok(())
    }

    /// The endpoint `{net, pod_ip}` is this veth's, with the pod's MAC, and the pod has it.
    fn check_endpoint(
        &self,
        ifname: &str,
        pod: &crate::core::datapath::netdev::PodSide,
        host_index: u32,
        net: u32,
        pod_ip: IpAddr,
    ) -> Result<(), CniError> {
        let ep = EndpointsMap::from_pin(&self.pin_dir)
            .and_then(|m| m.get(net, pod_ip))
            .map_err(|e| internal("reading sdn_endpoints", e))?
            .ok_or_else(|| fail(format!("sdn_endpoints has no entry for {net}/{pod_ip}")))?;
        if ep.ifindex != host_index {
            return Err(fail(format!(
                "sdn_endpoints[{pod_ip}] points at ifindex {}, want {host_index}",
                ep.ifindex
            )));
        }
        if pod.link.mac != ep.mac {
            return Err(fail(format!(
                "{ifname} has MAC {}, the datapath expects {}",
                format_mac(pod.link.mac),
                format_mac(ep.mac)
            )));
        }
        let len = if pod_ip.is_ipv4() { 32 } else { 128 };
        if !pod.addrs.contains(&(pod_ip, len)) {
            return Err(fail(format!(
                "{ifname} lacks {pod_ip}/{len} (has {:?})",
                pod.addrs
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
