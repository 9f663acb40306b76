//! Policy benchmarks on the netns lab (issue 14). Needs root and the agent and CNI of the
//! bench's profile (release for `cargo bench`):
//!
//! ```text
//! cargo build --release -p cozyplane-agent && cargo build --release --manifest-path cni/bin/Cargo.toml
//! cargo bench -p cozyplane-lab --bench policy
//! ```
//!
//! A two-node lab with the whole control-plane chain (`Cp::start_with(.., doors: true)`: the
//! API server's kube loops fill `Port.status.groups` from pod labels). Two cross-node client
//! → server pairs, client on n1, server on n2: default-network pods (namespace `bench`) and
//! pods of one VPC (`t1/v`). Each pair is measured twice, with the same pods and the same
//! connections' path:
//!
//! * **no rules**: no NetworkPolicy, no SecurityGroup;
//! * **rules loaded**: 1,000 NetworkPolicies in `bench`, every one selecting the server (999
//!   admit other peers on other ports; one admits the client on the measured ports), and
//!   10,000 SecurityGroup rules in `t1/v`: 50 groups of 200 ingress rules each, every one
//!   selecting the server (CIDR peers on other ports; the last group also admits the
//!   clients' group on the measured ports, so the datapath walks the server's groups to
//!   the last), and a clients' group whose egress admits the servers.
//!
//! Measured: TCP throughput (iperf3, `POL_SECS` seconds after 1 s omitted) and TCP
//! connection set-up rate (new connections per second, connect + close, two connecting
//! threads, counted as the listener accepts them: every one is a first packet the rules
//! decide and a connection-table entry). Each figure is the median of `POL_ROUNDS` rounds
//! (default 3; one round measures both pairs once): on the two-core machine single 5 s
//! throughput figures of the same path ranged from 4.0 to 6.8 Gbit/s.
//! The ratios are rules / no rules. Because medians still spread by several per cent, the
//! bench also prints the kernel's accounting of our programs during the iperf runs (it turns
//! `kernel.bpf_stats_enabled` on and restores it): ns per run of each program, and the
//! datapath's CPU per GB moved. Figures are printed, never asserted. `POL_SECS` (default
//! 5; `POL_SECS=1 POL_ROUNDS=1` for a quick proof that it runs).

use std::collections::BTreeMap;
use std::net::{IpAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use cozyplane_apis::v1alpha1::SecurityGroup;
use cozyplane_lab::load::{self, CONN_PORT, IPERF_PORT, conn_server};
use cozyplane_lab::{Lab, LabPod, Netns, bin_dir, run_in};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

#[path = "../tests/common/mod.rs"]
mod common;
use common::{Cp, CpOptions, metric, pod, tenant, vpc_ip, wait};

/// NetworkPolicies loaded.
const NPS: usize = 1_000;
/// SecurityGroups, and ingress rules in each (`GROUPS * RULES` SecurityGroup rules).
const GROUPS: usize = 50;
const RULES: usize = 200;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn secs() -> u64 {
    env_or("POL_SECS", 5)
}

fn rounds() -> usize {
    usize::try_from(env_or("POL_ROUNDS", 3)).unwrap_or(3).max(1)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    cozyplane_lab::require_root();
    let _ = bin_dir();
    Lab::run(2, body);
}

fn iperf(server: &Netns, client: &Netns, to: IpAddr) -> f64 {
    load::iperf(server, client, to, false, secs())
}

fn conn_rate(client: &Netns, to: IpAddr, accepted: &AtomicU64) -> f64 {
    load::conn_rate(client, to, accepted, secs())
}

/// Merges `labels` into the Pod's.
async fn label(cp: &Cp, p: &LabPod, labels: serde_json::Value) {
    Api::<Pod>::namespaced(cp.kube.clone(), &p.namespace)
        .patch(
            &p.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": labels}})),
        )
        .await
        .unwrap();
}

/// The NetworkPolicies: every one selects the server; the last admits the client on the
/// measured ports.
fn network_policies() -> Vec<NetworkPolicy> {
    (0..NPS)
        .map(|i| {
            let ingress = if i + 1 == NPS {
                json!([{"from": [{"podSelector": {"matchLabels": {"app": "client"}}}],
                        "ports": [{"protocol": "TCP", "port": IPERF_PORT},
                                  {"protocol": "TCP", "port": CONN_PORT}]}])
            } else {
                json!([{"from": [{"podSelector": {"matchLabels": {"peer": format!("p{i}")}}},
                                 {"ipBlock": {"cidr": format!("172.{}.{}.0/24", 16 + i / 256, i % 256)}}],
                        "ports": [{"protocol": "TCP", "port": 10_000 + i, "endPort": 10_000 + i + 7}]}])
            };
            serde_json::from_value(json!({
                "metadata": {"namespace": "bench", "name": format!("np-{i}")},
                "spec": {"podSelector": {"matchLabels": {"app": "server"}},
                         "policyTypes": ["Ingress"], "ingress": ingress}
            }))
            .unwrap()
        })
        .collect()
}

/// The SecurityGroups of `t1/v`: [`GROUPS`] server groups of [`RULES`] ingress rules, and
/// the clients' group.
fn security_groups() -> Vec<SecurityGroup> {
    let mut out: Vec<SecurityGroup> = (0..GROUPS)
        .map(|g| {
            let mut ingress: Vec<serde_json::Value> = (0..RULES)
                .map(|r| {
                    let n = g * RULES + r;
                    json!({"from": {"cidr": format!("100.{}.{}.0/24", 64 + n / 256, n % 256)},
                           "ports": [{"protocol": if r % 2 == 0 { "TCP" } else { "UDP" }, "port": 20_000 + r}]})
                })
                .collect();
            if g + 1 == GROUPS {
                ingress.pop();
                ingress.push(json!({"from": {"group": "clients"},
                    "ports": [{"protocol": "TCP", "port": IPERF_PORT}, {"protocol": "TCP", "port": CONN_PORT}]}));
            }
            serde_json::from_value(json!({
                "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "SecurityGroup",
                "metadata": {"namespace": "t1", "name": format!("servers-{g}")},
                "spec": {"vpcRef": {"name": "v"}, "podSelector": {"matchLabels": {"role": "server"}},
                         "ingress": ingress}
            }))
            .unwrap()
        })
        .collect();
    out.push(
        serde_json::from_value(json!({
            "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "SecurityGroup",
            "metadata": {"namespace": "t1", "name": "clients"},
            "spec": {"vpcRef": {"name": "v"}, "podSelector": {"matchLabels": {"role": "client"}},
                     "egress": [{"to": {"group": format!("servers-{}", GROUPS - 1)}}]}
        }))
        .unwrap(),
    );
    out
}

/// `sdn_pol_rules` entries of every node, once they stop changing for 3 s.
fn settled_rules(lab: &Lab) -> Vec<f64> {
    let sample = "cozyplane_bpf_map_entries{map=\"sdn_pol_rules\"}";
    let read = || -> Vec<f64> { lab.nodes.iter().map(|n| metric(&n.metrics(), sample)).collect() };
    let (mut last, mut since) = (read(), Instant::now());
    loop {
        std::thread::sleep(Duration::from_millis(500));
        let now = read();
        if now != last {
            (last, since) = (now, Instant::now());
        } else if since.elapsed() > Duration::from_secs(3) && last.iter().all(|n| *n > 0.0) {
            return last;
        }
    }
}

/// `kernel.bpf_stats_enabled` on for the bench's life (the kernel then accounts every
/// program's run time and run count), restored when dropped.
struct BpfStats(String);

impl BpfStats {
    const KNOB: &str = "/proc/sys/kernel/bpf_stats_enabled";

    fn on() -> Self {
        let was = std::fs::read_to_string(Self::KNOB).unwrap_or_else(|_| "0".into());
        std::fs::write(Self::KNOB, "1").expect("kernel.bpf_stats_enabled");
        Self(was.trim().to_string())
    }
}

impl Drop for BpfStats {
    fn drop(&mut self) {
        let _ = std::fs::write(Self::KNOB, &self.0);
    }
}

/// Run time (ns) and run count of the loaded `sdn_*` programs, summed by name over both
/// nodes' agents (they load the same programs).
type ProgStats = BTreeMap<String, (u64, u64)>;

fn prog_stats() -> ProgStats {
    let out = std::process::Command::new("bpftool")
        .args(["-j", "prog", "show"])
        .output()
        .expect("bpftool runs");
    let progs: serde_json::Value = serde_json::from_slice(&out.stdout).expect("bpftool's JSON");
    let mut m = ProgStats::new();
    for p in progs.as_array().into_iter().flatten() {
        let Some(name) = p["name"].as_str().filter(|n| n.starts_with("sdn_")) else {
            continue;
        };
        let e = m.entry(name.to_string()).or_default();
        e.0 += p["run_time_ns"].as_u64().unwrap_or(0);
        e.1 += p["run_cnt"].as_u64().unwrap_or(0);
    }
    m
}

/// Adds `after - before` into `into`.
fn add_delta(into: &mut ProgStats, before: &ProgStats, after: &ProgStats) {
    for (name, (ns, runs)) in after {
        let (ns0, runs0) = before.get(name).copied().unwrap_or_default();
        let e = into.entry(name.clone()).or_default();
        e.0 += ns - ns0;
        e.1 += runs - runs0;
    }
}

/// One phase's figures for one pair: per-round (Gbit/s, conn/s), and the programs' run
/// time during its iperf runs with the bytes those moved.
#[derive(Default)]
struct Figures {
    rounds: Vec<(f64, f64)>,
    progs: ProgStats,
    gbytes: f64,
}

impl Figures {
    fn medians(&self) -> (f64, f64) {
        (
            median(self.rounds.iter().map(|r| r.0).collect()),
            median(self.rounds.iter().map(|r| r.1).collect()),
        )
    }

    /// The datapath programs' CPU time as a share (%) of all cores over the iperf runs.
    fn cpu_share(&self) -> f64 {
        let ns: u64 = self.progs.values().map(|p| p.0).sum();
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        100.0 * ns as f64 / (self.rounds.len() as f64 * secs() as f64 * cores as f64 * 1e9)
    }

    /// The datapath programs' CPU time per GB moved, in ms.
    fn bpf_ms_per_gb(&self) -> f64 {
        let ns: u64 = self.progs.values().map(|p| p.0).sum();
        ns as f64 / 1e6 / self.gbytes.max(f64::MIN_POSITIVE)
    }
}

/// One measurement of both pairs: (Gbit/s, conn/s) for net 0 and the VPC.
struct Pairs<'a> {
    net0: (&'a LabPod, &'a LabPod, IpAddr, Arc<AtomicU64>),
    vpc: (&'a LabPod, &'a LabPod, IpAddr, Arc<AtomicU64>),
}

impl Pairs<'_> {
    /// [`rounds`] rounds of both pairs.
    fn measure(&self, phase: &str) -> [Figures; 2] {
        let mut figs = [Figures::default(), Figures::default()];
        for round in 0..rounds() {
            for (fig, (c, s, to, accepted)) in figs.iter_mut().zip([&self.net0, &self.vpc]) {
                let before = prog_stats();
                let gbps = iperf(&s.ns, &c.ns, *to);
                add_delta(&mut fig.progs, &before, &prog_stats());
                fig.gbytes += gbps * secs() as f64 / 8.0;
                let rate = conn_rate(&c.ns, *to, accepted);
                fig.rounds.push((gbps, rate));
            }
            let last = figs.each_ref().map(|f| f.rounds[round]);
            eprintln!("{phase}, round {round}: {last:.2?}");
        }
        figs
    }
}

async fn body(lab: &mut Lab) {
    let cp = Cp::start_with(lab, CpOptions { doors: true }).await;
    let lab = &*lab;
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "bench"}})).unwrap();
    Api::<Namespace>::all(cp.kube.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    tenant(&cp, "t1", "v", "10.60.0.0/24").await;

    let c0 = pod(&cp, lab, 0, "bench", "client", None).await;
    let s0 = pod(&cp, lab, 1, "bench", "server", None).await;
    let c1 = pod(&cp, lab, 0, "t1", "client", Some("v")).await;
    let s1 = pod(&cp, lab, 1, "t1", "server", Some("v")).await;
    label(&cp, &c0, json!({"app": "client"})).await;
    label(&cp, &s0, json!({"app": "server"})).await;
    label(&cp, &c1, json!({"role": "client"})).await;
    label(&cp, &s1, json!({"role": "server"})).await;
    let s1_ip = IpAddr::V4(vpc_ip(&cp, &s1).await);
    wait("net-0 pods talk across nodes", || c0.ns.ping(s0.fabric, 1, 1));
    wait("VPC pods talk across nodes", || c1.ns.ping(s1_ip, 1, 1));
    let pairs = Pairs {
        net0: (&c0, &s0, IpAddr::V4(s0.fabric), conn_server(&s0.ns)),
        vpc: (&c1, &s1, s1_ip, conn_server(&s1.ns)),
    };

    let _stats = BpfStats::on();
    let before = pairs.measure("no rules");

    let t = Instant::now();
    let nps = Api::<NetworkPolicy>::namespaced(cp.kube.clone(), "bench");
    for np in network_policies() {
        nps.create(&PostParams::default(), &np).await.unwrap();
    }
    let sgs = Api::<SecurityGroup>::namespaced(cp.sdn.clone(), "t1");
    for sg in security_groups() {
        sgs.create(&PostParams::default(), &sg).await.unwrap();
    }
    let entries = settled_rules(lab);
    eprintln!(
        "{NPS} NetworkPolicies and {} SecurityGroup rules written and settled in {:.1} s: sdn_pol_rules {entries:?}",
        GROUPS * RULES,
        t.elapsed().as_secs_f64()
    );
    // The rules admit the clients (a refused pair would measure nothing).
    wait("the rules admit the net-0 client", || {
        run_in(&c0.ns, || {
            TcpStream::connect_timeout(&(s0.fabric, CONN_PORT).into(), Duration::from_secs(1)).is_ok()
        })
    });
    wait("the rules admit the VPC client", || {
        run_in(&c1.ns, || {
            TcpStream::connect_timeout(&(s1_ip, CONN_PORT).into(), Duration::from_secs(1)).is_ok()
        })
    });

    let after = pairs.measure("rules");
    println!(
        "\npolicy cost, cross-node TCP (medians of {} rounds, {} s per figure; rules: {NPS} NetworkPolicies, {} SecurityGroup rules)",
        rounds(),
        secs(),
        GROUPS * RULES
    );
    println!(
        "{:<10} {:>12} {:>12} {:>7} {:>12} {:>12} {:>7}",
        "pair", "Gbit/s none", "Gbit/s rules", "ratio", "conn/s none", "conn/s rules", "ratio"
    );
    let (b, a) = (
        before.each_ref().map(Figures::medians),
        after.each_ref().map(Figures::medians),
    );
    for (name, (g0, r0), (g1, r1)) in [("net 0", b[0], a[0]), ("VPC", b[1], a[1])] {
        println!(
            "{name:<10} {g0:>12.2} {g1:>12.2} {:>6.1}% {r0:>12.0} {r1:>12.0} {:>6.1}%",
            100.0 * g1 / g0.max(f64::MIN_POSITIVE),
            100.0 * r1 / r0.max(f64::MIN_POSITIVE)
        );
    }
    // The datapath's own cost, which the throughput figures (4.0–6.8 Gbit/s for one path on this
    // machine) cannot resolve: the kernel's accounting of our programs during the iperf runs.
    println!("\ndatapath programs during the iperf runs (kernel.bpf_stats_enabled), both nodes");
    println!(
        "{:<10} {:<16} {:>12} {:>12} {:>12} {:>12}",
        "pair", "program", "runs none", "ns/run none", "runs rules", "ns/run rules"
    );
    for (i, name) in ["net 0", "VPC"].iter().enumerate() {
        for (prog, (ns0, n0)) in &before[i].progs {
            let (ns1, n1) = after[i].progs.get(prog).copied().unwrap_or_default();
            if *n0 == 0 && n1 == 0 {
                continue;
            }
            println!(
                "{name:<10} {prog:<16} {n0:>12} {:>12.0} {n1:>12} {:>12.0}",
                *ns0 as f64 / (*n0).max(1) as f64,
                ns1 as f64 / n1.max(1) as f64
            );
        }
        let (m0, m1) = (before[i].bpf_ms_per_gb(), after[i].bpf_ms_per_gb());
        let (c0, c1) = (before[i].cpu_share(), after[i].cpu_share());
        println!(
            "{name:<10} {:<16} CPU ms per GB moved: none {m0:.1}, rules {m1:.1} ({:+.1} %); share of the machine's CPU: {c0:.1} % → {c1:.1} %",
            "all",
            100.0 * (m1 - m0) / m0.max(f64::MIN_POSITIVE)
        );
    }
}
