//! `sdn_bridges`: fabric IP → [`Bridge`] (the VPC address behind a pod's `status.podIP`).
//! Written by the CNI. C side: `include/sdn/maps.h`, `lib/bridge.h`; read by `sdn_to_pod`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_HASH`; pinned by name.

use std::borrow::{Borrow, BorrowMut};
use std::net::IpAddr;

use aya::maps::{MapData, MapError};

use super::{map_wrapper, optional};
use crate::abi::{Addr, Bridge};

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_bridges";

map_wrapper!(
    /// Fabric IPs bridged to VPC pods.
    #[doc(alias = "sdn_bridges")]
    BridgesMap, HashMap<Addr, Bridge>
);

impl<T: Borrow<MapData>> BridgesMap<T> {
    /// `(net, vpc_ip)` behind `fabric`, if bridged.
    pub fn get(&self, fabric: IpAddr) -> Result<Option<(u32, IpAddr)>, MapError> {
        Ok(optional(self.0.get(&fabric.into(), 0))?.map(|b| (b.net, b.vpc_ip.into())))
    }
}

impl<T: BorrowMut<MapData>> BridgesMap<T> {
    /// Insert or replace: traffic to `fabric` goes to `vpc_ip` in `net`.
    pub fn upsert(&mut self, fabric: IpAddr, net: u32, vpc_ip: IpAddr) -> Result<(), MapError> {
        self.0.insert(
            Addr::from(fabric),
            Bridge {
                net,
                vpc_ip: vpc_ip.into(),
            },
            0,
        )
    }

    /// Remove `fabric`; absent is not an error.
    pub fn remove(&mut self, fabric: IpAddr) -> Result<(), MapError> {
        optional(self.0.remove(&fabric.into())).map(drop)
    }
}
