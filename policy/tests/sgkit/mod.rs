//! The SecurityGroup worlds every SG suite shares: the object builders, the endpoints and
//! probes, the fixed world and the random worlds' vocabulary. `policy/tests/sg.rs` checks
//! the compiler's semantics on them, `bpf/tests/policy_sg.rs` runs them through the
//! datapath against `verdict::sg`, and `apiserver/tests/trace.rs` asks the trace API about
//! them (each includes this file with `#[path]`): one world, three judges.

#![allow(dead_code, unreachable_pub, reason = "each suite uses a different subset")]

use cozyplane_apis::v1alpha1::{
    LocalVPCRef, Port, PortSpec, PortStatus, SecurityGroup, SecurityGroupEgressRule,
    SecurityGroupIngressRule, SecurityGroupPeer, SecurityGroupPort, SecurityGroupSpec, SecurityGroupStatus,
    VPCRef,
};
use cozyplane_policy::model::proto::{ICMP, TCP, UDP};
use cozyplane_policy::sg::SgCompiler;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use rand::Rng;
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;

/// The tenant namespace of every world object.
pub const NS: &str = "t1";

/// The two VPCs of the worlds (peered both ways) and their ranges.
pub const VPCS: [(&str, &str); 2] = [("va", "10.1.0.0/24"), ("vb", "10.2.0.0/24")];

/// The endpoints: name, VPC, address.
pub const EPS: [(&str, &str, &str); 8] = [
    ("web", "va", "10.1.0.2"),
    ("app", "va", "10.1.0.3"),
    ("free", "va", "10.1.0.4"),
    ("db", "va", "10.1.0.5"),
    ("multi", "va", "10.1.0.6"),
    ("free2", "va", "10.1.0.7"),
    ("peer", "vb", "10.2.0.2"),
    ("vfree", "vb", "10.2.0.3"),
];

/// Probes: protocol and port (ICMP: the echo request, `type << 8 | code`).
pub const PROBES: [(u8, u16); 7] = [
    (TCP, 80),
    (TCP, 443),
    (TCP, 8080),
    (TCP, 5432),
    (TCP, 22),
    (UDP, 53),
    (ICMP, 8 << 8),
];

pub fn group_peer(name: &str) -> SecurityGroupPeer {
    SecurityGroupPeer {
        group: name.into(),
        ..Default::default()
    }
}

/// A group of VPC `vpc` of namespace [`NS`].
pub fn peered(name: &str, vpc: &str) -> SecurityGroupPeer {
    SecurityGroupPeer {
        group: name.into(),
        vpc: Some(VPCRef {
            namespace: NS.into(),
            name: vpc.into(),
        }),
        ..Default::default()
    }
}

pub fn cidr(c: &str) -> SecurityGroupPeer {
    SecurityGroupPeer {
        cidr: c.into(),
        ..Default::default()
    }
}

pub fn sgport(p: &str, n: i32) -> SecurityGroupPort {
    SecurityGroupPort {
        protocol: p.into(),
        port: n,
    }
}

pub type Rules = Vec<(SecurityGroupPeer, Vec<SecurityGroupPort>)>;

/// SecurityGroup `NS/name` of VPC `vpc` with id `id` (what the server allocates).
pub fn group(name: &str, vpc: &str, id: i32, ingress: Rules, egress: Rules) -> SecurityGroup {
    SecurityGroup {
        metadata: ObjectMeta {
            namespace: Some(NS.into()),
            name: Some(name.into()),
            ..Default::default()
        },
        spec: SecurityGroupSpec {
            vpc_ref: LocalVPCRef { name: vpc.into() },
            ingress: ingress
                .into_iter()
                .map(|(from, ports)| SecurityGroupIngressRule { from, ports })
                .collect(),
            egress: egress
                .into_iter()
                .map(|(to, ports)| SecurityGroupEgressRule { to, ports })
                .collect(),
            ..Default::default()
        },
        status: Some(SecurityGroupStatus {
            id,
            ..Default::default()
        }),
    }
}

/// Port `name` of VPC `NS/vpc` at `addr`, in groups `groups` (`status.groups`).
pub fn port_obj(name: &str, vpc: &str, addr: &str, groups: &[i32]) -> Port {
    Port {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: PortSpec {
            vpc_ref: VPCRef {
                namespace: NS.into(),
                name: vpc.into(),
            },
            ip: addr.into(),
            ..Default::default()
        },
        status: Some(PortStatus {
            groups: groups.to_vec(),
            ..Default::default()
        }),
    }
}

/// The fixed world's groups: web admits app (TCP 80, ICMP echo), a CIDR of its VPC (TCP
/// 443) and the peered VPC's group (TCP 8080); app may send to web (anything), anywhere
/// (UDP 53) and to the peered group (TCP 5432); db admits nothing; the peered group admits
/// app's TCP 5432 and may send TCP 8080 to web.
pub fn fixed_groups() -> Vec<SecurityGroup> {
    vec![
        group(
            "web",
            "va",
            1,
            vec![
                (group_peer("app"), vec![sgport("TCP", 80), sgport("ICMP", 8)]),
                (cidr("10.1.0.4/30"), vec![sgport("TCP", 443)]),
                (peered("peer", "vb"), vec![sgport("TCP", 8080)]),
            ],
            vec![],
        ),
        group(
            "app",
            "va",
            2,
            vec![],
            vec![
                (group_peer("web"), vec![]),
                (cidr("0.0.0.0/0"), vec![sgport("UDP", 53)]),
                (peered("peer", "vb"), vec![sgport("TCP", 5432)]),
            ],
        ),
        group("db", "va", 3, vec![], vec![]),
        group(
            "peer",
            "vb",
            1,
            vec![(peered("app", "va"), vec![sgport("TCP", 5432)])],
            vec![(peered("web", "va"), vec![sgport("TCP", 8080)])],
        ),
    ]
}

/// The fixed world's memberships, by endpoint name.
pub fn fixed_groups_of(name: &str) -> &'static [i32] {
    match name {
        "web" | "peer" => &[1],
        "app" => &[2],
        "db" => &[3],
        "multi" => &[1, 2],
        _ => &[],
    }
}

/// The fixed world's Ports.
pub fn fixed_ports() -> Vec<Port> {
    EPS.iter()
        .map(|(n, v, a)| port_obj(n, v, a, fixed_groups_of(n)))
        .collect()
}

/// The fixed world compiled, VPC `va` as net `va`, `vb` as `vb`.
pub fn fixed(va: u32, vb: u32) -> SgCompiler {
    let mut c = SgCompiler::new();
    c.set_vpc(NS, "va", va);
    c.set_vpc(NS, "vb", vb);
    for g in fixed_groups() {
        c.set_group(&g);
    }
    for p in fixed_ports() {
        c.set_port(&p);
    }
    c
}

/// The name of random group `i` (1..3, also its id) of `vpc`: names are per namespace,
/// so each VPC's groups have their own.
pub fn random_name(vpc: &str, i: i32) -> String {
    format!("{vpc}-g{i}")
}

/// Vocabulary of the random worlds: a peer of a rule of a group of `vpc`.
pub fn random_peer(r: &mut StdRng, vpc: &str) -> SecurityGroupPeer {
    let other = if vpc == "va" { "vb" } else { "va" };
    match r.random_range(0..7) {
        0 => group_peer(&random_name(vpc, r.random_range(1..=3))),
        1 => group_peer(&random_name(vpc, 1)),
        2 => peered(&random_name(other, r.random_range(1..=2)), other),
        3 => cidr("10.1.0.0/29"),
        4 => cidr("10.1.0.4/30"),
        5 => cidr("10.2.0.0/24"),
        _ => cidr("0.0.0.0/0"),
    }
}

pub fn random_ports(r: &mut StdRng) -> Vec<SecurityGroupPort> {
    let all = [
        sgport("TCP", 80),
        sgport("TCP", 0),
        sgport("UDP", 53),
        sgport("ICMP", 8),
        sgport("ICMP", 0),
        sgport("TCP", 5432),
        sgport("TCP", 8080),
    ];
    match r.random_range(0..4) {
        0 => vec![],
        n => (0..n).map(|_| all.choose(r).unwrap().clone()).collect(),
    }
}

/// Random group `i` (1..3, its id) of `vpc`.
pub fn random_group(r: &mut StdRng, vpc: &str, i: i32) -> SecurityGroup {
    let mut rules = || -> Rules {
        (0..r.random_range(0..3))
            .map(|_| (random_peer(r, vpc), random_ports(r)))
            .collect()
    };
    let ingress = rules();
    let egress = rules();
    group(&random_name(vpc, i), vpc, i, ingress, egress)
}

/// Random memberships among groups 1..3.
pub fn random_groups_of(r: &mut StdRng) -> Vec<i32> {
    (1..=3).filter(|_| r.random_bool(0.4)).collect()
}
