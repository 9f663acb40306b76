//! `sdn_sock_netns`: netns cookie → [`SockNetns`] (the net that netns is on). The socket
//! hooks (`lib/sock_lb.h`) translate only sockets of a netns listed here with net 0: this
//! node's own netns and its net-0 pods'. Written by the agent (its own netns at start, a
//! pod's at CNI ADD, removed at DEL). C side: `include/sdn/sock_maps.h`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_HASH` with `BPF_F_NO_PREALLOC`; pinned by name. The cookie is
//! `SO_NETNS_COOKIE` (Linux 5.14), read with [`crate::sys::netns_cookie`].

use std::borrow::{Borrow, BorrowMut};

use aya::maps::{MapData, MapError};

use super::{map_wrapper, optional};
use crate::abi::SockNetns;

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_sock_netns";

map_wrapper!(
    /// The network namespaces the socket hooks serve.
    #[doc(alias = "sdn_sock_netns")]
    SockNetnsMap, HashMap<u64, SockNetns>
);

impl<T: Borrow<MapData>> SockNetnsMap<T> {
    /// The net of the netns with `cookie`, if registered.
    pub fn get(&self, cookie: u64) -> Result<Option<u32>, MapError> {
        Ok(optional(self.0.get(&cookie, 0))?.map(|v| v.net))
    }

    /// Every registered `(cookie, net)`.
    pub fn entries(&self) -> Result<Vec<(u64, u32)>, MapError> {
        self.0.iter().map(|r| r.map(|(k, v)| (k, v.net))).collect()
    }
}

impl<T: BorrowMut<MapData>> SockNetnsMap<T> {
    /// Register the netns with `cookie` as being on `net` (0: its sockets are translated).
    pub fn upsert(&mut self, cookie: u64, net: u32) -> Result<(), MapError> {
        self.0.insert(cookie, SockNetns { net, flags: 0 }, 0)
    }

    /// Forget the netns with `cookie`; absent is not an error.
    pub fn remove(&mut self, cookie: u64) -> Result<(), MapError> {
        optional(self.0.remove(&cookie)).map(drop)
    }
}
