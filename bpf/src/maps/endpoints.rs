//! `sdn_endpoints`: `{net, ip}` → [`Endpoint`] (pods on this node). Written by the CNI.
//! C side: `include/sdn/maps.h`, `lib/endpoint.h`; read by all three programs, and the
//! anti-spoofing record of `sdn_from_pod`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_HASH`; pinned by name.

use std::borrow::{Borrow, BorrowMut};
use std::net::IpAddr;

use aya::maps::{MapData, MapError};

use super::{map_wrapper, optional};
use crate::abi::{Endpoint, EpKey};

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_endpoints";

map_wrapper!(
    /// Local pods by `{net, ip}`.
    #[doc(alias = "sdn_endpoints")]
    EndpointsMap, HashMap<EpKey, Endpoint>
);

fn key(net: u32, ip: IpAddr) -> EpKey {
    EpKey { net, ip: ip.into() }
}

impl<T: Borrow<MapData>> EndpointsMap<T> {
    /// The local endpoint `ip` of `net`, if any.
    pub fn get(&self, net: u32, ip: IpAddr) -> Result<Option<Endpoint>, MapError> {
        optional(self.0.get(&key(net, ip), 0))
    }
}

impl<T: BorrowMut<MapData>> EndpointsMap<T> {
    /// Insert or replace: `ip` in `net` is the pod behind veth `ifindex` with MAC `mac`.
    pub fn upsert(&mut self, net: u32, ip: IpAddr, ifindex: u32, mac: [u8; 6]) -> Result<(), MapError> {
        self.0.insert(
            key(net, ip),
            Endpoint {
                ifindex,
                mac,
                flags: 0,
            },
            0,
        )
    }

    /// Remove `ip` of `net`; absent is not an error.
    pub fn remove(&mut self, net: u32, ip: IpAddr) -> Result<(), MapError> {
        optional(self.0.remove(&key(net, ip))).map(drop)
    }
}
