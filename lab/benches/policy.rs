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
//! decide and a connection-table entry). The ratios are rules / no rules. Figures are
//! printed, never asserted. `POL_SECS` (default 5; `POL_SECS=1` for a quick proof that it
//! runs).

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

fn secs() -> u64 {
    std::env::var("POL_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5)
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

/// One measurement of both pairs: (Gbit/s, conn/s) for net 0 and the VPC.
struct Pairs<'a> {
    net0: (&'a LabPod, &'a LabPod, IpAddr, Arc<AtomicU64>),
    vpc: (&'a LabPod, &'a LabPod, IpAddr, Arc<AtomicU64>),
}

impl Pairs<'_> {
    fn measure(&self) -> [(f64, f64); 2] {
        [&self.net0, &self.vpc].map(|(c, s, to, accepted)| {
            let gbps = iperf(&s.ns, &c.ns, *to);
            let rate = conn_rate(&c.ns, *to, accepted);
            (gbps, rate)
        })
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

    let before = pairs.measure();

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

    let after = pairs.measure();
    println!(
        "\npolicy cost, cross-node TCP ({} s per figure; rules: {NPS} NetworkPolicies, {} SecurityGroup rules)",
        secs(),
        GROUPS * RULES
    );
    println!(
        "{:<10} {:>12} {:>12} {:>7} {:>12} {:>12} {:>7}",
        "pair", "Gbit/s none", "Gbit/s rules", "ratio", "conn/s none", "conn/s rules", "ratio"
    );
    for (name, (g0, r0), (g1, r1)) in [("net 0", before[0], after[0]), ("VPC", before[1], after[1])] {
        println!(
            "{name:<10} {g0:>12.2} {g1:>12.2} {:>6.1}% {r0:>12.0} {r1:>12.0} {:>6.1}%",
            100.0 * g1 / g0.max(f64::MIN_POSITIVE),
            100.0 * r1 / r0.max(f64::MIN_POSITIVE)
        );
    }
}
