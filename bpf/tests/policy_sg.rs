//! SecurityGroups in the datapath (`lib/policy.h`) through `BPF_PROG_TEST_RUN`: the
//! `policy` crate's `SgCompiler` compiles a VPC world (groups with rules by group, by a
//! peered VPC's group, by CIDR, TCP/UDP ports and ICMP types; grouped and ungrouped Ports
//! of two peered VPCs), its entries go into the maps through the `cozyplane_bpf::maps`
//! wrappers, and every probe between two endpoints is sent by the real `sdn_from_pod`,
//! once delivered on this node and once encapsulated towards another (with the source's
//! groups written into the tunnel option): each must get `policy::verdict::sg()`'s
//! verdict. Random worlds follow, changed Port by Port and group by group through the
//! compiler's incremental diffs. Needs root; fails (never skips) without it.
//!
//! Not reachable from a test run: `sdn_from_overlay`'s delivery (it needs the tunnel
//! device's metadata); it makes the same call with the option's groups.

mod common;
#[path = "../../policy/tests/sgkit/mod.rs"]
mod sgkit;

use std::net::IpAddr;

use common::fixtures::{VPC_A, VPC_B, cfg, drops_of, ip, port, total_drops};
use common::pkt::{self, ICMP, TCP};
use common::policy as pol;
use common::{Datapath, LO, TC_ACT_REDIRECT, TC_ACT_SHOT};
use cozyplane_bpf::abi::LAYER_SG;
use cozyplane_bpf::maps::pol_drops::{self, PolDropsMap};
use cozyplane_bpf::maps::{
    endpoints::{self, EndpointsMap},
    remotes::{self, RemotesMap},
    xnet_allow::{self, XnetAllowMap},
    xnet_routes::{self, XnetRoutesMap},
};
use cozyplane_bpf::{DatapathConfig, DropReason};
use cozyplane_policy::model::Tables;
use cozyplane_policy::sg::SgCompiler;
use cozyplane_policy::verdict::{self, Endpoint};
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use sgkit::{EPS, PROBES, cidr, group, port_obj, random_group, random_groups_of};

const FROM_POD: &str = "sdn_from_pod";

fn net_of(vpc: &str) -> u32 {
    if vpc == "va" { VPC_A } else { VPC_B }
}

fn mac_of(a: IpAddr) -> [u8; 6] {
    let IpAddr::V4(v) = a else { unreachable!() };
    let o = v.octets();
    [0x0a, 0x5e, o[0], o[1], o[2], o[3]]
}

/// The fixed world of `sgkit`, with the fixtures' nets.
fn fixed() -> SgCompiler {
    sgkit::fixed(VPC_A, VPC_B)
}

/// `tunnel_groups`: the source's groups not carried, in VXLAN-GBP's policy id, in a
/// Geneve option.
const NOT_CARRIED: u32 = 0;
const GBP: u32 = 1;
const GENEVE: u32 = 2;

/// Both VPCs' endpoints on this node (veth `lo`), peered both ways; the groups travel as
/// `tunnel_groups` says.
fn node(tunnel_groups: u32) -> Datapath {
    let mut dp = Datapath::load(&DatapathConfig {
        tunnel_groups,
        ..cfg()
    });
    let mut eps = EndpointsMap::try_from(dp.map_mut(endpoints::NAME)).unwrap();
    for (_, v, a) in EPS {
        eps.upsert(net_of(v), ip(a), LO, mac_of(ip(a))).unwrap();
    }
    let mut routes = XnetRoutesMap::try_from(dp.map_mut(xnet_routes::NAME)).unwrap();
    routes.upsert((VPC_A, ip("10.2.0.0"), 24), VPC_B).unwrap();
    routes.upsert((VPC_B, ip("10.1.0.0"), 24), VPC_A).unwrap();
    let mut allow = XnetAllowMap::try_from(dp.map_mut(xnet_allow::NAME)).unwrap();
    allow.allow(VPC_A, VPC_B).unwrap();
    allow.allow(VPC_B, VPC_A).unwrap();
    dp
}

/// Moves `d`'s endpoint to another node (`remote`) or back.
fn place(dp: &mut Datapath, net: u32, d: IpAddr, remote: bool) {
    if remote {
        EndpointsMap::try_from(dp.map_mut(endpoints::NAME))
            .unwrap()
            .remove(net, d)
            .unwrap();
        RemotesMap::try_from(dp.map_mut(remotes::NAME))
            .unwrap()
            .upsert(net, d, ip("192.168.10.2"))
            .unwrap();
    } else {
        RemotesMap::try_from(dp.map_mut(remotes::NAME))
            .unwrap()
            .remove(net, d)
            .unwrap();
        EndpointsMap::try_from(dp.map_mut(endpoints::NAME))
            .unwrap()
            .upsert(net, d, LO, mac_of(d))
            .unwrap();
    }
}

struct Tally {
    cases: usize,
    denied: u64,
    bad: Vec<String>,
}

/// Every probe between two distinct endpoints, delivered here and encapsulated: the
/// datapath's verdict against `verdict::sg`. Each run is a new flow (its own source port).
fn probe_all(dp: &mut Datapath, t: &Tables, label: &str, sport: &mut u16, tally: &mut Tally) {
    pol::clear_ct(dp);
    for (sn, sv, sa) in EPS {
        for (dn, dv, da) in EPS {
            if sn == dn {
                continue;
            }
            let (s, d) = (ip(sa), ip(da));
            let (snet, dnet) = (net_of(sv), net_of(dv));
            for (proto, dport) in PROBES {
                tally.cases += 1;
                let want = verdict::sg(
                    t,
                    Endpoint { net: snet, ip: s },
                    Endpoint { net: dnet, ip: d },
                    proto,
                    dport,
                )
                .allowed();
                for remote in [false, true] {
                    *sport = sport.checked_add(1).unwrap_or(10_000);
                    let (IpAddr::V4(s4), IpAddr::V4(d4)) = (s, d) else {
                        unreachable!()
                    };
                    let (sp, dp_) = if proto == ICMP {
                        (*sport, *sport)
                    } else {
                        (*sport, dport)
                    };
                    let p = pkt::ipv4(
                        mac_of(s),
                        cfg().gw_mac,
                        s4,
                        d4,
                        proto,
                        sp,
                        dp_,
                        (dport >> 8) as u8,
                    );
                    port(dp, LO, snet);
                    if remote {
                        place(dp, dnet, d, true);
                    }
                    let v = dp.run(FROM_POD, &p, LO, 0).verdict;
                    if remote {
                        place(dp, dnet, d, false);
                    }
                    assert!(v == TC_ACT_REDIRECT || v == TC_ACT_SHOT, "{label}: verdict {v}");
                    let got = v == TC_ACT_REDIRECT;
                    tally.denied += u64::from(!got);
                    if got != want {
                        tally.bad.push(format!(
                            "{label}: {sn} -> {dn} proto {proto}/{dport} ({}): datapath {got}, verdict {want}",
                            if remote { "encapsulated" } else { "delivered" }
                        ));
                    }
                }
            }
        }
    }
}

fn finish(dp: &Datapath, tally: &Tally, what: &str) {
    println!(
        "SecurityGroup differential ({what}): {} cases, {} program runs ({} denied), {} mismatches",
        tally.cases,
        tally.cases * 2,
        tally.denied,
        tally.bad.len()
    );
    assert!(
        tally.bad.is_empty(),
        "{} runs differ; first:\n{}",
        tally.bad.len(),
        tally.bad.iter().take(8).cloned().collect::<Vec<_>>().join("\n")
    );
    assert!(tally.denied > 0 && tally.denied < 2 * tally.cases as u64);
    assert_eq!(
        drops_of(dp, DropReason::PolSg),
        tally.denied,
        "every refusal is SG's"
    );
    assert_eq!(total_drops(dp), tally.denied, "and nothing else was dropped");
    // The per-net counters: the same refusals, as SecurityGroups', under the VPCs' nets.
    let rows = PolDropsMap::try_from(dp.map(pol_drops::NAME))
        .unwrap()
        .all()
        .unwrap();
    assert!(
        rows.iter()
            .all(|r| r.layer == LAYER_SG && r.reason == DropReason::PolSg && [VPC_A, VPC_B].contains(&r.net)),
        "{rows:?}"
    );
    assert_eq!(
        rows.iter().map(|r| r.stats.packets).sum::<u64>(),
        tally.denied,
        "sdn_pol_drops counts every refusal"
    );
}

// The fixed world: every probe, delivered and encapsulated (the source's groups in the
// VXLAN-GBP option: an encapsulated verdict is a redirect only if setting it succeeded).
#[test]
fn datapath_verdicts_equal_the_policy_crate_on_the_fixed_world() {
    let mut dp = node(GBP);
    let t = fixed().tables();
    pol::load(&mut dp, &t);
    let mut tally = Tally {
        cases: 0,
        denied: 0,
        bad: Vec::new(),
    };
    probe_all(&mut dp, &t, "fixed", &mut 10_000, &mut tally);
    // Spot checks of the semantics the world was written for.
    let e = |v: &str, a: &str| Endpoint {
        net: net_of(v),
        ip: ip(a),
    };
    assert!(verdict::sg(&t, e("va", "10.1.0.3"), e("va", "10.1.0.2"), TCP, 80).allowed());
    assert!(!verdict::sg(&t, e("va", "10.1.0.2"), e("va", "10.1.0.3"), TCP, 80).allowed());
    assert!(verdict::sg(&t, e("va", "10.1.0.4"), e("va", "10.1.0.2"), TCP, 443).allowed());
    assert!(verdict::sg(&t, e("vb", "10.2.0.2"), e("va", "10.1.0.2"), TCP, 8080).allowed());
    assert!(verdict::sg(&t, e("va", "10.1.0.4"), e("va", "10.1.0.7"), TCP, 22).allowed());
    finish(&dp, &tally, "fixed world");
}

// Random worlds: three groups per VPC with random rules, random memberships; each step
// changes one group's rules or one Port's groups through the compiler, and only the diff
// is written (adds before removes); the table is emptied between steps, so every probe
// is a first packet. Encapsulated with the groups in a Geneve option.
#[test]
fn datapath_verdicts_equal_the_policy_crate_on_random_worlds() {
    const STEPS: usize = 12;
    let mut dp = node(GENEVE);
    let mut r = StdRng::seed_from_u64(4614);
    let mut c = SgCompiler::new();
    let mut loaded = Tables::default();
    let mut write = |dp: &mut Datapath, d: cozyplane_policy::Diff| {
        pol::apply(dp, &d);
        d.apply(&mut loaded);
        loaded.clone()
    };
    write(&mut dp, c.set_vpc("t1", "va", VPC_A));
    write(&mut dp, c.set_vpc("t1", "vb", VPC_B));
    for vpc in ["va", "vb"] {
        for i in 1..=3 {
            write(&mut dp, c.set_group(&random_group(&mut r, vpc, i)));
        }
    }
    let mut t = Tables::default();
    for (n, v, a) in EPS {
        let groups = random_groups_of(&mut r);
        t = write(&mut dp, c.set_port(&port_obj(n, v, a, &groups)));
    }
    let mut tally = Tally {
        cases: 0,
        denied: 0,
        bad: Vec::new(),
    };
    let mut sport = 10_000;
    for step in 0..STEPS {
        assert_eq!(t, c.tables(), "the diffs rebuild the compiler's tables");
        probe_all(&mut dp, &t, &format!("step {step}"), &mut sport, &mut tally);
        t = if step % 2 == 0 {
            let vpc = ["va", "vb"].choose(&mut r).unwrap();
            let i = r.random_range(1..=3);
            write(&mut dp, c.set_group(&random_group(&mut r, vpc, i)))
        } else {
            let (n, v, a) = *EPS.choose(&mut r).unwrap();
            let groups = random_groups_of(&mut r);
            write(&mut dp, c.set_port(&port_obj(n, v, a, &groups)))
        };
    }
    finish(&dp, &tally, "random worlds");
}

// The source's groups on the wire: VXLAN-GBP's 16-bit policy id holds a bitmap of groups
// 1..15 with bit 0 set (a source with a higher group sends 0, "look it up"); a Geneve
// option holds all 62. What the datapath writes is not readable back from a test run (the
// tunnel key is the kernel's), so this checks that encapsulation with each option succeeds
// on this kernel for both kinds of source (the helper refuses an option without a tunnel
// key set first, or of a bad size), and that without one the same packets go too.
#[test]
fn encapsulation_carries_the_groups_option() {
    for mode in [NOT_CARRIED, GBP, GENEVE] {
        let mut dp = node(mode);
        let mut c = fixed();
        // A group id above 15, which the policy id cannot carry, allowed to free (ungrouped).
        c.set_group(&group(
            "many",
            "va",
            40,
            vec![],
            vec![(cidr("10.1.0.4/32"), vec![])],
        ));
        c.set_port(&port_obj("free2", "va", "10.1.0.7", &[40]));
        let t = c.tables();
        pol::load(&mut dp, &t);
        let e = |a: &str| Endpoint {
            net: VPC_A,
            ip: ip(a),
        };
        for (src, dst, sport) in [("10.1.0.3", "10.1.0.2", 30000), ("10.1.0.7", "10.1.0.4", 30001)] {
            assert!(
                verdict::sg(&t, e(src), e(dst), TCP, 80).allowed(),
                "{src} -> {dst}"
            );
            place(&mut dp, VPC_A, ip(dst), true);
            port(&mut dp, LO, VPC_A);
            let (IpAddr::V4(s), IpAddr::V4(d)) = (ip(src), ip(dst)) else {
                unreachable!()
            };
            let p = pkt::ipv4(mac_of(ip(src)), cfg().gw_mac, s, d, TCP, sport, 80, 0);
            assert_eq!(
                dp.run(FROM_POD, &p, LO, 0).verdict,
                TC_ACT_REDIRECT,
                "{src} with tunnel_groups {mode}"
            );
        }
        assert_eq!(total_drops(&dp), 0);
    }
}
