//! Allocation benchmark (issue 5): Port create with IPAM against a plain create on the same
//! server and store, and against raw storage transactions on that store (the limit).
//!
//! `cargo bench -p cozyplane-conformance --bench alloc` — the server runs in-process (optimized
//! with the bench profile) in standalone mode over HTTPS, on the embedded store and on a private
//! etcd; the client is kube-rs in the same process, so client, server (and etcd) share the
//! machine's cores. Figures go to docs/benchmarks.md, "Allocation (issue 5)".
//!
//! Rows, each `N` operations with `CONCURRENCY` in flight:
//! * plain create: a FloatingIP (no allocator, no control loop watches it);
//! * Port, explicit IP: one address and one MAC claim checked in the transaction, no search;
//! * Port, IPAM: the server picks the address (lowest free in a /16) and the MAC;
//! * VPC, VNI: the server picks the lowest free VNI;
//! * raw txn: `Absent(key)` → put of a Port-sized value, straight on the storage client.
//!
//! `ALLOC_BENCH_N` overrides `N` (and `RAW_N` becomes 10/3 of it) for shorter runs.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use cozyplane_apis::v1alpha1::{
    FloatingIP, FloatingIPSpec, LocalVPCRef, Port, PortSpec, VPC, VPCRef, VPCSpec,
};
use cozyplane_conformance::{Backend, TestServer};
use cozyplane_storage::{Compare, Txn};
use hdrhistogram::Histogram;
use kube::api::{Api, PostParams};

const N: usize = 3000;
const RAW_N: usize = 10_000;

/// `N` and `RAW_N`, or the sizes `ALLOC_BENCH_N` asks for.
fn sizes() -> (usize, usize) {
    match std::env::var("ALLOC_BENCH_N")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        Some(n) if n > 0 => (n, n * 10 / 3),
        _ => (N, RAW_N),
    }
}
const CONCURRENCY: usize = 32;

struct Stats {
    hist: Histogram<u64>,
    elapsed: Duration,
    errors: usize,
}

impl Stats {
    fn line(&self, backend: &str, what: &str) -> String {
        let ms = |q: f64| self.hist.value_at_quantile(q) as f64 / 1000.0;
        format!(
            "| {backend} | {what} | {} | {:.2} | {:.2} | {:.0} | {} |",
            self.hist.len(),
            ms(0.5),
            ms(0.99),
            self.hist.len() as f64 / self.elapsed.as_secs_f64(),
            self.errors
        )
    }
}

/// Runs `op(i)` for `i` in `0..n` with `CONCURRENCY` in flight; latencies in µs.
async fn run<F, Fut>(n: usize, op: F) -> Stats
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    let op = Arc::new(op);
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..CONCURRENCY {
        let (op, next) = (op.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut h = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).expect("histogram");
            let mut errors = 0;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return (h, errors);
                }
                let t = Instant::now();
                if op(i).await {
                    h.record(t.elapsed().as_micros().max(1) as u64).expect("record");
                } else {
                    errors += 1;
                }
            }
        }));
    }
    let mut hist = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).expect("histogram");
    let mut errors = 0;
    for t in tasks {
        let (h, e) = t.await.expect("task");
        hist.add(h).expect("merge");
        errors += e;
    }
    Stats {
        hist,
        elapsed: start.elapsed(),
        errors,
    }
}

fn floating_ip(i: usize, round: &str) -> FloatingIP {
    let mut f = FloatingIP::new(
        &format!("f{round}-{i}"),
        FloatingIPSpec {
            vpc_ref: LocalVPCRef { name: "big".into() },
            target: format!("10.1.{}.{}", i / 250, 2 + i % 250),
            ..Default::default()
        },
    );
    f.metadata.namespace = Some("bench".into());
    f
}

fn port(vpc: &str, ip: String) -> Port {
    let mut p = Port::new(
        "",
        PortSpec {
            vpc_ref: VPCRef {
                namespace: "bench".into(),
                name: vpc.into(),
            },
            ip,
            node: "node-1".into(),
            node_ip: "192.168.0.1".into(),
            ..Default::default()
        },
    );
    p.metadata.name = None;
    p.metadata.generate_name = Some("p-".into());
    p
}

async fn bench(backend: Backend, label: &str, out: &mut Vec<String>) {
    let (n, raw_n) = sizes();
    let s = TestServer::start(backend).await;
    let c = s.client().await;
    let pp = PostParams::default();
    let vpcs: Api<VPC> = Api::namespaced(c.clone(), "bench");
    for (name, cidr) in [
        ("big", "10.1.0.0/16"),
        ("warm", "10.2.0.0/16"),
        ("exact", "10.3.0.0/16"),
    ] {
        let mut v = VPC::new(
            name,
            VPCSpec {
                cidrs: vec![cidr.into()],
                mtu: 0,
                dhcp: None,
                dns64: false,
            },
        );
        v.metadata.namespace = Some("bench".into());
        vpcs.create(&pp, &v).await.expect("VPC");
    }
    let ports: Api<Port> = Api::all(c.clone());
    let fips: Api<FloatingIP> = Api::namespaced(c.clone(), "bench");
    // Warm-up: connections, caches, the pool hint cache of another VPC.
    {
        let (ports, fips) = (ports.clone(), fips.clone());
        run(300, move |i| {
            let (ports, fips) = (ports.clone(), fips.clone());
            async move {
                let a = ports
                    .create(&PostParams::default(), &port("warm", String::new()))
                    .await;
                let b = fips.create(&PostParams::default(), &floating_ip(i, "w")).await;
                a.is_ok() && b.is_ok()
            }
        })
        .await;
    }
    let plain = {
        let fips = fips.clone();
        run(n, move |i| {
            let fips = fips.clone();
            async move {
                fips.create(&PostParams::default(), &floating_ip(i, "m"))
                    .await
                    .is_ok()
            }
        })
        .await
    };
    let exact = {
        let ports = ports.clone();
        run(n, move |i| {
            let ports = ports.clone();
            async move {
                let ip = format!("10.3.{}.{}", i / 250, 2 + i % 250);
                ports
                    .create(&PostParams::default(), &port("exact", ip))
                    .await
                    .is_ok()
            }
        })
        .await
    };
    let ipam = {
        let ports = ports.clone();
        run(n, move |_| {
            let ports = ports.clone();
            async move {
                ports
                    .create(&PostParams::default(), &port("big", String::new()))
                    .await
                    .is_ok()
            }
        })
        .await
    };
    let vni = {
        let vpcs = vpcs.clone();
        run(n, move |_| {
            let vpcs = vpcs.clone();
            async move {
                let mut v = VPC::new(
                    "",
                    VPCSpec {
                        cidrs: vec!["10.9.0.0/24".into()],
                        mtu: 0,
                        dhcp: None,
                        dns64: false,
                    },
                );
                v.metadata.name = None;
                v.metadata.generate_name = Some("v-".into());
                v.metadata.namespace = Some("bench".into());
                vpcs.create(&PostParams::default(), &v).await.is_ok()
            }
        })
        .await
    };
    // The same size of value as a stored Port, straight through the storage client.
    let sample = serde_json::to_vec(&port("big", "10.1.0.2".into())).expect("json");
    let value = Bytes::from(sample);
    let raw = {
        let store = s.storage.clone();
        run(raw_n, move |i| {
            let (store, value) = (store.clone(), value.clone());
            async move {
                let key = format!("/bench/raw/{i}");
                store
                    .txn(Txn::new().when(Compare::Absent(key.clone())).put(key, value))
                    .await
                    .is_ok_and(|r| r.succeeded)
            }
        })
        .await
    };
    let report = cozyplane_apiserver::alloc::scan::scan(&s.storage)
        .await
        .expect("scan");
    assert!(report.problems.is_empty(), "{:#?}", report.problems);
    out.push(plain.line(label, "plain create (FloatingIP)"));
    out.push(exact.line(label, "Port, explicit IP (claims, no search)"));
    out.push(ipam.line(label, "Port, IPAM (server-chosen IP + MAC)"));
    out.push(vni.line(label, "VPC, VNI (server-chosen VNI)"));
    out.push(raw.line(label, "raw storage txn (Absent → put)"));
}

#[tokio::main]
async fn main() {
    let mut out = vec![
        "| store | operation | n | p50 ms | p99 ms | ops/s | errors |".to_string(),
        "|---|---|---|---|---|---|---|".to_string(),
    ];
    bench(Backend::Embedded, "embedded", &mut out).await;
    bench(Backend::Etcd, "etcd", &mut out).await;
    println!("{}", out.join("\n"));
}
