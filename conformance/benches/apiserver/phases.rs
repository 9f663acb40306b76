//! The measured phases, run the same way against either server: closed-loop request batches
//! with [`CONCURRENCY`] in flight, creates timed to the point where server and store are idle
//! again, lists one at a time, and memory read from `/proc`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde_json::Value;

use crate::client::Client;
use crate::servers::{Server, rss_kib};

pub(crate) const CONCURRENCY: usize = 32;

pub(crate) fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("histogram")
}

/// Latencies (µs) of one batch, its wall time and failed requests.
pub(crate) struct Stats {
    pub(crate) hist: Histogram<u64>,
    pub(crate) elapsed: Duration,
    pub(crate) errors: usize,
}

impl Stats {
    pub(crate) fn rate(&self) -> f64 {
        self.hist.len() as f64 / self.elapsed.as_secs_f64()
    }

    pub(crate) fn ms(&self, q: f64) -> f64 {
        self.hist.value_at_quantile(q) as f64 / 1000.0
    }
}

/// Runs `n` requests made by `make(i)` with [`CONCURRENCY`] in flight; `ok` is the expected
/// code. The first failure of each task is printed.
pub(crate) async fn run<F>(c: &Arc<Client>, n: usize, ok: u16, make: F) -> Stats
where
    F: Fn(usize) -> (&'static str, String, Option<Value>) + Send + Sync + 'static,
{
    let make = Arc::new(make);
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..CONCURRENCY {
        let (c, make, next) = (c.clone(), make.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut h = histogram();
            let mut errors = 0;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                let (m, path, body) = make(i);
                let t = Instant::now();
                let (code, b) = c.call(m, &path, body.as_ref()).await;
                h.record(t.elapsed().as_micros().max(1) as u64).expect("record");
                if code != ok {
                    if errors == 0 {
                        eprintln!("{m} {path}: {code} {}", String::from_utf8_lossy(&b));
                    }
                    errors += 1;
                }
            }
            (h, errors)
        }));
    }
    let mut hist = histogram();
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

/// A batch of creates: the requests' own figures, and the time until server and store were
/// idle again (the work done after the point counts).
pub(crate) struct Creates {
    pub(crate) stats: Stats,
    pub(crate) whole: Option<Duration>,
    /// Server and etcd cost per create, from quiet to quiet (see [`crate::servers::Spent`]).
    pub(crate) cost: String,
}

impl Creates {
    /// Creates per second over the whole time, after-work included.
    pub(crate) fn settled_rate(&self) -> Option<f64> {
        self.whole
            .map(|w| self.stats.hist.len() as f64 / w.max(self.stats.elapsed).as_secs_f64())
    }
}

/// `n` creates of `make(i)` (each `(path, body)`), then waits for the server to settle.
pub(crate) async fn creates<F>(s: &Server, c: &Arc<Client>, n: usize, make: F) -> Creates
where
    F: Fn(usize) -> (String, Value) + Send + Sync + 'static,
{
    // Start from quiet: what the previous phase left behind is not this batch's work.
    s.settle(Instant::now()).await;
    let before = s.spent();
    let start = Instant::now();
    let stats = run(c, n, 201, move |i| {
        let (path, body) = make(i);
        ("POST", path, Some(body))
    })
    .await;
    let whole = s.settle(start).await;
    let cost = before.per_request(&s.spent(), n);
    Creates { stats, whole, cost }
}

/// One-at-a-time lists of `path`: p50 of `times` lists, with the item count and body size of
/// the last one.
pub(crate) struct Lists {
    pub(crate) p50_ms: f64,
    pub(crate) items: usize,
    pub(crate) bytes: usize,
}

pub(crate) async fn lists(c: &Arc<Client>, path: &str, times: usize) -> Lists {
    let mut hist = histogram();
    let mut last = bytes::Bytes::new();
    for _ in 0..times {
        let t = Instant::now();
        let (code, b) = c.call("GET", path, None).await;
        hist.record(t.elapsed().as_micros().max(1) as u64)
            .expect("record");
        assert_eq!(code, 200, "GET {path}: {}", String::from_utf8_lossy(&b));
        last = b;
    }
    if std::env::var_os("BENCH_SHOW_ITEM").is_some()
        && let Ok(v) = serde_json::from_slice::<Value>(&last)
    {
        println!("first item of GET {path}: {}", v["items"][0]);
    }
    Lists {
        p50_ms: hist.value_at_quantile(0.5) as f64 / 1000.0,
        items: items(&last),
        bytes: last.len(),
    }
}

fn items(body: &[u8]) -> usize {
    serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v["items"].as_array().map(Vec::len))
        .unwrap_or(0)
}

/// Walks `path` in pages of `limit` following `continue`, `times` times: p50 of the whole
/// walk, and the items the last walk saw.
pub(crate) async fn paged_walks(c: &Arc<Client>, path: &str, limit: usize, times: usize) -> Lists {
    let mut hist = histogram();
    let mut seen = 0;
    let mut bytes = 0;
    for _ in 0..times {
        seen = 0;
        bytes = 0;
        let mut cont = String::new();
        let t = Instant::now();
        loop {
            let url = if cont.is_empty() {
                format!("{path}?limit={limit}")
            } else {
                let token: String = form_urlencoded::byte_serialize(cont.as_bytes()).collect();
                format!("{path}?limit={limit}&continue={token}")
            };
            let (code, b) = c.call("GET", &url, None).await;
            assert_eq!(code, 200, "GET {url}: {}", String::from_utf8_lossy(&b));
            let v: Value = serde_json::from_slice(&b).expect("list JSON");
            seen += v["items"].as_array().map_or(0, Vec::len);
            bytes += b.len();
            cont = v["metadata"]["continue"].as_str().unwrap_or("").to_string();
            if cont.is_empty() {
                break;
            }
        }
        hist.record(t.elapsed().as_micros().max(1) as u64)
            .expect("record");
    }
    Lists {
        p50_ms: hist.value_at_quantile(0.5) as f64 / 1000.0,
        items: seen,
        bytes,
    }
}

/// Memory with many objects stored: RSS once the server is idle, and the peak while it serves
/// one full list (sampled every 5 ms from before the request until 1 s after the response).
pub(crate) struct Memory {
    pub(crate) objects: usize,
    pub(crate) rss_kib: u64,
    pub(crate) peak_kib: u64,
    pub(crate) list_items: usize,
    pub(crate) list_bytes: usize,
    pub(crate) list_time: Duration,
}

pub(crate) async fn memory(s: &Server, c: &Arc<Client>, objects: usize, list_path: &str) -> Memory {
    s.settle(Instant::now()).await;
    let rss = s.rss_kib();
    let pid = s.pid();
    let peak = Arc::new(AtomicU64::new(rss));
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, stop) = (peak.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                peak.fetch_max(rss_kib(pid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let t = Instant::now();
    let (code, b) = c.call("GET", list_path, None).await;
    let list_time = t.elapsed();
    assert_eq!(code, 200, "GET {list_path}: {}", String::from_utf8_lossy(&b));
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    sampler.join().expect("sampler");
    Memory {
        objects,
        rss_kib: rss,
        peak_kib: peak.load(Ordering::Relaxed),
        list_items: items(&b),
        list_bytes: b.len(),
        list_time,
    }
}
