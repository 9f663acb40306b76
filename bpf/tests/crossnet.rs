//! Cross-net decisions (VPC peering, `lib/crossnet.h`) through `BPF_PROG_TEST_RUN`: the
//! route map says which net a destination belongs to, the allow map whether the source
//! net may reach it; everything else stays a counted drop. Needs root; fails (never
//! skips) without it. The overlay side (`sdn_from_overlay` deciding again, and its outer
//! source check) needs tunnel metadata a test run cannot attach: the netns lab covers it
//! (`lab/tests/peering.rs`).

mod common;

use std::net::Ipv4Addr;

use common::fixtures::*;
use common::pkt;
use common::{Datapath, LO, TC_ACT_REDIRECT};
use cozyplane_bpf::DropReason;
use cozyplane_bpf::maps::{
    net_stats::{self, NetStatsMap},
    remotes::{self, RemotesMap},
    xnet_allow::{self, XnetAllowMap},
    xnet_routes::{self, XnetRoutesMap},
};

const VPC_C: u32 = 300;
const MAC_C1: [u8; 6] = [0x0a, 0, 0, 0, 0, 0xc1];

/// From `from`, `cidr` belongs to `to`.
fn route(dp: &mut Datapath, from: u32, cidr: (&str, u8), to: u32) {
    XnetRoutesMap::try_from(dp.map_mut(xnet_routes::NAME))
        .unwrap()
        .upsert((from, ip(cidr.0), cidr.1), to)
        .unwrap();
}

fn allow(dp: &mut Datapath, from: u32, to: u32) {
    XnetAllowMap::try_from(dp.map_mut(xnet_allow::NAME))
        .unwrap()
        .allow(from, to)
        .unwrap();
}

fn crossings(dp: &Datapath, from: u32, to: u32) -> u64 {
    XnetAllowMap::try_from(dp.map(xnet_allow::NAME))
        .unwrap()
        .entries()
        .unwrap()
        .into_iter()
        .find(|(k, _)| *k == (from, to))
        .map_or(0, |(_, s)| s.packets)
}

// A peered pod of this node gets the packet straight into its netns, addresses native
// (no NAT), counted as tx of the source net, rx of the target net and one crossing.
fn peer(dp: &mut Datapath, a: (u32, &str), b: (u32, &str)) {
    route(dp, a.0, (b.1, 24), b.0);
    route(dp, b.0, (a.1, 24), a.0);
    allow(dp, a.0, b.0);
    allow(dp, b.0, a.0);
}

#[test]
fn a_peered_pod_on_this_node_is_delivered_unchanged() {
    let mut dp = Datapath::load(&cfg());
    vpc_pod(&mut dp, VPC_A, "10.0.0.1", MAC_A1);
    endpoint(&mut dp, VPC_B, "10.1.0.7", 7, MAC_B1);
    peer(&mut dp, (VPC_A, "10.0.0.0"), (VPC_B, "10.1.0.0"));

    let out = dp.run(FROM_POD, &udp4(MAC_A1, "10.0.0.1", "10.1.0.7"), LO, 0);
    assert_eq!(out.verdict, TC_ACT_REDIRECT);
    let p = pkt::parse_v4(&out.packet);
    assert_eq!(p.dst_mac, MAC_B1, "delivered to B's pod");
    assert_eq!(
        (p.src, p.dst),
        (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 1, 0, 7)),
        "native addresses"
    );
    assert_eq!(total_drops(&dp), 0);
    let stats = NetStatsMap::try_from(dp.map(net_stats::NAME)).unwrap();
    assert_eq!(stats.get(VPC_A).unwrap().unwrap().tx_packets, 1);
    assert_eq!(stats.get(VPC_B).unwrap().unwrap().rx_packets, 1);
    assert_eq!(crossings(&dp, VPC_A, VPC_B), 1);
    assert_eq!(crossings(&dp, VPC_B, VPC_A), 0);
}

// A peered pod on another node: encapsulated (under the source net's VNI, which the
// receiver's sdn_from_overlay resolves again).
#[test]
fn a_peered_pod_on_another_node_is_encapsulated() {
    let mut dp = Datapath::load(&cfg());
    vpc_pod(&mut dp, VPC_A, "10.0.0.1", MAC_A1);
    RemotesMap::try_from(dp.map_mut(remotes::NAME))
        .unwrap()
        .upsert(VPC_B, ip("10.1.0.9"), ip("192.168.10.2"))
        .unwrap();
    peer(&mut dp, (VPC_A, "10.0.0.0"), (VPC_B, "10.1.0.0"));

    let out = dp.run(FROM_POD, &udp4(MAC_A1, "10.0.0.1", "10.1.0.9"), LO, 0);
    assert_eq!(out.verdict, TC_ACT_REDIRECT);
    assert_eq!(pkt::parse_v4(&out.packet).dst_mac, cfg().tunnel_mac);
    assert_eq!(total_drops(&dp), 0);
    assert_eq!(crossings(&dp, VPC_A, VPC_B), 1);

    // A peer address nobody holds is no endpoint.
    let out = dp.run(FROM_POD, &udp4(MAC_A1, "10.0.0.1", "10.1.0.99"), LO, 0);
    assert_dropped(&dp, out.verdict, DropReason::NoEndpoint);
}

// The route alone is no permission: without the allow entry (the peering removed, or
// only one direction allowed) the packet is dropped and counted as denied.
#[test]
fn a_route_without_an_allowed_pair_is_denied() {
    let mut dp = Datapath::load(&cfg());
    vpc_pod(&mut dp, VPC_A, "10.0.0.1", MAC_A1);
    endpoint(&mut dp, VPC_B, "10.1.0.7", 7, MAC_B1);
    route(&mut dp, VPC_A, ("10.1.0.0", 24), VPC_B);
    allow(&mut dp, VPC_B, VPC_A);

    let out = dp.run(FROM_POD, &udp4(MAC_A1, "10.0.0.1", "10.1.0.7"), LO, 0);
    assert_dropped(&dp, out.verdict, DropReason::XnetDenied);
}

// An allowed pair without a route for the destination reaches nothing.
#[test]
fn an_allowed_pair_without_a_route_stays_isolated() {
    let mut dp = Datapath::load(&cfg());
    vpc_pod(&mut dp, VPC_A, "10.0.0.1", MAC_A1);
    endpoint(&mut dp, VPC_B, "10.1.0.7", 7, MAC_B1);
    allow(&mut dp, VPC_A, VPC_B);

    // No peer holds it, so it is outside (the gateway's door), and A has no gateway.
    let out = dp.run(FROM_POD, &udp4(MAC_A1, "10.0.0.1", "10.1.0.7"), LO, 0);
    assert_dropped(&dp, out.verdict, DropReason::NoGateway);
}

// A–B and B–C peered: A reaches B, B reaches C, A does not reach C.
#[test]
fn peering_is_not_transitive() {
    let mut dp = Datapath::load(&cfg());
    vpc_pod(&mut dp, VPC_A, "10.0.0.1", MAC_A1);
    endpoint(&mut dp, VPC_B, "10.1.0.7", 7, MAC_B1);
    endpoint(&mut dp, VPC_C, "10.2.0.7", 8, MAC_C1);
    peer(&mut dp, (VPC_A, "10.0.0.0"), (VPC_B, "10.1.0.0"));
    peer(&mut dp, (VPC_B, "10.1.0.0"), (VPC_C, "10.2.0.0"));

    let out = dp.run(FROM_POD, &udp4(MAC_A1, "10.0.0.1", "10.1.0.7"), LO, 0);
    assert_eq!(out.verdict, TC_ACT_REDIRECT, "A reaches B");
    // No peer of A holds it: outside, and A has no gateway.
    let out = dp.run(FROM_POD, &udp4(MAC_A1, "10.0.0.1", "10.2.0.7"), LO, 0);
    assert_dropped(&dp, out.verdict, DropReason::NoGateway);
}

// Routes are keyed by the source net: B and C hold the same addresses, A is peered with
// B only, so A's packet for the shared address reaches B's pod, never C's.
#[test]
fn overlapping_peers_of_different_nets_stay_apart() {
    let mut dp = Datapath::load(&cfg());
    vpc_pod(&mut dp, VPC_A, "10.0.0.1", MAC_A1);
    endpoint(&mut dp, VPC_B, "10.1.0.7", 7, MAC_B1);
    endpoint(&mut dp, VPC_C, "10.1.0.7", 8, MAC_C1);
    peer(&mut dp, (VPC_A, "10.0.0.0"), (VPC_B, "10.1.0.0"));

    let out = dp.run(FROM_POD, &udp4(MAC_A1, "10.0.0.1", "10.1.0.7"), LO, 0);
    assert_eq!(out.verdict, TC_ACT_REDIRECT);
    assert_eq!(pkt::parse_v4(&out.packet).dst_mac, MAC_B1);
    assert_eq!(total_drops(&dp), 0);
}
