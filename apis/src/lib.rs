//! Types of the `sdn.cozystack.io` API group.
//!
//! This crate is pure data: the kinds ([`v1alpha1::VPC`], [`v1alpha1::Port`], …), their JSON
//! schemas, and the small helpers every side needs ([`net`]: claim names, NAT64 addresses, CIDRs,
//! MACs). The API server, the node agent and the CNI plugin all depend on it; it depends on no
//! server, storage or datapath code.
//!
//! Start with [`v1alpha1`] for the kinds. The traits in this root describe a kind to generic code:
//! [`ApiKind`] (names, scope; what discovery needs), [`HasSpecStatus`] (the spec/status split the
//! registry strategies rely on) and [`ApiObject`], which bundles everything a generic store needs.
//!
//! Every kind also implements [`kube_core::Resource`], so `kube::Api::<v1alpha1::Port>::all(client)`
//! and `kube::Api::<v1alpha1::VPC>::namespaced(client, ns)` work against the aggregated API.
//!
//! `k8s-openapi` needs exactly one Kubernetes version feature; as a library this crate selects
//! none, so the final binary must.

pub mod admin_policy;
pub mod net;
mod object;
mod schema;
mod serde_util;
pub mod v1alpha1;

pub use object::{ApiKind, ApiObject, HasSpecStatus, KindInfo, List, NoStatus};

/// The API group every kind in this crate belongs to.
pub const GROUP: &str = "sdn.cozystack.io";
