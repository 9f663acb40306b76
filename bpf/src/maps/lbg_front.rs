//! `sdn_lbg_front`: a LoadBalancer frontend `{address, port, protocol}` whose backends are
//! VPC pods → [`LbgFront`] (their VPC and up to 16 backends). Written by the agent on every
//! node (`agent/src/lb_gate.rs`). C side: `include/sdn/lb_gate_maps.h`, `lib/lb_gate.h`;
//! read by `sdn_from_uplink`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_HASH` with `BPF_F_NO_PREALLOC`; pinned by name.

use std::borrow::{Borrow, BorrowMut};
use std::net::IpAddr;

use aya::maps::{MapData, MapError};

use super::{map_wrapper, optional};
use crate::abi::{LB_BACKENDS, LbgBackend, LbgFront, LbgKey};

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_lbg_front";

map_wrapper!(
    /// LoadBalancer frontends into VPCs.
    #[doc(alias = "sdn_lbg_front")]
    LbgFrontMap, HashMap<LbgKey, LbgFront>
);

/// A frontend or a backend: `(address, port, protocol)`; the port in host order.
pub type Frontend = (IpAddr, u16, u8);

/// A frontend's entry: its backends' net, its `SDN_LBG_F_*` flags and the backends
/// `(vpc address, target port)`.
pub type Entry = (Frontend, u32, u32, Vec<(IpAddr, u16)>);

/// The ABI key of a frontend.
pub fn lb_key((addr, port, proto): Frontend) -> LbgKey {
    LbgKey {
        addr: addr.into(),
        port: port.to_be(),
        proto,
        pad: 0,
    }
}

fn frontend(k: &LbgKey) -> Frontend {
    (IpAddr::from(k.addr), u16::from_be(k.port), k.proto)
}

impl<T: Borrow<MapData>> LbgFrontMap<T> {
    /// Every frontend with its net and backends `(vpc address, target port)`.
    pub fn entries(&self) -> Result<Vec<Entry>, MapError> {
        self.0
            .iter()
            .map(|r| {
                r.map(|(k, v)| {
                    let n = (v.count as usize).min(LB_BACKENDS);
                    let be = v.be[..n]
                        .iter()
                        .map(|b| (IpAddr::from(b.ip), u16::from_be(b.port)))
                        .collect();
                    (frontend(&k), v.net, v.flags, be)
                })
            })
            .collect()
    }
}

impl<T: BorrowMut<MapData>> LbgFrontMap<T> {
    /// Insert or replace a frontend of VPC `net` with `flags` (`SDN_LBG_F_*`); backends
    /// beyond 16 are left out.
    pub fn upsert(
        &mut self,
        f: Frontend,
        net: u32,
        flags: u32,
        backends: &[(IpAddr, u16)],
    ) -> Result<(), MapError> {
        let mut v = LbgFront {
            net,
            flags,
            ..LbgFront::default()
        };
        for (slot, (ip, port)) in v.be.iter_mut().zip(backends) {
            *slot = LbgBackend {
                ip: (*ip).into(),
                port: port.to_be(),
                pad: [0; 2],
            };
        }
        v.count = backends.len().min(LB_BACKENDS) as u32;
        self.0.insert(lb_key(f), v, 0)
    }

    /// Remove a frontend; absent is not an error.
    pub fn remove(&mut self, f: Frontend) -> Result<(), MapError> {
        optional(self.0.remove(&lb_key(f))).map(drop)
    }
}
