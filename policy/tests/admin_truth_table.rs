//! AdminNetworkPolicy + NetworkPolicy + BaselineAdminNetworkPolicy, cyclonus-style: random
//! policy sets (ANPs of distinct priorities with `Allow`/`Deny`/`Pass` rules over
//! namespaces, pods, nodes and networks peers and portNumber/portRange/namedPort ports,
//! NetworkPolicies, a BANP) over three namespaces × three pods, three nodes (one with a
//! host-network pod) and two outside addresses, probed over TCP, UDP and SCTP on ten
//! ports (named ports included) between pods both ways, pods ↔ nodes and pods ↔ outside.
//! The expected verdicts come from `common/admin_oracle.rs`, an interpreter of the API text
//! that shares nothing with the compiler; the compiler's answer is `verdict::np` over the
//! compiled entries.
//!
//! The cozyplane extension is generated too: rules get names, about half the policies the
//! `policy.cozystack.io/kube-apiserver` annotation naming some of their egress rules (now and
//! then an ingress rule's name or one no rule has), and the kube-apiserver sits on a node's
//! addresses, outside, on a pod's address or nowhere known; the incremental test moves it.
//!
//! Not generated: a `namedPort` in an egress rule whose peers are `nodes` or `networks`.
//! The CRD refuses that mix (a named port is a pod's, and those peers are addresses); one
//! that got past it is compiled closed like an unenforceable peer (an `Allow` matches
//! nothing, a `Deny` or `Pass` denies everything), which the oracle does not model.

mod common;

use std::collections::BTreeMap;
use std::net::IpAddr;

use common::admin_gen::{AdminWorld, PolicySet, annotate, apiserver, policy_set};
use common::admin_oracle::{self, AEnd, Cluster, ONode};
use common::{PROBES, proto_num};
use cozyplane_policy::Tables;
use cozyplane_policy::model::Diff;
use cozyplane_policy::np::{NodeInfo, NpCompiler};
use cozyplane_policy::verdict::{self, Check, Tier};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

const SETS: u64 = 60;
const INCREMENTAL_SETS: u64 = 40;

fn nodes_of(w: &[ONode]) -> Vec<NodeInfo> {
    w.iter()
        .map(|n| NodeInfo {
            name: n.name.clone(),
            labels: n.labels.clone(),
            ips: n.ips.clone(),
        })
        .collect()
}

/// A fresh compile: the NetworkPolicies at build, then the nodes, the kube-apiserver's
/// addresses and the admin policies.
fn compile(w: &AdminWorld, nodes: &[ONode], api: &[IpAddr], s: &PolicySet) -> NpCompiler {
    let mut c = NpCompiler::build(w.base.namespaces(), w.pod_infos(), &s.nps);
    for n in nodes_of(nodes) {
        c.set_node(n);
    }
    c.set_kube_apiserver(api.to_vec());
    for a in &s.anps {
        c.set_anp(a);
    }
    if let Some(b) = &s.banp {
        c.set_banp(b);
    }
    c
}

#[derive(Default)]
struct Tally {
    cases: usize,
    denied: usize,
    bad: Vec<String>,
    /// The first policy set with a mismatch, as JSON.
    first: Option<String>,
    /// Which tier decided each direction of a pod subject, as the compiler reports it.
    tiers: BTreeMap<String, usize>,
    /// Cases whose expected verdict the kube-apiserver extension changes (the oracle with
    /// and without its addresses), and how many of those the compiler denied.
    by_apiserver: usize,
    by_apiserver_denied: usize,
}

fn tier_name(tier: Tier, check: Check) -> String {
    let how = if check.allows() { "allow" } else { "deny" };
    format!("{tier:?}-{how}")
}

/// Every probe of the world against the oracle, the verdicts read from `t`; the
/// kube-apiserver is at `api`.
#[allow(clippy::too_many_arguments)]
fn check(
    w: &AdminWorld,
    nodes: &[ONode],
    api: &[IpAddr],
    s: &PolicySet,
    t: &Tables,
    label: &str,
    tally: &mut Tally,
) {
    let cluster = Cluster {
        ns_labels: &w.base.ns_labels,
        nodes,
        anps: &s.anps,
        banp: s.banp.as_ref(),
        nps: &s.nps,
    };
    let ends = w.ends();
    for src in &ends {
        for dst in &ends {
            let pods = matches!(src, AEnd::Pod(_)) as u8 + matches!(dst, AEnd::Pod(_)) as u8;
            if src.ip() == dst.ip() || pods == 0 {
                continue;
            }
            for (pr, port) in PROBES {
                tally.cases += 1;
                let want = admin_oracle::allowed_with(&cluster, api, src, dst, pr, port);
                let (e, i) = verdict::np_detail(t, src.ip(), dst.ip(), proto_num(pr), port);
                let got = e.check.allows() && i.check.allows();
                tally.denied += usize::from(!got);
                if want != admin_oracle::allowed(&cluster, src, dst, pr, port) {
                    tally.by_apiserver += 1;
                    tally.by_apiserver_denied += usize::from(!got);
                }
                if matches!(src, AEnd::Pod(_)) {
                    *tally.tiers.entry(tier_name(e.tier, e.check)).or_default() += 1;
                }
                if matches!(dst, AEnd::Pod(_)) {
                    *tally.tiers.entry(tier_name(i.tier, i.check)).or_default() += 1;
                }
                if want != got && tally.first.is_none() {
                    tally.first = Some(format!("kube-apiserver at {api:?}\n{}", dump(s)));
                }
                if want != got && tally.bad.len() < 50 {
                    tally.bad.push(format!(
                        "{label}: {} -> {} {pr}/{port}: oracle {want}, compiled {got} ({e:?} / {i:?})",
                        src.ip(),
                        dst.ip()
                    ));
                } else if want != got {
                    tally.bad.push(String::new());
                }
            }
        }
    }
}

/// The first entries where two maps differ, for the failure message.
fn table_diff(a: &Tables, b: &Tables) -> String {
    let d = Diff::between(a, b);
    format!(
        "rules +{:?} -{:?}; cidrs +{:?} -{:?}; idents +{:?} -{:?}",
        d.rules.upsert.iter().take(8).collect::<Vec<_>>(),
        d.rules.remove.iter().take(8).collect::<Vec<_>>(),
        d.cidrs.upsert,
        d.cidrs.remove,
        d.np_idents.upsert,
        d.np_idents.remove
    )
}

/// A policy set as compact JSON, one object a line.
fn dump(s: &PolicySet) -> String {
    let j = |v: serde_json::Result<String>| v.unwrap();
    let mut lines: Vec<String> = s.anps.iter().map(|a| j(serde_json::to_string(a))).collect();
    lines.extend(s.banp.iter().map(|b| j(serde_json::to_string(b))));
    lines.extend(s.nps.iter().map(|p| j(serde_json::to_string(p))));
    lines.join("\n")
}

fn assert_clean(what: &str, tally: &Tally) {
    assert!(
        tally.bad.is_empty(),
        "{what}: {} of {} cases differ; first:\n{}\nthe first set:\n{}",
        tally.bad.len(),
        tally.cases,
        tally.bad.iter().take(6).cloned().collect::<Vec<_>>().join("\n"),
        tally.first.clone().unwrap_or_default()
    );
}

#[test]
fn compiled_admin_verdicts_match_the_oracle_on_generated_policy_sets() {
    let w = AdminWorld::new();
    let mut rng = StdRng::seed_from_u64(29);
    let mut tally = Tally::default();
    for set in 0..SETS {
        let mut s = policy_set(&mut rng, &set.to_string(), 1 + (set % 3) as usize);
        annotate(&mut rng, &mut s);
        let api = apiserver(&mut rng);
        let t = compile(&w, &w.nodes, &api, &s).tables();
        check(&w, &w.nodes, &api, &s, &t, &format!("set {set}"), &mut tally);
    }
    println!(
        "admin truth table: {SETS} policy sets, {} cases, {} denied, {} mismatches; deciding tiers: {:?}; \
         {} cases decided otherwise by the kube-apiserver annotation ({} of them denied)",
        tally.cases,
        tally.denied,
        tally.bad.len(),
        tally.tiers,
        tally.by_apiserver,
        tally.by_apiserver_denied
    );
    assert!(tally.cases >= 5000, "only {} cases", tally.cases);
    // The extension decides some flows both ways (an annotated Allow admits, an annotated
    // Deny refuses what would have passed).
    assert!(
        tally.by_apiserver > tally.by_apiserver_denied && tally.by_apiserver_denied > 0,
        "the kube-apiserver annotation changed {} cases, {} of them to denied",
        tally.by_apiserver,
        tally.by_apiserver_denied
    );
    // Every tier decides some flows both ways, so a generator or a compiler that lost one
    // would show.
    for tier in [
        "Anp-allow",
        "Anp-deny",
        "Np-allow",
        "Np-deny",
        "Banp-allow",
        "Banp-deny",
        "Default-allow",
    ] {
        assert!(
            tally.tiers.get(tier).copied().unwrap_or(0) > 0,
            "no {tier} decision: {:?}",
            tally.tiers
        );
    }
    assert_clean("truth table", &tally);
}

/// One change to the compiler, kept to replay.
#[derive(Clone, Debug)]
enum Op {
    Node(NodeInfo),
    RemoveNode(String),
    Np(k8s_openapi::api::networking::v1::NetworkPolicy),
    RemoveNp(String, String),
    Anp(cozyplane_apis::admin_policy::AdminNetworkPolicy),
    RemoveAnp(String),
    Banp(cozyplane_apis::admin_policy::BaselineAdminNetworkPolicy),
    RemoveBanp,
    Apiserver(Vec<IpAddr>),
}

fn run(c: &mut NpCompiler, op: &Op) -> Diff {
    match op {
        Op::Node(n) => c.set_node(n.clone()),
        Op::RemoveNode(n) => c.remove_node(n),
        Op::Np(p) => c.set_policy(p),
        Op::RemoveNp(ns, n) => c.remove_policy(ns, n),
        Op::Anp(a) => c.set_anp(a),
        Op::RemoveAnp(n) => c.remove_anp(n),
        Op::Banp(b) => c.set_banp(b),
        Op::RemoveBanp => c.remove_banp("default"),
        Op::Apiserver(a) => c.set_kube_apiserver(a.clone()),
    }
}

/// Changes to the final state: an ANP deleted, one replaced (new rules and priority), a
/// NetworkPolicy deleted, the BANP deleted or replaced, a node relabelled, one deleted, the
/// kube-apiserver moved (or its addresses given again).
fn changes(
    r: &mut impl Rng,
    s: &mut PolicySet,
    nodes: &mut Vec<ONode>,
    api: &mut Vec<IpAddr>,
    tag: &str,
) -> Vec<Op> {
    let mut ops = Vec::new();
    if s.anps.len() > 1 {
        let a = s.anps.remove(r.random_range(0..s.anps.len()));
        ops.push(Op::RemoveAnp(a.metadata.name.unwrap()));
    }
    if !s.anps.is_empty() {
        // New rules and a new priority, distinct from the others'.
        let taken: Vec<i32> = s.anps.iter().map(|a| a.spec.priority).collect();
        let prio = loop {
            let p = r.random_range(0..=1000);
            if !taken.contains(&p) {
                break p;
            }
        };
        let i = r.random_range(0..s.anps.len());
        let mut a = common::admin_gen::anp(r, s.anps[i].metadata.name.as_deref().unwrap(), prio);
        common::admin_gen::annotate_one(r, &mut a.metadata, &mut a.spec.ingress, &mut a.spec.egress);
        s.anps[i] = a;
        ops.push(Op::Anp(s.anps[i].clone()));
    }
    if !s.nps.is_empty() {
        let p = s.nps.remove(r.random_range(0..s.nps.len()));
        ops.push(Op::RemoveNp(
            p.metadata.namespace.unwrap(),
            p.metadata.name.unwrap(),
        ));
    }
    match (s.banp.is_some(), r.random_bool(0.5)) {
        (true, true) => {
            s.banp = None;
            ops.push(Op::RemoveBanp);
        }
        _ => {
            let mut b = common::admin_gen::banp(r);
            common::admin_gen::annotate_one(r, &mut b.metadata, &mut b.spec.ingress, &mut b.spec.egress);
            s.banp = Some(b.clone());
            ops.push(Op::Banp(b));
        }
    }
    let relabel = r.random_range(0..nodes.len());
    nodes[relabel]
        .labels
        .insert("role".into(), format!("changed-{tag}"));
    nodes[relabel].labels.insert("zone".into(), "a".into());
    ops.push(Op::Node(nodes_of(&nodes[relabel..=relabel]).remove(0)));
    // Another node than the relabelled one: the ops are shuffled.
    let gone = nodes.remove((relabel + r.random_range(1..nodes.len())) % nodes.len());
    ops.push(Op::RemoveNode(gone.name));
    *api = apiserver(r);
    ops.push(Op::Apiserver(api.clone()));
    ops.shuffle(r);
    ops
}

/// The policies, nodes and their changes applied one by one, each returned [`Diff`] applied
/// to a copy of the maps: the copy equals the compiler's own maps and a fresh compile of
/// the same state, before and after the changes, and its verdicts match the oracle's.
#[test]
fn incremental_admin_compilation_equals_a_fresh_build() {
    let w = AdminWorld::new();
    let mut rng = StdRng::seed_from_u64(1029);
    let mut tally = Tally::default();
    let mut diffs = 0usize;
    for set in 0..INCREMENTAL_SETS {
        let tag = set.to_string();
        let mut s = policy_set(&mut rng, &tag, 2 + (set % 3) as usize);
        annotate(&mut rng, &mut s);
        let mut nodes = w.nodes.clone();
        let mut api = apiserver(&mut rng);
        let mut ops: Vec<Op> = nodes_of(&nodes).into_iter().map(Op::Node).collect();
        ops.push(Op::Apiserver(api.clone()));
        ops.extend(s.nps.iter().cloned().map(Op::Np));
        ops.extend(s.anps.iter().cloned().map(Op::Anp));
        ops.extend(s.banp.iter().cloned().map(Op::Banp));
        ops.shuffle(&mut rng);
        let mut c = NpCompiler::build(w.base.namespaces(), w.pod_infos(), &[]);
        let mut applied = c.tables();
        for op in &ops {
            let d = run(&mut c, op);
            diffs += usize::from(!d.is_empty());
            d.apply(&mut applied);
        }
        let fresh = compile(&w, &nodes, &api, &s).tables();
        assert!(
            applied == c.tables(),
            "set {set}: the diffs do not rebuild the maps ({ops:?})"
        );
        assert!(
            applied == fresh,
            "set {set}: incremental maps differ from a fresh compile ({ops:?})"
        );

        check(&w, &nodes, &api, &s, &applied, &format!("set {set}"), &mut tally);

        let more = changes(&mut rng, &mut s, &mut nodes, &mut api, &tag);
        for op in &more {
            let d = run(&mut c, op);
            diffs += usize::from(!d.is_empty());
            d.apply(&mut applied);
        }
        let fresh = compile(&w, &nodes, &api, &s).tables();
        assert!(
            applied == c.tables(),
            "set {set}: the diffs of {more:?} do not rebuild the maps"
        );
        assert!(
            applied == fresh,
            "set {set}: after {more:?} the maps differ from a fresh compile: {}",
            table_diff(&applied, &fresh)
        );
        check(
            &w,
            &nodes,
            &api,
            &s,
            &applied,
            &format!("set {set} (changed)"),
            &mut tally,
        );
    }
    println!(
        "admin incremental: {INCREMENTAL_SETS} sets, {diffs} non-empty diffs, {} cases checked, {} mismatches, \
         {} cases decided otherwise by the kube-apiserver annotation",
        tally.cases,
        tally.bad.len(),
        tally.by_apiserver
    );
    assert!(tally.by_apiserver > 0, "the kube-apiserver never mattered");
    assert!(
        diffs > INCREMENTAL_SETS as usize * 4,
        "too few effective changes: {diffs}"
    );
    assert_clean("incremental", &tally);
}

/// The API's fail closed for an `Allow` rule is "treat the rule as matching no traffic": a
/// peer with no field set (or `domainNames`, not enforced) takes the rule's other peers
/// with it, so the `Deny` after it decides.
#[test]
fn an_allow_rule_with_an_unenforceable_peer_matches_nothing() {
    let w = AdminWorld::new();
    let (src, dst) = (&w.base.pods[0], &w.base.pods[4]);
    for bad in [
        serde_json::json!({}),
        serde_json::json!({"domainNames": ["example.com"]}),
    ] {
        let anp: cozyplane_apis::admin_policy::AdminNetworkPolicy =
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "a"},
                "spec": {
                    "priority": 1,
                    "subject": {"namespaces": {}},
                    "egress": [
                        {"action": "Allow", "to": [{"namespaces": {}}, bad]},
                        {"action": "Deny", "to": [{"namespaces": {}}]},
                    ],
                },
            }))
            .unwrap();
        let s = PolicySet {
            anps: vec![anp],
            ..PolicySet::default()
        };
        let cluster = Cluster {
            ns_labels: &w.base.ns_labels,
            nodes: &w.nodes,
            anps: &s.anps,
            banp: None,
            nps: &[],
        };
        assert!(!admin_oracle::allowed(
            &cluster,
            &AEnd::Pod(src),
            &AEnd::Pod(dst),
            "TCP",
            80
        ));
        let t = compile(&w, &w.nodes, &[], &s).tables();
        let v = verdict::np_detail(&t, src.ip, dst.ip, proto_num("TCP"), 80);
        assert_eq!(v.0.check, Check::Denied, "{bad}: {v:?}");
        assert_eq!(v.0.tier, Tier::Anp, "{bad}: {v:?}");
    }
}
