//! The Service proxy on the default network (`lib/lb.h` at `sdn_from_pod`'s net-0 branch)
//! through `BPF_PROG_TEST_RUN`: a net-0 pod's packet to a Service frontend (net 0) is
//! DNATed to a backend and handed to the host like any net-0 packet; a local backend's reply
//! leaves with the frontend as its source; a frontend without backends answers a SYN with
//! a reset and drops the rest (counted); both families. How NetworkPolicy sees these flows is `policy_np.rs`'s; the overlay side
//! of the reverse NAT needs tunnel metadata a test run cannot attach (the labs cover it).
//! Needs root; fails (never skips) without it.

mod common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use common::fixtures::*;
use common::pkt::{self, TCP, UDP};
use common::{Datapath, LO, TC_ACT_OK, TC_ACT_REDIRECT};
use cozyplane_bpf::DropReason;
use cozyplane_bpf::maps::lb_stats::{self, LbStatsMap};

const CLUSTER_IP: &str = "10.96.0.10";
const CLIENT: &str = "10.244.1.2";
const BACKEND: &str = "10.244.1.3";
const CLUSTER_IP6: &str = "fd96::10";
const CLIENT6: &str = "fd44::2";
const BACKEND6: &str = "fd44::3";

fn mac_of(a: IpAddr) -> [u8; 6] {
    let o = match a {
        IpAddr::V4(v) => v.octets(),
        IpAddr::V6(v) => v.octets()[12..].try_into().unwrap(),
    };
    [0x0a, 0x50, o[0], o[1], o[2], o[3]]
}

/// A node whose net-0 pods are `pods` (their veth is `lo`); the pod ranges are
/// cluster-internal, as the agent writes them.
fn node(pods: &[&str]) -> Datapath {
    let mut dp = Datapath::load(&cfg());
    port(&mut dp, LO, 0);
    inside(&mut dp, 0, "10.244.0.0", 16);
    inside(&mut dp, 0, "fd44::", 16);
    for p in pods {
        endpoint(&mut dp, 0, p, LO, mac_of(ip(p)));
    }
    dp
}

/// Frontend `vip:port/proto` of net 0 (table `id`) balanced over `backends`.
fn service(dp: &mut Datapath, id: u32, vip: &str, proto: u8, port: u16, backends: &[(u32, &str, u16)]) {
    common::lb::frontend(dp, 0, id, (vip, port, proto), backends);
}

fn packet(s: &str, sport: u16, d: &str, dport: u16, proto: u8) -> Vec<u8> {
    match (ip(s), ip(d)) {
        (IpAddr::V4(s4), IpAddr::V4(d4)) => {
            pkt::ipv4(mac_of(ip(s)), cfg().gw_mac, s4, d4, proto, sport, dport, 0)
        }
        (IpAddr::V6(s6), IpAddr::V6(d6)) => {
            pkt::ipv6(mac_of(ip(s)), cfg().gw_mac, s6, d6, proto, sport, dport, 0)
        }
        _ => unreachable!(),
    }
}

/// The packet's `(src, sport, dst, dport)` after a run that passed it to the host.
fn to_host(dp: &Datapath, p: &[u8]) -> (IpAddr, u16, IpAddr, u16) {
    let out = dp.run("sdn_from_pod", p, LO, 0);
    assert_eq!(out.verdict, TC_ACT_OK, "handed to the host stack");
    if out.packet[12..14] == [0x08, 0x00] {
        pkt::assert_v4_checksums(&out.packet);
        let q = pkt::parse_v4(&out.packet);
        (q.src.into(), q.sport, q.dst.into(), q.dport)
    } else {
        let q = pkt::parse_v6(&out.packet);
        (q.src.into(), q.sport, q.dst.into(), q.dport)
    }
}

#[test]
fn a_cluster_ip_is_dnated_and_the_reply_comes_from_it_in_both_families() {
    let mut dp = node(&[CLIENT, BACKEND, CLIENT6, BACKEND6]);
    service(&mut dp, 1, CLUSTER_IP, TCP, 80, &[(1, BACKEND, 8080)]);
    service(&mut dp, 2, CLUSTER_IP6, UDP, 53, &[(2, BACKEND6, 5353)]);
    for (client, vip, port, proto, backend, tport) in [
        (CLIENT, CLUSTER_IP, 80, TCP, BACKEND, 8080),
        (CLIENT6, CLUSTER_IP6, 53, UDP, BACKEND6, 5353),
    ] {
        let fwd = to_host(&dp, &packet(client, 40000, vip, port, proto));
        assert_eq!(fwd, (ip(client), 40000, ip(backend), tport), "to the backend");
        let back = to_host(&dp, &packet(backend, tport, client, 40000, proto));
        assert_eq!(back, (ip(vip), port, ip(client), 40000), "from the frontend");
        // A packet of the backend that answers no balanced flow is untouched.
        let other = to_host(&dp, &packet(backend, tport, client, 40001, proto));
        assert_eq!(other, (ip(backend), tport, ip(client), 40001));
    }
    // Another port of the ClusterIP is no frontend: to the host as it was.
    let p = to_host(&dp, &packet(CLIENT, 40000, CLUSTER_IP, 81, TCP));
    assert_eq!(p.2, ip(CLUSTER_IP));
    let s = LbStatsMap::try_from(dp.map(lb_stats::NAME))
        .unwrap()
        .get()
        .unwrap();
    assert_eq!((s.flows, s.misses), (2, 0));
    assert_eq!(total_drops(&dp), 0);
}

// kube-proxy's reject: a SYN to a frontend without endpoints comes back as the frontend's
// RST|ACK (acking the SYN) out of the client's own veth; a TCP segment that is no SYN is a
// counted miss (UDP: the next test).
#[test]
fn a_cluster_ip_without_endpoints_resets_a_syn_and_drops_the_rest() {
    let mut dp = node(&[CLIENT, CLIENT6]);
    service(&mut dp, 1, CLUSTER_IP, TCP, 80, &[]);
    service(&mut dp, 2, CLUSTER_IP6, TCP, 80, &[]);
    for (client, vip) in [(CLIENT, CLUSTER_IP), (CLIENT6, CLUSTER_IP6)] {
        let out = dp.run("sdn_from_pod", &packet(client, 40000, vip, 80, TCP), LO, 0);
        assert_eq!(out.verdict, TC_ACT_REDIRECT, "{vip}: the reset goes back");
        let r = &out.packet;
        assert_eq!(r[0..6], mac_of(ip(client)), "to the client's MAC");
        assert_eq!(r[6..12], cfg().gw_mac, "from the gateway's");
        let (l4, addrs) = if ip(client).is_ipv4() {
            pkt::assert_v4_checksums(r);
            let q = pkt::parse_v4(r);
            (34, (IpAddr::from(q.src), q.sport, IpAddr::from(q.dst), q.dport))
        } else {
            pkt::assert_v6_checksums(r);
            let q = pkt::parse_v6(r);
            (54, (IpAddr::from(q.src), q.sport, IpAddr::from(q.dst), q.dport))
        };
        assert_eq!(r.len(), l4 + 20, "headers only");
        assert_eq!(addrs, (ip(vip), 80, ip(client), 40000));
        assert_eq!(r[l4 + 13], 0x14, "RST|ACK");
        assert_eq!(r[l4 + 8..l4 + 12], 2u32.to_be_bytes(), "acks the SYN (seq 1)");
    }
    // The same segment as an ACK (no SYN): nothing to answer, dropped.
    let mut ack = packet(CLIENT, 40000, CLUSTER_IP, 80, TCP);
    ack[34 + 13] = 0x10;
    ack[34 + 16..34 + 18].fill(0);
    let c = pkt::l4_csum_v4(ip4(CLIENT), ip4(CLUSTER_IP), TCP, &ack[34..]);
    ack[34 + 16..34 + 18].copy_from_slice(&c.to_be_bytes());
    let out = dp.run("sdn_from_pod", &ack, LO, 0);
    assert_dropped(&dp, out.verdict, DropReason::VipNoBackend);
    let s = LbStatsMap::try_from(dp.map(lb_stats::NAME))
        .unwrap()
        .get()
        .unwrap();
    assert_eq!(s.misses, 3);
}

fn ip4(a: &str) -> Ipv4Addr {
    a.parse().unwrap()
}

fn ip6(a: &str) -> Ipv6Addr {
    a.parse().unwrap()
}

/// A UDP datagram `client:40000 -> vip:53` with `payload`, checksums valid, in a frame from
/// the client's MAC.
fn datagram(client: &str, vip: &str, payload: &[u8]) -> Vec<u8> {
    let mut seg = Vec::new();
    seg.extend_from_slice(&40000u16.to_be_bytes());
    seg.extend_from_slice(&53u16.to_be_bytes());
    seg.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    seg.extend_from_slice(&[0, 0]);
    seg.extend_from_slice(payload);
    let mac = mac_of(ip(client));
    if ip(client).is_ipv4() {
        let c = pkt::l4_csum_v4(ip4(client), ip4(vip), UDP, &seg);
        seg[6..8].copy_from_slice(&c.to_be_bytes());
        pkt::frame(
            cfg().gw_mac,
            mac,
            &pkt::ip4_raw(ip4(client), ip4(vip), UDP, 9, 0, &seg),
        )
    } else {
        let c = pkt::l4_csum_v6(ip6(client), ip6(vip), UDP, &seg);
        seg[6..8].copy_from_slice(&c.to_be_bytes());
        pkt::frame6(cfg().gw_mac, mac, &pkt::ip6_raw(ip6(client), ip6(vip), UDP, &seg))
    }
}

// kube-proxy's reject for UDP: a datagram to a frontend without endpoints comes back as the
// frontend's ICMP port unreachable (IPv4 type 3 code 3, IPv6 type 1 code 4) out of the
// client's own veth, its checksums valid, quoting the datagram from its IP header on: all
// of it when it fits, else cut where the error reaches 576 bytes (IPv4) or 1280 (IPv6).
// Payload sizes put every path of the checksum's walk to work (whole chunks, words, 1 to 3
// last bytes).
#[test]
fn a_cluster_ip_without_endpoints_answers_a_datagram_with_port_unreachable() {
    let mut dp = node(&[CLIENT, CLIENT6]);
    service(&mut dp, 1, CLUSTER_IP, UDP, 53, &[]);
    service(&mut dp, 2, CLUSTER_IP6, UDP, 53, &[]);
    let mut sent: u64 = 0;
    for (client, vip) in [(CLIENT, CLUSTER_IP), (CLIENT6, CLUSTER_IP6)] {
        let v4 = ip(client).is_ipv4();
        let (hlen, max) = if v4 { (20, 576) } else { (40, 1280) };
        for size in [9, 10, 11, 12, 61, 1000, 1500] {
            let payload: Vec<u8> = (0..size).map(|i| (i * 7 + 1) as u8).collect();
            let p = datagram(client, vip, &payload);
            let out = dp.run("sdn_from_pod", &p, LO, 0);
            sent += 1;
            let what = format!("{vip}, {size} bytes of payload");
            assert_eq!(out.verdict, TC_ACT_REDIRECT, "{what}: the error goes back");
            let r = &out.packet;
            assert_eq!(r[0..6], mac_of(ip(client)), "{what}: to the client's MAC");
            assert_eq!(r[6..12], cfg().gw_mac, "{what}: from the gateway's");
            let quoted = p.len() - 14;
            let want_quote = quoted.min(max - hlen - 8);
            assert_eq!(r.len(), 14 + hlen + 8 + want_quote, "{what}: the length");
            let l4 = 14 + hlen;
            if v4 {
                pkt::assert_v4_checksums(r);
                let q = pkt::parse_v4(r);
                assert_eq!(q.proto, pkt::ICMP, "{what}");
                assert_eq!(
                    (q.src, q.dst),
                    (ip4(vip), ip4(client)),
                    "{what}: from the frontend"
                );
                assert_eq!(
                    usize::from(u16::from_be_bytes([r[16], r[17]])),
                    r.len() - 14,
                    "{what}: total length"
                );
                assert_eq!(r[14], 0x45, "{what}: no options");
                assert_eq!((r[l4], r[l4 + 1]), (3, 3), "{what}: port unreachable");
            } else {
                pkt::assert_icmp6_error_checksums(pkt::ip6_of(r), want_quote == quoted);
                let q = pkt::parse_v6(r);
                assert_eq!(q.proto, pkt::ICMPV6, "{what}");
                assert_eq!(
                    (q.src, q.dst),
                    (ip6(vip), ip6(client)),
                    "{what}: from the frontend"
                );
                assert_eq!((r[l4], r[l4 + 1]), (1, 4), "{what}: port unreachable");
            }
            assert_eq!(r[l4 + 4..l4 + 8], [0; 4], "{what}: the unused word");
            assert_eq!(
                r[l4 + 8..],
                p[14..14 + want_quote],
                "{what}: the quote is the datagram"
            );
            if want_quote == quoted && v4 {
                let quote = &r[l4 + 8..];
                let seg = &quote[20..];
                assert_eq!(
                    pkt::l4_csum_v4(ip4(client), ip4(vip), UDP, seg),
                    0,
                    "{what}: the quoted UDP checksum still verifies"
                );
            }
            assert!(
                (want_quote < quoted) == (size >= if v4 { 1000 } else { 1500 }),
                "{what}: only the big ones are cut"
            );
        }
    }
    assert_eq!(total_drops(&dp), 0, "every datagram was answered");
    let s = LbStatsMap::try_from(dp.map(lb_stats::NAME))
        .unwrap()
        .get()
        .unwrap();
    assert_eq!(s.misses, sent, "each one a miss");
}
