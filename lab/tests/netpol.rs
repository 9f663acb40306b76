//! NetworkPolicy conformance in the lab, cyclonus-style: three namespaces (`x`, `y`, `z`)
//! × three labelled default-network pods (`a`, `b`, `c`, with named container ports that
//! differ per pod) spread over two lab nodes, random NetworkPolicy sets from the truth-table
//! generator of `policy/tests` (podSelector, namespaceSelector, both, ipBlock with except
//! over the pods' real addresses, ports with `endPort`, named ports, ingress and egress),
//! applied through the kube stand-in as the agents watch them, and every pod pair probed
//! both ways with real connections over TCP and UDP on eight ports. The expected matrix
//! comes from `policy/tests/common/oracle.rs`, an interpreter of the policy text that
//! shares nothing with the compiler; every case must match. Also: the node reaches its own
//! pods whatever their policies (kubelet probes), and a hostNetwork pod whose labels a
//! policy selects is no subject (the node's traffic stays open).
//!
//! Needs root (fails without it), python3, and the agent and CNI binaries built.

use std::net::IpAddr;

use cozyplane_lab::{Lab, LabPod, Netns, Proc};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, DeleteParams, PostParams};
use rand::SeedableRng;
use rand::rngs::StdRng;

mod common;
#[allow(
    dead_code,
    unreachable_pub,
    clippy::all,
    reason = "the policy crate's generator and oracle, shared"
)]
#[path = "../../policy/tests/common/mod.rs"]
mod npgen;
#[path = "netpol/world.rs"]
mod world;

use common::Cp;
use npgen::oracle::{self, End, OPod};
use npgen::{NAMESPACES, PODS, PROBES};
use world::{Gate, Probe, run_probes, serve};

/// Policy sets probed (each over the whole matrix).
const SETS: u64 = 16;
/// Seconds a probe waits for its answer; a refused one takes all of it.
const TIMEOUT: f64 = 2.5;

#[test]
fn lab_netpol() {
    Lab::run(2, body);
}

/// The ipBlocks of the lab's sets, around the pods' real addresses: the pod network, each
/// node's block with a pod cut out, one pod alone, everything but a block.
fn lab_blocks(pods: &[OPod], blocks: &[String]) -> Vec<(String, Vec<String>)> {
    let host = |i: usize| format!("{}/32", pods[i].ip);
    vec![
        ("10.244.0.0/16".into(), vec![]),
        (blocks[0].clone(), vec![host(0)]),
        ("0.0.0.0/0".into(), vec![blocks[1].clone()]),
        (host(4), vec![]),
        ("10.0.0.0/8".into(), vec![blocks[0].clone(), host(8)]),
        ("192.168.0.0/16".into(), vec![]),
        (blocks[1].clone(), vec![host(3), host(7)]),
    ]
}

async fn body(lab: &mut Lab) {
    let cp = Cp::start(lab).await;
    let lab = &*lab;
    let gen_world = npgen::World::new();
    for (ns, labels) in &gen_world.ns_labels {
        world::namespace(&cp, ns, labels).await;
    }

    // --- The pods: x/a on n1, x/b on n2, ... (alternating), each serving every probe port.
    let mut pods: Vec<(LabPod, OPod)> = Vec::new();
    for (i, ns) in NAMESPACES.iter().enumerate() {
        for (j, name) in PODS.iter().enumerate() {
            let node = (i * PODS.len() + j) % 2;
            let labels = npgen::labels(&[
                ("pod", name),
                ("app", if j == 2 { "db" } else { "web" }),
                ("pod-template-hash", &format!("h{i}{j}")),
            ]);
            let ports = npgen::pod_ports(name);
            let lp = world::pod(&cp, lab, (node, ns, name), &labels, &ports).await;
            let op = OPod {
                ns: ns.to_string(),
                labels,
                ip: IpAddr::V4(lp.fabric),
                ports,
            };
            pods.push((lp, op));
        }
    }
    let _servers: Vec<Proc> = pods
        .iter()
        .map(|(lp, _)| serve(&lp.ns, world::TCP_PORTS, world::UDP_PORTS))
        .collect();
    let mut gate = Gate::new(&cp, lab).await;
    gate.flip(&cp).await;
    eprintln!("PASS the gate works: both agents follow pods and policies");

    let opods: Vec<OPod> = pods.iter().map(|(_, o)| o.clone()).collect();
    let node_blocks: Vec<String> = lab.nodes.iter().map(|n| n.block.clone()).collect();
    let blocks = lab_blocks(&opods, &node_blocks);
    let np_api = |ns: &str| Api::<NetworkPolicy>::namespaced(cp.kube.clone(), ns);

    // --- The sets.
    let mut rng = StdRng::seed_from_u64(1414);
    let mut applied: Vec<NetworkPolicy> = Vec::new();
    let (mut cases, mut denied, mut bad) = (0usize, 0usize, Vec::new());
    let mut features = Features::default();
    for set in 0..SETS {
        for p in applied.drain(..) {
            np_api(p.metadata.namespace.as_deref().unwrap())
                .delete(p.metadata.name.as_deref().unwrap(), &DeleteParams::default())
                .await
                .unwrap();
        }
        let n = 1 + (set % 3) as usize;
        let pols: Vec<NetworkPolicy> = (0..n)
            .map(|i| npgen::policy_with(&mut rng, &format!("p{set}-{i}"), &blocks))
            .collect();
        for p in &pols {
            np_api(p.metadata.namespace.as_deref().unwrap())
                .create(&PostParams::default(), p)
                .await
                .unwrap_or_else(|e| panic!("create {p:?}: {e}"));
        }
        applied.clone_from(&pols);
        features.note(&pols);
        gate.flip(&cp).await;

        // Every pod to every other pod, every probe port; the node to its own pods.
        let mut want: Vec<Vec<(String, bool)>> = Vec::new();
        let mut jobs: Vec<(&Netns, Vec<Probe>)> = Vec::new();
        for (slp, s) in &pods {
            let (mut probes, mut expect) = (Vec::new(), Vec::new());
            for (_, d) in &pods {
                if s.ip == d.ip {
                    continue;
                }
                // No SCTP here: this kernel makes no SCTP socket (EPROTONOSUPPORT); SCTP probes
                // are the truth table's and BPF_PROG_TEST_RUN's (bpf/tests/policy_np.rs).
                for (pr, port) in PROBES.into_iter().filter(|(pr, _)| *pr != "SCTP") {
                    let ok =
                        oracle::allowed(&pols, &gen_world.ns_labels, &End::Pod(s), &End::Pod(d), pr, port);
                    probes.push((d.ip, pr, port));
                    expect.push((
                        format!(
                            "{}/{} -> {}/{} {pr}/{port}",
                            s.ns, s.labels["pod"], d.ns, d.labels["pod"]
                        ),
                        ok,
                    ));
                }
            }
            jobs.push((&slp.ns, probes));
            want.push(expect);
        }
        for (k, node) in lab.nodes.iter().enumerate() {
            let (mut probes, mut expect) = (Vec::new(), Vec::new());
            for (lp, d) in pods.iter().filter(|(lp, _)| lp.node == k) {
                for (pr, port) in [("TCP", 8081), ("TCP", 80)] {
                    probes.push((IpAddr::V4(lp.fabric), pr, port));
                    expect.push((
                        format!("node {} -> {}/{} {pr}/{port}", node.name, d.ns, lp.name),
                        true,
                    ));
                }
            }
            jobs.push((&node.ns, probes));
            want.push(expect);
        }
        let got = run_probes(&jobs, TIMEOUT);
        for (w, g) in want.iter().zip(&got) {
            for ((what, ok), got) in w.iter().zip(g) {
                cases += 1;
                denied += usize::from(!got);
                if ok != got {
                    bad.push(format!("set {set}: {what}: oracle {ok}, lab {got}"));
                }
            }
        }
        eprintln!(
            "set {set}: {} policies, {} mismatches so far",
            pols.len(),
            bad.len()
        );
        if !bad.is_empty() {
            eprintln!("policies of set {set}: {}", serde_json::to_string(&pols).unwrap());
        }
    }
    println!(
        "NetworkPolicy lab conformance: {SETS} policy sets, {cases} cases over real TCP/UDP \
         connections, {denied} refused, {} mismatches",
        bad.len()
    );
    println!("constructs in the sets: {features:?}");
    assert!(
        denied > 0 && denied < cases,
        "the sets must both admit and refuse"
    );
    assert!(
        features.named_ports > 0
            && features.end_ports > 0
            && features.excepts > 0
            && features.both_selectors > 0
            && features.egress > 0,
        "the sets must use every construct: {features:?}"
    );
    assert!(
        bad.is_empty(),
        "{} of {cases} cases differ; first:\n{}",
        bad.len(),
        bad.iter().take(20).cloned().collect::<Vec<_>>().join("\n")
    );
    eprintln!("PASS {cases} NetworkPolicy cases match the oracle");
    for p in applied.drain(..) {
        np_api(p.metadata.namespace.as_deref().unwrap())
            .delete(p.metadata.name.as_deref().unwrap(), &DeleteParams::default())
            .await
            .unwrap();
    }

    host_network(&cp, lab, &pods, &mut gate).await;
}

/// How often the sets used the constructs the suite is about (rules, not policies).
#[derive(Debug, Default)]
struct Features {
    named_ports: usize,
    end_ports: usize,
    excepts: usize,
    both_selectors: usize,
    egress: usize,
}

impl Features {
    fn note(&mut self, pols: &[NetworkPolicy]) {
        use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
        for spec in pols.iter().filter_map(|p| p.spec.as_ref()) {
            let ingress = spec.ingress.iter().flatten().map(|r| (&r.ports, &r.from));
            let egress = spec.egress.iter().flatten().map(|r| (&r.ports, &r.to));
            self.egress += spec.egress.as_ref().map_or(0, Vec::len);
            for (ports, peers) in ingress.chain(egress) {
                for p in ports.iter().flatten() {
                    self.named_ports += usize::from(matches!(p.port, Some(IntOrString::String(_))));
                    self.end_ports += usize::from(p.end_port.is_some());
                }
                for peer in peers.iter().flatten() {
                    self.excepts += usize::from(peer.ip_block.as_ref().is_some_and(|b| b.except.is_some()));
                    self.both_selectors +=
                        usize::from(peer.pod_selector.is_some() && peer.namespace_selector.is_some());
                }
            }
        }
    }
}

/// A hostNetwork pod in `x` labelled like `x/a` while a policy isolates every pod of `x`
/// both ways: the node's own traffic is no subject's (it reaches a pod of `y` on the
/// other node, and a pod of `y` reaches it), the node still reaches its pods of `x`, and
/// the pods of `x` are isolated.
async fn host_network(cp: &Cp, lab: &Lab, pods: &[(LabPod, OPod)], gate: &mut Gate) {
    let n1 = &lab.nodes[0];
    world::host_network_pod(
        cp,
        lab,
        (0, "x", "hn"),
        &npgen::labels(&[("pod", "a"), ("app", "web")]),
    )
    .await;
    let deny: NetworkPolicy = serde_json::from_value(serde_json::json!({
        "metadata": {"namespace": "x", "name": "deny-all"},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    }))
    .unwrap();
    Api::<NetworkPolicy>::namespaced(cp.kube.clone(), "x")
        .create(&PostParams::default(), &deny)
        .await
        .unwrap();
    gate.flip(cp).await;
    let _node_srv = serve(&n1.ns, "18080", "");
    let find = |ns: &str, name: &str| {
        pods.iter()
            .find(|(lp, _)| lp.namespace == ns && lp.name == name)
            .map(|(lp, _)| lp)
            .unwrap()
    };
    // y/a is on n2 (pods alternate: x/a n1, x/b n2, x/c n1, y/a n2).
    let (ya, xa, xb) = (find("y", "a"), find("x", "a"), find("x", "b"));
    assert_eq!((ya.node, xa.node, xb.node), (1, 0, 1));
    let ip = |p: &LabPod| IpAddr::V4(p.fabric);
    let got = run_probes(
        &[
            (
                &n1.ns,
                vec![(ip(ya), "TCP", 80), (ip(xa), "TCP", 80), (ip(xa), "UDP", 53)],
            ),
            (
                &ya.ns,
                vec![(IpAddr::V4(n1.ip), "TCP", 18080), (ip(xa), "TCP", 80)],
            ),
            (&xb.ns, vec![(ip(ya), "TCP", 80)]),
        ],
        TIMEOUT,
    );
    assert_eq!(
        got,
        vec![vec![true, true, true], vec![true, false], vec![false]],
        "[n1 -> y/a, n1 -> x/a TCP, n1 -> x/a UDP], [y/a -> n1 (hostNetwork x/hn), y/a -> x/a], [x/b -> y/a]"
    );
    eprintln!("PASS hostNetwork pods are no subjects; the node reaches its isolated pods");
}
