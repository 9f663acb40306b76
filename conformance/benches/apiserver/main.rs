//! API server benchmark against the Go peer (issue 16): `sample-apiserver` (kubernetes/
//! sample-apiserver v1.36 on k8s.io/apiserver, from `KUBE_BIN_DIR`, default
//! `<repo>/../shared/kube`) and the release `cozyplane-apiserver`, each a child process on its
//! own fresh etcd, in interleaved rounds (Go first in even rounds, ours first in odd ones),
//! driven over HTTPS/HTTP2 by the same client with 32 requests in flight. Prints one table with
//! Go, ours and the ratio per row (docs/benchmarks.md, "API server against the Go peer").
//!
//! `cargo build --release -p cozyplane-apiserver && cargo bench -p cozyplane-conformance --bench
//! apiserver` (`make bench` does both). Sizes (defaults in [`Config::from_env`]):
//! `BENCH_ROUNDS`, `BENCH_CREATES`, `BENCH_GETS`, `BENCH_LIST_OBJECTS`, `BENCH_LISTS`,
//! `BENCH_WATCHERS`, `BENCH_WATCH_CREATES`, `BENCH_WATCH_RATE`, `BENCH_NODE_WATCHERS`,
//! `BENCH_STORED`; `BENCH_PEERS=ours` (or `go`) runs one side only; `BENCH_PHASES` (a comma list
//! of `plain`, `settled`, `ipam`, `get`, `list`, `watch`, `nodewatch`, `memory`; default all)
//! runs only those phases, the rows of the others say "not run"; `BENCH_SHOW_ITEM=1` prints the
//! first item of each list. Without `sample-apiserver`
//! the Go side does not run and the bench says so loudly (it fails with `REQUIRE_KUBE=1` or in
//! CI). `BENCH_SOLO=embedded,etcd` adds the older single-server report of issue 3 ([`solo`]).
//! `COZYPLANE_APISERVER=<path>` picks another server binary.

mod client;
mod fanout;
mod phases;
mod report;
mod servers;
mod solo;

use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};

use crate::client::Client;
use crate::fanout::{FanOut, Plan, fan_out};
use crate::phases::{Creates, Lists, Memory, Stats, creates, lists, memory, paged_walks, run};
use crate::servers::{Peer, Server};

/// A count from the environment variable `var`, else `default`.
fn env_count(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The sizes of one run.
pub(crate) struct Config {
    pub(crate) rounds: usize,
    pub(crate) creates: usize,
    pub(crate) gets: usize,
    pub(crate) list_objects: usize,
    pub(crate) lists: usize,
    pub(crate) watchers: usize,
    pub(crate) watch_creates: usize,
    pub(crate) watch_rate: usize,
    pub(crate) node_watchers: usize,
    pub(crate) stored: usize,
    /// `BENCH_PHASES`: the phases to run (`None`: all).
    phases: Option<Vec<String>>,
}

impl Config {
    fn from_env() -> Self {
        Self {
            rounds: env_count("BENCH_ROUNDS", 2),
            creates: env_count("BENCH_CREATES", 5_000),
            gets: env_count("BENCH_GETS", 5_000),
            list_objects: env_count("BENCH_LIST_OBJECTS", 10_000),
            lists: env_count("BENCH_LISTS", 10),
            watchers: env_count("BENCH_WATCHERS", 1_000),
            watch_creates: env_count("BENCH_WATCH_CREATES", 1_000),
            watch_rate: env_count("BENCH_WATCH_RATE", 100),
            node_watchers: env_count("BENCH_NODE_WATCHERS", 5_000),
            stored: env_count("BENCH_STORED", 100_000),
            phases: std::env::var("BENCH_PHASES")
                .ok()
                .map(|v| v.split(',').map(|p| p.trim().to_string()).collect()),
        }
    }

    /// Whether phase `p` runs.
    fn runs(&self, p: &str) -> bool {
        self.phases.as_ref().is_none_or(|ps| ps.iter().any(|x| x == p))
    }
}

/// Nodes the Ports are spread over (`spec.node=node-<i % NODES>`).
const NODES: usize = 100;
const WARM_UP: usize = 200;

/// Everything measured on one server in one round.
/// A phase left out by `BENCH_PHASES` is `None`.
pub(crate) struct Outcome {
    pub(crate) plain: Option<Creates>,
    /// Go: Flunders; ours: VPCBindings (a kind with a controller).
    pub(crate) settled: Option<Creates>,
    pub(crate) port: Option<Creates>,
    pub(crate) vpc: Option<Creates>,
    pub(crate) get: Option<Stats>,
    pub(crate) consistent: Option<Lists>,
    pub(crate) rv0: Option<Lists>,
    pub(crate) paged: Option<Lists>,
    pub(crate) watch: Option<FanOut>,
    pub(crate) node_watch: Option<FanOut>,
    pub(crate) mem: Option<Memory>,
}

/// A set-up create; retried while etcd times out (503) on a loaded machine.
async fn post_ok(c: &Client, path: &str, body: &Value) {
    for tries in 1.. {
        let (code, b) = c.call("POST", path, Some(body)).await;
        if code == 201 {
            return;
        }
        assert!(
            code == 503 && tries < 10,
            "POST {path}: {code} {}",
            String::from_utf8_lossy(&b)
        );
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}

fn port(s: &Server, prefix: &str, i: usize) -> (String, Value) {
    (
        s.ports_path(),
        json!({
            "apiVersion": "sdn.cozystack.io/v1alpha1",
            "kind": "Port",
            "metadata": { "generateName": prefix },
            "spec": {
                "vpcRef": { "namespace": "bench", "name": "vpc" },
                "node": format!("node-{}", i % NODES),
                "nodeIP": format!("192.168.0.{}", 1 + i % NODES),
            },
        }),
    )
}

/// Runs every phase on `s`, printing each figure as it comes.
async fn measure(s: Arc<Server>, cfg: &Config) -> Outcome {
    let who = s.peer.label();
    let ours = s.peer == Peer::Ours;
    let c = s.client(2).await;
    let mut objects = 0;
    if ours {
        let vpc = json!({
            "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "VPC",
            "metadata": { "name": "vpc" }, "spec": { "cidrs": ["10.64.0.0/16"] },
        });
        post_ok(&c, &s.vpcs_path("bench"), &vpc).await;
        objects += 1;
    }
    // Warm-up: connections, caches, code paths; not measured.
    {
        let s2 = s.clone();
        let st = run(&c, WARM_UP, 201, move |i| {
            (
                "POST",
                s2.plain_path("warm"),
                Some(s2.plain(&format!("w-{i:06}"), i)),
            )
        })
        .await;
        if st.errors > 0 {
            eprintln!("{who}: {} of {WARM_UP} warm-up creates failed", st.errors);
        }
        objects += WARM_UP;
    }
    let n = cfg.creates;
    let plain = if cfg.runs("plain") {
        let s2 = s.clone();
        let plain = creates(&s, &c, n, move |i| {
            (s2.plain_path("bench"), s2.plain(&format!("p-{i:06}"), i))
        })
        .await;
        objects += n;
        println!(
            "{who}: plain creates {:.0}/s p99 {:.1} ms, {:.0}/s settled, {} errors",
            plain.stats.rate(),
            plain.stats.ms(0.99),
            plain.settled_rate().unwrap_or(0.0),
            plain.stats.errors
        );
        println!("{who}: plain creates cost per create: {}", plain.cost);
        Some(plain)
    } else {
        None
    };
    // The plain collection's names so far (`p-` when the plain creates ran).
    let in_plain = if plain.is_some() { n } else { 0 };
    let settled = if cfg.runs("settled") {
        let s2 = s.clone();
        let settled = if ours {
            creates(&s, &c, n, move |i| {
                let b = json!({
                    "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "VPCBinding",
                    "metadata": { "name": format!("b-{i:06}") },
                    "spec": { "vpcRef": { "namespace": "bench", "name": "vpc" } },
                });
                (s2.bindings_path("bench"), b)
            })
            .await
        } else {
            creates(&s, &c, n, move |i| {
                (s2.plain_path("settle"), s2.plain(&format!("s-{i:06}"), i))
            })
            .await
        };
        objects += n;
        println!(
            "{who}: {} creates {:.0}/s acknowledged, {:.0}/s including the work after the point, {} errors",
            if ours { "VPCBinding" } else { "Flunder" },
            settled.stats.rate(),
            settled.settled_rate().unwrap_or(0.0),
            settled.stats.errors
        );
        println!("{who}: settled creates cost per create: {}", settled.cost);
        Some(settled)
    } else {
        None
    };
    let (port_c, vpc_c) = if ours && cfg.runs("ipam") {
        let s2 = s.clone();
        let p = creates(&s, &c, n, move |i| port(&s2, "p-", i)).await;
        println!(
            "{who}: Port (IPAM) creates {:.0}/s p99 {:.1} ms, {} errors",
            p.stats.rate(),
            p.stats.ms(0.99),
            p.stats.errors
        );
        println!("{who}: Port creates cost per create: {}", p.cost);
        let s2 = s.clone();
        let v = creates(&s, &c, n, move |_| {
            let b = json!({
                "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "VPC",
                "metadata": { "generateName": "v-" }, "spec": { "cidrs": ["10.100.0.0/16"] },
            });
            (s2.vpcs_path("bench"), b)
        })
        .await;
        println!(
            "{who}: VPC (VNI) creates {:.0}/s p99 {:.1} ms, {} errors",
            v.stats.rate(),
            v.stats.ms(0.99),
            v.stats.errors
        );
        println!("{who}: VPC creates cost per create: {}", v.cost);
        objects += 2 * n;
        (Some(p), Some(v))
    } else {
        (None, None)
    };
    // The listed collection holds exactly `list_objects` objects (the GETs read them too).
    let mut in_bench = in_plain;
    if cfg.runs("get") || cfg.runs("list") {
        let top_up = cfg.list_objects.saturating_sub(in_plain);
        let s2 = s.clone();
        let st = run(&c, top_up, 201, move |i| {
            (
                "POST",
                s2.plain_path("bench"),
                Some(s2.plain(&format!("l-{i:06}"), in_plain + i)),
            )
        })
        .await;
        if st.errors > 0 {
            eprintln!(
                "{who}: {} creates for the lists failed (the lists show their item count)",
                st.errors
            );
        }
        objects += top_up;
        in_bench += top_up;
    }
    // Like every create batch, the reads start from quiet: the top-up's work after the point is
    // not theirs.
    s.settle(Instant::now()).await;
    let get = if cfg.runs("get") {
        let s2 = s.clone();
        let (prefix, of) = if in_plain > 0 {
            ("p", in_plain)
        } else {
            ("l", in_bench)
        };
        let before = s.spent();
        let get = run(&c, cfg.gets, 200, move |i| {
            let k = (i * 7919) % of.max(1);
            ("GET", format!("{}/{prefix}-{k:06}", s2.plain_path("bench")), None)
        })
        .await;
        println!("{who}: GET {:.0}/s p99 {:.1} ms", get.rate(), get.ms(0.99));
        println!(
            "{who}: GET cost per request: {}",
            before.per_request(&s.spent(), cfg.gets)
        );
        Some(get)
    } else {
        None
    };
    let path = s.plain_path("bench");
    let (consistent, rv0, paged) = if cfg.runs("list") {
        let consistent = lists(&c, &path, cfg.lists).await;
        let rv0 = lists(&c, &format!("{path}?resourceVersion=0"), cfg.lists).await;
        let paged = paged_walks(&c, &path, 500, cfg.lists).await;
        for (what, l) in [
            ("consistent", &consistent),
            ("rv=0", &rv0),
            ("paged walk", &paged),
        ] {
            println!(
                "{who}: LIST {in_bench} {what}: p50 {:.1} ms, {} items, {} bytes",
                l.p50_ms, l.items, l.bytes
            );
        }
        (Some(consistent), Some(rv0), Some(paged))
    } else {
        (None, None, None)
    };
    let watch = if cfg.runs("watch") {
        let s2 = s.clone();
        let watch = fan_out(
            &s,
            Plan {
                watches: vec![format!("{path}?watch=1"); cfg.watchers],
                list: format!("{path}?"),
                creates: cfg.watch_creates,
                rate: cfg.watch_rate as f64,
                make: move |i| {
                    (
                        s2.plain_path("bench"),
                        s2.plain(&format!("wch-{i:06}"), 200_000 + i),
                    )
                },
                wants: |_, _| true,
                prefix: "wch-",
            },
        )
        .await;
        objects += cfg.watch_creates;
        in_bench += cfg.watch_creates;
        print_fan_out(who, &format!("{} watchers", cfg.watchers), &watch);
        Some(watch)
    } else {
        None
    };
    let node_watch = if ours && cfg.runs("nodewatch") {
        let s2 = s.clone();
        let ports = s.ports_path();
        let f = fan_out(
            &s,
            Plan {
                watches: (0..cfg.node_watchers)
                    .map(|w| format!("{ports}?watch=1&fieldSelector=spec.node%3Dnode-{}", w % NODES))
                    .collect(),
                list: format!("{ports}?"),
                creates: cfg.watch_creates,
                rate: cfg.watch_rate as f64,
                make: move |i| port(&s2, "nw-", i),
                wants: |w, i| w % NODES == i % NODES,
                // The server names a Port after its address claim, not after generateName.
                prefix: "",
            },
        )
        .await;
        objects += cfg.watch_creates;
        print_fan_out(
            who,
            &format!("{} node-filtered Port watchers", cfg.node_watchers),
            &f,
        );
        Some(f)
    } else {
        None
    };
    // Memory: the listed collection filled up to `stored` objects.
    let mem = if cfg.runs("memory") {
        let fill = cfg.stored.saturating_sub(in_bench);
        let s2 = s.clone();
        let st = run(&c, fill, 201, move |i| {
            (
                "POST",
                s2.plain_path("bench"),
                Some(s2.plain(&format!("m-{i:06}"), 300_000 + i)),
            )
        })
        .await;
        println!(
            "{who}: filled {fill} more at {:.0}/s, {} errors",
            st.rate(),
            st.errors
        );
        objects += fill;
        let mem = memory(&s, &c, objects, &path).await;
        println!(
            "{who}: {objects} objects stored, RSS {:.0} MiB ({:.1} KiB per object); full LIST of {} items ({:.0} MiB) in {:.2} s, peak RSS {:.0} MiB",
            mem.rss_kib as f64 / 1024.0,
            mem.rss_kib as f64 / objects as f64,
            mem.list_items,
            mem.list_bytes as f64 / (1 << 20) as f64,
            mem.list_time.as_secs_f64(),
            mem.peak_kib as f64 / 1024.0
        );
        Some(mem)
    } else {
        None
    };
    Outcome {
        plain,
        settled,
        port: port_c,
        vpc: vpc_c,
        get,
        consistent,
        rv0,
        paged,
        watch,
        node_watch,
        mem,
    }
}

fn print_fan_out(who: &str, what: &str, f: &FanOut) {
    println!(
        "{who}: {what}: {} of {} events delivered, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms, {} before the create's response; creates {:.1}/s, {} create errors, {} watches refused",
        f.delivered,
        f.expected,
        f.hist.value_at_quantile(0.5) as f64 / 1000.0,
        f.p99_ms(),
        f.hist.max() as f64 / 1000.0,
        f.early,
        f.create_rate,
        f.create_errors,
        f.refused
    );
}

fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|m| m.trim_start_matches([' ', '\t', ':']).to_string())
        .unwrap_or_default();
    let mem_kib: u64 = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    format!(
        "{} × {cpu}, {:.1} GiB RAM, load average at start {}",
        std::thread::available_parallelism().map_or(0, usize::from),
        mem_kib as f64 / (1 << 20) as f64,
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
    )
}

#[tokio::main]
async fn main() {
    // `cargo bench` passes `--bench`; ignore arguments.
    let cfg = Config::from_env();
    let peers = std::env::var("BENCH_PEERS").unwrap_or_else(|_| "go,ours".into());
    let ours_bin = peers.contains("ours").then(cozyplane_conformance::server_binary);
    let go_bin = if peers.contains("go") {
        match cozyplane_conformance::realkube::sample_apiserver() {
            Ok(b) => Some(b),
            Err(why) => {
                go_not_run(&why);
                None
            }
        }
    } else {
        None
    };
    println!("machine: {}", machine());
    let started = Instant::now();
    let mut go = Vec::new();
    let mut ours = Vec::new();
    for round in 0..cfg.rounds {
        let mut order = vec![Peer::Go, Peer::Ours];
        if round % 2 == 1 {
            order.reverse();
        }
        for peer in order {
            let t = Instant::now();
            let s = match (peer, &go_bin, &ours_bin) {
                (Peer::Go, Some(b), _) => Server::start_go(b).await,
                (Peer::Ours, _, Some(b)) => Server::start_ours(b).await,
                _ => continue,
            };
            println!("--- round {} of {}: {} ---", round + 1, cfg.rounds, peer.label());
            let o = measure(Arc::new(s), &cfg).await;
            println!("({} took {:.0} s)", peer.label(), t.elapsed().as_secs_f64());
            match peer {
                Peer::Go => go.push(o),
                Peer::Ours => ours.push(o),
            }
        }
    }
    println!(
        "\n{}\n(run took {:.0} s)\n",
        report::table(&cfg, &go, &ours),
        started.elapsed().as_secs_f64()
    );
    if go_bin.is_none() && peers.contains("go") {
        go_not_run("see above");
    }
    if let Ok(backends) = std::env::var("BENCH_SOLO") {
        solo::report(&backends).await;
    }
}

/// The Go side cannot run: as loud as the real-control-plane tier's banner.
fn go_not_run(why: &str) {
    let msg = format!(
        "THE GO SIDE OF THE API SERVER BENCH DID NOT RUN: {why}\n(looked for sample-apiserver.xz in {}: set KUBE_BIN_DIR; default <repo>/../shared/kube). Only our server's figures are printed.",
        cozyplane_conformance::realkube::bin_dir().display()
    );
    assert!(!cozyplane_conformance::realkube::required(), "{msg}");
    let bar = "!".repeat(100);
    eprintln!("\n{bar}\n{msg}\n{bar}\n");
}
