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
