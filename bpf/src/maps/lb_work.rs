//! `sdn_lb_work`: per-CPU scratch space of `sdn_lb_forward` ([`LbWork`] at index 0), whose
//! keys would not fit the BPF stack on top of `sdn_from_pod`'s frame. Datapath only; the
//! wrapper exists so that every map has one. C side: `include/sdn/lb_maps.h`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_PERCPU_ARRAY`; pinned by name.

use super::map_wrapper;
use crate::abi::LbWork;

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_lb_work";

map_wrapper!(
    /// Load-balancer scratch space.
    #[doc(alias = "sdn_lb_work")]
    LbWorkMap, PerCpuArray<LbWork>
);
