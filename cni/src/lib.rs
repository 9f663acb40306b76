//! The cozyplane CNI plugin as a library: the CNI spec 1.1.0 types ([`spec`]), the
//! environment kubelet passes ([`env`](mod@env)), the plugin↔agent protocol ([`proto`]), the
//! plugin's logic ([`plugin`]) and the I/O error it reports ([`io`]).
//!
//! The agent depends on this library for [`proto`] and [`spec`], with the default `std`
//! feature. Without `std` the library is `no_std` + `alloc`: that is how the `cozyplane-cni`
//! binary builds it. The binary lives in `cni/bin`, a separate Cargo workspace, because it is
//! built with `panic = "abort"`, no libc and a small runtime of its own: kubelet execs it for
//! every pod ADD/DEL/CHECK, and glibc's start-up alone cost more CPU than the rest of the
//! plugin (docs/datapath.md, "The CNI plugin"). What needs std is behind the feature: the
//! std unix-socket transport ([`plugin::UnixTransport`]) and reading the process environment
//! through std ([`env::process_env`]).

#![cfg_attr(not(feature = "std"), no_std)]

extern crate alloc;

pub mod env;
pub mod io;
pub mod plugin;
pub mod proto;
pub mod spec;
