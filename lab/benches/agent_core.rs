//! Two (or more) builds of the agent and the CNI plugin side by side, in one run, on the netns
//! lab: the proof that a change meant to cost nothing (e.g. moving the agent's modules around)
//! costs nothing. Needs root. Each build is a directory holding release `cozyplane-agent` and
//! `cozyplane-cni` binaries (and optionally a `COMMIT` file, printed):
//!
//! ```text
//! COMPARE='before=/work/before-bin,after=/work/after-bin'
//! COZYPLANE_BENCH_BUILDS=$COMPARE COZYPLANE_BENCH_ROUNDS=3 cargo bench -p cozyplane-lab --bench agent_core
//! ```
//!
//! Without `COZYPLANE_BENCH_BUILDS` the one build next to this bench (`target/release`) runs.
//! `COZYPLANE_BENCH_ROUNDS` (default 3): each round runs every build once, the order
//! alternating (A, B, then B, A, …) so that drift hits every build alike. Every run has a lab
//! of its own: fresh namespaces, bpffs mount, state directory, kube stand-in and
//! cozyplane-apiserver (in process, as `datapath.rs` runs them), one node `n1` running the
//! build's agent and plugin (`Lab::with_bins`: the kit's flags, the chart's installer). Per run:
//!
//! * **start-up**: from spawning the agent to the first `STATUS` answered through the
//!   build's plugin (which asks the agent over its socket), and the `elapsed_ms` of the agent's
//!   own `agent ready` log line;
//! * **RSS at rest**: `VmRSS` and `VmHWM` of the agent 10 s after it answered, no pods;
//! * **50 pods at once**: the Pod objects made first and the sandboxes prepared, then 50
//!   `cozyplane-cni ADD`s started at a barrier, each from a thread that stands for kubelet in
//!   the node (as `datapath.rs`'s `net0-par` run; kubelet's status patch follows each ADD);
//!   the wall time of each ADD, p50/p99/max; `VmRSS` again after 5 s of quiet; then every pod
//!   is deleted (DEL).
//!
//! Figures are printed, never asserted. Every process is stopped by PID and every namespace and
//! mount removed by the lab kit's guards, also when a run panics.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use cozyplane_conformance::standin::{Options, StandIn};
use cozyplane_conformance::{Backend, TestServer};
use cozyplane_lab::kubelet::PodApi;
use cozyplane_lab::stats::{cpu_ms, median, ms, pct};
use cozyplane_lab::{Lab, Netns, Node, exec_plugin, invoke_cni, result_ip, run_in, sh};
use serde_json::json;

/// Pods ADDed at once.
const PODS: usize = 50;
/// Rest after the agent answered, before its memory is read.
const REST: Duration = Duration::from_secs(10);
/// Quiet after the pods were wired, before its memory is read again.
const QUIET: Duration = Duration::from_secs(5);
/// What kubelet waits between seeing a pod bound and calling CNI (`datapath.rs`'s head start).
const HEAD_START: Duration = Duration::from_millis(500);

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    cozyplane_lab::require_root();
    let builds = builds();
    let rounds: usize = std::env::var("COZYPLANE_BENCH_ROUNDS")
        .ok()
        .map(|r| r.trim().parse().expect("COZYPLANE_BENCH_ROUNDS: a number"))
        .unwrap_or(3)
        .max(1);
    machine(&builds);
    // Page cache: no build's first run pays for reading its binaries from disk.
    for b in &builds {
        for bin in ["cozyplane-agent", "cozyplane-cni"] {
            let _ = std::fs::read(b.dir.join(bin));
        }
    }
    println!(
        "\n{rounds} rounds x {} builds; one node, a fresh lab per run; {PODS} pods ADDed at once",
        builds.len()
    );
    let mut runs: Vec<Run> = Vec::new();
    for round in 1..=rounds {
        let mut order: Vec<usize> = (0..builds.len()).collect();
        if round % 2 == 0 {
            order.reverse();
        }
        for b in order {
            let t = Instant::now();
            let m = run(&builds[b]);
            println!(
                "round {round} {}: to socket {:.1} ms, ready elapsed_ms {}, RSS {:.1}/{:.1} MiB, ADD p99 {:.1} ms ({:.0} s, load {:.2} at start)",
                builds[b].name,
                m.startup,
                m.ready_ms.map_or("?".into(), |v| v.to_string()),
                m.rss_rest,
                m.rss_pods,
                pct(&m.add, 0.99),
                t.elapsed().as_secs_f64(),
                m.load
            );
            runs.push(Run { build: b, round, m });
        }
    }
    report(&builds, &runs);
}

/// One build under comparison.
struct Build {
    name: String,
    dir: PathBuf,
}

/// `COZYPLANE_BENCH_BUILDS="name=dir,name=dir"`, else `target/<profile>` alone.
fn builds() -> Vec<Build> {
    let builds: Vec<Build> = match std::env::var("COZYPLANE_BENCH_BUILDS") {
        Ok(spec) if !spec.trim().is_empty() => spec
            .split(',')
            .filter(|s| !s.trim().is_empty())
            .map(|s| {
                let (name, dir) = s.split_once('=').unwrap_or_else(|| {
                    panic!("COZYPLANE_BENCH_BUILDS: {s:?} is not name=dir (e.g. before=/work/before-bin)")
                });
                Build {
                    name: name.trim().into(),
                    dir: dir.trim().into(),
                }
            })
            .collect(),
        _ => {
            println!(
                "COZYPLANE_BENCH_BUILDS is not set (e.g. \"before=/dir/a,after=/dir/b\"): running target/release alone"
            );
            vec![Build {
                name: "target".into(),
                dir: cozyplane_lab::bin_dir(),
            }]
        }
    };
    assert!(!builds.is_empty(), "COZYPLANE_BENCH_BUILDS names no build");
    for b in &builds {
        for bin in ["cozyplane-agent", "cozyplane-cni"] {
            assert!(
                b.dir.join(bin).is_file(),
                "build {}: {} missing",
                b.name,
                b.dir.join(bin).display()
            );
        }
    }
    builds
}

/// Prints the machine, the repository's commit and each build's identity.
fn machine(builds: &[Build]) {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map_or("?", |(_, m)| m.trim());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let nproc = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    println!("# agent core: builds side by side\n");
    println!("machine: {nproc} CPUs, {model}, kernel {}", kernel.trim());
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let git = |args: &[&str]| {
        Command::new("git")
            .arg("-C")
            .arg(&repo)
            .arg("--no-optional-locks")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
    };
    let head = git(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "?".into());
    let changed = git(&["status", "--porcelain"]).map_or(0, |s| s.lines().count());
    println!(
        "repository: HEAD {} ({changed} paths changed in the working tree)",
        head.trim()
    );
    for b in builds {
        let commit = std::fs::read_to_string(b.dir.join("COMMIT"))
            .map_or_else(|_| "(no COMMIT file)".into(), |c| c.trim().to_string());
        println!("build {} = {}: COMMIT {commit}", b.name, b.dir.display());
        for bin in ["cozyplane-agent", "cozyplane-cni"] {
            let path = b.dir.join(bin);
            let size = std::fs::metadata(&path).map_or(0, |m| m.len());
            let sum = sh(&["sha256sum", path.to_str().unwrap_or_default()]);
            let sum = String::from_utf8_lossy(&sum.stdout);
            println!(
                "  {bin}: {size} bytes, sha256 {}",
                sum.split_whitespace().next().unwrap_or("?")
            );
        }
    }
}

/// What one run of one build measured.
struct Measured {
    /// Spawn to the socket file, ms.
    socket_file: f64,
    /// Spawn to the first STATUS answered, ms.
    startup: f64,
    /// `elapsed_ms` of the agent's `agent ready` line.
    ready_ms: Option<u64>,
    /// Agent CPU time (user + system) when it answered, ms.
    cpu_ready: f64,
    rss_rest: f64,
    hwm_rest: f64,
    /// `RssAnon` and `RssFile` at rest: the heap and stacks, and the binary's pages in
    /// memory (shared and reclaimable).
    anon_rest: f64,
    file_rest: f64,
    rss_pods: f64,
    hwm_pods: f64,
    /// Agent CPU time over the 50 ADDs, ms.
    cpu_adds: f64,
    /// Wall time of each ADD, ms.
    add: Vec<f64>,
    /// The machine's 1-minute load average when the run began (other work on the machine
    /// shows here).
    load: f64,
}

struct Run {
    build: usize,
    round: usize,
    m: Measured,
}

/// One run of `build` on a lab of its own, torn down before it returns.
fn run(build: &Build) -> Measured {
    let load = loadavg();
    let lab = Lab::with_bins(1, &build.dir);
    let ctl = Netns(lab.ctl.0.clone());
    let m = run_in(&ctl, || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let (standin, server) = rt.block_on(async {
            (
                StandIn::start(Options::default()).await,
                TestServer::start(Backend::Embedded).await,
            )
        });
        lab.expose_url(&standin.url);
        lab.expose_url(&server.url);
        let kube_kc = standin.admin_kubeconfig();
        let kube = rt.block_on(async {
            kube::Client::try_from(
                kube::Config::from_custom_kubeconfig(
                    kube::config::Kubeconfig::read_from(&kube_kc).expect("kubeconfig"),
                    &Default::default(),
                )
                .await
                .expect("config"),
            )
            .expect("client")
        });
        let cp = PodApi::new(kube, rt.handle().clone());
        rt.block_on(lab.nodes[0].register(&cp.kube));
        let m = measure(&cp, &lab, (&kube_kc, &server.kubeconfig), load);
        lab.nodes[0].stop_agent();
        drop(cp);
        drop(standin);
        drop(server);
        m
    });
    std::mem::forget(ctl); // the Lab owns the namespace
    drop(lab);
    m
}

fn measure(cp: &PodApi, lab: &Lab, (kube, sdn): (&Path, &Path), load: f64) -> Measured {
    let node = &lab.nodes[0];
    // STATUS needs cniVersion 1.1.0; the chart's conflist says 1.0.0, enough for ADD and DEL.
    let mut status_conf = node.conf();
    status_conf["cniVersion"] = json!("1.1.0");
    let go = std::sync::Barrier::new(2);
    let (t0, pid, (socket_at, ready_at)) = std::thread::scope(|s| {
        // Stands for kubelet asking the plugin STATUS: in the node for good, then spent.
        let poller = s.spawn(|| {
            node.enter();
            go.wait();
            let t = Instant::now();
            let sock = node.scratch.socket();
            while !sock.exists() {
                assert!(
                    t.elapsed() < Duration::from_secs(30),
                    "no agent socket after 30 s"
                );
                assert!(!exited(node), "the agent exited before it made its socket");
                std::thread::sleep(Duration::from_micros(500));
            }
            let socket_at = Instant::now();
            loop {
                let (code, out) = exec_plugin(node, "STATUS", "status", ("", ("", "", "")), &status_conf);
                if code == 0 {
                    return (socket_at, Instant::now());
                }
                assert!(
                    t.elapsed() < Duration::from_secs(30),
                    "STATUS unanswered after 30 s: {out}"
                );
                assert!(!exited(node), "the agent exited before it answered STATUS: {out}");
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        go.wait();
        let t0 = Instant::now();
        node.start_agent(kube, sdn);
        let pid = node.agent_pid().expect("the agent runs");
        let got = poller.join().unwrap_or_else(|e| std::panic::resume_unwind(e));
        (t0, pid, got)
    });
    let cpu_ready = cpu_ms(pid);
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    assert_eq!(comm.trim(), "cozyplane-agent", "PID {pid} is not the agent");
    let ready_ms = ready_elapsed(node);
    std::thread::sleep(REST.saturating_sub(ready_at.elapsed()));
    let (rss_rest, hwm_rest, anon_rest, file_rest) = memory(pid);

    // 50 pods at once, as datapath.rs's net0-par run: Pod objects first, ADDs 500 ms later.
    let names: Vec<(String, String)> = (0..PODS)
        .map(|i| {
            let name = format!("p-{i}");
            let uid = cp.create_pod(node, "default", &name, None);
            (name, uid)
        })
        .collect();
    let created = Instant::now();
    let sandboxes: Vec<Netns> = names.iter().map(|_| Netns::new("b")).collect();
    std::thread::sleep(HEAD_START.saturating_sub(created.elapsed()));
    let conf = node.conf();
    let go = std::sync::Barrier::new(PODS + 1);
    let cpu_before = cpu_ms(pid);
    let wired: Vec<(String, String, Netns, f64)> = std::thread::scope(|s| {
        let hs: Vec<_> = names
            .iter()
            .zip(sandboxes)
            .map(|((name, uid), netns)| {
                let (go, conf) = (&go, &conf);
                s.spawn(move || {
                    let cid = format!("default-{name}");
                    node.enter();
                    go.wait();
                    let t = Instant::now();
                    let (code, result) =
                        exec_plugin(node, "ADD", &cid, (&netns.path(), ("default", name, uid)), conf);
                    let add = ms(t.elapsed());
                    assert_eq!(code, 0, "ADD default/{name}: {result}");
                    let ip = result_ip(&result).expect("result ip");
                    cp.h.block_on(cp.patch_status(node, "default", name, ip))
                        .expect("status patch task");
                    (name.clone(), uid.clone(), netns, add)
                })
            })
            .collect();
        go.wait();
        hs.into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    let cpu_adds = cpu_ms(pid) - cpu_before;
    std::thread::sleep(QUIET);
    let (rss_pods, hwm_pods, _, _) = memory(pid);
    // DEL every pod, a few kubelet threads at a time.
    std::thread::scope(|s| {
        for part in wired.chunks(wired.len().div_ceil(4).max(1)) {
            s.spawn(move || {
                for (name, uid, netns, _) in part {
                    let cid = format!("default-{name}");
                    let (code, out) = invoke_cni(
                        node,
                        "DEL",
                        &cid,
                        &netns.path(),
                        ("default", name, uid),
                        &node.conf(),
                    );
                    assert_eq!(code, 0, "DEL default/{name}: {out}");
                }
            });
        }
    });
    Measured {
        socket_file: ms(socket_at.saturating_duration_since(t0)),
        startup: ms(ready_at.saturating_duration_since(t0)),
        ready_ms,
        cpu_ready,
        rss_rest,
        hwm_rest,
        anon_rest,
        file_rest,
        rss_pods,
        hwm_pods,
        cpu_adds,
        add: wired.iter().map(|w| w.3).collect(),
        load,
    }
}

/// Whether the node's agent process has exited (a zombie: its guard reaps it, so its PID
/// cannot be reused meanwhile).
fn exited(node: &Node) -> bool {
    let Some(pid) = node.agent.lock().expect("agent lock").as_ref().map(|p| p.0.id()) else {
        return false;
    };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, r)| r.split_whitespace().next());
    matches!(state, Some("Z" | "X") | None)
}

/// `elapsed_ms` of the agent's `agent ready` line (written before it serves, so present by
/// the time STATUS was answered; waited for up to 5 s all the same).
fn ready_elapsed(node: &Node) -> Option<u64> {
    let t = Instant::now();
    loop {
        let log = node.log_text();
        let line = log.lines().find(|l| l.contains("agent ready"));
        if let Some(line) = line {
            return line
                .split_whitespace()
                .find_map(|w| w.strip_prefix("elapsed_ms="))
                .and_then(|v| v.parse().ok());
        }
        if t.elapsed() > Duration::from_secs(5) {
            println!("no `agent ready` line in the agent's log:\n{log}");
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The 1-minute load average.
fn loadavg() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

/// `VmRSS`, `VmHWM`, `RssAnon`, `RssFile` of `pid`, MiB.
fn memory(pid: u32) -> (f64, f64, f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("agent {pid} gone: {e}"));
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("{key} of {pid}"))
    };
    let mib = |key: &str| kib(key) / 1024.0;
    (mib("VmRSS:"), mib("VmHWM:"), mib("RssAnon:"), mib("RssFile:"))
}

/// The columns of the main table, per run.
fn columns(m: &Measured) -> [f64; 8] {
    [
        m.startup,
        m.ready_ms.map_or(f64::NAN, |v| v as f64),
        m.rss_rest,
        m.hwm_rest,
        m.rss_pods,
        pct(&m.add, 0.5),
        pct(&m.add, 0.99),
        pct(&m.add, 1.0),
    ]
}

/// The columns of the detail table, per run.
fn details(m: &Measured) -> [f64; 8] {
    [
        m.socket_file,
        m.anon_rest,
        m.file_rest,
        m.cpu_ready,
        m.hwm_pods,
        m.cpu_adds,
        m.add.len() as f64,
        m.load,
    ]
}

fn cells(v: &[f64]) -> String {
    v.iter().map(|x| format!(" {x:.1} |")).collect()
}

fn ratios(a: &[f64], base: &[f64]) -> String {
    a.iter()
        .zip(base)
        .map(|(a, b)| format!(" {:.3} |", a / b))
        .collect()
}

fn report(builds: &[Build], runs: &[Run]) {
    let medians = |b: usize, f: &dyn Fn(&Measured) -> Vec<f64>| -> Vec<f64> {
        let rows: Vec<Vec<f64>> = runs.iter().filter(|r| r.build == b).map(|r| f(&r.m)).collect();
        let n = rows.first().map_or(0, Vec::len);
        (0..n)
            .map(|i| median(&rows.iter().map(|r| r[i]).collect::<Vec<_>>()))
            .collect()
    };
    let main = |m: &Measured| columns(m).to_vec();
    let extra = |m: &Measured| details(m).to_vec();
    println!(
        "\n| build | round | start-up ms (to socket) | agent ready elapsed_ms | RSS at rest MiB | HWM MiB | RSS with 50 pods MiB | ADD p50 ms | ADD p99 ms | ADD max ms |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for r in runs {
        println!("| {} | {} |{}", builds[r.build].name, r.round, cells(&main(&r.m)));
    }
    let base = medians(0, &main);
    for (b, build) in builds.iter().enumerate() {
        println!("| **{}** | median |{}", build.name, cells(&medians(b, &main)));
    }
    for (b, build) in builds.iter().enumerate().skip(1) {
        println!(
            "| **{} / {}** | ratio |{}",
            build.name,
            builds[0].name,
            ratios(&medians(b, &main), &base)
        );
    }
    println!(
        "\nstart-up: spawn to the first STATUS answered through the build's plugin; RSS/HWM: VmRSS/VmHWM of the agent {} s after that (no pods) and {} s after the {PODS} ADDs returned; ADD: wall time of each of {PODS} ADDs started at a barrier (p99 by nearest rank, as datapath.rs: of {PODS} samples it is the largest).",
        REST.as_secs(),
        QUIET.as_secs()
    );
    println!(
        "\n| build | round | socket file ms | RssAnon at rest MiB | RssFile at rest MiB | agent CPU ms to ready | HWM with 50 pods MiB | agent CPU ms for 50 ADDs | ADDs | load avg at start |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for r in runs {
        println!(
            "| {} | {} |{}",
            builds[r.build].name,
            r.round,
            cells(&extra(&r.m))
        );
    }
    let base = medians(0, &extra);
    for (b, build) in builds.iter().enumerate() {
        println!("| **{}** | median |{}", build.name, cells(&medians(b, &extra)));
    }
    for (b, build) in builds.iter().enumerate().skip(1) {
        println!(
            "| **{} / {}** | ratio |{}",
            build.name,
            builds[0].name,
            ratios(&medians(b, &extra), &base)
        );
    }
    println!(
        "\n(agent CPU time from /proc/<pid>/stat in 10 ms clock ticks; load average 1 min at the start of each run: other work on the machine, e.g. a compiler, shows there and inflates that run)"
    );
}
