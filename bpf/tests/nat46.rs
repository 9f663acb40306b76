//! NAT46 in the fabric bridge (`lib/xlat.h`) through `BPF_PROG_TEST_RUN`: a v6-only VPC
//! pod's v4 fabric address (its `status.podIP` on a v4 default network) takes TCP, UDP and
//! ping from a v4 client as IPv6 from `fe80::1`, and the pod's IPv6 reply leaves as IPv4 to
//! the client, checksums valid both ways; what cannot be translated is dropped and counted
//! as `DROP_XLAT`. Needs root.

mod common;

use std::net::Ipv6Addr;

use common::fixtures::*;
use common::pkt::{self, ICMP, ICMPV6, TCP, UDP};
use common::{Datapath, LO, TC_ACT_OK};
use cozyplane_bpf::DropReason;

const MAC_HOST: [u8; 6] = [0x0a, 0, 0, 0, 0, 0xee];
const CLIENT: &str = "10.244.0.1";
const FABRIC: &str = "10.244.1.5";
const VPC_IP: &str = "fd00:10::5";

fn v6(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

/// A datapath with one v6-only VPC pod whose v4 fabric address is bridged to it.
fn translated_pod() -> Datapath {
    let mut dp = Datapath::load(&cfg());
    vpc_pod(&mut dp, VPC_A, VPC_IP, MAC_A1);
    bridge(&mut dp, FABRIC, VPC_A, VPC_IP);
    dp
}

fn probe(proto: u8, sport: u16, dport: u16, icmp_type: u8) -> Vec<u8> {
    pkt::ipv4(
        MAC_HOST,
        MAC_A1,
        v4(CLIENT),
        v4(FABRIC),
        proto,
        sport,
        dport,
        icmp_type,
    )
}

#[test]
fn a_v4_client_reaches_a_v6_only_pod_through_its_fabric_address_and_back() {
    let dp = translated_pod();
    let (client, fabric, vpc, gw) = (v4(CLIENT), v4(FABRIC), v6(VPC_IP), v6("fe80::1"));

    for (proto, cport, pport, req) in [(TCP, 40000, 8080, 0), (UDP, 40001, 53, 0), (ICMP, 77, 77, 8)] {
        let inn = dp.run(TO_POD, &probe(proto, cport, pport, req), LO, 0);
        assert_eq!(inn.verdict, TC_ACT_OK, "proto {proto}");
        assert_eq!(
            inn.packet.len(),
            probe(proto, cport, pport, req).len() + 20,
            "proto {proto}"
        );
        pkt::assert_v6_checksums(&inn.packet);
        let p = pkt::parse_v6(&inn.packet);
        assert_eq!((p.src, p.dst), (gw, vpc), "proto {proto}");
        assert_eq!(p.dst_mac, MAC_A1);
        let want_proto = if proto == ICMP { ICMPV6 } else { proto };
        assert_eq!(p.proto, want_proto);
        if proto == ICMP {
            assert_eq!(inn.packet[54], 128, "echo request becomes ICMPv6 echo request");
        } else {
            assert_eq!(p.dport, pport);
        }
        assert_eq!(inn.packet[14 + 7], 64, "hop limit from the TTL");
        assert!((32768..61000).contains(&p.sport), "gateway port {}", p.sport);
        let gw_port = p.sport;

        let (rs, rd, rep) = if proto == ICMP {
            (gw_port, gw_port, 129)
        } else {
            (pport, gw_port, 0)
        };
        let reply = pkt::ipv6(MAC_A1, cfg().gw_mac, vpc, gw, want_proto, rs, rd, rep);
        let out = dp.run(FROM_POD, &reply, LO, 0);
        assert_eq!(out.verdict, TC_ACT_OK, "proto {proto}: reply to the host stack");
        assert_eq!(out.packet.len(), reply.len() - 20);
        pkt::assert_v4_checksums(&out.packet);
        let r = pkt::parse_v4(&out.packet);
        assert_eq!((r.src, r.dst, r.proto), (fabric, client, proto), "proto {proto}");
        assert_eq!(r.dport, cport, "proto {proto}");
        if proto == ICMP {
            assert_eq!(out.packet[34], 0, "ICMPv6 echo reply becomes echo reply");
        } else {
            assert_eq!(r.sport, pport);
        }
    }
    assert_eq!(total_drops(&dp), 0);
}

// What the bridge cannot translate is counted, never passed half done.
#[test]
fn what_cannot_be_translated_is_dropped_and_counted() {
    // UDP without a checksum: IPv6 requires one.
    let mut udp0 = probe(UDP, 40002, 53, 0);
    udp0[14 + 20 + 6..14 + 20 + 8].copy_from_slice(&[0, 0]);

    // A first fragment (MF set): fragments are not translated.
    let mut frag = probe(UDP, 40003, 53, 0);
    frag[14 + 6] |= 0x20;
    refresh_ip4_check(&mut frag, 20);

    // An ICMP error to the fabric address: errors about translated flows are not translated.
    let quote = pkt::ip4_raw(v4(FABRIC), v4(CLIENT), UDP, 9, 0, &[0; 8]);
    let err = pkt::frame(
        MAC_A1,
        MAC_HOST,
        &pkt::icmp4_error(v4(CLIENT), v4(FABRIC), 3, 3, [0; 4], &quote),
    );

    // An IPv4 header with options (IHL 6, one word of NOPs and an end).
    let mut opts = probe(TCP, 40004, 80, 0);
    opts.splice(34..34, [1u8, 1, 1, 0]);
    opts[14] = 0x46;
    let tot = u16::from_be_bytes([opts[16], opts[17]]) + 4;
    opts[16..18].copy_from_slice(&tot.to_be_bytes());
    refresh_ip4_check(&mut opts, 24);

    for (what, packet) in [
        ("udp0", udp0),
        ("fragment", frag),
        ("icmp error", err),
        ("options", opts),
    ] {
        let dp = translated_pod();
        let out = dp.run(TO_POD, &packet, LO, 0);
        eprintln!("{what}");
        assert_dropped(&dp, out.verdict, DropReason::Xlat);
        // The flow state is not what stops the next one: a well-formed probe still passes.
        let ok = dp.run(TO_POD, &probe(TCP, 40005, 80, 0), LO, 0);
        assert_eq!(ok.verdict, TC_ACT_OK, "{what}");
        assert_eq!(pkt::parse_v6(&ok.packet).dst, v6(VPC_IP));
    }
}

/// Recomputes the IPv4 header checksum of `frame` (header `hlen` bytes long).
fn refresh_ip4_check(frame: &mut [u8], hlen: usize) {
    frame[24..26].copy_from_slice(&[0, 0]);
    let c = pkt::csum(&frame[14..14 + hlen]);
    frame[24..26].copy_from_slice(&c.to_be_bytes());
}
