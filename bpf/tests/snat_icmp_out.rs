//! ICMP errors a pod sends about a reply it got through the SNAT engine (`lib/snat.h`,
//! `sdn_snat_err_out`), through `BPF_PROG_TEST_RUN`: a port unreachable for a UDP reply,
//! through net-0 masquerade and through the VPC gateway, leaves from the NAT address with a
//! quote that is the packet the peer sent (NAT address and port), checksums valid. An error
//! about no NATed flow goes to the host (masquerade) or is dropped (gateway). Needs root;
//! fails (never skips) without it.

mod common;

use std::net::Ipv4Addr;

use common::doors::*;
use common::fixtures::*;
use common::pkt::{self, UDP};
use common::{Datapath, LO, TC_ACT_OK, TC_ACT_REDIRECT};
use cozyplane_bpf::DropReason;

const PEER4: &str = "198.51.100.2";
const NAT4: &str = "203.0.113.1";
const VPC_IP: &str = "10.30.0.5";
const POD4: &str = "10.244.1.20";

/// Masquerade on (to [`NODE4`]), the gateway range in 16 shards of which this node has 0,
/// VPC A's gateway NATs to [`NAT4`].
fn setup() -> Datapath {
    let mut dp = Datapath::load(&cfg());
    snat_ipv4(&mut dp, (61000, 65535), (1024, 4032, 16), &[(VPC_A, NAT4)]);
    dp
}

/// The pod `pod` sends a datagram from 5000 to the peer's port 53 through the NAT
/// address `nat`; the peer's answer comes back into the pod. Returns the NAT port and the
/// answer as the pod got it (IPv4 packet).
fn flow(dp: &Datapath, pod: Ipv4Addr, nat: Ipv4Addr) -> (u16, Vec<u8>) {
    let sent = pkt::ipv4(MAC_A1, cfg().gw_mac, pod, v4(PEER4), UDP, 5000, 53, 0);
    let r = dp.run(FROM_POD, &sent, LO, 0);
    assert_eq!(r.verdict, TC_ACT_REDIRECT, "NATed out");
    let ip = pkt::ip_of(&r.packet);
    assert_eq!(pkt::addrs(ip).0, nat);
    let port = u16::from_be_bytes([ip[20], ip[21]]);
    let answer = pkt::ipv4(ROUTER_MAC, UPLINK_MAC, v4(PEER4), nat, UDP, 53, port, 0);
    let r = dp.run(FROM_UPLINK, &answer, LO, 0);
    assert_eq!(r.verdict, TC_ACT_REDIRECT, "the answer reaches the pod");
    let got = pkt::ip_of(&r.packet).to_vec();
    assert_eq!(pkt::addrs(&got), (v4(PEER4), pod));
    (port, got)
}

/// The pod `pod` answers `got` with a port unreachable: it must leave from `nat`, quoting
/// what the peer sent to `nat`:`port`.
fn unreachable_leaves_translated(dp: &Datapath, pod: Ipv4Addr, nat: Ipv4Addr, port: u16, got: &[u8]) {
    let err = pkt::icmp4_error(pod, v4(PEER4), 3, 3, [0; 4], got);
    let r = dp.run(FROM_POD, &pkt::frame(cfg().gw_mac, MAC_A1, &err), LO, 0);
    assert_eq!(r.verdict, TC_ACT_REDIRECT, "out of the uplink");
    pkt::assert_v4_checksums(&r.packet);
    let ip = pkt::ip_of(&r.packet);
    assert_eq!(
        pkt::addrs(ip),
        (nat, v4(PEER4)),
        "from the NAT address to the peer"
    );
    assert_eq!(&ip[20..22], &[3, 3], "type and code kept");
    let q = &ip[28..];
    assert_eq!(pkt::addrs(q), (v4(PEER4), nat), "the quote as the peer sent it");
    assert_eq!(pkt::csum(&q[..20]), 0, "quoted IP header checksum");
    assert_eq!(u16::from_be_bytes([q[20], q[21]]), 53, "the peer's port kept");
    assert_eq!(u16::from_be_bytes([q[22], q[23]]), port, "the NAT port");
    assert_eq!(
        pkt::l4_csum_v4(v4(PEER4), nat, UDP, &q[20..]),
        0,
        "quoted UDP checksum"
    );
}

#[test]
fn a_masqueraded_pods_port_unreachable_leaves_from_the_node() {
    in_routed_netns(|| {
        let mut dp = setup();
        port(&mut dp, LO, 0);
        endpoint(&mut dp, 0, POD4, LO, MAC_A1);
        let (port, got) = flow(&dp, v4(POD4), v4(NODE4));
        unreachable_leaves_translated(&dp, v4(POD4), v4(NODE4), port, &got);
        assert_eq!(total_drops(&dp), 0);

        // About no masqueraded flow: to the host, as before.
        let stray = pkt::ipv4(ROUTER_MAC, UPLINK_MAC, v4(PEER4), v4(POD4), UDP, 53, 6000, 0);
        let err = pkt::icmp4_error(v4(POD4), v4(PEER4), 3, 3, [0; 4], pkt::ip_of(&stray));
        let frame = pkt::frame(cfg().gw_mac, MAC_A1, &err);
        let r = dp.run(FROM_POD, &frame, LO, 0);
        assert_eq!(
            (r.verdict, pkt::ip_of(&r.packet)),
            (TC_ACT_OK, &err[..]),
            "untouched"
        );
    });
}

#[test]
fn a_vpc_pods_port_unreachable_leaves_from_the_gateway() {
    in_routed_netns(|| {
        let mut dp = setup();
        vpc_pod(&mut dp, VPC_A, VPC_IP, MAC_A1);
        let (port, got) = flow(&dp, v4(VPC_IP), v4(NAT4));
        unreachable_leaves_translated(&dp, v4(VPC_IP), v4(NAT4), port, &got);
        assert_eq!(total_drops(&dp), 0);

        // About no NATed flow of the VPC: never out, counted.
        let stray = pkt::ipv4(ROUTER_MAC, UPLINK_MAC, v4(PEER4), v4(VPC_IP), UDP, 53, 6000, 0);
        let err = pkt::icmp4_error(v4(VPC_IP), v4(PEER4), 3, 3, [0; 4], pkt::ip_of(&stray));
        let r = dp.run(FROM_POD, &pkt::frame(cfg().gw_mac, MAC_A1, &err), LO, 0);
        assert_dropped(&dp, r.verdict, DropReason::SnatUnsupported);
    });
}
