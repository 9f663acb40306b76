//! The fabric bridge's ICMP errors and fragments through `BPF_PROG_TEST_RUN`
//! (`lib/icmp_err.h`, `lib/frag.h`). Needs root; fails (never skips) without it.
//!
//! Every checksum is recomputed from scratch by the test (`common::pkt`): the outer IP
//! header's, the ICMP message's (which covers the quote), the quoted IP header's and the
//! quoted L4 checksum, and for fragments the L4 checksum of the reassembled datagram.

mod common;

use std::net::Ipv4Addr;

use common::fixtures::*;
use common::pkt::{self, ICMP, TCP, UDP};
use common::{Datapath, LO, TC_ACT_OK};
use cozyplane_bpf::DropReason;

const HOST_MAC: [u8; 6] = [0x0a, 0, 0, 0, 0, 0xee];
const FABRIC: &str = "10.244.1.5";
const VPC_IP: &str = "10.0.0.1";
/// A router on the fabric side (RFC 5737 documentation range).
const ROUTER: &str = "192.0.2.1";
const CLIENT: &str = "198.51.100.7";

fn gw() -> Ipv4Addr {
    cfg().gw_ipv4
}

fn setup() -> Datapath {
    let mut dp = Datapath::load(&cfg());
    vpc_pod(&mut dp, VPC_A, VPC_IP, MAC_A1);
    bridge(&mut dp, FABRIC, VPC_A, VPC_IP);
    dp
}

/// A bridged flow: the client's request as sdn_to_pod delivered it (the pod's view) and
/// the pod's reply as sdn_from_pod sent it on (the fabric's view), both IPv4 packets.
struct Flow {
    request_in_pod: Vec<u8>,
    reply_on_fabric: Vec<u8>,
    gw_port: u16,
}

fn open_flow(dp: &Datapath, proto: u8, cport: u16, pport: u16) -> Flow {
    let (client, fabric, vpc) = (v4(CLIENT), v4(FABRIC), v4(VPC_IP));
    let (req, rep) = if proto == ICMP { (8, 0) } else { (0, 0) };
    let probe = pkt::ipv4(HOST_MAC, MAC_A1, client, fabric, proto, cport, pport, req);
    let inn = dp.run(TO_POD, &probe, LO, 0);
    assert_eq!(inn.verdict, TC_ACT_OK, "proto {proto}: request delivered");
    let gw_port = pkt::parse_v4(&inn.packet).sport;
    let (rs, rd) = if proto == ICMP {
        (gw_port, gw_port)
    } else {
        (pport, gw_port)
    };
    let reply = pkt::ipv4(MAC_A1, cfg().gw_mac, vpc, gw(), proto, rs, rd, rep);
    let out = dp.run(FROM_POD, &reply, LO, 0);
    assert_eq!(out.verdict, TC_ACT_OK, "proto {proto}: reply sent on");
    Flow {
        request_in_pod: pkt::ip_of(&inn.packet).to_vec(),
        reply_on_fabric: pkt::ip_of(&out.packet).to_vec(),
        gw_port,
    }
}

/// An ICMP error packet (IPv4): every checksum verifies, inside the quote too. With a
/// whole quoted packet the quoted L4 checksum is verified as well.
#[track_caller]
fn assert_error_checksums(ip: &[u8], whole_quote: bool) {
    assert_eq!(pkt::csum(&ip[..20]), 0, "outer IP header checksum");
    assert_eq!(ip[9], ICMP);
    let icmp = &ip[20..];
    assert_eq!(pkt::csum(icmp), 0, "ICMP checksum (covers the quote)");
    let quote = &icmp[8..];
    assert_eq!(pkt::csum(&quote[..20]), 0, "quoted IP header checksum");
    if whole_quote {
        let (s, d) = pkt::addrs(quote);
        let proto = quote[9];
        let seg = &quote[20..];
        let c = if proto == ICMP {
            pkt::csum(seg)
        } else {
            pkt::l4_csum_v4(s, d, proto, seg)
        };
        assert_eq!(c, 0, "quoted L4 checksum (proto {proto})");
    }
}

// A router's "fragmentation needed" (and "time exceeded") about the pod's reply reaches
// the pod as if its gateway had sent it, quoting the reply exactly as the pod sent it,
// so the pod's kernel finds the socket and learns the path MTU. TCP, UDP and ICMP echo.
#[test]
fn errors_about_a_pods_bridged_packets_reach_the_pod_in_its_vpc_view() {
    let dp = setup();
    for (proto, cport, pport) in [(TCP, 40000, 8080), (UDP, 40001, 53), (ICMP, 77, 77)] {
        let flow = open_flow(&dp, proto, cport, pport);
        // What the pod sent, before the bridge's reverse rewrite.
        let (rs, rd) = if proto == ICMP {
            (flow.gw_port, flow.gw_port)
        } else {
            (pport, flow.gw_port)
        };
        let pod_sent = pkt::ipv4(MAC_A1, cfg().gw_mac, v4(VPC_IP), gw(), proto, rs, rd, 0);
        let pod_sent = pkt::ip_of(&pod_sent);

        // Fragmentation needed, next-hop MTU 1280, quoting the whole reply.
        let err = pkt::icmp4_error(
            v4(ROUTER),
            v4(FABRIC),
            3,
            4,
            [0, 0, 0x05, 0x00],
            &flow.reply_on_fabric,
        );
        let out = dp.run(TO_POD, &pkt::frame(MAC_A1, HOST_MAC, &err), LO, 0);
        assert_eq!(out.verdict, TC_ACT_OK, "proto {proto}: error delivered");
        let ip = pkt::ip_of(&out.packet);
        assert_eq!(
            pkt::addrs(ip),
            (gw(), v4(VPC_IP)),
            "proto {proto}: outer, VPC view"
        );
        assert_eq!(&ip[20..22], &[3, 4], "type and code kept");
        assert_eq!(&ip[24..28], &[0, 0, 0x05, 0x00], "next-hop MTU kept");
        assert_error_checksums(ip, true);
        assert_eq!(
            &ip[28..],
            pod_sent,
            "proto {proto}: the quote is the packet the pod sent"
        );
        assert_eq!(&out.packet[0..6], &MAC_A1, "addressed to the pod");

        // Time exceeded with the minimal quote (IP header + 8 bytes).
        let short = &flow.reply_on_fabric[..28];
        let err = pkt::icmp4_error(v4(CLIENT), v4(FABRIC), 11, 0, [0; 4], short);
        let out = dp.run(TO_POD, &pkt::frame(MAC_A1, HOST_MAC, &err), LO, 0);
        assert_eq!(out.verdict, TC_ACT_OK, "proto {proto}: short quote delivered");
        let ip = pkt::ip_of(&out.packet);
        assert_eq!(pkt::addrs(ip), (gw(), v4(VPC_IP)));
        assert_error_checksums(ip, false);
        // The 8 quoted bytes hold the ports (and the UDP checksum), all as the pod sent them.
        assert_eq!(&ip[28..], &pod_sent[..28], "proto {proto}: short quote");
    }
    assert_eq!(total_drops(&dp), 0);
}

// The pod's own errors about packets it got through the bridge (port unreachable for a
// UDP probe, as at the end of a tracepath) leave with the fabric IP as source, to the
// client, quoting the client's packet exactly as the client sent it.
#[test]
fn errors_the_pod_sends_about_bridged_packets_reach_the_client_in_its_view() {
    let dp = setup();
    for (proto, cport, pport) in [(UDP, 40001, 33434), (TCP, 40000, 8080), (ICMP, 77, 77)] {
        let flow = open_flow(&dp, proto, cport, pport);
        let (req, _) = if proto == ICMP { (8, 0) } else { (0, 0) };
        let client_sent = pkt::ipv4(HOST_MAC, MAC_A1, v4(CLIENT), v4(FABRIC), proto, cport, pport, req);
        let client_sent = pkt::ip_of(&client_sent);

        let err = pkt::icmp4_error(v4(VPC_IP), gw(), 3, 3, [0; 4], &flow.request_in_pod);
        let out = dp.run(FROM_POD, &pkt::frame(cfg().gw_mac, MAC_A1, &err), LO, 0);
        assert_eq!(out.verdict, TC_ACT_OK, "proto {proto}: to the host stack");
        let ip = pkt::ip_of(&out.packet);
        assert_eq!(
            pkt::addrs(ip),
            (v4(FABRIC), v4(CLIENT)),
            "proto {proto}: fabric view"
        );
        assert_error_checksums(ip, true);
        assert_eq!(
            &ip[28..],
            client_sent,
            "proto {proto}: the quote is the client's packet"
        );
    }
    assert_eq!(total_drops(&dp), 0);
}

// An error about a flow the bridge never saw tells the pod nothing it may know, and a pod's
// error about one is no reply of any flow: both dropped.
#[test]
fn errors_about_unknown_flows_are_dropped() {
    let dp = setup();
    let stranger = pkt::ipv4(HOST_MAC, MAC_A1, v4(FABRIC), v4(CLIENT), UDP, 53, 4444, 0);
    let err = pkt::icmp4_error(v4(ROUTER), v4(FABRIC), 3, 4, [0, 0, 5, 0], pkt::ip_of(&stranger));
    let out = dp.run(TO_POD, &pkt::frame(MAC_A1, HOST_MAC, &err), LO, 0);
    assert_dropped(&dp, out.verdict, DropReason::BridgeNoCt);

    let unknown = pkt::ipv4(HOST_MAC, MAC_A1, gw(), v4(VPC_IP), UDP, 40000, 33434, 0);
    let err = pkt::icmp4_error(v4(VPC_IP), gw(), 3, 3, [0; 4], pkt::ip_of(&unknown));
    let out = dp.run(FROM_POD, &pkt::frame(cfg().gw_mac, MAC_A1, &err), LO, 0);
    assert_eq!(out.verdict, common::TC_ACT_SHOT);
    assert_eq!(drops_of(&dp, DropReason::BridgeNoCt), 2, "both counted");
}

/// A UDP datagram of `len` payload bytes as `frag`-byte fragments.
fn udp_fragments(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16, id: u16, len: usize) -> Vec<Vec<u8>> {
    let payload: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
    let seg = pkt::udp_seg(src, dst, sport, dport, &payload);
    let frags = pkt::fragment(&pkt::ip4_raw(src, dst, UDP, id, 0, &seg), 1480);
    assert!(frags.len() >= 3);
    frags
}

// A fragmented UDP datagram through the bridge, both ways (ping/UDP `-s 4000`): every
// fragment is delivered with the first fragment's translation, and the reassembled
// datagram's checksum verifies under its new addresses.
#[test]
fn fragments_of_a_bridged_datagram_follow_the_first() {
    let dp = setup();
    let frags = udp_fragments(v4(CLIENT), v4(FABRIC), 40002, 5353, 0x1234, 4000);
    let mut delivered = Vec::new();
    for (i, f) in frags.iter().enumerate() {
        let out = dp.run(TO_POD, &pkt::frame(MAC_A1, HOST_MAC, f), LO, 0);
        assert_eq!(out.verdict, TC_ACT_OK, "fragment {i} delivered");
        assert_eq!(&out.packet[0..6], &MAC_A1, "fragment {i} to the pod");
        delivered.push(pkt::ip_of(&out.packet).to_vec());
    }
    let (src, dst, proto, seg) = pkt::reassemble(&delivered);
    assert_eq!((src, dst, proto), (gw(), v4(VPC_IP), UDP));
    assert_eq!(
        pkt::l4_csum_v4(src, dst, UDP, &seg),
        0,
        "reassembled UDP checksum"
    );
    let gw_port = u16::from_be_bytes([seg[0], seg[1]]);
    assert!((32768..61000).contains(&gw_port), "gateway port {gw_port}");
    assert_eq!(u16::from_be_bytes([seg[2], seg[3]]), 5353);

    // The pod's answer, as large, fragmented by the pod.
    let frags = udp_fragments(v4(VPC_IP), gw(), 5353, gw_port, 0x4321, 4000);
    let mut sent = Vec::new();
    for (i, f) in frags.iter().enumerate() {
        let out = dp.run(FROM_POD, &pkt::frame(cfg().gw_mac, MAC_A1, f), LO, 0);
        assert_eq!(out.verdict, TC_ACT_OK, "reply fragment {i} sent on");
        sent.push(pkt::ip_of(&out.packet).to_vec());
    }
    let (src, dst, _, seg) = pkt::reassemble(&sent);
    assert_eq!((src, dst), (v4(FABRIC), v4(CLIENT)));
    assert_eq!(
        pkt::l4_csum_v4(src, dst, UDP, &seg),
        0,
        "reassembled reply checksum"
    );
    assert_eq!(
        u16::from_be_bytes([seg[2], seg[3]]),
        40002,
        "back to the client's port"
    );
    assert_eq!(total_drops(&dp), 0);
}

// A later fragment whose first fragment was never seen cannot be translated: dropped and
// counted, in either direction.
#[test]
fn a_later_fragment_without_its_first_is_dropped() {
    let dp = setup();
    let frags = udp_fragments(v4(CLIENT), v4(FABRIC), 40003, 5353, 0x777, 4000);
    let out = dp.run(TO_POD, &pkt::frame(MAC_A1, HOST_MAC, &frags[1]), LO, 0);
    assert_dropped(&dp, out.verdict, DropReason::Fragment);

    let frags = udp_fragments(v4(VPC_IP), gw(), 5353, 40000, 0x778, 4000);
    let out = dp.run(FROM_POD, &pkt::frame(cfg().gw_mac, MAC_A1, &frags[2]), LO, 0);
    assert_eq!(drops_of(&dp, DropReason::Fragment), 2, "{}", out.verdict);
}
