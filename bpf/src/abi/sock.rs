//! Mirrors of `include/sdn/sock_maps.h`: the socket-level load balancer of the default
//! network's Services (`lib/sock_lb.h`). Checked against the header by
//! `tests/abi_layout.rs` like the rest of the ABI (the structs are in [`super::LAYOUTS`]).

use std::mem::{align_of, offset_of, size_of};

use super::{Abi, Addr, StructLayout};

/// `SDN_SOCK_AFF_NET`: the `net` of a socket client's `sdn_lb_affinity` key, outside the
/// 24-bit VNI space; its `client` holds the client's netns cookie ([`sock_aff_client`]).
pub const SOCK_AFF_NET: u32 = 0x8000_0000;

/// The `client` of a socket client's `sdn_lb_affinity` key: the netns cookie in the first
/// 8 bytes (host order), the rest 0 (`lib/sock_lb.h`, `sdn_sock_select`).
pub fn sock_aff_client(netns_cookie: u64) -> Addr {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&netns_cookie.to_ne_bytes());
    Addr { b }
}

abi_struct! {
    /// `struct sdn_sock_netns`, value of `sdn_sock_netns` (keyed by netns cookie).
    pub struct SockNetns = "sdn_sock_netns" {
        /// The netns's net: 0 is translated, a VPC's VNI is left alone.
        pub net: u32,
        /// Reserved, 0.
        pub flags: u32,
    }
}

abi_struct! {
    /// `struct sdn_sock_rev_key`: key of `sdn_sock_rev`, a translated socket's backend.
    pub struct SockRevKey = "sdn_sock_rev_key" {
        /// The socket cookie of the client's socket.
        pub cookie: u64,
        /// The backend it was given.
        pub backend: Addr,
        /// The backend's port, network order.
        pub port: u16,
        /// `IPPROTO_TCP` or `IPPROTO_UDP`.
        pub proto: u8,
        /// Zero.
        pub pad: [u8; 5],
    }
}

abi_struct! {
    /// `struct sdn_sock_rev`, value of `sdn_sock_rev`: the frontend the socket asked for.
    pub struct SockRev = "sdn_sock_rev" {
        /// The VIP.
        pub vip: Addr,
        /// The Service port, network order.
        pub port: u16,
        /// Zero.
        pub pad: [u8; 2],
    }
}
