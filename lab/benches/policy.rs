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
//! pods of one VPC (`t1/v`). Each pair is measured three times, with the same pods and the
//! same connections' path: no rules, rules loaded, and no rules again once the rules are
//! deleted and the maps settled back to where they were:
//!
//! * **no rules**: no NetworkPolicy, no SecurityGroup;
//! * **rules loaded**: 1,000 NetworkPolicies in `bench`, every one selecting the server (999
//!   admit other peers on other ports; one admits the client on the measured ports); 1,000
//!   AdminNetworkPolicies (issue 29), every one selecting the server, each with a `Deny`
//!   ingress rule for other pods on other ports and a `Pass` rule for other namespaces, and
//!   an egress `Deny` rule for a CIDR on other ports, so the first packet of a measured flow
//!   walks the ANP tier, misses, and is decided by the NetworkPolicies; and
//!   10,000 SecurityGroup rules in `t1/v`: 50 groups of 200 ingress rules each, every one
//!   selecting the server (CIDR peers on other ports; the last group also admits the
//!   clients' group on the measured ports, so the datapath walks the server's groups to
//!   the last), and a clients' group whose egress admits the servers.
//!
//! Between the rules phase and their deletion, with the rules loaded, the measured pods are
//! alternately moved out of the rules' reach and back by their labels ([`Ab`]), for a
//! throughput comparison whose two sides share the same minutes of the machine; then two
//! identical pairs per network stream at once, one in reach and one out of it ([`Par`]), so
//! that both sides share the same seconds (the hypervisor's steal falls on both alike).
//!
//! Measured: TCP throughput (iperf3, `POL_SECS` seconds after 1 s omitted) and TCP
//! connection set-up rate (new connections per second, connect + close, two connecting
//! threads, counted as the listener accepts them: every one is a first packet the rules
//! decide and a connection-table entry). Each figure is the median of `POL_ROUNDS` rounds
//! (default 3; one round measures both pairs' throughput, then both pairs' set-up rate).
//! iperf3 runs with its client on CPU 0 and its server on CPU 1: on the two-core machine
//! single 5 s throughput figures of the same path ranged from 4.0 to 6.8 Gbit/s unpinned.
//! The ratios are rules / the mean of the two no-rules medians. Because medians still spread, the
//! bench also prints the kernel's accounting of our programs during the iperf runs (it turns
//! `kernel.bpf_stats_enabled` on and restores it): ns per run of each program, and the
//! datapath's CPU per GB moved. Figures are printed, never asserted. `POL_SECS` (default
//! 5; `POL_SECS=1 POL_ROUNDS=1` for a quick proof that it runs).

use std::net::{IpAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use cozyplane_apis::admin_policy::AdminNetworkPolicy;
use cozyplane_apis::v1alpha1::SecurityGroup;
use cozyplane_lab::load::{self, CONN_PORT, IPERF_PORT, conn_server};
use cozyplane_lab::{Lab, LabPod, Netns, bin_dir, run_in};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "policy/reach.rs"]
mod reach;
#[path = "policy/stats.rs"]
mod stats;
use common::{Cp, CpOptions, metric, pod, tenant, vpc_ip, wait};
use reach::{Ab, Par};
use stats::{BpfStats, CpuTicks, Figures, add_delta, prog_stats};

/// NetworkPolicies loaded.
const NPS: usize = 1_000;
/// AdminNetworkPolicies loaded.
const ANPS: usize = 1_000;
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
    load::iperf_pinned(server, client, to, secs())
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

/// The AdminNetworkPolicies: every one selects the server, none matches the measured flows
/// (other peers, other ports), so NetworkPolicy decides them after the ANP tier's lookups.
fn admin_network_policies() -> Vec<AdminNetworkPolicy> {
    (0..ANPS)
        .map(|i| {
            serde_json::from_value(json!({
                "metadata": {"name": format!("anp-{i}")},
                "spec": {
                    "priority": i % 1000,
                    "subject": {"pods": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "bench"}},
                                         "podSelector": {"matchLabels": {"app": "server"}}}},
                    "ingress": [
                        {"name": "deny-peer", "action": "Deny",
                         "from": [{"pods": {"namespaceSelector": {}, "podSelector": {"matchLabels": {"peer": format!("a{i}")}}}}],
                         "ports": [{"portRange": {"protocol": "TCP", "start": 20_000 + i, "end": 20_000 + i + 7}}]},
                        {"name": "pass-net", "action": "Pass",
                         "from": [{"namespaces": {"matchLabels": {"tier": format!("t{i}")}}}],
                         "ports": [{"portNumber": {"protocol": "UDP", "port": 30_000 + i}}]}
                    ],
                    "egress": [
                        {"name": "deny-net", "action": "Deny",
                         "to": [{"networks": [format!("172.{}.{}.0/24", 16 + i / 256, i % 256)]}],
                         "ports": [{"portRange": {"protocol": "TCP", "start": 20_000 + i, "end": 20_000 + i + 7}}]}
                    ]
                }
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

/// `sdn_pol_rules` entries of every node.
fn pol_rules(lab: &Lab) -> Vec<f64> {
    let sample = "cozyplane_bpf_map_entries{map=\"sdn_pol_rules\"}";
    lab.nodes.iter().map(|n| metric(&n.metrics(), sample)).collect()
}

/// `sdn_pol_rules` entries of every node once they stop changing for 3 s and `done` holds
/// of them; panics after 5 minutes (a compiler that never settles is a finding, not a figure).
fn settled_rules(lab: &Lab, done: impl Fn(&[f64]) -> bool) -> Vec<f64> {
    let start = Instant::now();
    let (mut last, mut since) = (pol_rules(lab), Instant::now());
    loop {
        std::thread::sleep(Duration::from_millis(500));
        let now = pol_rules(lab);
        if now != last {
            (last, since) = (now, Instant::now());
        } else if since.elapsed() > Duration::from_secs(3) && done(&last) {
            return last;
        }
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "sdn_pol_rules did not settle: {last:?}"
        );
    }
}

/// One measurement of both pairs: (Gbit/s, conn/s) for net 0 and the VPC.
struct Pairs<'a> {
    net0: (&'a LabPod, &'a LabPod, IpAddr, Arc<AtomicU64>),
    vpc: (&'a LabPod, &'a LabPod, IpAddr, Arc<AtomicU64>),
}

impl Pairs<'_> {
    /// [`rounds`] rounds of both pairs. A round runs both pairs' iperf before either's
    /// connection loop: a loop leaves ~100,000 connections' worth of TIME_WAIT sockets and
    /// conntrack entries of the outer VXLAN flows in the nodes, whose clean-up would
    /// otherwise fall into the next iperf figure.
    fn measure(&self, phase: &str) -> [Figures; 2] {
        let mut figs = [Figures::default(), Figures::default()];
        for round in 0..rounds() {
            let gbps = self.throughput(&mut figs);
            for (i, (fig, (c, _, to, accepted))) in figs.iter_mut().zip([&self.net0, &self.vpc]).enumerate() {
                let rate = conn_rate(&c.ns, *to, accepted);
                fig.rounds.push((gbps[i], rate));
            }
            let last = figs.each_ref().map(|f| f.rounds[round]);
            eprintln!("{phase}, round {round}: {last:.2?}");
        }
        figs
    }

    /// One iperf figure of each pair (Gbit/s), its programs' accounting added to `figs`.
    fn throughput(&self, figs: &mut [Figures; 2]) -> [f64; 2] {
        let mut gbps = [0.0; 2];
        for (i, (fig, (c, s, to, _))) in figs.iter_mut().zip([&self.net0, &self.vpc]).enumerate() {
            let waited = CpuTicks::quiet();
            if waited > Duration::from_secs(2) {
                eprintln!("waited {:.1} s for a quiet machine", waited.as_secs_f64());
            }
            let (before, ticks) = (prog_stats(), CpuTicks::now());
            gbps[i] = iperf(&s.ns, &c.ns, *to);
            fig.cpu.push((gbps[i], CpuTicks::now().since(ticks)));
            add_delta(&mut fig.progs, &before, &prog_stats());
            fig.gbytes += gbps[i] * secs() as f64 / 8.0;
        }
        gbps
    }
}

async fn body(lab: &mut Lab) {
    let cp = Cp::start_with(lab, CpOptions::doors()).await;
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
    // A second pair of each network, for the concurrent comparison.
    let c0b = pod(&cp, lab, 0, "bench", "client-b", None).await;
    let s0b = pod(&cp, lab, 1, "bench", "server-b", None).await;
    let c1b = pod(&cp, lab, 0, "t1", "client-b", Some("v")).await;
    let s1b = pod(&cp, lab, 1, "t1", "server-b", Some("v")).await;
    label(&cp, &c0b, json!({"app": "client"})).await;
    label(&cp, &s0b, json!({"app": "server-off"})).await;
    label(&cp, &c1b, json!({"role": "client-off"})).await;
    label(&cp, &s1b, json!({"role": "server-off"})).await;
    let s1b_ip = IpAddr::V4(vpc_ip(&cp, &s1b).await);
    let listeners = [conn_server(&s0b.ns), conn_server(&s1b.ns)];
    // Pods no rule admits, on the clients' node: they tell when a relabel took effect.
    let p0 = pod(&cp, lab, 0, "bench", "probe", None).await;
    let p1 = pod(&cp, lab, 0, "t1", "probe", Some("v")).await;
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
    let base = settled_rules(lab, |_| true);
    let before = pairs.measure("no rules");

    let t = Instant::now();
    let nps = Api::<NetworkPolicy>::namespaced(cp.kube.clone(), "bench");
    for np in network_policies() {
        nps.create(&PostParams::default(), &np).await.unwrap();
    }
    let anps = Api::<AdminNetworkPolicy>::all(cp.kube.clone());
    for anp in admin_network_policies() {
        anps.create(&PostParams::default(), &anp).await.unwrap();
    }
    let sgs = Api::<SecurityGroup>::namespaced(cp.sdn.clone(), "t1");
    for sg in security_groups() {
        sgs.create(&PostParams::default(), &sg).await.unwrap();
    }
    let entries = settled_rules(lab, |n| n.iter().all(|n| *n > 0.0));
    eprintln!(
        "{NPS} NetworkPolicies, {ANPS} AdminNetworkPolicies and {} SecurityGroup rules written and settled in {:.1} s: sdn_pol_rules {entries:?}",
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
    let ab = Ab {
        cp: &cp,
        pods: [&s0, &s1, &c1],
        probes: [(&p0, IpAddr::V4(s0.fabric)), (&p1, s1_ip)],
    }
    .measure(&pairs)
    .await;
    let par = Par {
        cp: &cp,
        net0: [
            (&c0, &s0, IpAddr::V4(s0.fabric), &pairs.net0.3),
            (&c0b, &s0b, IpAddr::V4(s0b.fabric), &listeners[0]),
        ],
        vpc: [
            (&c1, &s1, s1_ip, &pairs.vpc.3),
            (&c1b, &s1b, s1b_ip, &listeners[1]),
        ],
        probes: [&p0, &p1],
    }
    .measure()
    .await;

    // The rules go again and the no-rules figures are taken a second time: the ratio is
    // against both no-rules phases, so a drift of the machine over the bench (its page cache,
    // the nodes' conntrack and socket tables filling) falls on both sides alike.
    let t = Instant::now();
    for i in 0..NPS {
        nps.delete(&format!("np-{i}"), &DeleteParams::default())
            .await
            .unwrap();
    }
    for i in 0..ANPS {
        anps.delete(&format!("anp-{i}"), &DeleteParams::default())
            .await
            .unwrap();
    }
    for sg in security_groups() {
        sgs.delete(&sg.metadata.name.unwrap(), &DeleteParams::default())
            .await
            .unwrap();
    }
    settled_rules(lab, |n| n == base.as_slice());
    eprintln!("rules deleted and settled in {:.1} s", t.elapsed().as_secs_f64());
    let again = pairs.measure("no rules, again");
    println!(
        "\npolicy cost, cross-node TCP (medians of {} rounds, {} s per figure; rules: {NPS} NetworkPolicies, {ANPS} AdminNetworkPolicies, {} SecurityGroup rules)",
        rounds(),
        secs(),
        GROUPS * RULES
    );
    println!(
        "{:<10} {:>18} {:>12} {:>7} {:>18} {:>12} {:>7}",
        "pair", "Gbit/s none (1/2)", "Gbit/s rules", "ratio", "conn/s none (1/2)", "conn/s rules", "ratio"
    );
    println!("(ratio: rules / the mean of the two no-rules medians)");
    let (b, a, z) = (
        before.each_ref().map(Figures::medians),
        after.each_ref().map(Figures::medians),
        again.each_ref().map(Figures::medians),
    );
    for (i, name) in ["net 0", "VPC"].iter().enumerate() {
        let ((g0, r0), (g1, r1), (g2, r2)) = (b[i], a[i], z[i]);
        let (g, r) = ((g0 + g2) / 2.0, (r0 + r2) / 2.0);
        println!(
            "{name:<10} {:>18} {g1:>12.2} {:>6.1}% {:>18} {r1:>12.0} {:>6.1}%",
            format!("{g0:.2} / {g2:.2}"),
            100.0 * g1 / g.max(f64::MIN_POSITIVE),
            format!("{r0:.0} / {r2:.0}"),
            100.0 * r1 / r.max(f64::MIN_POSITIVE)
        );
    }
    println!(
        "\nthe same, rules loaded, the measured pods alternately out of the rules' reach and in it \
         (medians of {} rounds, interleaved)",
        ab[0][0].rounds.len()
    );
    println!(
        "{:<10} {:>18} {:>14} {:>7}",
        "pair", "Gbit/s unselected", "Gbit/s selected", "ratio"
    );
    for (i, name) in ["net 0", "VPC"].iter().enumerate() {
        let (g0, g1) = (ab[0][i].medians().0, ab[1][i].medians().0);
        println!(
            "{name:<10} {g0:>18.2} {g1:>14.2} {:>6.1}%",
            100.0 * g1 / g0.max(f64::MIN_POSITIVE)
        );
    }
    // Per-round ratios: each round's two states ran back to back.
    for (i, name) in ["net 0", "VPC"].iter().enumerate() {
        let r: Vec<f64> = ab[0][i]
            .rounds
            .iter()
            .zip(&ab[1][i].rounds)
            .map(|(u, s)| 100.0 * s.0 / u.0.max(f64::MIN_POSITIVE))
            .collect();
        println!(
            "{name:<10} per-round selected/unselected %: {r:.1?}; median {:.1}",
            median(r.clone())
        );
    }
    for (i, name) in ["net 0", "VPC"].iter().enumerate() {
        let (m0, m1) = (ab[0][i].bpf_ms_per_gb(), ab[1][i].bpf_ms_per_gb());
        let (w0, w1) = (ab[0][i].machine_s_per_gb(), ab[1][i].machine_s_per_gb());
        let (u0, u1) = (ab[0][i].unstolen_median(), ab[1][i].unstolen_median());
        println!(
            "{name:<10} datapath CPU ms per GB moved: unselected {m0:.1}, selected {m1:.1} ({:+.1} %); \
             the machine's CPU s per GB: {w0:.3} / {w1:.3} ({:+.1} %); stolen by the hypervisor: \
             {:.0} % / {:.0} %; Gbit/s per unstolen machine (median): {u0:.2} / {u1:.2} ({:.1} %)",
            100.0 * (m1 - m0) / m0.max(f64::MIN_POSITIVE),
            100.0 * (w1 - w0) / w0.max(f64::MIN_POSITIVE),
            ab[0][i].steal_pct(),
            ab[1][i].steal_pct(),
            100.0 * u1 / u0.max(f64::MIN_POSITIVE)
        );
    }

    println!(
        "\nthe same, two identical pairs of each network at once, one in the rules' reach and one \
         out of it, both orders ({} figures of each kind)",
        par[0].gbps.0.len()
    );
    for (n, name) in ["net 0", "VPC"].iter().enumerate() {
        for (what, (r, sum), unit) in [
            ("throughput", &par[n].gbps, "Gbit/s"),
            ("set-up rate", &par[n].conns, "conn/s"),
        ] {
            println!(
                "{name:<10} {what:<12} in reach / out of reach: median {:.1} %, each figure {r:.1?}; \
                 both pairs together {:.2}–{:.2} {unit}",
                median(r.clone()),
                sum.iter().copied().fold(f64::INFINITY, f64::min),
                sum.iter().copied().fold(0.0, f64::max)
            );
        }
    }

    // The programs' accounting pools both no-rules phases.
    let mut before = before;
    for (b, z) in before.iter_mut().zip(&again) {
        b.absorb(z);
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
        println!(
            "{name:<10} {:<16} the machine's CPU s per GB: none {:.3}, rules {:.3}; stolen by the hypervisor: {:.0} % / {:.0} %; Gbit/s per unstolen machine (median): {:.2} / {:.2}",
            "machine",
            before[i].machine_s_per_gb(),
            after[i].machine_s_per_gb(),
            before[i].steal_pct(),
            after[i].steal_pct(),
            before[i].unstolen_median(),
            after[i].unstolen_median()
        );
    }
}
