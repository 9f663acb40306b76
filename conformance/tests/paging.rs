//! Paged lists with selectors (issue 15, defect 5): a page holds `limit` matching items whenever
//! that many remain, however many non-matching objects sort between them, and a paged walk
//! returns exactly the matching set, on both backends and for every way a list is served
//! (consistent, `resourceVersion=0`, `NotOlderThan`, continue pages).

use std::collections::BTreeSet;

use cozyplane_conformance::{Backend, TestServer};
use serde_json::Value;

const GV: &str = "/apis/sdn.cozystack.io/v1alpha1";

fn parse(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("{e}: {s}"))
}

/// VPC `name` in `ns`, labelled `pick=yes` when `picked`.
async fn vpc(s: &TestServer, ns: &str, name: &str, picked: bool) {
    let labels = if picked { r#","labels":{"pick":"yes"}"# } else { "" };
    let body = format!(
        r#"{{"apiVersion":"sdn.cozystack.io/v1alpha1","kind":"VPC","metadata":{{"name":"{name}"{labels}}},"spec":{{"cidrs":["10.0.0.0/24"]}}}}"#
    );
    let (c, _, b) = s
        .raw(
            "POST",
            &format!("{GV}/namespaces/{ns}/vpcs"),
            &[("content-type", "application/json")],
            Some(&body),
        )
        .await;
    assert_eq!(c, 201, "{b}");
}

/// `(ns/name)` of every item, the continue token and the list's resourceVersion.
async fn page(s: &TestServer, path: &str, query: &str) -> (Vec<String>, Option<String>, String) {
    let (c, _, b) = s.raw("GET", &format!("{path}?{query}"), &[], None).await;
    assert_eq!(c, 200, "{path}?{query}: {b}");
    let v = parse(&b);
    assert!(
        v["metadata"].get("remainingItemCount").is_none() || !query.contains("Selector"),
        "remainingItemCount with a selector: {b}"
    );
    let names = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            format!(
                "{}/{}",
                i["metadata"]["namespace"].as_str().unwrap(),
                i["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect();
    let cont = v["metadata"]["continue"].as_str().map(str::to_string);
    let rv = v["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    (names, cont, rv)
}

/// Walks every page of `path` with `selector` and page size `limit`, the first page asked with
/// `first` (extra query); checks every page but the last is full and returns all names in order.
async fn walk(s: &TestServer, path: &str, selector: &str, limit: usize, first: &str) -> Vec<String> {
    let mut all = Vec::new();
    let mut query = format!("limit={limit}&{selector}{first}");
    for _ in 0..100 {
        let (names, cont, _) = page(s, path, &query).await;
        all.extend(names.iter().cloned());
        match cont {
            Some(c) => {
                assert_eq!(
                    names.len(),
                    limit,
                    "a short page before the end ({query}): {names:?}"
                );
                query = format!("limit={limit}&{selector}&continue={c}");
            }
            None => return all,
        }
    }
    panic!("more than 100 pages");
}

/// 24 VPCs in t1 and t2; in each namespace every third one (by name) is labelled.
async fn populate(s: &TestServer) -> (BTreeSet<String>, BTreeSet<String>) {
    let (mut picked, mut in_t2) = (BTreeSet::new(), BTreeSet::new());
    for ns in ["t1", "t2"] {
        for i in 0..12 {
            let name = format!("v{i:02}");
            let p = i % 3 == 2;
            vpc(s, ns, &name, p).await;
            if p {
                picked.insert(format!("{ns}/{name}"));
            }
            if ns == "t2" {
                in_t2.insert(format!("{ns}/{name}"));
            }
        }
    }
    (picked, in_t2)
}

fn as_set(names: &[String]) -> BTreeSet<String> {
    let set: BTreeSet<String> = names.iter().cloned().collect();
    assert_eq!(set.len(), names.len(), "duplicates in {names:?}");
    set
}

async fn filtered_pages_are_full(backend: Backend) {
    let s = TestServer::start(backend).await;
    let (picked, in_t2) = populate(&s).await;
    let all = format!("{GV}/vpcs");
    let t1 = format!("{GV}/namespaces/t1/vpcs");

    // The first labelled VPC sorts third: the first page of two still holds two.
    let (names, cont, rv) = page(&s, &t1, "limit=2&labelSelector=pick%3Dyes").await;
    assert_eq!(names, ["t1/v02", "t1/v05"]);
    assert!(cont.is_some());

    // Every t1 key sorts before every t2 key: a field selector on the namespace across all
    // namespaces scans twelve non-matching keys before the first match.
    let (names, cont, _) = page(&s, &all, "limit=3&fieldSelector=metadata.namespace%3Dt2").await;
    assert_eq!(names, ["t2/v00", "t2/v01", "t2/v02"]);
    assert!(cont.is_some());

    // Whole walks: exactly the matching set, no duplicates, every page but the last full;
    // first pages consistent, at resourceVersion=0, NotOlderThan and Exact.
    let firsts = [
        String::new(),
        "&resourceVersion=0".to_string(),
        format!("&resourceVersion={rv}&resourceVersionMatch=NotOlderThan"),
        format!("&resourceVersion={rv}&resourceVersionMatch=Exact"),
        format!("&resourceVersion={rv}"),
    ];
    for first in &firsts {
        for limit in [1, 2, 5] {
            let got = walk(&s, &all, "labelSelector=pick%3Dyes", limit, first).await;
            assert_eq!(as_set(&got), picked, "labels, limit {limit}{first}");
            let got = walk(&s, &all, "fieldSelector=metadata.namespace%3Dt2", limit, first).await;
            assert_eq!(as_set(&got), in_t2, "fields, limit {limit}{first}");
            let both = "labelSelector=pick%3Dyes&fieldSelector=metadata.namespace%3Dt2";
            let got = walk(&s, &all, both, limit, first).await;
            let want: BTreeSet<String> = picked.intersection(&in_t2).cloned().collect();
            assert_eq!(as_set(&got), want, "both, limit {limit}{first}");
        }
    }

    // Without a selector the count of what follows is still reported.
    let (c, _, b) = s.raw("GET", &format!("{all}?limit=5"), &[], None).await;
    assert_eq!(c, 200);
    assert_eq!(parse(&b)["metadata"]["remainingItemCount"], 19, "{b}");
}

#[tokio::test]
async fn filtered_pages_are_full_embedded() {
    filtered_pages_are_full(Backend::Embedded).await;
}

#[tokio::test]
async fn filtered_pages_are_full_etcd() {
    filtered_pages_are_full(Backend::Etcd).await;
}
