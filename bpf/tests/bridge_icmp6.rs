//! The fabric bridge's ICMPv6 errors through `BPF_PROG_TEST_RUN` (`lib/icmp_err.h`,
//! `lib/icmp6_err.h`): each of the four error kinds about a bridged TCP, UDP and ICMPv6 echo
//! flow, in both directions. Needs root; fails (never skips) without it.
//!
//! Every checksum is recomputed from scratch by the test (`common::pkt`): the ICMPv6
//! checksum (its pseudo-header carries the rewritten outer addresses, its sum the whole
//! quote) and the quoted L4 checksum under the quoted addresses. Beyond the checksums, the
//! translated quote must be byte for byte the packet its receiver once sent.

mod common;

use std::net::Ipv6Addr;

use common::fixtures::*;
use common::pkt::{self, ICMPV6, TCP, UDP};
use common::{Datapath, LO, TC_ACT_OK, TC_ACT_SHOT};
use cozyplane_bpf::DropReason;

const HOST_MAC: [u8; 6] = [0x0a, 0, 0, 0, 0, 0xee];
const FABRIC: &str = "fd44:1::5";
const VPC_IP: &str = "fd00:10::5";
/// A router between the node and the client, and the client (RFC 3849 documentation range).
const ROUTER: &str = "2001:db8:ff::fe";
const CLIENT: &str = "2001:db8:2::7";

/// The ICMPv6 errors: type, code, the 4 bytes after the checksum.
const KINDS: [(u8, u8, [u8; 4]); 4] = [
    (2, 0, [0, 0, 0x05, 0x00]), // packet too big, MTU 1280
    (3, 0, [0; 4]),             // hop limit exceeded in transit
    (1, 4, [0; 4]),             // destination (port) unreachable
    (4, 0, [0, 0, 0, 6]),       // parameter problem, pointer at the next header
];

fn v6(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

fn gw() -> Ipv6Addr {
    v6("fe80::1")
}

fn setup() -> Datapath {
    let mut dp = Datapath::load(&cfg());
    vpc_pod(&mut dp, VPC_A, VPC_IP, MAC_A1);
    bridge(&mut dp, FABRIC, VPC_A, VPC_IP);
    dp
}

/// A bridged flow: the client's request as sdn_to_pod delivered it (the pod's view) and the
/// pod's reply as sdn_from_pod sent it on (the fabric's view), both IPv6 packets; and the
/// two as their senders sent them.
struct Flow {
    request_in_pod: Vec<u8>,
    reply_on_fabric: Vec<u8>,
    client_sent: Vec<u8>,
    pod_sent: Vec<u8>,
}

fn open_flow(dp: &Datapath, proto: u8, cport: u16, pport: u16) -> Flow {
    let (client, fabric, vpc) = (v6(CLIENT), v6(FABRIC), v6(VPC_IP));
    let (req, rep) = if proto == ICMPV6 { (128, 129) } else { (0, 0) };
    let probe = pkt::ipv6(HOST_MAC, MAC_A1, client, fabric, proto, cport, pport, req);
    let inn = dp.run(TO_POD, &probe, LO, 0);
    assert_eq!(inn.verdict, TC_ACT_OK, "proto {proto}: request delivered");
    let gw_port = pkt::parse_v6(&inn.packet).sport;
    let (rs, rd) = if proto == ICMPV6 {
        (gw_port, gw_port)
    } else {
        (pport, gw_port)
    };
    let reply = pkt::ipv6(MAC_A1, cfg().gw_mac, vpc, gw(), proto, rs, rd, rep);
    let out = dp.run(FROM_POD, &reply, LO, 0);
    assert_eq!(out.verdict, TC_ACT_OK, "proto {proto}: reply sent on");
    Flow {
        request_in_pod: pkt::ip6_of(&inn.packet).to_vec(),
        reply_on_fabric: pkt::ip6_of(&out.packet).to_vec(),
        client_sent: pkt::ip6_of(&probe).to_vec(),
        pod_sent: pkt::ip6_of(&reply).to_vec(),
    }
}

const FLOWS: [(u8, u16, u16); 3] = [(TCP, 40000, 8080), (UDP, 40001, 33434), (ICMPV6, 77, 77)];

// A router's "packet too big" (and every other error) about the pod's reply reaches the pod
// as if its gateway fe80::1 had sent it, quoting the reply exactly as the pod sent it, so the
// pod's kernel finds the socket and learns the path MTU. TCP, UDP and ICMPv6 echo.
#[test]
fn errors_about_a_pods_bridged_packets_reach_the_pod_in_its_vpc_view() {
    let dp = setup();
    for (proto, cport, pport) in FLOWS {
        let flow = open_flow(&dp, proto, cport, pport);
        for (typ, code, rest) in KINDS {
            let what = format!("proto {proto}, type {typ}");
            let err = pkt::icmp6_error(v6(ROUTER), v6(FABRIC), typ, code, rest, &flow.reply_on_fabric);
            let out = dp.run(TO_POD, &pkt::frame6(MAC_A1, HOST_MAC, &err), LO, 0);
            assert_eq!(out.verdict, TC_ACT_OK, "{what}: error delivered");
            assert_eq!(&out.packet[0..6], &MAC_A1, "{what}: addressed to the pod");
            let ip = pkt::ip6_of(&out.packet);
            assert_eq!(pkt::addrs6(ip), (gw(), v6(VPC_IP)), "{what}: outer, VPC view");
            assert_eq!(&ip[40..42], &[typ, code], "{what}: type and code kept");
            assert_eq!(&ip[44..48], &rest, "{what}: MTU / pointer kept");
            pkt::assert_icmp6_error_checksums(ip, true);
            assert_eq!(
                &ip[48..],
                &flow.pod_sent[..],
                "{what}: the quote is the packet the pod sent"
            );
        }

        // The minimal quote (the IPv6 header and 8 bytes): ports, no TCP checksum.
        let short = &flow.reply_on_fabric[..48];
        let err = pkt::icmp6_error(v6(CLIENT), v6(FABRIC), 3, 0, [0; 4], short);
        let out = dp.run(TO_POD, &pkt::frame6(MAC_A1, HOST_MAC, &err), LO, 0);
        assert_eq!(out.verdict, TC_ACT_OK, "proto {proto}: short quote delivered");
        let ip = pkt::ip6_of(&out.packet);
        assert_eq!(pkt::addrs6(ip), (gw(), v6(VPC_IP)));
        pkt::assert_icmp6_error_checksums(ip, false);
        assert_eq!(&ip[48..], &flow.pod_sent[..48], "proto {proto}: short quote");
    }
    assert_eq!(total_drops(&dp), 0);
}

// The pod's own errors about packets it got through the bridge (port unreachable for a UDP
// probe, as at the end of a `tracepath -6`, and the rest) leave with the fabric IP as
// source, to the client, quoting the client's packet exactly as the client sent it.
#[test]
fn errors_the_pod_sends_about_bridged_packets_reach_the_client_in_its_view() {
    let dp = setup();
    for (proto, cport, pport) in FLOWS {
        let flow = open_flow(&dp, proto, cport, pport);
        for (typ, code, rest) in KINDS {
            let what = format!("proto {proto}, type {typ}");
            let err = pkt::icmp6_error(v6(VPC_IP), gw(), typ, code, rest, &flow.request_in_pod);
            let out = dp.run(FROM_POD, &pkt::frame6(cfg().gw_mac, MAC_A1, &err), LO, 0);
            assert_eq!(out.verdict, TC_ACT_OK, "{what}: to the host stack");
            let ip = pkt::ip6_of(&out.packet);
            assert_eq!(pkt::addrs6(ip), (v6(FABRIC), v6(CLIENT)), "{what}: fabric view");
            assert_eq!(&ip[40..42], &[typ, code], "{what}: type and code kept");
            assert_eq!(&ip[44..48], &rest, "{what}: MTU / pointer kept");
            pkt::assert_icmp6_error_checksums(ip, true);
            assert_eq!(
                &ip[48..],
                &flow.client_sent[..],
                "{what}: the quote is the client's packet"
            );
        }
    }
    assert_eq!(total_drops(&dp), 0);
}

// An error about a flow the bridge never saw tells the pod nothing it may know, and a pod's
// error about one is no reply of any flow: both dropped. So is an error quoting a packet the
// flow never carried (an echo request leaving the pod: the pod only answers echoes).
#[test]
fn errors_about_unknown_flows_are_dropped() {
    let dp = setup();
    let stranger = pkt::ipv6(HOST_MAC, MAC_A1, v6(FABRIC), v6(CLIENT), UDP, 53, 4444, 0);
    let err = pkt::icmp6_error(v6(ROUTER), v6(FABRIC), 2, 0, [0, 0, 5, 0], pkt::ip6_of(&stranger));
    let out = dp.run(TO_POD, &pkt::frame6(MAC_A1, HOST_MAC, &err), LO, 0);
    assert_dropped(&dp, out.verdict, DropReason::BridgeNoCt);

    let unknown = pkt::ipv6(HOST_MAC, MAC_A1, gw(), v6(VPC_IP), UDP, 40000, 33434, 0);
    let err = pkt::icmp6_error(v6(VPC_IP), gw(), 1, 4, [0; 4], pkt::ip6_of(&unknown));
    let out = dp.run(FROM_POD, &pkt::frame6(cfg().gw_mac, MAC_A1, &err), LO, 0);
    assert_eq!(out.verdict, TC_ACT_SHOT);
    assert_eq!(drops_of(&dp, DropReason::BridgeNoCt), 2, "both counted");

    let flow = open_flow(&dp, ICMPV6, 77, 77);
    let mut request = flow.reply_on_fabric.clone();
    request[40] = 128;
    let err = pkt::icmp6_error(v6(ROUTER), v6(FABRIC), 3, 0, [0; 4], &request);
    let out = dp.run(TO_POD, &pkt::frame6(MAC_A1, HOST_MAC, &err), LO, 0);
    assert_eq!(out.verdict, TC_ACT_SHOT);
    assert_eq!(drops_of(&dp, DropReason::BridgeNoCt), 3, "an echo request quoted");
}

// A quote whose packet had an extension header (here a fragment header) is not walked: its
// ports cannot be found, so it is refused as a protocol the bridge does not translate.
#[test]
fn a_quote_with_an_extension_header_is_not_translated() {
    let dp = setup();
    let mut frag = vec![UDP, 0, 0, 1, 0, 0, 0, 9]; // next header, offset 0 + M, id 9
    frag.extend_from_slice(&[0x13, 0x88, 0x9c, 0x41, 0, 16, 0, 0]); // the UDP header's start
    let quoted = pkt::ip6_raw(v6(FABRIC), v6(CLIENT), 44, &frag);
    let err = pkt::icmp6_error(v6(ROUTER), v6(FABRIC), 2, 0, [0, 0, 5, 0], &quoted);
    let out = dp.run(TO_POD, &pkt::frame6(MAC_A1, HOST_MAC, &err), LO, 0);
    assert_dropped(&dp, out.verdict, DropReason::UnsupportedL4);
}
