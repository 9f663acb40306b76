//! `sdn_fip_in`: public address → [`Fip`] (the Floating IP's target: VPC net and address).
//! Written by the agent on every node (`agent/src/fip.rs`). C side:
//! `include/sdn/fip_maps.h`, `lib/fip.h`; read by `sdn_from_uplink`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_HASH` with `BPF_F_NO_PREALLOC`; pinned by name.

use std::borrow::{Borrow, BorrowMut};
use std::net::IpAddr;

use aya::maps::{MapData, MapError};

use super::{map_wrapper, optional};
use crate::abi::{Addr, Fip};

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_fip_in";

map_wrapper!(
    /// Floating IPs by public address.
    #[doc(alias = "sdn_fip_in")]
    FipInMap, HashMap<Addr, Fip>
);

/// A target: `(net, vpc_ip)`.
pub type Target = (u32, IpAddr);

impl<T: Borrow<MapData>> FipInMap<T> {
    /// Every public address with its target `(net, vpc_ip)`.
    pub fn entries(&self) -> Result<Vec<(IpAddr, Target)>, MapError> {
        self.0
            .iter()
            .map(|r| r.map(|(k, v)| (IpAddr::from(k), (v.net, IpAddr::from(v.vpc_ip)))))
            .collect()
    }
}

impl<T: BorrowMut<MapData>> FipInMap<T> {
    /// Insert or replace: `public` is DNATed to `vpc_ip` in `net`.
    pub fn upsert(&mut self, public: IpAddr, net: u32, vpc_ip: IpAddr) -> Result<(), MapError> {
        self.0.insert(
            Addr::from(public),
            Fip {
                net,
                vpc_ip: vpc_ip.into(),
                flags: 0,
            },
            0,
        )
    }

    /// Remove `public`; absent is not an error.
    pub fn remove(&mut self, public: IpAddr) -> Result<(), MapError> {
        optional(self.0.remove(&public.into())).map(drop)
    }
}
