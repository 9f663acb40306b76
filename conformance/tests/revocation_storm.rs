//! Issue 11, revocation: an address is never re-issued while the pod that held it may still use
//! it. Every Port carries the agent's `sdn.cozystack.io/sever` finalizer, so a deleted Port (its
//! binding reaped, its pod deleted) keeps its address claimed until the node's agent severed the
//! pod and removed the finalizer.
//!
//! The storm: four pod namespaces bound to one small VPC create Ports (pods attaching), delete
//! them (pods deleted) and delete and re-create their bindings (the server reaps their Ports),
//! concurrently, against the real server with its binding reap loop. The agent is simulated by
//! a watch of the Ports: a Port's pod holds its address from the Port's first event until the
//! "agent" severed it, which takes it a few milliseconds after it saw the Port terminating (or
//! gone); then it removes the finalizer, as the real agent does (`agent/src/sever.rs`). Every
//! new Port is checked against the addresses held: no address is ever held by two live pods.
//! Without the finalizer the server hands out a reaped address at once, while the old pod is
//! not yet severed, and the check fails.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cozyplane_apis::v1alpha1::{Port, PortSpec, VPC, VPCBinding, VPCBindingSpec, VPCRef, VPCSpec};
use cozyplane_conformance::{Backend, TestServer};
use futures::StreamExt as _;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};

const SEVER: &str = "sdn.cozystack.io/sever";
const NAMESPACES: [&str; 4] = ["s0", "s1", "s2", "s3"];
const ROUNDS: usize = 60;
/// Hang guard.
const WAIT: Duration = Duration::from_secs(120);

/// Addresses held by pods: ip → Port uid, and what went wrong.
#[derive(Default)]
struct Held {
    by_ip: HashMap<String, String>,
    violations: Vec<String>,
    severed: usize,
}

/// A small deterministic generator (no seed to tune, enough to vary the order).
struct Rng(u64);

impl Rng {
    fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn port_for(pod_ns: &str) -> Port {
    let mut p = Port::new(
        "",
        PortSpec {
            vpc_ref: VPCRef {
                namespace: "tenant".into(),
                name: "x".into(),
            },
            node: "n1".into(),
            node_ip: "192.168.0.1".into(),
            pod_namespace: pod_ns.into(),
            pod_name: "p".into(),
            ..Default::default()
        },
    );
    p.metadata.name = None;
    p.metadata.labels = Some(
        [
            ("sdn.cozystack.io/vpc-namespace", "tenant"),
            ("sdn.cozystack.io/vpc", "x"),
            ("sdn.cozystack.io/pod-namespace", pod_ns),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect(),
    );
    p
}

fn binding(ns: &str) -> VPCBinding {
    let mut b = VPCBinding::new(
        "grant",
        VPCBindingSpec {
            vpc_ref: VPCRef {
                namespace: "tenant".into(),
                name: "x".into(),
            },
        },
    );
    b.metadata.namespace = Some(ns.into());
    b
}

/// The simulated agent: pods hold their Port's address until severed; severing takes a few
/// milliseconds after the Port is seen terminating or gone, and ends with the finalizer's removal.
async fn agent(ports: Api<Port>, held: Arc<Mutex<Held>>) {
    let mut events = watcher::watcher(ports.clone(), watcher::Config::default()).boxed();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    while let Some(ev) = events.next().await {
        let (p, gone) = match ev {
            Ok(Event::Apply(p) | Event::InitApply(p)) => (p, false),
            Ok(Event::Delete(p)) => (p, true),
            _ => continue,
        };
        let (ip, uid) = (p.spec.ip.clone(), p.metadata.uid.clone().unwrap_or_default());
        let name = p.metadata.name.clone().unwrap_or_default();
        if !gone && p.metadata.deletion_timestamp.is_none() {
            let mut h = held.lock().unwrap();
            match h.by_ip.get(&ip) {
                Some(other) if *other != uid => {
                    let v = format!("{ip}: Port {name} ({uid}) while the pod of {other} still holds it");
                    h.violations.push(v);
                }
                _ => {
                    h.by_ip.insert(ip, uid);
                }
            }
            continue;
        }
        let delay = Duration::from_millis(5 + rng.next(30));
        let (held, ports) = (held.clone(), ports.clone());
        let finalized = p
            .metadata
            .finalizers
            .as_ref()
            .is_some_and(|f| f.iter().any(|x| x == SEVER));
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            {
                let mut h = held.lock().unwrap();
                if h.by_ip.get(&ip) == Some(&uid) {
                    h.by_ip.remove(&ip);
                    h.severed += 1;
                }
            }
            if finalized && !gone {
                let patch = serde_json::json!({"metadata": {"finalizers": null}});
                let _ = ports
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await;
            }
        });
    }
}

async fn worker(c: kube::Client, ns: &'static str, seed: u64) {
    let ports: Api<Port> = Api::all(c.clone());
    let bindings: Api<VPCBinding> = Api::namespaced(c, ns);
    let pp = PostParams::default();
    let mut rng = Rng(seed);
    let mut mine: Vec<String> = Vec::new();
    let mut spent = [Duration::ZERO; 3];
    for _ in 0..ROUNDS {
        let t0 = std::time::Instant::now();
        let op = rng.next(10);
        let k = match op {
            0..=4 => 0,
            5..=7 if !mine.is_empty() => 1,
            _ => 2,
        };
        match op {
            // A pod attaches (a full VPC answers 507; that pod waits).
            0..=4 => {
                if let Ok(p) = ports.create(&pp, &port_for(ns)).await {
                    mine.push(p.metadata.name.unwrap());
                }
            }
            // A pod is deleted: its DEL deletes the Port.
            5..=7 if !mine.is_empty() => {
                let i = usize::try_from(rng.next(mine.len() as u64)).unwrap();
                let name = mine.swap_remove(i);
                let _ = ports.delete(&name, &DeleteParams::default()).await;
            }
            // The binding goes (its Ports are reaped) and comes back.
            _ => {
                let _ = bindings.delete("grant", &DeleteParams::default()).await;
                mine.clear();
                let t = std::time::Instant::now();
                while bindings.get_opt("grant").await.unwrap().is_some() {
                    assert!(t.elapsed() < WAIT, "{ns}: the binding never goes");
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                bindings.create(&pp, &binding(ns)).await.unwrap();
            }
        }
        spent[k] += t0.elapsed();
    }
    eprintln!(
        "{ns}: create {:?} delete {:?} rebind {:?}",
        spent[0], spent[1], spent[2]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_address_is_held_by_two_live_pods() {
    let s = TestServer::start(Backend::Embedded).await;
    let c = s.client().await;
    let pp = PostParams::default();
    let mut v = VPC::new(
        "x",
        VPCSpec {
            cidrs: vec!["10.9.0.0/28".into()],
            mtu: 0,
            dhcp: None,
            dns64: false,
        },
    );
    v.metadata.namespace = Some("tenant".into());
    Api::<VPC>::namespaced(c.clone(), "tenant")
        .create(&pp, &v)
        .await
        .unwrap();
    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(c.clone());
    for ns in NAMESPACES {
        let n = serde_json::from_value(serde_json::json!({"metadata": {"name": ns}})).unwrap();
        let _ = nss.create(&pp, &n).await;
        Api::<VPCBinding>::namespaced(c.clone(), ns)
            .create(&pp, &binding(ns))
            .await
            .unwrap();
    }
    let started = std::time::Instant::now();
    let held = Arc::new(Mutex::new(Held::default()));
    let ports: Api<Port> = Api::all(c.clone());
    let sim = tokio::spawn(agent(ports.clone(), held.clone()));
    let workers: Vec<_> = NAMESPACES
        .iter()
        .enumerate()
        .map(|(i, ns)| tokio::spawn(worker(c.clone(), ns, 0x1234_5678 + i as u64 * 7919)))
        .collect();
    tokio::time::timeout(WAIT, async {
        for w in workers {
            w.await.unwrap();
        }
    })
    .await
    .expect("the storm finishes");
    eprintln!("storm: {} ms", started.elapsed().as_millis());
    // Quiesce: every terminating Port is released by the simulated agent.
    let t = std::time::Instant::now();
    loop {
        let left = ports
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_some())
            .count();
        if left == 0 {
            break;
        }
        assert!(t.elapsed() < WAIT, "{left} Ports never released");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    sim.abort();
    let (severed, violations, left) = {
        let h = held.lock().unwrap();
        (h.severed, h.violations.clone(), h.by_ip.len())
    };
    eprintln!("storm: {severed} pods severed, {left} addresses held at the end");
    assert!(severed >= 20, "the storm revoked pods ({severed})");
    assert!(
        violations.is_empty(),
        "{} addresses re-issued while held:\n{}",
        violations.len(),
        violations.join("\n")
    );
    let r = cozyplane_apiserver::alloc::scan::scan(&s.storage).await.unwrap();
    assert!(r.problems.is_empty(), "{:#?}", r.problems);
}
