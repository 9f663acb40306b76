//! The LoadBalancer gate into VPCs through `BPF_PROG_TEST_RUN` (`lib/lb_gate.h`): refused
//! until the VPC's gateway admits LoadBalancer ingress, then DNATed to a backend with the
//! client preserved; replies leave as the frontend. Needs root; fails (never skips)
//! without it.

mod common;

use std::collections::HashSet;
use std::net::Ipv6Addr;

use common::doors::*;
use common::fixtures::*;
use common::pkt::{self, TCP, UDP};
use common::{Datapath, LO, TC_ACT_OK, TC_ACT_REDIRECT};
use cozyplane_bpf::DropReason;
use cozyplane_bpf::abi::DoorKey;

const FRONT: &str = "203.0.113.20";
const BACKEND: &str = "10.0.0.1";
const CLIENT: &str = "198.51.100.7";

fn setup() -> Datapath {
    let mut dp = Datapath::load(&cfg());
    vpc_pod(&mut dp, VPC_A, BACKEND, MAC_A1);
    lb_frontend(&mut dp, FRONT, 80, TCP, VPC_A, &[(BACKEND, 8080)]);
    internal_range(&mut dp, 0, "10.96.0.0/12");
    dp
}

fn request(sport: u16) -> Vec<u8> {
    pkt::ipv4(ROUTER_MAC, UPLINK_MAC, v4(CLIENT), v4(FRONT), TCP, sport, 80, 0)
}

#[test]
fn refused_until_the_gateway_admits_then_delivered() {
    let mut dp = setup();
    let r = dp.run(FROM_UPLINK, &request(40000), LO, 0);
    assert_dropped(&dp, r.verdict, DropReason::LbRefused);
    let st = door(&dp, VPC_A, DoorKey::LOADBALANCER, DoorKey::IN);
    assert_eq!((st.refused_packets, st.packets), (1, 0), "a refusal at the door");
    assert_eq!(st.refused_bytes, request(40000).len() as u64);

    lb_admit(&mut dp, VPC_A, true);
    let r = dp.run(FROM_UPLINK, &request(40000), LO, 0);
    assert_eq!(r.verdict, TC_ACT_REDIRECT, "admitted: into the backend pod");
    let got = pkt::parse_v4(&r.packet);
    assert_eq!((got.src, got.sport), (v4(CLIENT), 40000), "the client preserved");
    assert_eq!(
        (got.dst, got.dport),
        (v4(BACKEND), 8080),
        "the backend and target port"
    );
    assert_eq!(got.dst_mac, MAC_A1);
    pkt::assert_v4_checksums(&r.packet);
    let st = door(&dp, VPC_A, DoorKey::LOADBALANCER, DoorKey::IN);
    assert_eq!((st.refused_packets, st.packets), (1, 1));

    // Closing the door again refuses again.
    lb_admit(&mut dp, VPC_A, false);
    let r = dp.run(FROM_UPLINK, &request(40001), LO, 0);
    assert_eq!(r.verdict, common::TC_ACT_SHOT);
    assert_eq!(drops_of(&dp, DropReason::LbRefused), 2);
}

#[test]
fn other_ports_and_protocols_of_the_address_are_not_the_frontend() {
    let mut dp = setup();
    lb_admit(&mut dp, VPC_A, true);
    let udp = pkt::ipv4(ROUTER_MAC, UPLINK_MAC, v4(CLIENT), v4(FRONT), UDP, 40000, 80, 0);
    let other = pkt::ipv4(ROUTER_MAC, UPLINK_MAC, v4(CLIENT), v4(FRONT), TCP, 40000, 81, 0);
    for p in [udp, other] {
        let r = dp.run(FROM_UPLINK, &p, LO, 0);
        assert_eq!((r.verdict, &r.packet), (TC_ACT_OK, &p), "left to the host");
    }
}

#[test]
fn a_frontend_without_backends_drops() {
    let mut dp = Datapath::load(&cfg());
    lb_frontend(&mut dp, FRONT, 80, TCP, VPC_A, &[]);
    lb_admit(&mut dp, VPC_A, true);
    let r = dp.run(FROM_UPLINK, &request(40000), LO, 0);
    assert_dropped(&dp, r.verdict, DropReason::LbNoBackend);
}

#[test]
fn a_flow_keeps_its_backend_and_flows_spread() {
    let mut dp = Datapath::load(&cfg());
    let backends = ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"];
    for (i, b) in backends.iter().enumerate() {
        endpoint(&mut dp, VPC_A, b, LO, [0x0a, 0, 0, 0, 1, i as u8]);
    }
    let be: Vec<(&str, u16)> = backends.iter().map(|b| (*b, 8080)).collect();
    lb_frontend(&mut dp, FRONT, 80, TCP, VPC_A, &be);
    lb_admit(&mut dp, VPC_A, true);
    let mut seen = HashSet::new();
    for sport in 40000..40064 {
        let a = pkt::parse_v4(&dp.run(FROM_UPLINK, &request(sport), LO, 0).packet).dst;
        let b = pkt::parse_v4(&dp.run(FROM_UPLINK, &request(sport), LO, 0).packet).dst;
        assert_eq!(a, b, "flow {sport} keeps its backend");
        seen.insert(a);
    }
    assert_eq!(seen.len(), 4, "64 flows reach every backend: {seen:?}");
}

#[test]
fn the_backends_reply_leaves_as_the_frontend() {
    in_routed_netns(|| {
        let dp = setup();
        let p = pkt::ipv4(MAC_A1, cfg().gw_mac, v4(BACKEND), v4(CLIENT), TCP, 8080, 40000, 0);
        let r = dp.run(FROM_POD, &p, LO, 0);
        assert_eq!(r.verdict, TC_ACT_REDIRECT, "out by the route");
        let got = pkt::parse_v4(&r.packet);
        assert_eq!((got.src, got.sport), (v4(FRONT), 80));
        assert_eq!((got.dst, got.dport), (v4(CLIENT), 40000));
        pkt::assert_v4_checksums(&r.packet);
        assert_eq!(door(&dp, VPC_A, DoorKey::LOADBALANCER, DoorKey::OUT).packets, 1);
        // Another source port of the backend is no reply of the frontend: it tries the
        // gateway door, and this VPC has none.
        let p = pkt::ipv4(MAC_A1, cfg().gw_mac, v4(BACKEND), v4(CLIENT), TCP, 8081, 40000, 0);
        assert_dropped(&dp, dp.run(FROM_POD, &p, LO, 0).verdict, DropReason::NoGateway);
    });
}

#[test]
fn ipv6_frontend_is_gated_and_delivered() {
    let (front, backend, client): (Ipv6Addr, Ipv6Addr, Ipv6Addr) = (
        "2001:db8:1::20".parse().unwrap(),
        "fd00:a::1".parse().unwrap(),
        "2001:db8:2::7".parse().unwrap(),
    );
    let mut dp = Datapath::load(&cfg());
    endpoint(&mut dp, VPC_A, "fd00:a::1", LO, MAC_A1);
    lb_frontend(&mut dp, "2001:db8:1::20", 443, TCP, VPC_A, &[("fd00:a::1", 8443)]);
    let p = pkt::ipv6(ROUTER_MAC, UPLINK_MAC, client, front, TCP, 40000, 443, 0);
    assert_dropped(&dp, dp.run(FROM_UPLINK, &p, LO, 0).verdict, DropReason::LbRefused);
    lb_admit(&mut dp, VPC_A, true);
    let r = dp.run(FROM_UPLINK, &p, LO, 0);
    assert_eq!(r.verdict, TC_ACT_REDIRECT);
    let got = pkt::parse_v6(&r.packet);
    assert_eq!((got.src, got.sport), (client, 40000));
    assert_eq!((got.dst, got.dport), (backend, 8443));
    pkt::assert_v6_checksums(&r.packet);
}

/// A NodePort of the Service on this node is no side door: gated like the frontend, and
/// once admitted left to the host's Service proxy (which DNATs it to the fabric bridge).
#[test]
fn a_node_port_is_gated_then_left_to_the_host() {
    let mut dp = setup();
    lb_node_port(&mut dp, "192.0.2.2", 30080, TCP, VPC_A);
    let p = pkt::ipv4(
        ROUTER_MAC,
        UPLINK_MAC,
        v4(CLIENT),
        v4("192.0.2.2"),
        TCP,
        40000,
        30080,
        0,
    );
    assert_dropped(&dp, dp.run(FROM_UPLINK, &p, LO, 0).verdict, DropReason::LbRefused);
    lb_admit(&mut dp, VPC_A, true);
    let r = dp.run(FROM_UPLINK, &p, LO, 0);
    assert_eq!((r.verdict, &r.packet), (TC_ACT_OK, &p), "the host's, untouched");
    let st = door(&dp, VPC_A, DoorKey::LOADBALANCER, DoorKey::IN);
    assert_eq!((st.refused_packets, st.packets), (1, 1));
}
