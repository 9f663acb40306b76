//! `sdn_migrations`: host veth ifindex of a migrating endpoint of this node → [`Remote`] (the
//! node of the VM's other launcher). Written by the agent with
//! [`Endpoint::F_MIGRATING`](crate::abi::Endpoint::F_MIGRATING) on the endpoint; delivery
//! relays a copy there. C side: `include/sdn/migrate_maps.h`, `lib/migrate.h`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_HASH` with `BPF_F_NO_PREALLOC`; pinned by name.

use std::borrow::{Borrow, BorrowMut};
use std::net::IpAddr;

use aya::maps::{MapData, MapError};

use super::{map_wrapper, optional};
use crate::abi::Remote;

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_migrations";

/// `SDN_MIG_F_STANDBY`: a target launcher's endpoint whose VM has not announced itself yet
/// (nothing is delivered into it; its first ARP or RARP clears the flag).
pub const F_STANDBY: u32 = 1 << 0;

map_wrapper!(
    /// Migration relays by host veth ifindex.
    #[doc(alias = "sdn_migrations")]
    MigrationsMap, HashMap<u32, Remote>
);

impl<T: Borrow<MapData>> MigrationsMap<T> {
    /// The node the endpoint of `ifindex` relays to, if it is migrating.
    pub fn get(&self, ifindex: u32) -> Result<Option<IpAddr>, MapError> {
        Ok(optional(self.0.get(&ifindex, 0))?.map(|r| r.node.into()))
    }

    /// The flags of the relay of `ifindex`, if any.
    pub fn flags(&self, ifindex: u32) -> Result<Option<u32>, MapError> {
        Ok(optional(self.0.get(&ifindex, 0))?.map(|r| r.flags))
    }
}

impl<T: BorrowMut<MapData>> MigrationsMap<T> {
    /// Insert or replace: the endpoint of `ifindex` relays to `node`; `standby` (a target
    /// launcher's) until its VM announces itself ([`F_STANDBY`]).
    pub fn upsert(&mut self, ifindex: u32, node: IpAddr, standby: bool) -> Result<(), MapError> {
        self.0.insert(
            ifindex,
            Remote {
                node: node.into(),
                flags: if standby { F_STANDBY } else { 0 },
            },
            0,
        )
    }

    /// Remove `ifindex`; absent is not an error.
    pub fn remove(&mut self, ifindex: u32) -> Result<(), MapError> {
        optional(self.0.remove(&ifindex)).map(drop)
    }
}
