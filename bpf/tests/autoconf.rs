//! A guest's autoconfiguration (`lib/autoconf.h`) through `BPF_PROG_TEST_RUN`: its DHCPv4,
//! DHCPv6 and router solicitations stay on its link (passed to the veth's packet socket, the
//! agent's responder, never redirected to another pod, node or the uplink, never counted as
//! drops), a DISCOVER from 0.0.0.0 included, which the source check alone would drop; the
//! gateway's answers reach the pod through a VPC's isolation, and nothing else that looks
//! like them does. Needs root; fails (never skips) without it. That the host stack then
//! drops the requests (`PACKET_OTHERHOST`) is the lab's to show with real packets
//! (`lab/tests/autoconf.rs`: nothing leaves on the uplink or the tunnel).

mod common;

use std::net::Ipv6Addr;

use common::fixtures::*;
use common::pkt::{self, ICMPV6, UDP};
use common::{Datapath, LO, TC_ACT_OK, TC_ACT_SHOT};
use cozyplane_bpf::DropReason;

const BCAST: [u8; 6] = [0xff; 6];

fn v6(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

/// The requests a guest sends while it has no address, and while it renews one.
fn requests() -> Vec<(&'static str, Vec<u8>)> {
    let gw = cfg().gw_mac;
    let fe80 = v6("fe80::8:a1");
    vec![
        (
            "DHCPDISCOVER from 0.0.0.0 to broadcast",
            pkt::ipv4(
                MAC_A1,
                BCAST,
                v4("0.0.0.0"),
                v4("255.255.255.255"),
                UDP,
                68,
                67,
                0,
            ),
        ),
        (
            "DHCPREQUEST renewal, unicast to the gateway",
            pkt::ipv4(MAC_A1, gw, v4("10.0.0.1"), v4("169.254.1.1"), UDP, 68, 67, 0),
        ),
        (
            "DHCPREQUEST to another pod's address (never forwarded)",
            pkt::ipv4(MAC_A1, gw, v4("10.0.0.1"), v4("10.0.0.2"), UDP, 68, 67, 0),
        ),
        (
            "DHCPv6 SOLICIT to ff02::1:2",
            pkt::ipv6_udp(MAC_A1, [0x33, 0x33, 0, 1, 0, 2], fe80, v6("ff02::1:2"), 546, 547),
        ),
        (
            "router solicitation to ff02::2",
            pkt::ipv6(
                MAC_A1,
                [0x33, 0x33, 0, 0, 0, 2],
                fe80,
                v6("ff02::2"),
                ICMPV6,
                0,
                0,
                133,
            ),
        ),
    ]
}

#[test]
fn a_guests_requests_stay_on_its_link_and_are_no_drops() {
    for net in [VPC_A, 0] {
        let mut dp = Datapath::load(&cfg());
        vpc_pod(&mut dp, net, "10.0.0.1", MAC_A1);
        endpoint(&mut dp, net, "10.0.0.2", 7, MAC_B1);
        for (what, p) in requests() {
            let out = dp.run(FROM_POD, &p, LO, 0);
            // TC_ACT_OK: up the veth to its packet socket; never TC_ACT_REDIRECT (to
            // another pod, the tunnel or the uplink).
            assert_eq!(out.verdict, TC_ACT_OK, "net {net}: {what}");
            assert_eq!(out.packet, p, "net {net}: {what} is not rewritten");
        }
        assert_eq!(total_drops(&dp), 0, "net {net}: autoconfiguration is no drop");
    }
}

#[test]
fn other_traffic_from_0_0_0_0_is_still_a_spoof() {
    let mut dp = Datapath::load(&cfg());
    vpc_pod(&mut dp, VPC_A, "10.0.0.1", MAC_A1);
    // The server's ports the other way round, or another port: the source check as before.
    let p = pkt::ipv4(
        MAC_A1,
        BCAST,
        v4("0.0.0.0"),
        v4("255.255.255.255"),
        UDP,
        67,
        68,
        0,
    );
    let out = dp.run(FROM_POD, &p, LO, 0);
    assert_dropped(&dp, out.verdict, DropReason::SpoofIp);
    let p = pkt::ipv4(
        MAC_A1,
        BCAST,
        v4("0.0.0.0"),
        v4("255.255.255.255"),
        UDP,
        68,
        53,
        0,
    );
    assert_eq!(dp.run(FROM_POD, &p, LO, 0).verdict, TC_ACT_SHOT);
}

#[test]
fn the_gateways_answers_reach_a_vpc_pod_and_nothing_else_like_them_does() {
    let mut dp = Datapath::load(&cfg());
    vpc_pod(&mut dp, VPC_A, "10.0.0.1", MAC_A1);
    // Another pod's address, on another veth.
    endpoint(&mut dp, VPC_A, "10.0.0.2", 7, MAC_B1);
    let gw = cfg().gw_mac;
    let ok = [
        pkt::ipv4(gw, MAC_A1, v4("169.254.1.1"), v4("10.0.0.1"), UDP, 67, 68, 0),
        pkt::ipv4(
            gw,
            BCAST,
            v4("169.254.1.1"),
            v4("255.255.255.255"),
            UDP,
            67,
            68,
            0,
        ),
        pkt::ipv6_udp(gw, MAC_A1, v6("fe80::1"), v6("fe80::8:a1"), 547, 546),
        pkt::ipv6(
            gw,
            [0x33, 0x33, 0, 0, 0, 1],
            v6("fe80::1"),
            v6("ff02::1"),
            ICMPV6,
            0,
            0,
            134,
        ),
    ];
    for p in ok {
        assert_eq!(dp.run(TO_POD, &p, LO, 0).verdict, TC_ACT_OK);
    }
    assert_eq!(total_drops(&dp), 0);
    let refused = [
        // Not from the gateway.
        pkt::ipv4(gw, MAC_A1, v4("192.0.2.9"), v4("10.0.0.1"), UDP, 67, 68, 0),
        // To another pod's address.
        pkt::ipv4(gw, MAC_A1, v4("169.254.1.1"), v4("10.0.0.2"), UDP, 67, 68, 0),
        // Another port.
        pkt::ipv4(gw, MAC_A1, v4("169.254.1.1"), v4("10.0.0.1"), UDP, 67, 69, 0),
        // DHCPv6 from a global address.
        pkt::ipv6_udp(gw, MAC_A1, v6("fd00::9"), v6("fd00::1"), 547, 546),
    ];
    for (i, p) in refused.iter().enumerate() {
        assert_eq!(dp.run(TO_POD, p, LO, 0).verdict, TC_ACT_SHOT, "refused[{i}]");
    }
    assert_eq!(drops_of(&dp, DropReason::VpcIsolation), refused.len() as u64);
}
