//! Kubernetes Services without kube-proxy (issue 26): the Service proxy's control plane at
//! cluster scale, Maglev's disruption when a backend goes, and the datapath against the
//! reference, kube-proxy's nftables mode. Needs root; release build for recorded figures:
//!
//! ```text
//! cargo build --release -p cozyplane-agent
//! cargo build --release --manifest-path cni/bin/Cargo.toml
//! cargo bench -p cozyplane-lab --bench services
//! ```
//!
//! **The control plane, in process** (`agent/src/features/kubeproxy/`, `agent/src/core/lb/`),
//! on real maps: a private bpffs in a temporary directory (unmounted when the bench ends,
//! also on a panic), the agent's own loader, the Service proxy's [`Proxy`] writing through
//! the core's [`Lb`] exactly as the agent's watch loop does (every event, then `commit`).
//!
//! 1. *The list*: `SVC_BENCH_SERVICES` (10,000) ClusterIP Services of one port each, a tenth
//!    of them bigger: half of those with two ports, half dual-stack (one ClusterIP per
//!    family); 10 endpoints (pods) per Service in one slice per family (≤ 100 per slice, as
//!    the endpointslice controller cuts them), on 200 node names, each with its `targetRef`
//!    and conditions. Both kinds are fed as the watcher lists them (`Init`, `InitApply` each,
//!    `InitDone`), Services first; timed from the first event to the last `commit`
//!    returning (the full write of every frontend, backend and Maglev table).
//! 2. *Single-endpoint changes*: `SVC_BENCH_CHANGES` (1,000) slice `Apply` events, spread
//!    over the Services, each replacing one endpoint's address or flipping its ready flag;
//!    each timed from the event to `commit` returning (the path the agent runs per event,
//!    the one `cozyplane_service_update_seconds` observes): p50, p99, max. The issue's
//!    target: p99 ≤ 50 ms.
//! 3. *Memory*: `VmRSS` and `VmHWM` of the bench process after the list, holding what the
//!    agent holds for these Services (the objects trimmed as the proxy keeps them, the
//!    frontends, the writer's ids, the loaded datapath): the agent's stand-in. The target:
//!    < 200 MiB.
//!
//! **Maglev remap**: tables of `LB_BIG_SLOTS` (29,989) slots, the big table the writer gives
//! a frontend of that many backends (`sdn_lb_mag_big`, from `BIG_FROM` = 64), over 100 random
//! backends (identities as the writer hashes them: address and port), one removed; among the
//! slots that did not belong to the removed backend, the fraction whose backend changed,
//! averaged over `SVC_BENCH_MAGLEV_SETS` (20) sets. The target: ≤ ~1 %. For scale, the same
//! at the small table's `LB_SLOTS` (1,021) and at other backend counts.
//!
//! **The datapath against kube-proxy's nftables mode** (the netns lab, `SVC_BENCH_LAB=0`
//! skips it): client c1 on n1, backend b2 on n2, both on the default network, so every path
//! crosses the overlay; a ClusterIP Service (10.96.0.10, ports 80 → 8080 and 5201) with b2 in
//! its EndpointSlice, created at the kube stand-in. *Ours*: both agents with
//! `--kube-proxy-replacement`. *nftables*: both agents restarted without it (their pinned
//! Service frontends removed first), and in n1's netns the rules kube-proxy's nftables mode
//! ends in, `ip daddr 10.96.0.10 tcp dport 80 dnat to <b2>:8080` (and 5201) in `nat`
//! prerouting and output chains. *Direct*: b2's pod address, for scale. Each of
//! `SVC_BENCH_ROUNDS` (3) rounds measures every path, the two Service modes in alternating
//! order: *set-up*, 300 sequential TCP connections each answered by the server's first line
//! (`tests/vip/probe.py tcp`, as `vip.rs`); *throughput*, iperf3, one stream, 5 s after 1 s
//! omitted. Medians of the rounds; the ratio ours / nftables.
//!
//! Figures are printed, never asserted, at the end as table rows for `docs/benchmarks.md`.

use std::collections::HashMap;
use std::io::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use cozyplane_agent::core::datapath::loader::Datapath;
use cozyplane_agent::core::lb::{BIG_FROM, Lb, maglev};
use cozyplane_agent::features::kubeproxy::metrics::ServiceMetrics;
use cozyplane_agent::features::kubeproxy::model::{Me, SERVICE_NAME_LABEL};
use cozyplane_agent::features::kubeproxy::state::{Change, Proxy};
use cozyplane_bpf::DatapathConfig;
use cozyplane_bpf::abi::{LB_BIG_SLOTS, LB_SLOTS};
use cozyplane_bpf::maps::lb_backends::LbBackendsMap;
use cozyplane_bpf::maps::lb_svc::{Frontend, LbSvcMap};
use cozyplane_lab::{Lab, Netns, Proc, bin_dir, require_root};
use k8s_openapi::api::core::v1::{ObjectReference, Service, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, PostParams};
use kube::runtime::watcher::Event;
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};
use serde_json::{Value, json};

#[path = "../tests/common/mod.rs"]
mod common;
use common::{Cp, CpOptions, pod};

/// Endpoints (pods) of each Service.
const PER_SERVICE: usize = 10;
/// Node names the endpoints are spread over.
const NODES: usize = 200;
/// Backends of each Maglev set.
const MAGLEV_BACKENDS: usize = 100;
/// Sequential connections of one set-up figure (as `vip.rs`).
const CONNS: usize = 300;
/// iperf3 seconds of one throughput figure, after 1 s omitted.
const SECS: u32 = 5;
/// The lab Service's ClusterIP.
const VIP: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 10);
/// The owner byte of a Kubernetes Service's frontend (`core::lb::Owner::KubeService`).
const KUBE_OWNER: u32 = 1;

fn knob(name: &str, default: usize) -> usize {
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
    let services = knob("SVC_BENCH_SERVICES", 10_000).max(10);
    let changes = knob("SVC_BENCH_CHANGES", 1_000);
    let sets = knob("SVC_BENCH_MAGLEV_SETS", 20).max(1);
    let lab = knob("SVC_BENCH_LAB", 1) != 0;
    let rounds = knob("SVC_BENCH_ROUNDS", 3).max(1);
    if lab {
        // Before the long in-process part: a missing agent build fails at once.
        let _ = bin_dir();
    }
    let run = Record::now();
    println!(
        "Services bench (issue 26): {}, commit {}, machine {}, load {} at start",
        run.date, run.commit, run.machine, run.load
    );

    let cp = control_plane(services, changes);
    let remap = maglev_remap(sets);
    let dp = if lab {
        let mut out = None;
        Lab::run(2, async |lab: &mut Lab| out = Some(datapath(lab, rounds).await));
        out
    } else {
        println!("\nthe datapath against kube-proxy's nftables mode: skipped (SVC_BENCH_LAB=0)");
        None
    };
    report(&run, &cp, &remap, dp.as_ref());
}

// ---------------------------------------------------------------------------------------------
// The control plane at scale.

/// A private bpffs, unmounted on drop (also when the bench panics: the bench profile unwinds).
struct Bpffs(tempfile::TempDir);

impl Bpffs {
    fn new(name: &str) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        cozyplane_lab::sh_ok(&[
            "mount",
            "-t",
            "bpf",
            name,
            dir.path().to_str().expect("utf-8 path"),
        ]);
        Self(dir)
    }

    fn pins(&self) -> PathBuf {
        self.0.path().join("cozyplane")
    }
}

impl Drop for Bpffs {
    fn drop(&mut self) {
        let _ = cozyplane_lab::sh(&["umount", "-l", self.0.path().to_str().unwrap_or_default()]);
    }
}

/// How Service `i` is shaped: every tenth one is bigger, half of those with two ports, the
/// other half dual-stack.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    One,
    TwoPorts,
    DualStack,
}

fn shape(i: usize) -> Shape {
    match i % 20 {
        0 => Shape::TwoPorts,
        10 => Shape::DualStack,
        _ => Shape::One,
    }
}

fn name(i: usize) -> String {
    format!("svc-{i:05}")
}

/// Namespaces of 100 Services each.
fn namespace(i: usize) -> String {
    format!("team-{:03}", i / 100)
}

fn cluster_ip4(i: usize) -> Ipv4Addr {
    let n = u32::try_from(i + 1).expect("few Services");
    Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 96, 0, 0)) + n)
}

fn cluster_ip6(i: usize) -> Ipv6Addr {
    Ipv6Addr::from(u128::from("fd00:96::".parse::<Ipv6Addr>().expect("v6")) + (i as u128 + 1))
}

/// Pod `n`'s addresses (a pod's IPv6 address is only listed for a dual-stack Service).
fn pod_ip4(n: usize) -> Ipv4Addr {
    let n = u32::try_from(n).expect("few pods");
    Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 128, 0, 0)) + n)
}

fn pod_ip6(n: usize) -> Ipv6Addr {
    Ipv6Addr::from(u128::from("fd00:128::".parse::<Ipv6Addr>().expect("v6")) + n as u128)
}

fn meta(ns: &str, name: String, labels: Vec<(&str, String)>, rv: usize) -> ObjectMeta {
    ObjectMeta {
        namespace: Some(ns.to_string()),
        name: Some(name),
        uid: Some(format!("00000000-0000-4000-8000-{rv:012x}")),
        resource_version: Some(rv.to_string()),
        labels: Some(labels.into_iter().map(|(k, v)| (k.to_string(), v)).collect()),
        ..ObjectMeta::default()
    }
}

fn port(name: &str, port: i32, target: i32) -> ServicePort {
    ServicePort {
        name: Some(name.into()),
        port,
        protocol: Some("TCP".into()),
        target_port: Some(IntOrString::Int(target)),
        ..ServicePort::default()
    }
}

/// Service `i` as the API server returns it (its ClusterIPs allocated).
fn service(i: usize) -> Service {
    let s = shape(i);
    let mut ports = vec![port("http", 80, 8080)];
    if s == Shape::TwoPorts {
        ports.push(port("metrics", 9090, 9090));
    }
    let mut ips = vec![cluster_ip4(i).to_string()];
    let mut families = vec!["IPv4".to_string()];
    if s == Shape::DualStack {
        ips.push(cluster_ip6(i).to_string());
        families.push("IPv6".into());
    }
    Service {
        metadata: meta(&namespace(i), name(i), vec![("app", name(i))], 2 * i + 1),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            cluster_ip: Some(ips[0].clone()),
            cluster_ips: Some(ips),
            ip_families: Some(families),
            ip_family_policy: Some(
                if s == Shape::DualStack {
                    "RequireDualStack"
                } else {
                    "SingleStack"
                }
                .into(),
            ),
            internal_traffic_policy: Some("Cluster".into()),
            session_affinity: Some("None".into()),
            selector: Some([("app".to_string(), name(i))].into()),
            ports: Some(ports),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// One endpoint as the changes left it: another address, or its ready flag flipped.
#[derive(Clone, Copy, Default)]
struct Edit {
    /// The pod that replaced the original one (a number past every original pod).
    pod: Option<usize>,
    not_ready: bool,
}

/// Service `i`'s slices (one per family), with the edits made so far.
fn slices(i: usize, edits: &HashMap<(usize, usize), Edit>) -> Vec<EndpointSlice> {
    let s = shape(i);
    let families: &[bool] = if s == Shape::DualStack {
        &[true, false]
    } else {
        &[true]
    };
    families
        .iter()
        .map(|&v4| {
            let endpoints = (0..PER_SERVICE)
                .map(|j| {
                    let e = edits.get(&(i, j)).copied().unwrap_or_default();
                    let n = e.pod.unwrap_or(i * PER_SERVICE + j);
                    let addr = if v4 {
                        IpAddr::V4(pod_ip4(n))
                    } else {
                        IpAddr::V6(pod_ip6(n))
                    };
                    Endpoint {
                        addresses: vec![addr.to_string()],
                        conditions: Some(EndpointConditions {
                            ready: Some(!e.not_ready),
                            serving: Some(!e.not_ready),
                            terminating: Some(false),
                        }),
                        node_name: Some(format!("node-{:03}", n % NODES)),
                        target_ref: Some(ObjectReference {
                            kind: Some("Pod".into()),
                            namespace: Some(namespace(i)),
                            name: Some(format!("{}-{n:06x}", name(i))),
                            uid: Some(format!("00000000-0000-4000-9000-{n:012x}")),
                            ..ObjectReference::default()
                        }),
                        ..Endpoint::default()
                    }
                })
                .collect();
            let mut ports = vec![EndpointPort {
                name: Some("http".into()),
                port: Some(8080),
                protocol: Some("TCP".into()),
                ..EndpointPort::default()
            }];
            if s == Shape::TwoPorts {
                ports.push(EndpointPort {
                    name: Some("metrics".into()),
                    port: Some(9090),
                    protocol: Some("TCP".into()),
                    ..EndpointPort::default()
                });
            }
            let suffix = if v4 { "v4" } else { "v6" };
            EndpointSlice {
                metadata: meta(
                    &namespace(i),
                    format!("{}-{suffix}", name(i)),
                    vec![
                        (SERVICE_NAME_LABEL, name(i)),
                        (
                            "endpointslice.kubernetes.io/managed-by",
                            "endpointslice-controller.k8s.io".into(),
                        ),
                    ],
                    2 * i + 2,
                ),
                address_type: if v4 { "IPv4" } else { "IPv6" }.into(),
                endpoints: Some(endpoints),
                ports: Some(ports),
            }
        })
        .collect()
}

/// `(VmRSS, VmHWM)` of this process, MiB.
fn rss() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| {
                l.strip_prefix(key)?
                    .trim()
                    .strip_suffix("kB")?
                    .trim()
                    .parse::<f64>()
                    .ok()
            })
            .unwrap_or(0.0)
    };
    (kib("VmRSS:") / 1024.0, kib("VmHWM:") / 1024.0)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The `p` quantile of sorted `v` (nearest rank).
fn quantile(v: &[Duration], p: f64) -> Duration {
    let rank = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// The control plane's figures.
struct Scale {
    services: usize,
    frontends: usize,
    backends: usize,
    endpoints: usize,
    slices: usize,
    built: Duration,
    list: Duration,
    sync: Duration,
    rss_before: (f64, f64),
    rss_listed: (f64, f64),
    rss_changed: (f64, f64),
    changes: Vec<Duration>,
    written: usize,
}

fn control_plane(services: usize, changes: usize) -> Scale {
    println!("\n== control plane: {services} Services, {PER_SERVICE} endpoints each, on real maps");
    let fs = Bpffs::new("cpsvcbench");
    let dp = Datapath::load(&fs.pins(), &DatapathConfig::default()).expect("load the datapath");
    let pins = dp.pin_dir().to_path_buf();
    let lb = Lb::new(&pins);
    let metrics = ServiceMetrics::default();
    let mut proxy = Proxy::new(Me {
        node: "node-000".into(),
        zone: None,
    });
    let rss_before = rss();

    // The objects as the watches hand them over (built first, so the list's time is the
    // proxy's and the writer's alone).
    let t = Instant::now();
    let svcs: Vec<Service> = (0..services).map(service).collect();
    let none = HashMap::new();
    let slice_objs: Vec<EndpointSlice> = (0..services).flat_map(|i| slices(i, &none)).collect();
    let built = t.elapsed();
    let n_slices = slice_objs.len();
    let endpoints: usize = slice_objs
        .iter()
        .map(|s| s.endpoints.as_ref().map_or(0, Vec::len))
        .sum();
    println!(
        "built {services} Services and {n_slices} EndpointSlices ({endpoints} endpoints) in {:.0} ms",
        ms(built)
    );

    // The list, event by event, as the agent's loop runs it.
    let t_list = Instant::now();
    let mut last = Duration::ZERO;
    let mut step = |proxy: &mut Proxy, c: Change| {
        let t0 = Instant::now();
        proxy.commit(c, &lb, &metrics, t0);
        last = t0.elapsed();
    };
    // This node's pods (their hostPorts): none here, but the proxy writes nothing until
    // every one of its watches listed.
    for e in [Event::Init, Event::InitDone] {
        let c = proxy.pod_event(e);
        step(&mut proxy, c);
    }
    let c = proxy.service_event(Event::Init);
    step(&mut proxy, c);
    for s in svcs {
        let c = proxy.service_event(Event::InitApply(s));
        step(&mut proxy, c);
    }
    let c = proxy.service_event(Event::InitDone);
    step(&mut proxy, c);
    let c = proxy.slice_event(Event::Init);
    step(&mut proxy, c);
    for s in slice_objs {
        let c = proxy.slice_event(Event::InitApply(s));
        step(&mut proxy, c);
    }
    let c = proxy.slice_event(Event::InitDone);
    step(&mut proxy, c);
    let list = t_list.elapsed();
    let sync = last;
    let rss_listed = rss();

    let frontends = LbSvcMap::from_pin(&pins)
        .and_then(|m| m.frontends())
        .map_or(0, |f| f.len());
    let backends = LbBackendsMap::from_pin(&pins)
        .and_then(|m| m.ids())
        .map_or(0, |b| b.len());
    println!(
        "list + commit: {:.0} ms (the final commit, every frontend written: {:.0} ms); maps: {frontends} frontends, {backends} backends",
        ms(list),
        ms(sync)
    );
    println!(
        "RSS (the bench process holding the agent's state for these Services): before {:.1} MiB, after the list {:.1} MiB (VmHWM {:.1} MiB)",
        rss_before.0, rss_listed.0, rss_listed.1
    );

    // Single-endpoint changes, spread over the Services by a stride coprime to their count
    // (a prime that does not divide it).
    let mut edits: HashMap<(usize, usize), Edit> = HashMap::new();
    let stride = [7919, 7907, 7901, 7883]
        .into_iter()
        .find(|p| !services.is_multiple_of(*p))
        .unwrap_or(1);
    let mut lat = Vec::with_capacity(changes);
    let mut written = 0;
    for k in 0..changes {
        let i = (k * stride) % services;
        let j = k % PER_SERVICE;
        let e = edits.entry((i, j)).or_default();
        if k % 2 == 0 {
            e.pod = Some(services * PER_SERVICE + k);
        } else {
            e.not_ready = !e.not_ready;
        }
        // The IPv4 slice (a dual-stack Service's other slice does not change).
        let s = slices(i, &edits).swap_remove(0);
        let t0 = Instant::now();
        let c = proxy.slice_event(Event::Apply(s));
        let done = proxy.commit(c, &lb, &metrics, t0);
        lat.push(t0.elapsed());
        written += done.written;
    }
    lat.sort();
    let rss_changed = rss();
    if changes > 0 {
        println!(
            "{changes} single-endpoint changes, event to commit returned: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms ({written} frontends written)",
            ms(quantile(&lat, 0.5)),
            ms(quantile(&lat, 0.99)),
            ms(lat[lat.len() - 1])
        );
    }
    drop(proxy);
    drop(lb);
    drop(dp);
    drop(fs);
    Scale {
        services,
        frontends,
        backends,
        endpoints,
        slices: n_slices,
        built,
        list,
        sync,
        rss_before,
        rss_listed,
        rss_changed,
        changes: lat,
        written,
    }
}

// ---------------------------------------------------------------------------------------------
// Maglev.

/// Maglev's disruption over random sets: the mean and max of the fraction of surviving
/// backends' slots that changed hands, and the mean share of the removed backend's own slots.
struct Remap {
    sets: usize,
    mean: f64,
    max: f64,
    own: f64,
    /// The mean at other table sizes and backend counts, for scale: `(slots, backends, mean)`.
    context: Vec<(usize, usize, f64)>,
}

/// One backend of `n` removed from a table of `slots`, over `sets` random sets (the same
/// seed each time): `(mean, max, own)` as [`Remap`] has them.
fn remap_at(slots: usize, n: usize, sets: usize) -> (f64, f64, f64) {
    let mut rng = StdRng::seed_from_u64(26);
    let (mut sum, mut max, mut own) = (0.0f64, 0.0f64, 0.0f64);
    for _ in 0..sets {
        // Distinct backends, identities as the writer hashes them: address then port.
        let mut ids: Vec<Vec<u8>> = Vec::new();
        while ids.len() < n {
            let mut v = Ipv4Addr::from(0x0a00_0000 | (rng.random::<u32>() & 0x00ff_ffff))
                .octets()
                .to_vec();
            v.extend_from_slice(&8080u16.to_be_bytes());
            if !ids.contains(&v) {
                ids.push(v);
            }
        }
        let gone = rng.random_range(0..n);
        let before = maglev::table(&ids, slots);
        let rest: Vec<&Vec<u8>> = ids
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != gone)
            .map(|(_, v)| v)
            .collect();
        let after = maglev::table(&rest, slots);
        // Index into `rest` -> index into `ids`.
        let orig = |j: usize| if j < gone { j } else { j + 1 };
        let (mut kept, mut moved) = (0usize, 0usize);
        for (b, a) in before.iter().zip(&after) {
            if *b == gone {
                continue;
            }
            kept += 1;
            moved += usize::from(orig(*a) != *b);
        }
        let f = moved as f64 / kept as f64;
        sum += f;
        max = max.max(f);
        own += (slots - kept) as f64 / slots as f64;
    }
    (sum / sets as f64, max, own / sets as f64)
}

fn maglev_remap(sets: usize) -> Remap {
    println!(
        "\n== Maglev: {LB_BIG_SLOTS} slots (the big table), {MAGLEV_BACKENDS} backends, one removed, {sets} random sets"
    );
    let (mean, max, own) = remap_at(LB_BIG_SLOTS, MAGLEV_BACKENDS, sets);
    println!(
        "surviving backends' slots that changed hands: mean {:.2} %, max {:.2} % (the removed backend held {:.2} % of the slots on average)",
        100.0 * mean,
        100.0 * max,
        100.0 * own
    );
    // The small table at 100 and 10 backends; the big one at the fewest backends it serves
    // and around its worst.
    let context: Vec<(usize, usize, f64)> = [
        (LB_SLOTS, MAGLEV_BACKENDS),
        (LB_SLOTS, 10),
        (LB_BIG_SLOTS, BIG_FROM),
        (LB_BIG_SLOTS, 300),
    ]
    .into_iter()
    .map(|(slots, n)| (slots, n, remap_at(slots, n, sets).0))
    .collect();
    for (slots, n, m) in &context {
        println!(
            "  for scale: {slots} slots, {n} backends: mean {:.2} %",
            100.0 * m
        );
    }
    Remap {
        sets,
        mean,
        max,
        own,
        context,
    }
}

// ---------------------------------------------------------------------------------------------
// The datapath against kube-proxy's nftables mode.

/// Medians of the rounds: `(set-up conn/s, throughput Gbit/s, connections not answered)`.
#[derive(Clone, Copy, Debug, Default)]
struct Path3 {
    setup: f64,
    gbits: f64,
    errors: usize,
}

struct Datapath3 {
    rounds: usize,
    ours: Path3,
    nft: Path3,
    direct: Path3,
    /// From the lab's internet host to n2's NodePort (b2 on n2).
    ours_np: Path3,
    nft_np: Path3,
}

/// The NodePorts of the bench Service (probe, iperf3).
const NODE_PORTS: (u16, u16) = (30080, 30201);

fn probe() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vip/probe.py").to_string()
}

/// Connections per second from `c` to `ip:port`, and how many were not answered.
fn setup_rate(c: &Netns, ip: Ipv4Addr, port: u16) -> (f64, usize) {
    let t = Instant::now();
    let out = c.exec(&[
        "python3",
        &probe(),
        "tcp",
        &ip.to_string(),
        &port.to_string(),
        &CONNS.to_string(),
    ]);
    let secs = t.elapsed().as_secs_f64();
    let text = String::from_utf8_lossy(&out.stdout);
    let ok = text.lines().filter(|l| *l == "b2").count();
    (CONNS as f64 / secs, CONNS - ok)
}

/// Received Gbit/s of one iperf3 run from `c` to `ip:port`.
fn throughput(c: &Netns, ip: Ipv4Addr, port: u16) -> f64 {
    let out = c.exec(&[
        "iperf3",
        "-c",
        &ip.to_string(),
        "-p",
        &port.to_string(),
        "-t",
        &SECS.to_string(),
        "-O",
        "1",
        "-J",
    ]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let bits = v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap_or(0.0);
    if bits == 0.0 {
        println!(
            "  iperf3 to {ip}:{port} gave no figure: {} {}",
            v["error"].as_str().unwrap_or_default(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    bits / 1e9
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Waits until `c` reaches b2 through `ip:port` (after an agent restart or a rule change).
fn reachable(c: &Netns, ip: Ipv4Addr, port: u16, what: &str) {
    let t = Instant::now();
    loop {
        let out = c.exec(&[
            "python3",
            &probe(),
            "tcp",
            &ip.to_string(),
            &port.to_string(),
            "1",
        ]);
        if String::from_utf8_lossy(&out.stdout).trim() == "b2" {
            return;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "{what}: {} does not reach b2 through {ip}:{port}",
            c.0
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The rules kube-proxy's nftables mode ends in for the Service's ClusterIP, in n1's netns,
/// and for its NodePorts on `node` (n2, the backend's node), in n2's. Only the DNAT: for a
/// client outside, kube-proxy also masquerades under `externalTrafficPolicy: Cluster`, which
/// this leaner reference leaves out.
fn nft_rules(b2: Ipv4Addr, node: Option<Ipv4Addr>) -> String {
    let (np, ip) = NODE_PORTS;
    let rules = match node {
        None => format!(
            "\t\tip daddr {VIP} tcp dport 80 dnat to {b2}:8080\n\t\tip daddr {VIP} tcp dport 5201 dnat to {b2}:5201\n"
        ),
        Some(n) => format!(
            "\t\tip daddr {n} tcp dport {np} dnat to {b2}:8080\n\t\tip daddr {n} tcp dport {ip} dnat to {b2}:5201\n"
        ),
    };
    format!(
        "table ip kube-proxy-bench {{\n\
         \tchain prerouting {{\n\t\ttype nat hook prerouting priority dstnat; policy accept;\n{rules}\t}}\n\
         \tchain output {{\n\t\ttype nat hook output priority -100; policy accept;\n{rules}\t}}\n\
         }}\n"
    )
}

fn nft(lab: &Lab, node: usize, script: &str) {
    let mut child = lab.nodes[node]
        .ns
        .command(&["nft", "-f", "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("nft");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(script.as_bytes())
        .expect("nft stdin");
    let out = child.wait_with_output().expect("nft");
    assert!(
        out.status.success(),
        "nft -f: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The Kubernetes Services' frontends pinned under `pins`, removed (agents without
/// `--kube-proxy-replacement` keep them: no one prunes another owner's frontends).
fn remove_kube_frontends(pins: &Path) {
    let mut m = LbSvcMap::from_pin(pins).expect("sdn_lb_svc");
    for f in m.frontends().expect("frontends") {
        if m.get(f)
            .ok()
            .flatten()
            .is_some_and(|v| v.flags & 0xff == KUBE_OWNER)
        {
            m.remove(f).expect("remove a frontend");
        }
    }
}

fn programmed(pins: &Path, port: u16) -> bool {
    let f = Frontend {
        net: 0,
        vip: VIP.into(),
        proto: 6,
        port,
    };
    LbSvcMap::from_pin(pins)
        .ok()
        .and_then(|m| m.get(f).ok().flatten())
        .is_some_and(|v| v.count == 1)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Ours,
    Nft,
}

async fn datapath(lab: &mut Lab, rounds: usize) -> Datapath3 {
    println!(
        "\n== datapath: c1 (n1) -> b2 (n2), default network, ClusterIP {VIP}; the internet host -> NodePort of n2"
    );
    let cp = Cp::start_with_args(lab, CpOptions::default(), &["--kube-proxy-replacement"]).await;
    let lab = &*lab;
    let c1 = pod(&cp, lab, 0, "default", "c1", None).await;
    let b2 = pod(&cp, lab, 1, "default", "b2", None).await;
    let mut serve = b2
        .ns
        .command(&["python3", &probe(), "serve", "b2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("probe serve");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(serve.stdout.take().expect("stdout")),
        &mut line,
    )
    .expect("probe ready");
    let _serve = Proc(serve);
    let _iperf = Proc(
        b2.ns
            .command(&["iperf3", "-s", "-p", "5201"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("iperf3 -s"),
    );
    std::thread::sleep(Duration::from_millis(300));

    let svc: Service = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": { "namespace": "default", "name": "bench" },
        "spec": { "type": "NodePort", "clusterIP": VIP.to_string(), "clusterIPs": [VIP.to_string()],
                  "ipFamilies": ["IPv4"], "selector": { "app": "bench" },
                  "ports": [ { "name": "probe", "protocol": "TCP", "port": 80, "targetPort": 8080,
                               "nodePort": NODE_PORTS.0 },
                             { "name": "iperf", "protocol": "TCP", "port": 5201, "targetPort": 5201,
                               "nodePort": NODE_PORTS.1 } ] },
    }))
    .expect("Service");
    Api::<Service>::namespaced(cp.kube.clone(), "default")
        .create(&PostParams::default(), &svc)
        .await
        .expect("create the Service");
    let slice: EndpointSlice = serde_json::from_value(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": { "namespace": "default", "name": "bench-abcde",
                      "labels": { SERVICE_NAME_LABEL: "bench" } },
        "addressType": "IPv4",
        "ports": [ { "name": "probe", "protocol": "TCP", "port": 8080 },
                   { "name": "iperf", "protocol": "TCP", "port": 5201 } ],
        "endpoints": [ { "addresses": [b2.fabric.to_string()], "nodeName": "n2",
                         "conditions": { "ready": true, "serving": true, "terminating": false } } ],
    }))
    .expect("EndpointSlice");
    Api::<EndpointSlice>::namespaced(cp.kube.clone(), "default")
        .create(&PostParams::default(), &slice)
        .await
        .expect("create the EndpointSlice");

    // The lab's internet host, routed to the nodes' addresses: the NodePort's clients.
    let outside = lab.outside(1500);
    let inet = &outside.internet;
    let n2 = lab.nodes[1].ip;
    let kube_kc = cp.kube_kubeconfig();
    let sdn_kc = cp.server.kubeconfig.clone();
    let switch = |mode: Mode| match mode {
        Mode::Ours => {
            for n in 0..2 {
                let _ = lab.nodes[n]
                    .ns
                    .exec(&["nft", "delete", "table", "ip", "kube-proxy-bench"]);
            }
            for n in &lab.nodes {
                n.start_agent_with(&kube_kc, &sdn_kc, &["--kube-proxy-replacement"]);
            }
            common::wait("n1 programs the Service", || {
                programmed(&lab.nodes[0].scratch.pins(), 80) && programmed(&lab.nodes[0].scratch.pins(), 5201)
            });
            reachable(&c1.ns, VIP, 80, "ours");
            reachable(inet, n2, NODE_PORTS.0, "ours");
        }
        Mode::Nft => {
            for n in &lab.nodes {
                n.stop_agent();
                remove_kube_frontends(&n.scratch.pins());
                n.start_agent_with(&kube_kc, &sdn_kc, &[]);
            }
            assert!(!programmed(&lab.nodes[0].scratch.pins(), 80), "no frontend left");
            nft(lab, 0, &nft_rules(b2.fabric, None));
            nft(lab, 1, &nft_rules(b2.fabric, Some(n2)));
            reachable(&c1.ns, VIP, 80, "nftables");
            reachable(inet, n2, NODE_PORTS.0, "nftables");
        }
    };
    common::wait("n1 programs the Service", || {
        programmed(&lab.nodes[0].scratch.pins(), 80) && programmed(&lab.nodes[0].scratch.pins(), 5201)
    });
    reachable(&c1.ns, VIP, 80, "ours");
    reachable(inet, n2, NODE_PORTS.0, "ours");

    let mut current = Mode::Ours;
    let mut runs: HashMap<&str, (Vec<f64>, Vec<f64>, usize)> = HashMap::new();
    let mut measure = |key: &'static str, from: &Netns, ip: Ipv4Addr, port: u16, iperf_port: u16| {
        let (s, e) = setup_rate(from, ip, port);
        let g = throughput(from, ip, iperf_port);
        println!("  {key}: set-up {s:.0}/s ({e} not answered), {g:.2} Gbit/s");
        let r = runs.entry(key).or_default();
        r.0.push(s);
        r.1.push(g);
        r.2 += e;
    };
    for round in 1..=rounds {
        println!("round {round}");
        measure("direct", &c1.ns, b2.fabric, 8080, 5201);
        let order = if current == Mode::Ours {
            [Mode::Ours, Mode::Nft]
        } else {
            [Mode::Nft, Mode::Ours]
        };
        for mode in order {
            if mode != current {
                switch(mode);
                current = mode;
            }
            let (cip, np) = if mode == Mode::Ours {
                ("ours", "ours-np")
            } else {
                ("nftables", "nftables-np")
            };
            measure(cip, &c1.ns, VIP, 80, 5201);
            measure(np, inet, n2, NODE_PORTS.0, NODE_PORTS.1);
        }
    }
    let mut fig = |k: &str| {
        let (s, g, e) = runs.remove(k).unwrap_or_default();
        Path3 {
            setup: median(s),
            gbits: median(g),
            errors: e,
        }
    };
    let d = Datapath3 {
        rounds,
        ours: fig("ours"),
        nft: fig("nftables"),
        direct: fig("direct"),
        ours_np: fig("ours-np"),
        nft_np: fig("nftables-np"),
    };
    if current == Mode::Nft {
        for n in 0..2 {
            let _ = lab.nodes[n]
                .ns
                .exec(&["nft", "delete", "table", "ip", "kube-proxy-bench"]);
        }
    }
    d
}

// ---------------------------------------------------------------------------------------------
// The record.

/// Date, commit and machine of this run, as `docs/benchmarks.md` states them.
struct Record {
    date: String,
    commit: String,
    machine: String,
    /// The 1-minute load average when the bench started (others' work on the machine).
    load: String,
}

impl Record {
    fn now() -> Self {
        let repo = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
        let out = |args: &[&str]| {
            std::process::Command::new(args[0])
                .args(&args[1..])
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        };
        let head = out(&["git", "-C", repo, "rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "?".into());
        let dirty = out(&["git", "-C", repo, "status", "--porcelain", "--untracked-files=no"])
            .is_some_and(|s| !s.is_empty());
        let commit = if dirty {
            format!("`{head}` + uncommitted")
        } else {
            format!("`{head}`")
        };
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .unwrap_or_default()
            .lines()
            .find_map(|l| {
                l.strip_prefix("model name")?
                    .split_once(':')
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_default();
        let machine = if cpu.contains("EPYC") {
            "EPYC".to_string()
        } else if cpu.contains("Xeon") {
            "Xeon".to_string()
        } else {
            format!("{cpu} (not stated)")
        };
        Self {
            date: out(&["date", "+%F"]).unwrap_or_else(|| "?".into()),
            commit,
            machine,
            load: std::fs::read_to_string("/proc/loadavg")
                .ok()
                .and_then(|l| l.split_whitespace().next().map(str::to_string))
                .unwrap_or_else(|| "?".into()),
        }
    }
}

/// `n` with a comma every three digits, as the tables write counts.
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn report(run: &Record, s: &Scale, r: &Remap, d: Option<&Datapath3>) {
    let tail = format!("{} | {} | {}", run.date, run.commit, run.machine);
    println!(
        "\n---- for docs/benchmarks.md (load average {} when the bench started) ----\n",
        run.load
    );
    println!(
        "| metric | ours | kube-proxy, nftables mode | ratio | issue 26's target | date | commit | machine | notes |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    println!(
        "| full list + commit: {} Services, {} frontends, {} endpoints in {} slices | {:.2} s | – | – | – | {tail} | {} backends written; the final commit (every frontend's table) {:.2} s; building the objects ({:.2} s) not counted |",
        thousands(s.services),
        thousands(s.frontends),
        thousands(s.endpoints),
        thousands(s.slices),
        s.list.as_secs_f64(),
        thousands(s.backends),
        s.sync.as_secs_f64(),
        s.built.as_secs_f64()
    );
    if !s.changes.is_empty() {
        let p99 = quantile(&s.changes, 0.99);
        println!(
            "| one endpoint changed, event to maps written ({} changes): p50 / p99 / max | {:.2} / **{:.2}** / {:.2} ms | – | – | p99 ≤ 50 ms: {} | {tail} | on the loaded maps above; {} frontends written |",
            thousands(s.changes.len()),
            ms(quantile(&s.changes, 0.5)),
            ms(p99),
            ms(s.changes[s.changes.len() - 1]),
            if p99 <= Duration::from_millis(50) {
                "met"
            } else {
                "**not met**"
            },
            thousands(s.written)
        );
    }
    println!(
        "| RSS after the list: VmRSS (VmHWM) | **{:.1} MiB** ({:.1} MiB) | – | – | < 200 MiB: {} | {tail} | the bench process holding the agent's state for these Services (and the loaded datapath); {:.1} MiB before the objects were built, {:.1} MiB after the changes |",
        s.rss_listed.0,
        s.rss_listed.1,
        if s.rss_listed.0 < 200.0 {
            "met"
        } else {
            "**not met**"
        },
        s.rss_before.0,
        s.rss_changed.0
    );
    println!(
        "| Maglev, one of {MAGLEV_BACKENDS} backends removed: surviving backends' slots that changed hands, mean (max) of {} sets | **{:.2} %** ({:.2} %) | – | – | ≤ ~1 %: {} | {tail} | {} slots (the big table, `sdn_lb_mag_big`, of a frontend with {BIG_FROM} backends or more); the removed backend's own slots, {:.2} % of the table, move by necessity; the same measure at other sizes: {} |",
        r.sets,
        100.0 * r.mean,
        100.0 * r.max,
        if r.mean <= 0.011 { "met" } else { "**not met**" },
        thousands(LB_BIG_SLOTS),
        100.0 * r.own,
        r.context
            .iter()
            .map(|(slots, n, m)| { format!("{} slots, {n} backends: {:.2} %", thousands(*slots), 100.0 * m) })
            .collect::<Vec<_>>()
            .join("; ")
    );
    if let Some(d) = d {
        let errs = |p: &Path3, what: &str| {
            if p.errors == 0 {
                String::new()
            } else {
                format!("; {what}: {} of its connections not answered", p.errors)
            }
        };
        println!(
            "| connection set-up, {CONNS} sequential, c1 (n1) -> ClusterIP -> b2 (n2), median of {} | {}/s | {}/s | **{:.1} %** | – | {tail} | direct to b2: {}/s{}{}{} |",
            d.rounds,
            thousands(d.ours.setup.round() as usize),
            thousands(d.nft.setup.round() as usize),
            100.0 * d.ours.setup / d.nft.setup,
            thousands(d.direct.setup.round() as usize),
            errs(&d.ours, "ours"),
            errs(&d.nft, "nftables"),
            errs(&d.direct, "direct")
        );
        println!(
            "| TCP throughput, iperf3 {SECS} s, one stream, median of {} | {:.2} Gbit/s | {:.2} Gbit/s | **{:.1} %** | – | {tail} | direct to b2: {:.2} Gbit/s |",
            d.rounds,
            d.ours.gbits,
            d.nft.gbits,
            100.0 * d.ours.gbits / d.nft.gbits,
            d.direct.gbits
        );
        println!(
            "| connection set-up, {CONNS} sequential, internet host -> NodePort of n2 -> b2 (n2), median of {} | {}/s | {}/s | **{:.1} %** | – | {tail} | the reference is DNAT alone (kube-proxy would also masquerade){}{} |",
            d.rounds,
            thousands(d.ours_np.setup.round() as usize),
            thousands(d.nft_np.setup.round() as usize),
            100.0 * d.ours_np.setup / d.nft_np.setup,
            errs(&d.ours_np, "ours"),
            errs(&d.nft_np, "nftables"),
        );
        println!(
            "| TCP throughput through the NodePort, iperf3 {SECS} s, one stream, median of {} | {:.2} Gbit/s | {:.2} Gbit/s | **{:.1} %** | – | {tail} | internet host -> n2 -> b2, through the lab's router |",
            d.rounds,
            d.ours_np.gbits,
            d.nft_np.gbits,
            100.0 * d.ours_np.gbits / d.nft_np.gbits,
        );
    }
}
