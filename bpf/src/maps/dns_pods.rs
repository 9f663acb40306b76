//! `sdn_dns_pods`: `{net, VPC address}` of a VPC pod of this node → its fabric address,
//! the source its steered DNS queries carry (the resolver knows the querier by it).
//! Written by the agent from this node's Pods and Ports. C side:
//! `include/sdn/dns_maps.h`, `lib/dns.h`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_HASH` with `BPF_F_NO_PREALLOC`; pinned by name.

use std::borrow::{Borrow, BorrowMut};
use std::net::IpAddr;

use aya::maps::{MapData, MapError};

use super::{map_wrapper, optional};
use crate::abi::{DnsPod, EpKey};

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_dns_pods";

map_wrapper!(
    /// VPC pods' fabric addresses, for DNS steering.
    #[doc(alias = "sdn_dns_pods")]
    DnsPodsMap, HashMap<EpKey, DnsPod>
);

/// `((net, VPC address), fabric address)`.
pub type Entry = ((u32, IpAddr), IpAddr);

fn ep(net: u32, ip: IpAddr) -> EpKey {
    EpKey { net, ip: ip.into() }
}

impl<T: Borrow<MapData>> DnsPodsMap<T> {
    /// Every entry.
    pub fn entries(&self) -> Result<Vec<Entry>, MapError> {
        self.0
            .iter()
            .map(|r| r.map(|(k, v)| ((k.net, IpAddr::from(k.ip)), IpAddr::from(v.fabric))))
            .collect()
    }
}

impl<T: BorrowMut<MapData>> DnsPodsMap<T> {
    /// Insert or replace: the pod at `vpc_ip` in `net` asks from `fabric`.
    pub fn upsert(&mut self, net: u32, vpc_ip: IpAddr, fabric: IpAddr) -> Result<(), MapError> {
        self.0.insert(
            ep(net, vpc_ip),
            DnsPod {
                fabric: fabric.into(),
            },
            0,
        )
    }

    /// Remove; absent is not an error.
    pub fn remove(&mut self, net: u32, vpc_ip: IpAddr) -> Result<(), MapError> {
        optional(self.0.remove(&ep(net, vpc_ip))).map(drop)
    }
}
