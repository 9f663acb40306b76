//! The node side of the datapath: loading and attaching the eBPF programs
//! ([`loader`]), the netlink work around them ([`netdev`], the overlay device [`tunnel`]), the one netfilter rule the
//! datapath relies on ([`netfilter`]), map-layout upgrades ([`upgrade`]), and what the socket
//! hooks need: the cgroup2 root they attach to ([`cgroup`]) and the netns cookies that pick
//! this node's sockets ([`netns_cookie`]).

pub mod cgroup;
pub mod loader;
pub mod netdev;
pub mod netfilter;
pub mod netns_cookie;
pub mod tunnel;
pub mod upgrade;
