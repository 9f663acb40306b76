//! Watch fan-out: many watches open on a server, then creates at a fixed rate; every event's
//! delivery latency is the time from the create's response arriving at the client to the event
//! arriving at a watcher (an event that beats the response counts as 0). Reports whether every
//! watcher saw every event meant for it and whether the creates held their rate.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use http_body_util::BodyExt;
use serde_json::Value;

use crate::phases::{CONCURRENCY, histogram};
use crate::servers::Server;

/// Watch streams per HTTP/2 connection: under both servers' stream limits (Go's default is
/// 250, ours 1,000).
const WATCHES_PER_CONN: usize = 100;

pub(crate) struct FanOut {
    pub(crate) hist: Histogram<u64>,
    pub(crate) delivered: usize,
    pub(crate) expected: usize,
    /// Creates acknowledged per second (the target is the offered rate).
    pub(crate) create_rate: f64,
    pub(crate) create_errors: usize,
    /// Events that arrived before their create's response.
    pub(crate) early: usize,
    /// Watch requests the server refused.
    pub(crate) refused: usize,
}

impl FanOut {
    pub(crate) fn p99_ms(&self) -> f64 {
        self.hist.value_at_quantile(0.99) as f64 / 1000.0
    }
}

/// What one fan-out run does.
pub(crate) struct Plan<M, W> {
    /// Watch paths without the query's `resourceVersion`: one watch per entry.
    pub(crate) watches: Vec<String>,
    /// A list path (with `?`) whose `resourceVersion` the watches start from.
    pub(crate) list: String,
    pub(crate) creates: usize,
    pub(crate) rate: f64,
    /// `make(i)`: the path and body of create `i`.
    pub(crate) make: M,
    /// `wants(w, i)`: whether watch `w` should see create `i`.
    pub(crate) wants: W,
    /// Events count only for objects whose name starts with this (empty: every object).
    pub(crate) prefix: &'static str,
}

/// The object's name in one watch event line: the first `"name"` member after `"metadata"`
/// (both servers write `metadata.name` before any nested object that has a `name`), if it
/// starts with `prefix`. Cheaper than parsing every event, which would load the shared cores.
fn name_in(line: &[u8], prefix: &str) -> Option<String> {
    let text = std::str::from_utf8(line).ok()?;
    let meta = text.find("\"metadata\"")?;
    let key = "\"name\"";
    let after = meta + text[meta..].find(key)? + key.len();
    let rest = text[after..]
        .trim_start()
        .strip_prefix(':')?
        .trim_start()
        .strip_prefix('"')?;
    let name = &rest[..rest.find('"')?];
    name.starts_with(prefix).then(|| name.to_string())
}

pub(crate) async fn fan_out<M, W>(s: &Server, plan: Plan<M, W>) -> FanOut
where
    M: Fn(usize) -> (String, Value) + Send + Sync + 'static,
    W: Fn(usize, usize) -> bool,
{
    let c = s.client(2).await;
    let (code, b) = c.call("GET", &format!("{}limit=1", plan.list), None).await;
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&b));
    let rv = serde_json::from_slice::<Value>(&b).expect("list")["metadata"]["resourceVersion"]
        .as_str()
        .expect("rv")
        .to_string();
    let n_watch = plan.watches.len();
    let mut conns = Vec::new();
    for _ in 0..n_watch.div_ceil(WATCHES_PER_CONN) {
        conns.push(s.client(1).await);
    }
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel::<bool>(n_watch.max(1));
    let mut watchers = Vec::new();
    let mut expected_total = 0;
    for (w, path) in plan.watches.iter().enumerate() {
        let expected = (0..plan.creates).filter(|i| (plan.wants)(w, *i)).count();
        expected_total += expected;
        let wc = conns[w / WATCHES_PER_CONN].clone();
        let path = format!("{path}&resourceVersion={rv}&timeoutSeconds=3600");
        let (ready, mut stop, prefix) = (ready_tx.clone(), stop_rx.clone(), plan.prefix);
        watchers.push(tokio::spawn(async move {
            let resp = wc.send(wc.request("GET", &path, None)).await;
            if resp.status() != 200 {
                ready.send(false).await.ok();
                return Vec::new();
            }
            ready.send(true).await.ok();
            let mut body = resp.into_body();
            let mut buf = Vec::new();
            let mut seen = HashSet::new();
            let mut got: Vec<(String, Instant)> = Vec::new();
            while got.len() < expected {
                let f = tokio::select! {
                    f = body.frame() => f,
                    _ = stop.changed() => break,
                };
                let Some(Ok(f)) = f else { break };
                let Some(d) = f.data_ref() else { continue };
                let now = Instant::now();
                buf.extend_from_slice(d);
                let mut from = 0;
                while let Some(nl) = buf[from..].iter().position(|b| *b == b'\n') {
                    if let Some(name) = name_in(&buf[from..from + nl], prefix)
                        && seen.insert(name.clone())
                    {
                        got.push((name, now));
                    }
                    from += nl + 1;
                }
                buf.drain(..from);
            }
            got
        }));
    }
    drop(ready_tx);
    let mut refused = 0;
    for _ in 0..n_watch {
        if !ready_rx.recv().await.unwrap_or(false) {
            refused += 1;
        }
    }
    // Creates at the offered rate, at most CONCURRENCY in flight: a server that cannot keep up
    // falls behind the rate instead of piling up requests.
    let acks: Arc<Mutex<HashMap<String, Instant>>> = Arc::new(Mutex::new(HashMap::new()));
    let errors = Arc::new(Mutex::new(0usize));
    let permits = Arc::new(tokio::sync::Semaphore::new(CONCURRENCY));
    let make = Arc::new(plan.make);
    let interval = Duration::from_secs_f64(1.0 / plan.rate);
    let start = Instant::now();
    let mut writers = Vec::new();
    for i in 0..plan.creates {
        tokio::time::sleep_until((start + interval * i as u32).into()).await;
        let permit = permits.clone().acquire_owned().await.expect("semaphore");
        let (c, acks, errors, make) = (c.clone(), acks.clone(), errors.clone(), make.clone());
        writers.push(tokio::spawn(async move {
            let (path, body) = make(i);
            let (code, b) = c.call("POST", &path, Some(&body)).await;
            let t = Instant::now();
            drop(permit);
            let name = serde_json::from_slice::<Value>(&b)
                .ok()
                .and_then(|v| v["metadata"]["name"].as_str().map(str::to_string));
            match (code, name) {
                (201, Some(n)) => {
                    acks.lock().expect("lock").insert(n, t);
                }
                _ => {
                    let mut e = errors.lock().expect("lock");
                    if *e == 0 {
                        eprintln!("POST {path}: {code} {}", String::from_utf8_lossy(&b));
                    }
                    *e += 1;
                }
            }
        }));
    }
    for w in writers {
        w.await.expect("writer");
    }
    let create_time = start.elapsed();
    // Hang guard: watchers still short of their events after 60 s are stopped and counted short.
    let all = futures::future::join_all(watchers);
    tokio::pin!(all);
    let results = match tokio::time::timeout(Duration::from_secs(60), &mut all).await {
        Ok(r) => r,
        Err(_) => {
            stop_tx.send(true).ok();
            all.await
        }
    };
    let acks = acks.lock().expect("lock");
    let mut hist = histogram();
    let (mut delivered, mut early) = (0, 0);
    for got in results {
        for (name, at) in got.expect("watcher") {
            let Some(ack) = acks.get(&name) else { continue };
            delivered += 1;
            match at.checked_duration_since(*ack) {
                Some(d) => hist.record(d.as_micros().max(1) as u64).expect("record"),
                None => {
                    early += 1;
                    hist.record(1).expect("record");
                }
            }
        }
    }
    let create_errors = *errors.lock().expect("lock");
    FanOut {
        hist,
        delivered,
        expected: expected_total,
        create_rate: acks.len() as f64 / create_time.as_secs_f64(),
        create_errors,
        early,
        refused,
    }
}
