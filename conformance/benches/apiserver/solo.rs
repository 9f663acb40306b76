//! The single-server report of issue 3 (`BENCH_SOLO=embedded,etcd`): the release
//! `cozyplane-apiserver` binary as a child process, on the embedded store and on a private etcd,
//! driven over HTTPS/HTTP2 with the admin client certificate of `--standalone`.
//!
//! Measures (figures in docs/benchmarks.md, "API server alone on each backend (issue 3)"):
//! - create / get / list latency (p50, p99) and throughput, `CONCURRENCY` requests in flight;
//! - watch fan-out: `WATCHERS` watches on ports filtered by `spec.node=node-<i % 100>`, then Port
//!   writes; delivery latency from the write's response to the event's arrival, and server RSS;
//! - server RSS with `STORED` Ports stored, before and after a full list.
//!
//! `BENCH_STORED=<n>` changes the stored-object count; `BENCH_PAGE_LISTS=<n>` the number of
//! `limit=500` first-page lists (default 5,000).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cozyplane_storage::testing::EtcdServer;
use http_body_util::BodyExt;
use serde_json::{Value, json};

use crate::client::{Client, Creds};
use crate::env_count;
use crate::phases::{CONCURRENCY, Stats, histogram, run};

const CREATES: usize = 5_000;
const GETS: usize = 5_000;
const LISTS: usize = 50;
const WATCHERS: usize = 1_000;
const NODES: usize = 100;
const WATCH_WRITES: usize = 2_000;
const PORTS: &str = "/apis/sdn.cozystack.io/v1alpha1/ports";
const VNI: u32 = 100;

// === the server process ===

struct Server {
    child: Child,
    addr: SocketAddr,
    kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
    _etcd: Option<EtcdServer>,
}

impl Server {
    async fn start(bin: &Path, etcd: bool) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let kubeconfig = dir.path().join("kubeconfig");
        let etcd = etcd.then(EtcdServer::start);
        let mut cmd = Command::new(bin);
        cmd.arg("--secure-port=0")
            .arg("--standalone")
            .arg(format!("--write-kubeconfig={}", kubeconfig.display()))
            .arg(format!("--data-dir={}", dir.path().join("data").display()))
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        if let Some(e) = &etcd {
            cmd.arg(format!("--etcd-servers={}", e.client_url));
        }
        let child = cmd.spawn().expect("server starts");
        let deadline = Instant::now() + Duration::from_secs(30);
        let port = loop {
            if let Ok(kc) = std::fs::read_to_string(&kubeconfig)
                && let Some(p) = kc
                    .lines()
                    .find_map(|l| l.trim().strip_prefix("server: https://127.0.0.1:"))
                    .and_then(|p| p.parse::<u16>().ok())
            {
                break p;
            }
            assert!(Instant::now() < deadline, "server did not write its kubeconfig");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        Self {
            child,
            addr: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port),
            kubeconfig,
            _dir: dir,
            _etcd: etcd,
        }
    }

    async fn client(&self, n: usize) -> Client {
        Client::connect(&Creds::from_kubeconfig(&self.kubeconfig), self.addr, n)
            .await
            .expect("connect")
    }

    /// Resident set size of the server process, in MiB.
    fn rss_mib(&self) -> f64 {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap_or_default();
        let kb: f64 = s
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0.0);
        kb / 1024.0
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Stop by PID: this is our child.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// === objects ===

fn ip_of(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(
        10,
        (1 + i / 62_500) as u8,
        ((i / 250) % 250) as u8,
        (1 + i % 250) as u8,
    )
}

fn port_name(i: usize) -> String {
    cozyplane_apis::net::port_name(VNI, IpAddr::V4(ip_of(i)))
}

fn port(i: usize) -> Value {
    json!({
        "apiVersion": "sdn.cozystack.io/v1alpha1",
        "kind": "Port",
        "metadata": { "name": port_name(i) },
        "spec": {
            "vpcRef": { "namespace": "bench", "name": "vpc" },
            "ip": ip_of(i).to_string(),
            "node": format!("node-{}", i % NODES),
            "nodeIP": format!("192.168.0.{}", 1 + i % NODES),
        },
    })
}

// === measurements ===

/// A table row for one batch.
fn line(st: &Stats, what: &str) -> String {
    format!(
        "| {what} | {} | {:.2} | {:.2} | {:.0} | {} |",
        st.hist.len(),
        st.ms(0.5),
        st.ms(0.99),
        st.rate(),
        st.errors
    )
}

async fn crud(c: &Arc<Client>, out: &mut Vec<String>) {
    let create = run(c, CREATES, 201, |i| ("POST", PORTS.to_string(), Some(port(i)))).await;
    out.push(line(&create, &format!("create Port ({CONCURRENCY} in flight)")));
    let get = run(c, GETS, 200, |i| {
        let k = (i * 7919) % CREATES;
        ("GET", format!("{PORTS}/{}", port_name(k)), None)
    })
    .await;
    out.push(line(&get, &format!("get Port ({CONCURRENCY} in flight)")));
    let sel = run(c, GETS, 200, |i| {
        (
            "GET",
            format!("{PORTS}?fieldSelector=spec.node%3Dnode-{}", i % NODES),
            None,
        )
    })
    .await;
    out.push(line(
        &sel,
        &format!("list 50 of {CREATES} Ports by spec.node ({CONCURRENCY} in flight)"),
    ));
    let pages = env_count("BENCH_PAGE_LISTS", GETS);
    let page = run(c, pages, 200, |_| ("GET", format!("{PORTS}?limit=500"), None)).await;
    out.push(line(
        &page,
        &format!("list first page, limit=500 ({CONCURRENCY} in flight)"),
    ));
    let full = {
        // One at a time: a whole-collection list is what an informer does once.
        let mut hist = histogram();
        let start = Instant::now();
        for _ in 0..LISTS {
            let t = Instant::now();
            let (code, _) = c.call("GET", PORTS, None).await;
            assert_eq!(code, 200);
            hist.record(t.elapsed().as_micros() as u64).expect("record");
        }
        Stats {
            hist,
            elapsed: start.elapsed(),
            errors: 0,
        }
    };
    out.push(line(&full, &format!("list all {CREATES} Ports (1 in flight)")));
}

/// Watch fan-out: returns table rows.
async fn fan_out(s: &Server, c: &Arc<Client>, out: &mut Vec<String>) {
    let rss_before = s.rss_mib();
    let (_, b) = c.call("GET", &format!("{PORTS}?limit=1"), None).await;
    let rv = serde_json::from_slice::<Value>(&b).expect("list")["metadata"]["resourceVersion"]
        .as_str()
        .expect("rv")
        .to_string();
    // Watches on their own connections (the server allows 1000 streams per connection).
    let wc = Arc::new(s.client(4).await);
    let received: Arc<Mutex<Vec<(String, Instant)>>> = Arc::new(Mutex::new(Vec::new()));
    let mut watchers = Vec::new();
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel::<()>(WATCHERS);
    for w in 0..WATCHERS {
        let (wc, received, ready) = (wc.clone(), received.clone(), ready_tx.clone());
        let path = format!(
            "{PORTS}?watch=1&fieldSelector=spec.node%3Dnode-{}&resourceVersion={rv}&timeoutSeconds=600",
            w % NODES
        );
        watchers.push(tokio::spawn(async move {
            let resp = wc.send(wc.request("GET", &path, None)).await;
            assert_eq!(resp.status(), 200);
            ready.send(()).await.ok();
            let mut body = resp.into_body();
            let mut buf = Vec::new();
            let mut mine = Vec::new();
            while let Some(f) = body.frame().await {
                let Ok(f) = f else { break };
                let Some(d) = f.data_ref() else { continue };
                let now = Instant::now();
                buf.extend_from_slice(d);
                while let Some(nl) = buf.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = buf.drain(..=nl).collect();
                    if let Ok(ev) = serde_json::from_slice::<Value>(&line)
                        && let Some(n) = ev.pointer("/object/metadata/name").and_then(Value::as_str)
                    {
                        mine.push((n.to_string(), now));
                    }
                }
                if mine.len() >= WATCH_WRITES / NODES {
                    break;
                }
            }
            received.lock().expect("lock").extend(mine);
        }));
    }
    drop(ready_tx);
    for _ in 0..WATCHERS {
        ready_rx.recv().await.expect("watch started");
    }
    let rss_watching = s.rss_mib();
    // Writes: new Ports spread over the nodes, acknowledged times recorded.
    let acks: Arc<Mutex<HashMap<String, Instant>>> = Arc::new(Mutex::new(HashMap::new()));
    let next = Arc::new(AtomicUsize::new(0));
    let base = 1_000_000;
    let start = Instant::now();
    let mut writers = Vec::new();
    for _ in 0..CONCURRENCY {
        let (c, acks, next) = (c.clone(), acks.clone(), next.clone());
        writers.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= WATCH_WRITES {
                    break;
                }
                let (code, b) = c.call("POST", PORTS, Some(&port(base + i))).await;
                let t = Instant::now();
                assert_eq!(code, 201, "{}", String::from_utf8_lossy(&b));
                acks.lock().expect("lock").insert(port_name(base + i), t);
            }
        }));
    }
    for w in writers {
        w.await.expect("writer");
    }
    let write_time = start.elapsed();
    let all = tokio::time::timeout(Duration::from_secs(60), futures::future::join_all(watchers)).await;
    let rss_after = s.rss_mib();
    let received = received.lock().expect("lock");
    let acks = acks.lock().expect("lock");
    let mut hist = histogram();
    let mut early = 0;
    for (name, at) in received.iter() {
        if let Some(ack) = acks.get(name) {
            match at.checked_duration_since(*ack) {
                Some(d) => hist.record(d.as_micros().max(1) as u64).expect("record"),
                None => {
                    early += 1;
                    hist.record(1).expect("record");
                }
            }
        }
    }
    let expected = WATCH_WRITES * (WATCHERS / NODES);
    out.push(format!(
        "| watch fan-out: {WATCHERS} watches by spec.node, {WATCH_WRITES} Port creates ({:.0}/s) | {} of {expected} events | p50 {:.2} ms | p99 {:.2} ms | max {:.2} ms | {early} events before the ack |{}",
        WATCH_WRITES as f64 / write_time.as_secs_f64(),
        hist.len(),
        hist.value_at_quantile(0.5) as f64 / 1000.0,
        hist.value_at_quantile(0.99) as f64 / 1000.0,
        hist.max() as f64 / 1000.0,
        if all.is_err() { " (some watchers timed out)" } else { "" }
    ));
    out.push(format!(
        "| server RSS: before watches {rss_before:.0} MiB, {WATCHERS} watches open {rss_watching:.0} MiB, after the writes {rss_after:.0} MiB |"
    ));
}

async fn stored(s: &Server, c: &Arc<Client>, total: usize, out: &mut Vec<String>) {
    let have = CREATES;
    let rss_before = s.rss_mib();
    let st = run(c, total - have, 201, move |i| {
        ("POST", PORTS.to_string(), Some(port(have + i)))
    })
    .await;
    let rss_stored = s.rss_mib();
    let t = Instant::now();
    let (code, b) = c.call("GET", PORTS, None).await;
    let list_time = t.elapsed();
    assert_eq!(code, 200);
    let n = serde_json::from_slice::<Value>(&b).expect("list")["items"]
        .as_array()
        .map_or(0, Vec::len);
    let size = b.len();
    drop(b);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_listed = s.rss_mib();
    out.push(format!(
        "| {n} Ports stored (created at {:.0}/s, {} errors) | RSS {rss_before:.0} MiB → {rss_stored:.0} MiB stored → {rss_listed:.0} MiB after one full list ({:.0} MiB JSON in {:.2} s) |",
        (total - have) as f64 / st.elapsed.as_secs_f64(),
        st.errors,
        size as f64 / (1 << 20) as f64,
        list_time.as_secs_f64()
    ));
}

/// The report for each store in `backends` (`embedded`, `etcd`, comma-separated).
pub(crate) async fn report(backends: &str) {
    let total = env_count("BENCH_STORED", 100_000);
    let bin = cozyplane_conformance::server_binary();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|m| m.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_default();
    println!(
        "machine: {} × {cpu}",
        std::thread::available_parallelism().map_or(0, usize::from)
    );
    for backend in backends.split(',') {
        let etcd = backend == "etcd";
        let t0 = Instant::now();
        let s = Server::start(&bin, etcd).await;
        let c = Arc::new(s.client(2).await);
        let mut out = vec![
            format!("### {backend}"),
            String::new(),
            "| operation | requests | p50 ms | p99 ms | req/s | errors |".into(),
            "|---|---|---|---|---|---|".into(),
        ];
        crud(&c, &mut out).await;
        out.push(String::new());
        out.push("| watch and memory | | | | | |".into());
        out.push("|---|---|---|---|---|---|".into());
        fan_out(&s, &c, &mut out).await;
        stored(&s, &c, total, &mut out).await;
        out.push(String::new());
        out.push(format!(
            "({backend} run took {:.0} s)",
            t0.elapsed().as_secs_f64()
        ));
        println!("{}\n", out.join("\n"));
    }
}
