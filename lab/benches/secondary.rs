//! Secondary VPC interfaces (issue 37): what each extra interface of a pod costs its ADD. Needs
//! root and the RELEASE agent and CNI (as `datapath.rs`):
//!
//! ```text
//! cargo build --release -p cozyplane-agent && cargo build --release --manifest-path cni/bin/Cargo.toml
//! cargo bench -p cozyplane-lab --bench secondary
//! ```
//!
//! One node `n1`, the kube stand-in and cozyplane-apiserver in process (`tests/common`'s
//! control plane, as `xlat.rs` runs it). Four VPCs `v1`…`v4` bound in the pods' namespace
//! `bench`, made once (each waited for until it has its VNI). For N in {0, 1, 2, 4}: 50 Pod
//! objects whose `sdn.cozystack.io/vpcs` list names the first N VPCs (N = 0: no list; `eth0`
//! on the default network in every case), their sandboxes prepared, then 50 ADDs of the
//! real `cozyplane-cni` (the node's conflist's first plugin, as `datapath.rs`) started at a
//! barrier 500 ms after the last Pod object was made (kubelet's head start, as `agent_core.rs`),
//! each from a thread that stands for kubelet in the node (kubelet's status patch follows each
//! ADD). Measured: the wall time of each ADD, p50/p99/max per N (p99 by nearest rank: of 50
//! samples it is the largest), and what one interface adds at p99, (p99(N) − p99(0)) / N;
//! issue 37's target is < 20 ms. Each ADD's result must name `eth0`, `net1`…`netN`. Then every
//! pod is DELeted and its Pod object deleted, and nothing may be left (no Port of the VPCs, no
//! pod veth on the node) before the next N.
//!
//! Knobs: `COZYPLANE_BENCH_PODS` (default 50: pods ADDed at once), `COZYPLANE_BENCH_ROUNDS`
//! (default 3: each round runs every N once, the order alternating, 0-1-2-4 then 4-2-1-0, so
//! that drift hits every N alike). The summary is the median of the rounds' figures.
//!
//! Figures are printed, never asserted. Every process is stopped by PID and every namespace and
//! mount removed by the lab kit's guards, also when a run panics.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use cozyplane_apis::v1alpha1::{Port, VPC, VPCBinding};
use cozyplane_lab::kubelet::PodApi;
use cozyplane_lab::stats::{cpu_ms, median, ms, pct};
use cozyplane_lab::{Lab, Netns, bin_dir, exec_plugin, invoke_cni, require_root};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};

#[path = "../tests/common/mod.rs"]
mod common;
use common::{Cp, create_pod_with, tenant, vni};

/// The pods' namespace, where the VPCs live and are bound (one the in-process server serves
/// from its start: `cozyplane_conformance::FIXTURE_NAMESPACES`).
const NS: &str = "bench";
/// The VPCs, and their ranges.
const VPCS: [(&str, &str); 4] = [
    ("v1", "10.31.0.0/16"),
    ("v2", "10.32.0.0/16"),
    ("v3", "10.33.0.0/16"),
    ("v4", "10.34.0.0/16"),
];
/// Secondary interfaces per pod, one run each per round.
const COUNTS: [usize; 4] = [0, 1, 2, 4];
/// The pod's list of secondary interfaces.
const LIST: &str = "sdn.cozystack.io/vpcs";
/// What kubelet waits between seeing a pod bound and calling CNI (`datapath.rs`'s head start).
const HEAD_START: Duration = Duration::from_millis(500);

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .map(|v| {
            v.trim()
                .parse()
                .unwrap_or_else(|_| panic!("{name}: a number, not {v:?}"))
        })
        .unwrap_or(default)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    require_root();
    let _ = bin_dir(); // fails early with a hint if the release binaries are missing
    Lab::run(1, body);
}

/// One run: N secondary interfaces, in round `round`.
struct Run {
    n: usize,
    round: usize,
    /// Wall time of each ADD, ms.
    add: Vec<f64>,
    /// The agent's CPU time (user + system) over the ADDs, ms.
    agent_cpu: f64,
    /// The 1-minute load average when the run began.
    load: f64,
}

async fn body(lab: &mut Lab) {
    let (pods, rounds) = (
        env("COZYPLANE_BENCH_PODS", 50).max(1),
        env("COZYPLANE_BENCH_ROUNDS", 3).max(1),
    );
    machine();
    let cp = Cp::start(lab).await;
    let lab = &*lab;
    vpcs(&cp).await;
    let api = PodApi::new(cp.kube.clone(), tokio::runtime::Handle::current());

    // One pod with every interface, untimed: the agent has resolved each VPC once before the
    // figures (as on a node that has run pods in them).
    let warm = wave(&cp, &api, lab, ("warm", COUNTS[COUNTS.len() - 1]), 1).await;
    println!(
        "warm-up: one pod with {} secondary interfaces, ADD {:.1} ms",
        COUNTS[COUNTS.len() - 1],
        warm.0[0]
    );

    println!(
        "\n{rounds} round(s) x {} runs; one node; {pods} pods ADDed at once per run",
        COUNTS.len()
    );
    let mut runs: Vec<Run> = Vec::new();
    for round in 1..=rounds {
        let mut order = COUNTS.to_vec();
        if round % 2 == 0 {
            order.reverse();
        }
        for n in order {
            let load = loadavg();
            let t = Instant::now();
            let (add, agent_cpu) = wave(&cp, &api, lab, (&format!("s{n}-r{round}"), n), pods).await;
            println!(
                "round {round}, {n} secondary: ADD p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; agent CPU {agent_cpu:.0} ms ({:.0} s, load {load:.2} at start)",
                pct(&add, 0.5),
                pct(&add, 0.99),
                pct(&add, 1.0),
                t.elapsed().as_secs_f64(),
            );
            runs.push(Run {
                n,
                round,
                add,
                agent_cpu,
                load,
            });
        }
    }
    report(&runs, pods);
}

/// Four VPCs in [`NS`], each bound there, each with its VNI.
async fn vpcs(cp: &Cp) {
    let (first, range) = VPCS[0];
    tenant(cp, NS, first, range).await;
    for (name, range) in &VPCS[1..] {
        let v: VPC = serde_json::from_value(json!({"apiVersion": "sdn.cozystack.io/v1alpha1",
            "kind": "VPC", "metadata": {"name": name, "namespace": NS}, "spec": {"cidrs": [range]}}))
        .expect("a VPC");
        Api::<VPC>::namespaced(cp.sdn.clone(), NS)
            .create(&PostParams::default(), &v)
            .await
            .expect("create VPC");
        let b: VPCBinding = serde_json::from_value(json!({"apiVersion": "sdn.cozystack.io/v1alpha1",
            "kind": "VPCBinding", "metadata": {"name": name, "namespace": NS},
            "spec": {"vpcRef": {"namespace": NS, "name": name}}}))
        .expect("a VPCBinding");
        Api::<VPCBinding>::namespaced(cp.sdn.clone(), NS)
            .create(&PostParams::default(), &b)
            .await
            .expect("create VPCBinding");
    }
    for (name, _) in VPCS {
        let v = vni(cp, NS, name).await;
        println!("VPC {NS}/{name}: VNI {v}");
    }
}

/// One wave: `count` pods `<label>-<i>` with `n` secondary interfaces, ADDed at once; every
/// pod DELeted and checked gone afterwards. The wall time of each ADD (ms) and the agent's CPU
/// time over the ADDs (ms).
async fn wave(cp: &Cp, api: &PodApi, lab: &Lab, (label, n): (&str, usize), count: usize) -> (Vec<f64>, f64) {
    let node = &lab.nodes[0];
    let list = VPCS[..n]
        .iter()
        .map(|(v, _)| format!("{NS}/{v}"))
        .collect::<Vec<_>>()
        .join(",");
    let ann: Vec<(&str, &str)> = if n == 0 { vec![] } else { vec![(LIST, &list)] };
    let mut names: Vec<(String, String)> = Vec::new();
    for i in 0..count {
        let name = format!("{label}-{i}");
        let uid = create_pod_with(cp, lab, (0, NS, &name, None), (&[], &ann)).await;
        names.push((name, uid));
    }
    let created = Instant::now();
    let sandboxes: Vec<Netns> = names.iter().map(|_| Netns::new("s")).collect();
    tokio::time::sleep(HEAD_START.saturating_sub(created.elapsed())).await;
    let want: Vec<String> = std::iter::once("eth0".to_string())
        .chain((1..=n).map(|i| format!("net{i}")))
        .collect();
    let conf = node.conf();
    let pid = node.agent_pid().expect("the agent runs");
    let go = std::sync::Barrier::new(count + 1);
    // The control plane runs on the runtime's workers; this thread only waits for the kubelet
    // threads meanwhile.
    let cpu_before = cpu_ms(pid);
    let wired: Vec<(&str, &str, Netns, f64)> = std::thread::scope(|s| {
        let hs: Vec<_> = names
            .iter()
            .zip(sandboxes)
            .map(|((name, uid), netns)| {
                let (go, conf, want) = (&go, &conf, &want);
                s.spawn(move || {
                    let cid = format!("{NS}-{name}");
                    node.enter();
                    go.wait();
                    let t = Instant::now();
                    let (code, result) =
                        exec_plugin(node, "ADD", &cid, (&netns.path(), (NS, name, uid)), conf);
                    let add = ms(t.elapsed());
                    assert_eq!(code, 0, "ADD {NS}/{name}: {result}");
                    assert_eq!(&sandbox_ifs(&result), want, "ADD {NS}/{name}: {result}");
                    let ip = eth0_ip(&result).expect("an address on eth0");
                    api.h
                        .block_on(api.patch_status(node, NS, name, ip))
                        .expect("status patch task");
                    (name.as_str(), uid.as_str(), netns, add)
                })
            })
            .collect();
        go.wait();
        hs.into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    let agent_cpu = cpu_ms(pid) - cpu_before;
    // DEL every pod, a few kubelet threads at a time, then its Pod object.
    std::thread::scope(|s| {
        for part in wired.chunks(wired.len().div_ceil(4).max(1)) {
            s.spawn(move || {
                for (name, uid, netns, _) in part {
                    let cid = format!("{NS}-{name}");
                    let (code, out) =
                        invoke_cni(node, "DEL", &cid, &netns.path(), (NS, name, uid), &node.conf());
                    assert_eq!(code, 0, "DEL {NS}/{name}: {out}");
                }
            });
        }
    });
    let pod_api = Api::<Pod>::namespaced(cp.kube.clone(), NS);
    for (name, ..) in &wired {
        pod_api
            .delete(name, &DeleteParams::default().grace_period(0))
            .await
            .expect("delete pod");
    }
    gone(cp, node).await;
    (wired.iter().map(|w| w.3).collect(), agent_cpu)
}

/// The interfaces a CNI result names inside the sandbox, in order.
fn sandbox_ifs(result: &Value) -> Vec<String> {
    result["interfaces"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["sandbox"].is_string())
        .filter_map(|i| Some(i["name"].as_str()?.to_string()))
        .collect()
}

/// The first IPv4 address of the result's `eth0` (what kubelet reports as the pod's IP; the
/// secondary interfaces' VPC addresses are not the pod's).
fn eth0_ip(result: &Value) -> Option<Ipv4Addr> {
    let at = result["interfaces"]
        .as_array()?
        .iter()
        .position(|i| i["name"] == "eth0" && i["sandbox"].is_string())?;
    result["ips"]
        .as_array()?
        .iter()
        .filter(|i| i["interface"].as_u64() == Some(at as u64))
        .find_map(|i| i["address"].as_str()?.split('/').next()?.parse().ok())
}

/// Waits (up to 10 s) until no Port of the VPCs in [`NS`] is left, and checks that no pod veth
/// is left on the node.
async fn gone(cp: &Cp, node: &cozyplane_lab::Node) {
    let sel = format!("sdn.cozystack.io/vpc-namespace={NS}");
    let ports = Api::<Port>::all(cp.sdn.clone());
    let t = Instant::now();
    loop {
        let left = ports
            .list(&ListParams::default().labels(&sel))
            .await
            .expect("list Ports")
            .items;
        if left.is_empty() {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "{} Ports left after DEL, e.g. {:?}",
            left.len(),
            left[0].metadata.name
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let veths = node.pod_veths();
    assert!(veths.is_empty(), "pod veths left after DEL: {veths:?}");
}

/// Prints the machine and the repository's commit.
fn machine() {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map_or("?", |(_, m)| m.trim());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let nproc = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let repo = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(["-C", repo, "--no-optional-locks"])
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let head = git(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "?".into());
    let changed = git(&["status", "--porcelain"]).map_or(0, |s| s.lines().count());
    println!("# secondary VPC interfaces: pod ADD with 0, 1, 2 and 4 of them\n");
    println!("machine: {nproc} CPUs, {model}, kernel {}", kernel.trim());
    println!("repository: HEAD {head} ({changed} paths changed in the working tree)");
    println!("binaries: {}", bin_dir().display());
}

fn report(runs: &[Run], pods: usize) {
    let p99_of = |n: usize, round: usize| {
        runs.iter()
            .find(|r| r.n == n && r.round == round)
            .map_or(f64::NAN, |r| pct(&r.add, 0.99))
    };
    let extra = |n: usize, p99: f64, base: f64| {
        if n == 0 {
            "–".to_string()
        } else {
            format!("{:.1}", (p99 - base) / n as f64)
        }
    };
    println!(
        "\n| secondary interfaces | round | ADDs | p50 ms | p99 ms | max ms | extra per interface at p99 ms | agent CPU ms per pod | load avg at start |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut sorted: Vec<&Run> = runs.iter().collect();
    sorted.sort_by_key(|r| (r.n, r.round));
    for r in &sorted {
        let p99 = pct(&r.add, 0.99);
        println!(
            "| {} | {} | {} | {:.1} | {p99:.1} | {:.1} | {} | {:.1} | {:.2} |",
            r.n,
            r.round,
            r.add.len(),
            pct(&r.add, 0.5),
            pct(&r.add, 1.0),
            extra(r.n, p99, p99_of(0, r.round)),
            r.agent_cpu / r.add.len() as f64,
            r.load,
        );
    }
    let rounds = runs.iter().map(|r| r.round).max().unwrap_or(0);
    let of = |n: usize, f: &dyn Fn(&Run) -> f64| {
        median(&runs.iter().filter(|r| r.n == n).map(f).collect::<Vec<_>>())
    };
    let base = of(0, &|r| pct(&r.add, 0.99));
    println!(
        "\nmedian of {rounds} round(s), {pods} pods ADDed at once per run (issue 37's target: each extra interface adds < 20 ms at p99):\n"
    );
    println!(
        "| secondary interfaces | ADDs | p50 ms | p99 ms | max ms | extra per interface at p99 ms | agent CPU ms per pod |"
    );
    println!("|---|---|---|---|---|---|---|");
    for n in COUNTS {
        let p99 = of(n, &|r| pct(&r.add, 0.99));
        let adds: usize = runs.iter().filter(|r| r.n == n).map(|r| r.add.len()).sum();
        println!(
            "| {n} | {adds} | {:.1} | {p99:.1} | {:.1} | {} | {:.1} |",
            of(n, &|r| pct(&r.add, 0.5)),
            of(n, &|r| pct(&r.add, 1.0)),
            extra(n, p99, base),
            of(n, &|r| r.agent_cpu / r.add.len() as f64),
        );
    }
    println!(
        "\n(ADD: wall time of the plugin's exec, barrier to exit, of each of {pods} ADDs started at once; p99 by nearest rank; extra per interface: (p99(N) - p99(0)) / N, per round against that round's N = 0 and, in the summary, between the medians; agent CPU: /proc/<pid>/stat in 10 ms clock ticks over the ADDs)"
    );
}

/// The 1-minute load average.
fn loadavg() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}
