//! Floating IPs through `BPF_PROG_TEST_RUN` (`lib/fip.h`): the 1:1 NAT both ways, both
//! families, ICMP errors, and the door's meter. Needs root; fails (never skips) without it.
//!
//! Checksums are recomputed from scratch by the test (`common::pkt`), so they check the
//! programs' incremental updates. Outbound paths leave by `bpf_fib_lookup` +
//! `bpf_redirect_neigh`, so those tests run in a namespace with a route out
//! (`common::doors::in_routed_netns`).

mod common;

use std::net::{Ipv4Addr, Ipv6Addr};

use common::doors::*;
use common::fixtures::*;
use common::pkt::{self, ICMP, ICMPV6, TCP, UDP};
use common::{Datapath, LO, TC_ACT_OK, TC_ACT_REDIRECT};
use cozyplane_bpf::DropReason;
use cozyplane_bpf::abi::DoorKey;

const PUB: &str = "203.0.113.10";
const VPC_IP: &str = "10.0.0.1";
const CLIENT: &str = "198.51.100.7";
const PUB6: &str = "2001:db8:1::10";
const VPC_IP6: &str = "fd00:a::1";
const CLIENT6: &str = "2001:db8:2::7";

fn v6(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

fn setup() -> Datapath {
    let mut dp = Datapath::load(&cfg());
    vpc_pod(&mut dp, VPC_A, VPC_IP, MAC_A1);
    endpoint(&mut dp, VPC_A, VPC_IP6, LO, MAC_A1);
    floating_ip(&mut dp, PUB, VPC_A, VPC_IP);
    floating_ip(&mut dp, PUB6, VPC_A, VPC_IP6);
    internal_range(&mut dp, 0, "10.96.0.0/12");
    internal_range(&mut dp, VPC_A, "10.0.0.0/24");
    dp
}

fn from_client(proto: u8, dst: &str) -> Vec<u8> {
    pkt::ipv4(ROUTER_MAC, UPLINK_MAC, v4(CLIENT), v4(dst), proto, 40000, 80, 8)
}

#[test]
fn inbound_is_dnated_to_the_target_with_the_client_preserved() {
    let dp = setup();
    for proto in [TCP, UDP, ICMP] {
        let r = dp.run(FROM_UPLINK, &from_client(proto, PUB), LO, 0);
        assert_eq!(r.verdict, TC_ACT_REDIRECT, "proto {proto}: into the pod");
        let got = pkt::parse_v4(&r.packet);
        assert_eq!(got.dst, v4(VPC_IP), "proto {proto}");
        assert_eq!(got.src, v4(CLIENT), "the client's own address reaches the pod");
        assert_eq!(
            (got.sport, got.dport),
            if proto == ICMP {
                (40000, 40000)
            } else {
                (40000, 80)
            }
        );
        assert_eq!(got.dst_mac, MAC_A1, "delivered to the target pod");
        pkt::assert_v4_checksums(&r.packet);
    }
    let st = door(&dp, VPC_A, DoorKey::EIP, DoorKey::IN);
    assert_eq!(st.packets, 3, "eip in metered per packet");
    assert_eq!(total_drops(&dp), 0);
}

#[test]
fn inbound_for_a_target_on_another_node_goes_over_the_overlay() {
    let mut dp = Datapath::load(&cfg());
    floating_ip(&mut dp, PUB, VPC_A, VPC_IP);
    remote(&mut dp, VPC_A, VPC_IP, "192.0.2.20");
    let r = dp.run(FROM_UPLINK, &from_client(TCP, PUB), LO, 0);
    assert_eq!(r.verdict, TC_ACT_REDIRECT);
    let got = pkt::parse_v4(&r.packet);
    assert_eq!((got.src, got.dst), (v4(CLIENT), v4(VPC_IP)));
    assert_eq!(
        got.dst_mac,
        cfg().tunnel_mac,
        "encapsulated (inner MAC of the overlay)"
    );
    pkt::assert_v4_checksums(&r.packet);
    assert_eq!(door(&dp, VPC_A, DoorKey::EIP, DoorKey::IN).packets, 1);
}

#[test]
fn inbound_for_a_target_nowhere_is_dropped() {
    let mut dp = Datapath::load(&cfg());
    floating_ip(&mut dp, PUB, VPC_A, VPC_IP);
    let r = dp.run(FROM_UPLINK, &from_client(TCP, PUB), LO, 0);
    assert_dropped(&dp, r.verdict, DropReason::FipNoTarget);
    assert_eq!(
        door(&dp, VPC_A, DoorKey::EIP, DoorKey::IN).packets,
        0,
        "nothing crossed"
    );
}

#[test]
fn other_uplink_traffic_is_left_to_the_host() {
    let dp = setup();
    let p = from_client(TCP, "203.0.113.11");
    let r = dp.run(FROM_UPLINK, &p, LO, 0);
    assert_eq!(r.verdict, TC_ACT_OK);
    assert_eq!(r.packet, p, "untouched");
    assert!(door_rows(&dp).is_empty());
}

#[test]
fn outbound_is_snated_to_the_public_address_and_routed_out() {
    in_routed_netns(|| {
        let dp = setup();
        for proto in [TCP, UDP, ICMP] {
            let p = pkt::ipv4(MAC_A1, cfg().gw_mac, v4(VPC_IP), v4(CLIENT), proto, 80, 40000, 0);
            let r = dp.run(FROM_POD, &p, LO, 0);
            assert_eq!(r.verdict, TC_ACT_REDIRECT, "proto {proto}: out by the route");
            let got = pkt::parse_v4(&r.packet);
            assert_eq!((got.src, got.dst), (v4(PUB), v4(CLIENT)), "proto {proto}");
            pkt::assert_v4_checksums(&r.packet);
        }
        assert_eq!(door(&dp, VPC_A, DoorKey::EIP, DoorKey::OUT).packets, 3);
        assert_eq!(total_drops(&dp), 0);
    });
}

#[test]
fn outbound_to_internal_destinations_is_never_natted() {
    in_routed_netns(|| {
        let dp = setup();
        // A Service address (cluster-internal) and a vacant address of the own VPC.
        for dst in ["10.96.0.10", "10.0.0.77"] {
            let p = udp4(MAC_A1, VPC_IP, dst);
            let r = dp.run(FROM_POD, &p, LO, 0);
            assert_eq!(r.verdict, common::TC_ACT_SHOT, "{dst}");
        }
        assert_eq!(drops_of(&dp, DropReason::VpcIsolation), 2, "stays isolated");
        assert!(door_rows(&dp).is_empty());
    });
}

#[test]
fn a_pod_without_a_floating_ip_or_gateway_gets_nothing_out() {
    in_routed_netns(|| {
        let mut dp = Datapath::load(&cfg());
        vpc_pod(&mut dp, VPC_A, VPC_IP, MAC_A1);
        let r = dp.run(FROM_POD, &udp4(MAC_A1, VPC_IP, CLIENT), LO, 0);
        // The last door tried is the gateway's, and this VPC has none.
        assert_dropped(&dp, r.verdict, DropReason::NoGateway);
    });
}

#[test]
fn outbound_without_a_route_is_dropped() {
    // The test's own namespace: no namespace of ours, so no route to the client here may
    // be assumed; a fresh namespace without routes makes it certain.
    std::thread::spawn(|| {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
        let dp = setup();
        let r = dp.run(FROM_POD, &udp4(MAC_A1, VPC_IP, CLIENT), LO, 0);
        assert_dropped(&dp, r.verdict, DropReason::NsNoRoute);
        assert_eq!(door(&dp, VPC_A, DoorKey::EIP, DoorKey::OUT).packets, 0);
    })
    .join()
    .unwrap_or_else(|e| std::panic::resume_unwind(e));
}

/// A router's "fragmentation needed" about a UDP datagram the target sent (it left as
/// PUB): the outer destination and the quoted source become the VPC address.
#[test]
fn inbound_icmp_error_has_its_quote_translated() {
    let dp = setup();
    let (public, vpc, client) = (v4(PUB), v4(VPC_IP), v4(CLIENT));
    let seg = pkt::udp_seg(public, client, 5353, 40000, b"the target's datagram");
    let quote = pkt::ip4_raw(public, client, UDP, 99, 0x4000, &seg);
    let err = pkt::icmp4_error(v4("192.0.2.254"), public, 3, 4, [0, 0, 0x05, 0x00], &quote);
    let r = dp.run(FROM_UPLINK, &pkt::frame(UPLINK_MAC, ROUTER_MAC, &err), LO, 0);
    assert_eq!(r.verdict, TC_ACT_REDIRECT);
    pkt::assert_v4_checksums(&r.packet);
    let ip = pkt::ip_of(&r.packet);
    assert_eq!(pkt::addrs(ip), (v4("192.0.2.254"), vpc));
    let q = &ip[28..];
    assert_eq!(pkt::addrs(q), (vpc, client), "quote as the pod sent it");
    assert_eq!(pkt::csum(&q[..20]), 0, "quoted IP header checksum");
    assert_eq!(
        pkt::l4_csum_v4(vpc, client, UDP, &q[20..]),
        0,
        "quoted UDP checksum"
    );
}

/// The pod's "port unreachable" for a datagram it got through the door (client -> VPC
/// address): the outer source and the quoted destination become the public address.
#[test]
fn outbound_icmp_error_has_its_quote_translated() {
    in_routed_netns(|| {
        let dp = setup();
        let (public, vpc, client) = (v4(PUB), v4(VPC_IP), v4(CLIENT));
        let seg = pkt::udp_seg(client, vpc, 40000, 5353, b"the client's datagram");
        let quote = pkt::ip4_raw(client, vpc, UDP, 5, 0, &seg);
        let err = pkt::icmp4_error(vpc, client, 3, 3, [0; 4], &quote);
        let r = dp.run(FROM_POD, &pkt::frame(cfg().gw_mac, MAC_A1, &err), LO, 0);
        assert_eq!(r.verdict, TC_ACT_REDIRECT);
        pkt::assert_v4_checksums(&r.packet);
        let ip = pkt::ip_of(&r.packet);
        assert_eq!(pkt::addrs(ip), (public, client));
        let q = &ip[28..];
        assert_eq!(pkt::addrs(q), (client, public), "quote as the client sent it");
        assert_eq!(pkt::csum(&q[..20]), 0);
        assert_eq!(pkt::l4_csum_v4(client, public, UDP, &q[20..]), 0);
    });
}

#[test]
fn a_later_fragment_is_translated_by_its_addresses_alone() {
    let dp = setup();
    let body = [0x55u8; 64];
    let frag = pkt::ip4_raw(v4(CLIENT), v4(PUB), UDP, 7, 8 /* offset 64 */, &body);
    let r = dp.run(FROM_UPLINK, &pkt::frame(UPLINK_MAC, ROUTER_MAC, &frag), LO, 0);
    assert_eq!(r.verdict, TC_ACT_REDIRECT);
    let ip = pkt::ip_of(&r.packet);
    assert_eq!(pkt::addrs(ip), (v4(CLIENT), v4(VPC_IP)));
    assert_eq!(pkt::csum(&ip[..20]), 0);
    assert_eq!(&ip[20..], &body, "payload untouched");
}

// === IPv6 twins ===

fn v6_seg_csum(src: Ipv6Addr, dst: Ipv6Addr, proto: u8, seg: &[u8]) -> u16 {
    let mut pseudo = Vec::new();
    pseudo.extend_from_slice(&src.octets());
    pseudo.extend_from_slice(&dst.octets());
    pseudo.extend_from_slice(&(seg.len() as u32).to_be_bytes());
    pseudo.extend_from_slice(&[0, 0, 0, proto]);
    pseudo.extend_from_slice(seg);
    pkt::csum(&pseudo)
}

/// An Ethernet/IPv6 frame carrying `seg` (its checksum already set).
fn v6_frame(
    dst_mac: [u8; 6],
    src_mac: [u8; 6],
    src: Ipv6Addr,
    dst: Ipv6Addr,
    proto: u8,
    seg: &[u8],
) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&dst_mac);
    p.extend_from_slice(&src_mac);
    p.extend_from_slice(&pkt::ETH_IPV6.to_be_bytes());
    p.extend_from_slice(&[0x60, 0, 0, 0]);
    p.extend_from_slice(&(seg.len() as u16).to_be_bytes());
    p.extend_from_slice(&[proto, 64]);
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    p.extend_from_slice(seg);
    p
}

fn udp6_seg(src: Ipv6Addr, dst: Ipv6Addr, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut seg = Vec::new();
    seg.extend_from_slice(&sport.to_be_bytes());
    seg.extend_from_slice(&dport.to_be_bytes());
    seg.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    seg.extend_from_slice(&[0, 0]);
    seg.extend_from_slice(payload);
    let c = v6_seg_csum(src, dst, UDP, &seg);
    seg[6..8].copy_from_slice(&c.to_be_bytes());
    seg
}

/// An ICMPv6 error `typ` from `src` to `dst` quoting the IPv6 packet `quote`.
fn icmp6_error(src: Ipv6Addr, dst: Ipv6Addr, typ: u8, rest: [u8; 4], quote: &[u8]) -> Vec<u8> {
    let mut m = vec![typ, 0, 0, 0];
    m.extend_from_slice(&rest);
    m.extend_from_slice(quote);
    let c = v6_seg_csum(src, dst, ICMPV6, &m);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    v6_frame(UPLINK_MAC, ROUTER_MAC, src, dst, ICMPV6, &m)
}

#[test]
fn ipv6_inbound_is_dnated_with_the_client_preserved() {
    let dp = setup();
    for proto in [TCP, UDP, ICMPV6] {
        let p = pkt::ipv6(
            ROUTER_MAC,
            UPLINK_MAC,
            v6(CLIENT6),
            v6(PUB6),
            proto,
            40000,
            443,
            128,
        );
        let r = dp.run(FROM_UPLINK, &p, LO, 0);
        assert_eq!(r.verdict, TC_ACT_REDIRECT, "proto {proto}");
        let got = pkt::parse_v6(&r.packet);
        assert_eq!((got.src, got.dst), (v6(CLIENT6), v6(VPC_IP6)), "proto {proto}");
        assert_eq!(got.dst_mac, MAC_A1);
        pkt::assert_v6_checksums(&r.packet);
    }
    assert_eq!(door(&dp, VPC_A, DoorKey::EIP, DoorKey::IN).packets, 3);
}

#[test]
fn ipv6_outbound_is_snated_and_routed_out() {
    in_routed_netns(|| {
        let dp = setup();
        for proto in [TCP, UDP, ICMPV6] {
            let p = pkt::ipv6(
                MAC_A1,
                cfg().gw_mac,
                v6(VPC_IP6),
                v6(CLIENT6),
                proto,
                443,
                40000,
                129,
            );
            let r = dp.run(FROM_POD, &p, LO, 0);
            assert_eq!(r.verdict, TC_ACT_REDIRECT, "proto {proto}");
            let got = pkt::parse_v6(&r.packet);
            assert_eq!((got.src, got.dst), (v6(PUB6), v6(CLIENT6)), "proto {proto}");
            pkt::assert_v6_checksums(&r.packet);
        }
        assert_eq!(door(&dp, VPC_A, DoorKey::EIP, DoorKey::OUT).packets, 3);
    });
}

/// "Packet too big" about a UDP datagram the target sent as PUB6.
#[test]
fn ipv6_inbound_icmp_error_has_its_quote_translated() {
    let dp = setup();
    let (public, vpc, client) = (v6(PUB6), v6(VPC_IP6), v6(CLIENT6));
    let router = v6("2001:db8:ff::fe");
    let seg = udp6_seg(public, client, 5353, 40000, b"the target's datagram");
    let quote = &v6_frame([0; 6], [0; 6], public, client, UDP, &seg)[14..];
    let err = icmp6_error(router, public, 2, 1280u32.to_be_bytes(), quote);
    let r = dp.run(FROM_UPLINK, &err, LO, 0);
    assert_eq!(r.verdict, TC_ACT_REDIRECT);
    pkt::assert_v6_checksums(&r.packet);
    let got = pkt::parse_v6(&r.packet);
    assert_eq!((got.src, got.dst), (router, vpc));
    let q = &r.packet[14 + 40 + 8..];
    let a = |o: usize| Ipv6Addr::from(<[u8; 16]>::try_from(&q[o..o + 16]).unwrap());
    assert_eq!((a(8), a(24)), (vpc, client), "quote as the pod sent it");
    assert_eq!(v6_seg_csum(vpc, client, UDP, &q[40..]), 0, "quoted UDP checksum");
}

#[test]
fn ipv6_outbound_icmp_error_has_its_quote_translated() {
    in_routed_netns(|| {
        let dp = setup();
        let (public, vpc, client) = (v6(PUB6), v6(VPC_IP6), v6(CLIENT6));
        let seg = udp6_seg(client, vpc, 40000, 5353, b"the client's datagram");
        let quote = v6_frame([0; 6], [0; 6], client, vpc, UDP, &seg)[14..].to_vec();
        let mut err = icmp6_error(vpc, client, 1, [0; 4], &quote);
        err[0..6].copy_from_slice(&cfg().gw_mac);
        err[6..12].copy_from_slice(&MAC_A1);
        let r = dp.run(FROM_POD, &err, LO, 0);
        assert_eq!(r.verdict, TC_ACT_REDIRECT);
        pkt::assert_v6_checksums(&r.packet);
        let got = pkt::parse_v6(&r.packet);
        assert_eq!((got.src, got.dst), (public, client));
        let q = &r.packet[14 + 40 + 8..];
        let a = |o: usize| Ipv6Addr::from(<[u8; 16]>::try_from(&q[o..o + 16]).unwrap());
        assert_eq!((a(8), a(24)), (client, public), "quote as the client sent it");
        assert_eq!(v6_seg_csum(client, public, UDP, &q[40..]), 0);
    });
}

// A v4 public address of a v6-only pod: the client's packets come in as IPv6 from its
// 64:ff9b:: form, and the pod's packets to that form leave as IPv4 from the public address
// (NAT46/64, lib/xlat.h). A v6 public address of a v4 target is still no 1:1 NAT.
#[test]
fn a_v4_floating_ip_of_a_v6_only_pod_is_translated_both_ways() {
    in_routed_netns(|| {
        let mut dp = Datapath::load(&cfg());
        vpc_pod(&mut dp, VPC_A, VPC_IP6, MAC_A1);
        floating_ip(&mut dp, PUB, VPC_A, VPC_IP6);
        internal_range(&mut dp, 0, "10.96.0.0/12");
        let client64 = v6("64:ff9b::c633:6407");
        for (proto, proto6) in [(TCP, TCP), (UDP, UDP), (ICMP, ICMPV6)] {
            let inn = from_client(proto, PUB);
            let r = dp.run(FROM_UPLINK, &inn, LO, 0);
            assert_eq!(r.verdict, TC_ACT_REDIRECT, "proto {proto}: into the pod");
            assert_eq!(r.packet.len(), inn.len() + 20);
            pkt::assert_v6_checksums(&r.packet);
            let got = pkt::parse_v6(&r.packet);
            assert_eq!(
                (got.src, got.dst, got.proto),
                (client64, v6(VPC_IP6), proto6),
                "proto {proto}"
            );
            assert_eq!(got.dst_mac, MAC_A1);

            let (sp, dp_, typ) = if proto == ICMP {
                (40000, 40000, 129)
            } else {
                (80, 40000, 0)
            };
            let out = pkt::ipv6(MAC_A1, cfg().gw_mac, v6(VPC_IP6), client64, proto6, sp, dp_, typ);
            let r = dp.run(FROM_POD, &out, LO, 0);
            assert_eq!(r.verdict, TC_ACT_REDIRECT, "proto {proto}: out by the route");
            pkt::assert_v4_checksums(&r.packet);
            let got = pkt::parse_v4(&r.packet);
            assert_eq!(
                (got.src, got.dst, got.proto),
                (v4(PUB), v4(CLIENT), proto),
                "proto {proto}"
            );
        }
        assert_eq!(door(&dp, VPC_A, DoorKey::EIP, DoorKey::IN).packets, 3);
        assert_eq!(door(&dp, VPC_A, DoorKey::EIP, DoorKey::OUT).packets, 3);
        assert_eq!(total_drops(&dp), 0);
    });
    let mut dp = Datapath::load(&cfg());
    vpc_pod(&mut dp, VPC_A, VPC_IP, MAC_A1);
    floating_ip(&mut dp, PUB6, VPC_A, VPC_IP);
    let inn = pkt::ipv6(ROUTER_MAC, UPLINK_MAC, v6(CLIENT6), v6(PUB6), TCP, 40000, 80, 0);
    let r = dp.run(FROM_UPLINK, &inn, LO, 0);
    assert_dropped(&dp, r.verdict, DropReason::Unsupported);
    let _ = Ipv4Addr::UNSPECIFIED;
}

#[test]
fn neighbour_discovery_for_the_public_address_stays_with_the_host() {
    let dp = setup();
    // A unicast neighbour solicitation (reachability probe) addressed to the address.
    let ns = pkt::ipv6(ROUTER_MAC, UPLINK_MAC, v6(CLIENT6), v6(PUB6), ICMPV6, 0, 0, 135);
    let r = dp.run(FROM_UPLINK, &ns, LO, 0);
    assert_eq!((r.verdict, &r.packet), (TC_ACT_OK, &ns));
}
