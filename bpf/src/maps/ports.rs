//! `sdn_ports`: host veth ifindex → [`Port`]. Written by the CNI on ADD, removed on DEL.
//! C side: `include/sdn/maps.h`; read by `sdn_from_pod` and `sdn_to_pod`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_HASH`; pinned by name.

use std::borrow::{Borrow, BorrowMut};

use aya::maps::{MapData, MapError};

use super::{map_wrapper, optional};
use crate::abi::Port;

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_ports";

map_wrapper!(
    /// Which net each pod veth belongs to.
    #[doc(alias = "sdn_ports")]
    PortsMap, HashMap<u32, Port>
);

impl<T: Borrow<MapData>> PortsMap<T> {
    /// The port of veth `ifindex`, if any.
    pub fn get(&self, ifindex: u32) -> Result<Option<Port>, MapError> {
        optional(self.0.get(&ifindex, 0))
    }
}

impl<T: BorrowMut<MapData>> PortsMap<T> {
    /// Record that veth `ifindex` belongs to `net` (0 = default network). An entry already
    /// there for the same net is left alone: its flags are the datapath's (a port that has
    /// seen DNATed flows, `SDN_PORT_F_DNAT`), and a restarted agent re-asserting its ports
    /// must not make the datapath forget them.
    pub fn set(&mut self, ifindex: u32, net: u32) -> Result<(), MapError> {
        if optional(self.0.get(&ifindex, 0))?.is_some_and(|p| p.net == net) {
            return Ok(());
        }
        self.0.insert(ifindex, Port { net, flags: 0 }, 0)
    }

    /// Forget veth `ifindex`; absent is not an error.
    pub fn remove(&mut self, ifindex: u32) -> Result<(), MapError> {
        optional(self.0.remove(&ifindex)).map(drop)
    }
}
