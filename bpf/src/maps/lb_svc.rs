//! `sdn_lb_svc`: a ServiceVIP port `{net, vip, port, proto}` → [`LbSvc`] (its Maglev table
//! id, backend count and affinity). Written by the agent (`agent/src/services.rs`); read by
//! `lib/lb.h`. C side: `include/sdn/lb_maps.h`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_HASH` with `BPF_F_NO_PREALLOC`; pinned by name.

use std::borrow::{Borrow, BorrowMut};
use std::net::IpAddr;

use aya::maps::{MapData, MapError};

use super::{map_wrapper, optional};
use crate::abi::{LbKey, LbSvc};

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_lb_svc";

map_wrapper!(
    /// Load-balanced frontends.
    #[doc(alias = "sdn_lb_svc")]
    LbSvcMap, HashMap<LbKey, LbSvc>
);

/// A frontend: the VIP's net, the VIP, the L4 protocol number and the port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Frontend {
    /// The VIP's net (VNI).
    pub net: u32,
    /// The virtual address.
    pub vip: IpAddr,
    /// `6` (TCP) or `17` (UDP).
    pub proto: u8,
    /// The Service port.
    pub port: u16,
}

impl Frontend {
    fn key(self) -> LbKey {
        LbKey {
            net: self.net,
            vip: self.vip.into(),
            port: self.port.to_be(),
            proto: self.proto,
            pad: 0,
        }
    }

    fn of(k: &LbKey) -> Self {
        Self {
            net: k.net,
            vip: k.vip.into(),
            proto: k.proto,
            port: u16::from_be(k.port),
        }
    }
}

impl<T: Borrow<MapData>> LbSvcMap<T> {
    /// The value of `f`, if programmed.
    pub fn get(&self, f: Frontend) -> Result<Option<LbSvc>, MapError> {
        optional(self.0.get(&f.key(), 0))
    }

    /// Every programmed frontend.
    pub fn frontends(&self) -> Result<Vec<Frontend>, MapError> {
        self.0.keys().map(|k| k.map(|k| Frontend::of(&k))).collect()
    }
}

impl<T: BorrowMut<MapData>> LbSvcMap<T> {
    /// Insert or replace `f`.
    pub fn upsert(&mut self, f: Frontend, v: LbSvc) -> Result<(), MapError> {
        self.0.insert(f.key(), v, 0)
    }

    /// Remove `f`; absent is not an error.
    pub fn remove(&mut self, f: Frontend) -> Result<(), MapError> {
        optional(self.0.remove(&f.key())).map(drop)
    }
}
