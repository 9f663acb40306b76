//! `sdn_pol_work`: per-CPU scratch space of the policy check (`lib/policy.h`;
//! [`PolWork`] at index 0), whose keys would not fit the BPF stack under `sdn_to_pod`'s
//! frame. Datapath only; the wrapper exists so that every map has one. C side:
//! `include/sdn/policy_maps.h`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_PERCPU_ARRAY`; pinned by name.

use super::map_wrapper;
use crate::abi::PolWork;

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_pol_work";

map_wrapper!(
    /// Policy check scratch space.
    #[doc(alias = "sdn_pol_work")]
    PolWorkMap, PerCpuArray<PolWork>
);
