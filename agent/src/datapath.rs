//! The node side of the datapath: loading and attaching the eBPF programs
//! ([`loader`]), the netlink work around them ([`netdev`]) and the one netfilter rule the
//! datapath relies on ([`netfilter`]).

pub mod loader;
pub mod netdev;
pub mod netfilter;
