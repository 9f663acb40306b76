//! `sdn_snat_gws`: VNI → [`SnatGw`], the NAT addresses of the VPC's effective NAT-enabled
//! gateway. A VPC without an entry has no way out. Written by the agent
//! (`agent/src/egress.rs`). C side: `include/sdn/snat_maps.h`, `lib/egress.h`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_HASH` with `BPF_F_NO_PREALLOC`; pinned by name.

use std::borrow::{Borrow, BorrowMut};
use std::net::{Ipv4Addr, Ipv6Addr};

use aya::maps::{MapData, MapError};

use super::{map_wrapper, optional};
use crate::abi::{Addr, SnatGw};

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_snat_gws";

map_wrapper!(
    /// VPC gateways' NAT addresses.
    #[doc(alias = "sdn_snat_gws")]
    SnatGwsMap, HashMap<u32, SnatGw>
);

/// A gateway's NAT addresses per family.
pub type Gw = (Option<Ipv4Addr>, Option<Ipv6Addr>);

fn value((v4, v6): Gw) -> SnatGw {
    let mut g = SnatGw::default();
    if let Some(a) = v4 {
        g.addr4 = Addr::from(a);
        g.flags |= SnatGw::F_HAVE4;
    }
    if let Some(a) = v6 {
        g.addr6 = Addr::from(a);
        g.flags |= SnatGw::F_HAVE6;
    }
    g
}

fn gw(g: &SnatGw) -> Gw {
    (
        (g.flags & SnatGw::F_HAVE4 != 0)
            .then(|| g.addr4.to_v4())
            .flatten(),
        (g.flags & SnatGw::F_HAVE6 != 0).then(|| Ipv6Addr::from(g.addr6.b)),
    )
}

impl<T: Borrow<MapData>> SnatGwsMap<T> {
    /// Every VNI with a gateway.
    pub fn entries(&self) -> Result<Vec<(u32, Gw)>, MapError> {
        self.0.iter().map(|r| r.map(|(k, v)| (k, gw(&v)))).collect()
    }
}

impl<T: BorrowMut<MapData>> SnatGwsMap<T> {
    /// Insert or replace the gateway of `vni`.
    pub fn upsert(&mut self, vni: u32, g: Gw) -> Result<(), MapError> {
        self.0.insert(vni, value(g), 0)
    }

    /// The VPC has no way out; absent is not an error.
    pub fn remove(&mut self, vni: u32) -> Result<(), MapError> {
        optional(self.0.remove(&vni)).map(drop)
    }
}
