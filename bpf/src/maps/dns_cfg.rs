//! `sdn_dns_cfg`: the one entry saying where DNS steering sends a VPC pod's queries (the
//! node resolver's address and port). Written by the agent when it runs the resolver;
//! port 0 turns steering off. C side: `include/sdn/dns_maps.h`, `lib/dns.h`.
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

map_wrapper!(
    /// Where steered DNS queries go.
    #[doc(alias = "sdn_dns_cfg")]
    DnsCfgMap, Array<DnsCfg>
);

impl<T: Borrow<MapData>> DnsCfgMap<T> {
    /// The resolver steering sends to, `None` while off.
    pub fn get(&self) -> Result<Option<SocketAddr>, MapError> {
        let c = self.0.get(&0, 0)?;
        let port = u16::from_be(c.port);
        Ok((port != 0).then(|| SocketAddr::new(c.node.into(), port)))
    }
}

impl<T: BorrowMut<MapData>> DnsCfgMap<T> {
    /// Steer to `resolver` (IPv4; the datapath steers IPv4 queries only), or stop (`None`).
    pub fn set(&mut self, resolver: Option<SocketAddr>) -> Result<(), MapError> {
        let c = match resolver {
            Some(a) => DnsCfg {
                node: Addr::from(a.ip()),
                port: a.port().to_be(),
                pad: [0; 2],
            },
            None => DnsCfg::default(),
        };
        self.0.set(0, c, 0)
    }
}
