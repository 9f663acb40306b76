//! The node side of the datapath: loading and attaching the eBPF programs
//! ([`loader`]), the netlink work around them ([`netdev`], the overlay device [`tunnel`]), the one netfilter rule the
//! datapath relies on ([`netfilter`]) and map-layout upgrades ([`upgrade`]).

pub mod loader;
pub mod netdev;
pub mod netfilter;
pub mod tunnel;
pub mod upgrade;
