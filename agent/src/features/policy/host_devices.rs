//! `--host-devices`: the node's ways in besides the uplink (a second NIC, a VLAN device, a
//! bond's other leg), each hooked like the uplink so that the HostFirewall judges what
//! arrives there and what the node sends there: `sdn_from_uplink` on its ingress,
//! `sdn_host_out` on its egress (pinned TCX links, so the filtering outlives an agent
//! restart). Their global addresses are the node's own too (`sdn_hf_self`), whether or not
//! the Node object lists them. A listed device that does not exist stops the agent: a
//! firewall the operator believes in must not silently miss a door.

use std::net::IpAddr;

use futures::TryStreamExt as _;
use netlink_packet_route::address::{AddressAttribute, AddressScope};

use crate::core::datapath::loader::{Datapath, LoadError};
use crate::core::datapath::netdev::NetDev;

/// Why a host device could not be hooked.
#[derive(Debug, thiserror::Error)]
pub enum HostDeviceError {
    /// The device does not exist (or could not be looked up).
    #[error("--host-devices: {dev}: {why}")]
    Missing {
        /// The device named.
        dev: String,
        /// Why.
        why: String,
    },
    /// Listing its addresses failed.
    #[error("--host-devices: addresses of {dev}: {source}")]
    Addresses {
        /// The device.
        dev: String,
        /// The netlink error.
        source: rtnetlink::Error,
    },
    /// Attaching a program.
    #[error("--host-devices: {0}")]
    Attach(#[from] LoadError),
}

/// Hooks every device of `devs` and returns their global addresses.
pub async fn attach(
    datapath: &mut Datapath,
    netdev: &NetDev,
    devs: &[String],
) -> Result<Vec<IpAddr>, HostDeviceError> {
    let mut own = Vec::new();
    for dev in devs {
        let missing = |why: String| HostDeviceError::Missing {
            dev: dev.clone(),
            why,
        };
        let link = netdev
            .link(dev)
            .await
            .map_err(|e| missing(e.to_string()))?
            .ok_or_else(|| missing("no such device".into()))?;
        datapath.attach_uplink(dev)?;
        datapath.attach_host_out(dev)?;
        let msgs: Vec<_> = netdev
            .handle()
            .address()
            .get()
            .set_link_index_filter(link.index)
            .execute()
            .try_collect()
            .await
            .map_err(|source| HostDeviceError::Addresses {
                dev: dev.clone(),
                source,
            })?;
        let addrs = global_addresses(&msgs);
        tracing::info!(device = %dev, addresses = ?addrs, "host device hooked (HostFirewall)");
        own.extend(addrs);
    }
    own.sort_unstable();
    own.dedup();
    Ok(own)
}

/// The universe-scope addresses of `msgs` (link-local ones are the node's at any hook anyway:
/// `bpf/lib/policy.h`, `sdn_hf_link_local`).
fn global_addresses(msgs: &[netlink_packet_route::address::AddressMessage]) -> Vec<IpAddr> {
    msgs.iter()
        .filter(|m| m.header.scope == AddressScope::Universe)
        .flat_map(|m| m.attributes.iter())
        .filter_map(|a| match a {
            AddressAttribute::Address(ip) => Some(*ip),
            _ => None,
        })
        .collect()
}
