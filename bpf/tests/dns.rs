//! DNS steering (`lib/dns.h`) through `BPF_PROG_TEST_RUN`: a VPC pod's query to the cluster
//! DNS (UDP and TCP, IPv4 and IPv6) leaves `sdn_from_pod` re-addressed to the node resolver
//! of its family from the pod's fabric address of that family, and the answer entering
//! through `sdn_to_pod` is restored to come from what the pod asked, to its VPC address,
//! checksums intact. A family without a resolver or without a fabric address is never
//! translated to the other. Port 53 inside the VPC, a
//! default-network pod's DNS and a datapath without a configured resolver are left as they
//! were. Needs root; fails (never skips) without it. The whole walk with real sockets is
//! the lab's (`lab/tests/dns.rs`).

mod common;

use std::net::Ipv6Addr;

use common::fixtures::*;
use common::pkt::{self, TCP, UDP};
use common::{Datapath, LO, TC_ACT_OK, TC_ACT_REDIRECT};
use cozyplane_bpf::DropReason;
use cozyplane_bpf::abi::LbSvc;
use cozyplane_bpf::maps::{
    dns_cfg::{self, DnsCfgMap},
    dns_ct::{self, DnsCtMap},
    dns_pods::{self, DnsPodsMap},
    lb_svc::{self, Frontend, LbSvcMap},
};

const POD: &str = "10.0.0.1";
const FABRIC: &str = "10.244.1.5";
const NEIGHBOUR: &str = "10.0.0.2";
const CLUSTER_DNS: &str = "10.96.0.10";
const NODE: &str = "192.168.10.1";
const RESOLVER_PORT: u16 = 15353;
const MAC_A2: [u8; 6] = [0x0a, 0, 0, 0, 0, 0xa2];
const MAC_HOST: [u8; 6] = [0x0a, 0, 0, 0, 0, 0xee];

/// Pod a1 of VPC A on lo with its fabric address bridged and known to steering; a
/// neighbour a2 in the same VPC; the resolver at NODE:15353 when `steering`.
fn setup(steering: bool) -> Datapath {
    let mut dp = Datapath::load(&cfg());
    vpc_pod(&mut dp, VPC_A, POD, MAC_A1);
    endpoint(&mut dp, VPC_A, NEIGHBOUR, LO, MAC_A2);
    bridge(&mut dp, FABRIC, VPC_A, POD);
    DnsPodsMap::try_from(dp.map_mut(dns_pods::NAME))
        .unwrap()
        .upsert(VPC_A, ip(POD), ip(FABRIC))
        .unwrap();
    // The cluster's internal ranges, as the agent writes them: the Service CIDR (the cluster
    // DNS's), and pod ranges that here overlap the VPC's own (its own addresses still win).
    // Inside the cluster, so a query that is not steered meets isolation, not the gateway.
    inside(&mut dp, 0, "10.96.0.0", 12);
    inside(&mut dp, 0, "10.0.0.0", 8);
    if steering {
        DnsCfgMap::try_from(dp.map_mut(dns_cfg::NAME))
            .unwrap()
            .set((v4(NODE), RESOLVER_PORT).into())
            .unwrap();
    }
    dp
}

fn query(proto: u8, dst: &str, dport: u16) -> Vec<u8> {
    pkt::ipv4(MAC_A1, cfg().gw_mac, v4(POD), v4(dst), proto, 5000, dport, 0)
}

fn answer(proto: u8, from: &str, sport: u16) -> Vec<u8> {
    pkt::ipv4(
        MAC_HOST,
        [0x0a, 0, 0, 0, 0, 0xff],
        v4(from),
        v4(FABRIC),
        proto,
        sport,
        5000,
        0,
    )
}

#[test]
fn a_query_to_the_cluster_dns_goes_to_the_node_resolver_and_its_answer_comes_back() {
    for proto in [UDP, TCP] {
        let dp = setup(true);
        let out = dp.run(FROM_POD, &query(proto, CLUSTER_DNS, 53), LO, 0);
        assert_eq!(out.verdict, TC_ACT_OK, "to the host stack");
        let p = pkt::parse_v4(&out.packet);
        assert_eq!(
            (p.src, p.sport),
            (v4(FABRIC), 5000),
            "from the pod's fabric address"
        );
        assert_eq!((p.dst, p.dport), (v4(NODE), RESOLVER_PORT), "to the resolver");
        assert_eq!(p.proto, proto);
        pkt::assert_v4_checksums(&out.packet);
        let ct = DnsCtMap::try_from(dp.map(dns_ct::NAME))
            .unwrap()
            .get(ip(FABRIC), 5000, proto)
            .unwrap();
        assert_eq!(ct, Some((v4(CLUSTER_DNS), 53).into()));

        let back = dp.run(TO_POD, &answer(proto, NODE, RESOLVER_PORT), LO, 0);
        assert_eq!(back.verdict, TC_ACT_OK, "delivered into the pod");
        let p = pkt::parse_v4(&back.packet);
        assert_eq!(
            (p.src, p.sport),
            (v4(CLUSTER_DNS), 53),
            "as if from what it asked"
        );
        assert_eq!((p.dst, p.dport), (v4(POD), 5000), "to its VPC address");
        assert_eq!(p.dst_mac, MAC_A1);
        pkt::assert_v4_checksums(&back.packet);
        assert_eq!(total_drops(&dp), 0);
    }
}

#[test]
fn any_cluster_internal_address_outside_the_vpc_is_steered_too() {
    // A socket-level load balancer may have turned the ClusterIP into a DNS pod's address.
    let dp = setup(true);
    let out = dp.run(FROM_POD, &query(UDP, "10.244.7.3", 53), LO, 0);
    let p = pkt::parse_v4(&out.packet);
    assert_eq!((p.dst, p.dport), (v4(NODE), RESOLVER_PORT));
    let back = dp.run(TO_POD, &answer(UDP, NODE, RESOLVER_PORT), LO, 0);
    let p = pkt::parse_v4(&back.packet);
    assert_eq!((p.src, p.sport), (v4("10.244.7.3"), 53));
}

#[test]
fn port_53_outside_the_cluster_is_not_steered() {
    // Not in sdn_internal: a resolver out there is the gateway's business (none here).
    let dp = setup(true);
    let out = dp.run(FROM_POD, &query(UDP, "198.51.100.53", 53), LO, 0);
    assert_dropped(&dp, out.verdict, DropReason::NoGateway);
}

#[test]
fn port_53_inside_the_vpc_is_left_alone() {
    let dp = setup(true);
    let out = dp.run(FROM_POD, &query(UDP, NEIGHBOUR, 53), LO, 0);
    assert_eq!(out.verdict, TC_ACT_REDIRECT, "delivered to the neighbour");
    let p = pkt::parse_v4(&out.packet);
    assert_eq!((p.src, p.dst, p.dport), (v4(POD), v4(NEIGHBOUR), 53));
    assert_eq!(total_drops(&dp), 0);
}

#[test]
fn port_53_of_a_servicevip_of_the_vpc_is_left_alone() {
    // The tenant's own DNS behind its own load balancer, at an address inside the steered
    // internal ranges: the load balancer gets it (here: a frontend without backends, a miss),
    // the resolver does not.
    let mut dp = setup(true);
    LbSvcMap::try_from(dp.map_mut(lb_svc::NAME))
        .unwrap()
        .upsert(
            Frontend {
                net: VPC_A,
                vip: ip("10.0.0.250"),
                proto: UDP,
                port: 53,
            },
            LbSvc {
                id: 1,
                count: 0,
                affinity: 0,
                flags: 0,
            },
        )
        .unwrap();
    let out = dp.run(FROM_POD, &query(UDP, "10.0.0.250", 53), LO, 0);
    assert_dropped(&dp, out.verdict, DropReason::VipNoBackend);
    // The same port over TCP is no frontend: steered as before.
    let out = dp.run(FROM_POD, &query(TCP, "10.0.0.250", 53), LO, 0);
    let p = pkt::parse_v4(&out.packet);
    assert_eq!((p.dst, p.dport), (v4(NODE), RESOLVER_PORT));
}

#[test]
fn a_default_network_pods_dns_is_untouched() {
    let mut dp = setup(true);
    port(&mut dp, LO, 0);
    endpoint(&mut dp, 0, "10.244.1.9", LO, MAC_A1);
    let q = pkt::ipv4(
        MAC_A1,
        cfg().gw_mac,
        v4("10.244.1.9"),
        v4(CLUSTER_DNS),
        UDP,
        5000,
        53,
        0,
    );
    let out = dp.run(FROM_POD, &q, LO, 0);
    assert_eq!(out.verdict, TC_ACT_OK);
    let p = pkt::parse_v4(&out.packet);
    assert_eq!((p.src, p.dst, p.dport), (v4("10.244.1.9"), v4(CLUSTER_DNS), 53));
}

#[test]
fn without_a_resolver_the_query_meets_isolation_as_before() {
    let dp = setup(false);
    let out = dp.run(FROM_POD, &query(UDP, CLUSTER_DNS, 53), LO, 0);
    assert_dropped(&dp, out.verdict, DropReason::VpcIsolation);
}

#[test]
fn other_ports_of_the_cluster_dns_are_not_steered() {
    let dp = setup(true);
    let out = dp.run(FROM_POD, &query(UDP, CLUSTER_DNS, 5353), LO, 0);
    assert_dropped(&dp, out.verdict, DropReason::VpcIsolation);
}

#[test]
fn a_pod_unknown_to_steering_is_a_counted_drop() {
    let mut dp = setup(true);
    DnsPodsMap::try_from(dp.map_mut(dns_pods::NAME))
        .unwrap()
        .remove(VPC_A, ip(POD))
        .unwrap();
    let out = dp.run(FROM_POD, &query(UDP, CLUSTER_DNS, 53), LO, 0);
    assert_dropped(&dp, out.verdict, DropReason::DnsNoSource);
}

#[test]
fn an_answer_without_a_query_is_dropped() {
    let dp = setup(true);
    let out = dp.run(TO_POD, &answer(UDP, NODE, RESOLVER_PORT), LO, 0);
    assert_dropped(&dp, out.verdict, DropReason::DnsNoCt);
}

// --- IPv6: a dual-stack VPC pod on a dual-stack default network.

const POD6: &str = "fd00:10::1";
const FABRIC6: &str = "fd44:0:0:1::5";
const CLUSTER_DNS6: &str = "fd00:96::a";
const NODE6: &str = "fd77::1";

fn v6(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

/// [`setup`] plus the pod's IPv6 addresses (VPC and fabric, bridged) and the IPv6 cluster
/// DNS; an IPv6 resolver when `steering6`, an IPv6 fabric address known to steering when
/// `fabric6`.
fn setup6(steering6: bool, fabric6: bool) -> Datapath {
    let mut dp = setup(true);
    endpoint(&mut dp, VPC_A, POD6, LO, MAC_A1);
    bridge(&mut dp, FABRIC6, VPC_A, POD6);
    if fabric6 {
        DnsPodsMap::try_from(dp.map_mut(dns_pods::NAME))
            .unwrap()
            .upsert(VPC_A, ip(POD6), ip(FABRIC6))
            .unwrap();
    } else {
        // Only the IPv4 fabric address (a single-stack default network).
        DnsPodsMap::try_from(dp.map_mut(dns_pods::NAME))
            .unwrap()
            .upsert(VPC_A, ip(POD6), ip(FABRIC))
            .unwrap();
    }
    // The v6 Service CIDR, which holds CLUSTER_DNS6.
    common::fixtures::inside(&mut dp, 0, "fd00:96::", 64);
    if steering6 {
        DnsCfgMap::try_from(dp.map_mut(dns_cfg::NAME))
            .unwrap()
            .set((ip(NODE6), RESOLVER_PORT).into())
            .unwrap();
    }
    dp
}

fn query6(proto: u8) -> Vec<u8> {
    pkt::ipv6(
        MAC_A1,
        cfg().gw_mac,
        v6(POD6),
        v6(CLUSTER_DNS6),
        proto,
        5000,
        53,
        0,
    )
}

#[test]
fn an_ipv6_query_goes_to_the_ipv6_resolver_and_its_answer_comes_back() {
    for proto in [UDP, TCP] {
        let dp = setup6(true, true);
        let out = dp.run(FROM_POD, &query6(proto), LO, 0);
        assert_eq!(out.verdict, TC_ACT_OK, "to the host stack");
        let p = pkt::parse_v6(&out.packet);
        assert_eq!(
            (p.src, p.sport),
            (v6(FABRIC6), 5000),
            "from the pod's IPv6 fabric address"
        );
        assert_eq!(
            (p.dst, p.dport),
            (v6(NODE6), RESOLVER_PORT),
            "to the IPv6 resolver"
        );
        assert_eq!(p.proto, proto);
        pkt::assert_v6_checksums(&out.packet);
        let ct = DnsCtMap::try_from(dp.map(dns_ct::NAME))
            .unwrap()
            .get(ip(FABRIC6), 5000, proto)
            .unwrap();
        assert_eq!(ct, Some((ip(CLUSTER_DNS6), 53).into()));

        let answer = pkt::ipv6(
            MAC_HOST,
            [0x0a, 0, 0, 0, 0, 0xff],
            v6(NODE6),
            v6(FABRIC6),
            proto,
            RESOLVER_PORT,
            5000,
            0,
        );
        let back = dp.run(TO_POD, &answer, LO, 0);
        assert_eq!(back.verdict, TC_ACT_OK, "delivered into the pod");
        let p = pkt::parse_v6(&back.packet);
        assert_eq!(
            (p.src, p.sport),
            (v6(CLUSTER_DNS6), 53),
            "as if from what it asked"
        );
        assert_eq!((p.dst, p.dport), (v6(POD6), 5000), "to its VPC address");
        assert_eq!(p.dst_mac, MAC_A1);
        pkt::assert_v6_checksums(&back.packet);
        assert_eq!(total_drops(&dp), 0);
    }
}

#[test]
fn ipv4_steering_leaves_ipv6_queries_without_a_resolver_of_their_own_alone() {
    let dp = setup6(false, true);
    let out = dp.run(FROM_POD, &query6(UDP), LO, 0);
    // Never translated to the IPv4 resolver: the query meets isolation as before.
    assert_dropped(&dp, out.verdict, DropReason::VpcIsolation);
}

#[test]
fn an_ipv6_query_without_an_ipv6_fabric_address_is_a_counted_drop() {
    // No NAT46: the IPv4 fabric address cannot carry an IPv6 query.
    let dp = setup6(true, false);
    let out = dp.run(FROM_POD, &query6(UDP), LO, 0);
    assert_dropped(&dp, out.verdict, DropReason::DnsNoSource);
}

/// The cluster DNS in its NAT64 form, as a v6-only pod asks it.
const CLUSTER_DNS64: &str = "64:ff9b::a60:a";

// A v6-only VPC pod on a v4 default network (its fabric address IPv4, the bridge's NAT46)
// asks the cluster DNS at 64:ff9b::<ClusterIP>: the query leaves as IPv4 from its fabric
// address to the v4 resolver, and the answer comes back as IPv6 from what it asked.
#[test]
fn a_v6_only_pods_query_to_the_nat64_cluster_dns_is_translated_both_ways() {
    for proto in [UDP, TCP] {
        let mut dp = Datapath::load(&cfg());
        vpc_pod(&mut dp, VPC_A, POD6, MAC_A1);
        bridge(&mut dp, FABRIC, VPC_A, POD6);
        DnsPodsMap::try_from(dp.map_mut(dns_pods::NAME))
            .unwrap()
            .upsert(VPC_A, ip(POD6), ip(FABRIC))
            .unwrap();
        inside(&mut dp, 0, "10.96.0.0", 12);
        DnsCfgMap::try_from(dp.map_mut(dns_cfg::NAME))
            .unwrap()
            .set((v4(NODE), RESOLVER_PORT).into())
            .unwrap();

        let q = pkt::ipv6(
            MAC_A1,
            cfg().gw_mac,
            v6(POD6),
            v6(CLUSTER_DNS64),
            proto,
            5000,
            53,
            0,
        );
        let out = dp.run(FROM_POD, &q, LO, 0);
        assert_eq!(out.verdict, TC_ACT_OK, "to the host stack");
        let p = pkt::parse_v4(&out.packet);
        assert_eq!((p.src, p.sport), (v4(FABRIC), 5000), "from its v4 fabric address");
        assert_eq!((p.dst, p.dport), (v4(NODE), RESOLVER_PORT), "to the v4 resolver");
        assert_eq!(p.proto, proto);
        pkt::assert_v4_checksums(&out.packet);

        let back = dp.run(TO_POD, &answer(proto, NODE, RESOLVER_PORT), LO, 0);
        assert_eq!(back.verdict, TC_ACT_OK, "delivered into the pod");
        let p = pkt::parse_v6(&back.packet);
        assert_eq!(
            (p.src, p.sport),
            (v6(CLUSTER_DNS64), 53),
            "as if from what it asked"
        );
        assert_eq!((p.dst, p.dport), (v6(POD6), 5000), "to its VPC address");
        assert_eq!(p.dst_mac, MAC_A1);
        pkt::assert_v6_checksums(&back.packet);
        assert_eq!(total_drops(&dp), 0);
    }
}
