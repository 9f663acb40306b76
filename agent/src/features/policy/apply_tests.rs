//! The write order against the compiler's own verdict: every intermediate state a packet
//! could meet allows nothing that neither the state before nor the state after allows, and
//! the maps end equal to the full compile.

use std::net::IpAddr;

use cozyplane_policy::model::{Diff, Tables, proto};
use cozyplane_policy::np::{NamespaceInfo, NpCompiler, PodInfo};
use cozyplane_policy::verdict;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::features::policy::maps::{Memory, Op};

const PODS: u8 = 6;

fn pod_ip(i: u8) -> IpAddr {
    IpAddr::from([10, 0, 0, i + 1])
}

/// Pod addresses, an address in the ipBlock's except, one outside the cluster.
fn probes() -> Vec<IpAddr> {
    let mut v: Vec<IpAddr> = (0..PODS).map(pod_ip).collect();
    v.push(IpAddr::from([10, 0, 0, 7]));
    v.push(IpAddr::from([192, 0, 2, 1]));
    v
}

const PORTS: [u16; 3] = [80, 85, 443];

/// Every (src, dst, port) NetworkPolicy allows in `t`.
fn allowed(t: &Tables) -> Vec<(IpAddr, IpAddr, u16)> {
    let ps = probes();
    let mut out = Vec::new();
    for s in &ps {
        for d in &ps {
            for p in PORTS {
                if s != d && verdict::np(t, *s, *d, proto::TCP, p).allowed() {
                    out.push((*s, *d, p));
                }
            }
        }
    }
    out
}

/// Replays `ops` on `old`, checking every intermediate state; returns the end state.
fn replay_checked(old: &Tables, new: &Tables, ops: &[Op]) -> Tables {
    let before = allowed(old);
    let after = allowed(new);
    let mut t = old.clone();
    let mut generation = 0;
    for (i, op) in ops.iter().enumerate() {
        Memory::step(&mut t, &mut generation, op);
        for a in allowed(&t) {
            assert!(
                before.contains(&a) || after.contains(&a),
                "after op {i} ({op:?}) of {ops:#?}, {a:?} is allowed by neither state"
            );
        }
    }
    t
}

#[derive(Clone, Debug)]
enum Change {
    Pod { i: u8, ns: u8, app: u8, port: u16 },
    PodGone(u8),
    Policy { j: u8, spec: Value, ns: u8 },
    PolicyGone(u8, u8),
    Ns { ns: u8, team: u8 },
}

const NS: [&str; 2] = ["a", "b"];
const APPS: [&str; 3] = ["web", "db", "api"];

fn peer() -> impl Strategy<Value = Value> {
    prop_oneof![
        (0..3usize).prop_map(|a| json!({"podSelector": {"matchLabels": {"app": APPS[a]}}})),
        (0..2usize).prop_map(|t| {
            let team = ["x", "y"][t];
            json!({"namespaceSelector": {"matchLabels": {"team": team}}})
        }),
        Just(json!({"ipBlock": {"cidr": "10.0.0.0/29", "except": ["10.0.0.4/30"]}})),
        Just(json!({"ipBlock": {"cidr": "10.0.0.0/24"}})),
    ]
}

fn ports() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!([])),
        Just(json!([{"port": 80}])),
        Just(json!([{"port": 80, "endPort": 90}])),
        Just(json!([{"port": "http"}])),
    ]
}

fn rule() -> impl Strategy<Value = Value> {
    (proptest::collection::vec(peer(), 0..3), ports()).prop_map(|(peers, ports)| {
        let mut r = json!({ "ports": ports });
        if !peers.is_empty() {
            r["from"] = json!(peers);
            r["to"] = json!(peers);
        }
        r
    })
}

fn spec() -> impl Strategy<Value = Value> {
    (
        prop_oneof![Just(None), (0..3usize).prop_map(Some)],
        proptest::collection::vec(rule(), 0..3),
        proptest::collection::vec(rule(), 0..2),
        any::<bool>(),
    )
        .prop_map(|(sel, ing, eg, egress)| {
            let selector = sel.map_or(json!({}), |a| json!({"matchLabels": {"app": APPS[a]}}));
            let ingress: Vec<Value> = ing
                .into_iter()
                .map(|mut r| {
                    r.as_object_mut().unwrap().remove("to");
                    r
                })
                .collect();
            let mut s = json!({"podSelector": selector, "ingress": ingress, "policyTypes": ["Ingress"]});
            if egress {
                let eg: Vec<Value> = eg
                    .into_iter()
                    .map(|mut r| {
                        r.as_object_mut().unwrap().remove("from");
                        r
                    })
                    .collect();
                s["egress"] = json!(eg);
                s["policyTypes"] = json!(["Ingress", "Egress"]);
            }
            s
        })
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        3 => (0..PODS, 0..2u8, 0..3u8, prop_oneof![Just(80u16), Just(85)])
            .prop_map(|(i, ns, app, port)| Change::Pod { i, ns, app, port }),
        1 => (0..PODS).prop_map(Change::PodGone),
        3 => (0..3u8, spec(), 0..2u8).prop_map(|(j, spec, ns)| Change::Policy { j, spec, ns }),
        1 => (0..3u8, 0..2u8).prop_map(|(j, ns)| Change::PolicyGone(j, ns)),
        1 => (0..2u8, 0..2u8).prop_map(|(ns, team)| Change::Ns { ns, team }),
    ]
}

fn policy(j: u8, ns: u8, spec: &Value) -> NetworkPolicy {
    serde_json::from_value(json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": format!("p{j}"), "namespace": NS[ns as usize]},
        "spec": spec,
    }))
    .unwrap()
}

/// Apply `c` to the compiler, one diff per compiler call (pods are named by index, so a
/// pod moving namespace is a delete and an add).
fn step(np: &mut NpCompiler, c: &Change) -> Vec<Diff> {
    match c {
        Change::Pod { i, ns, app, port } => {
            let mut ds: Vec<Diff> = NS
                .iter()
                .filter(|other| **other != NS[*ns as usize])
                .map(|other| np.remove_pod(other, &format!("p{i}")))
                .collect();
            ds.push(np.set_pod(PodInfo {
                ns: NS[*ns as usize].into(),
                name: format!("p{i}"),
                labels: [("app".to_string(), APPS[*app as usize].to_string())].into(),
                ips: vec![pod_ip(*i)],
                host_network: false,
                named_ports: vec![("http".into(), proto::TCP, *port)],
            }));
            ds
        }
        Change::PodGone(i) => NS.iter().map(|ns| np.remove_pod(ns, &format!("p{i}"))).collect(),
        Change::Policy { j, spec, ns } => vec![np.set_policy(&policy(*j, *ns, spec))],
        Change::PolicyGone(j, ns) => vec![np.remove_policy(NS[*ns as usize], &format!("p{j}"))],
        Change::Ns { ns, team } => vec![np.set_namespace(&NamespaceInfo {
            name: NS[*ns as usize].into(),
            labels: [("team".to_string(), ["x", "y"][*team as usize].to_string())].into(),
        })],
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// Incremental changes, each written by `apply`, pass only through states that allow
    /// what the state before or after allows, and the maps end as the full compile.
    #[test]
    fn every_intermediate_state_is_within_old_or_new(changes in proptest::collection::vec(change(), 1..10)) {
        let mut np = NpCompiler::new();
        let mut maps = Memory::default();
        let mut mirror = Tables::default();
        for c in &changes {
            for d in step(&mut np, c) {
                let old = maps.tables.clone();
                let mut new = old.clone();
                d.apply(&mut new);
                let before = maps.log.len();
                let a = apply(&mut maps, &mut mirror, &d).unwrap();
                let written = &maps.log[before..];
                replay_checked(&old, &new, written);
                prop_assert_eq!(a.bumped, d.narrows());
                prop_assert_eq!(&mirror, &maps.tables, "the mirror follows the maps");
            }
            prop_assert_eq!(&maps.tables, &np.tables(), "the maps are the full compile");
        }
    }

    /// A restart: the maps hold one compile, the watches give another; the reconcile passes
    /// only through states within the two and ends at the new compile.
    #[test]
    fn a_reconcile_moves_between_two_compiles_safely(
        a in proptest::collection::vec(change(), 1..8),
        b in proptest::collection::vec(change(), 1..8),
    ) {
        let mut old_np = NpCompiler::new();
        for c in &a {
            step(&mut old_np, c);
        }
        let mut new_np = old_np.clone();
        for c in &b {
            step(&mut new_np, c);
        }
        let old = old_np.tables();
        let new = new_np.tables();
        let mut maps = Memory { tables: old.clone(), ..Memory::default() };
        let mut mirror = Tables::default();
        let r = reconcile(&mut maps, &mut mirror, &new).unwrap();
        replay_checked(&old, &new, &maps.log);
        prop_assert_eq!(&maps.tables, &new);
        prop_assert_eq!(r.applied.bumped, Diff::between(&old, &new).narrows());
    }
}

#[test]
fn narrowing_writes_come_first_and_a_narrowing_bumps_the_generation() {
    let allow = json!({"podSelector": {"matchLabels": {"app": "db"}}, "policyTypes": ["Ingress"],
        "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "web"}}}], "ports": [{"port": 80}]}]});
    let mut np = NpCompiler::new();
    let mut maps = Memory::default();
    let mut mirror = Tables::default();
    for (i, app) in [(0u8, "web"), (1, "db")] {
        let d = np.set_pod(PodInfo {
            ns: "a".into(),
            name: format!("p{i}"),
            labels: [("app".to_string(), app.to_string())].into(),
            ips: vec![pod_ip(i)],
            ..PodInfo::default()
        });
        apply(&mut maps, &mut mirror, &d).unwrap();
    }
    let marker = |o: &Op| matches!(o, Op::Rule(k, _) | Op::Unrule(k) if k.peer == cozyplane_policy::model::PEER_ISOLATED);
    let rule = |o: &Op| matches!(o, Op::Rule(k, _) | Op::Unrule(k) if k.peer != cozyplane_policy::model::PEER_ISOLATED);
    // Isolating db while allowing web: the marker (narrowing) before the allow entry.
    maps.log.clear();
    let d = np.set_policy(&policy(0, 0, &allow));
    let a = apply(&mut maps, &mut mirror, &d).unwrap();
    let m = maps.log.iter().position(marker).unwrap();
    let r = maps.log.iter().position(rule).unwrap();
    assert!(m < r, "{:?}", maps.log);
    assert_eq!(a.bumped, d.narrows(), "the bump follows the compiler's judgement");
    assert!(verdict::np(&maps.tables, pod_ip(0), pod_ip(1), proto::TCP, 80).allowed());
    assert!(!verdict::np(&maps.tables, pod_ip(0), pod_ip(1), proto::TCP, 81).allowed());
    // Removing it: the allow entry (narrowing) goes before the marker, then the bump.
    maps.log.clear();
    let generation = maps.generation;
    let d = np.remove_policy("a", "p0");
    let a = apply(&mut maps, &mut mirror, &d).unwrap();
    assert!(a.bumped);
    assert_eq!(maps.generation, generation + 1);
    let m = maps.log.iter().position(marker).unwrap();
    let r = maps.log.iter().position(rule).unwrap();
    assert!(r < m, "{:?}", maps.log);
    assert_eq!(maps.log.last(), Some(&Op::Bump));
    assert_eq!(mirror, maps.tables);
}

#[test]
fn a_reconcile_keeps_what_holds_and_removes_what_is_stale() {
    let mut np = NpCompiler::new();
    let d = np.set_pod(PodInfo {
        ns: "a".into(),
        name: "p0".into(),
        labels: [("app".to_string(), "web".to_string())].into(),
        ips: vec![pod_ip(0)],
        ..PodInfo::default()
    });
    let mut maps = Memory::default();
    let mut mirror = Tables::default();
    apply(&mut maps, &mut mirror, &d).unwrap();
    // A stale identity from a previous agent's pod, and a stale rule.
    let mut stale = maps.tables.clone();
    stale.np_idents.insert(pod_ip(5), 4242);
    let k = cozyplane_policy::model::RuleKey {
        layer: cozyplane_policy::model::Layer::Np,
        dir: cozyplane_policy::model::Dir::Ingress,
        net: 0,
        subject: 4242,
        peer: cozyplane_policy::model::PEER_ISOLATED,
        proto: 0,
        port: cozyplane_policy::ports::PortBlock::ANY,
    };
    stale.rules.insert(
        k,
        cozyplane_policy::model::RuleVal {
            peers: cozyplane_policy::model::ALL,
            rule: 0,
            flags: 0,
        },
    );
    maps.tables = stale;
    maps.log.clear();
    let r = reconcile(&mut maps, &mut mirror, &np.tables()).unwrap();
    assert_eq!(maps.tables, np.tables());
    assert_eq!(r.kept, 1, "the live pod's identity is left as it is");
    assert!(r.applied.bumped);
    assert!(
        !maps
            .log
            .iter()
            .any(|o| matches!(o, Op::Ident(ip, _) | Op::Unident(ip) if *ip == pod_ip(0))),
        "the entry that holds is never rewritten: {:?}",
        maps.log
    );
    assert!(
        maps.log.contains(&Op::Ident(pod_ip(5), QUARANTINE)),
        "the stale address is parked before its identity goes: {:?}",
        maps.log
    );
}

/// SecurityGroups: the same property for incremental group and member changes.
mod sg {
    use cozyplane_apis::v1alpha1::{Port, SecurityGroup};
    use cozyplane_policy::sg::SgCompiler;
    use cozyplane_policy::verdict::Endpoint;

    use super::*;

    const NET: u32 = 100;

    fn ep(i: u8) -> Endpoint {
        Endpoint {
            net: NET,
            ip: IpAddr::from([10, 1, 0, i + 1]),
        }
    }

    fn allowed_sg(t: &Tables) -> Vec<(u8, u8, u16)> {
        let mut out = Vec::new();
        // 0..4: ports; 4: an address outside the VPC (north-south).
        let all: Vec<Endpoint> = (0..4)
            .map(ep)
            .chain([Endpoint {
                net: NET,
                ip: IpAddr::from([203, 0, 113, 9]),
            }])
            .collect();
        for (a, s) in all.iter().enumerate() {
            for (b, d) in all.iter().enumerate() {
                for p in PORTS {
                    if a != b && verdict::sg(t, *s, *d, proto::TCP, p).allowed() {
                        out.push((a as u8, b as u8, p));
                    }
                }
            }
        }
        out
    }

    #[derive(Clone, Debug)]
    enum SgChange {
        Group {
            g: u8,
            rules: Vec<(Option<u8>, Option<u16>)>,
        },
        GroupGone(u8),
        Port {
            i: u8,
            groups: Vec<i32>,
        },
    }

    fn sg_change() -> impl Strategy<Value = SgChange> {
        let rule = (
            prop_oneof![Just(None), (0..2u8).prop_map(Some)],
            prop_oneof![Just(None), Just(Some(80u16)), Just(Some(443))],
        );
        prop_oneof![
            2 => (0..2u8, proptest::collection::vec(rule, 0..5)).prop_map(|(g, rules)| SgChange::Group { g, rules }),
            1 => (0..2u8).prop_map(SgChange::GroupGone),
            2 => (0..4u8, proptest::collection::vec(1..3i32, 0..2)).prop_map(|(i, groups)| SgChange::Port { i, groups }),
        ]
    }

    /// Rules with a peer group (or the outside CIDR) and a port (or all); the first half
    /// ingress, the second egress.
    fn group(g: u8, rules: &[(Option<u8>, Option<u16>)]) -> SecurityGroup {
        let rule = |(peer, port): &(Option<u8>, Option<u16>), side: &str| {
            let other = match peer {
                Some(p) => json!({"group": format!("g{p}")}),
                None => json!({"cidr": "203.0.113.0/24"}),
            };
            let ports = port.map_or(json!([]), |p| json!([{"protocol": "TCP", "port": p}]));
            json!({side: other, "ports": ports})
        };
        let half = rules.len().div_ceil(2);
        let ingress: Vec<Value> = rules[..half].iter().map(|r| rule(r, "from")).collect();
        let egress: Vec<Value> = rules[half..].iter().map(|r| rule(r, "to")).collect();
        serde_json::from_value(json!({
            "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "SecurityGroup",
            "metadata": {"name": format!("g{g}"), "namespace": "t"},
            "spec": {"vpcRef": {"name": "v"}, "ingress": ingress, "egress": egress},
            "status": {"id": i32::from(g) + 1},
        }))
        .unwrap()
    }

    fn port(i: u8, groups: &[i32]) -> Port {
        serde_json::from_value(json!({
            "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "Port",
            "metadata": {"name": format!("p{i}")},
            "spec": {"vpcRef": {"namespace": "t", "name": "v"}, "ip": ep(i).ip.to_string(), "node": "n", "nodeIP": "192.0.2.1"},
            "status": {"groups": groups},
        }))
        .unwrap()
    }

    /// A group's ingress and egress peers swap: a member's egress and another member's
    /// ingress both change, and only lowering both entries first keeps the flow between
    /// them refused throughout (old: refused at ingress; new: at egress).
    #[test]
    fn swapping_a_groups_peers_never_opens_the_flow_between_its_members() {
        let mut c = SgCompiler::new();
        let mut maps = Memory::default();
        let mut mirror = Tables::default();
        for d in [
            c.set_vpc("t", "v", NET),
            c.set_group(&group(1, &[])),
            c.set_group(&group(0, &[(Some(1), Some(80)), (Some(0), Some(80))])),
            c.set_port(&port(0, &[1])),
            c.set_port(&port(1, &[1])),
        ] {
            apply(&mut maps, &mut mirror, &d).unwrap();
        }
        let flow = |t: &Tables| verdict::sg(t, ep(0), ep(1), proto::TCP, 80).allowed();
        assert!(!flow(&maps.tables), "refused at the destination's ingress");
        let d = c.set_group(&group(0, &[(Some(0), Some(80)), (Some(1), Some(80))]));
        let start = maps.log.len();
        apply(&mut maps, &mut mirror, &d).unwrap();
        let mut t = Tables::default();
        let mut generation = 0;
        for op in &maps.log[..start] {
            Memory::step(&mut t, &mut generation, op);
        }
        for op in &maps.log[start..] {
            Memory::step(&mut t, &mut generation, op);
            assert!(!flow(&t), "allowed after {op:?}: {:?}", &maps.log[start..]);
        }
        assert!(!flow(&maps.tables), "refused at the source's egress");
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

        /// A restart between two SecurityGroup compiles: members whose groups change are
        /// parked, so no state in between allows what neither compile does.
        #[test]
        fn an_sg_reconcile_moves_between_two_compiles_safely(
            a in proptest::collection::vec(sg_change(), 1..8),
            b in proptest::collection::vec(sg_change(), 1..8),
        ) {
            let mut c = SgCompiler::new();
            c.set_vpc("t", "v", NET);
            let run = |c: &mut SgCompiler, ch: &SgChange| match ch {
                SgChange::Group { g, rules } => c.set_group(&group(*g, rules)),
                SgChange::GroupGone(g) => c.remove_group("t", &format!("g{g}")),
                SgChange::Port { i, groups } => c.set_port(&port(*i, groups)),
            };
            for ch in &a {
                run(&mut c, ch);
            }
            let old = c.tables();
            for ch in &b {
                run(&mut c, ch);
            }
            let new = c.tables();
            let mut maps = Memory { tables: old.clone(), ..Memory::default() };
            let mut mirror = Tables::default();
            reconcile(&mut maps, &mut mirror, &new).unwrap();
            let (before, after) = (allowed_sg(&old), allowed_sg(&new));
            let mut t = old.clone();
            let mut generation = 0;
            for op in &maps.log {
                Memory::step(&mut t, &mut generation, op);
                for x in allowed_sg(&t) {
                    prop_assert!(before.contains(&x) || after.contains(&x), "{op:?}: {x:?} in {:?}", maps.log);
                }
            }
            prop_assert_eq!(&maps.tables, &new);
        }

        #[test]
        fn sg_changes_pass_only_through_states_within_old_or_new(changes in proptest::collection::vec(sg_change(), 1..10)) {
            let mut c = SgCompiler::new();
            let mut maps = Memory::default();
        let mut mirror = Tables::default();
            let d = c.set_vpc("t", "v", NET);
            apply(&mut maps, &mut mirror, &d).unwrap();
            for ch in &changes {
                let d = match ch {
                    SgChange::Group { g, rules } => c.set_group(&group(*g, rules)),
                    SgChange::GroupGone(g) => c.remove_group("t", &format!("g{g}")),
                    SgChange::Port { i, groups } => c.set_port(&port(*i, groups)),
                };
                let old = maps.tables.clone();
                let mut new = old.clone();
                d.apply(&mut new);
                let (before, after) = (allowed_sg(&old), allowed_sg(&new));
                let start = maps.log.len();
                apply(&mut maps, &mut mirror, &d).unwrap();
                let mut t = old.clone();
                let mut generation = 0;
                for op in &maps.log[start..] {
                    Memory::step(&mut t, &mut generation, op);
                    for a in allowed_sg(&t) {
                        prop_assert!(before.contains(&a) || after.contains(&a), "{op:?}: {a:?}");
                    }
                }
                prop_assert_eq!(&maps.tables, &c.tables());
            }
        }
    }
}
