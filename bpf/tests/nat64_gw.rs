//! NAT64 at the VPC gateway (`lib/egress.h`, `lib/xlat.h`) through `BPF_PROG_TEST_RUN`: a
//! v6-only VPC pod's packet to `64:ff9b::<IPv4 host>` leaves the uplink as IPv4 from the
//! VPC's IPv4 NAT address, and the host's reply comes back into the pod as IPv6 from the
//! host's `64:ff9b::` form; TCP, UDP and ping, checksums valid both ways. Without an IPv4
//! NAT address the gateway does not translate. Needs root; the NATed packets leave by
//! `bpf_fib_lookup`, so each test runs in a namespace with a route out.

mod common;

use std::net::Ipv6Addr;

use common::doors::*;
use common::fixtures::*;
use common::pkt::{self, ICMP, ICMPV6, TCP, UDP};
use common::{Datapath, LO, TC_ACT_REDIRECT};
use cozyplane_bpf::DropReason;

const PEER4: &str = "198.51.100.2";
const PEER64: &str = "64:ff9b::c633:6402";
const NAT4: &str = "203.0.113.1";
const POD6: &str = "fd00:6::5";
/// The gateway shard: ports 1024..=1087.
const SHARD: (u16, u16) = (1024, 64);

fn v6(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

/// A v6-only pod of VPC A on lo; VPC A's gateway NATs to [`NAT4`] (IPv4 only).
fn setup() -> Datapath {
    let mut dp = Datapath::load(&cfg());
    vpc_pod(&mut dp, VPC_A, POD6, MAC_A1);
    snat_ipv4(&mut dp, (61000, 61003), (SHARD.0, SHARD.1, 1), &[(VPC_A, NAT4)]);
    dp
}

#[test]
fn a_v6_only_pod_reaches_an_ipv4_host_through_the_gateways_nat64() {
    in_routed_netns(|| {
        let dp = setup();
        for (proto, sport, dport) in [(TCP, 40000, 80), (UDP, 40001, 53), (ICMPV6, 77, 77)] {
            let req = if proto == ICMPV6 { 128 } else { 0 };
            let sent = pkt::ipv6(
                MAC_A1,
                cfg().gw_mac,
                v6(POD6),
                v6(PEER64),
                proto,
                sport,
                dport,
                req,
            );
            let out = dp.run(FROM_POD, &sent, LO, 0);
            assert_eq!(out.verdict, TC_ACT_REDIRECT, "proto {proto}: out of the uplink");
            assert_eq!(out.packet.len(), sent.len() - 20, "proto {proto}: 20 bytes less");
            pkt::assert_v4_checksums(&out.packet);
            let p = pkt::parse_v4(&out.packet);
            let want = if proto == ICMPV6 { ICMP } else { proto };
            assert_eq!(
                (p.src, p.dst, p.proto),
                (v4(NAT4), v4(PEER4), want),
                "proto {proto}"
            );
            assert!(
                (SHARD.0..SHARD.0 + SHARD.1).contains(&p.sport),
                "NAT port {}",
                p.sport
            );
            if proto == ICMPV6 {
                assert_eq!(out.packet[34], 8, "echo request");
            } else {
                assert_eq!(p.dport, dport);
            }
            let nat_port = p.sport;

            let (rs, rd, rep) = if proto == ICMPV6 {
                (nat_port, nat_port, 0)
            } else {
                (dport, nat_port, 0)
            };
            let reply = pkt::ipv4(ROUTER_MAC, UPLINK_MAC, v4(PEER4), v4(NAT4), want, rs, rd, rep);
            let back = dp.run(FROM_UPLINK, &reply, LO, 0);
            assert_eq!(back.verdict, TC_ACT_REDIRECT, "proto {proto}: into the pod");
            assert_eq!(back.packet.len(), reply.len() + 20);
            assert_eq!(&back.packet[0..6], &MAC_A1, "addressed to the pod");
            pkt::assert_v6_checksums(&back.packet);
            let r = pkt::parse_v6(&back.packet);
            assert_eq!(
                (r.src, r.dst, r.proto),
                (v6(PEER64), v6(POD6), proto),
                "proto {proto}"
            );
            assert_eq!(r.dport, sport, "to the pod's port");
            if proto == ICMPV6 {
                assert_eq!(back.packet[54], 129, "ICMPv6 echo reply");
            }
        }
        assert_eq!(total_drops(&dp), 0);
    });
}

// A gateway without an IPv4 NAT address does not translate: the VPC has no door for it.
#[test]
fn without_an_ipv4_nat_address_nothing_is_translated() {
    in_routed_netns(|| {
        let mut dp = Datapath::load(&cfg());
        vpc_pod(&mut dp, VPC_A, POD6, MAC_A1);
        snat_ipv4(&mut dp, (61000, 61003), (SHARD.0, SHARD.1, 1), &[]);
        let sent = pkt::ipv6(MAC_A1, cfg().gw_mac, v6(POD6), v6(PEER64), TCP, 40000, 80, 0);
        let out = dp.run(FROM_POD, &sent, LO, 0);
        assert_dropped(&dp, out.verdict, DropReason::NoGateway);
    });
}
