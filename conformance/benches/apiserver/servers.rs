//! The two servers under test, each a child process on a fresh private etcd: the Go peer
//! (`sample-apiserver`, k8s.io/apiserver's reference aggregated server, kind `Flunder`) and the
//! release `cozyplane-apiserver` in `--standalone` mode. Also what the bench reads about them
//! from outside: RSS and CPU time from `/proc/<pid>`, etcd's revision and CPU time from its
//! `/metrics`, and [`Server::settle`], which waits until server and store are idle.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cozyplane_conformance::realkube::{self, Proc, pki::Pki};
use cozyplane_storage::testing::EtcdServer;
use serde_json::{Value, json};

use crate::client::{Client, Creds};

/// Which implementation a server is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Peer {
    /// `sample-apiserver` v1.36 (k8s.io/apiserver).
    Go,
    /// `cozyplane-apiserver`.
    Ours,
}

impl Peer {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Peer::Go => "Go",
            Peer::Ours => "ours",
        }
    }
}

/// A server under test with its own etcd; both are stopped by PID when dropped (server first:
/// fields drop in declaration order).
pub(crate) struct Server {
    pub(crate) peer: Peer,
    proc: Proc,
    pid: u32,
    pub(crate) addr: SocketAddr,
    pub(crate) creds: Creds,
    etcd: EtcdServer,
    _dir: tempfile::TempDir,
}

const GO_ADMISSION_OFF: &str = "NamespaceLifecycle,MutatingAdmissionPolicy,MutatingAdmissionWebhook,ValidatingAdmissionPolicy,ValidatingAdmissionWebhook";

/// A syntactically valid kubeconfig pointing at a port nobody listens on: sample-apiserver
/// insists on its three kubeconfig flags even when it never needs the cluster (README of
/// `../shared/kube`).
const DEAD_KUBECONFIG: &str = "apiVersion: v1
kind: Config
clusters:
- name: none
  cluster:
    server: https://127.0.0.1:1
    insecure-skip-tls-verify: true
contexts:
- name: none
  context:
    cluster: none
    user: none
current-context: none
users:
- name: none
  user: {}
";

impl Server {
    /// `sample-apiserver` at `bin` on a fresh etcd, serving a certificate of a fresh CA and
    /// trusting that CA's `system:masters` client certificate; waits until Flunders are served.
    pub(crate) async fn start_go(bin: &Path) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let etcd = EtcdServer::start();
        let pki = Pki::mint().expect("PKI");
        let file = |name: &str, text: &str| -> PathBuf {
            let p = dir.path().join(name);
            std::fs::write(&p, text).expect("write");
            p
        };
        let ca = file("ca.crt", &pki.ca.cert);
        let cert = file("tls.crt", &pki.apiserver.cert);
        let key = file("tls.key", &pki.apiserver.key);
        let dead = file("dead.kubeconfig", DEAD_KUBECONFIG);
        let port = realkube::free_port();
        let mut cmd = Command::new(bin);
        cmd.arg(format!("--etcd-servers={}", etcd.client_url))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--secure-port={port}"))
            .arg(format!("--cert-dir={}", dir.path().join("certs").display()))
            .arg(format!("--tls-cert-file={}", cert.display()))
            .arg(format!("--tls-private-key-file={}", key.display()))
            .arg(format!("--client-ca-file={}", ca.display()))
            .arg(format!("--authentication-kubeconfig={}", dead.display()))
            .arg(format!("--authorization-kubeconfig={}", dead.display()))
            .arg(format!("--kubeconfig={}", dead.display()))
            .arg("--authentication-skip-lookup")
            .arg("--authorization-always-allow-paths=/*")
            .arg(format!("--disable-admission-plugins={GO_ADMISSION_OFF}"))
            .arg("--enable-priority-and-fairness=false");
        let mut proc = Proc::spawn("sample-apiserver", cmd, &dir.path().join("server.log"));
        let pid = proc.id().expect("running");
        let creds = Creds {
            ca: pki.ca.cert.into_bytes(),
            cert: pki.admin.cert.into_bytes(),
            key: pki.admin.key.into_bytes(),
        };
        let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port);
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            if let Some(st) = proc.exited() {
                panic!("sample-apiserver exited ({st}) during start-up\n{}", proc.tail());
            }
            if let Ok(c) = Client::connect(&creds, addr, 1).await {
                let (code, _) = c
                    .call(
                        "GET",
                        "/apis/wardle.example.com/v1alpha1/namespaces/bench/flunders?limit=1",
                        None,
                    )
                    .await;
                if code == 200 {
                    break;
                }
            }
            assert!(
                Instant::now() < deadline,
                "sample-apiserver not ready in 90 s\n{}",
                proc.tail()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Self {
            peer: Peer::Go,
            proc,
            pid,
            addr,
            creds,
            etcd,
            _dir: dir,
        }
    }

    /// The release `cozyplane-apiserver` at `bin` in `--standalone` mode on a fresh etcd, with
    /// the namespaces the bench writes into.
    pub(crate) async fn start_ours(bin: &Path) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let etcd = EtcdServer::start();
        let kubeconfig = dir.path().join("kubeconfig");
        let mut cmd = Command::new(bin);
        cmd.arg("--secure-port=0")
            .arg("--standalone")
            .arg(format!("--write-kubeconfig={}", kubeconfig.display()))
            .arg(format!("--data-dir={}", dir.path().join("data").display()))
            .arg(format!("--etcd-servers={}", etcd.client_url))
            .env("RUST_LOG", "warn");
        let mut proc = Proc::spawn("cozyplane-apiserver", cmd, &dir.path().join("server.log"));
        let pid = proc.id().expect("running");
        let deadline = Instant::now() + Duration::from_secs(60);
        let port = loop {
            if let Some(st) = proc.exited() {
                panic!(
                    "cozyplane-apiserver exited ({st}) during start-up\n{}",
                    proc.tail()
                );
            }
            if let Ok(kc) = std::fs::read_to_string(&kubeconfig)
                && let Some(p) = kc
                    .lines()
                    .find_map(|l| l.trim().strip_prefix("server: https://127.0.0.1:"))
                    .and_then(|p| p.parse::<u16>().ok())
            {
                break p;
            }
            assert!(
                Instant::now() < deadline,
                "no kubeconfig in 60 s\n{}",
                proc.tail()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let s = Self {
            peer: Peer::Ours,
            proc,
            pid,
            addr: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port),
            creds: Creds::from_kubeconfig(&kubeconfig),
            etcd,
            _dir: dir,
        };
        let c = s.client(1).await;
        for ns in ["bench", "warm", "settle"] {
            let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
            // A loaded machine can make etcd time out (503): retry the set-up, never the
            // measured requests.
            let mut tries = 0;
            loop {
                let (code, b) = c.call("POST", "/api/v1/namespaces", Some(&body)).await;
                tries += 1;
                if code == 201 {
                    break;
                }
                assert!(
                    code == 503 && tries < 10,
                    "namespace {ns}: {code} {}",
                    String::from_utf8_lossy(&b)
                );
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
        s
    }

    /// A client with `n` connections.
    pub(crate) async fn client(&self, n: usize) -> Arc<Client> {
        Arc::new(
            Client::connect(&self.creds, self.addr, n)
                .await
                .unwrap_or_else(|e| panic!("{e}\n{}", self.proc.tail())),
        )
    }

    /// Resident set size of the server process, in KiB.
    pub(crate) fn rss_kib(&self) -> u64 {
        rss_kib(self.pid)
    }

    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// Waits until server and etcd are idle: over one second, etcd's revision did not move and
    /// neither process used more than [`IDLE_CPU`] of a core. Returns the time from `from` to
    /// the start of that quiet second, or `None` if it never came (hang guard: 600 s).
    pub(crate) async fn settle(&self, from: Instant) -> Option<Duration> {
        const STEP: Duration = Duration::from_millis(250);
        const WINDOW: usize = 4;
        let mut hist: Vec<(Instant, u64, f64, f64)> = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(600);
        while Instant::now() < deadline {
            let (rev, etcd_cpu) = etcd_metrics(&self.etcd.client_url);
            hist.push((Instant::now(), rev, cpu_seconds(self.pid), etcd_cpu));
            if hist.len() > WINDOW {
                let a = hist[hist.len() - 1 - WINDOW];
                let b = hist[hist.len() - 1];
                let secs = b.0.duration_since(a.0).as_secs_f64();
                if a.1 == b.1 && (b.2 - a.2) <= IDLE_CPU * secs && (b.3 - a.3) <= IDLE_CPU * secs {
                    return Some(a.0.saturating_duration_since(from));
                }
            }
            tokio::time::sleep(STEP).await;
        }
        None
    }
}

/// A process counts as idle below this share of one core.
pub(crate) const IDLE_CPU: f64 = 0.05;

/// `VmRSS` of `pid` in KiB (0 once it is gone).
pub(crate) fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// User plus system CPU time of `pid`, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start at field 3 (state).
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime is field 14 and stime field 15: indices 11 and 12 here; USER_HZ is 100 on Linux.
    (ticks(11) + ticks(12)) / 100.0
}

/// What server and etcd had spent at one moment: CPU seconds of each, etcd's revision and the
/// gRPC calls etcd had answered, by method. Two of them give a batch's cost per request.
#[derive(Clone, Debug, Default)]
pub(crate) struct Spent {
    pub(crate) server_cpu: f64,
    pub(crate) etcd_cpu: f64,
    pub(crate) revision: u64,
    /// `grpc_server_handled_total` of unary calls and `grpc_server_msg_received_total` of
    /// streams, summed per method, e.g. `Txn` or `Range`.
    pub(crate) calls: BTreeMap<String, f64>,
}

impl Spent {
    /// Per-request cost between `self` and a later `end`, for `n` requests: server and etcd
    /// CPU in ms, etcd revisions, and etcd calls by method (only the ones that moved).
    pub(crate) fn per_request(&self, end: &Spent, n: usize) -> String {
        let n = n.max(1) as f64;
        let mut out = format!(
            "server {:.3} ms CPU, etcd {:.3} ms CPU, {:.2} etcd revisions",
            (end.server_cpu - self.server_cpu) * 1e3 / n,
            (end.etcd_cpu - self.etcd_cpu) * 1e3 / n,
            end.revision.saturating_sub(self.revision) as f64 / n,
        );
        for (method, v) in &end.calls {
            let d = v - self.calls.get(method).copied().unwrap_or(0.0);
            if d > 0.0 {
                out += &format!(", {method} {:.2}", d / n);
            }
        }
        out
    }
}

impl Server {
    /// What server and etcd have spent so far.
    pub(crate) fn spent(&self) -> Spent {
        let text = etcd_scrape(&self.etcd.client_url);
        let (revision, etcd_cpu) = etcd_metrics_of(&text);
        let mut calls = BTreeMap::new();
        for l in text.lines() {
            // A unary call is counted once it is answered, a stream by the messages it sent.
            let counted = if l.contains("grpc_type=\"unary\"") {
                l.starts_with("grpc_server_handled_total{")
            } else {
                l.starts_with("grpc_server_msg_received_total{")
            };
            let Some(method) = counted.then(|| l.split("grpc_method=\"").nth(1)).flatten() else {
                continue;
            };
            let method = method.split('"').next().unwrap_or_default();
            if let Some(v) = l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) {
                *calls.entry(method.to_string()).or_default() += v;
            }
        }
        Spent {
            server_cpu: cpu_seconds(self.pid),
            etcd_cpu,
            revision,
            calls,
        }
    }
}

/// etcd's Prometheus `/metrics` text (empty when it does not answer).
fn etcd_scrape(client_url: &str) -> String {
    let hostport = client_url.trim_start_matches("http://");
    let mut text = String::new();
    if let Ok(mut s) = TcpStream::connect(hostport) {
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        let _ = s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n");
        let _ = s.read_to_string(&mut text);
    }
    text
}

/// etcd's current revision and its process CPU seconds, from its Prometheus `/metrics`.
fn etcd_metrics(client_url: &str) -> (u64, f64) {
    etcd_metrics_of(&etcd_scrape(client_url))
}

fn etcd_metrics_of(text: &str) -> (u64, f64) {
    let metric = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
            .and_then(|v| v.trim().parse::<f64>().ok())
    };
    let rev = metric("etcd_debugging_mvcc_current_revision").expect("etcd revision in /metrics");
    let cpu = metric("process_cpu_seconds_total").expect("etcd CPU in /metrics");
    (rev as u64, cpu)
}

/// Which objects each server stores: the plain kind is `Flunder` on the Go peer (its only
/// kind) and `FloatingIP` on ours (no allocator, no controller reacting to it).
impl Server {
    fn group(&self) -> &'static str {
        match self.peer {
            Peer::Go => "/apis/wardle.example.com/v1alpha1",
            Peer::Ours => "/apis/sdn.cozystack.io/v1alpha1",
        }
    }

    /// The collection of the plain kind in namespace `ns`.
    pub(crate) fn plain_path(&self, ns: &str) -> String {
        match self.peer {
            Peer::Go => format!("{}/namespaces/{ns}/flunders", self.group()),
            Peer::Ours => format!("{}/namespaces/{ns}/floatingips", self.group()),
        }
    }

    /// A plain object named `name` (`i` varies its content the way a real workload would).
    pub(crate) fn plain(&self, name: &str, i: usize) -> Value {
        match self.peer {
            // The same content as ours (a reference and an address), so both servers store,
            // list and watch objects of a like size, managedFields included (an empty spec
            // would leave Go's objects without any).
            Peer::Go => json!({
                "apiVersion": "wardle.example.com/v1alpha1",
                "kind": "Flunder",
                "metadata": { "name": name },
                "spec": {
                    "reference": format!("10.{}.{}.{}", 1 + i / 62_500, (i / 250) % 250, 1 + i % 250),
                    "referenceType": "Flunder",
                },
            }),
            Peer::Ours => json!({
                "apiVersion": "sdn.cozystack.io/v1alpha1",
                "kind": "FloatingIP",
                "metadata": { "name": name },
                "spec": {
                    "vpcRef": { "name": "vpc" },
                    "target": format!("10.{}.{}.{}", 1 + i / 62_500, (i / 250) % 250, 1 + i % 250),
                },
            }),
        }
    }

    /// Cluster-scoped Ports (ours only).
    pub(crate) fn ports_path(&self) -> String {
        format!("{}/ports", self.group())
    }

    /// VPCs in `ns` (ours only).
    pub(crate) fn vpcs_path(&self, ns: &str) -> String {
        format!("{}/namespaces/{ns}/vpcs", self.group())
    }

    /// VPCBindings in `ns` (ours only).
    pub(crate) fn bindings_path(&self, ns: &str) -> String {
        format!("{}/namespaces/{ns}/vpcbindings", self.group())
    }
}
