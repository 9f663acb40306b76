//! SecurityGroups on the fabric bridge (`lib/bridge_sg.h`) through `BPF_PROG_TEST_RUN`: a
//! default-network client reaching a VPC pod's fabric address (`status.podIP`) is a CIDR
//! peer of the pod's VPC from net 0. A grouped pod is closed to it until a CIDR rule admits
//! it, and its replies leave by the flow's entry; the nodes (kubelet probes, the API
//! server) stay exempt; a client whose fabric address equals a grouped VPC address never
//! takes that address's groups. Every outcome is also `verdict::sg`'s. Needs root; fails
//! (never skips) without it.

mod common;

use std::net::{IpAddr, Ipv4Addr};

use common::fixtures::*;
use common::pkt::{self, TCP};
use common::policy as pol;
use common::{Datapath, LO, TC_ACT_OK, TC_ACT_SHOT};
use cozyplane_apis::v1alpha1::{
    Port, PortSpec, PortStatus, SecurityGroupIngressRule, SecurityGroupPeer, SecurityGroupPort, VPCRef,
};
use cozyplane_bpf::DropReason;
use cozyplane_bpf::maps::nodes::{self, NodesMap};
use cozyplane_policy::model::{Diff, Tables};
use cozyplane_policy::sg::SgCompiler;
use cozyplane_policy::verdict::{self, Endpoint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

const HOST_MAC: [u8; 6] = [0x0a, 0, 0, 0, 0, 0xee];
/// The target's fabric address and VPC address.
const FABRIC: &str = "10.244.1.5";
const VPC_IP: &str = "10.244.0.1";
/// A default-network pod on another node: inside VPC A's range, which overlaps the fabric.
const CLIENT: &str = "10.244.0.9";
/// This node and another node.
const NODE: &str = "192.0.2.1";
const OTHER_NODE: &str = "192.0.2.2";

/// What the target's group `web` (id 1) admits on TCP 80.
#[derive(Clone, Copy)]
enum Admit {
    Nothing,
    Cidr(&'static str),
    /// Its own group (a VPC peer, which no fabric client is).
    Web,
}

/// The world: the target's Port in `web` when `grouped`; a second VPC A pod at the client's
/// address, in `web` too (an overlap a fabric client must not profit from); this node's
/// address in `hf_self`.
fn world(grouped: bool, admit: Admit) -> Tables {
    let mut c = SgCompiler::new();
    c.set_vpc("t1", "va", VPC_A);
    let from = match admit {
        Admit::Nothing => None,
        Admit::Cidr(cidr) => Some(SecurityGroupPeer {
            cidr: cidr.into(),
            ..Default::default()
        }),
        Admit::Web => Some(SecurityGroupPeer {
            group: "web".into(),
            ..Default::default()
        }),
    };
    let ingress = from
        .map(|from| SecurityGroupIngressRule {
            from,
            ports: vec![SecurityGroupPort {
                protocol: "TCP".into(),
                port: 80,
            }],
        })
        .into_iter()
        .collect();
    c.set_group(&pol::web_group(ingress, vec![]));
    for (name, ip, groups) in [
        ("target", VPC_IP, if grouped { vec![1] } else { vec![] }),
        ("twin", CLIENT, vec![1]),
    ] {
        c.set_port(&Port {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: PortSpec {
                vpc_ref: VPCRef {
                    namespace: "t1".into(),
                    name: "va".into(),
                },
                ip: ip.into(),
                ..Default::default()
            },
            status: Some(PortStatus {
                groups,
                ..Default::default()
            }),
        });
    }
    let mut t = c.tables();
    t.hf_self.insert(ip(NODE));
    t
}

fn setup(t: &Tables) -> Datapath {
    let mut dp = Datapath::load(&cfg());
    vpc_pod(&mut dp, VPC_A, VPC_IP, MAC_A1);
    bridge(&mut dp, FABRIC, VPC_A, VPC_IP);
    NodesMap::try_from(dp.map_mut(nodes::NAME))
        .unwrap()
        .insert(ip(OTHER_NODE))
        .unwrap();
    pol::load(&mut dp, t);
    dp
}

/// `verdict::sg` for `client` (net 0) to the target's VPC address.
fn allowed(t: &Tables, client: &str, port: u16) -> bool {
    let client = Endpoint {
        net: 0,
        ip: client.parse::<IpAddr>().unwrap(),
    };
    let target = Endpoint {
        net: VPC_A,
        ip: ip(VPC_IP),
    };
    verdict::sg(t, client, target, TCP, port).allowed()
}

fn gw() -> Ipv4Addr {
    cfg().gw_ipv4
}

/// The client's SYN to the target's fabric address.
fn syn(client: &str, sport: u16, port: u16) -> Vec<u8> {
    pkt::ipv4(HOST_MAC, MAC_A1, v4(client), v4(FABRIC), TCP, sport, port, 0)
}

/// The target's segment with `flags` back to the bridge's gateway port.
fn reply(port: u16, gw_port: u16, flags: u8) -> Vec<u8> {
    pol::tcp4(
        MAC_A1,
        cfg().gw_mac,
        ip(VPC_IP),
        IpAddr::V4(gw()),
        port,
        gw_port,
        flags,
    )
}

#[test]
fn a_grouped_pods_fabric_address_is_closed_to_the_default_network_until_a_cidr_rule_admits_it() {
    for (grouped, admit, port, expect) in [
        (false, Admit::Nothing, 80, true),
        (true, Admit::Nothing, 80, false),
        (true, Admit::Cidr("10.244.0.0/16"), 80, true),
        (true, Admit::Cidr("10.244.0.0/16"), 81, false),
        (true, Admit::Cidr("10.245.0.0/16"), 80, false),
        // The client's address is a `web` member's in VPC A, but the client is in net 0.
        (true, Admit::Web, 80, false),
    ] {
        let what = format!("grouped {grouped}, port {port}, case {}", admit_name(admit));
        let t = world(grouped, admit);
        let dp = setup(&t);
        assert_eq!(allowed(&t, CLIENT, port), expect, "verdict::sg: {what}");
        let r = dp.run(TO_POD, &syn(CLIENT, 40000, port), LO, 0);
        if expect {
            assert_eq!(r.verdict, TC_ACT_OK, "{what}: into the pod");
            let got = pkt::parse_v4(&r.packet);
            assert_eq!((got.src, got.dst), (gw(), v4(VPC_IP)), "{what}: bridged");
            assert_eq!(total_drops(&dp), 0, "{what}");
        } else {
            assert_dropped(&dp, r.verdict, DropReason::PolSg);
        }
    }
}

fn admit_name(a: Admit) -> String {
    match a {
        Admit::Nothing => "no rule".into(),
        Admit::Cidr(c) => format!("cidr {c}"),
        Admit::Web => "group web".into(),
    }
}

#[test]
fn the_pods_replies_leave_by_the_entry_and_a_stray_reply_is_refused() {
    let t = world(true, Admit::Cidr("10.244.0.0/16"));
    let dp = setup(&t);
    let r = dp.run(TO_POD, &syn(CLIENT, 40001, 80), LO, 0);
    assert_eq!(r.verdict, TC_ACT_OK);
    let gw_port = pkt::parse_v4(&r.packet).sport;
    for flags in [pol::SYN | pol::ACK, pol::ACK, pol::ACK | 0x08] {
        let r = dp.run(FROM_POD, &reply(80, gw_port, flags), LO, 0);
        assert_eq!(r.verdict, TC_ACT_OK, "flags {flags:#x}: to the host");
        let got = pkt::parse_v4(&r.packet);
        assert_eq!((got.src, got.dst), (v4(FABRIC), v4(CLIENT)), "fabric view");
        assert_eq!((got.sport, got.dport), (80, 40001));
    }
    assert_eq!(total_drops(&dp), 0);
    // A second flow bridged while the pod was ungrouped has no entry: once the pod is
    // grouped, its next reply is judged as the pod's egress (no egress rule) and refused.
    let open = world(false, Admit::Nothing);
    let mut dp = setup(&open);
    let r = dp.run(TO_POD, &syn(CLIENT, 40002, 80), LO, 0);
    assert_eq!(r.verdict, TC_ACT_OK, "ungrouped: in");
    let gw_port = pkt::parse_v4(&r.packet).sport;
    pol::apply(&mut dp, &Diff::between(&open, &t));
    pol::bump(&mut dp);
    assert!(
        !verdict::sg(
            &t,
            Endpoint {
                net: VPC_A,
                ip: ip(VPC_IP)
            },
            Endpoint {
                net: 0,
                ip: ip(CLIENT)
            },
            TCP,
            40002
        )
        .allowed(),
        "verdict::sg: no egress rule"
    );
    let r = dp.run(FROM_POD, &reply(80, gw_port, pol::ACK), LO, 0);
    assert_eq!(r.verdict, TC_ACT_SHOT, "the stray reply");
    assert_eq!(total_drops(&dp), 1);
}

#[test]
fn the_nodes_reach_a_grouped_pod_that_admits_nothing() {
    let t = world(true, Admit::Nothing);
    let dp = setup(&t);
    for (node, sport) in [(NODE, 40003), (OTHER_NODE, 40004)] {
        let r = dp.run(TO_POD, &syn(node, sport, 8080), LO, 0);
        assert_eq!(r.verdict, TC_ACT_OK, "{node}: probe in");
        let gw_port = pkt::parse_v4(&r.packet).sport;
        let r = dp.run(FROM_POD, &reply(8080, gw_port, pol::SYN | pol::ACK), LO, 0);
        assert_eq!(r.verdict, TC_ACT_OK, "{node}: its answer out");
        assert_eq!(pkt::parse_v4(&r.packet).dst, v4(node));
    }
    assert_eq!(total_drops(&dp), 0);
    assert!(pol::ct_entries(&dp).is_empty(), "the nodes' flows make no entry");
}
