//! The agent's datapath features, each a folder of its own that depends on the core only,
//! never on another feature (`docs/architecture.md`, "How to add a feature"). Which ones run,
//! and in which order, is the composition root's list (`assemble` in `lib.rs`).

pub mod autoconf;
pub mod dns;
pub mod doors;
pub mod egress;
pub mod kubeproxy;
pub mod migrate;
pub mod peering;
pub mod policy;
pub mod services;
pub mod sever;
pub mod trust;
pub mod uplink;
