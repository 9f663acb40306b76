//! `sdn_lbg_ingress`: net → flags; presence means the VPC's effective VPCGateway admits
//! LoadBalancer ingress (`spec.ingress.loadBalancer: true`). Written by the agent
//! (`agent/src/lb_gate.rs`). C side: `include/sdn/lb_gate_maps.h`, `lib/lb_gate.h`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_HASH` with `BPF_F_NO_PREALLOC`; pinned by name.

use std::borrow::{Borrow, BorrowMut};

use aya::maps::{MapData, MapError};

use super::{map_wrapper, optional};

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_lbg_ingress";

map_wrapper!(
    /// VPCs that admit LoadBalancer ingress.
    #[doc(alias = "sdn_lbg_ingress")]
    LbgIngressMap, HashMap<u32, u32>
);

impl<T: Borrow<MapData>> LbgIngressMap<T> {
    /// Every admitting net.
    pub fn nets(&self) -> Result<Vec<u32>, MapError> {
        self.0.keys().collect()
    }
}

impl<T: BorrowMut<MapData>> LbgIngressMap<T> {
    /// Admit LoadBalancer traffic into `net`.
    pub fn admit(&mut self, net: u32) -> Result<(), MapError> {
        self.0.insert(net, 0, 0)
    }

    /// Refuse it again; absent is not an error.
    pub fn refuse(&mut self, net: u32) -> Result<(), MapError> {
        optional(self.0.remove(&net)).map(drop)
    }
}
