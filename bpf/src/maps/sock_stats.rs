//! `sdn_sock_stats`: the socket-level load balancer's per-CPU counters (`SDN_SOCK_STAT_*`).
//! Written by the socket hooks (`lib/sock_lb.h`); read by metrics and tests. C side:
//! `include/sdn/sock_maps.h`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_PERCPU_ARRAY`; pinned by name.

use std::borrow::Borrow;

use aya::maps::{MapData, MapError};

use super::map_wrapper;

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_sock_stats";

/// `SDN_SOCK_STAT_CONNECT`: `connect()`s to a frontend given a backend.
pub const CONNECT: u32 = 0;
/// `SDN_SOCK_STAT_SENDMSG`: datagrams to a frontend given a backend.
pub const SENDMSG: u32 = 1;
/// `SDN_SOCK_STAT_REFUSED`: `connect()`s and datagrams refused (no backend).
pub const REFUSED: u32 = 2;
/// `SDN_SOCK_STAT_REVERSED`: recvmsg/getpeername addresses shown as the VIP.
pub const REVERSED: u32 = 3;
/// `SDN_SOCK_STAT_MAX`: entries of the array.
pub const MAX: u32 = 8;

map_wrapper!(
    /// Socket-level load-balancer counters.
    #[doc(alias = "sdn_sock_stats")]
    SockStatsMap, PerCpuArray<u64>
);

/// The counters summed over CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SockStats {
    /// `connect()`s translated to a backend.
    pub connects: u64,
    /// Datagrams (sendmsg with an address) translated to a backend.
    pub datagrams: u64,
    /// `connect()`s and datagrams to a frontend without a backend, refused.
    pub refused: u64,
    /// Peer addresses shown as the VIP (recvmsg, getpeername).
    pub reversed: u64,
}

impl<T: Borrow<MapData>> SockStatsMap<T> {
    fn sum(&self, idx: u32) -> Result<u64, MapError> {
        Ok(self.0.get(&idx, 0)?.iter().sum())
    }

    /// Every counter, summed over CPUs.
    pub fn get(&self) -> Result<SockStats, MapError> {
        Ok(SockStats {
            connects: self.sum(CONNECT)?,
            datagrams: self.sum(SENDMSG)?,
            refused: self.sum(REFUSED)?,
            reversed: self.sum(REVERSED)?,
        })
    }
}
