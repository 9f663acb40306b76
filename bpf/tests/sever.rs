//! Revocation (`lib/sever.h`) through `BPF_PROG_TEST_RUN`: once the agent marks a pod's
//! endpoint severed, its VPC traffic is a counted `DROP_SEVERED` in both directions (same
//! node, towards another node, from a peered net), while the fabric bridge (the kubelet's
//! probe of the pod's fabric address, and the pod's reply) keeps working. Needs root; fails
//! (never skips) without it. Traffic arriving from another node takes the same delivery
//! check (`sdn_deliver_local`) in `sdn_from_overlay`; the netns lab covers it with real
//! packets (`lab/tests/revocation.rs`).

mod common;

use common::fixtures::*;
use common::pkt::{self, TCP};
use common::{Datapath, LO, TC_ACT_OK, TC_ACT_REDIRECT, TC_ACT_SHOT};
use cozyplane_bpf::DropReason;
use cozyplane_bpf::maps::{
    bridges::{self, BridgesMap},
    endpoints::{self, EndpointsMap},
    remotes::{self, RemotesMap},
    xnet_allow::{self, XnetAllowMap},
    xnet_routes::{self, XnetRoutesMap},
};

const TO_POD: &str = "sdn_to_pod";
const MAC_A2: [u8; 6] = [0x0a, 0, 0, 0, 0, 0xa2];
const MAC_HOST: [u8; 6] = [0x0a, 0, 0, 0, 0, 0xee];

fn sever(dp: &mut Datapath, net: u32, addr: &str, ifindex: u32) -> bool {
    EndpointsMap::try_from(dp.map_mut(endpoints::NAME))
        .unwrap()
        .sever(net, ip(addr), ifindex)
        .unwrap()
}

// a1 (10.0.0.1, severed) and a2 (10.0.0.2) of VPC A on this node, a9 on another node,
// b1 of VPC B peered with A; a1's fabric address 10.244.1.5 is bridged to it.
fn setup() -> Datapath {
    let mut dp = Datapath::load(&cfg());
    vpc_pod(&mut dp, VPC_A, "10.0.0.1", MAC_A1);
    endpoint(&mut dp, VPC_A, "10.0.0.2", LO, MAC_A2);
    endpoint(&mut dp, VPC_B, "10.1.0.1", LO, MAC_B1);
    RemotesMap::try_from(dp.map_mut(remotes::NAME))
        .unwrap()
        .upsert(VPC_A, ip("10.0.0.9"), ip("192.168.10.2"))
        .unwrap();
    BridgesMap::try_from(dp.map_mut(bridges::NAME))
        .unwrap()
        .upsert(ip("10.244.1.5"), VPC_A, ip("10.0.0.1"))
        .unwrap();
    let mut routes = XnetRoutesMap::try_from(dp.map_mut(xnet_routes::NAME)).unwrap();
    routes.upsert((VPC_A, ip("10.1.0.0"), 24), VPC_B).unwrap();
    routes.upsert((VPC_B, ip("10.0.0.0"), 24), VPC_A).unwrap();
    let mut allow = XnetAllowMap::try_from(dp.map_mut(xnet_allow::NAME)).unwrap();
    allow.allow(VPC_A, VPC_B).unwrap();
    allow.allow(VPC_B, VPC_A).unwrap();
    dp
}

/// The VPC walks that must stop: a1 → a2 (same node), a1 → a9 (encapsulated), a1 → b1
/// (peered), a2 → a1 and b1 → a1 (delivery to a1).
/// Every test pod's veth is lo (a test run's device), so the port's net is set per sender.
fn vpc_walks(dp: &mut Datapath) -> Vec<(&'static str, u32)> {
    let of = |src: &str| match src {
        "10.0.0.1" => (MAC_A1, VPC_A),
        "10.0.0.2" => (MAC_A2, VPC_A),
        _ => (MAC_B1, VPC_B),
    };
    [
        ("10.0.0.1", "10.0.0.2"),
        ("10.0.0.1", "10.0.0.9"),
        ("10.0.0.1", "10.1.0.1"),
        ("10.0.0.2", "10.0.0.1"),
        ("10.1.0.1", "10.0.0.1"),
    ]
    .into_iter()
    .map(|(s, d)| {
        let (mac, net) = of(s);
        port(dp, LO, net);
        let out = dp.run(FROM_POD, &udp4(mac, s, d), LO, 0);
        port(dp, LO, VPC_A);
        (d, out.verdict)
    })
    .collect()
}

/// The kubelet's probe of a1's fabric address and a1's reply, both translated by the bridge.
fn probe(dp: &Datapath) -> (u32, u32) {
    let (client, fabric, gw) = (v4("10.244.0.1"), v4("10.244.1.5"), v4("169.254.1.1"));
    let syn = pkt::ipv4(MAC_HOST, MAC_A1, client, fabric, TCP, 40000, 8080, 0);
    let inn = dp.run(TO_POD, &syn, LO, 0);
    let gw_port = pkt::parse_v4(&inn.packet).sport;
    let reply = pkt::ipv4(MAC_A1, cfg().gw_mac, v4("10.0.0.1"), gw, TCP, 8080, gw_port, 0);
    let out = dp.run(FROM_POD, &reply, LO, 0);
    let r = pkt::parse_v4(&out.packet);
    assert_eq!((r.src, r.dst), (fabric, client), "the reply is un-bridged");
    (inn.verdict, out.verdict)
}

#[test]
fn a_severed_pod_sends_and_receives_nothing_in_its_vpc_but_answers_its_probe() {
    let mut dp = setup();
    // Before: every walk passes.
    for (dst, verdict) in vpc_walks(&mut dp) {
        assert_eq!(verdict, TC_ACT_REDIRECT, "to {dst} before severing");
    }
    assert_eq!(probe(&dp), (TC_ACT_OK, TC_ACT_OK));
    assert_eq!(total_drops(&dp), 0);

    assert!(sever(&mut dp, VPC_A, "10.0.0.1", LO));
    let walks = vpc_walks(&mut dp);
    for (dst, verdict) in &walks {
        assert_eq!(*verdict, TC_ACT_SHOT, "to {dst} after severing");
    }
    assert_eq!(drops_of(&dp, DropReason::Severed), walks.len() as u64);
    assert_eq!(total_drops(&dp), walks.len() as u64, "every drop is DROP_SEVERED");
    // The fabric address keeps the Kubernetes contract.
    assert_eq!(probe(&dp), (TC_ACT_OK, TC_ACT_OK));
    assert_eq!(total_drops(&dp), walks.len() as u64);

    // The pods a1 talked to are untouched: a2 still reaches a9.
    let out = dp.run(FROM_POD, &udp4(MAC_A2, "10.0.0.2", "10.0.0.9"), LO, 0);
    assert_eq!(out.verdict, TC_ACT_REDIRECT);
}

#[test]
fn severing_touches_only_the_pods_own_record() {
    let mut dp = setup();
    // Another veth's record (the address re-issued to a newer pod): left alone.
    assert!(!sever(&mut dp, VPC_A, "10.0.0.1", LO + 1));
    // No record: nothing is created.
    assert!(!sever(&mut dp, VPC_A, "10.0.0.77", LO));
    {
        let eps = EndpointsMap::try_from(dp.map(endpoints::NAME)).unwrap();
        assert_eq!(eps.get(VPC_A, ip("10.0.0.77")).unwrap(), None);
        assert_eq!(eps.get(VPC_A, ip("10.0.0.1")).unwrap().unwrap().flags, 0);
    }
    for (dst, verdict) in vpc_walks(&mut dp) {
        assert_eq!(verdict, TC_ACT_REDIRECT, "to {dst}");
    }
    // Severing twice is severing once.
    assert!(sever(&mut dp, VPC_A, "10.0.0.1", LO));
    assert!(sever(&mut dp, VPC_A, "10.0.0.1", LO));
    let eps = EndpointsMap::try_from(dp.map(endpoints::NAME)).unwrap();
    let ep = eps.get(VPC_A, ip("10.0.0.1")).unwrap().unwrap();
    assert_eq!(ep.flags, cozyplane_bpf::abi::Endpoint::F_SEVERED);
    assert_eq!((ep.ifindex, ep.mac), (LO, MAC_A1));
}
