//! Storage benchmarks: both backends, and raw `etcd-client` on the same etcd as the limit.
//!
//! Writes run with `CONCURRENCY` requests in flight, as an API server under load issues them;
//! reported throughput is requests per second. Figures and the machine: docs/benchmarks.md.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use cozyplane_storage::embedded::{Config as EmbeddedConfig, EmbeddedStore};
use cozyplane_storage::etcd::EtcdStore;
use cozyplane_storage::testing::{EtcdCluster, EtcdServer, next_change, runtime};
use cozyplane_storage::{ListOptions, Storage, Txn, WatchOptions};
use criterion::{BenchmarkId, Criterion, Throughput};
use etcd_client::{Compare, CompareOp, Txn as EtcdTxn, TxnOp};
use futures::StreamExt;
use futures::stream::FuturesUnordered;

const CONCURRENCY: usize = 32;
/// A Port-sized object.
const VALUE: &[u8] = &[b'x'; 600];

/// Run `n` calls of `op(i)` with `CONCURRENCY` in flight; return the elapsed time.
async fn concurrently<F, Fut>(n: u64, op: F) -> Duration
where
    F: Fn(u64) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let start = Instant::now();
    let mut inflight = FuturesUnordered::new();
    for i in 0..n {
        if inflight.len() == CONCURRENCY {
            inflight.next().await;
        }
        inflight.push(op(i));
    }
    while inflight.next().await.is_some() {}
    start.elapsed()
}

struct Backends {
    stores: Vec<(&'static str, Arc<dyn Storage>)>,
    raw: etcd_client::Client,
}

fn writes(c: &mut Criterion, rt: &tokio::runtime::Runtime, b: &Backends) {
    let mut g = c.benchmark_group("create");
    g.throughput(Throughput::Elements(1))
        .sample_size(10)
        .measurement_time(Duration::from_secs(8));
    let run = std::sync::atomic::AtomicU64::new(0);
    for (name, store) in &b.stores {
        g.bench_function(*name, |bench| {
            bench.to_async(rt).iter_custom(|iters| {
                let store = store.clone();
                let r = run.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                async move {
                    concurrently(iters, |i| {
                        let store = store.clone();
                        async move {
                            store
                                .create(&format!("/bench/create/{r}/{i}"), Bytes::from_static(VALUE))
                                .await
                                .unwrap();
                        }
                    })
                    .await
                }
            });
        });
    }
    g.bench_function("raw-etcd-client-txn", |bench| {
        bench.to_async(rt).iter_custom(|iters| {
            let kv = b.raw.kv_client();
            let r = run.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            async move {
                concurrently(iters, |i| {
                    let mut kv = kv.clone();
                    async move {
                        let key = format!("/bench/raw-create/{r}/{i}");
                        let txn = EtcdTxn::new()
                            .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
                            .and_then([TxnOp::put(key.as_str(), VALUE, None)])
                            .or_else([TxnOp::get(key.as_str(), None)]);
                        assert!(kv.txn(txn).await.unwrap().succeeded());
                    }
                })
                .await
            }
        });
    });
    g.bench_function("raw-etcd-client-put", |bench| {
        bench.to_async(rt).iter_custom(|iters| {
            let kv = b.raw.kv_client();
            let r = run.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            async move {
                concurrently(iters, |i| {
                    let mut kv = kv.clone();
                    async move {
                        kv.put(format!("/bench/raw-put/{r}/{i}"), VALUE, None)
                            .await
                            .unwrap();
                    }
                })
                .await
            }
        });
    });
    g.finish();

    // Updates: each in-flight slot owns a key and updates it at the revision it last wrote.
    let mut g = c.benchmark_group("update");
    g.throughput(Throughput::Elements(1))
        .sample_size(10)
        .measurement_time(Duration::from_secs(8));
    for (name, store) in &b.stores {
        let revs: Vec<_> = rt.block_on(async {
            let mut revs = Vec::new();
            for s in 0..CONCURRENCY {
                let k = format!("/bench/update/{s}");
                revs.push(Arc::new(std::sync::atomic::AtomicU64::new(
                    store
                        .create(&k, Bytes::from_static(VALUE))
                        .await
                        .unwrap()
                        .mod_revision,
                )));
            }
            revs
        });
        g.bench_function(*name, |bench| {
            bench.to_async(rt).iter_custom(|iters| {
                let (store, revs) = (store.clone(), revs.clone());
                async move {
                    update_slots(
                        iters,
                        &revs,
                        |k, v, rev| {
                            let store = store.clone();
                            async move { store.update(&k, v, rev).await.unwrap().mod_revision }
                        },
                        "/bench/update/",
                    )
                    .await
                }
            });
        });
    }
    let raw_revs: Vec<_> = rt.block_on(async {
        let mut kv = b.raw.kv_client();
        let mut revs = Vec::new();
        for s in 0..CONCURRENCY {
            let r = kv
                .put(format!("/bench/raw-update/{s}"), VALUE, None)
                .await
                .unwrap();
            revs.push(Arc::new(std::sync::atomic::AtomicU64::new(
                r.header().unwrap().revision() as u64,
            )));
        }
        revs
    });
    g.bench_function("raw-etcd-client-txn", |bench| {
        bench.to_async(rt).iter_custom(|iters| {
            let (kv, revs) = (b.raw.kv_client(), raw_revs.clone());
            async move {
                update_slots(
                    iters,
                    &revs,
                    |k, v, rev| {
                        let mut kv = kv.clone();
                        async move {
                            let txn = EtcdTxn::new()
                                .when([Compare::mod_revision(k.as_str(), CompareOp::Equal, rev as i64)])
                                .and_then([TxnOp::put(k.as_str(), v.to_vec(), None)])
                                .or_else([TxnOp::get(k.as_str(), None)]);
                            let r = kv.txn(txn).await.unwrap();
                            assert!(r.succeeded());
                            r.header().unwrap().revision() as u64
                        }
                    },
                    "/bench/raw-update/",
                )
                .await
            }
        });
    });
    g.finish();
}

/// `n` guarded updates spread over the slots, each slot's updates in sequence.
async fn update_slots<F, Fut>(
    n: u64,
    revs: &[Arc<std::sync::atomic::AtomicU64>],
    op: F,
    prefix: &str,
) -> Duration
where
    F: Fn(String, Bytes, u64) -> Fut + Clone,
    Fut: std::future::Future<Output = u64>,
{
    use std::sync::atomic::Ordering::Relaxed;
    let start = Instant::now();
    let slots = revs.len() as u64;
    let tasks = FuturesUnordered::new();
    for s in 0..slots {
        let count = n / slots + u64::from(s < n % slots);
        let (op, rev) = (op.clone(), revs[s as usize].clone());
        let key = format!("{prefix}{s}");
        tasks.push(async move {
            for _ in 0..count {
                let new = op(key.clone(), Bytes::from_static(VALUE), rev.load(Relaxed)).await;
                rev.store(new, Relaxed);
            }
        });
    }
    tasks.collect::<Vec<_>>().await;
    start.elapsed()
}

fn reads(c: &mut Criterion, rt: &tokio::runtime::Runtime, b: &Backends) {
    let mut g = c.benchmark_group("get");
    g.throughput(Throughput::Elements(1))
        .sample_size(10)
        .measurement_time(Duration::from_secs(5));
    for (name, store) in &b.stores {
        rt.block_on(store.create("/bench/get/key", Bytes::from_static(VALUE)))
            .ok();
        g.bench_function(*name, |bench| {
            bench.to_async(rt).iter_custom(|iters| {
                let store = store.clone();
                async move {
                    concurrently(iters, |_| {
                        let store = store.clone();
                        async move {
                            store.get("/bench/get/key").await.unwrap();
                        }
                    })
                    .await
                }
            });
        });
    }
    g.bench_function("raw-etcd-client-get", |bench| {
        bench.to_async(rt).iter_custom(|iters| {
            let kv = b.raw.kv_client();
            async move {
                concurrently(iters, |_| {
                    let mut kv = kv.clone();
                    async move {
                        kv.get("/bench/get/key", None).await.unwrap();
                    }
                })
                .await
            }
        });
    });
    g.finish();

    let mut g = c.benchmark_group("list");
    g.sample_size(10).measurement_time(Duration::from_secs(10));
    for n in [10_000u64, 100_000] {
        for (name, store) in &b.stores {
            let prefix = format!("/bench/list{n}/");
            rt.block_on(fill(store.as_ref(), &prefix, n));
            g.throughput(Throughput::Elements(n));
            g.bench_with_input(BenchmarkId::new(*name, n), &n, |bench, n| {
                bench.to_async(rt).iter(|| {
                    let (store, prefix) = (store.clone(), prefix.clone());
                    async move {
                        let l = store.list(&prefix, &ListOptions::default()).await.unwrap();
                        assert_eq!(l.items.len() as u64, *n);
                    }
                });
            });
        }
    }
    g.finish();
}

/// Put `n` keys under `prefix` in transactions of 100 (etcd allows 128 operations a txn).
async fn fill(store: &dyn Storage, prefix: &str, n: u64) {
    let mut i = 0;
    while i < n {
        let mut txn = Txn::new();
        for j in i..(i + 100).min(n) {
            txn = txn.put(format!("{prefix}{j:08}"), Bytes::from_static(VALUE));
        }
        store.txn(txn).await.unwrap();
        i += 100;
    }
}

fn watches(c: &mut Criterion, rt: &tokio::runtime::Runtime, b: &Backends) {
    // Delivery rate of a watch replaying history: the rate at which a restarted API server's
    // watch cache catches up.
    let mut g = c.benchmark_group("watch-replay");
    g.sample_size(10).measurement_time(Duration::from_secs(10));
    const N: u64 = 10_000;
    for (name, store) in &b.stores {
        let prefix = "/bench/watch/";
        let from = rt.block_on(store.current_revision()).unwrap();
        rt.block_on(fill(store.as_ref(), prefix, N));
        g.throughput(Throughput::Elements(N));
        g.bench_function(*name, |bench| {
            bench.to_async(rt).iter(|| {
                let store = store.clone();
                async move {
                    let opts = WatchOptions {
                        revision: Some(from),
                        prefix: true,
                        ..Default::default()
                    };
                    let mut w = store.watch(prefix, opts).await.unwrap();
                    for _ in 0..N {
                        next_change(&mut w).await;
                    }
                }
            });
        });
    }
    g.finish();
}

/// Our etcd backend against raw `etcd-client`, interleaved round by round so that load from
/// anything else on the machine hits both alike; prints the median of the per-round ratios.
fn interleaved_ratio(rt: &tokio::runtime::Runtime, b: &Backends) {
    const ROUNDS: usize = 15;
    const OPS: u64 = 2000;
    let etcd = b.stores.iter().find(|(n, _)| *n == "etcd").unwrap().1.clone();
    let (mut create, mut update) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        rt.block_on(async {
            let ours = concurrently(OPS, |i| {
                let etcd = etcd.clone();
                async move {
                    etcd.create(&format!("/ratio/ours/{round}/{i}"), Bytes::from_static(VALUE))
                        .await
                        .unwrap();
                }
            })
            .await;
            let kv = b.raw.kv_client();
            let raw = concurrently(OPS, |i| {
                let mut kv = kv.clone();
                async move {
                    let key = format!("/ratio/raw/{round}/{i}");
                    let txn = EtcdTxn::new()
                        .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
                        .and_then([TxnOp::put(key.as_str(), VALUE, None)])
                        .or_else([TxnOp::get(key.as_str(), None)]);
                    assert!(kv.txn(txn).await.unwrap().succeeded());
                }
            })
            .await;
            create.push(raw.as_secs_f64() / ours.as_secs_f64());
            // Updates: each slot rewrites its own key at the revision it last wrote.
            let revs: Vec<_> = (0..CONCURRENCY)
                .map(|_| Arc::new(std::sync::atomic::AtomicU64::new(0)))
                .collect();
            for (s, rev) in revs.iter().enumerate() {
                let kv = etcd
                    .create(&format!("/ratio/upd/{round}/{s}"), Bytes::from_static(VALUE))
                    .await
                    .unwrap();
                rev.store(kv.mod_revision, std::sync::atomic::Ordering::Relaxed);
            }
            let prefix = format!("/ratio/upd/{round}/");
            let ours = update_slots(
                OPS,
                &revs,
                |k, v, rev| {
                    let etcd = etcd.clone();
                    async move { etcd.update(&k, v, rev).await.unwrap().mod_revision }
                },
                &prefix,
            )
            .await;
            let raw = update_slots(
                OPS,
                &revs,
                |k, v, rev| {
                    let mut kv = kv.clone();
                    async move {
                        let txn = EtcdTxn::new()
                            .when([Compare::mod_revision(k.as_str(), CompareOp::Equal, rev as i64)])
                            .and_then([TxnOp::put(k.as_str(), v.to_vec(), None)])
                            .or_else([TxnOp::get(k.as_str(), None)]);
                        let r = kv.txn(txn).await.unwrap();
                        assert!(r.succeeded());
                        r.header().unwrap().revision() as u64
                    }
                },
                &prefix,
            )
            .await;
            update.push(raw.as_secs_f64() / ours.as_secs_f64());
        });
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "etcd backend / raw etcd-client throughput, median of {ROUNDS} interleaved rounds of {OPS} ops \
         ({CONCURRENCY} in flight): create {:.1}%, update {:.1}%",
        100.0 * median(&mut create),
        100.0 * median(&mut update)
    );
}

/// Issue #39: create and LIST rates on one etcd member and on a three-member cluster, through
/// the backend (with its failover) and through raw `etcd-client` on the same etcd, in
/// interleaved rounds; the medians. `-- --ha`.
fn ha(rt: &tokio::runtime::Runtime) {
    const ROUNDS: usize = 7;
    const CREATES: u64 = 2000;
    const LISTS: u64 = 200;
    const LISTED: u64 = 1000;
    let single = EtcdServer::start();
    let cluster = EtcdCluster::start(3);
    let targets = rt.block_on(async {
        let mut t = Vec::new();
        for (name, endpoints) in [
            ("1 member", vec![single.client_url.clone()]),
            ("3 members", cluster.endpoints()),
        ] {
            let ours = EtcdStore::connect(cozyplane_storage::etcd::Config::new(endpoints.clone()))
                .await
                .unwrap();
            let raw = etcd_client::Client::connect(&endpoints, None).await.unwrap();
            for i in 0..LISTED {
                ours.create(&format!("/ha/list/{i:05}"), Bytes::from_static(VALUE))
                    .await
                    .unwrap();
            }
            t.push((name, Arc::new(ours), raw));
        }
        t
    });
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    for (name, ours, raw) in &targets {
        let (mut oc, mut rc, mut ol, mut rl) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for round in 0..ROUNDS {
            rt.block_on(async {
                let t = concurrently(CREATES, |i| {
                    let ours = ours.clone();
                    async move {
                        ours.create(&format!("/ha/ours/{round}/{i}"), Bytes::from_static(VALUE))
                            .await
                            .unwrap();
                    }
                })
                .await;
                oc.push(CREATES as f64 / t.as_secs_f64());
                let kv = raw.kv_client();
                let t = concurrently(CREATES, |i| {
                    let mut kv = kv.clone();
                    async move {
                        let key = format!("/ha/raw/{round}/{i}");
                        let txn = EtcdTxn::new()
                            .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
                            .and_then([TxnOp::put(key.as_str(), VALUE, None)]);
                        assert!(kv.txn(txn).await.unwrap().succeeded());
                    }
                })
                .await;
                rc.push(CREATES as f64 / t.as_secs_f64());
                let t = concurrently(LISTS, |_| {
                    let ours = ours.clone();
                    async move {
                        let page = ours.list("/ha/list/", &ListOptions::default()).await.unwrap();
                        assert_eq!(page.items.len() as u64, LISTED);
                    }
                })
                .await;
                ol.push(LISTS as f64 / t.as_secs_f64());
                let t = concurrently(LISTS, |_| {
                    let mut kv = kv.clone();
                    async move {
                        let opts = etcd_client::GetOptions::new().with_prefix();
                        let r = kv.get("/ha/list/", Some(opts)).await.unwrap();
                        assert_eq!(r.kvs().len() as u64, LISTED);
                    }
                })
                .await;
                rl.push(LISTS as f64 / t.as_secs_f64());
            });
        }
        let (oc, rc, ol, rl) = (median(oc), median(rc), median(ol), median(rl));
        println!(
            "{name}: create {oc:.0}/s (raw etcd-client {rc:.0}/s, ours/raw {:.1}%), \
             LIST of {LISTED} keys {ol:.1}/s (raw {rl:.1}/s, ours/raw {:.1}%); \
             medians of {ROUNDS} interleaved rounds, {CONCURRENCY} creates / {CONCURRENCY} LISTs in flight",
            100.0 * oc / rc,
            100.0 * ol / rl
        );
    }
    drop(targets);
    drop(cluster);
    drop(single);
}

fn main() {
    let rt = runtime();
    if std::env::args().any(|a| a == "--ha") {
        ha(&rt);
        return;
    }
    let server = EtcdServer::start();
    let dir = tempfile::tempdir().unwrap();
    let backends = rt.block_on(async {
        let etcd: Arc<dyn Storage> = Arc::new(EtcdStore::connect(server.config()).await.unwrap());
        let embedded: Arc<dyn Storage> = Arc::new(
            EmbeddedStore::open(EmbeddedConfig::new(dir.path()))
                .await
                .unwrap(),
        );
        let raw = etcd_client::Client::connect([server.client_url.clone()], None)
            .await
            .unwrap();
        Backends {
            stores: vec![("etcd", etcd), ("embedded", embedded)],
            raw,
        }
    });
    if std::env::args().any(|a| a == "--ratio-only") {
        interleaved_ratio(&rt, &backends);
        return;
    }
    let mut c = Criterion::default().configure_from_args();
    writes(&mut c, &rt, &backends);
    reads(&mut c, &rt, &backends);
    watches(&mut c, &rt, &backends);
    c.final_summary();
    interleaved_ratio(&rt, &backends);
    drop(backends);
    drop(server);
}
