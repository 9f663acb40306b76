//! `externalTrafficPolicy: Cluster` from outside the cluster (`lib/lb_snat.h`) through
//! `BPF_PROG_TEST_RUN` at `sdn_from_uplink`: a client outside reaches a NodePort of this
//! node whose backend is on another node; the flow leaves NATed to this node's uplink
//! address (a port of the masquerade range) towards the backend, the backend's reply comes
//! back to that address and leaves to the client from the NodePort; a backend of this node
//! keeps the client's address. Both families. Needs root; fails (never skips) without it.

mod common;

use std::net::IpAddr;

use common::doors::*;
use common::fixtures::*;
use common::lb::frontend;
use common::pkt::{self, TCP, UDP};
use common::{Datapath, LO, TC_ACT_OK, TC_ACT_REDIRECT};
use cozyplane_bpf::abi::{Addr, LB_NET_EXTERNAL, SnatConf};
use cozyplane_bpf::maps::{
    lb_stats::{self, LbStatsMap},
    snat_conf::{self, SnatConfMap},
};

const NODE6: &str = "2001:db8:ff::1";
const CLIENT4: &str = "198.51.100.7";
const CLIENT6: &str = "2001:db8:77::7";
/// Net-0 pods of another node (192.0.2.2), and one of this node.
const REMOTE4: &str = "10.244.2.5";
const REMOTE6: &str = "fd44:2::5";
const LOCAL4: &str = "10.244.1.5";
/// A host-network endpoint: another node's own address.
const OTHER_NODE4: &str = "192.0.2.3";
const NODE_PORT: u16 = 30080;
const MASQ: (u16, u16) = (61000, 61003);

/// This node in [`in_routed_netns`]: its uplink addresses and the masquerade range in
/// `sdn_snat_conf`, the pod ranges cluster-internal, [`REMOTE4`]/[`REMOTE6`] on the node
/// 192.0.2.2 and [`LOCAL4`] on this one.
fn node() -> Datapath {
    let mut dp = Datapath::load(&cfg());
    let c = SnatConf {
        flags: SnatConf::F_MASQ | SnatConf::F_HAVE4 | SnatConf::F_HAVE6,
        uplink_ifindex: ifindex("up0"),
        node4: Addr::from(v4(NODE4)),
        node6: Addr::from(NODE6.parse::<std::net::Ipv6Addr>().unwrap()),
        masq_min: MASQ.0,
        masq_max: MASQ.1,
        ..SnatConf::default()
    };
    SnatConfMap::try_from(dp.map_mut(snat_conf::NAME))
        .unwrap()
        .set(c)
        .unwrap();
    internal_range(&mut dp, 0, "10.244.0.0/16");
    internal_range(&mut dp, 0, "fd44::/16");
    remote(&mut dp, 0, REMOTE4, "192.0.2.2");
    remote(&mut dp, 0, REMOTE6, "192.0.2.2");
    port(&mut dp, LO, 0);
    endpoint(&mut dp, 0, LOCAL4, LO, [0x0a, 0x50, 10, 244, 1, 5]);
    dp
}

fn packet(s: &str, sport: u16, d: &str, dport: u16, proto: u8) -> Vec<u8> {
    match (ip(s), ip(d)) {
        (IpAddr::V4(s4), IpAddr::V4(d4)) => pkt::ipv4(ROUTER_MAC, UPLINK_MAC, s4, d4, proto, sport, dport, 0),
        (IpAddr::V6(s6), IpAddr::V6(d6)) => pkt::ipv6(ROUTER_MAC, UPLINK_MAC, s6, d6, proto, sport, dport, 0),
        _ => unreachable!(),
    }
}

/// A run of `sdn_from_uplink`: its verdict and the packet's `(src, sport, dst, dport)`, its
/// checksums verified.
fn uplink(dp: &Datapath, p: &[u8]) -> (u32, (IpAddr, u16, IpAddr, u16)) {
    let out = dp.run(FROM_UPLINK, p, LO, 0);
    let q = if out.packet[12..14] == [0x08, 0x00] {
        pkt::assert_v4_checksums(&out.packet);
        let q = pkt::parse_v4(&out.packet);
        (q.src.into(), q.sport, q.dst.into(), q.dport)
    } else {
        pkt::assert_v6_checksums(&out.packet);
        let q = pkt::parse_v6(&out.packet);
        (q.src.into(), q.sport, q.dst.into(), q.dport)
    };
    (out.verdict, q)
}

fn snat_count(dp: &Datapath) -> u64 {
    LbStatsMap::try_from(dp.map(lb_stats::NAME))
        .unwrap()
        .get()
        .unwrap()
        .snat
}

// The NodePort's flow to a pod of another node: to the pod, from this node's address at a
// masquerade port (encapsulated: redirected to the tunnel device); the pod's answer to that
// port: to the client, from the NodePort (routed out of the uplink). The flow's next packet
// keeps its port; a second client gets another.
#[test]
fn a_node_port_from_outside_reaches_another_nodes_backend_from_this_nodes_address() {
    in_routed_netns(|| {
        let mut dp = node();
        for (i, (node, client, backend, proto)) in [
            (NODE4, CLIENT4, REMOTE4, TCP),
            (NODE6, CLIENT6, REMOTE6, TCP),
            (NODE4, CLIENT4, REMOTE4, UDP),
        ]
        .into_iter()
        .enumerate()
        {
            let id = i as u32 + 1;
            frontend(
                &mut dp,
                LB_NET_EXTERNAL,
                id,
                (node, NODE_PORT, proto),
                &[(id, backend, 8080)],
            );
            let (v, (src, nat_port, dst, dport)) =
                uplink(&dp, &packet(client, 40000, node, NODE_PORT, proto));
            assert_eq!(
                v, TC_ACT_REDIRECT,
                "{client} -> {node}:{NODE_PORT}/{proto}: sent to the backend's node"
            );
            assert_eq!(
                (src, dst, dport),
                (ip(node), ip(backend), 8080),
                "NATed to this node, DNATed to the pod"
            );
            assert!(
                (MASQ.0..=MASQ.1).contains(&nat_port),
                "port {nat_port} of the masquerade range"
            );

            let again = uplink(&dp, &packet(client, 40000, node, NODE_PORT, proto));
            assert_eq!(again.1.1, nat_port, "the flow keeps its NAT port");
            let other = uplink(&dp, &packet(client, 40001, node, NODE_PORT, proto));
            assert_ne!(other.1.1, nat_port, "another flow, another port");

            let (v, back) = uplink(&dp, &packet(backend, 8080, node, nat_port, proto));
            assert_eq!(v, TC_ACT_REDIRECT, "the reply leaves by the uplink");
            assert_eq!(
                back,
                (ip(node), NODE_PORT, ip(client), 40000),
                "from the NodePort to the client"
            );
        }
        assert_eq!(
            snat_count(&dp),
            9,
            "every packet to another node's backend counted"
        );
        assert_eq!(total_drops(&dp), 0);
    });
}

// A host-network endpoint on another node is reached the same way, routed out of the uplink
// rather than encapsulated; a backend of this node is handed to the host with the client's
// address kept (nothing NATed, nothing counted).
#[test]
fn a_host_network_backend_elsewhere_is_routed_and_a_local_one_keeps_the_client() {
    in_routed_netns(|| {
        let mut dp = node();
        frontend(
            &mut dp,
            LB_NET_EXTERNAL,
            1,
            (NODE4, NODE_PORT, TCP),
            &[(1, OTHER_NODE4, 10250)],
        );
        let (v, (src, _, dst, dport)) = uplink(&dp, &packet(CLIENT4, 40000, NODE4, NODE_PORT, TCP));
        assert_eq!(v, TC_ACT_REDIRECT);
        assert_eq!((src, dst, dport), (ip(NODE4), ip(OTHER_NODE4), 10250));
        assert_eq!(snat_count(&dp), 1);

        frontend(
            &mut dp,
            LB_NET_EXTERNAL,
            2,
            (NODE4, NODE_PORT + 1, TCP),
            &[(2, LOCAL4, 8080)],
        );
        let (v, q) = uplink(&dp, &packet(CLIENT4, 40000, NODE4, NODE_PORT + 1, TCP));
        assert_eq!(v, TC_ACT_OK, "handed to the host, which routes it into the pod");
        assert_eq!(
            q,
            (ip(CLIENT4), 40000, ip(LOCAL4), 8080),
            "the client's address kept"
        );
        assert_eq!(snat_count(&dp), 1, "nothing NATed");

        // A reply to a port no flow was NATed to is none of this path's business.
        let (v, q) = uplink(&dp, &packet(REMOTE4, 8080, NODE4, 61002, TCP));
        assert_eq!(v, TC_ACT_OK);
        assert_eq!(q.2, ip(NODE4));
        assert_eq!(total_drops(&dp), 0);
    });
}
