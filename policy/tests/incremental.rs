//! Incremental compilation is exact: after any sequence of changes (policies created,
//! replaced, deleted; pods relabelled, re-ported, moved to hostNetwork, deleted, created;
//! namespaces relabelled), (1) the compiler's maps equal a full compile of the final
//! state, and (2) the diffs it returned, applied in order to the initial maps, give the
//! same maps (the agent only ever sees the diffs).

mod common;

use std::collections::BTreeMap;

use common::{NAMESPACES, World, labels, pod_info};
use cozyplane_policy::Tables;
use cozyplane_policy::np::{NamespaceInfo, NpCompiler, PodInfo};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};

#[derive(Default)]
struct State {
    ns: BTreeMap<String, NamespaceInfo>,
    pods: BTreeMap<(String, String), PodInfo>,
    pols: BTreeMap<(String, String), NetworkPolicy>,
}

fn key(np: &NetworkPolicy) -> (String, String) {
    (
        np.metadata.namespace.clone().unwrap(),
        np.metadata.name.clone().unwrap(),
    )
}

fn run(ops: &[(u8, u64)]) -> Result<(), TestCaseError> {
    let world = World::new();
    let mut st = State::default();
    for n in world.namespaces() {
        st.ns.insert(n.name.clone(), n);
    }
    for p in world.pod_infos() {
        st.pods.insert((p.ns.clone(), p.name.clone()), p);
    }
    let mut c = NpCompiler::build(st.ns.values().cloned(), st.pods.values().cloned(), &[]);
    let mut applied: Tables = c.tables();
    for (op, seed) in ops {
        let mut r = StdRng::seed_from_u64(*seed);
        let d = match op % 7 {
            0 | 1 => {
                // Names from a small pool, so policies get replaced too.
                let name = format!("p{}", r.random_range(0..4));
                let np = common::policy(&mut r, &name);
                let k = key(&np);
                // A same-named policy in another namespace is another object; keep one per
                // name so "replace" happens often.
                st.pols.insert(k, np.clone());
                c.set_policy(&np)
            }
            2 => {
                let Some(k) = st
                    .pols
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .choose(&mut r)
                    .cloned()
                else {
                    continue;
                };
                st.pols.remove(&k);
                c.remove_policy(&k.0, &k.1)
            }
            3 | 4 => {
                let keys: Vec<_> = st.pods.keys().cloned().collect();
                let k = keys.choose(&mut r).unwrap().clone();
                let mut p = st.pods[&k].clone();
                match r.random_range(0..5) {
                    0 => {
                        p.labels.insert(
                            "pod".into(),
                            ["a", "b", "c", "d"].choose(&mut r).unwrap().to_string(),
                        );
                    }
                    1 => {
                        p.labels.insert(
                            "app".into(),
                            ["web", "db", "new"].choose(&mut r).unwrap().to_string(),
                        );
                    }
                    2 => {
                        p.labels.remove("app");
                    }
                    3 => p.host_network = !p.host_network,
                    _ => p.named_ports.retain(|(n, _, _)| n != "web"),
                }
                st.pods.insert(k, p.clone());
                c.set_pod(p)
            }
            5 => {
                // Delete a pod, or bring a new one (a fresh address in a namespace).
                if r.random_bool(0.5) && st.pods.len() > 3 {
                    let keys: Vec<_> = st.pods.keys().cloned().collect();
                    let k = keys.choose(&mut r).unwrap().clone();
                    st.pods.remove(&k);
                    c.remove_pod(&k.0, &k.1)
                } else {
                    let mut p = pod_info(world.pods.choose(&mut r).unwrap());
                    let n = st.pods.len() + 100;
                    p.name = format!("extra{n}");
                    p.ips = vec![format!("10.0.9.{}", n % 250).parse().unwrap()];
                    if st.pods.values().any(|q| q.ips == p.ips) {
                        continue;
                    }
                    st.pods.insert((p.ns.clone(), p.name.clone()), p.clone());
                    c.set_pod(p)
                }
            }
            _ => {
                let ns = NAMESPACES.choose(&mut r).unwrap().to_string();
                let mut n = st.ns[&ns].clone();
                n.labels = labels(&[
                    ("ns", ["x", "y", "z"].choose(&mut r).unwrap()),
                    ("kubernetes.io/metadata.name", &ns),
                    ("tier", ["front", "back"].choose(&mut r).unwrap()),
                ]);
                st.ns.insert(ns, n.clone());
                c.set_namespace(&n)
            }
        };
        d.apply(&mut applied);
    }
    let full = NpCompiler::build(
        st.ns.values().cloned(),
        st.pods.values().cloned(),
        st.pols.values(),
    );
    let (inc, full) = (c.tables(), full.tables());
    prop_assert_eq!(inc.rules.len(), full.rules.len(), "rule entries");
    prop_assert!(inc == full, "incremental maps differ from a full compile");
    prop_assert!(applied == inc, "the returned diffs do not rebuild the maps");
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn incremental_equals_full_recompile(ops in prop::collection::vec((any::<u8>(), any::<u64>()), 1..40)) {
        run(&ops)?;
    }
}

/// One relabel of a replica to an existing label set touches one address entry and no
/// rule.
#[test]
fn relabelling_into_an_existing_label_set_rewrites_one_entry() {
    let world = World::new();
    let mut pols = Vec::new();
    let mut r = StdRng::seed_from_u64(7);
    for i in 0..6 {
        pols.push(common::policy(&mut r, &format!("p{i}")));
    }
    let mut c = NpCompiler::build(world.namespaces(), world.pod_infos(), &pols);
    // A second replica of x/a arrives (its label set exists: one address entry) ...
    let mut a2 = pod_info(&world.pods[0]);
    a2.name = "a-replica".into();
    a2.ips = vec!["10.0.1.99".parse().unwrap()];
    a2.labels.insert("pod-template-hash".into(), "other".into());
    let d = c.set_pod(a2.clone());
    assert!(d.rules.is_empty() && d.cidrs.is_empty(), "{d:?}");
    assert_eq!(d.np_idents.len(), 1, "{d:?}");
    // ... then is relabelled into x/b's label set (which exists, and x/a keeps its own).
    let b = pod_info(&world.pods[1]);
    a2.labels = b.labels.clone();
    a2.named_ports = b.named_ports.clone();
    let d = c.set_pod(a2);
    assert!(d.rules.is_empty() && d.cidrs.is_empty(), "{d:?}");
    assert_eq!(d.np_idents.len(), 1, "{d:?}");
    assert_eq!(
        c.identity_of("10.0.1.99".parse().unwrap()),
        c.identity_of(world.pods[1].ip)
    );
}
