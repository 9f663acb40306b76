//! NetworkPolicy in the datapath (`lib/policy.h`, `lib/pct.h`) through
//! `BPF_PROG_TEST_RUN`: the `policy` crate compiles generated policy sets (the truth-table
//! generator of `policy/tests`, three namespaces × three labelled pods and two outside
//! addresses), its entries are written into the maps through the `cozyplane_bpf::maps`
//! wrappers, and every probe is run through the real programs — `sdn_from_pod` (the
//! source's egress side) and `sdn_to_pod` (the destination's delivery), each on a fresh
//! flow — and must get the verdict `policy::verdict::np()` gives. Then the connection
//! table: replies pass by state where the rules would refuse them, a flow's entry is the
//! key `policy::ct` computes, a rule removal plus a generation bump stops an established
//! flow at its next packet, ICMP errors pass with their flow, the node reaches its pods.
//! Needs root; fails (never skips) without it.

mod common;

#[allow(
    dead_code,
    unreachable_pub,
    clippy::all,
    reason = "the policy crate's generator, shared"
)]
#[path = "../../policy/tests/common/mod.rs"]
mod npgen;

use std::net::IpAddr;

use common::fixtures::{cfg, drops_of, ip, total_drops};
use common::pkt::{self, UDP};
use common::policy::{self as pol, ACK, FIN, SYN, mac_of, node, passes, probe};
use common::{Datapath, LO, TC_ACT_OK, TC_ACT_SHOT};
use cozyplane_bpf::DropReason;
use cozyplane_bpf::abi::{LAYER_NP, Pct};
use cozyplane_bpf::maps::pol_drops::{self, PolDropsMap};
use cozyplane_policy::ct;
use cozyplane_policy::model::{Diff, Tables};
use cozyplane_policy::np::{NamespaceInfo, NpCompiler, PodInfo};
use cozyplane_policy::verdict;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use npgen::oracle::{self, End};
use npgen::{OUTSIDE, PROBES, World, proto_num};
use rand::SeedableRng;
use rand::rngs::StdRng;

const FROM_POD: &str = "sdn_from_pod";
const TO_POD: &str = "sdn_to_pod";
/// Policy sets of the differential test (each probed over the whole matrix).
const SETS: u64 = 40;

// The differential test: for generated policy sets, both hooks give, for every probe,
// the verdict the policy crate computes from the same entries (and the independent oracle
// agrees with both). Between sets only the entry-level difference is written, as the agent
// does.
#[test]
fn datapath_verdicts_equal_the_policy_crate_on_generated_policy_sets() {
    let world = World::new();
    let pods: Vec<IpAddr> = world.pods.iter().map(|p| p.ip).collect();
    let mut dp = node(&pods);
    let outside: Vec<IpAddr> = OUTSIDE.iter().map(|a| a.parse().unwrap()).collect();
    let mut ends: Vec<End> = world.pods.iter().map(End::Pod).collect();
    ends.extend(outside.iter().map(|a| End::Addr(*a)));
    let at = |e: &End| match e {
        End::Pod(p) => p.ip,
        End::Addr(a) => *a,
    };

    let mut rng = StdRng::seed_from_u64(1414);
    let mut loaded = Tables::default();
    let (mut cases, mut runs, mut denied_runs, mut bad) = (0usize, 0u64, 0u64, Vec::new());
    let mut sport = 10_000u16;
    for set in 0..SETS {
        let n = 1 + (set % 3) as usize;
        let pols: Vec<NetworkPolicy> = (0..n)
            .map(|i| npgen::policy(&mut rng, &format!("p{set}-{i}")))
            .collect();
        let t = NpCompiler::build(world.namespaces(), world.pod_infos(), &pols).tables();
        pol::apply(&mut dp, &Diff::between(&loaded, &t));
        loaded = t;
        pol::clear_ct(&mut dp);
        for s in &ends {
            for d in &ends {
                if at(s) == at(d) || matches!((s, d), (End::Addr(_), End::Addr(_))) {
                    continue;
                }
                for (pr, dport) in PROBES {
                    cases += 1;
                    let proto = proto_num(pr);
                    let want = verdict::np(&loaded, at(s), at(d), proto, dport).allowed();
                    let oracle = oracle::allowed(&pols, &world.ns_labels, s, d, pr, dport);
                    assert_eq!(want, oracle, "set {set}: the policy crate and its oracle differ");
                    // Each hook on a flow of its own (a new source port), so neither
                    // passes by the other's entry.
                    let mut hooks = Vec::new();
                    if matches!(s, End::Pod(_)) {
                        hooks.push(FROM_POD);
                    }
                    if matches!(d, End::Pod(_)) {
                        hooks.push(TO_POD);
                    }
                    for hook in hooks {
                        sport = sport.checked_add(1).unwrap_or(10_000);
                        let got = passes(&dp, hook, &probe(at(s), at(d), proto, sport, dport));
                        runs += 1;
                        denied_runs += u64::from(!got);
                        if got != want {
                            bad.push(format!(
                                "set {set}: {hook} {} -> {} {pr}/{dport}: datapath {got}, verdict {want}",
                                at(s),
                                at(d)
                            ));
                        }
                    }
                }
            }
        }
    }
    println!(
        "NetworkPolicy differential: {SETS} policy sets, {cases} cases, {runs} program runs \
         ({denied_runs} denied), {} mismatches",
        bad.len()
    );
    assert!(
        denied_runs > 0 && denied_runs < runs,
        "the sets must both admit and refuse"
    );
    assert!(
        bad.is_empty(),
        "{} runs differ; first:\n{}",
        bad.len(),
        bad.iter().take(8).cloned().collect::<Vec<_>>().join("\n")
    );
    // Every refusal is counted as NetworkPolicy's, and nothing else was dropped; the
    // per-net counters say the same, under net 0 and the NetworkPolicy layer.
    assert_eq!(drops_of(&dp, DropReason::PolNp), denied_runs);
    assert_eq!(total_drops(&dp), denied_runs);
    assert_eq!(
        pol_drops(&dp),
        vec![(0, LAYER_NP, DropReason::PolNp, denied_runs)],
        "sdn_pol_drops"
    );
}

/// `sdn_pol_drops` as `(net, layer, reason, packets)` rows.
fn pol_drops(dp: &Datapath) -> Vec<(u32, u8, DropReason, u64)> {
    PolDropsMap::try_from(dp.map(pol_drops::NAME))
        .unwrap()
        .all()
        .unwrap()
        .into_iter()
        .map(|r| (r.net, r.layer, r.reason, r.stats.packets))
        .collect()
}

// ---- the connection table -------------------------------------------------------------

/// A world of two namespaces' pods: `x/a` 10.0.1.2, `x/b` 10.0.1.3, `y/c` 10.0.2.2 and an
/// IPv6 pod `x/v6` fd00::2 beside `x/w6` fd00::3.
struct Small {
    ns: Vec<NamespaceInfo>,
    pods: Vec<PodInfo>,
}

const A: &str = "10.0.1.2";
const B: &str = "10.0.1.3";
const C: &str = "10.0.2.2";
const V6: &str = "fd00::2";
const W6: &str = "fd00::3";
const NODE: &str = "192.168.10.1";

fn small() -> Small {
    let ns = ["x", "y"]
        .iter()
        .map(|n| NamespaceInfo {
            name: (*n).into(),
            labels: npgen::labels(&[("kubernetes.io/metadata.name", n)]),
        })
        .collect();
    let pod = |ns: &str, name: &str, addr: &str| PodInfo {
        ns: ns.into(),
        name: name.into(),
        labels: npgen::labels(&[("pod", name)]),
        ips: vec![ip(addr)],
        host_network: false,
        named_ports: vec![],
    };
    Small {
        ns,
        pods: vec![
            pod("x", "a", A),
            pod("x", "b", B),
            pod("y", "c", C),
            pod("x", "v6", V6),
            pod("x", "w6", W6),
        ],
    }
}

/// A NetworkPolicy from its JSON form.
fn policy_json(json: &str) -> NetworkPolicy {
    serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"))
}

/// `a` (and `v6`) accept TCP 80 from pods of `x` and send nothing new: isolated both ways.
fn a_locked() -> NetworkPolicy {
    policy_json(
        r#"{"metadata":{"namespace":"x","name":"lock-a"},
            "spec":{"podSelector":{"matchExpressions":[{"key":"pod","operator":"In","values":["a","v6"]}]},
                    "policyTypes":["Ingress","Egress"],
                    "ingress":[{"from":[{"podSelector":{}}],"ports":[{"protocol":"TCP","port":80}]}]}}"#,
    )
}

/// `a` (and `v6`) refuse everything (the allowing rule removed).
fn a_closed() -> NetworkPolicy {
    policy_json(
        r#"{"metadata":{"namespace":"x","name":"lock-a"},
            "spec":{"podSelector":{"matchExpressions":[{"key":"pod","operator":"In","values":["a","v6"]}]},
                    "policyTypes":["Ingress","Egress"]}}"#,
    )
}

fn compile(w: &Small, pols: &[NetworkPolicy], node: Option<&str>) -> Tables {
    let mut t = NpCompiler::build(w.ns.clone(), w.pods.clone(), pols).tables();
    // The node's own addresses (the HostFirewall compiler's sdn_hf_self).
    t.hf_self.extend(node.map(ip));
    t
}

fn setup(pols: &[NetworkPolicy]) -> (Datapath, Small, Tables) {
    let w = small();
    let mut dp = node(&[ip(A), ip(B), ip(C), ip(V6), ip(W6)]);
    let t = compile(&w, pols, Some(NODE));
    pol::load(&mut dp, &t);
    (dp, w, t)
}

fn send(dp: &Datapath, hook: &str, s: &str, d: &str, sport: u16, dport: u16, flags: u8) -> u32 {
    let p = pol::tcp(mac_of(ip(s)), cfg().gw_mac, ip(s), ip(d), sport, dport, flags);
    dp.run(hook, &p, LO, 0).verdict
}

// A flow the rules admit in one direction only: b's SYN to a:80 is admitted, a's replies
// pass by the connection table although a may open nothing (its egress is isolated with no
// rule), at both hooks; a's own SYN and a's mid-flow segment of an unknown flow are refused
// with their reasons. Both families.
#[test]
fn replies_are_admitted_by_state_and_nothing_else_is() {
    let (dp, _, t) = setup(&[a_locked()]);
    for (a, b) in [(A, B), (V6, W6)] {
        assert!(verdict::np(&t, ip(b), ip(a), 6, 80).allowed());
        assert!(
            !verdict::np(&t, ip(a), ip(b), 6, 40000).allowed(),
            "a may open nothing"
        );

        assert_eq!(
            send(&dp, FROM_POD, b, a, 40000, 80, SYN),
            TC_ACT_OK,
            "{b} -> {a} SYN"
        );
        assert_eq!(send(&dp, TO_POD, b, a, 40000, 80, SYN), TC_ACT_OK);
        for hook in [FROM_POD, TO_POD] {
            assert_eq!(
                send(&dp, hook, a, b, 80, 40000, SYN | ACK),
                TC_ACT_OK,
                "{hook} SYN-ACK"
            );
        }
        assert_eq!(send(&dp, FROM_POD, b, a, 40000, 80, ACK), TC_ACT_OK);
        assert_eq!(
            send(&dp, FROM_POD, a, b, 80, 40000, ACK),
            TC_ACT_OK,
            "data from a"
        );
    }
    assert_eq!(total_drops(&dp), 0);

    assert_eq!(
        send(&dp, FROM_POD, A, B, 40001, 80, SYN),
        TC_ACT_SHOT,
        "a opens nothing"
    );
    assert_eq!(drops_of(&dp, DropReason::PolNp), 1);
    // A segment of no known flow cannot open one, even where a SYN would be admitted.
    assert_eq!(send(&dp, TO_POD, B, A, 40002, 80, ACK), TC_ACT_SHOT);
    assert_eq!(send(&dp, FROM_POD, A, B, 80, 40003, SYN | ACK), TC_ACT_SHOT);
    assert_eq!(drops_of(&dp, DropReason::PolCtInvalid), 2);
    assert_eq!(total_drops(&dp), 3);
}

// A segment of a flow the table never saw (it began before the table, or before its pod
// had an identity here) passes between pods no policy isolates in either direction, and
// makes no entry; the same segment to or from an isolated pod is refused.
#[test]
fn unknown_flows_of_pods_no_policy_concerns_are_spared() {
    let (dp, _, _) = setup(&[a_locked()]);
    for (hook, s, d) in [(FROM_POD, B, C), (TO_POD, C, B)] {
        assert_eq!(
            send(&dp, hook, s, d, 40000, 5000, ACK),
            TC_ACT_OK,
            "{hook} {s} -> {d}"
        );
    }
    assert_eq!(pol::ct_entries(&dp).len(), 0, "no entry for a segment");
    assert_eq!(total_drops(&dp), 0);
    assert_eq!(
        send(&dp, TO_POD, C, A, 40000, 5000, ACK),
        TC_ACT_SHOT,
        "a's ingress is isolated"
    );
    assert_eq!(
        send(&dp, FROM_POD, W6, V6, 40000, 5000, ACK),
        TC_ACT_SHOT,
        "v6 too"
    );
    assert_eq!(drops_of(&dp, DropReason::PolCtInvalid), 2);
}

// The entry the datapath made is the one `policy::ct` describes: canonical key (one entry
// for both directions, side a sorting first), the initiator, the TCP state after the
// handshake, and a FIN from each side closing it.
#[test]
fn the_entry_is_the_policy_crates_key_and_state() {
    let (dp, _, _) = setup(&[a_locked()]);
    assert_eq!(send(&dp, FROM_POD, B, A, 40000, 80, SYN), TC_ACT_OK);
    let entries = pol::ct_entries(&dp);
    assert_eq!(entries.len(), 1);
    let (k, e) = entries[0];
    let side = |a: &str, port: u16| ct::Side {
        ip: ip(a),
        port,
        net: 0,
    };
    let (want, from_b) = ct::key(side(B, 40000), side(A, 80), 6);
    let got_a: IpAddr = k.a.into();
    let got_b: IpAddr = k.b.into();
    assert_eq!((got_a, u16::from_be(k.port_a)), (want.a.ip, want.a.port));
    assert_eq!((got_b, u16::from_be(k.port_b)), (want.b.ip, want.b.port));
    assert_eq!((k.net_a, k.net_b, k.proto), (0, 0, 6));
    assert_eq!(e.flags & Pct::F_INIT_B != 0, from_b, "the initiator");
    assert_eq!(e.tcp, Pct::TCP_SYN_SENT);
    assert_eq!(e.generation, pol::state(&dp).generation);

    assert_eq!(send(&dp, TO_POD, A, B, 80, 40000, SYN | ACK), TC_ACT_OK);
    let (_, e) = pol::ct_entries(&dp)[0];
    assert_eq!(e.tcp, Pct::TCP_ESTABLISHED);
    assert_ne!(e.flags & Pct::F_REPLIED, 0);
    assert_eq!(send(&dp, FROM_POD, B, A, 40000, 80, FIN | ACK), TC_ACT_OK);
    assert_eq!(pol::ct_entries(&dp)[0].1.tcp, Pct::TCP_CLOSING);
    assert_eq!(send(&dp, FROM_POD, A, B, 80, 40000, FIN | ACK), TC_ACT_OK);
    assert_eq!(pol::ct_entries(&dp)[0].1.tcp, Pct::TCP_CLOSED);
    assert_eq!(pol::ct_entries(&dp).len(), 1, "both directions share the entry");
}

// A rule's removal reaches an established flow: with the allowing rule gone and the
// generation bumped, the flow's next packet (either direction) is refused and its entry
// deleted; without the bump the flow keeps going (the entry still holds); a flow the new
// rules still admit survives the bump (re-checked, not cut).
/// `c` accepts anything: isolated for ingress (so its flows are tracked), refusing nothing.
fn c_open() -> NetworkPolicy {
    policy_json(
        r#"{"metadata":{"namespace":"y","name":"open-c"},
            "spec":{"podSelector":{"matchLabels":{"pod":"c"}},"policyTypes":["Ingress"],
                    "ingress":[{}]}}"#,
    )
}

#[test]
fn rule_removal_and_generation_bump_stop_an_established_flow() {
    let (mut dp, w, t) = setup(&[a_locked(), c_open()]);
    let g0 = pol::state(&dp).generation;
    // b -> a:80 established; c -> b:22 established (c is isolated, so the flow has an
    // entry; b is not isolated at all).
    for (hook, s, d, sp, dpt, f) in [
        (FROM_POD, B, A, 40000, 80, SYN),
        (FROM_POD, A, B, 80, 40000, SYN | ACK),
        (FROM_POD, C, B, 41000, 22, SYN),
        (FROM_POD, B, C, 22, 41000, SYN | ACK),
    ] {
        assert_eq!(send(&dp, hook, s, d, sp, dpt, f), TC_ACT_OK);
    }

    assert_eq!(pol::ct_entries(&dp).len(), 2);
    let closed = compile(&w, &[a_closed(), c_open()], Some(NODE));
    let diff = Diff::between(&t, &closed);
    assert!(diff.narrows(), "removing a rule narrows");
    pol::apply(&mut dp, &diff);
    // Not re-checked before the bump: the table admits the flow.
    assert_eq!(
        send(&dp, FROM_POD, B, A, 40000, 80, ACK),
        TC_ACT_OK,
        "before the bump"
    );
    assert_eq!(pol::bump(&mut dp), g0 + 1);
    assert_eq!(
        send(&dp, FROM_POD, A, B, 80, 40000, ACK),
        TC_ACT_SHOT,
        "after the bump"
    );
    assert_eq!(drops_of(&dp, DropReason::PolRevoked), 1);
    assert_eq!(pol::ct_entries(&dp).len(), 1, "the revoked flow's entry is gone");
    // Gone for good: its next segment is of no known flow.
    assert_eq!(send(&dp, FROM_POD, B, A, 40000, 80, ACK), TC_ACT_SHOT);
    assert_eq!(drops_of(&dp, DropReason::PolCtInvalid), 1);
    // The other flow was re-checked and admitted under the new generation.
    assert_eq!(send(&dp, TO_POD, B, C, 22, 41000, ACK), TC_ACT_OK);
    let (_, e) = pol::ct_entries(&dp)[0];
    assert_eq!(e.generation, g0 + 1);
    assert_eq!(e.tcp, Pct::TCP_ESTABLISHED, "the re-check keeps the flow's state");
    assert_eq!(total_drops(&dp), 2);
}

// A new policy reaches flows that began while nothing was isolated. Those took the net-0
// fast path (no connection-table step, no entry): c -> b:22 and a -> b:80 run with no
// entry. A policy then selects b and admits only TCP 80 from x: the diff narrows (the
// isolation marker is new) and the generation is bumped. Each flow's next segment is of
// no entry and is decided as one the table never saw: c -> b:22 is refused
// (DROP_POL_CT_INVALID), a -> b:80, admitted both ways, is entered as established and its
// replies pass by the entry.
#[test]
fn a_new_isolating_policy_stops_established_flows_it_refuses() {
    let (mut dp, w, t) = setup(&[]);
    for (s, d, sp, dpt, f) in [
        (C, B, 41000, 22, SYN),
        (B, C, 22, 41000, SYN | ACK),
        (A, B, 42000, 80, SYN),
        (B, A, 80, 42000, SYN | ACK),
    ] {
        assert_eq!(send(&dp, FROM_POD, s, d, sp, dpt, f), TC_ACT_OK);
    }
    assert!(
        pol::ct_entries(&dp).is_empty(),
        "no entry while nothing is isolated"
    );
    let lock_b = policy_json(
        r#"{"metadata":{"namespace":"x","name":"lock-b"},
            "spec":{"podSelector":{"matchLabels":{"pod":"b"}},"policyTypes":["Ingress"],
                    "ingress":[{"from":[{"podSelector":{}}],"ports":[{"protocol":"TCP","port":80}]}]}}"#,
    );
    let locked = compile(&w, &[lock_b], Some(NODE));
    let diff = Diff::between(&t, &locked);
    assert!(diff.narrows(), "a new isolation marker narrows");
    pol::apply(&mut dp, &diff);
    pol::bump(&mut dp);
    assert_eq!(
        send(&dp, TO_POD, C, B, 41000, 22, ACK),
        TC_ACT_SHOT,
        "c -> b:22 is cut"
    );
    assert_eq!(drops_of(&dp, DropReason::PolCtInvalid), 1);
    assert_eq!(
        send(&dp, TO_POD, A, B, 42000, 80, ACK),
        TC_ACT_OK,
        "a -> b:80 goes on"
    );
    let entries = pol::ct_entries(&dp);
    assert_eq!(entries.len(), 1, "the admitted flow is entered");
    assert_eq!(entries[0].1.tcp, Pct::TCP_ESTABLISHED);
    assert_eq!(send(&dp, FROM_POD, B, A, 80, 42000, ACK), TC_ACT_OK, "its reply");
    assert_eq!(total_drops(&dp), 1);
    assert_eq!(pol_drops(&dp), vec![(0, LAYER_NP, DropReason::PolCtInvalid, 1)]);
}

// The net-0 fast path: between pods with identities that no policy isolates, a whole
// connection (handshake, data, FIN, and a UDP exchange) passes both hooks without a
// connection-table entry; once one end is isolated (here b's egress, a policy that admits
// TCP 80 to x), a new flow of the same pair is tracked from its SYN, and a segment of a
// flow the table never saw is adopted only if the rules admit the flow both ways (who
// opened it is unknown).
#[test]
fn flows_between_unisolated_pods_skip_the_table() {
    let (mut dp, w, t) = setup(&[]);
    for hook in [FROM_POD, TO_POD] {
        for (s, d, sp, dpt, f) in [
            (A, B, 43000, 8080, SYN),
            (B, A, 8080, 43000, SYN | ACK),
            (A, B, 43000, 8080, ACK),
            (B, A, 8080, 43000, FIN | ACK),
            (A, B, 43000, 8080, FIN | ACK),
        ] {
            assert_eq!(send(&dp, hook, s, d, sp, dpt, f), TC_ACT_OK, "{hook}");
        }
    }
    let (IpAddr::V4(a), IpAddr::V4(b)) = (ip(A), ip(B)) else {
        unreachable!()
    };
    let dgram = pkt::ipv4(mac_of(ip(A)), cfg().gw_mac, a, b, UDP, 5353, 53, 0);
    assert_eq!(dp.run(FROM_POD, &dgram, LO, 0).verdict, TC_ACT_OK);
    assert!(pol::ct_entries(&dp).is_empty(), "no entry, no table step");
    assert_eq!(total_drops(&dp), 0);

    let b_egress = policy_json(
        r#"{"metadata":{"namespace":"x","name":"b-out"},
            "spec":{"podSelector":{"matchLabels":{"pod":"b"}},"policyTypes":["Egress"],
                    "egress":[{"to":[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"x"}}}],
                               "ports":[{"protocol":"TCP","port":80}]}]}}"#,
    );
    let locked = compile(&w, &[b_egress], Some(NODE));
    pol::apply(&mut dp, &Diff::between(&t, &locked));
    pol::bump(&mut dp);
    assert_eq!(send(&dp, FROM_POD, B, A, 44000, 80, SYN), TC_ACT_OK);
    assert_eq!(pol::ct_entries(&dp).len(), 1, "b's new flow is tracked");
    assert_eq!(send(&dp, TO_POD, A, B, 80, 44000, SYN | ACK), TC_ACT_OK);
    // Unseen segments: b:45000 -> a:80 is admitted both ways (b may send TCP 80 to x;
    // a:80 -> b:45000 meets no isolation), so it is adopted as established. a:46000 ->
    // b:8080 is admitted as sent, but its other orientation (b:8080 -> a, b's egress to a
    // port other than 80) is not: refused, in either direction.
    assert_eq!(send(&dp, FROM_POD, B, A, 45000, 80, ACK), TC_ACT_OK, "adopted");
    assert_eq!(pol::ct_entries(&dp).len(), 2);
    assert_eq!(send(&dp, TO_POD, A, B, 46000, 8080, ACK), TC_ACT_SHOT);
    assert_eq!(send(&dp, FROM_POD, B, A, 8080, 46000, ACK), TC_ACT_SHOT);
    assert_eq!(drops_of(&dp, DropReason::PolCtInvalid), 2);
    assert_eq!(total_drops(&dp), 2);
}

/// An ICMPv4 error from `from` to `to` quoting a UDP datagram `to:qsport -> qdst:qdport`.
fn icmp_error(from: &str, to: &str, qdst: &str, qsport: u16, qdport: u16) -> Vec<u8> {
    let (IpAddr::V4(f), IpAddr::V4(t), IpAddr::V4(q)) = (ip(from), ip(to), ip(qdst)) else {
        unreachable!()
    };
    let seg = pkt::udp_seg(t, q, qsport, qdport, b"quoted");
    let quote = pkt::ip4_raw(t, q, UDP, 7, 0, &seg);
    pkt::frame(
        cfg().gw_mac,
        mac_of(ip(from)),
        &pkt::icmp4_error(f, t, 3, 3, [0; 4], &quote),
    )
}

// ICMP errors pass with the flow they quote and only with it: a's datagram to c is
// admitted (egress to c's port 53 is allowed below), c's "port unreachable" about it
// reaches a although a admits no ICMP; an error quoting a flow never seen is refused.
#[test]
fn icmp_errors_pass_with_their_flow() {
    let allow_dns = policy_json(
        r#"{"metadata":{"namespace":"x","name":"dns"},
            "spec":{"podSelector":{"matchLabels":{"pod":"a"}},"policyTypes":["Egress"],
                    "egress":[{"ports":[{"protocol":"UDP","port":53}]}]}}"#,
    );
    let (dp, _, t) = setup(&[a_locked(), allow_dns]);
    assert!(verdict::np(&t, ip(A), ip(C), 17, 53).allowed());
    assert!(
        !verdict::np(&t, ip(C), ip(A), 1, 3 << 8 | 3).allowed(),
        "no ICMP into a"
    );
    let (IpAddr::V4(a), IpAddr::V4(c)) = (ip(A), ip(C)) else {
        unreachable!()
    };
    let dgram = pkt::ipv4(mac_of(ip(A)), cfg().gw_mac, a, c, UDP, 5353, 53, 0);
    assert_eq!(dp.run(FROM_POD, &dgram, LO, 0).verdict, TC_ACT_OK);
    assert_eq!(
        dp.run(TO_POD, &icmp_error(C, A, C, 5353, 53), LO, 0).verdict,
        TC_ACT_OK
    );
    assert_eq!(total_drops(&dp), 0);
    assert_eq!(
        dp.run(TO_POD, &icmp_error(C, A, C, 5354, 53), LO, 0).verdict,
        TC_ACT_SHOT,
        "an error of no known flow"
    );
    assert_eq!(drops_of(&dp, DropReason::PolCtInvalid), 1);
}

// The node reaches its pods whatever their policies (kubelet probes): from an address of
// sdn_hf_self into the isolated a, and a's answer passes by the flow's entry; another
// node's address does not.
#[test]
fn the_node_reaches_its_pods() {
    let (dp, _, _) = setup(&[a_closed()]);
    assert_eq!(send(&dp, TO_POD, NODE, A, 50000, 8080, SYN), TC_ACT_OK, "probe");
    assert_eq!(
        send(&dp, FROM_POD, A, NODE, 8080, 50000, SYN | ACK),
        TC_ACT_OK,
        "answer"
    );
    assert_eq!(total_drops(&dp), 0);
    assert_eq!(
        send(&dp, TO_POD, "192.168.10.2", A, 50000, 8080, SYN),
        TC_ACT_SHOT
    );
    assert_eq!(drops_of(&dp, DropReason::PolNp), 1);
}

// A pod's packet to a Service's virtual IP (cluster-internal, no pod, no node) is not
// decided by its egress at the source, where the backend is unknown; the flow enters the
// table so that the host's un-NATed replies pass. An outside address is decided there.
#[test]
fn egress_to_a_service_ip_is_left_to_the_backend() {
    let (mut dp, _, _) = setup(&[a_closed()]);
    common::fixtures::inside(&mut dp, 0, "10.96.0.0", 12);
    assert_eq!(send(&dp, FROM_POD, A, "10.96.0.10", 40000, 53, SYN), TC_ACT_OK);
    assert_eq!(
        send(&dp, TO_POD, "10.96.0.10", A, 53, 40000, SYN | ACK),
        TC_ACT_OK,
        "reply"
    );
    assert_eq!(total_drops(&dp), 0);
    assert_eq!(
        send(&dp, FROM_POD, A, "203.0.113.9", 40000, 443, SYN),
        TC_ACT_SHOT
    );
    assert_eq!(drops_of(&dp, DropReason::PolNp), 1);
}

// A Service in front of `a` (the kube-proxy replacement, lib/lb.h on net 0): b's packet to
// the ClusterIP is DNATed before its egress is judged, so `a`'s ingress rules see b; a's
// reply is judged as a's at its own veth, leaves with the ClusterIP as source and still
// passes b's delivery by the flow's entry; c (namespace y), whom a's rules refuse, is
// refused through the Service too.
#[test]
fn a_service_flow_is_judged_as_its_backends() {
    use cozyplane_bpf::abi::{LB_SLOTS, LbSvc};
    use cozyplane_bpf::maps::{lb_backends, lb_maglev, lb_svc};

    let (mut dp, _, _) = setup(&[a_locked()]);
    const CIP: &str = "10.96.0.10";
    // The pods' range is cluster-internal, as the agent writes it.
    common::fixtures::inside(&mut dp, 0, "10.0.0.0", 8);
    lb_backends::LbBackendsMap::try_from(dp.map_mut(lb_backends::NAME))
        .unwrap()
        .upsert(1, 0, ip(A), 80)
        .unwrap();
    lb_maglev::LbMaglevMap::try_from(dp.map_mut(lb_maglev::NAME))
        .unwrap()
        .set(1, &[1; LB_SLOTS])
        .unwrap();
    let f = lb_svc::Frontend {
        net: 0,
        vip: ip(CIP),
        proto: 6,
        port: 8000,
    };
    let v = LbSvc {
        id: 1,
        count: 1,
        affinity: 0,
        flags: 1,
    };
    lb_svc::LbSvcMap::try_from(dp.map_mut(lb_svc::NAME))
        .unwrap()
        .upsert(f, v)
        .unwrap();

    let syn = pol::tcp(mac_of(ip(B)), cfg().gw_mac, ip(B), ip(CIP), 40000, 8000, SYN);
    let out = dp.run(FROM_POD, &syn, LO, 0);
    assert_eq!(out.verdict, TC_ACT_OK, "b's SYN to the ClusterIP");
    let p = pkt::parse_v4(&out.packet);
    assert_eq!((p.dst.to_string(), p.dport), (A.to_string(), 80));
    assert_eq!(
        dp.run(TO_POD, &out.packet, LO, 0).verdict,
        TC_ACT_OK,
        "a's ingress admits b"
    );
    let synack = pol::tcp(mac_of(ip(A)), cfg().gw_mac, ip(A), ip(B), 80, 40000, SYN | ACK);
    let out = dp.run(FROM_POD, &synack, LO, 0);
    assert_eq!(out.verdict, TC_ACT_OK, "a's reply, judged as a's");
    let p = pkt::parse_v4(&out.packet);
    assert_eq!((p.src.to_string(), p.sport), (CIP.to_string(), 8000));
    assert_eq!(
        dp.run(TO_POD, &out.packet, LO, 0).verdict,
        TC_ACT_OK,
        "the reply from the ClusterIP passes b's delivery by the flow's entry"
    );
    assert_eq!(total_drops(&dp), 0);

    // c is no pod of x: a's rules refuse it, through the Service as directly, already at
    // c's side (every node knows a's identity and rules).
    let syn = pol::tcp(mac_of(ip(C)), cfg().gw_mac, ip(C), ip(CIP), 40001, 8000, SYN);
    assert_eq!(dp.run(FROM_POD, &syn, LO, 0).verdict, TC_ACT_SHOT);
    assert_eq!(drops_of(&dp, DropReason::PolNp), 1);
}
