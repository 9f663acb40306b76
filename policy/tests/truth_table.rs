//! NetworkPolicy conformance, cyclonus-style: random policy sets over three namespaces ×
//! three labelled pods (and two outside addresses), probed over TCP and UDP on eight
//! ports, every pod pair both ways. The expected matrix comes from `common/oracle.rs`, an
//! interpreter of the policy text that shares nothing with the compiler; the compiler's
//! answer is `verdict::np` over the compiled map entries (what the datapath looks up).
//! Named ports and endPort are in the generator's vocabulary.

mod common;

use common::oracle::{self, End};
use common::{OUTSIDE, PROBES, World, proto_num};
use cozyplane_policy::np::NpCompiler;
use cozyplane_policy::verdict;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use rand::SeedableRng;
use rand::rngs::StdRng;

const SETS: u64 = 150;

fn check_set(world: &World, pols: &[NetworkPolicy], label: &str) -> (usize, Vec<String>) {
    let c = NpCompiler::build(world.namespaces(), world.pod_infos(), pols);
    let t = c.tables();
    let outside: Vec<std::net::IpAddr> = OUTSIDE.iter().map(|a| a.parse().unwrap()).collect();
    let mut ends: Vec<End> = world.pods.iter().map(End::Pod).collect();
    ends.extend(outside.iter().map(|a| End::Addr(*a)));
    let ip = |e: &End| match e {
        End::Pod(p) => p.ip,
        End::Addr(a) => *a,
    };
    let (mut cases, mut bad) = (0, Vec::new());
    for s in &ends {
        for d in &ends {
            if ip(s) == ip(d) || matches!((s, d), (End::Addr(_), End::Addr(_))) {
                continue;
            }
            for (pr, port) in PROBES {
                cases += 1;
                let want = oracle::allowed(pols, &world.ns_labels, s, d, pr, port);
                let got = verdict::np(&t, ip(s), ip(d), proto_num(pr), port).allowed();
                if want != got {
                    bad.push(format!(
                        "{label}: {} -> {} {pr}/{port}: oracle {want}, compiled {got}",
                        ip(s),
                        ip(d)
                    ));
                }
            }
        }
    }
    (cases, bad)
}

#[test]
fn compiled_verdicts_match_the_oracle_on_generated_policy_sets() {
    let world = World::new();
    let mut rng = StdRng::seed_from_u64(14);
    let (mut cases, mut bad) = (0, Vec::new());
    let mut denied = 0usize;
    for set in 0..SETS {
        let n = 1 + (set % 3) as usize;
        let pols: Vec<NetworkPolicy> = (0..n)
            .map(|i| common::policy(&mut rng, &format!("p{set}-{i}")))
            .collect();
        let (c, b) = check_set(&world, &pols, &format!("set {set} {pols:?}"));
        cases += c;
        bad.extend(b);
        // How much of the matrix is refused, so a generator that only produces allow-all
        // would show.
        let t = NpCompiler::build(world.namespaces(), world.pod_infos(), &pols).tables();
        denied += world
            .pods
            .iter()
            .flat_map(|s| world.pods.iter().map(move |d| (s, d)))
            .filter(|(s, d)| s.ip != d.ip && !verdict::np(&t, s.ip, d.ip, 6, 80).allowed())
            .count();
    }
    println!(
        "truth table: {SETS} policy sets, {cases} cases, {} mismatches, {denied} denied pod pairs on TCP/80",
        bad.len()
    );
    assert!(denied > 0, "the generator never isolates anything");
    assert!(
        bad.is_empty(),
        "{} of {cases} cases differ; first:\n{}",
        bad.len(),
        bad.iter().take(5).cloned().collect::<Vec<_>>().join("\n")
    );
}
