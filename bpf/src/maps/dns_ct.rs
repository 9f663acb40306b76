//! `sdn_dns_ct`: a steered DNS query (the pod's fabric address, source port, protocol) →
//! the address and port the pod asked, restored on the answer. Written and read by the
//! datapath (`lib/dns.h`); read-only here, for tests and tools.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_LRU_HASH`; pinned by name.

use std::borrow::Borrow;
use std::net::{IpAddr, SocketAddr};

use aya::maps::{MapData, MapError};

use super::{map_wrapper, optional};
use crate::abi::{DnsCt, DnsCtKey};

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_dns_ct";

map_wrapper!(
    /// Steered DNS queries in flight.
    #[doc(alias = "sdn_dns_ct")]
    DnsCtMap, HashMap<DnsCtKey, DnsCt>
);

impl<T: Borrow<MapData>> DnsCtMap<T> {
    /// What the pod at `fabric` asked from `sport` over `proto`, if recorded.
    pub fn get(&self, fabric: IpAddr, sport: u16, proto: u8) -> Result<Option<SocketAddr>, MapError> {
        let k = DnsCtKey {
            fabric: fabric.into(),
            sport: sport.to_be(),
            proto,
            pad: 0,
        };
        Ok(optional(self.0.get(&k, 0))?.map(|v| SocketAddr::new(v.dst.into(), u16::from_be(v.dport))))
    }
}
