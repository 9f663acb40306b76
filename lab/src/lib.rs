//! The multi-node lab behind `make e2e`.
//!
//! Everything lives in network namespaces this lab creates (`cplab-<pid>-*`):
//!
//! * `ul`: the underlay, one bridge; every other namespace has a veth on it (192.168.77.0/24).
//! * `ctl`: the control plane. The test body runs on a thread that entered this namespace,
//!   so the kube stand-in and cozyplane-apiserver (both in-process, bound to 127.0.0.1)
//!   listen on *its* loopback. A forwarder on `ctl`'s underlay address relays to them.
//! * `node-i`: one per node, with its own agent process, private bpffs mount, state dir and
//!   CNI socket. A forwarder on the node's own 127.0.0.1 relays to `ctl`, so the agents use
//!   the control plane's kubeconfigs unchanged (TLS names stay `127.0.0.1`).
//! * one namespace per pod, wired by the real `cozyplane-cni` binary invoked like kubelet.
//!
//! Drop guards stop processes by PID, unmount bpffs and delete every namespace, also when a
//! test panics. Forwarder threads end with the process.

use std::fs::File;
use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::{Value, json};

pub mod kubelet;
pub mod load;
pub mod multus;
pub mod outside;
pub mod stats;
pub use outside::Outside;

/// Underlay address of the control namespace.
pub const CTL_IP: Ipv4Addr = Ipv4Addr::new(192, 168, 77, 100);
/// Where each node's agent serves `/metrics` (on the node's underlay address).
pub const METRICS_PORT: u16 = 9402;
/// The IPv4 pool the kube stand-in assigns LoadBalancer addresses from when a lab run plays the
/// LoadBalancer implementation (`Options::default().lb_pool(LB_POOL_V4, LB_POOL_V6)`): the
/// pool the lab's router routes to a node ([`Outside::attract`], as BGP or L2 attraction
/// would), so every address the stand-in hands out is reachable from the internet host.
pub const LB_POOL_V4: &str = outside::POOL4;
/// The IPv6 pool of the same.
pub const LB_POOL_V6: &str = outside::POOL6;

/// Fails (never skips) without root.
pub fn require_root() {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let euid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .expect("Uid line");
    assert_eq!(
        euid, "0",
        "the lab creates netns, veths, bpffs mounts and runs agents; it needs root and does not skip"
    );
}

/// Runs a command.
pub fn sh(args: &[&str]) -> Output {
    Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// Runs a command that must succeed; returns stdout.
pub fn sh_ok(args: &[&str]) -> String {
    let out = sh(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

fn unique(tag: &str) -> String {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    format!(
        "cplab-{}-{}{tag}",
        std::process::id() % 100_000,
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// A named netns, deleted on drop.
#[derive(Debug)]
pub struct Netns(pub String);

impl Netns {
    /// Creates `cplab-<pid>-<seq><tag>` with `lo` up.
    pub fn new(tag: &str) -> Self {
        let name = unique(tag);
        sh_ok(&["ip", "netns", "add", &name]);
        let ns = Self(name);
        ns.ip_ok(&["link", "set", "lo", "up"]);
        ns
    }
    /// `/run/netns/<name>`.
    pub fn path(&self) -> String {
        format!("/run/netns/{}", self.0)
    }
    /// `ip -n <name> ...`.
    pub fn ip(&self, args: &[&str]) -> Output {
        let mut v = vec!["ip", "-n", &self.0];
        v.extend_from_slice(args);
        sh(&v)
    }
    /// `ip -n <name> ...`, which must succeed.
    pub fn ip_ok(&self, args: &[&str]) -> String {
        let mut v = vec!["ip", "-n", &self.0];
        v.extend_from_slice(args);
        sh_ok(&v)
    }
    /// `sysctl -w <kv>` inside this netns, which must succeed.
    pub fn sysctl(&self, kv: &str) {
        sh_ok(&["ip", "netns", "exec", &self.0, "sysctl", "-qw", kv]);
    }
    /// Waits (up to 10 s) until no IPv6 address here is tentative. A router whose link-local
    /// address is still in duplicate address detection sends no neighbour solicitation for
    /// the packets it forwards (the kernel needs a usable link-local source), so a test that
    /// forwards IPv6 right after a link came up lost its first packets (a CI failure of
    /// `lab_egress`: the internet host saw only DAD probes from `::`).
    pub fn wait_v6_settled(&self) {
        let t = std::time::Instant::now();
        while t.elapsed() < std::time::Duration::from_secs(10) {
            let out = self.ip(&["-6", "addr", "show", "tentative"]);
            if out.status.success() && out.stdout.is_empty() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!("{}: IPv6 addresses still tentative after 10 s", self.0);
    }
    /// `ip netns exec <name> ...`.
    pub fn exec(&self, args: &[&str]) -> Output {
        let mut v = vec!["ip", "netns", "exec", &self.0];
        v.extend_from_slice(args);
        sh(&v)
    }
    /// A command prepared to run inside this netns.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.0]).args(args);
        c
    }
    /// A one-shot `iperf3` server on `port` inside this netns, given 300 ms to listen; it
    /// is killed when the handle drops.
    pub fn iperf_server(&self, port: u16) -> Proc {
        let p = Proc(
            self.command(&["iperf3", "-s", "-1", "-p", &port.to_string()])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("iperf3 -s"),
        );
        std::thread::sleep(std::time::Duration::from_millis(300));
        p
    }

    /// Pings `to` (either family) from inside; true if at least `min` replies came back.
    pub fn ping(&self, to: impl Into<std::net::IpAddr>, count: u32, min: u32) -> bool {
        self.ping_from(None, to, count) >= min
    }

    /// Pings to `to` every 10 ms for at most `secs` seconds, out of interface `dev` when
    /// given, in the background (stopped by PID when the [`Proc`] goes); output discarded.
    pub fn pinger(&self, dev: Option<&str>, to: impl Into<std::net::IpAddr>, secs: u32) -> Proc {
        let (secs, to) = (secs.to_string(), to.into().to_string());
        let mut args = vec!["ping", "-n", "-q", "-i", "0.01", "-w", &secs];
        if let Some(d) = dev {
            args.extend(["-I", d]);
        }
        args.push(&to);
        Proc(
            self.command(&args)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("ping"),
        )
    }

    /// `count` pings 50 ms apart to `to`, out of interface `dev` when given (`ping -I`): how
    /// many were answered.
    pub fn ping_from(&self, dev: Option<&str>, to: impl Into<std::net::IpAddr>, count: u32) -> u32 {
        let to: std::net::IpAddr = to.into();
        let (count, to) = (count.to_string(), to.to_string());
        let mut args = vec!["ping", "-n", "-q", "-c", &count, "-i", "0.05", "-W", "1"];
        if let Some(d) = dev {
            args.extend(["-I", d]);
        }
        args.push(&to);
        received(&String::from_utf8_lossy(&self.exec(&args).stdout))
    }
}

/// Replies counted in ping's summary line.
pub fn received(summary: &str) -> u32 {
    summary
        .lines()
        .find_map(|l| {
            let (_, rest) = l.split_once(" packets transmitted, ")?;
            rest.split_whitespace().next()?.parse().ok()
        })
        .unwrap_or(0)
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = sh(&["ip", "netns", "del", &self.0]);
    }
}

/// A child process, SIGKILLed by PID on drop.
#[derive(Debug)]
pub struct Proc(pub Child);

impl Proc {
    /// SIGKILL by PID and reap.
    pub fn kill(&mut self) {
        if let Ok(pid) = i32::try_from(self.0.id()) {
            let _ =
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        }
        let _ = self.0.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Relays TCP from `listen` (bound inside `netns`) to `target` (dialled from `netns`).
/// One thread per direction per connection; the API watches are few and long-lived.
pub fn forward(netns: &str, listen: SocketAddr, target: SocketAddr) {
    let ns = File::open(netns).unwrap_or_else(|e| panic!("open {netns}: {e}"));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        if let Err(e) = nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET) {
            let _ = tx.send(Err(format!("setns: {e}")));
            return;
        }
        let l = match TcpListener::bind(listen) {
            Ok(l) => l,
            Err(e) => {
                let _ = tx.send(Err(format!("bind {listen}: {e}")));
                return;
            }
        };
        let _ = tx.send(Ok(()));
        for conn in l.incoming() {
            let Ok(down) = conn else { return };
            // Threads spawned here inherit this thread's netns.
            std::thread::spawn(move || {
                let Ok(up) = TcpStream::connect(target) else {
                    return;
                };
                let _ = up.set_nodelay(true);
                let _ = down.set_nodelay(true);
                let (Ok(mut d2), Ok(mut u2)) = (down.try_clone(), up.try_clone()) else {
                    return;
                };
                let t = std::thread::spawn(move || {
                    let _ = std::io::copy(&mut d2, &mut u2);
                    let _ = u2.shutdown(std::net::Shutdown::Write);
                });
                let (mut d, mut u) = (down, up);
                let _ = std::io::copy(&mut u, &mut d);
                let _ = d.shutdown(std::net::Shutdown::Write);
                let _ = t.join();
            });
        }
    });
    rx.recv()
        .expect("forwarder thread")
        .unwrap_or_else(|e| panic!("forwarder {listen} -> {target} in {netns}: {e}"));
}

/// Runs `f` on a thread inside `ns` (and everything it spawns: tokio workers, sockets).
pub fn run_in<R: Send>(ns: &Netns, f: impl FnOnce() -> R + Send) -> R {
    std::thread::scope(|s| {
        s.spawn(move || {
            enter(ns);
            f()
        })
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e))
    })
}

/// A private bpffs mount in a temp dir, unmounted on drop.
#[derive(Debug)]
pub struct Scratch {
    /// The directory (state, socket, logs, `bpffs/`).
    pub dir: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("cplab-")
            .tempdir()
            .expect("tempdir");
        std::fs::create_dir(dir.path().join("bpffs")).expect("mkdir bpffs");
        let s = Self { dir };
        sh_ok(&["mount", "-t", "bpf", "cplab", s.bpffs().to_str().expect("utf-8")]);
        s
    }
    fn bpffs(&self) -> PathBuf {
        self.dir.path().join("bpffs")
    }
    /// Where the agent pins.
    pub fn pins(&self) -> PathBuf {
        self.bpffs().join("cozyplane")
    }
    /// The agent's CNI socket, as the lab sees it: the chart's `/run/cozyplane/cni.sock`
    /// inside the node's mount namespace, where this directory is mounted on `/run/cozyplane`.
    pub fn socket(&self) -> PathBuf {
        self.run_dir().join("cni.sock")
    }
    /// What the node's mount namespace shows as `/run/cozyplane`.
    pub fn run_dir(&self) -> PathBuf {
        self.dir.path().join("run")
    }
    /// The node's host root for CNI: `opt/cni/bin` and `etc/cni/net.d` below it, where the
    /// chart's installer puts the plugin and the conflist.
    pub fn host_root(&self) -> PathBuf {
        self.dir.path().join("host")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = sh(&["umount", "-l", self.bpffs().to_str().unwrap_or_default()]);
    }
}

/// The directory holding our binaries (`target/debug`), next to the test's `deps/`.
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>")
        .to_path_buf();
    for b in ["cozyplane-agent", "cozyplane-cni"] {
        assert!(
            dir.join(b).exists(),
            "{} missing: run `cargo build -p cozyplane-agent && cargo build --manifest-path cni/bin/Cargo.toml` first (make e2e does)",
            dir.join(b).display()
        );
    }
    dir
}

/// The Helm chart, whose `files/` are the one definition of the CNI configuration: the
/// DaemonSet's init container installs them, and so does the lab for each node.
pub fn chart_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/cozyplane")
}

/// The chart's conflist that chains `portmap` (its mode that keeps kube-proxy; with the agent
/// as the Service proxy the chart installs `files/kube-proxy-replacement/`'s, which chains
/// nothing), relative to [`chart_dir`].
pub const CONFLIST: &str = "files/10-cozyplane.conflist";
/// The chart's installer script, relative to [`chart_dir`].
pub const INSTALL_CNI: &str = "files/install-cni.sh";
/// Where the chart's conflist expects the agent's socket (`agentSocket`); each lab node has
/// its own, mounted there in the node's mount namespace.
pub const AGENT_RUN_DIR: &str = "/run/cozyplane";
/// The plugins Debian ships (`containernetworking-plugins`), among them the `portmap` the
/// chart's conflist chains: the installer's plugin directory, the same path as in the agent
/// image (whose init container installs `portmap` from there).
pub const SYSTEM_CNI_DIR: &str = "/usr/lib/cni";

/// Runs the chart's installer as the init container does, with `root` standing for the
/// host's `/` (its `/host`): the plugin binary we built, the chart's own conflist.
pub fn install_cni(root: &Path) -> String {
    install_cni_from(&bin_dir(), root)
}

/// The command a lab node's CNI is installed with: the DaemonSet's init container's
/// (`charts/cozyplane/templates/agent.yaml`) with three paths mapped, which
/// `lab/tests/chart.rs` proves against the rendered chart: the ConfigMap's mount to the
/// chart's `files/` (the ConfigMap's data), `/host` to `root`, and the image's plugin to the
/// `cozyplane-cni` in `bins`. The shell and the plugin directory ([`SYSTEM_CNI_DIR`]) are the
/// same paths as in the image.
pub fn install_cni_command(bins: &Path, root: &Path) -> Vec<PathBuf> {
    let chart = chart_dir();
    vec![
        PathBuf::from("/bin/sh"),
        chart.join(INSTALL_CNI),
        bins.join("cozyplane-cni"),
        chart.join(CONFLIST),
        root.to_path_buf(),
        PathBuf::from(SYSTEM_CNI_DIR),
    ]
}

/// [`install_cni`] of the plugin in `bins` (another build's `cozyplane-cni`): runs
/// [`install_cni_command`].
pub fn install_cni_from(bins: &Path, root: &Path) -> String {
    let cmd = install_cni_command(bins, root);
    let out = Command::new(&cmd[0])
        .args(&cmd[1..])
        .output()
        .expect("run install-cni.sh");
    assert!(
        out.status.success(),
        "install-cni.sh: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// A process holding a mount namespace of its own in which `run` is mounted on
/// [`AGENT_RUN_DIR`] (the rest is the host's, received as a slave, so later netns mounts
/// show). It stands for the node's filesystem: every node's agent listens on the chart's
/// socket path without the nodes sharing one.
fn mount_ns(run: &Path) -> Proc {
    std::fs::create_dir_all(AGENT_RUN_DIR).expect("mkdir /run/cozyplane");
    std::fs::create_dir_all(run).expect("mkdir run dir");
    let mut child = Command::new("unshare")
        .args(["--mount", "--propagation", "slave", "sh", "-c"])
        .arg(format!(
            "mount --bind \"$0\" {AGENT_RUN_DIR} && echo ready && exec sleep 1000000"
        ))
        .arg(run)
        .stdout(Stdio::piped())
        .spawn()
        .expect("unshare");
    let mut line = String::new();
    let _ = std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().expect("stdout")),
        &mut line,
    );
    assert_eq!(line.trim(), "ready", "node mount namespace");
    Proc(child)
}

/// One lab node.
#[derive(Debug)]
pub struct Node {
    /// Node name.
    pub name: String,
    /// Its underlay address.
    pub ip: Ipv4Addr,
    /// Its fabric block.
    pub block: String,
    /// Its IPv6 fabric block ([`Lab::dual_stack`]), and its IPv6 underlay address (which only
    /// the host stack uses: the tunnel stays IPv4).
    pub v6: Option<(String, std::net::Ipv6Addr)>,
    /// The agent tunnels over the IPv6 underlay address ([`Lab::v6_underlay`]).
    pub tunnel_v6: bool,
    /// Agent state, bpffs, socket.
    pub scratch: Scratch,
    /// The running agent.
    pub agent: std::sync::Mutex<Option<Proc>>,
    /// Where its `cozyplane-agent` and `cozyplane-cni` come from ([`bin_dir`], or another
    /// build's, [`Lab::with_bins`]).
    pub bins: PathBuf,
    /// Agent log file.
    pub log: PathBuf,
    // Dropped after the agent.
    /// The holder of the node's mount namespace ([`Node::mnt_ns`]).
    pub mnt: Proc,
    /// The node netns.
    pub ns: Netns,
}

impl Node {
    /// The node's mount namespace: the host's, with the node's own [`AGENT_RUN_DIR`].
    pub fn mnt_ns(&self) -> PathBuf {
        PathBuf::from(format!("/proc/{}/ns/mnt", self.mnt.0.id()))
    }

    /// Moves the calling thread into the node for good, network and mount namespace: a
    /// thread that stands for a process of the node's host (kubelet); discard it afterwards.
    pub fn enter(&self) {
        enter(&self.ns);
        // A thread may switch mount namespace only with a filesystem context of its own.
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_FS).expect("unshare CLONE_FS");
        let file = File::open(self.mnt_ns()).expect("open mount ns");
        nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNS).expect("setns mnt");
    }

    /// The network configuration list the runtime uses: the first `*.conflist` of the node's
    /// `etc/cni/net.d` in name order (as containerd and CRI-O pick it), as installed there.
    pub fn conflist(&self) -> Value {
        let dir = self.scratch.host_root().join("etc/cni/net.d");
        let mut lists: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .filter_map(|e| Some(e.ok()?.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "conflist"))
            .collect();
        lists.sort();
        let first = lists
            .first()
            .unwrap_or_else(|| panic!("no conflist in {}", dir.display()));
        let text = std::fs::read_to_string(first).expect("read conflist");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", first.display()))
    }

    /// `CNI_PATH`: the node's `opt/cni/bin` alone, as kubelet's on a node the chart set up:
    /// every plugin the conflist names must be where the chart's installer put it.
    pub fn cni_path(&self) -> Vec<PathBuf> {
        vec![self.scratch.host_root().join("opt/cni/bin")]
    }

    /// The configuration the runtime hands our plugin, the conflist's first: see
    /// [`plugin_conf`].
    pub fn conf(&self) -> Value {
        plugin_conf(&self.conflist(), 0, None, &json!({}))
    }

    /// Registers this node's Node object as kubelet and kube-controller-manager would: an
    /// `InternalIP` (its underlay address) and, except for `n1`, `spec.podCIDR` (its fabric
    /// block). `n1`'s agent gets `--fabric-block` instead and announces it on its Node, so
    /// the other agents learn one block each way.
    pub async fn register(&self, kube: &kube::Client) {
        use k8s_openapi::api::core::v1::Node as KubeNode;
        use kube::api::{Api, Patch, PatchParams, PostParams};
        let nodes: Api<KubeNode> = Api::all(kube.clone());
        let node: KubeNode = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": { "name": self.name },
            "spec": if self.name == "n1" { json!({}) } else {
                let mut cidrs = vec![self.block.clone()];
                cidrs.extend(self.v6.iter().map(|(b, _)| b.clone()));
                json!({ "podCIDR": self.block, "podCIDRs": cidrs })
            }
        }))
        .expect("node object");
        nodes
            .create(&PostParams::default(), &node)
            .await
            .expect("create Node");
        let status = json!({ "status": { "addresses": [
            { "type": "InternalIP", "address": self.ip.to_string() },
            { "type": "Hostname", "address": self.name }
        ] } });
        nodes
            .patch_status(&self.name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .expect("Node status");
    }

    /// Starts the agent with the two kubeconfigs; a running one is SIGKILLed first (a restart).
    /// The first node is given its block with `--fabric-block` (its Node has no podCIDR);
    /// the others read it from their Node's `spec.podCIDR`, so both ways are exercised.
    pub fn start_agent(&self, kube: &Path, sdn: &Path) {
        self.start_agent_with(kube, sdn, &[]);
    }

    /// [`Node::start_agent`] with extra flags (e.g. `--dns-resolver`).
    pub fn start_agent_with(&self, kube: &Path, sdn: &Path, extra: &[&str]) {
        let mut slot = self.agent.lock().expect("agent lock");
        slot.take();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("agent log");
        let sock = self.scratch.socket();
        let _ = std::fs::remove_file(&sock);
        let child = Command::new("nsenter")
            .arg(format!("--net={}", self.ns.path()))
            .arg(format!("--mount={}", self.mnt_ns().display()))
            .arg(self.bins.join("cozyplane-agent"))
            .arg("--state-dir")
            .arg(self.scratch.dir.path().join("state"))
            .arg("--bpffs-dir")
            .arg(self.scratch.pins())
            .arg("--cni-socket")
            .arg(format!("{AGENT_RUN_DIR}/cni.sock"))
            .args(if self.name == "n1" {
                let mut v = vec!["--fabric-block", &self.block];
                if let Some((b6, _)) = &self.v6 {
                    v.extend(["--fabric-block6", b6.as_str()]);
                }
                v
            } else {
                vec![]
            })
            .args(["--underlay-dev", "ul0"])
            // North-south leaves through the underlay: the lab's routers are on it
            // (outside.rs); stated, since a lab node has no default route until then.
            .args(["--uplink-device", "ul0"])
            .args([
                "--node-name",
                &self.name,
                "--node-ip",
                &match &self.v6 {
                    Some((_, v6)) if self.tunnel_v6 => v6.to_string(),
                    _ => self.ip.to_string(),
                },
            ])
            .arg("--metrics-addr")
            .arg(format!("{}:{METRICS_PORT}", self.ip))
            .arg("--kubeconfig")
            .arg(kube)
            .arg("--sdn-kubeconfig")
            .arg(sdn)
            .args(extra)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn agent");
        *slot = Some(Proc(child));
        let t = std::time::Instant::now();
        while !sock.exists() {
            assert!(
                t.elapsed().as_secs() < 20,
                "agent on {} did not come up:\n{}",
                self.name,
                self.log_text()
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// The running agent's PID (`nsenter` execs the agent in place).
    pub fn agent_pid(&self) -> Option<u32> {
        self.agent.lock().ok()?.as_ref().map(|p| p.0.id())
    }

    /// Stops the agent (SIGKILL by PID, as a crash or a rolling update would); the datapath
    /// stays, pinned.
    pub fn stop_agent(&self) {
        self.agent.lock().expect("agent lock").take();
    }

    /// The node's pod veths (the agent's host ends, `cph…`), sorted.
    pub fn pod_veths(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .ns
            .ip_ok(&["-o", "link"])
            .lines()
            .filter_map(|l| Some(l.split(':').nth(1)?.trim().split('@').next()?.to_string()))
            .filter(|n| n.starts_with("cph"))
            .collect();
        v.sort();
        v
    }

    /// The agent's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The agent's `/metrics`, scraped over HTTP from inside the node's netns.
    pub fn metrics(&self) -> String {
        let addr = SocketAddr::from((self.ip, METRICS_PORT));
        run_in(&self.ns, || {
            let mut s = std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(5))
                .unwrap_or_else(|e| panic!("metrics {addr}: {e}"));
            s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
                .expect("timeout");
            write!(
                s,
                "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
            )
            .expect("request");
            let mut out = String::new();
            s.read_to_string(&mut out).expect("response");
            assert!(out.starts_with("HTTP/1.1 200"), "metrics {addr}: {out}");
            out
        })
    }

    /// Drop counter of one reason (packets), summed over CPUs.
    pub fn drops(&self, reason: cozyplane_bpf::DropReason) -> u64 {
        cozyplane_bpf::maps::drops::DropsMap::from_pin(&self.scratch.pins())
            .and_then(|m| m.get(reason))
            .map(|s| s.packets)
            .unwrap_or(0)
    }

    /// Where this node's datapath sends `ip` of `net`: `sdn_remotes[{net, ip}]`, and for
    /// net 0 the longest `sdn_node_blocks` match after it (as `sdn_from_pod` looks up).
    pub fn remote(&self, net: u32, ip: Ipv4Addr) -> Option<std::net::IpAddr> {
        let pins = self.scratch.pins();
        let exact = cozyplane_bpf::maps::remotes::RemotesMap::from_pin(&pins)
            .ok()?
            .get(net, ip.into())
            .ok()?;
        if exact.is_some() || net != 0 {
            return exact;
        }
        cozyplane_bpf::maps::node_blocks::NodeBlocksMap::from_pin(&pins)
            .ok()?
            .lookup(ip.into())
            .ok()?
    }
}

/// The lab topology (control plane not included: see [`run_in`]).
#[derive(Debug)]
pub struct Lab {
    /// The nodes.
    pub nodes: Vec<Node>,
    /// The control namespace.
    pub ctl: Netns,
    /// The underlay namespace (bridge `br0`).
    pub ul: Netns,
}

impl Lab {
    /// Runs `body` on a fresh lab of `nodes` nodes: [`Lab::run_on`] with [`Lab::new`].
    pub fn run(nodes: usize, body: impl AsyncFnOnce(&mut Lab) + Send) {
        Self::run_on(Lab::new(nodes), body);
    }

    /// Runs `body` on `lab` from inside its control namespace (where the control plane
    /// runs), on a two-thread runtime; the lab is torn down afterwards, also when `body`
    /// panics.
    pub fn run_on(mut lab: Lab, body: impl AsyncFnOnce(&mut Lab) + Send) {
        let ctl = Netns(lab.ctl.0.clone());
        run_in(&ctl, || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(body(&mut lab));
        });
        std::mem::forget(ctl); // the Lab owns the namespace
    }
}

impl Lab {
    /// `n` nodes and the control namespace on one underlay bridge.
    pub fn new(n: usize) -> Self {
        Self::with_bins(n, &bin_dir())
    }

    /// [`Lab::new`] whose nodes run the agent and plugin in `bins` (a bench comparing builds).
    pub fn with_bins(n: usize, bins: &Path) -> Self {
        require_root();
        let ul = Netns::new("ul");
        ul.ip_ok(&["link", "add", "br0", "type", "bridge"]);
        ul.ip_ok(&["link", "set", "br0", "up"]);
        let plug = |ns: &Netns, port: &str, ip: Ipv4Addr| {
            ul.ip_ok(&[
                "link", "add", port, "type", "veth", "peer", "name", "ul0", "netns", &ns.0,
            ]);
            ul.ip_ok(&["link", "set", port, "master", "br0", "up"]);
            ns.ip_ok(&["addr", "add", &format!("{ip}/24"), "dev", "ul0"]);
            ns.ip_ok(&["link", "set", "ul0", "up"]);
        };
        let ctl = Netns::new("ctl");
        plug(&ctl, "p-ctl", CTL_IP);
        let mut nodes = Vec::new();
        for i in 0..n {
            let ns = Netns::new(&format!("n{}", i + 1));
            let ip = Ipv4Addr::new(192, 168, 77, u8::try_from(i + 1).expect("few nodes"));
            plug(&ns, &format!("p-n{}", i + 1), ip);
            let scratch = Scratch::new();
            let log = scratch.dir.path().join("agent.log");
            // The node's disk as the chart's init container leaves it.
            install_cni_from(bins, &scratch.host_root());
            let mnt = mount_ns(&scratch.run_dir());
            nodes.push(Node {
                name: format!("n{}", i + 1),
                ip,
                block: format!("10.244.{}.0/24", i + 1),
                v6: None,
                tunnel_v6: false,
                scratch,
                agent: std::sync::Mutex::new(None),
                bins: bins.to_path_buf(),
                log,
                mnt,
                ns,
            });
        }
        Self { nodes, ctl, ul }
    }

    /// [`Lab::new`] with a dual-stack default network: each node also gets an IPv6 fabric
    /// block (`fd44:0:0:<i>::/64`; `n1` by `--fabric-block6`, the others by their Node's
    /// `spec.podCIDRs`) and an IPv6 address on the underlay (`fd77::<i>/64`) for its host
    /// stack. The tunnels stay IPv4.
    pub fn dual_stack(n: usize) -> Self {
        let mut lab = Self::new(n);
        for (i, node) in lab.nodes.iter_mut().enumerate() {
            let ip =
                std::net::Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 0, u16::try_from(i + 1).expect("few nodes"));
            node.ns
                .ip_ok(&["addr", "add", &format!("{ip}/64"), "dev", "ul0", "nodad"]);
            node.v6 = Some((format!("fd44:0:0:{}::/64", i + 1), ip));
        }
        for node in &lab.nodes {
            node.ns.wait_v6_settled();
        }
        lab
    }

    /// [`Lab::dual_stack`] whose agents tunnel over the IPv6 underlay (`--node-ip fd77::<i>`):
    /// both families of the default network and of VPCs inside IPv6 VXLAN.
    pub fn v6_underlay(n: usize) -> Self {
        let mut lab = Self::dual_stack(n);
        for node in &mut lab.nodes {
            node.tunnel_v6 = true;
        }
        lab
    }

    /// Routes every node's IPv4 fabric block from the control namespace through that node,
    /// as a control-plane host that is no node reaches pods through the nodes (the real-node
    /// lab's kube-apiserver dials pods for its `pods/proxy` and `services/proxy`).
    pub fn route_pods_from_ctl(&self) {
        for n in &self.nodes {
            self.ctl
                .ip_ok(&["route", "replace", &n.block, "via", &n.ip.to_string()]);
        }
    }

    /// [`Lab::expose`] of the port of a server's `url` (`https://127.0.0.1:<port>`).
    pub fn expose_url(&self, url: &str) {
        let port = url.rsplit(':').next().and_then(|p| p.parse::<u16>().ok());
        self.expose(port.unwrap_or_else(|| panic!("no port in {url}")));
    }

    /// Makes `127.0.0.1:<port>` of the control namespace reachable as `127.0.0.1:<port>`
    /// inside every node.
    pub fn expose(&self, port: u16) {
        let lo = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let ctl = SocketAddr::from((CTL_IP, port));
        forward(&self.ctl.path(), ctl, lo);
        for n in &self.nodes {
            forward(&n.ns.path(), lo, ctl);
        }
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for n in &self.nodes {
            if let Ok(mut a) = n.agent.lock() {
                a.take();
            }
        }
        if std::thread::panicking() {
            for n in &self.nodes {
                eprintln!("---- agent log {} ----\n{}", n.name, n.log_text());
            }
        }
    }
}

/// A pod: its netns and what ADD returned.
#[derive(Debug)]
pub struct LabPod {
    /// Pod name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// Node index.
    pub node: usize,
    /// Container id.
    pub cid: String,
    /// The Pod object's `metadata.uid` (kubelet passes it as `K8S_POD_UID`).
    pub uid: String,
    /// The ADD result.
    pub result: Value,
    /// The fabric (pod) IP.
    pub fabric: Ipv4Addr,
    /// The pod netns.
    pub ns: Netns,
}

/// Runs the plugin the CNI configuration `conf` names by its `type`, exactly as kubelet's
/// runtime does: found in the node's `CNI_PATH`, CNI_* env, config on stdin, from the node's
/// network and mount namespaces. `pod` is `(namespace, name, uid)` of the Pod object.
/// Returns (exit code, stdout JSON).
pub fn invoke_cni(
    node: &Node,
    cmd: &str,
    cid: &str,
    netns: &str,
    pod: (&str, &str, &str),
    conf: &Value,
) -> (i32, Value) {
    std::thread::scope(|s| {
        s.spawn(|| {
            node.enter();
            exec_plugin(node, cmd, cid, (netns, pod), conf)
        })
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e))
    })
}

/// Runs a plugin binary given by path, like [`invoke_cni`] otherwise (a plugin outside the
/// conflist, e.g. `/usr/lib/cni/tuning`).
pub fn invoke_plugin(
    plugin: &Path,
    node: &Node,
    cmd: &str,
    cid: &str,
    (netns, pod): (&str, (&str, &str, &str)),
    conf: &Value,
) -> (i32, Value) {
    std::thread::scope(|s| {
        s.spawn(|| {
            node.enter();
            exec(plugin, &node.cni_path(), cmd, cid, (netns, pod), conf)
        })
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e))
    })
}

/// The configuration a runtime hands plugin `i` of the conflist `list` (as libcni builds
/// it): the list's `cniVersion` and `name`, the plugin's own keys, the previous plugin's
/// result as `prevResult`, and under `runtimeConfig` the entries of `runtime` (e.g.
/// `portMappings`) that the plugin declares as capabilities.
pub fn plugin_conf(list: &Value, i: usize, prev: Option<&Value>, runtime: &Value) -> Value {
    let mut conf = list["plugins"][i].clone();
    assert!(conf.is_object(), "plugin {i} of {list}");
    conf["cniVersion"] = list["cniVersion"].clone();
    conf["name"] = list["name"].clone();
    if let Some(p) = prev {
        conf["prevResult"] = p.clone();
    }
    let mut rc = serde_json::Map::new();
    if let (Some(caps), Some(rt)) = (conf["capabilities"].as_object(), runtime.as_object()) {
        for (cap, on) in caps {
            if on.as_bool() == Some(true)
                && let Some(v) = rt.get(cap)
            {
                rc.insert(cap.clone(), v.clone());
            }
        }
    }
    if !rc.is_empty() {
        conf["runtimeConfig"] = Value::Object(rc);
    }
    conf
}

/// ADD of the node's whole conflist, as a runtime attaches a sandbox: each plugin in order,
/// found by its `type`, with the previous plugin's result as `prevResult`; the first failure
/// ends it. `runtime` holds the runtime's capability arguments (e.g. `{"portMappings":
/// [...]}`). Returns the exit code and output of the last plugin run.
pub fn add_network(
    node: &Node,
    cid: &str,
    netns: &str,
    pod: (&str, &str, &str),
    runtime: &Value,
) -> (i32, Value) {
    let list = node.conflist();
    let n = list["plugins"].as_array().map_or(0, Vec::len);
    let mut prev: Option<Value> = None;
    for i in 0..n {
        let conf = plugin_conf(&list, i, prev.as_ref(), runtime);
        let (code, out) = invoke_cni(node, "ADD", cid, netns, pod, &conf);
        if code != 0 {
            return (code, out);
        }
        prev = Some(out);
    }
    (0, prev.unwrap_or(Value::Null))
}

/// DEL of the node's whole conflist, in reverse order, with the ADD's result as
/// `prevResult` (runtimes keep it for DEL); the first failure ends it.
pub fn del_network(
    node: &Node,
    cid: &str,
    netns: &str,
    pod: (&str, &str, &str),
    (runtime, added): (&Value, Option<&Value>),
) -> (i32, Value) {
    let list = node.conflist();
    let n = list["plugins"].as_array().map_or(0, Vec::len);
    for i in (0..n).rev() {
        let conf = plugin_conf(&list, i, added, runtime);
        let (code, out) = invoke_cni(node, "DEL", cid, netns, pod, &conf);
        if code != 0 {
            return (code, out);
        }
    }
    (0, Value::Null)
}

/// Moves the calling thread into `ns` for good (a thread that stands for a process living
/// there); discard the thread afterwards. For a node's host, see [`Node::enter`].
pub fn enter(ns: &Netns) {
    let file = File::open(ns.path()).expect("open netns");
    nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
}

/// Where a runtime finds the plugin of `type` in `cni_path`: the first directory that
/// holds a file of that name.
pub fn find_plugin(cni_path: &[PathBuf], kind: &str) -> Result<PathBuf, String> {
    cni_path
        .iter()
        .map(|d| d.join(kind))
        .find(|p| !kind.is_empty() && !kind.contains('/') && p.is_file())
        .ok_or_else(|| format!("failed to find plugin {kind:?} in path {cni_path:?}"))
}

/// Runs the plugin `conf` names from the calling thread, which must be in the node
/// ([`Node::enter`]): resolved by `type` in the node's `CNI_PATH`, one exec of the plugin
/// itself, with the environment and stdin kubelet's runtime gives it. A type the path lacks
/// fails as it does for a runtime: (-1, the runtime's message).
pub fn exec_plugin(
    node: &Node,
    cmd: &str,
    cid: &str,
    (netns, pod): (&str, (&str, &str, &str)),
    conf: &Value,
) -> (i32, Value) {
    let path = node.cni_path();
    match find_plugin(&path, conf["type"].as_str().unwrap_or_default()) {
        Ok(plugin) => exec(&plugin, &path, cmd, cid, (netns, pod), conf),
        Err(msg) => (-1, Value::String(msg)),
    }
}

fn exec(
    plugin: &Path,
    cni_path: &[PathBuf],
    cmd: &str,
    cid: &str,
    (netns, pod): (&str, (&str, &str, &str)),
    conf: &Value,
) -> (i32, Value) {
    exec_as(plugin, &Invocation::kubelet(cmd, cid, netns, pod, cni_path), conf)
}

/// The `CNI_*` environment of one plugin run besides its config: what kubelet's runtime sets
/// ([`Invocation::kubelet`]), or a meta plugin such as Multus for its delegates
/// ([`multus`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invocation {
    /// `CNI_COMMAND`.
    pub cmd: String,
    /// `CNI_CONTAINERID`.
    pub cid: String,
    /// `CNI_NETNS`.
    pub netns: String,
    /// `CNI_IFNAME`.
    pub ifname: String,
    /// `CNI_ARGS`, as set (`K=V;K=V`).
    pub args: String,
    /// `CNI_PATH`, joined with `:`; also where the plugin is looked up by its `type`.
    pub cni_path: Vec<PathBuf>,
}

impl Invocation {
    /// What kubelet's runtime sets for the pod `(namespace, name, uid)`: `eth0` and
    /// [`kubelet_cni_args`].
    pub fn kubelet(cmd: &str, cid: &str, netns: &str, pod: (&str, &str, &str), cni_path: &[PathBuf]) -> Self {
        Self {
            cmd: cmd.into(),
            cid: cid.into(),
            netns: netns.into(),
            ifname: "eth0".into(),
            args: kubelet_cni_args(cid, pod),
            cni_path: cni_path.to_vec(),
        }
    }
}

/// The `CNI_ARGS` kubelet's runtime passes for the pod `(namespace, name, uid)` of sandbox `cid`.
pub fn kubelet_cni_args(cid: &str, (ns, name, uid): (&str, &str, &str)) -> String {
    format!(
        "IgnoreUnknown=1;K8S_POD_NAMESPACE={ns};K8S_POD_NAME={name};K8S_POD_INFRA_CONTAINER_ID={cid};K8S_POD_UID={uid}"
    )
}

/// Runs the plugin `conf` names by its `type` (looked up in `inv.cni_path`) from a thread
/// inside `node` ([`Node::enter`]), with `inv`'s environment and `conf` on stdin. A type the
/// path lacks fails as it does for a runtime: (-1, the runtime's message).
pub fn invoke_as(node: &Node, inv: &Invocation, conf: &Value) -> (i32, Value) {
    let plugin = match find_plugin(&inv.cni_path, conf["type"].as_str().unwrap_or_default()) {
        Ok(p) => p,
        Err(msg) => return (-1, Value::String(msg)),
    };
    std::thread::scope(|s| {
        s.spawn(|| {
            node.enter();
            exec_as(&plugin, inv, conf)
        })
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e))
    })
}

/// One exec of `plugin` from the calling thread with `inv`'s environment (and `PATH` only
/// besides) and `conf` on stdin. Returns (exit code, stdout as JSON; a string when it is not
/// JSON, null when empty).
pub fn exec_as(plugin: &Path, inv: &Invocation, conf: &Value) -> (i32, Value) {
    let cni_path = std::env::join_paths(&inv.cni_path).expect("CNI_PATH");
    let mut child = Command::new(plugin)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("CNI_COMMAND", &inv.cmd)
        .env("CNI_CONTAINERID", &inv.cid)
        .env("CNI_NETNS", &inv.netns)
        .env("CNI_IFNAME", &inv.ifname)
        .env("CNI_ARGS", &inv.args)
        .env("CNI_PATH", cni_path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {}: {e}", plugin.display()));
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(conf.to_string().as_bytes())
        .expect("write config");
    let out = child.wait_with_output().expect("cni output");
    let text = String::from_utf8_lossy(&out.stdout);
    let v = if text.trim().is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or(Value::String(text.to_string()))
    };
    (out.status.code().unwrap_or(-1), v)
}

/// The first address of a CNI result, without the prefix length.
pub fn result_ip(v: &Value) -> Option<Ipv4Addr> {
    v["ips"][0]["address"].as_str()?.split('/').next()?.parse().ok()
}

/// A tcpdump inside `ns` writing packets on `dev` that match `filter` (tcpdump syntax) to
/// `file`; returns once it listens. Stop it with [`stop_tcpdump`].
pub fn start_tcpdump(ns: &Netns, dev: &str, filter: &str, file: &Path) -> Proc {
    // -Z root: tcpdump would drop to its own user, which cannot write into our 0700 tempdir.
    let mut args = vec![
        "tcpdump",
        "--immediate-mode",
        "-Z",
        "root",
        "-n",
        "-U",
        "-i",
        dev,
        "-w",
        file.to_str().unwrap_or_default(),
    ];
    args.extend(filter.split_whitespace());
    let p = Proc(
        Command::new("nsenter")
            .arg(format!("--net={}", ns.path()))
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("tcpdump"),
    );
    // tcpdump writes the pcap header once it listens.
    let t = std::time::Instant::now();
    while std::fs::metadata(file).map(|m| m.len()).unwrap_or(0) == 0 && t.elapsed().as_secs() < 5 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    p
}

/// Stops a [`start_tcpdump`] capture so that its file is complete (SIGINT flushes it).
pub fn stop_tcpdump(mut p: Proc) {
    if let Ok(pid) = i32::try_from(p.0.id()) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGINT);
    }
    let _ = p.0.wait();
}

/// Captures on `dev` inside `ns` while `f` runs; returns the number of packets matching
/// `filter` (tcpdump syntax) that were seen.
pub fn capture(ns: &Netns, dev: &str, filter: &str, f: impl FnOnce()) -> usize {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("cap.pcap");
    let p = start_tcpdump(ns, dev, filter, &file);
    f();
    std::thread::sleep(std::time::Duration::from_millis(300));
    stop_tcpdump(p);
    let out = sh(&["tcpdump", "-n", "-r", file.to_str().unwrap_or_default()]);
    String::from_utf8_lossy(&out.stdout).lines().count()
}
