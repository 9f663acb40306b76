//! SecurityGroups on the Floating IP door (`lib/fip.h`, `lib/policy.h`) through
//! `BPF_PROG_TEST_RUN`: the outside peer is a CIDR peer of the target's VPC. A grouped
//! target is closed to new inbound flows until a CIDR rule admits the peer, its replies
//! leave by the flow's entry, and its own new flows out through the door need an egress
//! rule; an ungrouped target stays open. Every outcome is also `verdict::sg`'s. Needs
//! root; fails (never skips) without it.

mod common;

use std::net::IpAddr;

use common::doors::*;
use common::fixtures::*;
use common::pkt::{self, TCP};
use common::policy as pol;
use common::{Datapath, LO, TC_ACT_REDIRECT, TC_ACT_SHOT};
use cozyplane_apis::v1alpha1::{
    LocalVPCRef, Port, PortSpec, PortStatus, SecurityGroup, SecurityGroupIngressRule, SecurityGroupPeer,
    SecurityGroupPort, SecurityGroupSpec, SecurityGroupStatus, VPCRef,
};
use cozyplane_bpf::DropReason;
use cozyplane_bpf::abi::DoorKey;
use cozyplane_policy::model::Tables;
use cozyplane_policy::sg::SgCompiler;
use cozyplane_policy::verdict::{self, Endpoint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

const PUB: &str = "203.0.113.10";
const VPC_IP: &str = "10.0.0.1";
const CLIENT: &str = "198.51.100.7";

/// The world: VPC_IP's Port in group `web` (id 1) when `grouped`, whose ingress admits
/// `admit` (a CIDR) on TCP 80 when given; no egress rule.
fn world(grouped: bool, admit: Option<&str>) -> Tables {
    let mut c = SgCompiler::new();
    c.set_vpc("t1", "va", VPC_A);
    let ingress = admit
        .map(|cidr| SecurityGroupIngressRule {
            from: SecurityGroupPeer {
                cidr: cidr.into(),
                ..Default::default()
            },
            ports: vec![SecurityGroupPort {
                protocol: "TCP".into(),
                port: 80,
            }],
        })
        .into_iter()
        .collect();
    c.set_group(&SecurityGroup {
        metadata: ObjectMeta {
            namespace: Some("t1".into()),
            name: Some("web".into()),
            ..Default::default()
        },
        spec: SecurityGroupSpec {
            vpc_ref: LocalVPCRef { name: "va".into() },
            ingress,
            ..Default::default()
        },
        status: Some(SecurityGroupStatus {
            id: 1,
            ..Default::default()
        }),
    });
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
