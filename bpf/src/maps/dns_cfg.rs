//! `sdn_dns_cfg`: where DNS steering sends a VPC pod's queries, one slot per family (the node
//! resolver's address of that family and its port). Written by the agent when it runs the
//! resolver; port 0 turns steering of that family off. C side: `include/sdn/dns_maps.h`,
//! `lib/dns.h`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_ARRAY`; pinned by name.

use std::borrow::{Borrow, BorrowMut};
use std::net::SocketAddr;

use aya::maps::{MapData, MapError};

use super::map_wrapper;
use crate::abi::{Addr, DnsCfg};

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_dns_cfg";
/// `SDN_DNS_CFG_V4`: the slot of IPv4 queries.
pub const V4: u32 = 0;
/// `SDN_DNS_CFG_V6`: the slot of IPv6 queries.
pub const V6: u32 = 1;
/// `SDN_DNS_CFG_MAX`: entries of the array.
pub const MAX: u32 = 2;

map_wrapper!(
    /// Where steered DNS queries go.
    #[doc(alias = "sdn_dns_cfg")]
    DnsCfgMap, Array<DnsCfg>
);

fn slot(v6: bool) -> u32 {
    if v6 { V6 } else { V4 }
}

impl<T: Borrow<MapData>> DnsCfgMap<T> {
    /// The resolver IPv4 (`v6` false) or IPv6 queries are steered to, `None` while off.
    pub fn get(&self, v6: bool) -> Result<Option<SocketAddr>, MapError> {
        let c = self.0.get(&slot(v6), 0)?;
        let port = u16::from_be(c.port);
        Ok((port != 0).then(|| SocketAddr::new(c.node.into(), port)))
    }
}

impl<T: BorrowMut<MapData>> DnsCfgMap<T> {
    /// Steer the queries of `resolver`'s family to it.
    pub fn set(&mut self, resolver: SocketAddr) -> Result<(), MapError> {
        let c = DnsCfg {
            node: Addr::from(resolver.ip()),
            port: resolver.port().to_be(),
            pad: [0; 2],
        };
        self.0.set(slot(resolver.is_ipv6()), c, 0)
    }

    /// Stop steering IPv4 (`v6` false) or IPv6 queries.
    pub fn clear(&mut self, v6: bool) -> Result<(), MapError> {
        self.0.set(slot(v6), DnsCfg::default(), 0)
    }
}
