//! The cozyplane CNI plugin as a library: the CNI spec 1.1.0 types ([`spec`]), the
//! environment kubelet passes ([`env`]), the plugin↔agent protocol ([`proto`]) and the
//! plugin's logic ([`plugin`]). The `cozyplane-cni` binary is a few lines over [`plugin`].
//!
//! The agent depends on this library for [`proto`] and [`spec`]; the library needs serde
//! only, so the agent never links the binary's code paths.

pub mod env;
pub mod plugin;
pub mod proto;
pub mod spec;
