//! `sdn_fip_out`: `{net, vpc_ip}` of a Floating IP's target → [`FipPub`] (its public
//! address). Written by the agent on every node (`agent/src/fip.rs`). C side:
//! `include/sdn/fip_maps.h`, `lib/fip.h`; read by `sdn_from_pod`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_HASH` with `BPF_F_NO_PREALLOC`; pinned by name.

use std::borrow::{Borrow, BorrowMut};
use std::net::IpAddr;

use aya::maps::{MapData, MapError};

use super::fip_in::Target;
use super::{map_wrapper, optional};
use crate::abi::{EpKey, FipPub};

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_fip_out";

map_wrapper!(
    /// Floating IPs by target.
    #[doc(alias = "sdn_fip_out")]
    FipOutMap, HashMap<EpKey, FipPub>
);

fn key(net: u32, vpc_ip: IpAddr) -> EpKey {
    EpKey {
        net,
        ip: vpc_ip.into(),
    }
}

impl<T: Borrow<MapData>> FipOutMap<T> {
    /// Every target `(net, vpc_ip)` with its public address.
    pub fn entries(&self) -> Result<Vec<(Target, IpAddr)>, MapError> {
        self.0
            .iter()
            .map(|r| r.map(|(k, v)| ((k.net, IpAddr::from(k.ip)), IpAddr::from(v.addr))))
            .collect()
    }
}

impl<T: BorrowMut<MapData>> FipOutMap<T> {
    /// Insert or replace: what `vpc_ip` of `net` sends out leaves as `public`.
    pub fn upsert(&mut self, net: u32, vpc_ip: IpAddr, public: IpAddr) -> Result<(), MapError> {
        self.0.insert(
            key(net, vpc_ip),
            FipPub {
                addr: public.into(),
                flags: 0,
            },
            0,
        )
    }

    /// Remove the target; absent is not an error.
    pub fn remove(&mut self, net: u32, vpc_ip: IpAddr) -> Result<(), MapError> {
        optional(self.0.remove(&key(net, vpc_ip))).map(drop)
    }
}
