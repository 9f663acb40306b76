//! Memory of the watch cache, before and after it kept encoded objects: resident bytes per
//! cached Port, and the peak resident growth while one full list of them is built and written.
//! Reads `VmRSS`/`VmHWM` (the peak is reset through `/proc/self/clear_refs`), as the API bench
//! reads the server's; run each way in its own process so freed memory is not reused across.
//!
//! `cargo run -p cozyplane-apiserver --example cache_memory -- <old|new> [objects]`
//! (default 20,000).

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use cozyplane_apiserver::handlers::list_body::{ListBody, list_meta};
use cozyplane_apiserver::registry::cache::Cached;
use cozyplane_apiserver::registry::store::ListPage;
use futures::StreamExt;
use serde_json::{Value, json};

const FIELDS: &[(&str, &str)] = &[("spec.node", "/spec/node")];

/// A Port as the server stores it: server-set metadata, managed fields, status.
fn port(i: usize) -> Value {
    json!({
        "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "Port",
        "metadata": {
            "name": format!("v100.10-0-{}-{}", i / 250, i % 250), "namespace": "bench",
            "uid": format!("6f1c2a4e-0000-4000-8000-{i:012}"), "resourceVersion": (1000 + i).to_string(),
            "generation": 1, "creationTimestamp": "2026-12-02T00:00:00Z",
            "labels": { "sdn.cozystack.io/vpc": "vpc" },
            "managedFields": [{ "manager": "bench", "operation": "Update", "apiVersion": "sdn.cozystack.io/v1alpha1",
                "time": "2026-12-02T00:00:00Z", "fieldsType": "FieldsV1",
                "fieldsV1": { "f:spec": { ".": {}, "f:ip": {}, "f:node": {}, "f:nodeIP": {}, "f:vpcRef": { ".": {}, "f:name": {}, "f:namespace": {} } } } }]
        },
        "spec": { "vpcRef": { "namespace": "bench", "name": "vpc" }, "ip": format!("10.0.{}.{}", i / 250, i % 250),
            "node": format!("node-{}", i % 100), "nodeIP": format!("192.168.0.{}", 1 + i % 100), "mac": "02:00:0a:00:00:05" },
        "status": { "phase": "Ready", "vni": 100 }
    })
}

/// A `/proc/self/status` figure in bytes.
fn status(field: &str) -> usize {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<usize>().ok())
        .unwrap_or(0)
        * 1024
}

fn rss() -> usize {
    status("VmRSS:")
}

/// Resets the peak (`VmHWM`) to the current RSS and returns the latter.
fn reset_peak() -> usize {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    rss()
}

fn mib(b: usize) -> f64 {
    b as f64 / f64::from(1 << 20)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut args = std::env::args().skip(1);
    let way = args.next().unwrap_or_else(|| "new".into());
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(20_000);
    let stored: Vec<Vec<u8>> = (0..n).map(|i| serde_json::to_vec(&port(i)).unwrap()).collect();
    let json_size: usize = stored.iter().map(Vec::len).sum();
    let base = rss();
    let (per, peak, sent) = if way == "old" {
        // A map of key → Value tree; a list cloned the trees, serialized them into a second tree
        // (json!) and that into one string, then wrote the string.
        let old: BTreeMap<String, Value> = stored
            .iter()
            .enumerate()
            .map(|(i, b)| (format!("bench/{i}"), serde_json::from_slice(b).unwrap()))
            .collect();
        let per = (rss() - base) / n;
        let start = reset_peak();
        let items: Vec<Value> = old.values().cloned().collect();
        let meta = json!({ "resourceVersion": "1" });
        let body = json!({ "kind": "PortList", "apiVersion": "sdn.cozystack.io/v1alpha1", "metadata": meta, "items": items });
        let s = body.to_string();
        (per, status("VmHWM:") - start, s.len())
    } else {
        // The cached bytes and compact form; a list shares the bytes and streams the body.
        let new: BTreeMap<String, Arc<Cached>> = stored
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let v: Value = serde_json::from_slice(b).unwrap();
                let key = format!("bench/{i}");
                let c = Cached::from_value(&key, &v, FIELDS).unwrap();
                (key, Arc::new(c))
            })
            .collect();
        let per = (rss() - base) / n;
        let start = reset_peak();
        let page = ListPage::<Bytes> {
            items: new.values().map(|c| c.json().clone()).collect(),
            revision: 1,
            continue_token: None,
            remaining: None,
        };
        let meta = list_meta(&page);
        let body = ListBody::new("PortList", "sdn.cozystack.io/v1alpha1", &meta, page.items).into_body();
        let mut chunks = body.into_data_stream();
        let mut sent = 0;
        while let Some(c) = chunks.next().await {
            sent += c.unwrap().len();
        }
        (per, status("VmHWM:") - start, sent)
    };
    assert!(sent > json_size);
    println!(
        "{way}: {n} Ports of {:.0} B JSON: {per} B resident per cached object; one full list ({:.1} MiB) peaks {:.1} MiB above that",
        json_size as f64 / n as f64,
        mib(sent),
        mib(peak)
    );
}
