//! `sdn_mig_peers`: `{net, ip}` of another node's Port being live-migrated → [`Remote`] (the
//! target's node), beside its `sdn_remotes` entry (the source's). Written by the agent from
//! the Ports' `spec.migrationTarget`; overlay trust accepts the VM's packets from either node.
//! C side: `include/sdn/migrate_maps.h`, `lib/migrate.h`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_HASH` with `BPF_F_NO_PREALLOC`; pinned by name.

use std::borrow::{Borrow, BorrowMut};
use std::net::IpAddr;

use aya::maps::{MapData, MapError};

use super::{map_wrapper, optional};
use crate::abi::{EpKey, Remote};

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_mig_peers";

map_wrapper!(
    /// Migration targets of other nodes' Ports by `{net, ip}`.
    #[doc(alias = "sdn_mig_peers")]
    MigPeersMap, HashMap<EpKey, Remote>
);

fn key(net: u32, ip: IpAddr) -> EpKey {
    EpKey { net, ip: ip.into() }
}

impl<T: Borrow<MapData>> MigPeersMap<T> {
    /// The target's node of `ip` in `net`, if it is migrating.
    pub fn get(&self, net: u32, ip: IpAddr) -> Result<Option<IpAddr>, MapError> {
        Ok(optional(self.0.get(&key(net, ip), 0))?.map(|r| r.node.into()))
    }

    /// Every entry, `((net, ip), node)`.
    pub fn entries(&self) -> Vec<((u32, IpAddr), IpAddr)> {
        self.0
            .iter()
            .filter_map(Result::ok)
            .map(|(k, v)| ((k.net, IpAddr::from(k.ip)), IpAddr::from(v.node)))
            .collect()
    }
}

impl<T: BorrowMut<MapData>> MigPeersMap<T> {
    /// Insert or replace: `ip` of `net` is also held on `node`.
    pub fn upsert(&mut self, net: u32, ip: IpAddr, node: IpAddr) -> Result<(), MapError> {
        self.0.insert(
            key(net, ip),
            Remote {
                node: node.into(),
                flags: 0,
            },
            0,
        )
    }

    /// Remove `ip` of `net`; absent is not an error.
    pub fn remove(&mut self, net: u32, ip: IpAddr) -> Result<(), MapError> {
        optional(self.0.remove(&key(net, ip))).map(drop)
    }
}
