//! The SNAT engine (`lib/snat.h`) follows TCP's life, through `BPF_PROG_TEST_RUN`: a closed
//! connection's NAT port goes to the next flow at once, an open one's never, a new SYN of
//! a closed connection's 5-tuple reopens it on its port, and a TCP packet that is not a SYN
//! never gets a port. The VPC gateway's NAT with a shard of four ports, so that the span is
//! full after four flows; the same engine serves net-0 masquerade (checked for the
//! non-SYN rule). Needs root; fails (never skips) without it.

mod common;

use common::doors::*;
use common::fixtures::*;
use common::pkt::{self, TCP};
use common::{Datapath, LO, TC_ACT_REDIRECT};
use cozyplane_bpf::DropReason;
use cozyplane_bpf::maps::snat_rev::{self, SnatRevMap};

const PEER4: &str = "198.51.100.2";
const PEER_PORT: u16 = 7070;
const NAT4: &str = "203.0.113.1";
const VPC_IP: &str = "10.30.0.5";
const POD4: &str = "10.244.1.20";
/// The gateway shard: ports 1024..=1027.
const SHARD: (u16, u16) = (1024, 4);

const SYN: u8 = 0x02;
const FIN_ACK: u8 = 0x11;
const RST: u8 = 0x04;
const ACK: u8 = 0x10;
const SYN_ACK: u8 = 0x12;

/// Masquerade on (to [`NODE4`], ports 61000..=61003) and one gateway shard of
/// [`SHARD`]; VPC A's gateway NATs to [`NAT4`], and its pod [`VPC_IP`] is on lo.
fn setup() -> Datapath {
    let mut dp = Datapath::load(&cfg());
    vpc_pod(&mut dp, VPC_A, VPC_IP, MAC_A1);
    snat_ipv4(&mut dp, (61000, 61003), (SHARD.0, SHARD.1, 1), &[(VPC_A, NAT4)]);
    dp
}

/// `frame` (Ethernet/IPv4/TCP) with the TCP flags `flags`, its checksum recomputed.
fn with_flags(mut frame: Vec<u8>, flags: u8) -> Vec<u8> {
    frame[14 + 20 + 13] = flags;
    frame[14 + 20 + 16..14 + 20 + 18].fill(0);
    let (src, dst) = pkt::addrs(&frame[14..]);
    let c = pkt::l4_csum_v4(src, dst, TCP, &frame[34..]);
    frame[50..52].copy_from_slice(&c.to_be_bytes());
    frame
}

/// The pod `src` sends a TCP segment (`flags`) from `sport` to the peer; the run's verdict
/// and, if it left, its source port.
fn out(dp: &Datapath, src: &str, sport: u16, flags: u8) -> (u32, Option<u16>) {
    let f = pkt::ipv4(MAC_A1, cfg().gw_mac, v4(src), v4(PEER4), TCP, sport, PEER_PORT, 0);
    let r = dp.run(FROM_POD, &with_flags(f, flags), LO, 0);
    let port = (r.verdict == TC_ACT_REDIRECT).then(|| {
        let ip = pkt::ip_of(&r.packet);
        assert_eq!(pkt::addrs(ip).0.to_string(), NAT4, "left from the NAT address");
        pkt::assert_v4_checksums(&r.packet);
        u16::from_be_bytes([ip[20], ip[21]])
    });
    (r.verdict, port)
}

/// The peer answers the NAT port `port` with `flags`: it must reach the VPC pod's `sport`.
#[track_caller]
fn back(dp: &Datapath, port: u16, sport: u16, flags: u8) {
    let f = pkt::ipv4(
        ROUTER_MAC,
        UPLINK_MAC,
        v4(PEER4),
        v4(NAT4),
        TCP,
        PEER_PORT,
        port,
        0,
    );
    let r = dp.run(FROM_UPLINK, &with_flags(f, flags), LO, 0);
    assert_eq!(r.verdict, TC_ACT_REDIRECT, "the reply to {port} reaches the pod");
    let ip = pkt::ip_of(&r.packet);
    assert_eq!(pkt::addrs(ip), (v4(PEER4), v4(VPC_IP)));
    assert_eq!(u16::from_be_bytes([ip[22], ip[23]]), sport, "to the pod's port");
}

/// A SYN from `sport` that must get a port of the shard; the port.
#[track_caller]
fn open(dp: &Datapath, sport: u16) -> u16 {
    let (v, port) = out(dp, VPC_IP, sport, SYN);
    let port = port.unwrap_or_else(|| panic!("SYN from {sport}: verdict {v}, no port"));
    assert!(
        (SHARD.0..SHARD.0 + SHARD.1).contains(&port),
        "{port} in the shard"
    );
    back(dp, port, sport, SYN_ACK);
    assert_eq!(out(dp, VPC_IP, sport, ACK).1, Some(port), "the handshake's ACK");
    port
}

/// Flows of the reverse map (claim keys would show here too: none may be left).
fn rev_entries(dp: &Datapath) -> usize {
    SnatRevMap::try_from(dp.map(snat_rev::NAME))
        .unwrap()
        .entries()
        .unwrap()
        .len()
}

// Four open connections fill the shard: a fifth SYN finds no port. Then one closes by an
// RST, one by the pod's FIN first, one by the peer's FIN first: each time the next SYN
// gets the closed one's port, never the port of the connection still open (which only
// half-closed). A new SYN of a closed connection's own 5-tuple reopens it on its port.
#[test]
fn closed_connections_free_their_port_and_open_ones_never() {
    in_routed_netns(|| {
        let dp = setup();
        let ports: Vec<u16> = (0..4).map(|i| open(&dp, 40000 + i)).collect();
        let mut uniq = ports.clone();
        uniq.sort_unstable();
        uniq.dedup();
        assert_eq!(uniq.len(), 4, "four flows, four ports: {ports:?}");
        let (v, _) = out(&dp, VPC_IP, 40100, SYN);
        assert_dropped(&dp, v, DropReason::SnatFull);

        // The connection still open half-closes: its port stays its own throughout.
        assert_eq!(out(&dp, VPC_IP, 40003, FIN_ACK).1, Some(ports[3]));

        // An RST from the pod.
        assert_eq!(out(&dp, VPC_IP, 40000, RST).1, Some(ports[0]));
        assert_eq!(open(&dp, 40101), ports[0], "the reset connection's port");

        // The pod closes first: its FIN, the peer's FIN, the pod's last ACK.
        assert_eq!(out(&dp, VPC_IP, 40001, FIN_ACK).1, Some(ports[1]));
        back(&dp, ports[1], 40001, FIN_ACK);
        let (v, _) = out(&dp, VPC_IP, 40102, SYN);
        assert_eq!(v, common::TC_ACT_SHOT, "no port before the last ACK has left");
        assert_eq!(out(&dp, VPC_IP, 40001, ACK).1, Some(ports[1]), "the last ACK");
        assert_eq!(open(&dp, 40103), ports[1], "the closed connection's port");

        // The peer closes first: its FIN, the pod's FIN, the peer's last ACK.
        back(&dp, ports[2], 40002, FIN_ACK);
        assert_eq!(out(&dp, VPC_IP, 40002, FIN_ACK).1, Some(ports[2]));
        back(&dp, ports[2], 40002, ACK);
        assert_eq!(open(&dp, 40104), ports[2], "the closed connection's port");

        // Full again: the half-closed connection keeps its port.
        let (v, _) = out(&dp, VPC_IP, 40105, SYN);
        assert_eq!(v, common::TC_ACT_SHOT);
        assert_eq!(drops_of(&dp, DropReason::SnatFull), 3);

        // The 5-tuple of a closed connection opens again, on its port.
        assert_eq!(out(&dp, VPC_IP, 40101, RST).1, Some(ports[0]));
        assert_eq!(open(&dp, 40101), ports[0], "reopened on its own port");
        assert_eq!(rev_entries(&dp), 4, "four flows, no claim left behind");
        assert_eq!(total_drops(&dp), 3, "only the three SYNs of a full shard");
    });
}

// A TCP packet other than a SYN without a flow (an ACK, a FIN, an RST of a connection the
// NAT never saw) is dropped and counted: it takes no port, through the gateway or the
// masquerade.
#[test]
fn tcp_without_a_syn_never_gets_a_port() {
    in_routed_netns(|| {
        let mut dp = setup();
        for (i, flags) in [ACK, FIN_ACK, RST, SYN_ACK].into_iter().enumerate() {
            let (v, _) = out(&dp, VPC_IP, 41000, flags);
            assert_eq!(v, common::TC_ACT_SHOT, "flags {flags:#x}");
            assert_eq!(drops_of(&dp, DropReason::SnatTcpNoFlow), i as u64 + 1);
        }
        assert_eq!(rev_entries(&dp), 0, "no port taken");

        port(&mut dp, LO, 0);
        endpoint(&mut dp, 0, POD4, LO, MAC_A1);
        let f = pkt::ipv4(
            MAC_A1,
            cfg().gw_mac,
            v4(POD4),
            v4(PEER4),
            TCP,
            41001,
            PEER_PORT,
            0,
        );
        let r = dp.run(FROM_POD, &with_flags(f.clone(), ACK), LO, 0);
        assert_eq!(
            r.verdict,
            common::TC_ACT_SHOT,
            "masquerade: an ACK without a flow"
        );
        assert_eq!(drops_of(&dp, DropReason::SnatTcpNoFlow), 5);
        let r = dp.run(FROM_POD, &f, LO, 0);
        assert_eq!(r.verdict, TC_ACT_REDIRECT, "masquerade: the SYN gets a port");
        let ip = pkt::ip_of(&r.packet);
        assert_eq!(pkt::addrs(ip).0, v4(NODE4));
        assert!((61000..=61003).contains(&u16::from_be_bytes([ip[20], ip[21]])));
        assert_eq!(rev_entries(&dp), 1);
    });
}
