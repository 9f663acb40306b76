//! Router advertisements (RFC 4861) for a guest's link: an answer to each router
//! solicitation, and one every `--autoconf-ra-interval` on each link with an IPv6 Port.
//! From `fe80::1` (the gateway the datapath answers neighbour solicitations for), hop limit
//! 255, router lifetime 1800 s (the default route), M and O set (the address and the
//! resolvers come from DHCPv6), the link MTU, RDNSS (RFC 8106) and DNSSL, and one route
//! information option (RFC 4191) per IPv6 route of `spec.dhcp` (a Linux guest takes them
//! with `accept_ra_rt_info_max_plen` at least their prefix length). No prefix information:
//! a guest doing SLAAC forms no address, its one address is the Port's /128.

use std::net::Ipv6Addr;

use super::frame::{self, Ends};
use super::{Drop, Guest, Outcome, Settings};
use crate::core::datapath::netdev::GATEWAY6;

/// ICMPv6 router solicitation.
pub const RS: u8 = 133;
/// ICMPv6 router advertisement.
pub const RA: u8 = 134;
/// All nodes.
pub const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
/// How long the gateway is the default router, seconds.
pub const ROUTER_LIFETIME: u16 = 1800;

/// The answer to the router solicitation frame `f` from the guest `g`.
pub fn answer(f: &[u8], g: &Guest, s: &Settings) -> Outcome {
    let Ok(p) = frame::ip6(f) else {
        return Outcome::Drop(Drop::Malformed);
    };
    // RFC 4861 6.1.1: hop limit 255, code 0, at least 8 bytes, options of nonzero length.
    if p.proto != frame::ICMPV6 || p.hops != 255 || p.payload.len() < 8 {
        return Outcome::Drop(Drop::Malformed);
    }
    if p.payload[0] != RS || p.payload[1] != 0 || !options_ok(&p.payload[8..]) {
        return Outcome::Drop(Drop::Malformed);
    }
    if p.src_mac != g.mac {
        return Outcome::Drop(Drop::Mac);
    }
    // A v4-only guest's kernel solicits routers on every link it brings up: normal traffic,
    // not a fault, so not a drop (`cozyplane_autoconf_ignored_total{reason="no_ipv6"}`).
    if g.v6.is_none() {
        return Outcome::Ignored("no_ipv6");
    }
    // To the soliciting address when it has one, else to all nodes.
    let dst = if p.src.is_unspecified() { ALL_NODES } else { p.src };
    Outcome::Answer("ra", advertisement(g, s, dst))
}

/// Every option has a nonzero length that fits.
fn options_ok(mut o: &[u8]) -> bool {
    while !o.is_empty() {
        let Some(&len) = o.get(1) else { return false };
        let n = usize::from(len) * 8;
        if n == 0 || n > o.len() {
            return false;
        }
        o = &o[n..];
    }
    true
}

/// The advertisement for `g`'s link, to `dst`.
pub fn advertisement(g: &Guest, s: &Settings, dst: Ipv6Addr) -> Vec<u8> {
    let mut m = vec![RA, 0, 0, 0, 64, 0xc0];
    // Lifetime 0: not a default router (RFC 4861 4.2), on a secondary interface; its route
    // information options still route the VPC's ranges here.
    let lifetime = if g.default_route { ROUTER_LIFETIME } else { 0 };
    m.extend_from_slice(&lifetime.to_be_bytes());
    m.extend_from_slice(&[0; 8]); // reachable time, retrans timer: unspecified
    // Source link-layer address.
    m.extend_from_slice(&[1, 1]);
    m.extend_from_slice(&s.gw_mac);
    // MTU.
    m.extend_from_slice(&[5, 1, 0, 0]);
    m.extend_from_slice(&g.mtu.to_be_bytes());
    let life = 3 * s.ra_interval_secs.max(1);
    if !g.dns6.is_empty() {
        m.extend_from_slice(&[25, (1 + 2 * g.dns6.len()) as u8, 0, 0]);
        m.extend_from_slice(&life.to_be_bytes());
        for d in &g.dns6 {
            m.extend_from_slice(&d.octets());
        }
    }
    for r in &g.routes6 {
        route_information(&mut m, r);
    }
    let names = dnssl(&g.search);
    if !names.is_empty() {
        let padded = names.len().div_ceil(8) * 8;
        m.extend_from_slice(&[31, (1 + padded / 8) as u8, 0, 0]);
        m.extend_from_slice(&life.to_be_bytes());
        m.extend_from_slice(&names);
        m.resize(m.len() + padded - names.len(), 0);
    }
    let dst_mac = if dst.is_multicast() {
        frame::mcast_mac(dst)
    } else {
        g.mac
    };
    let ends = Ends {
        src_mac: s.gw_mac,
        dst_mac,
        src: GATEWAY6,
        dst,
    };
    frame::build_ip6(ends, frame::ICMPV6, 255, m)
}

/// Route information (RFC 4191 2.3) for `r` through this router: medium preference, the
/// router's lifetime, the prefix in as few 8-byte units as its length needs.
fn route_information(m: &mut Vec<u8>, r: &ipnet::Ipv6Net) {
    let len = r.prefix_len();
    let units: u8 = match len {
        0 => 1,
        1..=64 => 2,
        _ => 3,
    };
    m.extend_from_slice(&[24, units, len, 0]);
    m.extend_from_slice(&u32::from(ROUTER_LIFETIME).to_be_bytes());
    m.extend_from_slice(&r.network().octets()[..usize::from(units - 1) * 8]);
}

/// The domains in DNS wire form (labels, uncompressed), the ones that are no valid name left
/// out.
fn dnssl(domains: &[String]) -> Vec<u8> {
    let mut out = Vec::new();
    for d in domains {
        let labels: Vec<&str> = d.trim_end_matches('.').split('.').collect();
        if labels.iter().any(|l| l.is_empty() || l.len() > 63) {
            continue;
        }
        for l in labels {
            out.push(l.len() as u8);
            out.extend_from_slice(l.as_bytes());
        }
        out.push(0);
    }
    out
}
