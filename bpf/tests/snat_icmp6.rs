//! ICMPv6 errors about flows of the SNAT engine (`lib/snat.h`) through `BPF_PROG_TEST_RUN`:
//! net-0 masquerade and the VPC gateway's NAT (`lib/egress.h`). A pod's flow is NATed out of
//! `sdn_from_pod`; the errors about it that arrive at the NAT address (`sdn_from_uplink`),
//! each of the four kinds, are translated back into the pod with their quote. Needs root;
//! fails (never skips) without it.
//!
//! The NATed packets leave by `bpf_fib_lookup`, so every test runs in a namespace with a
//! route out (`common::doors::in_routed_netns`). Checksums are recomputed from scratch
//! (`common::pkt`), and the translated quote must be byte for byte what the pod sent.

mod common;

use std::net::Ipv6Addr;
use std::process::Command;

use common::doors::*;
use common::fixtures::*;
use common::pkt::{self, ICMPV6, TCP, UDP};
use common::{Datapath, LO, TC_ACT_OK, TC_ACT_REDIRECT};
use cozyplane_bpf::DropReason;
use cozyplane_bpf::abi::{Addr, SnatConf};
use cozyplane_bpf::maps::{
    snat_addrs::{self, SnatAddrsMap},
    snat_conf::{self, SnatConfMap},
    snat_gws::{self, SnatGwsMap},
};

/// The node's uplink address (`in_routed_netns`'s `up0`) and its router.
const NODE6: &str = "2001:db8:ff::1";
const ROUTER6: &str = "2001:db8:ff::fe";
/// The peer outside, and VPC A's gateway NAT address.
const PEER6: &str = "2001:db8:100::2";
const NAT6: &str = "2001:db8:cafe::10";
const POD6: &str = "fd44:1::20";
const VPC_IP6: &str = "fd00:a::1";

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

fn ifindex(dev: &str) -> u32 {
    let out = Command::new("ip")
        .args(["-o", "link", "show", dev])
        .output()
        .unwrap();
    let s = String::from_utf8_lossy(&out.stdout);
    s.split(':')
        .next()
        .and_then(|i| i.trim().parse().ok())
        .unwrap_or_else(|| panic!("no ifindex for {dev}: {s}"))
}

/// The node's NAT settings as the agent writes them (`agent/src/uplink.rs`): masquerade on,
/// the uplink `up0` with its IPv6 address, 16 gateway shards of which this node has 0.
fn nat_conf(dp: &mut Datapath) {
    let c = SnatConf {
        flags: SnatConf::F_MASQ | SnatConf::F_HAVE6,
        uplink_ifindex: ifindex("up0"),
        node6: Addr::from(v6(NODE6)),
        masq_min: 61000,
        masq_max: 65535,
        gw_min: 1024,
        gw_shard_size: 4032,
        gw_shards: 16,
        shard: 0,
        ..SnatConf::default()
    };
    SnatConfMap::try_from(dp.map_mut(snat_conf::NAME))
        .unwrap()
        .set(c)
        .unwrap();
    SnatAddrsMap::try_from(dp.map_mut(snat_addrs::NAME))
        .unwrap()
        .insert(v6(NODE6).into(), 0)
        .unwrap();
}

/// A pod (`src`, on lo) sends a `proto` packet to the peer through the NAT; returns what it
/// sent and what left the uplink (IPv6 packets).
fn nat_out(dp: &Datapath, src: Ipv6Addr, proto: u8, sport: u16) -> (Vec<u8>, Vec<u8>) {
    let req = if proto == ICMPV6 { 128 } else { 0 };
    let sent = pkt::ipv6(MAC_A1, cfg().gw_mac, src, v6(PEER6), proto, sport, 7777, req);
    let out = dp.run(FROM_POD, &sent, LO, 0);
    assert_eq!(
        out.verdict, TC_ACT_REDIRECT,
        "proto {proto}: NATed out of the uplink"
    );
    (pkt::ip6_of(&sent).to_vec(), pkt::ip6_of(&out.packet).to_vec())
}

/// Every kind of error about `left` (as it left the node, from `nat`) comes back into the
/// pod `pod`, quoting `sent` exactly.
fn errors_come_back(dp: &Datapath, nat: Ipv6Addr, pod: Ipv6Addr, sent: &[u8], left: &[u8]) {
    assert_eq!(pkt::addrs6(left).0, nat, "left from the NAT address");
    for (typ, code, rest) in KINDS {
        let what = format!("proto {}, type {typ}", sent[6]);
        // The router's errors (too big, hop limit), the peer's own (unreachable, parameter).
        let from = if typ <= 1 || typ == 4 {
            v6(PEER6)
        } else {
            v6(ROUTER6)
        };
        let err = pkt::icmp6_error(from, nat, typ, code, rest, left);
        let out = dp.run(FROM_UPLINK, &pkt::frame6(UPLINK_MAC, ROUTER_MAC, &err), LO, 0);
        assert_eq!(out.verdict, TC_ACT_REDIRECT, "{what}: into the pod");
        assert_eq!(&out.packet[0..6], &MAC_A1, "{what}: addressed to the pod");
        let ip = pkt::ip6_of(&out.packet);
        assert_eq!(pkt::addrs6(ip), (from, pod), "{what}: outer, to the pod");
        assert_eq!(&ip[40..42], &[typ, code], "{what}: type and code kept");
        assert_eq!(&ip[44..48], &rest, "{what}: MTU / pointer kept");
        pkt::assert_icmp6_error_checksums(ip, true);
        assert_eq!(&ip[48..], sent, "{what}: the quote is the packet the pod sent");
    }
    // The minimal quote (IPv6 header and 8 bytes) names the flow as well.
    let err = pkt::icmp6_error(v6(ROUTER6), nat, 3, 0, [0; 4], &left[..48]);
    let out = dp.run(FROM_UPLINK, &pkt::frame6(UPLINK_MAC, ROUTER_MAC, &err), LO, 0);
    assert_eq!(out.verdict, TC_ACT_REDIRECT, "short quote into the pod");
    let ip = pkt::ip6_of(&out.packet);
    pkt::assert_icmp6_error_checksums(ip, false);
    assert_eq!(&ip[48..], &sent[..48], "short quote");
}

// Net-0 masquerade: a packet too big (PMTU discovery), hop limit exceeded (tracepath -6),
// port unreachable and parameter problem about a masqueraded TCP, UDP or echo flow reach the
// pod with its own address in the quote. An error about the node's own traffic passes to
// the host untouched.
#[test]
fn errors_about_masqueraded_flows_reach_the_pod() {
    in_routed_netns(|| {
        let mut dp = Datapath::load(&cfg());
        port(&mut dp, LO, 0);
        endpoint(&mut dp, 0, POD6, LO, MAC_A1);
        nat_conf(&mut dp);
        for (proto, sport) in [(TCP, 40000), (UDP, 40001), (ICMPV6, 77)] {
            let (sent, left) = nat_out(&dp, v6(POD6), proto, sport);
            let port = if proto == ICMPV6 {
                u16::from_be_bytes([left[44], left[45]])
            } else {
                u16::from_be_bytes([left[40], left[41]])
            };
            assert!((61000..=65535).contains(&port), "a masquerade port ({port})");
            errors_come_back(&dp, v6(NODE6), v6(POD6), &sent, &left);
        }
        assert_eq!(total_drops(&dp), 0);

        let own = pkt::ipv6(UPLINK_MAC, ROUTER_MAC, v6(NODE6), v6(PEER6), UDP, 40000, 53, 0);
        let err = pkt::icmp6_error(v6(ROUTER6), v6(NODE6), 2, 0, [0, 0, 5, 0], pkt::ip6_of(&own));
        let frame = pkt::frame6(UPLINK_MAC, ROUTER_MAC, &err);
        let out = dp.run(FROM_UPLINK, &frame, LO, 0);
        assert_eq!((out.verdict, &out.packet), (TC_ACT_OK, &frame), "the node's own");
    });
}

// The VPC gateway: the same errors about a flow NATed to the VPC's IPv6 NAT address reach
// the VPC pod; one about no flow of the address is dropped (the address is the VPC's, not
// the node's).
#[test]
fn errors_about_gateway_flows_reach_the_vpc_pod() {
    in_routed_netns(|| {
        let mut dp = Datapath::load(&cfg());
        vpc_pod(&mut dp, VPC_A, VPC_IP6, MAC_A1);
        nat_conf(&mut dp);
        SnatAddrsMap::try_from(dp.map_mut(snat_addrs::NAME))
            .unwrap()
            .insert(v6(NAT6).into(), VPC_A)
            .unwrap();
        SnatGwsMap::try_from(dp.map_mut(snat_gws::NAME))
            .unwrap()
            .upsert(VPC_A, (None, Some(v6(NAT6))))
            .unwrap();
        for (proto, sport) in [(TCP, 40000), (UDP, 40001), (ICMPV6, 77)] {
            let (sent, left) = nat_out(&dp, v6(VPC_IP6), proto, sport);
            errors_come_back(&dp, v6(NAT6), v6(VPC_IP6), &sent, &left);
        }
        assert_eq!(total_drops(&dp), 0);

        let stray = pkt::ipv6(UPLINK_MAC, ROUTER_MAC, v6(NAT6), v6(PEER6), UDP, 1500, 53, 0);
        let err = pkt::icmp6_error(v6(ROUTER6), v6(NAT6), 2, 0, [0, 0, 5, 0], pkt::ip6_of(&stray));
        let out = dp.run(FROM_UPLINK, &pkt::frame6(UPLINK_MAC, ROUTER_MAC, &err), LO, 0);
        assert_dropped(&dp, out.verdict, DropReason::SnatNoCt);
    });
}
