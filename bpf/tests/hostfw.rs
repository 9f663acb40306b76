//! HostFirewall in the datapath (`lib/hostfw.h`) through `BPF_PROG_TEST_RUN`: generated
//! HostFirewall sets are compiled by the `policy` crate for one node, written through the map
//! wrappers, and every probe — into the node through `sdn_from_uplink`, out of it through
//! `sdn_host_out` — gets the verdict `policy::verdict::hf()` gives, both families. Then the
//! exemptions (neighbour discovery, link-local, the tunnel port from a known node, an ICMP
//! error of a known flow), replies by state, traffic that is not the node's, and a rule's
//! removal reaching an established flow. Needs root; fails (never skips) without it.

mod common;

use std::net::IpAddr;

use common::fixtures::{cfg, drops_of, ip};
use common::pkt::{self, ICMPV6, UDP};
use common::policy::{self as pol, ACK, SYN};
use common::{Datapath, LO, TC_ACT_OK, TC_ACT_SHOT};
use cozyplane_apis::v1alpha1::{
    HostFirewall, HostFirewallEgressRule, HostFirewallIngressRule, HostFirewallPeer, HostFirewallPort,
    HostFirewallSpec,
};
use cozyplane_bpf::abi::PolState;
use cozyplane_bpf::maps::nodes::{self, NodesMap};
use cozyplane_bpf::maps::pol_state::{self, PolStateMap};
use cozyplane_bpf::{DatapathConfig, DropReason};
use cozyplane_policy::hf::{HfCompiler, NodeInfo};
use cozyplane_policy::model::{Diff, Tables};
use cozyplane_policy::verdict;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use rand::rngs::StdRng;
use rand::seq::IndexedRandom as _;
use rand::{Rng as _, SeedableRng as _};

const IN: &str = "sdn_from_uplink";
const OUT: &str = "sdn_host_out";
/// Generated firewall sets of the differential test.
const SETS: u64 = 30;

const NODE4: &str = "10.0.0.1";
const NODE6: &str = "fd00::1";
/// This node's link-local address, listed among its addresses so that only the exemption
/// (not the subject test) lets its traffic through.
const NODE_LL: &str = "fe80::1";
/// Another node of the cluster (`sdn_nodes`).
const PEER_NODE4: &str = "10.0.0.2";
const PEER_NODE6: &str = "fd00::2";

const MAC_UP: [u8; 6] = [0x0a, 0, 0, 0, 0, 0x01];
const MAC_GW: [u8; 6] = [0x0a, 0, 0, 0, 0, 0xfe];

fn node_info() -> NodeInfo {
    NodeInfo {
        name: "n1".into(),
        labels: [("role".to_string(), "worker".to_string())].into(),
        addresses: vec![ip(NODE4), ip(NODE6), ip(NODE_LL)],
    }
}

/// A datapath of this node: the other node known in `sdn_nodes`.
fn node() -> Datapath {
    node_with(&cfg())
}

/// [`node`] loaded with `c`.
fn node_with(c: &DatapathConfig) -> Datapath {
    let mut dp = Datapath::load(c);
    let mut n = NodesMap::try_from(dp.map_mut(nodes::NAME)).unwrap();
    n.insert(ip(PEER_NODE4)).unwrap();
    n.insert(ip(PEER_NODE6)).unwrap();
    dp
}

/// Writes the change from `old` to `new` and the armed directions, as the agent does, and
/// bumps the generation when it narrows.
fn write(dp: &mut Datapath, old: &Tables, new: &Tables) {
    let d = Diff::between(old, new);
    pol::apply(dp, &d);
    let mut st = PolStateMap::try_from(dp.map_mut(pol_state::NAME)).unwrap();
    let s = st.get().unwrap();
    st.set(PolState {
        generation: s.generation,
        flags: new.state_flags,
    })
    .unwrap();
    if d.narrows() {
        pol::bump(dp);
    }
}

fn fw(
    name: &str,
    types: &[&str],
    ingress: Vec<HostFirewallIngressRule>,
    egress: Vec<HostFirewallEgressRule>,
) -> HostFirewall {
    HostFirewall {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: HostFirewallSpec {
            policy_types: types.iter().map(ToString::to_string).collect(),
            ingress,
            egress,
            ..Default::default()
        },
        status: None,
    }
}

fn hport(proto: &str, port: i32, end: i32) -> HostFirewallPort {
    HostFirewallPort {
        protocol: proto.into(),
        port,
        end_port: end,
    }
}

fn peer(cidr: &str, except: &[&str]) -> HostFirewallPeer {
    HostFirewallPeer {
        cidr: cidr.into(),
        except: except.iter().map(ToString::to_string).collect(),
    }
}

/// A compiler for this node holding `fws`.
fn compile(fws: &[HostFirewall]) -> HfCompiler {
    let mut c = HfCompiler::new(node_info());
    for f in fws {
        c.set_firewall(f);
    }
    c
}

/// A packet from `s`:`sp` to `d`:`dp` (TCP with `flags`, UDP, or ICMPv6 of type `flags`).
fn packet(s: IpAddr, d: IpAddr, proto: u8, sp: u16, dp: u16, flags: u8) -> Vec<u8> {
    match (proto, s, d) {
        (pkt::TCP, ..) => pol::tcp(MAC_GW, MAC_UP, s, d, sp, dp, flags),
        (_, IpAddr::V4(s4), IpAddr::V4(d4)) => pkt::ipv4(MAC_GW, MAC_UP, s4, d4, proto, sp, dp, flags),
        (_, IpAddr::V6(s6), IpAddr::V6(d6)) => pkt::ipv6(MAC_GW, MAC_UP, s6, d6, proto, sp, dp, flags),
        _ => panic!("mixed families {s} -> {d}"),
    }
}

/// Into the node through the uplink: passed (`TC_ACT_OK`) or dropped.
fn inbound(dp: &Datapath, frame: &[u8]) -> bool {
    let v = dp.run(IN, frame, LO, 0).verdict;
    assert!(v == TC_ACT_OK || v == TC_ACT_SHOT, "{IN}: verdict {v}");
    v == TC_ACT_OK
}

/// Out of the node (its own packet: no ingress device): passed or dropped.
fn outbound(dp: &Datapath, frame: &[u8]) -> bool {
    outbound_iif(dp, frame, 0)
}

fn outbound_iif(dp: &Datapath, frame: &[u8], iif: u32) -> bool {
    let v = dp.run_iif(OUT, frame, LO, iif, 0).verdict;
    assert!(v == TC_ACT_OK || v == TC_ACT_SHOT, "{OUT}: verdict {v}");
    v == TC_ACT_OK
}

const CIDRS4: &[(&str, &[&str])] = &[
    ("192.168.0.0/16", &["192.168.5.0/24"]),
    ("192.168.5.0/24", &[]),
    ("10.1.0.0/16", &[]),
    ("0.0.0.0/0", &["10.0.0.0/8"]),
];
const CIDRS6: &[(&str, &[&str])] = &[
    ("2001:db8::/32", &["2001:db8:1::/48"]),
    ("2001:db8:1::/48", &[]),
    ("::/0", &["fd00::/8"]),
];
const PORTS: &[(&str, i32, i32)] = &[
    ("TCP", 22, 0),
    ("TCP", 6443, 0),
    ("TCP", 8000, 8063),
    ("UDP", 53, 0),
    ("UDP", 0, 0),
    ("TCP", 0, 0),
    ("ICMP", 8, 0),
    ("ICMPv6", 128, 0),
    ("ICMP", 0, 0),
];
/// Probe peers: inside and outside every CIDR above, both families.
const PEERS: &[&str] = &[
    "192.168.1.5",
    "192.168.5.5",
    "10.1.2.3",
    "10.9.9.9",
    "8.8.8.8",
    "2001:db8::5",
    "2001:db8:1::5",
    "fd00::99",
    "2606:4700::1",
];
const PROBE_PORTS: &[u16] = &[22, 53, 6443, 8000, 8063, 8064, 9999];

fn random_peers(rng: &mut StdRng) -> Vec<HostFirewallPeer> {
    let n = rng.random_range(0..=2);
    (0..n)
        .map(|_| {
            let pool = if rng.random_bool(0.5) { CIDRS4 } else { CIDRS6 };
            let (c, e) = pool.choose(rng).unwrap();
            let except: &[&str] = if rng.random_bool(0.5) { e } else { &[] };
            peer(c, except)
        })
        .collect()
}

fn random_ports(rng: &mut StdRng) -> Vec<HostFirewallPort> {
    let n = rng.random_range(0..=2);
    let mut v: Vec<HostFirewallPort> = Vec::new();
    for _ in 0..n {
        let (p, a, b) = PORTS.choose(rng).unwrap();
        let hp = hport(p, *a, *b);
        if !v.contains(&hp) {
            v.push(hp);
        }
    }
    v
}

fn random_set(rng: &mut StdRng) -> Vec<HostFirewall> {
    let types: &[&[&str]] = &[&[], &["Ingress"], &["Egress"], &["Ingress", "Egress"]];
    (0..rng.random_range(1..=3))
        .map(|i| {
            let ingress = (0..rng.random_range(0..=3))
                .map(|_| HostFirewallIngressRule {
                    from: random_peers(rng),
                    ports: random_ports(rng),
                })
                .collect();
            let egress = (0..rng.random_range(0..=3))
                .map(|_| HostFirewallEgressRule {
                    to: random_peers(rng),
                    ports: random_ports(rng),
                })
                .collect();
            fw(&format!("fw{i}"), types.choose(rng).unwrap(), ingress, egress)
        })
        .collect()
}

/// Every probe of generated firewall sets, into and out of the node over TCP, UDP, ICMP and ICMPv6 echo and
/// both families, gets `verdict::hf()`'s answer from the programs; each probe is a fresh
/// flow (its own source port).
#[test]
fn generated_sets_match_the_verdict() {
    let mut dp = node();
    let mut rng = StdRng::seed_from_u64(0x4f17);
    let mut old = Tables::default();
    let (mut cases, mut denied, mut sport) = (0u64, 0u64, 1024u16);
    for set in 0..SETS {
        let c = compile(&random_set(&mut rng));
        let t = c.tables().clone();
        write(&mut dp, &old, &t);
        pol::clear_ct(&mut dp);
        for p in PEERS {
            let peer = ip(p);
            let me = if peer.is_ipv4() { ip(NODE4) } else { ip(NODE6) };
            for &proto in &[pkt::TCP, UDP] {
                for &port in PROBE_PORTS {
                    sport = sport.checked_add(1).unwrap_or(1024);
                    let want = verdict::hf(&t, peer, me, proto, port).allowed();
                    let got = inbound(&dp, &packet(peer, me, proto, sport, port, SYN));
                    assert_eq!(
                        got, want,
                        "set {set}: in {peer}:{sport} -> {me}:{port} proto {proto}"
                    );
                    let want_out = verdict::hf(&t, me, peer, proto, port).allowed();
                    let got_out = outbound(&dp, &packet(me, peer, proto, sport, port, SYN));
                    assert_eq!(
                        got_out, want_out,
                        "set {set}: out {me}:{sport} -> {peer}:{port} proto {proto}"
                    );
                    cases += 2;
                    denied += u64::from(!want) + u64::from(!want_out);
                }
            }
            // An echo request each way: the rule's "port" is the message type.
            let (icmp, echo) = if peer.is_ipv4() {
                (pkt::ICMP, 8u8)
            } else {
                (ICMPV6, 128)
            };
            sport = sport.checked_add(1).unwrap_or(1024);
            let port = u16::from(echo) << 8;
            let want = verdict::hf(&t, peer, me, icmp, port).allowed();
            let got = inbound(&dp, &packet(peer, me, icmp, sport, sport, echo));
            assert_eq!(got, want, "set {set}: echo in {peer} -> {me}");
            // Its own identifier: with the inbound one's, it would be that flow's echo.
            sport = sport.checked_add(1).unwrap_or(1024);
            let want_out = verdict::hf(&t, me, peer, icmp, port).allowed();
            let got_out = outbound(&dp, &packet(me, peer, icmp, sport, sport, echo));
            assert_eq!(got_out, want_out, "set {set}: echo out {me} -> {peer}");
            cases += 2;
            denied += u64::from(!want) + u64::from(!want_out);
        }
        old = t;
    }
    // The sets must exercise both answers, or the comparison proves little.
    assert!(
        denied > cases / 20 && denied < cases * 19 / 20,
        "{denied} of {cases} denied"
    );
    assert!(drops_of(&dp, DropReason::PolHfIngress) > 0);
    assert!(drops_of(&dp, DropReason::PolHfEgress) > 0);
    eprintln!("{cases} probes over {SETS} sets, {denied} denied");
}

/// Both directions armed, no rule: everything of the node's own is refused but what the
/// design exempts.
fn closed() -> (Datapath, Tables) {
    closed_with(&cfg())
}

/// [`closed`] on a datapath loaded with `c`.
fn closed_with(c: &DatapathConfig) -> (Datapath, Tables) {
    let mut dp = node_with(c);
    let t = compile(&[fw("closed", &["Ingress", "Egress"], vec![], vec![])])
        .tables()
        .clone();
    write(&mut dp, &Tables::default(), &t);
    (dp, t)
}

#[test]
fn neighbour_discovery_passes_and_ipv6_is_filtered() {
    let (dp, _) = closed();
    let (me, other) = (ip(NODE6), ip("fd00::99"));
    for typ in 133..=137u8 {
        assert!(
            inbound(&dp, &packet(other, me, ICMPV6, 0, 0, typ)),
            "ND type {typ} in"
        );
        assert!(
            outbound(&dp, &packet(me, other, ICMPV6, 0, 0, typ)),
            "ND type {typ} out"
        );
    }
    // An echo request and TCP over global IPv6 are the firewall's.
    assert!(!inbound(&dp, &packet(other, me, ICMPV6, 7, 7, 128)));
    assert!(!inbound(&dp, &packet(other, me, pkt::TCP, 4000, 22, SYN)));
    assert!(!outbound(&dp, &packet(me, other, pkt::TCP, 4000, 22, SYN)));
    assert_eq!(drops_of(&dp, DropReason::PolHfIngress), 2);
    assert_eq!(drops_of(&dp, DropReason::PolHfEgress), 1);
}

// Link-local is no exemption (issue 29: anything on the node's segment reached every port
// over fe80::/10): a BGP session over link-local is refused like any, counted, and passes once
// a rule names fe80::/10; neighbour discovery stays exempt (the test above).
#[test]
fn link_local_is_the_rules_like_any_address() {
    let (mut dp, closed) = closed();
    let (me, other) = (ip(NODE_LL), ip("fe80::2"));
    assert!(!inbound(&dp, &packet(other, me, pkt::TCP, 40000, 179, SYN)));
    assert!(!inbound(&dp, &packet(other, me, pkt::TCP, 40000, 22, SYN)));
    assert!(!outbound(&dp, &packet(me, other, pkt::TCP, 40001, 179, SYN)));
    assert_eq!(drops_of(&dp, DropReason::PolHfIngress), 2);
    assert_eq!(drops_of(&dp, DropReason::PolHfEgress), 1);
    let bgp = compile(&[fw(
        "bgp",
        &["Ingress", "Egress"],
        vec![HostFirewallIngressRule {
            from: vec![peer("fe80::/10", &[])],
            ports: vec![hport("TCP", 179, 0)],
        }],
        vec![],
    )])
    .tables()
    .clone();
    write(&mut dp, &closed, &bgp);
    assert!(inbound(&dp, &packet(other, me, pkt::TCP, 40000, 179, SYN)));
    assert!(outbound(&dp, &packet(me, other, pkt::TCP, 179, 40000, SYN | ACK)));
    assert!(
        !inbound(&dp, &packet(other, me, pkt::TCP, 40002, 22, SYN)),
        "SSH over link-local"
    );
}

// The agent's --tunnel-port (the datapath's `tunnel_port`, VXLAN's 4789 by default) is the
// one exempt: with Geneve's 6081 configured, 4789 is the firewall's and 6081 exempt.
#[test]
fn tunnel_port_from_known_nodes_only() {
    for (port, other) in [(4789, 6081), (6081, 4789), (8472, 4789)] {
        let (dp, _) = closed_with(&DatapathConfig {
            tunnel_port: u32::from(port),
            ..cfg()
        });
        for (me, node) in [(ip(NODE4), ip(PEER_NODE4)), (ip(NODE6), ip(PEER_NODE6))] {
            assert!(
                !inbound(&dp, &packet(node, me, UDP, 51000, other, 0)),
                "tunnel port {port}: {node} -> {other} is the firewall's"
            );
            assert!(
                !outbound(&dp, &packet(me, node, UDP, 51000, other, 0)),
                "tunnel port {port}: -> {node}:{other} is the firewall's"
            );
            assert!(
                inbound(&dp, &packet(node, me, UDP, 51000, port, 0)),
                "tunnel port {port}: {node} -> {port}"
            );
        }
    }
    let (dp, _) = closed();
    for (me, node, stranger) in [
        (ip(NODE4), ip(PEER_NODE4), ip("10.9.9.9")),
        (ip(NODE6), ip(PEER_NODE6), ip("fd00::99")),
    ] {
        let port = 4789;
        assert!(
            inbound(&dp, &packet(node, me, UDP, 51000, port, 0)),
            "{node} -> {port}"
        );
        assert!(
            outbound(&dp, &packet(me, node, UDP, 51000, port, 0)),
            "-> {node}:{port}"
        );
        assert!(!inbound(&dp, &packet(stranger, me, UDP, 51000, port, 0)));
        assert!(!outbound(&dp, &packet(me, stranger, UDP, 51000, port, 0)));
        // Other node-to-node traffic is the firewall's (rules name the nodes' CIDRs).
        assert!(!inbound(&dp, &packet(node, me, pkt::TCP, 40000, 8080, SYN)));
    }
}

#[test]
fn kubernetes_control_ports_between_nodes_pass() {
    let (dp, _) = closed();
    for (me, node, stranger) in [
        (ip(NODE4), ip(PEER_NODE4), ip("10.9.9.9")),
        (ip(NODE6), ip(PEER_NODE6), ip("fd00::99")),
    ] {
        for port in [6443, 10250] {
            // The other node's kubelet to this node's API server, and its answer; this
            // node's kubelet to the other's.
            assert!(
                inbound(&dp, &packet(node, me, pkt::TCP, 40000, port, SYN)),
                "{node} -> :{port}"
            );
            assert!(outbound(&dp, &packet(me, node, pkt::TCP, port, 40000, SYN | ACK)));
            assert!(outbound(&dp, &packet(me, node, pkt::TCP, 40001, port, SYN)));
            assert!(inbound(&dp, &packet(node, me, pkt::TCP, port, 40001, SYN | ACK)));
            // A connection already open when the firewall was armed: adopted by its first
            // packet that is no lone SYN, both ways.
            assert!(inbound(&dp, &packet(node, me, pkt::TCP, port, 40002, ACK)));
            assert!(outbound(&dp, &packet(me, node, pkt::TCP, 40002, port, ACK)));
            // From anyone else: the firewall's, but for the API server's port, which the
            // compiler's failsafe keeps open on a restricted node (docs/policy.md, "Lockout
            // protection").
            assert_eq!(
                inbound(&dp, &packet(stranger, me, pkt::TCP, 40000, port, SYN)),
                port == 6443,
                "{stranger} -> :{port}"
            );
        }
    }
}

// Issue 29's second bypass: the control ports were exempt by either end's port, so a known
// node opened a connection from port 6443 or 10250 to any port of this node. By the
// destination port only now: such a SYN is the rules' (dropped and counted), both ways.
#[test]
fn a_control_source_port_opens_nothing() {
    let (dp, _) = closed();
    for (me, node) in [(ip(NODE4), ip(PEER_NODE4)), (ip(NODE6), ip(PEER_NODE6))] {
        for port in [6443, 10250] {
            assert!(
                !inbound(&dp, &packet(node, me, pkt::TCP, port, 22, SYN)),
                "{node}:{port} -> :22"
            );
            assert!(!outbound(&dp, &packet(me, node, pkt::TCP, port, 22, SYN)));
        }
    }
    assert_eq!(drops_of(&dp, DropReason::PolHfIngress), 4);
    assert_eq!(drops_of(&dp, DropReason::PolHfEgress), 4);
}

#[test]
fn icmp_errors_pass_with_their_flow() {
    let mut dp = node();
    // Egress to 443 anywhere; ingress armed with nothing admitted.
    let t = compile(&[fw(
        "out-443",
        &["Ingress", "Egress"],
        vec![],
        vec![HostFirewallEgressRule {
            to: vec![],
            ports: vec![hport("TCP", 443, 0)],
        }],
    )])
    .tables()
    .clone();
    write(&mut dp, &Tables::default(), &t);
    let (me, web, router) = (ip(NODE4), ip("93.184.216.34"), "10.5.5.5".parse().unwrap());
    let syn = packet(me, web, pkt::TCP, 40000, 443, SYN);
    assert!(outbound(&dp, &syn));
    let IpAddr::V4(me4) = me else { unreachable!() };
    let err = pkt::icmp4_error(router, me4, 3, 4, [0, 0, 5, 0xdc], pkt::ip_of(&syn));
    assert!(
        inbound(&dp, &pkt::frame(MAC_UP, MAC_GW, &err)),
        "frag-needed of the flow"
    );
    // The same error about a flow the node never opened.
    let other = packet(me, web, pkt::TCP, 40001, 443, SYN);
    let err = pkt::icmp4_error(router, me4, 3, 4, [0, 0, 5, 0xdc], pkt::ip_of(&other));
    assert!(!inbound(&dp, &pkt::frame(MAC_UP, MAC_GW, &err)));
    assert_eq!(drops_of(&dp, DropReason::PolCtInvalid), 1);
    // The reply passes by state; a SYN from the same peer and port is a new flow, refused.
    assert!(inbound(&dp, &packet(web, me, pkt::TCP, 443, 40000, SYN | ACK)));
    assert!(!inbound(&dp, &packet(web, me, pkt::TCP, 443, 40002, SYN)));
    // IPv6 alike: packet too big about the node's own flow.
    let (me6, web6) = (ip(NODE6), ip("2606:4700::1"));
    let syn6 = packet(me6, web6, pkt::TCP, 40000, 443, SYN);
    assert!(outbound(&dp, &syn6));
    let (IpAddr::V6(r6), IpAddr::V6(m6)) = (ip("2001:db8::1"), me6) else {
        unreachable!()
    };
    let err6 = pkt::icmp6_error(r6, m6, 2, 0, [0, 0, 5, 0xdc], pkt::ip6_of(&syn6));
    assert!(inbound(&dp, &pkt::frame6(MAC_UP, MAC_GW, &err6)));
}

#[test]
fn replies_pass_by_state_in_the_unarmed_direction_too() {
    let mut dp = node();
    // Ingress only, SSH admitted.
    let t = compile(&[fw(
        "ssh",
        &["Ingress"],
        vec![HostFirewallIngressRule {
            from: vec![],
            ports: vec![hport("TCP", 22, 0)],
        }],
        vec![],
    )])
    .tables()
    .clone();
    write(&mut dp, &Tables::default(), &t);
    let (me, web) = (ip(NODE4), ip("1.1.1.1"));
    // The node's own flow out (egress unarmed, tracked) and its reply in.
    assert!(outbound(&dp, &packet(me, web, pkt::TCP, 40000, 443, SYN)));
    assert!(inbound(&dp, &packet(web, me, pkt::TCP, 443, 40000, SYN | ACK)));
    assert!(inbound(&dp, &packet(web, me, pkt::TCP, 443, 40000, ACK)));
    // A DNS answer to the node's query.
    assert!(outbound(&dp, &packet(me, web, UDP, 45000, 53, 0)));
    assert!(inbound(&dp, &packet(web, me, UDP, 53, 45000, 0)));
    // Unsolicited: refused; SSH admitted and its answer out passes.
    assert!(!inbound(&dp, &packet(web, me, UDP, 53, 45001, 0)));
    assert!(inbound(&dp, &packet(web, me, pkt::TCP, 50000, 22, SYN)));
    assert!(outbound(&dp, &packet(me, web, pkt::TCP, 22, 50000, SYN | ACK)));
    // A session older than the firewall (no entry): admitted packets pass, others do not.
    assert!(inbound(&dp, &packet(web, me, pkt::TCP, 50001, 22, ACK)));
    assert!(!inbound(&dp, &packet(web, me, pkt::TCP, 50001, 23, ACK)));
    assert_eq!(drops_of(&dp, DropReason::PolCtInvalid), 1);
    assert_eq!(drops_of(&dp, DropReason::PolHfIngress), 1);
}

#[test]
fn traffic_that_is_not_the_nodes_passes() {
    let (dp, _) = closed();
    // To a pod's fabric address (routed to it by the host) and from one (forwarded out).
    let pod = ip("10.244.1.5");
    assert!(inbound(
        &dp,
        &packet(ip("8.8.8.8"), pod, pkt::TCP, 40000, 80, SYN)
    ));
    assert!(outbound_iif(
        &dp,
        &packet(pod, ip("8.8.8.8"), pkt::TCP, 40000, 80, SYN),
        7
    ));
    // Masqueraded to the node's address, but received on a pod's veth first.
    assert!(outbound_iif(
        &dp,
        &packet(ip(NODE4), ip("8.8.8.8"), pkt::TCP, 61000, 80, SYN),
        7
    ));
    // The node's own: refused.
    assert!(!outbound(
        &dp,
        &packet(ip(NODE4), ip("8.8.8.8"), pkt::TCP, 40000, 80, SYN)
    ));
    // ARP is no IP: the host decides.
    let IpAddr::V4(me) = ip(NODE4) else { unreachable!() };
    assert!(inbound(
        &dp,
        &pkt::arp_request(MAC_GW, "10.0.0.9".parse().unwrap(), me)
    ));
}

#[test]
fn nothing_armed_nothing_tracked() {
    let mut dp = node();
    // A firewall that selects no node of this role: compiled, not armed.
    let mut f = fw("elsewhere", &["Ingress", "Egress"], vec![], vec![]);
    f.spec.node_selector.match_labels = Some([("role".to_string(), "db".to_string())].into());
    let t = compile(&[f]).tables().clone();
    assert_eq!(t.state_flags, 0);
    write(&mut dp, &Tables::default(), &t);
    assert!(inbound(
        &dp,
        &packet(ip("8.8.8.8"), ip(NODE4), pkt::TCP, 40000, 22, SYN)
    ));
    assert!(outbound(
        &dp,
        &packet(ip(NODE4), ip("8.8.8.8"), pkt::TCP, 40000, 22, SYN)
    ));
    assert!(inbound(
        &dp,
        &packet(ip("8.8.8.8"), ip(NODE4), pkt::TCP, 40001, 22, ACK)
    ));
    assert!(pol::ct_entries(&dp).is_empty());
}

#[test]
fn removing_a_rule_stops_an_established_flow() {
    let mut dp = node();
    let open = compile(&[fw(
        "ssh",
        &["Ingress"],
        vec![HostFirewallIngressRule {
            from: vec![peer("192.168.0.0/16", &[])],
            ports: vec![hport("TCP", 22, 0)],
        }],
        vec![],
    )])
    .tables()
    .clone();
    write(&mut dp, &Tables::default(), &open);
    let (me, admin) = (ip(NODE4), ip("192.168.1.10"));
    assert!(inbound(&dp, &packet(admin, me, pkt::TCP, 50000, 22, SYN)));
    assert!(outbound(&dp, &packet(me, admin, pkt::TCP, 22, 50000, SYN | ACK)));
    assert!(inbound(&dp, &packet(admin, me, pkt::TCP, 50000, 22, ACK)));
    // The rule goes (ingress stays armed): the next packet of the session is refused.
    let shut = compile(&[fw("ssh", &["Ingress"], vec![], vec![])])
        .tables()
        .clone();
    let before = pol::state(&dp).generation;
    write(&mut dp, &open, &shut);
    assert_ne!(
        pol::state(&dp).generation,
        before,
        "a narrowing diff bumps the generation"
    );
    assert!(!inbound(&dp, &packet(admin, me, pkt::TCP, 50000, 22, ACK)));
    assert_eq!(drops_of(&dp, DropReason::PolRevoked), 1);
    // And reopened by a rule.
    write(&mut dp, &shut, &open);
    assert!(inbound(&dp, &packet(admin, me, pkt::TCP, 50001, 22, SYN)));
}

const POD4: &str = "10.244.1.5";
const POD6: &str = "fd44:1::5";
const MAC_POD: [u8; 6] = [0x0a, 0x50, 0, 0, 0, 0x05];

/// A pod's packet through `sdn_from_pod` (its veth is `lo`): passed to the host (or sent on)
/// rather than dropped.
fn from_pod(dp: &Datapath, s: IpAddr, d: IpAddr, sp: u16, dport: u16, flags: u8) -> bool {
    let f = pol::tcp(MAC_POD, cfg().gw_mac, s, d, sp, dport, flags);
    dp.run(common::fixtures::FROM_POD, &f, LO, 0).verdict != TC_ACT_SHOT
}

/// The host's packet into the pod through `sdn_to_pod`.
fn to_pod(dp: &Datapath, s: IpAddr, d: IpAddr, sp: u16, dport: u16, flags: u8) -> bool {
    let f = pol::tcp(cfg().gw_mac, MAC_POD, s, d, sp, dport, flags);
    dp.run(common::fixtures::TO_POD, &f, LO, 0).verdict != TC_ACT_SHOT
}

// Issue 29: the node's own pods are judged like the uplink's traffic. With ingress armed, a
// default-network pod reaches no port of its node (the kubelet's, SSH) in either family
// unless a rule admits it; the node's own connections into the pod (a kubelet probe) come
// back whatever the rules say, by the entry made where they entered the pod.
#[test]
fn the_nodes_pods_reach_it_only_as_the_rules_say() {
    let (mut dp, closed) = closed();
    common::fixtures::port(&mut dp, LO, 0);
    for p in [POD4, POD6] {
        common::fixtures::endpoint(&mut dp, 0, p, LO, MAC_POD);
    }
    for (pod, me) in [(ip(POD4), ip(NODE4)), (ip(POD6), ip(NODE6))] {
        for port in [10250, 22] {
            assert!(!from_pod(&dp, pod, me, 40000, port, SYN), "{pod} -> {me}:{port}");
        }
        // A kubelet probe: the node's SYN into the pod, the pod's answer, the node's ACK.
        assert!(to_pod(&dp, me, pod, 45000, 8080, SYN));
        assert!(
            from_pod(&dp, pod, me, 8080, 45000, SYN | ACK),
            "the probe's answer"
        );
        assert!(to_pod(&dp, me, pod, 45000, 8080, ACK));
        assert!(from_pod(&dp, pod, me, 8080, 45000, ACK));
        // The same answer to a probe that never was: refused.
        assert!(!from_pod(&dp, pod, me, 8080, 45001, SYN | ACK));
    }
    // Over link-local, to the host end of its veth: the node's too.
    assert!(
        !from_pod(&dp, ip("fe80::5"), ip("fe80::1"), 40000, 10250, SYN),
        "link-local to the host"
    );
    assert_eq!(drops_of(&dp, DropReason::PolHfIngress), 5);
    assert_eq!(drops_of(&dp, DropReason::PolCtInvalid), 2);
    // A rule for the pods' range and the kubelet's port lets them in, and nothing else.
    let kubelet = compile(&[fw(
        "kubelet-from-pods",
        &["Ingress", "Egress"],
        vec![HostFirewallIngressRule {
            from: vec![peer("10.244.0.0/16", &[]), peer("fd44::/16", &[])],
            ports: vec![hport("TCP", 10250, 0)],
        }],
        vec![],
    )])
    .tables()
    .clone();
    write(&mut dp, &closed, &kubelet);
    for (pod, me) in [(ip(POD4), ip(NODE4)), (ip(POD6), ip(NODE6))] {
        assert!(
            from_pod(&dp, pod, me, 40010, 10250, SYN),
            "{pod} -> {me}:10250 by the rule"
        );
        assert!(!from_pod(&dp, pod, me, 40011, 22, SYN));
    }
}
