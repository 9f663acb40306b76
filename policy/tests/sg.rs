//! SecurityGroups compile into entries whose verdicts are the documented semantics: grouped
//! endpoints are default-deny both ways; rules admit by group, by a peered VPC's group, by
//! CIDR, per protocol and port, ICMP by type; ungrouped endpoints stay open; a Port's
//! relabel rewrites only its member entry; refused constructs allow nothing.

mod sgkit;

use std::net::IpAddr;

use cozyplane_apis::v1alpha1::SecurityGroup;
use cozyplane_policy::model::proto;
use cozyplane_policy::sg::SgCompiler;
use cozyplane_policy::verdict::{self, Endpoint};
use cozyplane_policy::{Reason, Tables};
use proptest::prelude::*;
use sgkit::{cidr, group, group_peer, peered, port_obj, sgport as port};

const VA: u32 = 100;
const VB: u32 = 200;

fn web() -> SecurityGroup {
    group(
        "web",
        "va",
        1,
        vec![
            (group_peer("app"), vec![port("TCP", 80), port("ICMP", 8)]),
            (cidr("203.0.113.0/24"), vec![port("TCP", 443)]),
        ],
        vec![],
    )
}

fn setup() -> SgCompiler {
    let mut c = SgCompiler::new();
    c.set_vpc("t1", "va", VA);
    c.set_vpc("t1", "vb", VB);
    c.set_group(&web());
    c.set_group(&group(
        "app",
        "va",
        2,
        vec![],
        vec![
            (group_peer("web"), vec![]),
            (cidr("0.0.0.0/0"), vec![port("UDP", 53)]),
            (peered("peer", "vb"), vec![port("TCP", 5432)]),
        ],
    ));
    c.set_group(&group("db", "va", 3, vec![], vec![]));
    c.set_group(&group(
        "peer",
        "vb",
        1,
        vec![(peered("app", "va"), vec![port("TCP", 5432)])],
        vec![],
    ));
    for (n, v, ip, g) in [
        ("p-web", "va", "10.1.0.2", &[1][..]),
        ("p-app", "va", "10.1.0.3", &[2]),
        ("p-free", "va", "10.1.0.4", &[]),
        ("p-free2", "va", "10.1.0.7", &[]),
        ("p-db", "va", "10.1.0.5", &[3]),
        ("p-multi", "va", "10.1.0.6", &[1, 2]),
        ("p-peer", "vb", "10.2.0.2", &[1]),
    ] {
        c.set_port(&port_obj(n, v, ip, g));
    }
    c
}

fn ep(net: u32, ip: &str) -> Endpoint {
    Endpoint {
        net,
        ip: ip.parse::<IpAddr>().unwrap(),
    }
}

fn allowed(t: &Tables, s: Endpoint, d: Endpoint, pr: u8, port: u16) -> bool {
    verdict::sg(t, s, d, pr, port).allowed()
}

#[test]
fn groups_are_default_deny_and_rules_reopen_by_group_peer_group_and_cidr() {
    let c = setup();
    let t = c.tables();
    let (web, app, free, free2, db, multi, peer) = (
        ep(VA, "10.1.0.2"),
        ep(VA, "10.1.0.3"),
        ep(VA, "10.1.0.4"),
        ep(VA, "10.1.0.7"),
        ep(VA, "10.1.0.5"),
        ep(VA, "10.1.0.6"),
        ep(VB, "10.2.0.2"),
    );
    let tcp = proto::TCP;
    assert!(allowed(&t, app, web, tcp, 80), "by group");
    assert!(!allowed(&t, app, web, tcp, 81), "other port");
    assert!(!allowed(&t, app, web, proto::UDP, 80), "other protocol");
    assert!(
        !allowed(&t, free, web, tcp, 80),
        "ungrouped source, grouped destination"
    );
    assert!(
        !allowed(&t, web, free, tcp, 80),
        "grouped source without egress rules"
    );
    assert!(allowed(&t, free, free2, tcp, 1234), "ungrouped stay open");
    assert!(
        !allowed(&t, app, db, tcp, 80),
        "a group without rules admits nothing"
    );
    assert!(allowed(&t, multi, web, tcp, 80), "one of several groups suffices");
    assert!(allowed(&t, ep(VA, "203.0.113.7"), web, tcp, 443), "by CIDR");
    assert!(
        !allowed(&t, ep(VA, "203.0.114.7"), web, tcp, 443),
        "outside the CIDR"
    );
    assert!(
        !allowed(&t, ep(VA, "203.0.113.7"), web, tcp, 80),
        "CIDR rule's port only"
    );
    assert!(
        allowed(&t, app, ep(VA, "8.8.8.8"), proto::UDP, 53),
        "egress by CIDR"
    );
    assert!(
        !allowed(&t, app, ep(VA, "8.8.8.8"), tcp, 53),
        "egress CIDR rule's protocol only"
    );
    assert!(
        !allowed(&t, app, ep(VA, "2001:db8::1"), proto::UDP, 53),
        "0.0.0.0/0 is not IPv6"
    );
    assert!(allowed(&t, app, peer, tcp, 5432), "by a peered VPC's group");
    assert!(!allowed(&t, app, peer, tcp, 5433), "peered rule's port only");
    assert!(
        allowed(&t, multi, peer, tcp, 5432),
        "peer admits group app of va: multi is in it"
    );
    assert!(!allowed(&t, web, peer, tcp, 5432), "web is not");
    assert!(
        allowed(&t, app, web, proto::ICMP, 8 << 8),
        "ICMP echo request by type"
    );
    assert!(
        allowed(&t, app, web, proto::ICMP, (8 << 8) | 3),
        "any code of the type"
    );
    assert!(!allowed(&t, app, web, proto::ICMP, 13 << 8), "other ICMP type");
}

#[test]
fn a_port_relabel_rewrites_only_its_member_entry() {
    let mut c = setup();
    let d = c.set_port(&port_obj("p-free", "va", "10.1.0.4", &[2]));
    assert!(d.rules.is_empty() && d.cidrs.is_empty(), "{d:?}");
    assert_eq!(d.sg_members.len(), 1);
    assert!(
        d.narrows(),
        "joining a group is default-deny: established flows are re-checked"
    );
    let t = c.tables();
    assert!(verdict::sg(&t, ep(VA, "10.1.0.4"), ep(VA, "10.1.0.2"), proto::TCP, 80).allowed());
    // Leaving every group: the entry goes, the endpoint is open again, and that narrows
    // what grouped peers admit (it no longer carries group app).
    let d = c.set_port(&port_obj("p-free", "va", "10.1.0.4", &[]));
    assert_eq!(d.sg_members.remove.len(), 1);
    assert!(d.narrows());
    assert!(
        !verdict::sg(
            &c.tables(),
            ep(VA, "10.1.0.4"),
            ep(VA, "10.1.0.2"),
            proto::TCP,
            80
        )
        .allowed()
    );
}

#[test]
fn removing_a_rule_narrows_and_cuts_what_it_alone_allowed() {
    let mut c = setup();
    let mut w = web();
    w.spec.ingress.remove(0);
    let d = c.set_group(&w);
    assert!(d.narrows(), "established flows must be re-checked");
    assert!(!d.rules.remove.is_empty());
    let t = c.tables();
    assert!(!verdict::sg(&t, ep(VA, "10.1.0.3"), ep(VA, "10.1.0.2"), proto::TCP, 80).allowed());
    assert!(verdict::sg(&t, ep(VA, "203.0.113.7"), ep(VA, "10.1.0.2"), proto::TCP, 443).allowed());
    // Only va's partition was rewritten: vb's entries are untouched.
    assert!(
        d.rules
            .upsert
            .iter()
            .map(|(k, _)| k)
            .chain(&d.rules.remove)
            .all(|k| k.net == VA)
    );
}

#[test]
fn refused_constructs_allow_nothing_and_are_reported() {
    let mut c = setup();
    c.set_group(&group(
        "web",
        "va",
        1,
        vec![
            (group_peer("nope"), vec![]),
            (cidr("not-a-cidr"), vec![]),
            (group_peer("app"), vec![port("GRE", 0)]),
        ],
        vec![],
    ));
    let reasons: Vec<Reason> = c.warnings().map(|w| w.reason.clone()).collect();
    assert!(
        reasons.contains(&Reason::UnknownGroup("t1/nope".into())),
        "{reasons:?}"
    );
    assert!(
        reasons.contains(&Reason::Cidr("not-a-cidr".into())),
        "{reasons:?}"
    );
    assert!(reasons.contains(&Reason::Protocol("GRE".into())), "{reasons:?}");
    let t = c.tables();
    for (pr, port) in [(proto::TCP, 80), (proto::UDP, 53), (proto::ICMP, 8 << 8)] {
        assert!(
            !verdict::sg(&t, ep(VA, "10.1.0.3"), ep(VA, "10.1.0.2"), pr, port).allowed(),
            "{pr}/{port} widened by a refused construct"
        );
    }
}

#[test]
fn order_of_arrival_does_not_matter_and_rules_are_named() {
    // Ports and groups before their VPCs, then the VPCs: the same maps as setup().
    let mut c = SgCompiler::new();
    c.set_port(&port_obj("p-web", "va", "10.1.0.2", &[1]));
    c.set_port(&port_obj("p-app", "va", "10.1.0.3", &[2]));
    c.set_group(&web());
    c.set_group(&group("app", "va", 2, vec![], vec![]));
    c.remove_port("never-existed");
    let d = c.set_vpc("t1", "va", VA);
    assert!(!d.sg_members.upsert.is_empty(), "members appear with their VPC");
    let t = c.tables();
    assert!(
        verdict::sg(&t, ep(VA, "10.1.0.3"), ep(VA, "10.1.0.2"), proto::TCP, 80)
            .ingress
            .allows()
    );
    let verdict::Check::Rule(id) =
        verdict::sg(&t, ep(VA, "203.0.113.9"), ep(VA, "10.1.0.2"), proto::TCP, 443).ingress
    else {
        panic!("admitted by a rule");
    };
    assert_eq!(c.rule_name(id), Some("SecurityGroup t1/web spec.ingress[1]"));
}

#[test]
fn build_compiles_the_same_tables_as_feeding_one_by_one() {
    let vpcs = [
        (sgkit::NS.to_string(), "va".to_string(), VA),
        (sgkit::NS.to_string(), "vb".to_string(), VB),
    ];
    let built = SgCompiler::build(vpcs, &sgkit::fixed_groups(), &sgkit::fixed_ports());
    assert_eq!(built.tables(), sgkit::fixed(VA, VB).tables());
}

#[test]
fn explain_names_the_rule_that_admits_this_peer() {
    // Two rules of web admit TCP 80, from app and from db: the compiled entry merges them and
    // keeps the lowest id, whichever peer it names; explain names the peer's own rule.
    let mut c = SgCompiler::new();
    c.set_vpc("t1", "va", VA);
    c.set_group(&group(
        "web",
        "va",
        1,
        vec![
            (group_peer("app"), vec![port("TCP", 80)]),
            (group_peer("db"), vec![port("TCP", 80)]),
            (cidr("10.1.0.0/24"), vec![port("UDP", 53)]),
        ],
        vec![],
    ));
    c.set_group(&group("app", "va", 2, vec![], vec![(cidr("0.0.0.0/0"), vec![])]));
    c.set_group(&group("db", "va", 3, vec![], vec![(cidr("0.0.0.0/0"), vec![])]));
    for (n, ip, g) in [
        ("p-web", "10.1.0.2", 1),
        ("p-app", "10.1.0.3", 2),
        ("p-db", "10.1.0.5", 3),
    ] {
        c.set_port(&port_obj(n, "va", ip, &[g]));
    }
    let t = c.tables();
    for (src, groups, want) in [("10.1.0.3", 1u64 << 2, 0), ("10.1.0.5", 1 << 3, 1)] {
        let d = verdict::sg_detail(&t, ep(VA, src), ep(VA, "10.1.0.2"), proto::TCP, 80);
        assert!(d.verdict().allowed());
        let (g, how) = d.ingress.by.expect("admitted by a group");
        assert_eq!(g, 1);
        let r = c
            .explain(
                VA,
                cozyplane_policy::Dir::Ingress,
                g,
                how,
                (VA, src.parse().unwrap(), groups),
                proto::TCP,
                80,
            )
            .expect("a rule");
        assert_eq!((r.name.as_str(), r.index), ("web", want), "{src}");
    }
    let d = verdict::sg_detail(&t, ep(VA, "10.1.0.3"), ep(VA, "10.1.0.2"), proto::UDP, 53);
    let (g, how) = d.ingress.by.unwrap();
    assert!(matches!(how, verdict::PeerMatch::Class(_)), "{how:?}");
    let r = c.explain(
        VA,
        cozyplane_policy::Dir::Ingress,
        g,
        how,
        (VA, "10.1.0.3".parse().unwrap(), 1 << 2),
        proto::UDP,
        53,
    );
    assert_eq!(r.map(|r| r.index), Some(2), "by CIDR");
}

#[test]
fn every_admitted_direction_of_the_fixed_world_is_explained() {
    let c = sgkit::fixed(VA, VB);
    let t = c.tables();
    let net = |v: &str| if v == "va" { VA } else { VB };
    let mut explained = 0;
    for (_, sv, sa) in sgkit::EPS {
        for (_, dv, da) in sgkit::EPS {
            for (pr, p) in sgkit::PROBES {
                let (s, d) = (ep(net(sv), sa), ep(net(dv), da));
                let v = verdict::sg_detail(&t, s, d, pr, p);
                for (dir, k, me, peer) in [
                    (cozyplane_policy::Dir::Egress, v.egress, s, d),
                    (cozyplane_policy::Dir::Ingress, v.ingress, d, s),
                ] {
                    if let Some((g, how)) = k.by {
                        let theirs = t.sg_members.get(&(peer.net, peer.ip)).copied().unwrap_or(0);
                        let r = c.explain(me.net, dir, g, how, (peer.net, peer.ip, theirs), pr, p);
                        assert!(r.is_some_and(|r| r.dir == dir), "{sa} -> {da} {pr}/{p} {dir:?}");
                        explained += 1;
                    }
                }
            }
        }
    }
    assert!(explained > 20, "{explained}");
}

/// A random group of VPC va or vb: rules by local group, peered group, CIDR.
fn random_group(r: &[u8]) -> SecurityGroup {
    let names = ["web", "app", "db", "peer"];
    let name = names[r[0] as usize % 4];
    let vpc = if name == "peer" { "vb" } else { "va" };
    let id = 1 + i32::from(r[1] % 4);
    let peer = |b: u8| match b % 5 {
        0 => group_peer(names[(b / 5) as usize % 3]),
        1 => peered("peer", "vb"),
        2 => peered("app", "va"),
        3 => cidr(["10.0.0.0/8", "10.1.0.0/24", "0.0.0.0/0", "::/0"][(b / 5) as usize % 4]),
        _ => cidr("203.0.113.0/24"),
    };
    let ports = |b: u8| match b % 4 {
        0 => vec![],
        1 => vec![port("TCP", 80)],
        2 => vec![port("UDP", 53), port("ICMP", 8)],
        _ => vec![port("TCP", 0)],
    };
    let ingress = r[2..4]
        .iter()
        .map(|b| (peer(*b), ports(b / 3)))
        .take(r[4] as usize % 3)
        .collect();
    let egress = r[5..7]
        .iter()
        .map(|b| (peer(*b), ports(b / 7)))
        .take(r[7] as usize % 3)
        .collect();
    group(name, vpc, id, ingress, egress)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Incremental SecurityGroup compilation and its diffs equal a fresh compile of the final
    /// state, whatever the order of VPCs, groups and Ports.
    #[test]
    fn sg_incremental_equals_full(ops in prop::collection::vec(prop::collection::vec(any::<u8>(), 9), 1..30)) {
        let mut c = SgCompiler::new();
        let mut applied = Tables::default();
        let mut groups = std::collections::BTreeMap::new();
        let mut ports = std::collections::BTreeMap::new();
        let mut vpcs = std::collections::BTreeMap::new();
        for r in &ops {
            let d = match r[8] % 6 {
                0 | 1 => {
                    let g = random_group(r);
                    groups.insert(g.metadata.name.clone().unwrap(), g.clone());
                    c.set_group(&g)
                }
                2 => {
                    let name = ["web", "app", "db", "peer"][r[0] as usize % 4];
                    groups.remove(name);
                    c.remove_group("t1", name)
                }
                3 => {
                    let n = r[0] % 6;
                    let (vpc, ip) = if n < 4 { ("va", format!("10.1.0.{n}")) } else { ("vb", format!("10.2.0.{n}")) };
                    let gs: Vec<i32> = (1..=4).filter(|g| r[1] & (1 << g) != 0).collect();
                    let p = port_obj(&format!("p{n}"), vpc, &ip, &gs);
                    ports.insert(n, p.clone());
                    c.set_port(&p)
                }
                4 => {
                    let n = r[0] % 6;
                    ports.remove(&n);
                    c.remove_port(&format!("p{n}"))
                }
                _ => {
                    let (name, net) = if r[0] % 2 == 0 { ("va", VA) } else { ("vb", VB) };
                    if r[1] % 3 == 0 {
                        vpcs.remove(name);
                        c.remove_vpc("t1", name)
                    } else {
                        vpcs.insert(name, net);
                        c.set_vpc("t1", name, net)
                    }
                }
            };
            d.apply(&mut applied);
        }
        let mut full = SgCompiler::new();
        for (n, net) in &vpcs {
            full.set_vpc("t1", n, *net);
        }
        for g in groups.values() {
            full.set_group(g);
        }
        for p in ports.values() {
            full.set_port(p);
        }
        prop_assert!(c.tables() == full.tables(), "incremental differs from a fresh compile");
        prop_assert!(applied == c.tables(), "the diffs do not rebuild the maps");
    }
}
