//! The node side of the datapath: loading and attaching the eBPF programs
//! ([`loader`]), the netlink work around them ([`netdev`]), the one netfilter rule the
//! datapath relies on ([`netfilter`]) and map-layout upgrades ([`upgrade`]).

pub mod loader;
pub mod netdev;
pub mod netfilter;
pub mod upgrade;
