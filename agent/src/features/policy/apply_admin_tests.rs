//! The write order with the admin tiers (AdminNetworkPolicy above NetworkPolicy, the
//! BaselineAdminNetworkPolicy below) against the compiler's own verdict: every intermediate
//! state a packet could meet allows nothing that neither the state before nor the state after
//! allows, over TCP, UDP, SCTP and ICMP, and the maps end equal to the full compile. Changes
//! mix ANPs (Allow, Deny, Pass; every peer kind; priorities that tie), the BANP,
//! NetworkPolicies, pods, namespaces and nodes; restarts reconcile between two compiles and
//! from a write interrupted anywhere.

use std::net::IpAddr;

use cozyplane_apis::admin_policy::{AdminNetworkPolicy, BaselineAdminNetworkPolicy};
use cozyplane_policy::model::{ACTION_ALLOW, Diff, Dir, Layer, PEER_ISOLATED, Tables, proto};
use cozyplane_policy::np::admin::ordinal;
use cozyplane_policy::np::{NamespaceInfo, NodeInfo, NpCompiler, PodInfo};
use cozyplane_policy::verdict;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::features::policy::barrier::BARRIER;
use crate::features::policy::maps::{Memory, Op};

const PODS: u8 = 5;
const NS: [&str; 2] = ["a", "b"];
const APPS: [&str; 3] = ["web", "db", "api"];
const NODE_IPS: [[u8; 4]; 2] = [[192, 168, 0, 1], [192, 168, 0, 2]];

fn pod_ip(i: u8) -> IpAddr {
    IpAddr::from([10, 0, 0, i + 1])
}

/// Pods, the two nodes, an address of the pod range without a pod, one outside.
fn probes() -> Vec<IpAddr> {
    let mut v: Vec<IpAddr> = (0..PODS).map(pod_ip).collect();
    v.extend(NODE_IPS.map(IpAddr::from));
    v.push(IpAddr::from([10, 0, 0, 200]));
    v.push(IpAddr::from([203, 0, 113, 9]));
    v
}

/// (protocol, port): TCP on and off the rules' ports, UDP in a range, SCTP, ICMP echo.
const FLOWS: [(u8, u16); 5] = [
    (proto::TCP, 80),
    (proto::TCP, 443),
    (proto::UDP, 55),
    (proto::SCTP, 80),
    (proto::ICMP, 8 << 8),
];

type Flow = (IpAddr, IpAddr, u8, u16);

fn allowed(t: &Tables) -> Vec<Flow> {
    let ps = probes();
    let mut out = Vec::new();
    for s in &ps {
        for d in &ps {
            for (p, port) in FLOWS {
                if s != d && verdict::np(t, *s, *d, p, port).allowed() {
                    out.push((*s, *d, p, port));
                }
            }
        }
    }
    out
}

/// Replays `ops` on `from`, checking that every state allows only what `old` or `new`
/// allows; the end state, or the first violation.
fn replay(from: &Tables, old: &Tables, new: &Tables, ops: &[Op]) -> Result<Tables, String> {
    let (before, after) = (allowed(old), allowed(new));
    let mut t = from.clone();
    let mut generation = 0;
    for (i, op) in ops.iter().enumerate() {
        Memory::step(&mut t, &mut generation, op);
        if let Some(a) = allowed(&t)
            .into_iter()
            .find(|a| !before.contains(a) && !after.contains(a))
        {
            return Err(format!(
                "after op {i} ({op:?}), {a:?} is allowed by neither state; ops: {ops:#?}"
            ));
        }
    }
    Ok(t)
}

#[derive(Clone, Debug)]
enum Change {
    Pod { i: u8, ns: u8, app: u8, port: u16 },
    PodGone(u8),
    Ns { ns: u8, team: u8 },
    Node { n: u8, role: u8 },
    NodeGone(u8),
    Anp { j: u8, priority: u8, spec: Value },
    AnpGone(u8),
    Banp(Value),
    BanpGone,
    Np { ns: u8, spec: Value },
    NpGone(u8),
}

fn subject() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!({"namespaces": {}})),
        (0..2usize).prop_map(|t| json!({"namespaces": {"matchLabels": {"team": (["x", "y"][t])}}})),
        (0..3usize).prop_map(
            |a| json!({"pods": {"namespaceSelector": {}, "podSelector": {"matchLabels": {"app": APPS[a]}}}})
        ),
    ]
}

fn pod_peer() -> impl Strategy<Value = Value> {
    prop_oneof![
        (0..2usize).prop_map(|t| json!({"namespaces": {"matchLabels": {"team": (["x", "y"][t])}}})),
        (0..3usize).prop_map(
            |a| json!({"pods": {"namespaceSelector": {}, "podSelector": {"matchLabels": {"app": APPS[a]}}}})
        ),
    ]
}

fn egress_peer() -> impl Strategy<Value = Value> {
    prop_oneof![
        2 => pod_peer(),
        1 => Just(json!({"networks": ["10.0.0.0/29"]})),
        1 => Just(json!({"networks": ["0.0.0.0/0"]})),
        1 => Just(json!({"networks": ["203.0.113.0/24", "10.0.0.200/32"]})),
        1 => Just(json!({"nodes": {"matchLabels": {"role": "x"}}})),
    ]
}

fn admin_ports() -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        2 => Just(None),
        1 => Just(Some(json!([{"portNumber": {"port": 80}}]))),
        1 => Just(Some(json!([{"portRange": {"protocol": "UDP", "start": 50, "end": 60}},
                              {"portNumber": {"protocol": "SCTP", "port": 80}}]))),
        1 => Just(Some(json!([{"namedPort": "http"}]))),
    ]
}

fn admin_rule(ingress: bool, actions: &'static [&'static str]) -> impl Strategy<Value = Value> {
    let peer = if ingress {
        pod_peer().boxed()
    } else {
        egress_peer().boxed()
    };
    (
        0..actions.len(),
        proptest::collection::vec(peer, 1..3),
        admin_ports(),
    )
        .prop_map(move |(a, peers, ports)| {
            let mut r = json!({"action": actions[a]});
            r[if ingress { "from" } else { "to" }] = json!(peers);
            if let Some(p) = ports {
                r["ports"] = p;
            }
            r
        })
}

fn admin_spec(actions: &'static [&'static str]) -> impl Strategy<Value = Value> {
    (
        subject(),
        proptest::collection::vec(admin_rule(true, actions), 0..3),
        proptest::collection::vec(admin_rule(false, actions), 0..3),
    )
        .prop_map(
            |(subject, ingress, egress)| json!({"subject": subject, "ingress": ingress, "egress": egress}),
        )
}

fn np_spec() -> impl Strategy<Value = Value> {
    (0..3usize, any::<bool>(), 0..3usize, any::<bool>()).prop_map(|(sel, ingress, from, with_port)| {
        let mut rule = json!({"from": [{"podSelector": {"matchLabels": {"app": APPS[from]}}}]});
        if with_port {
            rule["ports"] = json!([{"port": 80}]);
        }
        let (types, key) = if ingress {
            ("Ingress", "ingress")
        } else {
            rule["to"] = rule["from"].take();
            rule.as_object_mut().unwrap().remove("from");
            ("Egress", "egress")
        };
        json!({"podSelector": {"matchLabels": {"app": APPS[sel]}}, "policyTypes": [types], key: [rule]})
    })
}

const ANP_ACTIONS: &[&str] = &["Allow", "Deny", "Pass"];
const BANP_ACTIONS: &[&str] = &["Allow", "Deny"];

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        3 => (0..PODS, 0..2u8, 0..3u8, prop_oneof![Just(80u16), Just(443)])
            .prop_map(|(i, ns, app, port)| Change::Pod { i, ns, app, port }),
        1 => (0..PODS).prop_map(Change::PodGone),
        1 => (0..2u8, 0..2u8).prop_map(|(ns, team)| Change::Ns { ns, team }),
        1 => (0..2u8, 0..2u8).prop_map(|(n, role)| Change::Node { n, role }),
        1 => (0..2u8).prop_map(Change::NodeGone),
        4 => (0..3u8, 0..3u8, admin_spec(ANP_ACTIONS)).prop_map(|(j, priority, spec)| Change::Anp { j, priority, spec }),
        1 => (0..3u8).prop_map(Change::AnpGone),
        2 => admin_spec(BANP_ACTIONS).prop_map(Change::Banp),
        1 => Just(Change::BanpGone),
        2 => (0..2u8, np_spec()).prop_map(|(ns, spec)| Change::Np { ns, spec }),
        1 => (0..2u8).prop_map(Change::NpGone),
    ]
}

fn anp(name: &str, priority: u8, spec: &Value) -> AdminNetworkPolicy {
    let mut spec = spec.clone();
    spec["priority"] = json!(priority);
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

fn banp(spec: &Value) -> BaselineAdminNetworkPolicy {
    serde_json::from_value(json!({"metadata": {"name": "default"}, "spec": spec})).unwrap()
}

fn np_policy(ns: u8, spec: &Value) -> NetworkPolicy {
    serde_json::from_value(json!({
        "metadata": {"name": "np", "namespace": NS[ns as usize]}, "spec": spec,
    }))
    .unwrap()
}

fn pod(i: u8, ns: u8, app: u8, port: u16) -> PodInfo {
    PodInfo {
        ns: NS[ns as usize].into(),
        name: format!("p{i}"),
        labels: [("app".to_string(), APPS[app as usize].to_string())].into(),
        ips: vec![pod_ip(i)],
        host_network: false,
        named_ports: vec![("http".into(), proto::TCP, port)],
    }
}

/// Apply `c` to the compiler: its diffs, one per compiler call.
fn step(np: &mut NpCompiler, c: &Change) -> Vec<Diff> {
    match c {
        Change::Pod { i, ns, app, port } => {
            let mut ds: Vec<Diff> = NS
                .iter()
                .filter(|other| **other != NS[*ns as usize])
                .map(|other| np.remove_pod(other, &format!("p{i}")))
                .collect();
            ds.push(np.set_pod(pod(*i, *ns, *app, *port)));
            ds
        }
        Change::PodGone(i) => NS.iter().map(|ns| np.remove_pod(ns, &format!("p{i}"))).collect(),
        Change::Ns { ns, team } => vec![np.set_namespace(&NamespaceInfo {
            name: NS[*ns as usize].into(),
            labels: [("team".to_string(), ["x", "y"][*team as usize].to_string())].into(),
        })],
        Change::Node { n, role } => vec![np.set_node(NodeInfo {
            name: format!("n{n}"),
            labels: [("role".to_string(), ["x", "y"][*role as usize].to_string())].into(),
            ips: vec![IpAddr::from(NODE_IPS[*n as usize])],
        })],
        Change::NodeGone(n) => vec![np.remove_node(&format!("n{n}"))],
        Change::Anp { j, priority, spec } => vec![np.set_anp(&anp(&format!("anp{j}"), *priority, spec))],
        Change::AnpGone(j) => vec![np.remove_anp(&format!("anp{j}"))],
        Change::Banp(spec) => vec![np.set_banp(&banp(spec))],
        Change::BanpGone => vec![np.remove_banp("default")],
        Change::Np { ns, spec } => vec![np.set_policy(&np_policy(*ns, spec))],
        Change::NpGone(ns) => vec![np.remove_policy(NS[*ns as usize], "np")],
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Incremental changes of every kind, each written by `apply`, pass only through states
    /// within the state before or after, bump when the compiler says they narrow, and end as
    /// the full compile.
    #[test]
    fn admin_changes_pass_only_through_states_within_old_or_new(changes in proptest::collection::vec(change(), 1..10)) {
        let mut np = NpCompiler::new();
        let mut maps = Memory::default();
        let mut mirror = Tables::default();
        for c in &changes {
            for d in step(&mut np, c) {
                let old = maps.tables.clone();
                let mut new = old.clone();
                d.apply(&mut new);
                let start = maps.log.len();
                let a = apply(&mut maps, &mut mirror, &d).unwrap();
                let end = replay(&old, &old, &new, &maps.log[start..]);
                prop_assert!(end.is_ok(), "{:?}: {}", c, end.unwrap_err());
                prop_assert_eq!(a.bumped, d.narrows());
                prop_assert_eq!(&mirror, &maps.tables, "the mirror follows the maps");
            }
            prop_assert_eq!(&maps.tables, &np.tables(), "the maps are the full compile");
        }
    }

    /// A restart between two compiles with admin policy, and one that finds a change written
    /// only up to some operation (the agent died mid-write): the reconcile passes only
    /// through states within the two compiles and ends at the new one.
    #[test]
    fn an_admin_reconcile_moves_between_two_compiles_safely(
        a in proptest::collection::vec(change(), 1..8),
        b in proptest::collection::vec(change(), 1..6),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut old_np = NpCompiler::new();
        for c in &a {
            step(&mut old_np, c);
        }
        let mut new_np = old_np.clone();
        for c in &b {
            step(&mut new_np, c);
        }
        let (old, new) = (old_np.tables(), new_np.tables());
        let mut maps = Memory { tables: old.clone(), ..Memory::default() };
        let mut mirror = Tables::default();
        let r = reconcile(&mut maps, &mut mirror, &new).unwrap();
        let end = replay(&old, &old, &new, &maps.log);
        prop_assert!(end.is_ok(), "{}", end.unwrap_err());
        prop_assert_eq!(&maps.tables, &new);
        prop_assert_eq!(r.applied.bumped, Diff::between(&old, &new).narrows());

        // Interrupted after op `cut` of that write; the next agent reconciles from there.
        let ops = maps.log.clone();
        let mut half = old.clone();
        let mut generation = 0;
        for op in &ops[..cut.index(ops.len() + 1)] {
            Memory::step(&mut half, &mut generation, op);
        }
        let mut maps = Memory { tables: half.clone(), ..Memory::default() };
        reconcile(&mut maps, &mut mirror, &new).unwrap();
        let end = replay(&half, &old, &new, &maps.log);
        prop_assert!(end.is_ok(), "from the interrupted write: {}", end.unwrap_err());
        prop_assert_eq!(&maps.tables, &new);
    }
}

/// Two ANPs whose verdicts on one flow swap sides: the old state refuses web→db at db's
/// ingress and admits it at web's egress, the new one the other way round. Writing the
/// diff's entries in their own order (the ingress entry first) admits the flow for a moment,
/// which the checker sees; `apply`'s barrier never does.
#[test]
fn swapping_the_refusing_side_is_caught_in_a_naive_order_and_not_in_apply() {
    let mut np = NpCompiler::new();
    let mut maps = Memory::default();
    let mut mirror = Tables::default();
    let setup = [np.set_pod(pod(0, 0, 0, 80)), np.set_pod(pod(1, 0, 1, 80))];
    let rule = |action: &str, side: &str, app: &str| json!([{"action": action, side: [{"pods": {"namespaceSelector": {}, "podSelector": {"matchLabels": {"app": app}}}}]}]);
    let at_db = |action| json!({"subject": {"pods": {"namespaceSelector": {}, "podSelector": {"matchLabels": {"app": "db"}}}}, "ingress": rule(action, "from", "web")});
    let at_web = |action| json!({"subject": {"pods": {"namespaceSelector": {}, "podSelector": {"matchLabels": {"app": "web"}}}}, "egress": rule(action, "to", "db")});
    for d in setup.into_iter().chain([
        np.set_anp(&anp("x", 1, &at_db("Deny"))),
        np.set_anp(&anp("y", 1, &at_web("Allow"))),
    ]) {
        apply(&mut maps, &mut mirror, &d).unwrap();
    }
    let flow = |t: &Tables| verdict::np(t, pod_ip(0), pod_ip(1), proto::TCP, 80).allowed();
    assert!(!flow(&maps.tables), "refused at db's ingress");
    let old = maps.tables.clone();
    let mut ds = vec![np.set_anp(&anp("x", 1, &at_db("Allow")))];
    ds.push(np.set_anp(&anp("y", 1, &at_web("Deny"))));
    let mut d = ds.remove(0);
    d.rules.upsert.extend(ds[0].rules.upsert.clone());
    d.rules.remove.extend(ds[0].rules.remove.clone());
    let mut new = old.clone();
    d.apply(&mut new);
    assert!(!flow(&new), "refused at web's egress");
    assert_eq!(new, np.tables());

    let naive: Vec<Op> = d
        .rules
        .upsert
        .iter()
        .map(|(k, v)| Op::Rule(*k, *v))
        .chain(d.rules.remove.iter().map(|k| Op::Unrule(*k)))
        .collect();
    let caught = replay(&old, &old, &new, &naive).expect_err("the naive order opens the flow");
    assert!(caught.contains("allowed by neither"), "{caught}");

    let start = maps.log.len();
    apply(&mut maps, &mut mirror, &d).unwrap();
    let written = maps.log[start..].to_vec();
    replay(&old, &old, &new, &written).unwrap();
    assert_eq!(maps.tables, new);
    // Both barriers (their five keys and the changed entries) went up before any real entry
    // changed, and came down at the end.
    let first_real = written
        .iter()
        .position(|o| matches!(o, Op::Rule(k, v) if k.layer == Layer::Anp && *v != BARRIER))
        .unwrap();
    let raised = written[..first_real]
        .iter()
        .filter(|o| matches!(o, Op::Rule(_, v) if *v == BARRIER))
        .count();
    assert_eq!(
        raised,
        2 * (5 + 5),
        "two groups: five protocols of the peer's entry, five barrier keys: {written:#?}"
    );
    assert!(
        maps.tables
            .rules
            .iter()
            .filter(|(k, _)| k.peer == PEER_ISOLATED)
            .all(|(_, v)| v.flags & cozyplane_policy::model::MARK_ANP != 0),
        "both subjects keep their ANP tier"
    );
    assert!(
        !maps.tables.rules.values().any(|v| *v == BARRIER),
        "no barrier is left"
    );
}

/// The barrier's ordinal is below every real rule's, even the first rule of a priority-0
/// ANP whose name hashes to 0 and the BANP's first rule; adding, replacing and removing such
/// a first rule (Allow, Deny, Pass) next to a later rule of the other action stays within
/// old or new.
#[test]
fn the_first_possible_rule_still_ranks_below_the_barrier() {
    let name = (0..200_000)
        .map(|i| format!("zero-{i}"))
        .find(|n| {
            let h = cozyplane_policy::identity::fnv(&[n.as_bytes()]);
            (h ^ (h >> 32)) as u32 & 0x1fff == 0
        })
        .expect("a name whose 13-bit hash is 0");
    let first = ordinal(Layer::Anp, 0, &name, 0);
    assert!(first > BARRIER.rule, "{first}");
    assert!(ordinal(Layer::Banp, 0, "default", 0) > BARRIER.rule);
    let web_to_db = |action: &str| {
        json!({"subject": {"pods": {"namespaceSelector": {}, "podSelector": {"matchLabels": {"app": "db"}}}},
               "ingress": [{"action": action, "from": [{"pods": {"namespaceSelector": {}, "podSelector": {"matchLabels": {"app": "web"}}}}]}]})
    };
    let everyone = |action: &str| {
        json!({"subject": {"namespaces": {}},
               "ingress": [{"action": action, "from": [{"namespaces": {}}]}]})
    };
    let mut np = NpCompiler::new();
    let mut maps = Memory::default();
    let mut mirror = Tables::default();
    let mut run = |np: &mut NpCompiler, d: Diff| {
        let old = maps.tables.clone();
        let mut new = old.clone();
        d.apply(&mut new);
        let start = maps.log.len();
        apply(&mut maps, &mut mirror, &d).unwrap();
        replay(&old, &old, &new, &maps.log[start..]).unwrap();
        assert_eq!(maps.tables, np.tables());
        maps.tables.clone()
    };
    for i in 0..3 {
        let d = np.set_pod(pod(i, 0, i, 80));
        run(&mut np, d);
    }
    let d = np.set_anp(&anp("later", 3, &everyone("Deny")));
    run(&mut np, d);
    let d = np.set_anp(&anp(&name, 0, &web_to_db("Allow")));
    let t = run(&mut np, d);
    let lowest = t.rules.iter().find(|(k, v)| {
        k.layer == Layer::Anp && v.rule == first && v.flags == ACTION_ALLOW && k.dir == Dir::Ingress
    });
    assert!(lowest.is_some(), "the rule has the lowest ordinal: {t:#?}");
    assert!(verdict::np(&t, pod_ip(0), pod_ip(1), proto::TCP, 80).allowed());
    assert!(!verdict::np(&t, pod_ip(2), pod_ip(1), proto::TCP, 80).allowed());
    let steps: [(&str, u8, Option<Value>); 6] = [
        ("later", 3, Some(everyone("Allow"))),
        (&name, 0, Some(web_to_db("Deny"))),
        ("later", 3, Some(everyone("Deny"))),
        (&name, 0, Some(web_to_db("Pass"))),
        (&name, 0, None),
        ("later", 3, None),
    ];
    for (n, priority, spec) in steps {
        let d = match spec {
            Some(spec) => np.set_anp(&anp(n, priority, &spec)),
            None => np.remove_anp(n),
        };
        run(&mut np, d);
    }
}

/// A class goes while a wider block's `Deny` still covers its addresses: an ANP denies web's
/// egress to 0.0.0.0/0 before a later one allows it to the web pods, and a third policy that
/// named 10.0.0.0/29 (the pods' own class) is deleted. Until the /29 class is gone, a pod's
/// address finds no entry of its old class; if the barrier came down before, the pod's own
/// identity would reach the later `Allow`, which neither state lets decide.
#[test]
fn a_class_that_goes_is_gone_before_the_barrier_comes_down() {
    let sel =
        |app: &str| json!({"pods": {"namespaceSelector": {}, "podSelector": {"matchLabels": {"app": app}}}});
    let egress =
        |action: &str, to: Value| json!({"subject": sel("web"), "egress": [{"action": action, "to": [to]}]});
    let mut np = NpCompiler::new();
    let mut maps = Memory::default();
    let mut mirror = Tables::default();
    let setup = [
        np.set_pod(pod(0, 0, 0, 80)),
        np.set_pod(pod(1, 0, 0, 80)),
        np.set_anp(&anp(
            "deny-all",
            0,
            &egress("Deny", json!({"networks": ["0.0.0.0/0"]})),
        )),
        np.set_anp(&anp("allow-web", 1, &egress("Allow", sel("web")))),
        np.set_anp(&anp(
            "names-the-pods",
            2,
            &egress("Pass", json!({"networks": ["10.0.0.0/29"]})),
        )),
    ];
    for d in setup {
        apply(&mut maps, &mut mirror, &d).unwrap();
    }
    let flow = |t: &Tables| verdict::np(t, pod_ip(0), pod_ip(1), proto::TCP, 80).allowed();
    assert!(!flow(&maps.tables), "denied to 0.0.0.0/0 first");
    let old = maps.tables.clone();
    let d = np.remove_anp("names-the-pods");
    assert!(!d.cidrs.remove.is_empty(), "the /29 class goes: {d:#?}");
    let mut new = old.clone();
    d.apply(&mut new);
    assert!(!flow(&new), "still denied to 0.0.0.0/0 first");
    let start = maps.log.len();
    apply(&mut maps, &mut mirror, &d).unwrap();
    let written = maps.log[start..].to_vec();
    replay(&old, &old, &new, &written).unwrap();
    assert_eq!(maps.tables, np.tables());
}
