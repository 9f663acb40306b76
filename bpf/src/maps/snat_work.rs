//! `sdn_snat_work`: per-CPU scratch space of `sdn_snat_out` ([`SnatWork`] at index 0), whose
//! keys would not fit the BPF stack on top of `sdn_from_pod`'s frame. Datapath only; the
//! wrapper exists so that every map has one. C side: `include/sdn/snat_maps.h`.
//!
//! # Kernel requirements
//! `BPF_MAP_TYPE_PERCPU_ARRAY`; pinned by name.

use super::map_wrapper;
use crate::abi::SnatWork;

/// Pinned name; identical to the C identifier.
pub const NAME: &str = "sdn_snat_work";

map_wrapper!(
    /// SNAT scratch space.
    #[doc(alias = "sdn_snat_work")]
    SnatWorkMap, PerCpuArray<SnatWork>
);
