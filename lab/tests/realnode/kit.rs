//! Real nodes in the lab: on each lab node (its network namespace and its mount namespace,
//! where the agent's socket is), a containerd of its own and a kubelet of its own, joined to
//! the real control plane (`cozyplane_conformance::realkube::ControlPlane`).
//!
//! | part | how |
//! |---|---|
//! | containerd | Debian's 1.6 with runc, in a UTS namespace named after the node; own root, state, socket, opt and runc root under the node's directory; CRI plugin with `restrict_oom_score_adj` (root here lacks CAP_SYS_RESOURCE), cgroupfs, the sandbox image [`images::PAUSE`], CNI from the node's `opt/cni/bin` and `etc/cni/net.d` (what the chart's installer put there, plus the distribution's `loopback`, which containerd runs for every sandbox's `lo`); every registry's `hosts.toml` points at `127.0.0.1:1`, which refuses, so a missing image fails at once instead of being fetched |
//! | kubelet | own root dir, pod logs and volume plugin dir; eviction thresholds near nothing (100 MiB of disk: a build machine's disk 99 % full must not evict the test's pods as DiskPressure); client certificate `system:node:<name>` (`system:nodes`) and a serving certificate for the node's address, both of the cluster CA; webhook authentication and authorization; cgroupfs under its own cgroup root; `--node-ip` the node's underlay address |
//! | cgroups | `cplab-<pid>-<node>` in every cgroup v1 hierarchy: the kubelet's `cgroupRoot` (it makes `kubepods` below), and `runtime/` below it holding containerd, its shims and the kubelet |
//! | sysctls | the machine-wide ones the kubelet sets ([`KUBELET_SYSCTLS`](super::host::KUBELET_SYSCTLS)) are read before the first kubelet starts and written back when [`RealNodes`] drops |
//! | DNS | `clusterDNS` the node's own address, where the cluster DNS ([`dns::ClusterDns`]: dnsmasq, records from the Services) listens; `resolvConf` a file naming only it, so no pod is given the machine's resolvers |
//!
//! [`RealNode::restart_containerd`] stops a node's containerd with SIGTERM by PID (its shims
//! and containers stay) and starts it again with the same configuration;
//! [`Cluster::start_agent`] starts a node's agent again after the test stopped it.
//!
//! [`Cluster::start`] is the whole set-up the real-node tests share: the control plane with
//! kubelets in mind (kube-scheduler included), cozyplane-apiserver installed behind it, the
//! lab's agents, the cluster DNS, the images, and a real node on every lab node, Ready.
//!
//! Dropping a [`RealNode`] (also while a test panics) SIGKILLs the kubelet by PID, removes
//! every sandbox through the CRI (`crictl rmp -af`, bounded: CNI DEL for each, the shims
//! exit), SIGKILLs containerd by PID, then every process left in its cgroups (shims,
//! containers) by PID until they are empty, removes the cgroups (the v1 hierarchies and
//! the cgroup2 one, where runc also makes them) and the sockets of the shims it killed,
//! unmounts in the node's mount namespace whatever is mounted under its directory or as a
//! sandbox netns (`/run/netns/cni-*`), and deletes the netns files containerd made. Its
//! directory goes last. Kubelets and containerd run in the node's mount namespace, so none
//! of their mounts reaches the host's.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use cozyplane_conformance::realkube::cozy::Cozyplane;
use cozyplane_conformance::realkube::{self, ControlPlane, Options, Proc};
use cozyplane_lab::{Lab, Node};

use super::host::{Cgroup, Sysctls, shim_sockets};
use super::images;

/// The cluster DNS (dnsmasq on each node, records from the Services).
#[path = "dns.rs"]
pub(crate) mod dns;

/// Registries whose `hosts.toml` refuses (containerd 1.6 has no `_default`; it is written
/// too, for later versions).
const REGISTRIES: &[&str] = &[
    "_default",
    "registry.k8s.io",
    "k8s.gcr.io",
    "gcr.io",
    "docker.io",
    "quay.io",
    "ghcr.io",
    "mcr.microsoft.com",
];

/// A kubelet and a containerd on one lab node.
pub(crate) struct RealNode {
    /// The node's name (its Node object's).
    pub(crate) name: String,
    kubelet: Option<Proc>,
    containerd: Option<Proc>,
    cgroup: Cgroup,
    /// The node's mount namespace (`/proc/<holder>/ns/mnt`).
    mnt_ns: PathBuf,
    netns_before: HashSet<String>,
    /// Everything of this node: configs, containerd's root and state, the kubelet's root.
    pub(crate) dir: tempfile::TempDir,
}

fn netns_files() -> HashSet<String> {
    std::fs::read_dir("/run/netns")
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("cni-"))
                .collect()
        })
        .unwrap_or_default()
}

/// `sh -c` that writes its own PID into every file of `procs` (cgroup.procs), then execs
/// `nsenter --net --mount` into `node` running `argv`.
fn in_node(node: &Node, procs: &[PathBuf], argv: &[String]) -> Command {
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg(r#"while [ "$1" != -- ]; do echo $$ > "$1" || exit 1; shift; done; shift; exec "$@""#)
        .arg("sh")
        .args(procs)
        .arg("--")
        .arg("nsenter")
        .arg(format!("--net={}", node.ns.path()))
        .arg(format!("--mount={}", node.mnt_ns().display()))
        .args(argv);
    c
}

impl RealNode {
    /// Starts containerd on `node`, imports `images` into it, then starts the kubelet. Returns
    /// once both run (the Node's readiness is [`RealNodes::wait_ready`]'s).
    pub(crate) fn start(cp: &ControlPlane, node: &Node, images: &[(&str, PathBuf)]) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("cplab-rn-")
            .tempdir_in("/tmp")
            .expect("node dir");
        let d = dir.path().to_path_buf();
        let cgroup = Cgroup::create(&format!("cplab-{}-{}", std::process::id() % 100_000, node.name));
        let mut rn = Self {
            name: node.name.clone(),
            kubelet: None,
            containerd: None,
            cgroup,
            mnt_ns: node.mnt_ns(),
            netns_before: netns_files(),
            dir,
        };
        // The CNI directory as a node's: the chart's installer put our plugin and portmap
        // there (Lab::new); the distribution's loopback, which containerd runs for `lo`.
        let cni_bin = node.scratch.host_root().join("opt/cni/bin");
        std::fs::copy(
            Path::new(cozyplane_lab::SYSTEM_CNI_DIR).join("loopback"),
            cni_bin.join("loopback"),
        )
        .expect("copy loopback (containernetworking-plugins)");
        let sock = d.join("containerd.sock");
        for r in REGISTRIES {
            let rd = d.join("certs.d").join(r);
            std::fs::create_dir_all(&rd).expect("certs.d");
            std::fs::write(
                rd.join("hosts.toml"),
                "server = \"https://127.0.0.1:1\"\n\n[host.\"https://127.0.0.1:1\"]\n  capabilities = [\"pull\", \"resolve\"]\n",
            )
            .expect("hosts.toml");
        }
        let config = format!(
            r#"version = 2
root = "{root}"
state = "{state}"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "{sock}"
[ttrpc]
  address = "{sock}.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{opt}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause}"
  restrict_oom_score_adj = true
  disable_apparmor = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{runc}"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{cni_bin}"
    conf_dir = "{cni_conf}"
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{certs}"
"#,
            root = d.join("containerd/root").display(),
            state = d.join("containerd/state").display(),
            sock = sock.display(),
            opt = d.join("containerd/opt").display(),
            runc = d.join("containerd/runc").display(),
            pause = images::PAUSE,
            cni_bin = cni_bin.display(),
            cni_conf = node.scratch.host_root().join("etc/cni/net.d").display(),
            certs = d.join("certs.d").display(),
        );
        std::fs::write(d.join("containerd.toml"), config).expect("containerd.toml");
        rn.spawn_containerd(node);
        for (reference, archive) in images {
            let out = rn.ctr(&["images", "import", &archive.display().to_string()]);
            assert!(
                out.status.success(),
                "import {reference} on {}: {}",
                node.name,
                String::from_utf8_lossy(&out.stderr)
            );
        }

        // The kubelet.
        let pki = &cp.pki;
        let serving = pki
            .ca
            .serving(
                &format!("system:node:{}", node.name),
                &[&node.name],
                &[std::net::IpAddr::V4(node.ip)],
            )
            .expect("kubelet serving certificate");
        let write = |name: &str, text: &str| {
            let p = d.join(name);
            std::fs::write(&p, text).expect("write kubelet file");
            p
        };
        let ca = write("ca.crt", &pki.ca.cert);
        let crt = write("kubelet.crt", &serving.cert);
        let key = write("kubelet.key", &serving.key);
        let kubeconfig = cp.user_kubeconfig(
            &format!("system:node:{}", node.name),
            &["system:nodes"],
            "default",
        );
        let kubelet_root = d.join("kubelet");
        std::fs::create_dir_all(&kubelet_root).expect("kubelet root");
        // The node's resolvers as its pods see them (`dnsPolicy: Default`, host network):
        // the cluster DNS only, never the machine's.
        let resolv = write("resolv.conf", &format!("nameserver {}\n", node.ip));
        let config = format!(
            r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: {ip}
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: true}}
  x509: {{clientCAFile: "{ca}"}}
authorization:
  mode: Webhook
tlsCertFile: "{crt}"
tlsPrivateKeyFile: "{key}"
cgroupDriver: cgroupfs
cgroupRoot: "{cgroot}"
failCgroupV1: false
failSwapOn: false
makeIPTablesUtilChains: false
protectKernelDefaults: false
oomScoreAdj: 0
containerRuntimeEndpoint: "unix://{sock}"
podLogsDir: "{logs}"
volumePluginDir: "{plugins}"
resolvConf: "{resolv}"
clusterDomain: {domain}
clusterDNS: ["{ip}"]
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {{"memory.available": "1Mi", "nodefs.available": "100Mi", "nodefs.inodesFree": "1%", "imagefs.available": "100Mi"}}
nodeStatusReportFrequency: 10s
"#,
            ip = node.ip,
            ca = ca.display(),
            crt = crt.display(),
            key = key.display(),
            cgroot = rn.cgroup.root(),
            sock = sock.display(),
            logs = d.join("pod-logs").display(),
            resolv = resolv.display(),
            domain = dns::DOMAIN,
            plugins = d.join("volume-plugins").display(),
        );
        let config = write("kubelet.yaml", &config);
        let kubelet = cozyplane_conformance::realkube::binary("kubelet")
            .unwrap_or_else(|e| panic!("kubelet from KUBE_BIN_DIR: {e}"));
        let procs = rn.cgroup.runtime_procs();
        rn.kubelet = Some(Proc::spawn(
            &format!("kubelet {}", node.name),
            in_node(
                node,
                &procs,
                &[
                    kubelet.display().to_string(),
                    format!("--config={}", config.display()),
                    format!("--kubeconfig={}", kubeconfig.display()),
                    format!("--root-dir={}", kubelet_root.display()),
                    format!("--hostname-override={}", node.name),
                    // Both families on a dual-stack lab: the kubelet then reports both
                    // InternalIPs, and each pod's two addresses.
                    match &node.v6 {
                        Some((_, v6)) => format!("--node-ip={},{v6}", node.ip),
                        None => format!("--node-ip={}", node.ip),
                    },
                    "--v=2".into(),
                ],
            ),
            &d.join("kubelet.log"),
        ));
        rn
    }

    /// Starts containerd with the node's `containerd.toml`, in its runtime cgroup, and waits
    /// until it answers.
    fn spawn_containerd(&mut self, node: &Node) {
        let d = self.dir.path();
        self.containerd = Some(Proc::spawn(
            &format!("containerd {}", node.name),
            in_node(
                node,
                &self.cgroup.runtime_procs(),
                &[
                    // A UTS namespace of its own named after the node: its host-network pods
                    // (which share it) answer with their node's name, as on a real node; the
                    // suite's hostNetwork checks compare hostnames with node names. `unshare`
                    // and `sh` exec in place: the PID stays containerd's.
                    "unshare".into(),
                    "--uts".into(),
                    "--".into(),
                    "sh".into(),
                    "-c".into(),
                    r#"hostname "$0" && exec "$@""#.into(),
                    node.name.clone(),
                    "containerd".into(),
                    "--config".into(),
                    d.join("containerd.toml").display().to_string(),
                ],
            ),
            &d.join("containerd.log"),
        ));
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.ctr(&["version"]).status.success() {
            assert!(
                Instant::now() < deadline,
                "containerd on {} did not answer:\n{}",
                node.name,
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stops containerd as an operator or a package upgrade does (SIGTERM by PID, then waits
    /// for it to exit; its shims and containers stay), then starts it again with the same
    /// configuration and waits until it answers. Returns how long it was stopped for and how
    /// long the start took.
    #[allow(dead_code, reason = "not every real-node test binary restarts containerd")]
    pub(crate) fn restart_containerd(&mut self, node: &Node) -> (Duration, Duration) {
        let proc = self.containerd.as_mut().expect("containerd runs");
        let pid = proc.id().expect("containerd's PID");
        // `sh`, `nsenter` and `unshare` exec in place: the PID is containerd's.
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        assert_eq!(comm.trim(), "containerd", "PID {pid} of {}", self.name);
        let stopping = Instant::now();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(pid).expect("PID")),
            nix::sys::signal::Signal::SIGTERM,
        )
        .expect("SIGTERM containerd");
        let deadline = stopping + Duration::from_secs(30);
        while proc.exited().is_none() {
            assert!(
                Instant::now() < deadline,
                "containerd on {} (PID {pid}) did not exit 30 s after SIGTERM:\n{}",
                self.name,
                proc.tail()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let stopped = stopping.elapsed();
        let starting = Instant::now();
        self.spawn_containerd(node);
        (stopped, starting.elapsed())
    }

    /// `crictl --runtime-endpoint <socket> --timeout 20s <args>`, bounded by `timeout 30`.
    pub(crate) fn crictl(&self, args: &[&str]) -> std::process::Output {
        let crictl = cozyplane_conformance::realkube::binary("crictl")
            .unwrap_or_else(|e| panic!("crictl from KUBE_BIN_DIR: {e}"));
        let endpoint = format!("unix://{}", self.dir.path().join("containerd.sock").display());
        Command::new("timeout")
            .arg("30")
            .arg(crictl)
            .args(["--runtime-endpoint", &endpoint, "--timeout", "20s"])
            .args(args)
            .output()
            .expect("crictl runs")
    }

    /// The ids of the pod sandboxes containerd knows (`crictl pods -q`), `ready` ones only if
    /// asked, sorted.
    #[allow(dead_code, reason = "not every real-node test binary looks at sandboxes")]
    pub(crate) fn sandboxes(&self, ready: bool) -> Vec<String> {
        let mut args = vec!["pods", "-q"];
        if ready {
            args.extend(["--state", "ready"]);
        }
        let out = self.crictl(&args);
        assert!(
            out.status.success(),
            "crictl pods on {}: {}",
            self.name,
            String::from_utf8_lossy(&out.stderr)
        );
        let mut ids: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(str::to_string)
            .collect();
        ids.sort();
        ids
    }

    /// `ctr --address <socket> -n k8s.io <args>`.
    pub(crate) fn ctr(&self, args: &[&str]) -> std::process::Output {
        Command::new("ctr")
            .arg("--address")
            .arg(self.dir.path().join("containerd.sock"))
            .args(["--namespace", "k8s.io"])
            .args(args)
            .output()
            .expect("ctr runs")
    }

    /// The ends of the kubelet's and containerd's logs.
    pub(crate) fn logs(&self) -> String {
        let mut s = String::new();
        for p in [&self.containerd, &self.kubelet].into_iter().flatten() {
            s.push_str(&p.tail());
            s.push('\n');
        }
        s
    }

    /// Mounts in the node's mount namespace that are this node's: under its directory, or a
    /// sandbox's netns.
    fn own_mounts(&self) -> Vec<String> {
        // `/proc/<holder>/ns/mnt` → `/proc/<holder>/mountinfo`.
        let info = self
            .mnt_ns
            .ancestors()
            .nth(2)
            .and_then(|proc| std::fs::read_to_string(proc.join("mountinfo")).ok())
            .unwrap_or_default();
        let dir = self.dir.path().display().to_string();
        let mut v: Vec<String> = info
            .lines()
            .filter_map(|l| l.split(' ').nth(4).map(str::to_string))
            .filter(|m| {
                m.starts_with(&dir)
                    || m.starts_with("/run/netns/cni-")
                    || m.starts_with("/var/run/netns/cni-")
            })
            .collect();
        v.sort_by_key(|m| std::cmp::Reverse(m.len()));
        v
    }
}

impl Drop for RealNode {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("---- real node {} ----\n{}", self.name, self.logs());
        }
        self.kubelet.take();
        // Every sandbox stopped and removed through the CRI while containerd runs (CNI DEL
        // for each; the shims exit and remove their sockets), bounded for a broken node.
        if cozyplane_conformance::realkube::binary("crictl").is_ok() {
            let _ = self.crictl(&["rmp", "-a", "-f"]);
        }
        self.containerd.take();
        // Shims and containers: every process left in the node's cgroups, by PID.
        let sockets = shim_sockets(&self.cgroup.pids());
        self.cgroup.destroy();
        for s in sockets {
            let _ = std::fs::remove_file(s);
        }
        for m in self.own_mounts() {
            let _ = Command::new("nsenter")
                .arg(format!("--mount={}", self.mnt_ns.display()))
                .args(["umount", "-l", &m])
                .output();
        }
        for n in netns_files().difference(&self.netns_before) {
            let _ = std::fs::remove_file(Path::new("/run/netns").join(n));
        }
    }
}

/// The real nodes of a lab, and the machine's sysctls as they were before their kubelets.
/// Fields drop in order: the nodes, then the sysctls are written back.
pub(crate) struct RealNodes {
    /// One per lab node.
    pub(crate) nodes: Vec<RealNode>,
    _sysctls: Sysctls,
    _var_lib_kubelet: VarLibKubelet,
}

/// The kubelet makes `/var/lib/kubelet/device-plugins` whatever its `--root-dir` (the device
/// manager's socket directory is fixed): removed on drop if it was not there before.
struct VarLibKubelet(bool);

impl Drop for VarLibKubelet {
    fn drop(&mut self) {
        if !self.0 {
            let _ = std::fs::remove_dir_all("/var/lib/kubelet");
        }
    }
}

impl RealNodes {
    /// [`RealNode::start`] on every node of `nodes`.
    pub(crate) fn start(cp: &ControlPlane, nodes: &[Node], images: &[(&str, PathBuf)]) -> Self {
        let mut rn = Self {
            nodes: Vec::new(),
            _sysctls: Sysctls::save(),
            _var_lib_kubelet: VarLibKubelet(Path::new("/var/lib/kubelet").exists()),
        };
        for n in nodes {
            rn.nodes.push(RealNode::start(cp, n, images));
        }
        rn
    }

    /// Waits until every node's Node object is `Ready`; panics with the logs after 90 s.
    pub(crate) async fn wait_ready(&self, cp: &ControlPlane) {
        let deadline = Instant::now() + Duration::from_secs(90);
        for n in &self.nodes {
            loop {
                let out = cp
                    .kubectl(
                        &cp.admin,
                        &[
                            "get",
                            "node",
                            &n.name,
                            "-o",
                            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
                        ],
                    )
                    .await;
                if String::from_utf8_lossy(&out.stdout).trim() == "True" {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "node {} not Ready after 90 s\n{}\n{}",
                    n.name,
                    n.logs(),
                    cp.logs()
                );
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    }
}

/// A real-node cluster on a lab: the real control plane (with kube-scheduler) and
/// cozyplane-apiserver behind it, the lab's agents talking to kube-apiserver, the cluster
/// DNS, and a [`RealNode`] on every lab node. Fields drop in order: the real nodes (kubelets,
/// containerd, their pods), the cluster DNS, the images, our server, the control plane; the
/// agents are the lab's.
pub(crate) struct Cluster {
    /// The kubelets and containerds.
    pub(crate) rn: RealNodes,
    /// dnsmasq on every node, and the watch feeding it.
    #[allow(dead_code, reason = "not every real-node test binary looks at the DNS")]
    pub(crate) dns: dns::ClusterDns,
    _images: tempfile::TempDir,
    _cozy: Cozyplane,
    /// kube-apiserver, kube-controller-manager, kube-scheduler.
    pub(crate) cp: ControlPlane,
}

impl Cluster {
    /// Starts everything on `lab` and returns once every Node is `Ready`; prints how long
    /// each part took.
    pub(crate) async fn start(lab: &Lab) -> Self {
        let bins = realkube::bins().unwrap_or_else(|e| panic!("the real-node lab cannot run: {e}"));
        let t0 = Instant::now();
        let dual_stack = lab.nodes.iter().any(|n| n.v6.is_some());
        let cp = ControlPlane::start_with(
            &bins,
            Options {
                kubelets: true,
                dual_stack,
            },
        )
        .await;
        lab.expose_url(&cp.url);
        lab.route_pods_from_ctl();
        let cozy = cp.install_cozyplane(&[]).await;
        eprintln!("control plane and cozyplane-apiserver up in {:?}", t0.elapsed());
        let kube = cp.client(&cp.admin).await;
        for n in &lab.nodes {
            n.register(&kube).await;
            start_agent(&cp, n);
        }
        let dns = dns::ClusterDns::start(&cp, &lab.nodes).await;
        let images = tempfile::tempdir().expect("images dir");
        let archives = images::build(images.path());
        let t1 = Instant::now();
        let rn = RealNodes::start(&cp, &lab.nodes, &archives);
        rn.wait_ready(&cp).await;
        eprintln!(
            "{} real nodes Ready {:?} after containerd started",
            rn.nodes.len(),
            t1.elapsed()
        );
        Self {
            rn,
            dns,
            _images: images,
            _cozy: cozy,
            cp,
        }
    }

    /// The ends of every real node's logs.
    pub(crate) fn node_logs(&self) -> String {
        self.rn.nodes.iter().map(RealNode::logs).collect()
    }

    /// Starts `node`'s agent as [`Cluster::start`] does (a running one is SIGKILLed first);
    /// returns once its CNI socket is bound.
    #[allow(dead_code, reason = "not every real-node test binary restarts agents")]
    pub(crate) fn start_agent(&self, node: &Node) {
        start_agent(&self.cp, node);
    }
}

/// `node`'s agent with both API groups through kube-apiserver (ours by aggregation), as in a
/// cluster: the admin's kubeconfig for `--kubeconfig` and `--sdn-kubeconfig`.
fn start_agent(cp: &ControlPlane, node: &Node) {
    // The cluster's Service proxy, as the chart runs it: no kube-proxy runs here. Its Service
    // ranges are cluster-internal (never masqueraded).
    let ranges = match &node.v6 {
        Some(_) => format!(
            "{},{}",
            realkube::SERVICE_RANGE_WITH_KUBELETS,
            realkube::SERVICE_RANGE6_WITH_KUBELETS
        ),
        None => realkube::SERVICE_RANGE_WITH_KUBELETS.to_string(),
    };
    node.start_agent_with(
        &cp.admin,
        &cp.admin,
        &["--kube-proxy-replacement", "--service-cidr", &ranges],
    );
}
