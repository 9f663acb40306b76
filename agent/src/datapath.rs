//! The node side of the datapath: loading and attaching the eBPF programs
//! ([`loader`]) and the netlink work around them ([`netdev`]).

pub mod loader;
pub mod netdev;
