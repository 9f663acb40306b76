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

/// `BPF_EXIST` (uapi `linux/bpf.h`): update only an existing element.
const BPF_EXIST: u64 = 2;
/// What the kernel answers a `BPF_EXIST` update of a missing key.
const ENOENT: i32 = 2;

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

    /// Marks the endpoint `ip` of `net` severed ([`Endpoint::F_SEVERED`]) if it is still the
    /// pod behind veth `ifindex`: `Ok(true)` when it now is, `Ok(false)` when there is no such
    /// endpoint (gone, or the address belongs to another veth now). The update only replaces
    /// an existing entry (`BPF_EXIST`), so an endpoint removed meanwhile is not brought back.
    pub fn sever(&mut self, net: u32, ip: IpAddr, ifindex: u32) -> Result<bool, MapError> {
        let k = key(net, ip);
        let Some(mut ep) = optional(self.0.get(&k, 0))? else {
            return Ok(false);
        };
        if ep.ifindex != ifindex {
            return Ok(false);
        }
        if ep.flags & Endpoint::F_SEVERED != 0 {
            return Ok(true);
        }
        ep.flags |= Endpoint::F_SEVERED;
        match self.0.insert(k, ep, BPF_EXIST) {
            Ok(()) => Ok(true),
            // Removed between the lookup and the update.
            Err(MapError::SyscallError(e)) if e.io_error.raw_os_error() == Some(ENOENT) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Remove `ip` of `net`; absent is not an error.
    pub fn remove(&mut self, net: u32, ip: IpAddr) -> Result<(), MapError> {
        optional(self.0.remove(&key(net, ip))).map(drop)
    }
}
