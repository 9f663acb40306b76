//! The datapath map entries of one attachment.

use std::net::{IpAddr, Ipv4Addr};

use cozyplane_bpf::maps::bridges::BridgesMap;
use cozyplane_bpf::maps::endpoints::EndpointsMap;
use cozyplane_bpf::maps::ports::PortsMap;

use super::AgentState;
use crate::ipam::VpcAttachment;

impl AgentState {
    /// The map entries of one attachment: `fabric` is the node-block address; a VPC pod's
    /// endpoint is its VPC address in its VNI, and the fabric address is bridged to it.
    pub(super) fn write_maps(
        &self,
        ifindex: u32,
        fabric: Ipv4Addr,
        vpc: Option<&VpcAttachment>,
        mac: [u8; 6],
    ) -> Result<(), aya::maps::MapError> {
        let (net, ip) = vpc.map_or((0, fabric), |v| (v.vni, v.ip));
        // Endpoint first: once the port exists, sdn_from_pod checks the source against it.
        EndpointsMap::from_pin(&self.pin_dir)?.upsert(net, IpAddr::V4(ip), ifindex, mac)?;
        if vpc.is_some() {
            BridgesMap::from_pin(&self.pin_dir)?.upsert(IpAddr::V4(fabric), net, IpAddr::V4(ip))?;
        }
        PortsMap::from_pin(&self.pin_dir)?.set(ifindex, net)
    }

    /// Severs every attachment of this node whose record names Port `port` ([`crate::sever`]):
    /// its VPC endpoint gets `SDN_EP_F_SEVERED`, if it is still that attachment's (same veth).
    /// Returns how many were severed.
    pub(crate) fn sever_port(&self, port: &str) -> Result<usize, aya::maps::MapError> {
        let owned: Vec<(u32, u32, Ipv4Addr)> = self
            .ipam()
            .all()
            .filter_map(|a| {
                let v = a.vpc.as_ref().filter(|v| v.port == port)?;
                Some((a.host_ifindex?, v.vni, v.ip))
            })
            .collect();
        if owned.is_empty() {
            return Ok(0);
        }
        let mut eps = EndpointsMap::from_pin(&self.pin_dir)?;
        let mut n = 0;
        for (ifindex, vni, ip) in owned {
            if eps.sever(vni, IpAddr::V4(ip), ifindex)? {
                n += 1;
            }
        }
        Ok(n)
    }

    /// The Ports this node's attachment records name.
    pub(crate) fn recorded_ports(&self) -> Vec<String> {
        self.ipam()
            .all()
            .filter_map(|a| Some(a.vpc.as_ref()?.port.clone()))
            .collect()
    }

    /// Removes what [`Self::write_maps`] wrote (tolerates "already gone").
    pub(super) fn remove_maps(
        &self,
        ifindex: Option<u32>,
        fabric: Ipv4Addr,
        vpc: Option<&VpcAttachment>,
    ) -> Result<(), aya::maps::MapError> {
        if let Some(i) = ifindex {
            PortsMap::from_pin(&self.pin_dir)?.remove(i)?;
        }
        let (net, ip) = vpc.map_or((0, fabric), |v| (v.vni, v.ip));
        EndpointsMap::from_pin(&self.pin_dir)?.remove(net, IpAddr::V4(ip))?;
        if vpc.is_some() {
            BridgesMap::from_pin(&self.pin_dir)?.remove(IpAddr::V4(fabric))?;
        }
        Ok(())
    }
}
