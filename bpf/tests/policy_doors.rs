//! SecurityGroups on the Floating IP and LoadBalancer doors (`lib/doors.h`, `lib/policy.h`) and on the VPC
//! gateway's NAT (`lib/egress.h`) through `BPF_PROG_TEST_RUN`: the outside peer is a CIDR
//! peer of the target's VPC. A grouped target is closed to new inbound flows until a CIDR
//! rule admits the peer, its replies leave by the flow's entry, and its own new flows out
//! through the door or the gateway need an egress rule (whose replies come back by the
//! entry); an ungrouped target stays open. Every outcome is also `verdict::sg`'s. Needs
//! root; fails (never skips) without it.

mod common;

use std::net::IpAddr;

use common::doors::*;
use common::fixtures::*;
use common::pkt::{self, TCP};
use common::policy as pol;
use common::{Datapath, LO, TC_ACT_REDIRECT, TC_ACT_SHOT};
use cozyplane_apis::v1alpha1::{
    Port, PortSpec, PortStatus, SecurityGroupEgressRule, SecurityGroupIngressRule, SecurityGroupPeer,
    SecurityGroupPort, VPCRef,
};
use cozyplane_bpf::DropReason;
use cozyplane_bpf::abi::DoorKey;
use cozyplane_policy::model::{Diff, Tables};
use cozyplane_policy::sg::SgCompiler;
use cozyplane_policy::verdict::{self, Endpoint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

const PUB: &str = "203.0.113.10";
const VPC_IP: &str = "10.0.0.1";
const CLIENT: &str = "198.51.100.7";
/// VPC A's gateway NAT address.
const NAT4: &str = "203.0.113.1";

/// A CIDR peer on TCP `port`.
fn cidr_on(cidr: &str, port: u16) -> (SecurityGroupPeer, Vec<SecurityGroupPort>) {
    (
        SecurityGroupPeer {
            cidr: cidr.into(),
            ..Default::default()
        },
        vec![SecurityGroupPort {
            protocol: "TCP".into(),
            port: port.into(),
        }],
    )
}

/// The world: VPC_IP's Port in group `web` (id 1) when `grouped`, whose ingress admits
/// `admit` (a CIDR) on TCP 80 when given; no egress rule.
fn world(grouped: bool, admit: Option<&str>) -> Tables {
    world_both(grouped, admit, None)
}

/// [`world`], with an egress rule to `egress` (a CIDR) on TCP 443 when given.
fn world_both(grouped: bool, admit: Option<&str>, egress: Option<&str>) -> Tables {
    let mut c = SgCompiler::new();
    c.set_vpc("t1", "va", VPC_A);
    let ingress = admit
        .map(|cidr| {
            let (from, ports) = cidr_on(cidr, 80);
            SecurityGroupIngressRule { from, ports }
        })
        .into_iter()
        .collect();
    let egress = egress
        .map(|cidr| {
            let (to, ports) = cidr_on(cidr, 443);
            SecurityGroupEgressRule { to, ports }
        })
        .into_iter()
        .collect();
    c.set_group(&pol::web_group(ingress, egress));
    c.set_port(&Port {
        metadata: ObjectMeta {
            name: Some("target".into()),
            ..Default::default()
        },
        spec: PortSpec {
            vpc_ref: VPCRef {
                namespace: "t1".into(),
                name: "va".into(),
            },
            ip: VPC_IP.into(),
            ..Default::default()
        },
        status: Some(PortStatus {
            groups: if grouped { vec![1] } else { vec![] },
            ..Default::default()
        }),
    });
    c.tables()
}

fn setup(t: &Tables) -> Datapath {
    let mut dp = Datapath::load(&cfg());
    vpc_pod(&mut dp, VPC_A, VPC_IP, MAC_A1);
    floating_ip(&mut dp, PUB, VPC_A, VPC_IP);
    internal_range(&mut dp, 0, "10.96.0.0/12");
    internal_range(&mut dp, VPC_A, "10.0.0.0/24");
    pol::load(&mut dp, t);
    dp
}

fn allowed(t: &Tables, src: &str, dst: &str, port: u16) -> bool {
    let ep = |a: &str| Endpoint {
        net: VPC_A,
        ip: a.parse::<IpAddr>().unwrap(),
    };
    verdict::sg(t, ep(src), ep(dst), TCP, port).allowed()
}

/// A TCP segment with these flags (the builder makes SYNs): the flags byte and the
/// checksum word it sits in, updated.
fn with_flags(mut p: Vec<u8>, flags: u8) -> Vec<u8> {
    let at = 14 + 20 + 13;
    let old = u16::from_be_bytes([p[at - 1], p[at]]);
    p[at] = flags;
    let new = u16::from_be_bytes([p[at - 1], p[at]]);
    let c = u16::from_be_bytes([p[at + 3], p[at + 4]]);
    let mut sum = u32::from(!c) + u32::from(!old) + u32::from(new);
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    p[at + 3..at + 5].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    p
}

fn syn_in(sport: u16, dport: u16) -> Vec<u8> {
    pkt::ipv4(ROUTER_MAC, UPLINK_MAC, v4(CLIENT), v4(PUB), TCP, sport, dport, 0)
}

#[test]
fn a_grouped_target_is_closed_to_the_internet_until_a_cidr_rule_admits_it() {
    for (grouped, admit, port, expect) in [
        (false, None, 80, true),
        (true, None, 80, false),
        (true, Some("198.51.100.0/24"), 80, true),
        (true, Some("198.51.100.0/24"), 81, false),
        (true, Some("192.0.2.0/24"), 80, false),
    ] {
        let t = world(grouped, admit);
        let dp = setup(&t);
        let r = dp.run(FROM_UPLINK, &syn_in(40000, port), LO, 0);
        let what = format!("grouped {grouped}, rule {admit:?}, port {port}");
        assert_eq!(allowed(&t, CLIENT, VPC_IP, port), expect, "verdict::sg: {what}");
        if expect {
            assert_eq!(r.verdict, TC_ACT_REDIRECT, "{what}: into the pod");
            let got = pkt::parse_v4(&r.packet);
            assert_eq!((got.src, got.dst), (v4(CLIENT), v4(VPC_IP)), "{what}");
            assert_eq!(total_drops(&dp), 0, "{what}");
        } else {
            assert_dropped(&dp, r.verdict, DropReason::PolSg);
            assert_eq!(
                door(&dp, VPC_A, DoorKey::EIP, DoorKey::IN).packets,
                0,
                "{what}: refused before the meter"
            );
        }
    }
}

#[test]
fn a_replied_flow_leaves_by_its_entry_and_new_flows_out_need_a_rule() {
    in_routed_netns(|| {
        let t = world(true, Some("198.51.100.0/24"));
        let dp = setup(&t);
        assert_eq!(
            dp.run(FROM_UPLINK, &syn_in(40001, 80), LO, 0).verdict,
            TC_ACT_REDIRECT
        );
        // The target's SYN-ACK and the rest of the flow pass by the entry.
        let reply = |flags| {
            with_flags(
                pkt::ipv4(MAC_A1, cfg().gw_mac, v4(VPC_IP), v4(CLIENT), TCP, 80, 40001, 0),
                flags,
            )
        };
        for flags in [0x12, 0x10, 0x18] {
            let r = dp.run(FROM_POD, &reply(flags), LO, 0);
            assert_eq!(r.verdict, TC_ACT_REDIRECT, "flags {flags:#x}: out by the route");
            let got = pkt::parse_v4(&r.packet);
            assert_eq!((got.src, got.dst), (v4(PUB), v4(CLIENT)));
        }
        assert_eq!(total_drops(&dp), 0);
        // A flow of its own: web has no egress rule.
        assert!(!allowed(&t, VPC_IP, CLIENT, 443), "verdict::sg: no egress rule");
        let out = pkt::ipv4(MAC_A1, cfg().gw_mac, v4(VPC_IP), v4(CLIENT), TCP, 5555, 443, 0);
        let r = dp.run(FROM_POD, &out, LO, 0);
        assert_eq!(r.verdict, TC_ACT_SHOT);
        assert_eq!(drops_of(&dp, DropReason::PolSg), 1);
        assert_eq!(
            door(&dp, VPC_A, DoorKey::EIP, DoorKey::OUT).packets,
            3,
            "only the replies left"
        );
        // A packet of a flow the table never saw (no SYN through the door) is no reply.
        let stray = reply(0x10);
        let stray = {
            let mut s = stray;
            s[14 + 20 + 2..14 + 20 + 4].copy_from_slice(&40999u16.to_be_bytes());
            s
        };
        let r = dp.run(FROM_POD, &stray, LO, 0);
        assert_eq!(r.verdict, TC_ACT_SHOT);
        assert_eq!(drops_of(&dp, DropReason::PolCtInvalid), 1);
    });
}

#[test]
fn an_ungrouped_target_keeps_its_door_open_both_ways() {
    in_routed_netns(|| {
        let t = world(false, None);
        let dp = setup(&t);
        let out = pkt::ipv4(MAC_A1, cfg().gw_mac, v4(VPC_IP), v4(CLIENT), TCP, 5556, 443, 0);
        assert!(allowed(&t, VPC_IP, CLIENT, 443));
        assert_eq!(dp.run(FROM_POD, &out, LO, 0).verdict, TC_ACT_REDIRECT);
        assert_eq!(
            dp.run(FROM_UPLINK, &syn_in(40002, 22), LO, 0).verdict,
            TC_ACT_REDIRECT
        );
        assert_eq!(total_drops(&dp), 0);
    });
}

/// The gateway's node: the target is its pod, VPC A NATs to [`NAT4`] from a shard of 64.
fn gateway_setup(t: &Tables) -> Datapath {
    let mut dp = Datapath::load(&cfg());
    vpc_pod(&mut dp, VPC_A, VPC_IP, MAC_A1);
    internal_range(&mut dp, 0, "10.96.0.0/12");
    internal_range(&mut dp, VPC_A, "10.0.0.0/24");
    snat_ipv4(&mut dp, (61000, 61003), (1024, 64, 1), &[(VPC_A, NAT4)]);
    pol::load(&mut dp, t);
    dp
}

// The gateway's CIDR egress: a grouped pod's new flow out through the gateway's NAT needs
// an egress rule for the peer and port; the replies (un-NATed on the pod's node, the owner
// of the port's shard) pass by the flow's entry without any ingress rule; a refused
// packet takes no NAT port and is not metered as crossing.
#[test]
fn the_gateway_needs_a_cidr_egress_rule_and_its_replies_pass_by_the_entry() {
    in_routed_netns(|| {
        for (grouped, egress, port, expect) in [
            (false, None, 443, true),
            (true, None, 443, false),
            (true, Some("198.51.100.0/24"), 443, true),
            (true, Some("198.51.100.0/24"), 444, false),
            (true, Some("192.0.2.0/24"), 443, false),
        ] {
            let what = format!("grouped {grouped}, egress {egress:?}, port {port}");
            let t = world_both(grouped, None, egress);
            let dp = gateway_setup(&t);
            assert_eq!(allowed(&t, VPC_IP, CLIENT, port), expect, "verdict::sg: {what}");
            let syn = pkt::ipv4(MAC_A1, cfg().gw_mac, v4(VPC_IP), v4(CLIENT), TCP, 5000, port, 0);
            let r = dp.run(FROM_POD, &syn, LO, 0);
            if !expect {
                assert_dropped(&dp, r.verdict, DropReason::PolSg);
                assert_eq!(
                    door(&dp, VPC_A, DoorKey::GATEWAY, DoorKey::OUT).packets,
                    0,
                    "{what}: refused before the meter"
                );
                continue;
            }
            assert_eq!(r.verdict, TC_ACT_REDIRECT, "{what}: out by the route");
            let ip = pkt::ip_of(&r.packet);
            assert_eq!(pkt::addrs(ip), (v4(NAT4), v4(CLIENT)), "{what}: NATed");
            let nat_port = u16::from_be_bytes([ip[20], ip[21]]);
            for flags in [0x12, 0x10, 0x18] {
                let back = with_flags(
                    pkt::ipv4(
                        ROUTER_MAC,
                        UPLINK_MAC,
                        v4(CLIENT),
                        v4(NAT4),
                        TCP,
                        port,
                        nat_port,
                        0,
                    ),
                    flags,
                );
                let r = dp.run(FROM_UPLINK, &back, LO, 0);
                assert_eq!(
                    r.verdict, TC_ACT_REDIRECT,
                    "{what}: reply {flags:#x} into the pod"
                );
                let ip = pkt::ip_of(&r.packet);
                assert_eq!(pkt::addrs(ip), (v4(CLIENT), v4(VPC_IP)), "{what}: un-NATed");
            }
            assert_eq!(total_drops(&dp), 0, "{what}");
            assert_eq!(
                door(&dp, VPC_A, DoorKey::GATEWAY, DoorKey::IN).packets,
                3,
                "{what}"
            );
        }
    });
}

// A reply for a NATed flow whose entry is gone (the table lost it, or the flow began when
// the pod had no group and the rules changed since) is a new inbound flow in the pod's
// view: refused for a grouped pod that admits no ingress from the peer.
#[test]
fn a_gateway_reply_without_its_entry_is_judged_as_ingress() {
    in_routed_netns(|| {
        let open = world_both(false, None, None);
        let mut dp = gateway_setup(&open);
        let syn = pkt::ipv4(MAC_A1, cfg().gw_mac, v4(VPC_IP), v4(CLIENT), TCP, 5001, 443, 0);
        let r = dp.run(FROM_POD, &syn, LO, 0);
        assert_eq!(r.verdict, TC_ACT_REDIRECT, "ungrouped: out");
        let nat_port = u16::from_be_bytes([pkt::ip_of(&r.packet)[20], pkt::ip_of(&r.packet)[21]]);
        // The pod joins `web` (no rule admits the peer in): the next reply is refused.
        let closed = world_both(true, None, Some("198.51.100.0/24"));
        assert!(
            !allowed(&closed, CLIENT, VPC_IP, 5001),
            "verdict::sg: no ingress rule"
        );
        pol::apply(&mut dp, &Diff::between(&open, &closed));
        pol::bump(&mut dp);
        let back = with_flags(
            pkt::ipv4(
                ROUTER_MAC,
                UPLINK_MAC,
                v4(CLIENT),
                v4(NAT4),
                TCP,
                443,
                nat_port,
                0,
            ),
            0x12,
        );
        let r = dp.run(FROM_UPLINK, &back, LO, 0);
        assert_eq!(r.verdict, TC_ACT_SHOT);
        assert_eq!(total_drops(&dp), 1);
        assert_eq!(door(&dp, VPC_A, DoorKey::GATEWAY, DoorKey::IN).packets, 0);
    });
}

/// The LoadBalancer frontend of [`lb_setup`].
const FRONT: &str = "203.0.113.20";

/// The backend's node: the target is the one backend of [`FRONT`] port 80 (target port
/// 80), and its VPC's gateway admits LoadBalancer ingress.
fn lb_setup(t: &Tables) -> Datapath {
    let mut dp = Datapath::load(&cfg());
    vpc_pod(&mut dp, VPC_A, VPC_IP, MAC_A1);
    lb_frontend(&mut dp, FRONT, 80, TCP, VPC_A, &[(VPC_IP, 80)]);
    lb_admit(&mut dp, VPC_A, true);
    internal_range(&mut dp, 0, "10.96.0.0/12");
    internal_range(&mut dp, VPC_A, "10.0.0.0/24");
    pol::load(&mut dp, t);
    dp
}

// The LoadBalancer door polices like a Floating IP: a grouped backend on this node is closed
// to the client until a CIDR rule admits it (refused before the door's meter); an ungrouped
// one is open.
#[test]
fn a_grouped_backend_is_closed_behind_its_load_balancer_until_a_cidr_rule_admits_it() {
    for (grouped, admit, expect) in [
        (false, None, true),
        (true, None, false),
        (true, Some("198.51.100.0/24"), true),
        (true, Some("192.0.2.0/24"), false),
    ] {
        let what = format!("grouped {grouped}, rule {admit:?}");
        let t = world(grouped, admit);
        let dp = lb_setup(&t);
        assert_eq!(allowed(&t, CLIENT, VPC_IP, 80), expect, "verdict::sg: {what}");
        let syn = pkt::ipv4(ROUTER_MAC, UPLINK_MAC, v4(CLIENT), v4(FRONT), TCP, 40000, 80, 0);
        let r = dp.run(FROM_UPLINK, &syn, LO, 0);
        if expect {
            assert_eq!(r.verdict, TC_ACT_REDIRECT, "{what}: into the backend");
            let got = pkt::parse_v4(&r.packet);
            assert_eq!((got.src, got.dst), (v4(CLIENT), v4(VPC_IP)), "{what}");
            assert_eq!(total_drops(&dp), 0, "{what}");
        } else {
            assert_dropped(&dp, r.verdict, DropReason::PolSg);
            assert_eq!(
                door(&dp, VPC_A, DoorKey::LOADBALANCER, DoorKey::IN).packets,
                0,
                "{what}: refused before the meter"
            );
        }
    }
}

// The backend's replies leave as the frontend by the flow's entry (web has no egress rule);
// a "reply" of a flow the table never saw is refused.
#[test]
fn a_backends_replies_pass_by_the_entry_its_client_made() {
    in_routed_netns(|| {
        let t = world(true, Some("198.51.100.0/24"));
        let dp = lb_setup(&t);
        let syn = pkt::ipv4(ROUTER_MAC, UPLINK_MAC, v4(CLIENT), v4(FRONT), TCP, 40001, 80, 0);
        assert_eq!(dp.run(FROM_UPLINK, &syn, LO, 0).verdict, TC_ACT_REDIRECT);
        let reply = |flags, dport: u16| {
            with_flags(
                pkt::ipv4(MAC_A1, cfg().gw_mac, v4(VPC_IP), v4(CLIENT), TCP, 80, dport, 0),
                flags,
            )
        };
        for flags in [0x12, 0x10, 0x18] {
            let r = dp.run(FROM_POD, &reply(flags, 40001), LO, 0);
            assert_eq!(r.verdict, TC_ACT_REDIRECT, "flags {flags:#x}: out by the route");
            let got = pkt::parse_v4(&r.packet);
            assert_eq!((got.src, got.sport), (v4(FRONT), 80), "as the frontend");
        }
        assert_eq!(total_drops(&dp), 0);
        assert_eq!(door(&dp, VPC_A, DoorKey::LOADBALANCER, DoorKey::OUT).packets, 3);
        let r = dp.run(FROM_POD, &reply(0x10, 40999), LO, 0);
        assert_eq!(r.verdict, TC_ACT_SHOT);
        assert_eq!(drops_of(&dp, DropReason::PolCtInvalid), 1);
        assert_eq!(door(&dp, VPC_A, DoorKey::LOADBALANCER, DoorKey::OUT).packets, 3);
    });
}
