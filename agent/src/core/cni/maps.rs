//! The datapath map entries of one attachment.

use std::net::IpAddr;

use cozyplane_bpf::abi::Endpoint;
use cozyplane_bpf::maps::bridges::BridgesMap;
use cozyplane_bpf::maps::endpoints::EndpointsMap;
use cozyplane_bpf::maps::migrations::MigrationsMap;
use cozyplane_bpf::maps::ports::PortsMap;

use super::AgentState;
use crate::core::ipam::VpcAttachment;

impl AgentState {
    /// The map entries of one attachment: `fabric` are the node-block addresses (one per
    /// family); a VPC pod's endpoints are its VPC addresses in its VNI, and each fabric
    /// address is bridged to the VPC address of its family (see [`bridged`]).
    pub(super) fn write_maps(
        &self,
        ifindex: u32,
        fabric: &[IpAddr],
        vpc: Option<&VpcAttachment>,
        mac: [u8; 6],
    ) -> Result<(), aya::maps::MapError> {
        let (net, ips) = endpoint_ips(fabric, vpc);
        // A live migration's target relays from its first packet, standing by until its VM
        // announces itself here (lib/migrate.h): the relay entry before the flagged endpoints.
        let peer = vpc.and_then(|v| v.migration_peer);
        let flags = match peer {
            Some(node) => {
                MigrationsMap::from_pin(&self.pin_dir)?.upsert(ifindex, node, true)?;
                Endpoint::F_MIGRATING
            }
            None => 0,
        };
        // Endpoints first: once the port exists, sdn_from_pod checks the source against them.
        let mut eps = EndpointsMap::from_pin(&self.pin_dir)?;
        for ip in ips {
            eps.upsert_flagged(net, ip, ifindex, mac, flags)?;
        }
        if let Some(v) = vpc {
            let mut br = BridgesMap::from_pin(&self.pin_dir)?;
            for (f, ip) in bridged(fabric, v) {
                br.upsert(f, net, ip)?;
            }
        }
        PortsMap::from_pin(&self.pin_dir)?.set(ifindex, net)
    }

    /// Severs every attachment of this node whose record names Port `port` (the revocation feature, `features/sever`):
    /// the VPC endpoint of the address that Port holds (a dual-stack attachment has one Port
    /// per family) gets `SDN_EP_F_SEVERED`, if it is still that attachment's (same veth).
    /// Returns how many were severed.
    pub(crate) fn sever_port(&self, port: &str) -> Result<usize, aya::maps::MapError> {
        let owned: Vec<(u32, u32, IpAddr)> = self
            .ipam()
            .all()
            .filter_map(|a| {
                let v = a.vpc.as_ref()?;
                let ip = if v.port == port {
                    v.ip
                } else {
                    v.other.as_ref().filter(|o| o.port == port)?.ip
                };
                Some((a.host_ifindex?, v.vni, ip))
            })
            .collect();
        if owned.is_empty() {
            return Ok(0);
        }
        let mut eps = EndpointsMap::from_pin(&self.pin_dir)?;
        let mut n = 0;
        for (ifindex, vni, ip) in owned {
            if eps.sever(vni, ip, ifindex)? {
                n += 1;
            }
        }
        Ok(n)
    }

    /// Starts (`Some(node)`) or ends (`None`) the relay of every attachment of this node whose
    /// record names Port `port` (issue 27, `features/migrate`): the endpoint's
    /// `SDN_EP_F_MIGRATING` and its `sdn_migrations` entry, and the record's
    /// `migration_peer`. Only attachments whose pod holds (`holder: Some`) or does not hold the
    /// Port are touched, as `holder` says. Returns how many changed.
    pub(crate) fn relay_port(
        &self,
        port: &str,
        holder: Option<&str>,
        peer: Option<IpAddr>,
    ) -> Result<usize, aya::maps::MapError> {
        let owned: Vec<(String, String, u32, u32, Vec<IpAddr>)> = self
            .ipam()
            .all()
            .filter(|a| holder.is_none_or(|h| a.pod == h))
            .filter_map(|a| {
                let v = a.vpc.as_ref()?;
                (v.ports().any(|p| p == port) && v.migration_peer != peer).then(|| {
                    (
                        a.container_id.clone(),
                        a.ifname.clone(),
                        a.host_ifindex.unwrap_or(0),
                        v.vni,
                        v.ips().collect(),
                    )
                })
            })
            .collect();
        let mut n = 0;
        for (cid, ifname, ifindex, vni, ips) in owned {
            if ifindex == 0 {
                continue;
            }
            let mut relays = MigrationsMap::from_pin(&self.pin_dir)?;
            if let Some(node) = peer {
                relays.upsert(ifindex, node, false)?;
            }
            let mut eps = EndpointsMap::from_pin(&self.pin_dir)?;
            for ip in ips {
                eps.flag(vni, ip, ifindex, Endpoint::F_MIGRATING, peer.is_some())?;
            }
            if peer.is_none() {
                relays.remove(ifindex)?;
            }
            self.ipam().set_migration_peer(&cid, &ifname, peer);
            n += 1;
        }
        Ok(n)
    }

    /// The Ports this node's attachment records name (both of a dual-stack attachment).
    pub(crate) fn recorded_ports(&self) -> Vec<String> {
        self.ipam()
            .all()
            .filter_map(|a| a.vpc.as_ref())
            .flat_map(|v| v.ports().map(str::to_string))
            .collect()
    }

    /// Removes what [`Self::write_maps`] wrote (tolerates "already gone").
    pub(super) fn remove_maps(
        &self,
        ifindex: Option<u32>,
        fabric: &[IpAddr],
        vpc: Option<&VpcAttachment>,
    ) -> Result<(), aya::maps::MapError> {
        if let Some(i) = ifindex {
            PortsMap::from_pin(&self.pin_dir)?.remove(i)?;
            if vpc.is_some_and(|v| v.migration_peer.is_some()) {
                MigrationsMap::from_pin(&self.pin_dir)?.remove(i)?;
            }
        }
        let (net, ips) = endpoint_ips(fabric, vpc);
        let mut eps = EndpointsMap::from_pin(&self.pin_dir)?;
        for ip in ips {
            eps.remove(net, ip)?;
        }
        if vpc.is_some() {
            let mut br = BridgesMap::from_pin(&self.pin_dir)?;
            for f in fabric {
                br.remove(*f)?;
            }
        }
        Ok(())
    }
}

/// The net and the addresses the pod sends from: its VPC addresses, else its fabric ones.
pub(super) fn endpoint_ips(fabric: &[IpAddr], vpc: Option<&VpcAttachment>) -> (u32, Vec<IpAddr>) {
    match vpc {
        Some(v) => (v.vni, v.ips().collect()),
        None => (0, fabric.to_vec()),
    }
}

/// Each fabric address with the VPC address of its family; a v4 fabric address of a
/// v6-only VPC pod with its v6 address, which the bridge translates (NAT46, `lib/xlat.h`), so
/// that the pod's `status.podIP` works on a v4 default network. Never the reverse: a v4-only
/// pod's v6 fabric address stays unbridged.
pub(super) fn bridged(fabric: &[IpAddr], v: &VpcAttachment) -> Vec<(IpAddr, IpAddr)> {
    fabric
        .iter()
        .filter_map(|f| {
            let same = v.ips().find(|ip| ip.is_ipv4() == f.is_ipv4());
            let translated = || v.ips().find(|ip| f.is_ipv4() && ip.is_ipv6());
            Some((*f, same.or_else(translated)?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vpc(ips: &[&str]) -> VpcAttachment {
        let mut ips = ips.iter().map(|s| s.parse::<IpAddr>().unwrap());
        VpcAttachment {
            vni: 7,
            ip: ips.next().unwrap(),
            port: "p".into(),
            vpc: "t1/blue".into(),
            other: ips.next().map(|ip| crate::core::ipam::VpcAddress {
                ip,
                port: "p6".into(),
            }),
            persistent: false,
            migration_peer: None,
            routes: Vec::new(),
        }
    }

    fn ips(s: &[&str]) -> Vec<IpAddr> {
        s.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn each_fabric_address_is_bridged_within_its_family_else_translated_from_v4_only() {
        let dual = vpc(&["172.16.0.2", "fd00::2"]);
        assert_eq!(
            bridged(&ips(&["10.244.0.5", "fd10::5"]), &dual),
            vec![
                ("10.244.0.5".parse().unwrap(), "172.16.0.2".parse().unwrap()),
                ("fd10::5".parse().unwrap(), "fd00::2".parse().unwrap()),
            ]
        );
        // A v6-only VPC on a v4 (or dual-stack) node: the v4 fabric address is NAT46'd.
        let v6 = vpc(&["fd00::2"]);
        assert_eq!(
            bridged(&ips(&["10.244.0.5"]), &v6),
            vec![("10.244.0.5".parse().unwrap(), "fd00::2".parse().unwrap())]
        );
        assert_eq!(bridged(&ips(&["10.244.0.5", "fd10::5"]), &v6).len(), 2);
        // A v4-only VPC's pod keeps its v6 fabric address unbridged (no NAT64 that way).
        let v4 = vpc(&["172.16.0.2"]);
        assert_eq!(
            bridged(&ips(&["10.244.0.5", "fd10::5"]), &v4),
            vec![("10.244.0.5".parse().unwrap(), "172.16.0.2".parse().unwrap())]
        );
    }
}
