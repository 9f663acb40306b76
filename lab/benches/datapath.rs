//! Datapath benchmarks on the netns lab (issue 7). Needs root and the RELEASE agent and CNI:
//!
//! ```text
//! cargo build --release -p cozyplane-agent && cargo build --release --manifest-path cni/bin/Cargo.toml
//! cargo bench -p cozyplane-lab
//! ```
//!
//! * **Pod network-ready latency**, net 0 and VPC, 200 sequential and 50 concurrent pods:
//!   *ADD* is the wall time of the real `cozyplane-cni ADD` as kubelet runs it; *first packet*
//!   is the time from the start of ADD until a UDP echo sent from inside the new pod comes
//!   back from a pod on the same node, and from a pod on the other node (for VPC pods the
//!   latter includes the control plane: the Port watch on the other node; net 0 needs none,
//!   the other node routes this node's whole block). The
//!   probe sends one datagram per destination every millisecond. Sandboxes exist before a
//!   run; concurrent ADDs start at a barrier. Each run also reports the machine's CPU time per
//!   pod, split by process: with more pods in flight than cores, it is a floor under p99.
//! * **TCP throughput** (iperf3, 5 s after 1 s omitted, inside the pod netns): cross-node
//!   VPC and net-0 pods against two namespaces wired with plain kernel routing (no programs)
//!   between the same node namespaces, over a collect-metadata VXLAN device like ours (the
//!   limit: the same kind of device) and over a fixed-remote VXLAN device; same-node pods
//!   against the reference `bridge` CNI plugin with `host-local` IPAM. All pods use the MTU
//!   our CNI gives pods. Cross-node pods of two peered VPCs (issue 11) run beside same-VPC ones.
//!
//! Figures are printed, never asserted. Results go to `docs/benchmarks.md`.

use std::fs::File;
use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cozyplane_apis::v1alpha1::{VPC, VPCBinding, VPCPeering};
use cozyplane_conformance::standin::{Options, StandIn};
use cozyplane_conformance::{Backend, TestServer};
use cozyplane_lab::kubelet::PodApi;
use cozyplane_lab::{Lab, Netns, bin_dir, enter, exec_plugin, invoke_cni, result_ip, run_in};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

const ECHO_PORT: u16 = 7777;
const SEQUENTIAL: usize = 200;
const CONCURRENT: usize = 50;

/// Throughput rounds per path.
const ROUNDS: usize = 5;

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    cozyplane_lab::require_root();
    let _ = bin_dir(); // fails early with a hint if the release binaries are missing
    let lab = Lab::new(2);
    let ctl = Netns(lab.ctl.0.clone());
    run_in(&ctl, || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let h = rt.handle().clone();
        let (standin, server, kube_kc, sdn_kc) = rt.block_on(async {
            let standin = StandIn::start(Options::default()).await;
            let server = TestServer::start(Backend::Embedded).await;
            let kc = standin.admin_kubeconfig();
            let sdn = server.kubeconfig.clone();
            (standin, server, kc, sdn)
        });
        lab.expose_url(&standin.url);
        lab.expose_url(&server.url);
        let cp = rt.block_on(async {
            let kube = kube::Client::try_from(
                kube::Config::from_custom_kubeconfig(
                    kube::config::Kubeconfig::read_from(&kube_kc).expect("kubeconfig"),
                    &Default::default(),
                )
                .await
                .expect("config"),
            )
            .expect("client");
            Cp {
                pods: PodApi::new(kube.clone(), h.clone()),
                kube,
                sdn: server.client().await,
                h: h.clone(),
            }
        });
        for n in &lab.nodes {
            rt.block_on(n.register(&cp.kube));
            n.start_agent(&kube_kc, &sdn_kc);
        }
        body(&cp, &lab);
        drop(standin);
        drop(server);
    });
    std::mem::forget(ctl); // the Lab owns the namespace
}

struct Cp {
    kube: kube::Client,
    sdn: kube::Client,
    h: tokio::runtime::Handle,
    /// kubelet's calls: the Pod objects and their status.
    pods: PodApi,
}

impl Cp {
    fn block<F: Future>(&self, f: F) -> F::Output {
        self.h.block_on(f)
    }

    /// Waits (up to 10 s) until the pods `names` carry their VPC address stamp: how many do,
    /// and when the last one was seen stamped, from `since`.
    fn wait_stamped<'a>(
        &self,
        ns: &str,
        names: impl Iterator<Item = &'a str>,
        since: Instant,
    ) -> (usize, Duration) {
        let want: std::collections::BTreeSet<&str> = names.collect();
        let pods = Api::<Pod>::namespaced(self.kube.clone(), ns);
        loop {
            let list = self.block(pods.list(&Default::default())).expect("list pods");
            let stamped = list
                .items
                .iter()
                .filter(|p| p.metadata.name.as_deref().is_some_and(|n| want.contains(n)))
                .filter(|p| {
                    p.metadata
                        .annotations
                        .as_ref()
                        .is_some_and(|a| a.contains_key("sdn.cozystack.io/vpc-ip"))
                })
                .count();
            if stamped == want.len() || since.elapsed() > Duration::from_secs(10) {
                return (stamped, since.elapsed());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn vpc_ip(&self, ns: &str, name: &str) -> Ipv4Addr {
        let pod = self
            .block(Api::<Pod>::namespaced(self.kube.clone(), ns).get(name))
            .expect("get pod");
        let ann = pod.metadata.annotations.unwrap_or_default();
        ann["sdn.cozystack.io/vpc-ip"].parse().expect("vpc-ip annotation")
    }

    fn tenant(&self, ns: &str, vpc: &str, cidr: &str) {
        self.block(async {
            let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(self.kube.clone());
            nss.create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": ns}})).expect("ns"),
            )
            .await
            .expect("create namespace");
            let v: VPC = serde_json::from_value(json!({"apiVersion": "sdn.cozystack.io/v1alpha1",
                "kind": "VPC", "metadata": {"name": vpc, "namespace": ns}, "spec": {"cidrs": [cidr]}}))
            .expect("vpc");
            Api::<VPC>::namespaced(self.sdn.clone(), ns)
                .create(&PostParams::default(), &v)
                .await
                .expect("create VPC");
            let b: VPCBinding = serde_json::from_value(json!({"apiVersion": "sdn.cozystack.io/v1alpha1",
                "kind": "VPCBinding", "metadata": {"name": vpc, "namespace": ns},
                "spec": {"vpcRef": {"namespace": ns, "name": vpc}}}))
            .expect("binding");
            Api::<VPCBinding>::namespaced(self.sdn.clone(), ns)
                .create(&PostParams::default(), &b)
                .await
                .expect("create VPCBinding");
        });
    }
}

impl Cp {
    /// Both halves of a peering between `a` and `b` (`(namespace, vpc)` each).
    fn peer(&self, a: (&str, &str), b: (&str, &str)) {
        for ((ns, vpc), (peer_ns, peer)) in [(a, b), (b, a)] {
            let p: VPCPeering = serde_json::from_value(json!({"apiVersion": "sdn.cozystack.io/v1alpha1",
                "kind": "VPCPeering", "metadata": {"name": format!("{vpc}-to-{peer}"), "namespace": ns},
                "spec": {"vpcRef": {"name": vpc}, "peerRef": {"namespace": peer_ns, "name": peer}}}))
            .expect("peering");
            self.block(
                Api::<VPCPeering>::namespaced(self.sdn.clone(), ns).create(&PostParams::default(), &p),
            )
            .expect("create VPCPeering");
        }
    }
}

/// A wired pod of ours.
struct BPod {
    node: usize,
    ns_name: String,
    name: String,
    uid: String,
    cid: String,
    fabric: Ipv4Addr,
    netns: Netns,
}

impl BPod {
    fn del(&self, lab: &Lab) {
        let n = &lab.nodes[self.node];
        let _ = invoke_cni(
            n,
            "DEL",
            &self.cid,
            &self.netns.path(),
            (&self.ns_name, &self.name, &self.uid),
            &n.conf(),
        );
    }
}

/// Runs `f` on a fresh thread that entered `netns` (the thread is discarded).
fn in_ns<R: Send + 'static>(netns: &str, f: impl FnOnce() -> R + Send + 'static) -> R {
    let file = File::open(netns).expect("open netns");
    std::thread::spawn(move || {
        nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
        f()
    })
    .join()
    .expect("netns thread")
}

/// A UDP echo server inside `netns`, for the life of the process.
fn echo_server(netns: &str) {
    let file = File::open(netns).expect("open netns");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
        let s = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, ECHO_PORT)).expect("bind echo");
        tx.send(()).expect("ready");
        let mut buf = [0u8; 64];
        while let Ok((n, from)) = s.recv_from(&mut buf) {
            let _ = s.send_to(&buf[..n], from);
        }
    });
    rx.recv().expect("echo server");
}

/// [`probe_here`] from inside `netns`, on a thread of its own.
fn probe(netns: &str, peers: Vec<Ipv4Addr>, t0: Instant) -> Vec<Option<Duration>> {
    in_ns(netns, move || probe_here(&peers, t0))
}

/// From the calling thread's netns: one datagram per destination per millisecond until each
/// echoed. Returns the time from `t0` to the first echo of each destination (None: 10 s passed).
fn probe_here(peers: &[Ipv4Addr], t0: Instant) -> Vec<Option<Duration>> {
    let s = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).expect("bind probe");
    s.set_read_timeout(Some(Duration::from_millis(1)))
        .expect("timeout");
    let mut got: Vec<Option<Duration>> = vec![None; peers.len()];
    let mut buf = [0u8; 64];
    while got.iter().any(Option::is_none) && t0.elapsed() < Duration::from_secs(10) {
        for (i, p) in peers.iter().enumerate() {
            if got[i].is_none() {
                let _ = s.send_to(&[u8::try_from(i).unwrap_or(0)], SocketAddr::from((*p, ECHO_PORT)));
            }
        }
        while let Ok((n, _)) = s.recv_from(&mut buf) {
            if let Some(slot) = got.get_mut(usize::from(buf[0])).filter(|_| n > 0) {
                slot.get_or_insert_with(|| t0.elapsed());
            }
        }
    }
    got
}

/// Runs on a thread of its own that stands for the node's kubelet: it enters the node's
/// netns, execs the plugin from there as kubelet does, then moves into the pod's netns to probe
/// (so the thread is spent). The pod object and its sandbox netns must already exist (the
/// runtime makes the netns before it calls CNI). ADD (timed), then kubelet's status patch
/// alongside the probe. `ready` runs once the thread is in place, before the ADD, and gives
/// the Pod's uid.
fn wire(
    (cp, lab, ready): (&Cp, &Lab, impl FnOnce() -> String),
    (node, netns): (usize, Netns),
    (ns, name): (&str, &str),
    peers: &[Ipv4Addr],
) -> (BPod, Sample) {
    let cid = format!("{ns}-{name}");
    let n = &lab.nodes[node];
    let conf = n.conf();
    n.enter();
    let uid = ready();
    let t0 = Instant::now();
    let (code, result) = exec_plugin(n, "ADD", &cid, (&netns.path(), (ns, name, &uid)), &conf);
    let add = t0.elapsed();
    assert_eq!(code, 0, "ADD {ns}/{name}: {result}");
    let fabric = result_ip(&result).expect("result ip");
    let status = cp.pods.patch_status(n, ns, name, fabric);
    enter(&netns);
    let first = probe_here(peers, t0);
    cp.block(status).expect("status patch task");
    let pod = BPod {
        node,
        ns_name: ns.into(),
        name: name.into(),
        uid,
        cid,
        fabric,
        netns,
    };
    (pod, Sample { add, first })
}

struct Sample {
    add: Duration,
    first: Vec<Option<Duration>>,
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let i = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    v[i]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// One latency run: `count` pods, `par` at a time; prints a table row per measure.
///
/// With `head_start`, the ADDs begin 500 ms after the Pod objects were created, standing for
/// the time kubelet takes from seeing a pod bound to its node to calling CNI (the sandbox):
/// the agent's pod cache has the pods by then and, for VPC pods, the Ports are made ahead
/// (the run reports when the last pod was stamped). Without it, ADD follows the create at
/// once: the Port is made on the ADD path, raced by the watch.
fn latency(
    cp: &Cp,
    lab: &Lab,
    label: &str,
    (ns, vpc): (&str, Option<&str>),
    peers: &[Ipv4Addr],
    (count, par, head_start): (usize, usize, bool),
) {
    let first_created = Instant::now();
    // Without a head start each kubelet thread creates its Pod after the barrier and calls ADD
    // the moment the create returns.
    let names: Vec<(String, Option<String>)> = (0..count)
        .map(|i| {
            let name = format!("{label}-{i}");
            let uid = head_start.then(|| cp.pods.create_pod(&lab.nodes[0], ns, &name, vpc));
            (name, uid)
        })
        .collect();
    if head_start {
        let last_created = Instant::now();
        if vpc.is_some() {
            let (stamped, after) = cp.wait_stamped(ns, names.iter().map(|(n, _)| n.as_str()), first_created);
            println!(
                "|   | (Ports made ahead: {stamped} of {count} pods stamped {:.0} ms after the first of their Pods was created; ADD begins 500 ms after the last) | | | | | |",
                ms(after)
            );
        }
        std::thread::sleep(Duration::from_millis(500).saturating_sub(last_created.elapsed()));
    }
    let log_from = lab.nodes[0].log_text().len();
    let mut wall = Duration::ZERO;
    let mut cpu = CpuTime::default();
    let mut out: Vec<(BPod, Sample)> = Vec::new();
    for chunk in names.chunks(par) {
        let sandboxes: Vec<Netns> = chunk.iter().map(|_| Netns::new("b")).collect();
        let go = std::sync::Barrier::new(chunk.len() + 1);
        let got: Vec<(BPod, Sample)> = std::thread::scope(|s| {
            let hs: Vec<_> = chunk
                .iter()
                .zip(sandboxes)
                .map(|((name, uid), netns)| {
                    let go = &go;
                    s.spawn(move || {
                        wire(
                            (cp, lab, || {
                                go.wait();
                                uid.clone()
                                    .unwrap_or_else(|| cp.pods.create_pod(&lab.nodes[0], ns, name, vpc))
                            }),
                            (0, netns),
                            (ns, name),
                            peers,
                        )
                    })
                })
                .collect();
            let profile = Profile::start(label);
            let before = CpuTime::now(lab);
            let started = Instant::now();
            go.wait();
            let got = hs.into_iter().map(|h| h.join().expect("wire")).collect();
            wall += started.elapsed();
            cpu += CpuTime::now(lab) - before;
            drop(profile);
            got
        });
        out.extend(got);
    }
    let mut add: Vec<f64> = out.iter().map(|(_, s)| ms(s.add)).collect();
    let row = |what: &str, v: &mut Vec<f64>, lost: usize| {
        println!(
            "| {label} | {what} | {} | {:.1} | {:.1} | {:.1} | {lost} |",
            v.len(),
            pct(v, 0.5),
            pct(v, 0.99),
            pct(v, 1.0),
        );
    };
    row("ADD returns", &mut add, 0);
    for (i, what) in ["first packet, same-node peer", "first packet, cross-node peer"]
        .iter()
        .enumerate()
    {
        let mut v: Vec<f64> = out.iter().filter_map(|(_, s)| s.first[i].map(ms)).collect();
        let lost = count - v.len();
        row(what, &mut v, lost);
    }
    // The machine's busy time over the run, all processes and the kernel: with `par` ADDs in
    // flight on few cores, `busy per pod × par / cores` is a floor under the last one's latency.
    let per_pod = |d: Duration| d.as_secs_f64() * 1e3 / count as f64;
    let rest = cpu.busy.saturating_sub(cpu.agents + cpu.this + cpu.cni);
    println!(
        "|   | (wall {:.1} s for {count} pods; CPU busy {:.1} ms per pod: agents {:.1}, cni {:.1}, bench process {:.1}, other {:.1}; on {} cores: {:.0} ms floor for {par} at once) | | | | | |",
        wall.as_secs_f64(),
        per_pod(cpu.busy),
        per_pod(cpu.agents),
        per_pod(cpu.cni),
        per_pod(cpu.this),
        per_pod(rest),
        cpu.cores,
        per_pod(cpu.busy) * par as f64 / f64::from(cpu.cores.max(1)),
    );
    let log = lab.nodes[0].log_text();
    print_steps(label, log.get(log_from..).unwrap_or_default());
    // Release the addresses for the next run.
    std::thread::scope(|s| {
        for part in out.chunks(out.len().div_ceil(4).max(1)) {
            s.spawn(move || part.iter().for_each(|(p, _)| p.del(lab)));
        }
    });
}

/// `DATAPATH_PROFILE=<dir>`: a system-wide `perf record -g` of each latency batch (only the ADDs
/// and their probes, not the lab's set-up) and of the bpf_stats round of each throughput path,
/// to `<dir>/<run>.data`, for `perf report -i`. The
/// figures of a profiled run carry perf's own cost; take them from an unprofiled one.
struct Profile(Option<std::process::Child>);

impl Profile {
    fn start(label: &str) -> Self {
        let Ok(dir) = std::env::var("DATAPATH_PROFILE") else {
            return Self(None);
        };
        let out = std::path::Path::new(&dir).join(format!("{label}.data"));
        let child = Command::new("perf")
            .args(["record", "-F", "4999", "-a", "-g", "-q", "-o"])
            .arg(&out)
            .stdin(Stdio::null())
            .spawn()
            .expect("perf record (linux-perf)");
        // perf needs a moment to open its events on every CPU before the batch starts.
        std::thread::sleep(Duration::from_millis(500));
        Self(Some(child))
    }
}

impl Drop for Profile {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid"));
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
            let _ = child.wait();
        }
    }
}

/// Busy CPU time summed over all cores (user, nice, system, irq, softirq: everything but
/// idle, iowait and steal), from `/proc/stat`, and the share of it spent by the agents, by
/// this process (the control plane, the probes, kubelet's status patch) and by the
/// `cozyplane-cni` processes it ran and reaped. Kernel work on a process's behalf (netlink,
/// sockets) counts as that process's; the rest is softirq and kernel threads.
#[derive(Clone, Copy, Default)]
struct CpuTime {
    busy: Duration,
    agents: Duration,
    this: Duration,
    cni: Duration,
    cores: u32,
}

/// Fields 14–17 of `/proc/<pid>/stat`: utime, stime, cutime, cstime, in ticks.
fn proc_ticks(pid: &str) -> [u64; 4] {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The command name may hold spaces; the fields after it do not.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let f: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(4)
        .filter_map(|v| v.parse().ok())
        .collect();
    std::array::from_fn(|i| f.get(i).copied().unwrap_or_default())
}

/// USER_HZ is 100 on every Linux ABI the agent runs on.
fn ticks(t: u64) -> Duration {
    Duration::from_millis(t * 10)
}

impl CpuTime {
    fn now(lab: &Lab) -> Self {
        let stat = std::fs::read_to_string("/proc/stat").expect("/proc/stat");
        let busy = |line: &str| -> u64 {
            line.split_whitespace()
                .skip(1)
                .take(7)
                .enumerate()
                .filter(|(i, _)| !matches!(i, 3 | 4)) // idle, iowait
                .filter_map(|(_, v)| v.parse::<u64>().ok())
                .sum()
        };
        let total = stat.lines().next().map(busy).unwrap_or_default();
        let cores = stat
            .lines()
            .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
            .count();
        let agents: u64 = lab
            .nodes
            .iter()
            .filter_map(|n| {
                let agent = n.agent.lock().ok()?;
                let [u, s, _, _] = proc_ticks(&agent.as_ref()?.0.id().to_string());
                Some(u + s)
            })
            .sum();
        let [u, s, cu, cs] = proc_ticks("self");
        Self {
            busy: ticks(total),
            agents: ticks(agents),
            this: ticks(u + s),
            cni: ticks(cu + cs),
            cores: u32::try_from(cores).unwrap_or(1),
        }
    }
}

impl std::ops::Sub for CpuTime {
    type Output = Self;
    fn sub(self, rhs: Self) -> Self {
        Self {
            busy: self.busy.saturating_sub(rhs.busy),
            agents: self.agents.saturating_sub(rhs.agents),
            this: self.this.saturating_sub(rhs.this),
            cni: self.cni.saturating_sub(rhs.cni),
            cores: self.cores,
        }
    }
}

impl std::ops::AddAssign for CpuTime {
    fn add_assign(&mut self, rhs: Self) {
        self.busy += rhs.busy;
        self.agents += rhs.agents;
        self.this += rhs.this;
        self.cni += rhs.cni;
        self.cores = rhs.cores;
    }
}

/// The agent's own account of its ADDs (the `steps` field of each ADD log line): where
/// the time inside the agent went, as p50/p99 per step, printed under the run's rows.
fn print_steps(label: &str, log: &str) {
    let mut by_step: Vec<(String, Vec<f64>)> = Vec::new();
    for line in log
        .lines()
        .filter(|l| l.contains("command=Add") && l.contains(" ok"))
    {
        let Some(rest) = line.split("steps=\"").nth(1) else {
            continue;
        };
        let steps = rest.split('"').next().unwrap_or_default();
        for kv in steps.split_whitespace() {
            let Some((k, v)) = kv.split_once('=') else {
                continue;
            };
            let Ok(v) = v.parse::<f64>() else { continue };
            match by_step.iter_mut().find(|(s, _)| s == k) {
                Some((_, vs)) => vs.push(v),
                None => by_step.push((k.to_string(), vec![v])),
            }
        }
    }
    let cells: Vec<String> = by_step
        .iter_mut()
        .map(|(k, v)| format!("{k} {:.2}/{:.2}", pct(v, 0.5), pct(v, 0.99)))
        .collect();
    println!(
        "|   | agent steps p50/p99 ms ({label}): {} | | | | | |",
        cells.join(", ")
    );
}

/// A pod of ours that stays for the throughput runs (also an echo peer).
fn keep(cp: &Cp, lab: &Lab, node: usize, ns: &str, name: &str, vpc: Option<&str>) -> (BPod, Ipv4Addr) {
    let uid = cp.pods.create_pod(&lab.nodes[node], ns, name, vpc);
    std::thread::sleep(Duration::from_millis(200));
    let (p, _) = std::thread::scope(|s| {
        s.spawn(|| wire((cp, lab, || uid), (node, Netns::new("b")), (ns, name), &[]))
            .join()
            .expect("wire")
    });
    let ip = if vpc.is_some() {
        cp.vpc_ip(ns, name)
    } else {
        p.fabric
    };
    echo_server(&p.netns.path());
    (p, ip)
}

/// iperf3 from `client` to `server_ip` (server in `server`): received Gbit/s.
/// Gbit/s received, and the sender's TCP retransmits.
fn iperf(server: &Netns, client: &Netns, server_ip: Ipv4Addr) -> (f64, u64) {
    let _srv = server.iperf_server(5201);
    let out = client.exec(&[
        "iperf3",
        "-c",
        &server_ip.to_string(),
        "-p",
        "5201",
        "-t",
        "5",
        "-O",
        "1",
        // Client on CPU 0, server on CPU 1, for every path alike: on 2 cores, where the two
        // ends land otherwise moves a single round by ±10 %.
        "-A",
        "0,1",
        "-J",
    ]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    let gbit = v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap_or(0.0)
        / 1e9;
    (gbit, v["end"]["sum_sent"]["retransmits"].as_u64().unwrap_or(0))
}

fn mtu_of(ns: &Netns) -> u32 {
    String::from_utf8_lossy(&ns.exec(&["cat", "/sys/class/net/eth0/mtu"]).stdout)
        .trim()
        .parse()
        .expect("mtu")
}

/// Two namespaces behind node 1 and node 2, routed by the kernel over a plain VXLAN device
/// (VNI 4242, port 4790) between the node namespaces. No programs anywhere on the path.
/// The VXLAN device a plain reference pair is routed over.
#[derive(Clone, Copy)]
enum PlainVxlan {
    /// One VNI to one fixed remote, bound to the underlay (`cpvxref`, port 4790, 10.99/16).
    FixedRemote,
    /// Collect-metadata (`external`) like the agent's own device: the VNI and remote come per
    /// packet from the route's lightweight-tunnel encap (`cpvxmd`, port 4791, 10.97/16).
    External,
}

impl PlainVxlan {
    /// The second octet of the pair's addresses (`10.<n>.<node>.<host>`).
    fn net(self) -> u8 {
        match self {
            Self::FixedRemote => 99,
            Self::External => 97,
        }
    }
}

fn plain_pair(lab: &Lab, mtu: u32, kind: PlainVxlan) -> (Netns, Netns) {
    let n = kind.net();
    let (host_dev, vx) = match kind {
        PlainVxlan::FixedRemote => ("cpref0", "cpvxref"),
        PlainVxlan::External => ("cpmd0", "cpvxmd"),
    };
    let mk = |i: usize| {
        let node = &lab.nodes[i];
        let other = &lab.nodes[1 - i];
        let me = i + 1;
        let them = 2 - i;
        let p = Netns::new("ref");
        node.ns.ip_ok(&[
            "link", "add", host_dev, "type", "veth", "peer", "name", "eth0", "netns", &p.0,
        ]);
        node.ns
            .ip_ok(&["link", "set", host_dev, "mtu", &mtu.to_string(), "up"]);
        node.ns
            .ip_ok(&["addr", "add", &format!("10.{n}.{me}.1/24"), "dev", host_dev]);
        if let PlainVxlan::External = kind {
            // As the agent does it: NOARP device, distinct MAC per node (a VXLAN device drops
            // frames whose inner source is its own MAC), a static neighbour for the far pod.
            let (mac, their_mac) = (format!("02:ee:00:00:00:0{me}"), format!("02:ee:00:00:00:0{them}"));
            node.ns.ip_ok(&[
                "link", "add", vx, "address", &mac, "type", "vxlan", "external", "dstport", "4791",
            ]);
            node.ns.ip_ok(&["link", "set", vx, "mtu", &mtu.to_string(), "up"]);
            node.ns.ip_ok(&[
                "route",
                "add",
                &format!("10.{n}.{them}.0/24"),
                "encap",
                "ip",
                "id",
                "4243",
                "dst",
                &other.ip.to_string(),
                "dev",
                vx,
            ]);
            node.ns.ip_ok(&[
                "neigh",
                "add",
                &format!("10.{n}.{them}.2"),
                "lladdr",
                &their_mac,
                "dev",
                vx,
                "nud",
                "permanent",
            ]);
        } else {
            node.ns.ip_ok(&[
                "link",
                "add",
                "cpvxref",
                "type",
                "vxlan",
                "id",
                "4242",
                "remote",
                &other.ip.to_string(),
                "local",
                &node.ip.to_string(),
                "dstport",
                "4790",
                "dev",
                "ul0",
            ]);
            node.ns.ip_ok(&["link", "set", "cpvxref", "up"]);
            node.ns
                .ip_ok(&["addr", "add", &format!("10.99.0.{me}/24"), "dev", "cpvxref"]);
            node.ns.ip_ok(&[
                "route",
                "add",
                &format!("10.99.{them}.0/24"),
                "via",
                &format!("10.99.0.{them}"),
            ]);
        }
        let _ = node.ns.exec(&["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
        p.ip_ok(&["link", "set", "eth0", "mtu", &mtu.to_string(), "up"]);
        p.ip_ok(&["addr", "add", &format!("10.{n}.{me}.2/24"), "dev", "eth0"]);
        p.ip_ok(&["route", "add", "default", "via", &format!("10.{n}.{me}.1")]);
        p
    };
    (mk(0), mk(1))
}

/// Two namespaces on node 1 wired by the reference `bridge` plugin with `host-local` IPAM.
fn bridge_pair(lab: &Lab, mtu: u32, dir: &std::path::Path) -> (Netns, Netns, Ipv4Addr) {
    let node = &lab.nodes[0];
    let conf = json!({"cniVersion": "1.0.0", "name": "cpbench-br", "type": "bridge", "bridge": "cpbench0",
        "isGateway": true, "mtu": mtu,
        "ipam": {"type": "host-local", "subnet": "10.98.0.0/24", "dataDir": dir.to_str()}});
    let add = |i: usize| {
        let p = Netns::new("br");
        let mut child = Command::new("nsenter")
            .arg(format!("--net={}", node.ns.path()))
            .arg("/usr/lib/cni/bridge")
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("CNI_COMMAND", "ADD")
            .env("CNI_CONTAINERID", format!("cpbench-br{i}"))
            .env("CNI_NETNS", p.path())
            .env("CNI_IFNAME", "eth0")
            .env("CNI_PATH", "/usr/lib/cni")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("bridge plugin");
        std::io::Write::write_all(
            &mut child.stdin.take().expect("stdin"),
            conf.to_string().as_bytes(),
        )
        .expect("conf");
        let out = child.wait_with_output().expect("bridge output");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        let ip = result_ip(&v)
            .unwrap_or_else(|| panic!("bridge ADD: {v} {}", String::from_utf8_lossy(&out.stderr)));
        (p, ip)
    };
    let (a, _) = add(0);
    let (b, ip) = add(1);
    (a, b, ip)
}

fn body(cp: &Cp, lab: &Lab) {
    let load = || std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average at start: {}", load().trim());
    cp.tenant("bench", "v", "10.20.0.0/16");

    // Peers (echo servers; also the throughput pods).
    let (d1, d1ip) = keep(cp, lab, 0, "default", "peer-d1", None);
    let (d1b, d1bip) = keep(cp, lab, 0, "default", "peer-d1b", None);
    let (d2, d2ip) = keep(cp, lab, 1, "default", "peer-d2", None);
    let (v1, v1ip) = keep(cp, lab, 0, "bench", "peer-v1", Some("v"));
    let (v1b, v1bip) = keep(cp, lab, 0, "bench", "peer-v1b", Some("v"));
    let (v2, v2ip) = keep(cp, lab, 1, "bench", "peer-v2", Some("v"));
    // A VPC peered with v (issue 11): its pod on node 2 is the peered throughput target.
    cp.tenant("t2", "w", "10.21.0.0/16");
    cp.peer(("bench", "v"), ("t2", "w"));
    let (w2, w2ip) = keep(cp, lab, 1, "t2", "peer-w2", Some("w"));
    // Cross-node peers answer only once the other node learned the probing pod; make sure
    // the peers themselves are known everywhere before timing anything.
    for (p, ip) in [(&d1, d2ip), (&d2, d1ip), (&v1, v2ip), (&v2, v1ip), (&v1, w2ip)] {
        let r = probe(&p.netns.path(), vec![ip], Instant::now());
        assert!(r[0].is_some(), "peer {} cannot reach {ip}", p.name);
    }

    // `DATAPATH_BENCH=throughput`, `=latency` or `=concurrent` (the two 50-at-once latency
    // runs) runs only that part (for iterating).
    let only = std::env::var("DATAPATH_BENCH").unwrap_or_default();
    if only != "throughput" {
        latency_table(cp, lab, [d1bip, d2ip], [v1bip, v2ip], only == "concurrent");
    }
    println!("load average after latency: {}", load().trim());
    if only.is_empty() || only == "throughput" {
        throughput(
            lab,
            [&d1, &d1b, &d2, &v1, &v1b, &v2, &w2],
            [d1bip, d2ip, v1bip, v2ip, w2ip],
        );
    }
    println!("load average at end: {}", load().trim());
    drop((d1, d1b, d2, v1, v1b, v2, w2));
}

fn latency_table(
    cp: &Cp,
    lab: &Lab,
    [d1bip, d2ip]: [Ipv4Addr; 2],
    [v1bip, v2ip]: [Ipv4Addr; 2],
    concurrent_only: bool,
) {
    println!("\n| run | measure | n | p50 ms | p99 ms | max ms | no reply |");
    println!("|---|---|---|---|---|---|---|");
    if !concurrent_only {
        latency(
            cp,
            lab,
            "net0-seq",
            ("default", None),
            &[d1bip, d2ip],
            (SEQUENTIAL, 1, true),
        );
    }
    latency(
        cp,
        lab,
        "net0-par",
        ("default", None),
        &[d1bip, d2ip],
        (CONCURRENT, CONCURRENT, true),
    );
    if !concurrent_only {
        latency(
            cp,
            lab,
            "vpc-seq",
            ("bench", Some("v")),
            &[v1bip, v2ip],
            (SEQUENTIAL, 1, true),
        );
    }
    latency(
        cp,
        lab,
        "vpc-par",
        ("bench", Some("v")),
        &[v1bip, v2ip],
        (CONCURRENT, CONCURRENT, true),
    );
    latency(
        cp,
        lab,
        "vpc-par-at-once",
        ("bench", Some("v")),
        &[v1bip, v2ip],
        (CONCURRENT, CONCURRENT, false),
    );
}

/// Per-program `(run_time_ns, run_cnt)` of our programs, summed over both nodes' copies
/// (needs `kernel.bpf_stats_enabled=1`).
fn bpf_stats() -> std::collections::BTreeMap<String, (u64, u64)> {
    let out = Command::new("bpftool").args(["prog", "show", "-j"]).output();
    let v: Value = out
        .ok()
        .and_then(|o| serde_json::from_slice(&o.stdout).ok())
        .unwrap_or(Value::Null);
    let mut m = std::collections::BTreeMap::new();
    for p in v.as_array().into_iter().flatten() {
        let Some(name) = p["name"].as_str().filter(|n| n.starts_with("sdn_")) else {
            continue;
        };
        let e: &mut (u64, u64) = m.entry(name.to_string()).or_default();
        e.0 += p["run_time_ns"].as_u64().unwrap_or(0);
        e.1 += p["run_cnt"].as_u64().unwrap_or(0);
    }
    m
}

fn throughput(lab: &Lab, pods: [&BPod; 7], [d1bip, d2ip, v1bip, v2ip, w2ip]: [Ipv4Addr; 5]) {
    let [d1, d1b, d2, v1, v1b, v2, w2] = pods;
    let mtu = mtu_of(&v1.netns);
    let (r1, r2) = plain_pair(lab, mtu, PlainVxlan::FixedRemote);
    let (m1, m2) = plain_pair(lab, mtu, PlainVxlan::External);
    let md_ip = Ipv4Addr::new(10, PlainVxlan::External.net(), 2, 2);
    assert!(
        m1.ping(md_ip, 2, 1),
        "plain collect-metadata VXLAN reference is wired"
    );
    let dir = tempfile::Builder::new()
        .prefix("cpbench-")
        .tempdir()
        .expect("tempdir");
    let (b1, b2, b2ip) = bridge_pair(lab, mtu, dir.path());
    let ref_ip = Ipv4Addr::new(10, 99, 2, 2);
    assert!(r1.ping(ref_ip, 2, 1), "plain VXLAN reference is wired");
    assert!(b1.ping(b2ip, 2, 1), "bridge reference is wired");
    println!(
        "\npod MTU {mtu}; iperf3 -t 5 -O 1 -A 0,1, Gbit/s received; {ROUNDS} rounds, each round runs every path once (interleaved, so drift hits all paths alike)"
    );
    let runs: Vec<(&str, &Netns, &Netns, Ipv4Addr)> = vec![
        ("cross-node VPC pods (ours)", &v2.netns, &v1.netns, v2ip),
        ("cross-node net-0 pods (ours)", &d2.netns, &d1.netns, d2ip),
        (
            "cross-node plain kernel routing + VXLAN (limit)",
            &r2,
            &r1,
            ref_ip,
        ),
        (
            "cross-node plain kernel routing + collect-metadata VXLAN like ours (limit)",
            &m2,
            &m1,
            md_ip,
        ),
        ("same-node VPC pods (ours)", &v1b.netns, &v1.netns, v1bip),
        ("same-node net-0 pods (ours)", &d1b.netns, &d1.netns, d1bip),
        ("same-node bridge + host-local (reference)", &b2, &b1, b2ip),
        ("cross-node peered VPC pods (ours)", &w2.netns, &v1.netns, w2ip),
    ];
    let mut got: Vec<Vec<f64>> = vec![Vec::new(); runs.len()];
    let mut retrans: Vec<u64> = vec![0; runs.len()];
    for _ in 0..ROUNDS {
        for (i, (_, srv, cli, ip)) in runs.iter().enumerate() {
            let (gbit, r) = iperf(srv, cli, *ip);
            got[i].push(gbit);
            retrans[i] += r;
        }
    }
    // Program run time and count per path, from one more round with bpf_stats on. Not part
    // of the figures above: the stats cost our programs two clock reads a run, and the
    // references run none.
    let stats_were = std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled").unwrap_or_default();
    let _ = std::fs::write("/proc/sys/kernel/bpf_stats_enabled", "1");
    let mut prog: Vec<std::collections::BTreeMap<String, (u64, u64)>> = vec![Default::default(); runs.len()];
    let mut profiled = Vec::new();
    for (i, (_, srv, cli, ip)) in runs.iter().enumerate() {
        let before = bpf_stats();
        // With DATAPATH_PROFILE, this round of each path is also recorded (`throughput-<i>`,
        // in the order of the table).
        let profile = Profile::start(&format!("throughput-{i}"));
        profiled.push(iperf(srv, cli, *ip).0);
        drop(profile);
        for (k, (ns, n)) in bpf_stats() {
            let (ns0, n0) = before.get(&k).copied().unwrap_or_default();
            let e = prog[i].entry(k).or_default();
            e.0 += ns.saturating_sub(ns0);
            e.1 += n.saturating_sub(n0);
        }
    }
    let _ = std::fs::write("/proc/sys/kernel/bpf_stats_enabled", stats_were.trim());
    let rounds: String = (1..=ROUNDS).map(|r| format!(" round {r} |")).collect();
    println!("\n| path |{rounds} median | retransmits (all rounds) |");
    println!("|---|{}---|---|", "---|".repeat(ROUNDS));
    let mut means = Vec::new();
    for (((what, ..), v), r) in runs.iter().zip(&mut got).zip(&retrans) {
        let cells: String = v.iter().map(|x| format!(" {x:.2} |")).collect();
        let m = pct(v, 0.5);
        means.push(m);
        println!("| {what} |{cells} {m:.2} | {r} |");
    }
    println!(
        "\nratios: cross-node VPC / limit {:.0} %, net 0 / limit {:.0} %; against the collect-metadata limit VPC {:.0} %, net 0 {:.0} %; same-node VPC / bridge {:.0} %, net 0 / bridge {:.0} %",
        100.0 * means[0] / means[2],
        100.0 * means[1] / means[2],
        100.0 * means[0] / means[3],
        100.0 * means[1] / means[3],
        100.0 * means[4] / means[6],
        100.0 * means[5] / means[6],
    );
    println!(
        "peered VPC pods / same-VPC pods, cross-node: {:.0} % (against the collect-metadata limit {:.0} %)",
        100.0 * means[7] / means[0],
        100.0 * means[7] / means[3],
    );
    println!("\nprogram runs per path (one extra round with bpf_stats on; both nodes):\n");
    println!("| path | Gbit/s in that round | program | runs | avg ns | total ms |");
    println!("|---|---|---|---|---|---|");
    for (((what, ..), p), gbit) in runs.iter().zip(&prog).zip(&profiled) {
        for (name, (ns, n)) in p.iter().filter(|(_, (_, n))| *n > 0) {
            #[allow(clippy::cast_precision_loss)]
            let avg = *ns as f64 / *n as f64;
            #[allow(clippy::cast_precision_loss)]
            let total = *ns as f64 / 1e6;
            println!("| {what} | {gbit:.2} | {name} | {n} | {avg:.0} | {total:.0} |");
        }
    }
    drop((r1, r2, m1, m2, b1, b2));
}
