//! The policy compiler of cozyplane (issue 14): SecurityGroups (VPC nets), NetworkPolicies
//! (the default network) and HostFirewalls (nodes) in; the entries of the datapath's
//! policy maps (`bpf/include/sdn/policy_maps.h`) out; and [`verdict`], the pure evaluation
//! of those entries that the trace API and the datapath tests share.
//!
//! A pure library: no server, agent or kernel code, no aya. Each layer has an incremental
//! compiler whose every change returns a [`Diff`] holding only the entries it touches.
//! `docs/policy.md` explains the design.

pub mod cidr;
pub mod classes;
pub mod ct;
pub mod error;
pub mod hf;
pub mod identity;
pub mod model;
pub mod np;
pub mod ports;
pub mod selector;
pub mod sg;
pub mod verdict;

pub use error::{Reason, Warning};
pub use model::{Diff, Dir, Layer, Tables};
