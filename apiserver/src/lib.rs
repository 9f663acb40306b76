//! The aggregated Kubernetes API server for `sdn.cozystack.io`.
//!
//! Start with [`registry`]: its table of kinds drives routes, discovery, OpenAPI and Table
//! output. [`registry::store::Store`] owns the request flow, each kind's `Strategy` the policy;
//! [`handlers`] map REST verbs onto it and [`server`] serves it over HTTPS. Request flow,
//! tenancy and storage are described in `docs/architecture.md`.

pub mod admission;
pub mod alloc;
pub mod controllers;
pub mod errors;
pub mod handlers;
pub mod informer;
pub mod merge;
pub mod options;
pub mod rbac;
pub mod registry;
pub mod server;
pub mod trace;
pub mod validation;
