//! Load balancing inside VPCs (`lib/lb.h`) through `BPF_PROG_TEST_RUN`: a VPC pod's packet
//! to a ServiceVIP port is DNATed to a backend of the frontend's table and pinned; the
//! backend's reply comes back from the VIP; hairpin, ClientIP affinity, UDP, IPv6, many
//! backends and peered clients. The Maglev tables here are simple round-robin fills (the
//! agent's builder has its own property tests); what is tested is what the datapath does
//! with a table. The overlay side of the reverse NAT (`sdn_from_overlay`) needs tunnel
//! metadata a test run cannot attach: the netns lab covers it (`lab/tests/vip.rs`). Needs
//! root; fails (never skips) without it.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use common::fixtures::*;
use common::pkt::{self, TCP, UDP};
use common::{Datapath, LO, TC_ACT_REDIRECT};
use cozyplane_bpf::DropReason;
use cozyplane_bpf::abi::{LB_BIG_CHUNKS, LB_BIG_SLOTS, LB_CHUNK_SLOTS, LB_SLOTS, LbSvc};
use cozyplane_bpf::maps::{
    lb_backends::{self, LbBackendsMap},
    lb_flows::{self, LbFlowsMap},
    lb_mag_big::{self, LbMagBigMap},
    lb_maglev::{self, LbMaglevMap},
    lb_stats::{self, LbStatsMap},
    lb_svc::{self, Frontend, LbSvcMap},
    remotes::{self, RemotesMap},
    xnet_allow::{self, XnetAllowMap},
    xnet_routes::{self, XnetRoutesMap},
};

const VIP: &str = "10.0.0.250";
const CLIENT: &str = "10.0.0.1";
/// The ifindex of the backends' veths (a map key only).
const BACKEND_IF: u32 = 7;
const HAIRPIN4: Ipv4Addr = Ipv4Addr::new(169, 254, 42, 1);

fn backend_mac(i: u32) -> [u8; 6] {
    [0x0a, 0, 0, 0, (i >> 8) as u8, i as u8]
}

/// Frontend `vip:port/proto` of `net` with `backends` (`(id, address, target port)`), each
/// an endpoint of this node, the table filled round-robin.
fn service(
    dp: &mut Datapath,
    net: u32,
    vip: &str,
    proto: u8,
    port: u16,
    backends: &[(u32, &str, u16)],
    affinity: u32,
) -> Frontend {
    let f = Frontend {
        net,
        vip: ip(vip),
        proto,
        port,
    };
    // An empty address: the caller writes that backend itself.
    for (id, addr, tport) in backends.iter().filter(|b| !b.1.is_empty()) {
        LbBackendsMap::try_from(dp.map_mut(lb_backends::NAME))
            .unwrap()
            .upsert(*id, net, ip(addr), *tport)
            .unwrap();
        endpoint(dp, net, addr, BACKEND_IF, backend_mac(*id));
    }
    table(dp, 1, backends.iter().map(|b| b.0).collect::<Vec<_>>().as_slice());
    LbSvcMap::try_from(dp.map_mut(lb_svc::NAME))
        .unwrap()
        .upsert(
            f,
            LbSvc {
                id: 1,
                count: backends.len() as u32,
                affinity,
                flags: 0,
            },
        )
        .unwrap();
    f
}

/// Table 1 filled round-robin with `ids` (all zero for none).
fn table(dp: &mut Datapath, id: u32, ids: &[u32]) {
    let slots: Vec<u32> = (0..LB_SLOTS)
        .map(|i| if ids.is_empty() { 0 } else { ids[i % ids.len()] })
        .collect();
    LbMaglevMap::try_from(dp.map_mut(lb_maglev::NAME))
        .unwrap()
        .set(id, &slots)
        .unwrap();
}

fn tcp4(src_mac: [u8; 6], src: &str, sport: u16, dst: &str, dport: u16) -> Vec<u8> {
    pkt::ipv4(src_mac, cfg().gw_mac, v4(src), v4(dst), TCP, sport, dport, 0)
}

fn stats(dp: &Datapath) -> lb_stats::LbStats {
    LbStatsMap::try_from(dp.map(lb_stats::NAME))
        .unwrap()
        .get()
        .unwrap()
}

/// Sends `client:sport → VIP:80` and returns the backend address and port it went to.
fn send(dp: &Datapath, sport: u16) -> (Ipv4Addr, u16) {
    let out = dp.run(FROM_POD, &tcp4(MAC_A1, CLIENT, sport, VIP, 80), LO, 0);
    assert_eq!(out.verdict, TC_ACT_REDIRECT, "delivered");
    pkt::assert_v4_checksums(&out.packet);
    let p = pkt::parse_v4(&out.packet);
    assert_eq!((p.src, p.sport), (v4(CLIENT), sport), "the client is kept");
    (p.dst, p.dport)
}

#[test]
fn a_packet_to_a_vip_is_dnated_to_a_backend() {
    let mut dp = Datapath::load(&cfg());
    vpc_pod(&mut dp, VPC_A, CLIENT, MAC_A1);
    service(&mut dp, VPC_A, VIP, TCP, 80, &[(5, "10.0.0.7", 8080)], 0);

    let out = dp.run(FROM_POD, &tcp4(MAC_A1, CLIENT, 40000, VIP, 80), LO, 0);
    assert_eq!(out.verdict, TC_ACT_REDIRECT);
    pkt::assert_v4_checksums(&out.packet);
    let p = pkt::parse_v4(&out.packet);
    assert_eq!(p.dst_mac, backend_mac(5), "delivered to the backend's pod");
    assert_eq!((p.src, p.sport), (v4(CLIENT), 40000));
    assert_eq!((p.dst, p.dport), (v4("10.0.0.7"), 8080));
    assert_eq!(total_drops(&dp), 0);
    assert_eq!(
        stats(&dp),
        lb_stats::LbStats {
            flows: 1,
            selections: 1,
            misses: 0,
            snat: 0
        }
    );
    // The same flow again: no new flow, one more selection.
    send(&dp, 40000);
    assert_eq!(stats(&dp).flows, 1);
    assert_eq!(stats(&dp).selections, 2);
    // Another port of the VIP is no frontend: no endpoint holds the VIP, and the VPC's own
    // range (as the agent writes it for the gateway door) keeps it inside.
    inside(&mut dp, VPC_A, "10.0.0.0", 24);
    let out = dp.run(FROM_POD, &tcp4(MAC_A1, CLIENT, 40000, VIP, 81), LO, 0);
    assert_dropped(&dp, out.verdict, DropReason::VpcIsolation);
}

#[test]
fn a_backend_on_another_node_is_reached_through_the_overlay() {
    let mut dp = Datapath::load(&cfg());
    vpc_pod(&mut dp, VPC_A, CLIENT, MAC_A1);
    service(&mut dp, VPC_A, VIP, TCP, 80, &[(5, "", 8080)], 0);
    LbBackendsMap::try_from(dp.map_mut(lb_backends::NAME))
        .unwrap()
        .upsert(5, VPC_A, ip("10.0.0.9"), 8080)
        .unwrap();
    RemotesMap::try_from(dp.map_mut(remotes::NAME))
        .unwrap()
        .upsert(VPC_A, ip("10.0.0.9"), ip("192.168.10.2"))
        .unwrap();
    let out = dp.run(FROM_POD, &tcp4(MAC_A1, CLIENT, 40000, VIP, 80), LO, 0);
    assert_eq!(out.verdict, TC_ACT_REDIRECT);
    let p = pkt::parse_v4(&out.packet);
    assert_eq!(p.dst_mac, cfg().tunnel_mac, "encapsulated");
    assert_eq!((p.dst, p.dport), (v4("10.0.0.9"), 8080));
}

#[test]
fn a_vip_without_backends_is_a_counted_miss() {
    let mut dp = Datapath::load(&cfg());
    vpc_pod(&mut dp, VPC_A, CLIENT, MAC_A1);
    service(&mut dp, VPC_A, VIP, TCP, 80, &[], 0);
    let out = dp.run(FROM_POD, &tcp4(MAC_A1, CLIENT, 40000, VIP, 80), LO, 0);
    assert_dropped(&dp, out.verdict, DropReason::VipNoBackend);
    assert_eq!(stats(&dp).misses, 1);
    assert_eq!(stats(&dp).flows, 0);
}

// A new table (a backend added, another removed) never moves a pinned flow; new flows use
// the new table only.
#[test]
fn a_pinned_flow_survives_a_change_of_the_backend_set() {
    let mut dp = Datapath::load(&cfg());
    vpc_pod(&mut dp, VPC_A, CLIENT, MAC_A1);
    service(
        &mut dp,
        VPC_A,
        VIP,
        TCP,
        80,
        &[
            (1, "10.0.0.11", 8080),
            (2, "10.0.0.12", 8080),
            (3, "10.0.0.13", 8080),
        ],
        0,
    );
    let before: Vec<(Ipv4Addr, u16)> = (0..30).map(|i| send(&dp, 41000 + i)).collect();
    let used: BTreeSet<Ipv4Addr> = before.iter().map(|b| b.0).collect();
    assert!(
        used.len() > 1,
        "30 flows over 3 backends use more than one: {used:?}"
    );

    // Backend 1 removed from the table, backend 4 added.
    LbBackendsMap::try_from(dp.map_mut(lb_backends::NAME))
        .unwrap()
        .upsert(4, VPC_A, ip("10.0.0.14"), 8080)
        .unwrap();
    endpoint(&mut dp, VPC_A, "10.0.0.14", BACKEND_IF, backend_mac(4));
    table(&mut dp, 1, &[4, 2, 3]);

    for (i, b) in before.iter().enumerate() {
        assert_eq!(send(&dp, 41000 + i as u16), *b, "flow {i} moved");
    }
    let fresh: BTreeSet<Ipv4Addr> = (0..30).map(|i| send(&dp, 42000 + i).0).collect();
    assert!(
        !fresh.contains(&v4("10.0.0.11")),
        "a new flow went to the removed backend"
    );
    assert!(
        fresh.contains(&v4("10.0.0.14")),
        "no new flow reached the added backend"
    );
    assert_eq!(
        LbFlowsMap::try_from(dp.map(lb_flows::NAME))
            .unwrap()
            .entries()
            .unwrap()
            .len(),
        60
    );
}

// The backend's reply (seen by sdn_from_pod on its veth, this node) leaves as the VIP.
#[test]
fn a_reply_comes_back_from_the_vip() {
    let mut dp = Datapath::load(&cfg());
    vpc_pod(&mut dp, VPC_A, CLIENT, MAC_A1);
    service(&mut dp, VPC_A, VIP, TCP, 80, &[(5, "10.0.0.7", 8080)], 0);
    send(&dp, 40000);

    // The backend now sends on "lo"; the client's veth is another.
    endpoint(&mut dp, VPC_A, "10.0.0.7", LO, backend_mac(5));
    endpoint(&mut dp, VPC_A, CLIENT, 9, MAC_A1);
    let reply = tcp4(backend_mac(5), "10.0.0.7", 8080, CLIENT, 40000);
    let out = dp.run(FROM_POD, &reply, LO, 0);
    assert_eq!(out.verdict, TC_ACT_REDIRECT);
    pkt::assert_v4_checksums(&out.packet);
    let p = pkt::parse_v4(&out.packet);
    assert_eq!(p.dst_mac, MAC_A1, "delivered to the client");
    assert_eq!((p.src, p.sport), (v4(VIP), 80), "from the VIP");
    assert_eq!((p.dst, p.dport), (v4(CLIENT), 40000));

    // A packet of the backend that answers no balanced flow is untouched.
    let other = tcp4(backend_mac(5), "10.0.0.7", 8080, CLIENT, 40001);
    let p = pkt::parse_v4(&dp.run(FROM_POD, &other, LO, 0).packet);
    assert_eq!((p.src, p.sport), (v4("10.0.0.7"), 8080));
    assert_eq!(total_drops(&dp), 0);
}

// A backend calling its own Service and given itself: SNAT to the hairpin address on the
// way in, both addresses restored on the way out.
#[test]
fn a_backend_reaching_itself_through_its_vip_is_hairpinned() {
    let mut dp = Datapath::load(&cfg());
    vpc_pod(&mut dp, VPC_A, CLIENT, MAC_A1);
    service(&mut dp, VPC_A, VIP, TCP, 80, &[(5, "", 8080)], 0);
    LbBackendsMap::try_from(dp.map_mut(lb_backends::NAME))
        .unwrap()
        .upsert(5, VPC_A, ip(CLIENT), 8080)
        .unwrap();

    let out = dp.run(FROM_POD, &tcp4(MAC_A1, CLIENT, 40000, VIP, 80), LO, 0);
    assert_eq!(out.verdict, TC_ACT_REDIRECT);
    pkt::assert_v4_checksums(&out.packet);
    let p = pkt::parse_v4(&out.packet);
    assert_eq!(p.dst_mac, MAC_A1, "back into the client itself");
    assert_eq!(
        (p.src, p.sport),
        (HAIRPIN4, 40000),
        "source is the hairpin address"
    );
    assert_eq!((p.dst, p.dport), (v4(CLIENT), 8080));

    let reply = tcp4(MAC_A1, CLIENT, 8080, "169.254.42.1", 40000);
    let out = dp.run(FROM_POD, &reply, LO, 0);
    assert_eq!(out.verdict, TC_ACT_REDIRECT);
    pkt::assert_v4_checksums(&out.packet);
    let p = pkt::parse_v4(&out.packet);
    assert_eq!((p.src, p.sport), (v4(VIP), 80));
    assert_eq!((p.dst, p.dport), (v4(CLIENT), 40000));
    assert_eq!(total_drops(&dp), 0);
}

// sessionAffinity ClientIP: every new flow of one client goes to one backend; without it
// the same flows spread.
#[test]
fn client_ip_affinity_keeps_a_client_on_one_backend() {
    let backends: Vec<(u32, String, u16)> =
        (1..=8).map(|i| (i, format!("10.0.0.{}", 10 + i), 8080)).collect();
    let b: Vec<(u32, &str, u16)> = backends.iter().map(|(i, a, p)| (*i, a.as_str(), *p)).collect();
    for (affinity, want_one) in [(10800, true), (0, false)] {
        let mut dp = Datapath::load(&cfg());
        vpc_pod(&mut dp, VPC_A, CLIENT, MAC_A1);
        service(&mut dp, VPC_A, VIP, TCP, 80, &b, affinity);
        let used: BTreeSet<Ipv4Addr> = (0..20).map(|i| send(&dp, 43000 + i).0).collect();
        assert_eq!(used.len() == 1, want_one, "affinity {affinity}: {used:?}");
    }
}

// Once a client's affinity times out, its next flow is balanced anew (kube-proxy's choice
// at random; here the flow's hash, source port included), not given the same backend by the
// client's address alone: over five expiries the client meets more than one backend, and
// within the timeout it stays where it was sent.
#[test]
fn an_expired_affinity_lets_the_client_move() {
    let backends: Vec<(u32, String, u16)> =
        (1..=8).map(|i| (i, format!("10.0.0.{}", 10 + i), 8080)).collect();
    let b: Vec<(u32, &str, u16)> = backends.iter().map(|(i, a, p)| (*i, a.as_str(), *p)).collect();
    let mut dp = Datapath::load(&cfg());
    vpc_pod(&mut dp, VPC_A, CLIENT, MAC_A1);
    service(&mut dp, VPC_A, VIP, TCP, 80, &b, 1);
    let mut seen = BTreeSet::new();
    for round in 0..5u16 {
        if round > 0 {
            std::thread::sleep(std::time::Duration::from_millis(1100));
        }
        let first = send(&dp, 44000 + 10 * round).0;
        assert_eq!(
            send(&dp, 44001 + 10 * round).0,
            first,
            "within the timeout: the same backend"
        );
        seen.insert(first);
    }
    assert!(seen.len() > 1, "five expiries, always {seen:?}");
}

#[test]
fn udp_is_balanced_and_reversed() {
    let mut dp = Datapath::load(&cfg());
    vpc_pod(&mut dp, VPC_A, CLIENT, MAC_A1);
    service(&mut dp, VPC_A, VIP, UDP, 53, &[(5, "10.0.0.7", 5353)], 0);
    let q = pkt::ipv4(MAC_A1, cfg().gw_mac, v4(CLIENT), v4(VIP), UDP, 5000, 53, 0);
    let out = dp.run(FROM_POD, &q, LO, 0);
    assert_eq!(out.verdict, TC_ACT_REDIRECT);
    pkt::assert_v4_checksums(&out.packet);
    let p = pkt::parse_v4(&out.packet);
    assert_eq!((p.dst, p.dport, p.proto), (v4("10.0.0.7"), 5353, UDP));

    endpoint(&mut dp, VPC_A, "10.0.0.7", LO, backend_mac(5));
    endpoint(&mut dp, VPC_A, CLIENT, 9, MAC_A1);
    let r = pkt::ipv4(
        backend_mac(5),
        cfg().gw_mac,
        v4("10.0.0.7"),
        v4(CLIENT),
        UDP,
        5353,
        5000,
        0,
    );
    let out = dp.run(FROM_POD, &r, LO, 0);
    pkt::assert_v4_checksums(&out.packet);
    let p = pkt::parse_v4(&out.packet);
    assert_eq!((p.src, p.sport), (v4(VIP), 53));
    // A TCP packet to the UDP frontend is not balanced.
    endpoint(&mut dp, VPC_A, CLIENT, LO, MAC_A1);
    inside(&mut dp, VPC_A, "10.0.0.0", 24);
    let out = dp.run(FROM_POD, &tcp4(MAC_A1, CLIENT, 5000, VIP, 53), LO, 0);
    assert_dropped(&dp, out.verdict, DropReason::VpcIsolation);
}

#[test]
fn ipv6_is_balanced_and_reversed() {
    let c: Ipv6Addr = "fd00:a::1".parse().unwrap();
    let vip: Ipv6Addr = "fd00:a::ffff".parse().unwrap();
    let be: Ipv6Addr = "fd00:a::7".parse().unwrap();
    let mut dp = Datapath::load(&cfg());
    vpc_pod(&mut dp, VPC_A, "fd00:a::1", MAC_A1);
    service(
        &mut dp,
        VPC_A,
        "fd00:a::ffff",
        TCP,
        443,
        &[(5, "fd00:a::7", 8443)],
        0,
    );
    let q = pkt::ipv6(MAC_A1, cfg().gw_mac, c, vip, TCP, 40000, 443, 0);
    let out = dp.run(FROM_POD, &q, LO, 0);
    assert_eq!(out.verdict, TC_ACT_REDIRECT);
    pkt::assert_v6_checksums(&out.packet);
    let p = pkt::parse_v6(&out.packet);
    assert_eq!((p.src, p.dst, p.dport), (c, be, 8443));
    assert_eq!(p.dst_mac, backend_mac(5));

    endpoint(&mut dp, VPC_A, "fd00:a::7", LO, backend_mac(5));
    endpoint(&mut dp, VPC_A, "fd00:a::1", 9, MAC_A1);
    let r = pkt::ipv6(backend_mac(5), cfg().gw_mac, be, c, TCP, 8443, 40000, 0);
    let out = dp.run(FROM_POD, &r, LO, 0);
    pkt::assert_v6_checksums(&out.packet);
    let p = pkt::parse_v6(&out.packet);
    assert_eq!((p.src, p.sport, p.dst, p.dport), (vip, 443, c, 40000));

    // Hairpin in IPv6: the source becomes 100::2a01.
    endpoint(&mut dp, VPC_A, "fd00:a::7", LO, backend_mac(5));
    let q = pkt::ipv6(backend_mac(5), cfg().gw_mac, be, vip, TCP, 40001, 443, 0);
    let p = pkt::parse_v6(&dp.run(FROM_POD, &q, LO, 0).packet);
    assert_eq!((p.src, p.dst), ("100::2a01".parse::<Ipv6Addr>().unwrap(), be));
    assert_eq!(total_drops(&dp), 0);
}

// No fixed cap: 40 backends, every one of them gets flows.
#[test]
fn more_than_sixteen_backends_all_get_flows() {
    let backends: Vec<(u32, String, u16)> = (1..=40).map(|i| (i, format!("10.0.1.{i}"), 8080)).collect();
    let b: Vec<(u32, &str, u16)> = backends.iter().map(|(i, a, p)| (*i, a.as_str(), *p)).collect();
    let mut dp = Datapath::load(&cfg());
    vpc_pod(&mut dp, VPC_A, CLIENT, MAC_A1);
    service(&mut dp, VPC_A, VIP, TCP, 80, &b, 0);
    let mut per: BTreeMap<Ipv4Addr, u32> = BTreeMap::new();
    for i in 0..1200 {
        *per.entry(send(&dp, 20000 + i).0).or_default() += 1;
    }
    assert_eq!(per.len(), 40, "backends reached: {per:?}");
}

// A frontend with `F_BIG` is balanced by its table in sdn_lb_mag_big, whatever
// sdn_lb_maglev holds under the same id, over all of its slots: the slot is the hash modulo
// LB_BIG_SLOTS, found in its chunk. With the flag and no big table, a new flow is a miss
// rather than a pick from the small one.
#[test]
fn a_big_frontend_is_balanced_by_its_big_table() {
    let mut dp = Datapath::load(&cfg());
    vpc_pod(&mut dp, VPC_A, CLIENT, MAC_A1);
    let f = service(
        &mut dp,
        VPC_A,
        VIP,
        TCP,
        80,
        &[
            (1, "10.0.0.11", 8080),
            (2, "10.0.0.12", 8080),
            (3, "10.0.0.13", 8080),
        ],
        0,
    );
    // The small table names backend 1 only; the big one names 3 in its last, partly used
    // chunk (989 of its 29,989 slots, 3.3 %) and 2 in the others.
    table(&mut dp, 1, &[1]);
    let last = (LB_BIG_CHUNKS as usize - 1) * LB_CHUNK_SLOTS;
    let big: Vec<u32> = (0..LB_BIG_SLOTS).map(|i| if i < last { 2 } else { 3 }).collect();
    LbMagBigMap::try_from(dp.map_mut(lb_mag_big::NAME))
        .unwrap()
        .set(1, &big)
        .unwrap();
    let mut svc = LbSvcMap::try_from(dp.map_mut(lb_svc::NAME)).unwrap();
    let v = svc.get(f).unwrap().unwrap();
    svc.upsert(
        f,
        LbSvc {
            flags: v.flags | LbSvc::F_BIG,
            ..v
        },
    )
    .unwrap();

    let mut per: BTreeMap<Ipv4Addr, u32> = BTreeMap::new();
    for i in 0..1000 {
        *per.entry(send(&dp, 30000 + i).0).or_default() += 1;
    }
    assert!(
        !per.contains_key(&v4("10.0.0.11")),
        "picked from the small table: {per:?}"
    );
    // The last chunk is reached, and at its share (33 expected of 1000): a slot modulo the
    // small size, or a wrong chunk, would never or too often give backend 3.
    let three = per.get(&v4("10.0.0.13")).copied().unwrap_or(0);
    assert!((10..=70).contains(&three), "{per:?}");
    assert_eq!(per.values().sum::<u32>(), 1000, "every flow balanced: {per:?}");

    LbMagBigMap::try_from(dp.map_mut(lb_mag_big::NAME))
        .unwrap()
        .remove(1)
        .unwrap();
    let out = dp.run(FROM_POD, &tcp4(MAC_A1, CLIENT, 31000, VIP, 80), LO, 0);
    assert_dropped(&dp, out.verdict, DropReason::VipNoBackend);
}

// A client of a peered VPC reaches the VIP: the route says which net holds it, the
// frontend is looked up there, and the reply comes back from the VIP.
#[test]
fn a_peered_client_reaches_the_vip() {
    let mut dp = Datapath::load(&cfg());
    vpc_pod(&mut dp, VPC_B, "10.1.0.5", MAC_B1);
    service(&mut dp, VPC_A, VIP, TCP, 80, &[(5, "10.0.0.7", 8080)], 0);
    let mut routes = XnetRoutesMap::try_from(dp.map_mut(xnet_routes::NAME)).unwrap();
    routes.upsert((VPC_B, ip("10.0.0.0"), 24), VPC_A).unwrap();
    routes.upsert((VPC_A, ip("10.1.0.0"), 24), VPC_B).unwrap();
    let mut allow = XnetAllowMap::try_from(dp.map_mut(xnet_allow::NAME)).unwrap();
    allow.allow(VPC_B, VPC_A).unwrap();
    allow.allow(VPC_A, VPC_B).unwrap();

    let out = dp.run(FROM_POD, &tcp4(MAC_B1, "10.1.0.5", 40000, VIP, 80), LO, 0);
    assert_eq!(out.verdict, TC_ACT_REDIRECT);
    let p = pkt::parse_v4(&out.packet);
    assert_eq!(
        (p.dst, p.dport, p.dst_mac),
        (v4("10.0.0.7"), 8080, backend_mac(5))
    );

    // The reply: the backend on lo, the client on another veth.
    port(&mut dp, LO, VPC_A);
    endpoint(&mut dp, VPC_A, "10.0.0.7", LO, backend_mac(5));
    endpoint(&mut dp, VPC_B, "10.1.0.5", 9, MAC_B1);
    let r = tcp4(backend_mac(5), "10.0.0.7", 8080, "10.1.0.5", 40000);
    let out = dp.run(FROM_POD, &r, LO, 0);
    assert_eq!(out.verdict, TC_ACT_REDIRECT);
    pkt::assert_v4_checksums(&out.packet);
    let p = pkt::parse_v4(&out.packet);
    assert_eq!((p.src, p.sport, p.dst_mac), (v4(VIP), 80, MAC_B1));
    assert_eq!(total_drops(&dp), 0);

    // An unpeered VPC with the same range as A cannot reach A's VIP.
    let _ = IpAddr::from(v4(VIP));
}
