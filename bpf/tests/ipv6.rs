//! The IPv6 paths through `BPF_PROG_TEST_RUN`: neighbour discovery for the gateway
//! (`fe80::1`, answered in eBPF), link-scoped ICMPv6 kept on the link, the fabric bridge for
//! IPv6 flows, and a v6 VPC pod's traffic to another node over a v4 underlay. Needs root.

mod common;

use std::net::Ipv6Addr;

use common::fixtures::*;
use common::pkt::{self, ICMPV6, TCP, UDP};
use common::{Datapath, LO, TC_ACT_OK, TC_ACT_REDIRECT};
use cozyplane_bpf::DropReason;
use cozyplane_bpf::maps::{
    bridges::{self, BridgesMap},
    remotes::{self, RemotesMap},
};

const TO_POD: &str = "sdn_to_pod";
const MAC_HOST: [u8; 6] = [0x0a, 0, 0, 0, 0, 0xee];

fn v6(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

// A neighbour solicitation for fe80::1 comes back as the advertisement from the gateway
// MAC, with and without the asker's link-layer option; anything else NDP goes to the host
// end of the veth, uncounted.
#[test]
fn the_gateways_neighbour_solicitation_is_answered() {
    let mut dp = Datapath::load(&cfg());
    vpc_pod(&mut dp, VPC_A, "fd00::1", MAC_A1);
    let gw = cfg().gw_mac;
    let me = v6("fe80::a1");

    for option in [true, false] {
        let ns = pkt::neighbour_solicitation(MAC_A1, me, v6("fe80::1"), option);
        let out = dp.run(FROM_POD, &ns, LO, 0);
        assert_eq!(
            out.verdict, TC_ACT_REDIRECT,
            "option {option}: back out of the veth"
        );
        let r = &out.packet;
        assert_eq!(r.len(), 14 + 40 + 32, "option {option}");
        pkt::assert_v6_checksums(r);
        let na = pkt::parse_v6(r);
        assert_eq!((na.dst_mac, na.src_mac), (MAC_A1, gw));
        assert_eq!((na.src, na.dst), (v6("fe80::1"), me));
        assert_eq!(r[21], 255, "hop limit of NDP");
        assert_eq!(na.icmp_type, 136, "neighbour advertisement");
        assert_eq!(r[58], 0xe0, "router, solicited, override");
        assert_eq!(r[62..78], v6("fe80::1").octets(), "target");
        assert_eq!(r[78..80], [2, 1], "target link-layer address option");
        assert_eq!(r[80..86], gw);
    }

    // Another target, and duplicate address detection (from ::), stay on the link.
    for (src, target) in [(me, v6("fe80::2")), (Ipv6Addr::UNSPECIFIED, v6("fd00::1"))] {
        let ns = pkt::neighbour_solicitation(MAC_A1, src, target, !src.is_unspecified());
        assert_eq!(
            dp.run(FROM_POD, &ns, LO, 0).verdict,
            TC_ACT_OK,
            "{src} asks for {target}"
        );
    }
    // An MLDv2 report from the link-local address: link-scoped, not a spoof.
    let mld = pkt::ipv6(
        MAC_A1,
        [0x33, 0x33, 0, 0, 0, 0x16],
        me,
        v6("ff02::16"),
        ICMPV6,
        0,
        0,
        143,
    );
    assert_eq!(dp.run(FROM_POD, &mld, LO, 0).verdict, TC_ACT_OK);
    // Anything else from the link-local address or to a link-scope group (mDNS here; MLD
    // with its hop-by-hop header likewise) stays on the link too.
    let mdns = pkt::ipv6(
        MAC_A1,
        [0x33, 0x33, 0, 0, 0, 0xfb],
        me,
        v6("ff02::fb"),
        UDP,
        5353,
        5353,
        0,
    );
    assert_eq!(dp.run(FROM_POD, &mdns, LO, 0).verdict, TC_ACT_OK);
    let global = pkt::ipv6(
        MAC_A1,
        [0x33, 0x33, 0, 0, 0, 0xfb],
        v6("fd00::1"),
        v6("ff02::fb"),
        UDP,
        5353,
        5353,
        0,
    );
    assert_eq!(dp.run(FROM_POD, &global, LO, 0).verdict, TC_ACT_OK);
    assert_eq!(total_drops(&dp), 0);
}

// The bridge for IPv6 flows (TCP, UDP, ICMPv6 echo): the fabric IP becomes the VPC IP, the
// client becomes fe80::1 with a gateway port; the reply is turned back and handed to the
// host stack. Checksums stay valid both ways.
#[test]
fn the_fabric_bridge_translates_ipv6_both_directions() {
    let mut dp = Datapath::load(&cfg());
    vpc_pod(&mut dp, VPC_A, "fd00:10::5", MAC_A1);
    BridgesMap::try_from(dp.map_mut(bridges::NAME))
        .unwrap()
        .upsert(ip("fd44:1::5"), VPC_A, ip("fd00:10::5"))
        .unwrap();
    let (client, fabric, vpc, gw) = (v6("fd44::1"), v6("fd44:1::5"), v6("fd00:10::5"), v6("fe80::1"));

    for (proto, cport, pport, req, rep) in [
        (TCP, 40000, 8080, 0, 0),
        (UDP, 40001, 53, 0, 0),
        (ICMPV6, 77, 77, 128, 129),
    ] {
        let probe = pkt::ipv6(MAC_HOST, MAC_A1, client, fabric, proto, cport, pport, req);
        let inn = dp.run(TO_POD, &probe, LO, 0);
        assert_eq!(inn.verdict, TC_ACT_OK, "proto {proto}");
        pkt::assert_v6_checksums(&inn.packet);
        let p = pkt::parse_v6(&inn.packet);
        assert_eq!((p.src, p.dst), (gw, vpc), "proto {proto}");
        assert_eq!(p.dst_mac, MAC_A1);
        assert!((32768..61000).contains(&p.sport), "gateway port {}", p.sport);
        if proto != ICMPV6 {
            assert_eq!(p.dport, pport);
        }
        let gw_port = p.sport;
        let (rs, rd) = if proto == ICMPV6 {
            (gw_port, gw_port)
        } else {
            (pport, gw_port)
        };
        let reply = pkt::ipv6(MAC_A1, cfg().gw_mac, vpc, gw, proto, rs, rd, rep);
        let out = dp.run(FROM_POD, &reply, LO, 0);
        assert_eq!(out.verdict, TC_ACT_OK, "proto {proto}: reply to the host stack");
        pkt::assert_v6_checksums(&out.packet);
        let r = pkt::parse_v6(&out.packet);
        assert_eq!((r.src, r.dst), (fabric, client), "proto {proto}");
        assert_eq!(r.dport, cport, "proto {proto}");
    }
    assert_eq!(total_drops(&dp), 0);

    // A reply to the gateway without a flow is no way out of the VPC.
    let stray = pkt::ipv6(MAC_A1, cfg().gw_mac, vpc, gw, UDP, 53, 40999, 0);
    let out = dp.run(FROM_POD, &stray, LO, 0);
    assert_dropped(&dp, out.verdict, DropReason::BridgeNoCt);
}

// The host's MLD reports (sent on every veth) and other link-scoped IPv6 reach a VPC pod
// without counting as isolation drops; a global address that is not bridged still drops.
#[test]
fn the_hosts_link_scoped_ipv6_is_no_isolation_drop() {
    let mut dp = Datapath::load(&cfg());
    vpc_pod(&mut dp, VPC_A, "fd00:10::5", MAC_A1);
    let host_ll = v6("fe80::ee");
    let mld = pkt::ipv6(
        MAC_HOST,
        [0x33, 0x33, 0, 0, 0, 0x16],
        host_ll,
        v6("ff02::16"),
        ICMPV6,
        0,
        0,
        143,
    );
    assert_eq!(dp.run(TO_POD, &mld, LO, 0).verdict, TC_ACT_OK);
    let mdns = pkt::ipv6(
        MAC_HOST,
        [0x33, 0x33, 0, 0, 0, 0xfb],
        host_ll,
        v6("ff02::fb"),
        UDP,
        5353,
        5353,
        0,
    );
    assert_eq!(dp.run(TO_POD, &mdns, LO, 0).verdict, TC_ACT_OK);
    assert_eq!(total_drops(&dp), 0);
    let global = pkt::ipv6(
        MAC_HOST,
        MAC_A1,
        v6("fd44::1"),
        v6("fd00:10::5"),
        UDP,
        5353,
        53,
        0,
    );
    let out = dp.run(TO_POD, &global, LO, 0);
    assert_dropped(&dp, out.verdict, DropReason::VpcIsolation);
}

// A v6 VPC pod's packet for a pod on another node is encapsulated towards that node's v4
// underlay address, inner frame untouched but for the overlay MAC.
#[test]
fn a_v6_vpc_pod_reaches_another_node_over_a_v4_underlay() {
    let mut dp = Datapath::load(&cfg());
    vpc_pod(&mut dp, VPC_A, "fd00:10::5", MAC_A1);
    RemotesMap::try_from(dp.map_mut(remotes::NAME))
        .unwrap()
        .upsert(VPC_A, ip("fd00:10::9"), ip("192.168.10.2"))
        .unwrap();
    let p = pkt::ipv6(
        MAC_A1,
        cfg().gw_mac,
        v6("fd00:10::5"),
        v6("fd00:10::9"),
        TCP,
        40000,
        80,
        0,
    );
    let out = dp.run(FROM_POD, &p, LO, 0);
    assert_eq!(out.verdict, TC_ACT_REDIRECT);
    let r = pkt::parse_v6(&out.packet);
    assert_eq!(r.dst_mac, cfg().tunnel_mac);
    assert_eq!((r.src, r.dst), (v6("fd00:10::5"), v6("fd00:10::9")));
    assert_eq!(total_drops(&dp), 0);
}
