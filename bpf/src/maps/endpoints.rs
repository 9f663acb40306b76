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
        self.upsert_flagged(net, ip, ifindex, mac, 0)
    }

    /// [`Self::upsert`] with `flags` (`Endpoint::F_*`) from the start.
    pub fn upsert_flagged(
        &mut self,
        net: u32,
        ip: IpAddr,
        ifindex: u32,
        mac: [u8; 6],
        flags: u16,
    ) -> Result<(), MapError> {
        self.0.insert(key(net, ip), Endpoint { ifindex, mac, flags }, 0)
    }

    /// Marks the endpoint `ip` of `net` severed ([`Endpoint::F_SEVERED`]) if it is still the
    /// pod behind veth `ifindex`: `Ok(true)` when it now is, `Ok(false)` when there is no such
    /// endpoint (gone, or the address belongs to another veth now). The update only replaces
    /// an existing entry (`BPF_EXIST`), so an endpoint removed meanwhile is not brought back.
    pub fn sever(&mut self, net: u32, ip: IpAddr, ifindex: u32) -> Result<bool, MapError> {
        self.flag(net, ip, ifindex, Endpoint::F_SEVERED, true)
    }

    /// Sets (`on`) or clears `flag` on the endpoint `ip` of `net` if it is still the pod
    /// behind veth `ifindex`; `Ok(false)` without such an endpoint (as [`Self::sever`]).
    pub fn flag(
        &mut self,
        net: u32,
        ip: IpAddr,
        ifindex: u32,
        flag: u16,
        on: bool,
    ) -> Result<bool, MapError> {
        let k = key(net, ip);
        let Some(mut ep) = optional(self.0.get(&k, 0))? else {
            return Ok(false);
        };
        if ep.ifindex != ifindex {
            return Ok(false);
        }
        let want = if on { ep.flags | flag } else { ep.flags & !flag };
        if ep.flags == want {
            return Ok(true);
        }
        ep.flags = want;
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
