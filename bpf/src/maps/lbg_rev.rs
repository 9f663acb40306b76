//! `sdn_lbg_rev`: a VPC backend `{net, address, target port, protocol}` → the frontend its
//! replies must come from ([`LbgKey`]). Written by the agent with `sdn_lbg_front`. C side:
//! `include/sdn/lb_gate_maps.h`, `lib/lb_gate.h`; read by `sdn_from_pod`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_HASH` with `BPF_F_NO_PREALLOC`; pinned by name.

use std::borrow::{Borrow, BorrowMut};

use aya::maps::{MapData, MapError};

use super::lbg_front::{Frontend, lb_key};
use super::{map_wrapper, optional};
use crate::abi::{LbgKey, LbgRevKey};

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_lbg_rev";

map_wrapper!(
    /// LoadBalancer backends' replies.
    #[doc(alias = "sdn_lbg_rev")]
    LbgRevMap, HashMap<LbgRevKey, LbgKey>
);

/// A backend: `(net, (vpc address, target port, protocol))`.
pub type Backend = (u32, Frontend);

fn key((net, (ip, port, proto)): Backend) -> LbgRevKey {
    LbgRevKey {
        net,
        ip: ip.into(),
        port: port.to_be(),
        proto,
        pad: 0,
    }
}

impl<T: Borrow<MapData>> LbgRevMap<T> {
    /// Every backend with its frontend.
    pub fn entries(&self) -> Result<Vec<(Backend, Frontend)>, MapError> {
        self.0
            .iter()
            .map(|r| {
                r.map(|(k, v)| {
                    let b = (k.net, (k.ip.into(), u16::from_be(k.port), k.proto));
                    (b, (v.addr.into(), u16::from_be(v.port), v.proto))
                })
            })
            .collect()
    }
}

impl<T: BorrowMut<MapData>> LbgRevMap<T> {
    /// Insert or replace: replies of `b` leave as `f`.
    pub fn upsert(&mut self, b: Backend, f: Frontend) -> Result<(), MapError> {
        self.0.insert(key(b), lb_key(f), 0)
    }

    /// Remove a backend; absent is not an error.
    pub fn remove(&mut self, b: Backend) -> Result<(), MapError> {
        optional(self.0.remove(&key(b))).map(drop)
    }
}
