//! Raw HTTP checks of the aggregator contract; test names cite the contract item IDs.

use cozyplane_conformance::{Backend, TestServer};
use serde_json::Value;

const VPCS: &str = "/apis/sdn.cozystack.io/v1alpha1/namespaces/default/vpcs";
const JSON: (&str, &str) = ("content-type", "application/json");

fn vpc(name: &str) -> String {
    format!(
        r#"{{"apiVersion":"sdn.cozystack.io/v1alpha1","kind":"VPC","metadata":{{"name":"{name}"}},"spec":{{"cidrs":["10.0.0.0/24"]}}}}"#
    )
}

fn parse(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("{e}: {s}"))
}

#[tokio::test]
async fn disc_01_03_05_06_discovery_documents() {
    let s = TestServer::start(Backend::Embedded).await;
    let (c, _, b) = s.raw("GET", "/apis", &[], None).await;
    assert_eq!(c, 200);
    assert_eq!(parse(&b)["groups"][0]["name"], "sdn.cozystack.io");
    let (_, _, b) = s.raw("GET", "/apis/sdn.cozystack.io/v1alpha1", &[], None).await;
    let list = parse(&b);
    let vpcs = list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "vpcs")
        .unwrap();
    assert_eq!(vpcs["kind"], "VPC");
    assert_eq!(vpcs["verbs"].as_array().unwrap().len(), 8);
    assert!(
        list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == "vpcs/status")
    );
    let accept = (
        "accept",
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
    );
    let (c, h, b) = s.raw("GET", "/apis", &[accept], None).await;
    assert_eq!(c, 200);
    assert!(
        h["content-type"]
            .to_str()
            .unwrap()
            .contains("as=APIGroupDiscoveryList")
    );
    assert_eq!(
        parse(&b)["items"][0]["versions"][0]["resources"][0]["responseKind"]["kind"],
        "VPC"
    );
    let etag = h["etag"].to_str().unwrap().to_string();
    let (c, _, _) = s
        .raw("GET", "/apis", &[accept, ("if-none-match", &etag)], None)
        .await;
    assert_eq!(c, 304);
}

#[tokio::test]
async fn oapi_03_04_05_openapi_v3_with_hash() {
    let s = TestServer::start(Backend::Embedded).await;
    let (_, _, b) = s.raw("GET", "/openapi/v3", &[], None).await;
    let url = parse(&b)["paths"]["apis/sdn.cozystack.io/v1alpha1"]["serverRelativeURL"]
        .as_str()
        .unwrap()
        .to_string();
    let (c, h, b) = s.raw("GET", &url, &[], None).await;
    assert_eq!(c, 200);
    assert_eq!(h["cache-control"], "public, immutable");
    let doc = parse(&b);
    let patch = &doc["paths"]["/apis/sdn.cozystack.io/v1alpha1/namespaces/{namespace}/vpcs/{name}"]["patch"];
    // OAPI-07: strategic merge patch and apply are implemented, so they are advertised.
    assert!(
        patch["requestBody"]["content"]
            .get("application/strategic-merge-patch+json")
            .is_some()
    );
    assert_eq!(patch["x-kubernetes-group-version-kind"]["kind"], "VPC");
    let (c, _, _) = s
        .raw(
            "GET",
            "/openapi/v3/apis/sdn.cozystack.io/v1alpha1?hash=STALE",
            &[],
            None,
        )
        .await;
    assert_eq!(c, 301);
    let (c, _, _) = s.raw("GET", "/openapi/v2", &[], None).await;
    assert_eq!(c, 200);
}

#[tokio::test]
async fn obj_01_06_07_08_create_conflicts_and_preconditions() {
    let s = TestServer::start(Backend::Embedded).await;
    let (c, _, b) = s.raw("POST", VPCS, &[JSON], Some(&vpc("a"))).await;
    assert_eq!(c, 201, "{b}");
    let created = parse(&b);
    assert!(created["metadata"]["uid"].as_str().unwrap().len() == 36);
    let (c, _, b) = s.raw("POST", VPCS, &[JSON], Some(&vpc("a"))).await;
    assert_eq!((c, parse(&b)["reason"].as_str().unwrap()), (409, "AlreadyExists"));
    let mut stale = created.clone();
    stale["metadata"]["resourceVersion"] = "1".into();
    let (c, _, b) = s
        .raw("PUT", &format!("{VPCS}/a"), &[JSON], Some(&stale.to_string()))
        .await;
    assert_eq!((c, parse(&b)["reason"].as_str().unwrap()), (409, "Conflict"));
    let mut no_rv = created.clone();
    no_rv["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    let (c, _, _) = s
        .raw("PUT", &format!("{VPCS}/a"), &[JSON], Some(&no_rv.to_string()))
        .await;
    assert_eq!(c, 422);
    let (c, _, _) = s
        .raw("PUT", &format!("{VPCS}/b"), &[JSON], Some(&created.to_string()))
        .await;
    assert!(c == 400 || c == 404, "{c}");
    // OBJ-11: a no-op PUT keeps the resourceVersion.
    let (c, _, b) = s
        .raw("PUT", &format!("{VPCS}/a"), &[JSON], Some(&created.to_string()))
        .await;
    assert_eq!(c, 200);
    assert_eq!(
        parse(&b)["metadata"]["resourceVersion"],
        created["metadata"]["resourceVersion"]
    );
}

#[tokio::test]
async fn obj_02_03_04_05_generate_name_and_bad_bodies() {
    let s = TestServer::start(Backend::Embedded).await;
    let body = r#"{"apiVersion":"sdn.cozystack.io/v1alpha1","kind":"VPC","metadata":{"generateName":"vpc-"},"spec":{"cidrs":["10.0.0.0/24"]}}"#;
    let (c, _, b) = s.raw("POST", VPCS, &[JSON], Some(body)).await;
    assert_eq!(c, 201, "{b}");
    let name = parse(&b)["metadata"]["name"].as_str().unwrap().to_string();
    assert!(name.starts_with("vpc-") && name.len() == 9);
    let (c, _, _) = s
        .raw(
            "POST",
            VPCS,
            &[JSON],
            Some(r#"{"spec":{"cidrs":["10.0.0.0/24"]}}"#),
        )
        .await;
    assert_eq!(c, 422);
    let other_ns = vpc("x").replace(r#""name":"x""#, r#""name":"x","namespace":"other""#);
    let (c, _, _) = s.raw("POST", VPCS, &[JSON], Some(&other_ns)).await;
    assert_eq!(c, 400);
    let (c, _, _) = s
        .raw(
            "POST",
            VPCS,
            &[JSON],
            Some(&vpc("y").replace("sdn.cozystack.io/v1alpha1", "v1")),
        )
        .await;
    assert_eq!(c, 400);
    let (c, _, _) = s
        .raw(
            "POST",
            VPCS,
            &[("content-type", "application/yaml")],
            Some("x: 1"),
        )
        .await;
    assert_eq!(c, 415);
    let (c, _, _) = s.raw("POST", VPCS, &[JSON], Some("{not json")).await;
    assert_eq!(c, 400);
    let (c, _, _) = s
        .raw("GET", "/apis/sdn.cozystack.io/v1alpha1/nothings", &[], None)
        .await;
    assert_eq!(c, 404);
}

#[tokio::test]
async fn obj_13_status_subresource_and_main_resource_are_separate() {
    let s = TestServer::start(Backend::Embedded).await;
    let with_status = vpc("a").replace(r#""spec""#, r#""status":{"phase":"Bogus","vni":7},"spec""#);
    let (_, _, b) = s.raw("POST", VPCS, &[JSON], Some(&with_status)).await;
    // Status from the request is dropped; the server's own allocation (issue 5) and the status
    // derived from it in the same write are there.
    let o = parse(&b);
    let vni = o["status"]["vni"].as_i64().unwrap_or_default();
    assert_eq!(o["status"]["phase"].as_str(), Some("Ready"), "{b}");
    assert!(
        vni >= 100,
        "the server allocates VNIs from 100 up, never the requested 7: {b}"
    );
    let merge = ("content-type", "application/merge-patch+json");
    let (_, _, b) = s
        .raw(
            "PATCH",
            &format!("{VPCS}/a/status"),
            &[merge],
            Some(r#"{"status":{"phase":"Pending"},"spec":{"mtu":9000}}"#),
        )
        .await;
    let o = parse(&b);
    assert_eq!(
        (o["status"]["phase"].as_str(), o["spec"].get("mtu")),
        (Some("Pending"), None)
    );
    assert_eq!(o["metadata"]["generation"], 1);
    let (_, _, b) = s
        .raw(
            "PATCH",
            &format!("{VPCS}/a"),
            &[merge],
            Some(r#"{"status":{"vni":8},"spec":{"mtu":1400}}"#),
        )
        .await;
    let o = parse(&b);
    assert_eq!(
        (o["status"]["vni"].as_i64(), o["spec"]["mtu"].as_i64()),
        (Some(vni), Some(1400))
    );
    assert_eq!(o["metadata"]["generation"], 2);
    // A spec change re-derives the status in the same write.
    assert_eq!(o["status"]["phase"], "Ready");
    assert_eq!(o["status"]["conditions"][0]["observedGeneration"], 2);
}

#[tokio::test]
async fn obj_14_15_17_delete_finalizers_and_preconditions() {
    let s = TestServer::start(Backend::Embedded).await;
    let fin = vpc("a").replace(r#""name":"a""#, r#""name":"a","finalizers":["example.com/x"]"#);
    s.raw("POST", VPCS, &[JSON], Some(&fin)).await;
    let (c, _, _) = s
        .raw(
            "DELETE",
            &format!("{VPCS}/a"),
            &[JSON],
            Some(r#"{"preconditions":{"uid":"nope"}}"#),
        )
        .await;
    assert_eq!(c, 409);
    let (c, _, b) = s.raw("DELETE", &format!("{VPCS}/a"), &[], None).await;
    assert_eq!(c, 200);
    assert!(parse(&b)["metadata"]["deletionTimestamp"].is_string(), "{b}");
    let (c, _, _) = s.raw("GET", &format!("{VPCS}/a"), &[], None).await;
    assert_eq!(c, 200);
    let merge = ("content-type", "application/merge-patch+json");
    let (c, _, b) = s
        .raw(
            "PATCH",
            &format!("{VPCS}/a"),
            &[merge],
            Some(r#"{"metadata":{"finalizers":["example.com/x","example.com/new"]}}"#),
        )
        .await;
    assert_eq!(c, 422, "{b}");
    let (c, _, _) = s
        .raw(
            "PATCH",
            &format!("{VPCS}/a"),
            &[merge],
            Some(r#"{"metadata":{"finalizers":null}}"#),
        )
        .await;
    assert_eq!(c, 200);
    let (c, _, _) = s.raw("GET", &format!("{VPCS}/a"), &[], None).await;
    assert_eq!(c, 404);
    s.raw("POST", VPCS, &[JSON], Some(&vpc("b"))).await;
    let (c, _, b) = s.raw("DELETE", &format!("{VPCS}/b"), &[], None).await;
    assert_eq!((c, parse(&b)["status"].as_str().unwrap()), (200, "Success"));
}

#[tokio::test]
async fn dry_01_dry_run_persists_nothing() {
    let s = TestServer::start(Backend::Embedded).await;
    let (c, _, _) = s
        .raw("POST", &format!("{VPCS}?dryRun=All"), &[JSON], Some(&vpc("a")))
        .await;
    assert_eq!(c, 201);
    let (c, _, _) = s.raw("GET", &format!("{VPCS}/a"), &[], None).await;
    assert_eq!(c, 404);
    let (c, _, _) = s
        .raw("POST", &format!("{VPCS}?dryRun=Some"), &[JSON], Some(&vpc("a")))
        .await;
    assert_eq!(c, 422);
}

#[tokio::test]
async fn fv_01_field_validation_strict_and_warn() {
    let s = TestServer::start(Backend::Embedded).await;
    let unknown = vpc("a").replace(r#""cidrs""#, r#""foo":1,"cidrs""#);
    let (c, _, b) = s
        .raw(
            "POST",
            &format!("{VPCS}?fieldValidation=Strict"),
            &[JSON],
            Some(&unknown),
        )
        .await;
    assert_eq!(c, 400, "{b}");
    assert!(b.contains("unknown field \\\"spec.foo\\\""), "{b}");
    let (c, h, _) = s.raw("POST", VPCS, &[JSON], Some(&unknown)).await;
    assert_eq!(c, 201);
    assert!(h["warning"].to_str().unwrap().contains("spec.foo"));
}

#[tokio::test]
async fn patch_01_04_strategic_merge_is_served_and_json_patch_failures_are_422() {
    let s = TestServer::start(Backend::Embedded).await;
    s.raw("POST", VPCS, &[JSON], Some(&vpc("a"))).await;
    let (c, _, b) = s
        .raw(
            "PATCH",
            &format!("{VPCS}/a"),
            &[("content-type", "application/strategic-merge-patch+json")],
            Some("{}"),
        )
        .await;
    assert_eq!(c, 200, "{b}");
    let (c, _, b) = s
        .raw(
            "PATCH",
            &format!("{VPCS}/a"),
            &[("content-type", "application/xml")],
            Some("{}"),
        )
        .await;
    assert_eq!(
        (c, parse(&b)["reason"].as_str().unwrap()),
        (415, "UnsupportedMediaType")
    );
    let jp = ("content-type", "application/json-patch+json");
    let (c, _, _) = s
        .raw(
            "PATCH",
            &format!("{VPCS}/a"),
            &[jp],
            Some(r#"[{"op":"test","path":"/spec/mtu","value":5}]"#),
        )
        .await;
    assert_eq!(c, 422);
    let (c, _, _) = s
        .raw("PATCH", &format!("{VPCS}/a"), &[jp], Some(r#"{"op":1}"#))
        .await;
    assert_eq!(c, 400);
    let (c, _, _) = s
        .raw(
            "PATCH",
            &format!("{VPCS}/zzz"),
            &[("content-type", "application/merge-patch+json")],
            Some("{}"),
        )
        .await;
    assert_eq!(c, 404);
}

#[tokio::test]
async fn list_01_02_04_sel_01_02_paging_and_selectors() {
    let s = TestServer::start(Backend::Embedded).await;
    for (i, team) in ["a", "b", "a"].iter().enumerate() {
        let body =
            vpc(&format!("v{i}")).replace(r#""name":"#, &format!(r#""labels":{{"team":"{team}"}},"name":"#));
        s.raw("POST", VPCS, &[JSON], Some(&body)).await;
    }
    let (_, _, b) = s.raw("GET", &format!("{VPCS}?limit=2"), &[], None).await;
    let page = parse(&b);
    assert_eq!(page["kind"], "VPCList");
    assert_eq!(page["items"].as_array().unwrap().len(), 2);
    assert_eq!(page["metadata"]["remainingItemCount"], 1);
    let cont = page["metadata"]["continue"].as_str().unwrap();
    let (_, _, b) = s
        .raw("GET", &format!("{VPCS}?limit=2&continue={cont}"), &[], None)
        .await;
    let next = parse(&b);
    assert_eq!(next["items"].as_array().unwrap().len(), 1);
    assert_eq!(
        next["metadata"]["resourceVersion"],
        page["metadata"]["resourceVersion"]
    );
    let (_, _, b) = s
        .raw("GET", &format!("{VPCS}?labelSelector=team%20in%20(a)"), &[], None)
        .await;
    assert_eq!(parse(&b)["items"].as_array().unwrap().len(), 2);
    let (_, _, b) = s
        .raw(
            "GET",
            &format!("{VPCS}?fieldSelector=metadata.name%3Dv1"),
            &[],
            None,
        )
        .await;
    assert_eq!(parse(&b)["items"].as_array().unwrap().len(), 1);
    let (c, _, _) = s
        .raw("GET", &format!("{VPCS}?fieldSelector=spec.foo%3D1"), &[], None)
        .await;
    assert_eq!(c, 400);
    let (c, _, _) = s
        .raw("GET", &format!("{VPCS}?labelSelector=a%20in%20b"), &[], None)
        .await;
    assert_eq!(c, 400);
    let (c, _, _) = s
        .raw("GET", &format!("{VPCS}?resourceVersionMatch=Exact"), &[], None)
        .await;
    assert_eq!(c, 422);
    let (c, _, _) = s
        .raw(
            "GET",
            &format!("{VPCS}?resourceVersion=0&resourceVersionMatch=NotOlderThan&limit=500"),
            &[],
            None,
        )
        .await;
    assert_eq!(c, 200);
    let (_, _, b) = s
        .raw("GET", "/apis/sdn.cozystack.io/v1alpha1/vpcs", &[], None)
        .await;
    assert_eq!(parse(&b)["items"].as_array().unwrap().len(), 3);
    let (_, _, b) = s
        .raw("DELETE", &format!("{VPCS}?labelSelector=team%3Da"), &[], None)
        .await;
    assert_eq!(parse(&b)["items"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn neg_02_05_table_and_partial_object_metadata() {
    let s = TestServer::start(Backend::Embedded).await;
    s.raw("POST", VPCS, &[JSON], Some(&vpc("a"))).await;
    let (c, _, b) = s
        .raw(
            "GET",
            VPCS,
            &[(
                "accept",
                "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
            )],
            None,
        )
        .await;
    assert_eq!(c, 200);
    let t = parse(&b);
    assert_eq!(t["kind"], "Table");
    assert_eq!(t["columnDefinitions"][0]["name"], "Name");
    assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    let (_, _, b) = s
        .raw(
            "GET",
            VPCS,
            &[(
                "accept",
                "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io",
            )],
            None,
        )
        .await;
    assert_eq!(parse(&b)["kind"], "PartialObjectMetadataList");
    let (c, _, _) = s
        .raw(
            "GET",
            VPCS,
            &[("accept", "application/vnd.kubernetes.protobuf")],
            None,
        )
        .await;
    assert_eq!(c, 406);
}

#[tokio::test]
async fn health_01_version_and_metrics() {
    let s = TestServer::start(Backend::Embedded).await;
    let (c, _, b) = s.raw("GET", "/readyz?verbose", &[], None).await;
    assert_eq!(c, 200);
    assert!(b.contains("[+]storage ok"), "{b}");
    let (c, _, b) = s.raw("GET", "/version", &[], None).await;
    assert_eq!((c, parse(&b)["minor"].as_str().unwrap()), (200, "33"));
    let (c, _, b) = s.raw("GET", "/metrics", &[], None).await;
    assert_eq!(c, 200);
    assert!(b.contains("apiserver_request_total"), "{b}");
}

#[tokio::test]
async fn fp_04_standalone_refuses_anonymous_requests_but_serves_health() {
    let s = TestServer::start(Backend::Embedded).await;
    // An anonymous client: the kubeconfig's CA, no client certificate.
    let kc = kube::config::Kubeconfig::read_from(&s.kubeconfig).unwrap();
    let mut cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    cfg.auth_info = Default::default();
    let anon = kube::Client::try_from(cfg).unwrap();
    let status = |r: Result<String, kube::Error>| match r {
        Ok(_) => 200,
        Err(kube::Error::Api(s)) => s.code,
        Err(e) => panic!("{e}"),
    };
    let get = |p: &str| http::Request::get(p).body(Vec::new()).unwrap();
    assert_eq!(
        status(anon.request_text(get("/apis/sdn.cozystack.io/v1alpha1")).await),
        401
    );
    assert_eq!(status(anon.request_text(get("/readyz")).await), 200);
}

fn events(body: &str) -> Vec<Value> {
    body.lines().filter(|l| !l.trim().is_empty()).map(parse).collect()
}

#[tokio::test]
async fn watch_01_05_07_08_14_watch_events_bookmarks_and_transitions() {
    let s = TestServer::start(Backend::Embedded).await;
    let (_, _, b) = s.raw("POST", VPCS, &[JSON], Some(&vpc("a"))).await;
    let rv = parse(&b)["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    // Streaming list: ADDED for the current state, then the initial-events-end bookmark.
    let (c, h, b) = s
        .raw("GET", &format!("{VPCS}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1"), &[], None)
        .await;
    assert_eq!(c, 200);
    assert_eq!(h["content-type"], "application/json");
    let ev = events(&b);
    assert_eq!(
        (ev[0]["type"].as_str(), ev[0]["object"]["kind"].as_str()),
        (Some("ADDED"), Some("VPC"))
    );
    assert_eq!(ev[1]["type"], "BOOKMARK");
    assert_eq!(ev[1]["object"]["kind"], "VPC");
    assert_eq!(
        ev[1]["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    // A labelSelector watch from `rv` sees the object enter and leave the selection.
    let watch = {
        let url = format!("{VPCS}?watch=true&labelSelector=team%3Dx&resourceVersion={rv}&timeoutSeconds=2");
        let s2 = s.client().await;
        tokio::spawn(async move {
            let req = http::Request::get(url).body(Vec::new()).unwrap();
            s2.request_text(req).await.unwrap()
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let merge = ("content-type", "application/merge-patch+json");
    s.raw(
        "PATCH",
        &format!("{VPCS}/a"),
        &[merge],
        Some(r#"{"metadata":{"labels":{"team":"x"}}}"#),
    )
    .await;
    s.raw(
        "PATCH",
        &format!("{VPCS}/a"),
        &[merge],
        Some(r#"{"spec":{"mtu":1400}}"#),
    )
    .await;
    s.raw(
        "PATCH",
        &format!("{VPCS}/a"),
        &[merge],
        Some(r#"{"metadata":{"labels":{"team":"y"}}}"#),
    )
    .await;
    let types: Vec<String> = events(&watch.await.unwrap())
        .iter()
        .map(|e| e["type"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(types, ["ADDED", "MODIFIED", "DELETED"]);
    // WATCH-14: PartialObjectMetadata events.
    let (_, _, b) = s
        .raw(
            "GET",
            &format!("{VPCS}?watch=1&timeoutSeconds=1"),
            &[(
                "accept",
                "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
            )],
            None,
        )
        .await;
    assert_eq!(events(&b)[0]["object"]["kind"], "PartialObjectMetadata");
}

#[tokio::test]
async fn watch_09_10_streaming_list_parameter_validation() {
    let s = TestServer::start(Backend::Embedded).await;
    let (c, _, b) = s
        .raw(
            "GET",
            &format!("{VPCS}?watch=1&sendInitialEvents=true"),
            &[],
            None,
        )
        .await;
    assert_eq!(c, 422, "{b}");
    let (c, _, _) = s
        .raw(
            "GET",
            &format!("{VPCS}?sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=0"),
            &[],
            None,
        )
        .await;
    assert_eq!(c, 422);
    let (c, _, _) = s
        .raw(
            "GET",
            &format!("{VPCS}?watch=1&resourceVersionMatch=NotOlderThan&resourceVersion=0"),
            &[],
            None,
        )
        .await;
    assert_eq!(c, 422);
}

#[tokio::test]
async fn obj_bad_input_too_large_body_is_413_and_unknown_verbs_405() {
    let s = TestServer::start(Backend::Embedded).await;
    let big = format!(
        r#"{{"metadata":{{"name":"a","annotations":{{"x":"{}"}}}}}}"#,
        "y".repeat(4 * 1024 * 1024)
    );
    let (c, _, _) = s.raw("POST", VPCS, &[JSON], Some(&big)).await;
    assert_eq!(c, 413);
    let (c, _, _) = s
        .raw(
            "POST",
            "/apis/sdn.cozystack.io/v1alpha1/vpcs",
            &[JSON],
            Some(&vpc("a")),
        )
        .await;
    assert_eq!(c, 405);
    let (c, _, _) = s
        .raw("POST", &format!("{VPCS}/a/status"), &[JSON], Some(&vpc("a")))
        .await;
    assert_eq!(c, 405);
    let (c, _, _) = s
        .raw(
            "GET",
            "/apis/sdn.cozystack.io/v1alpha1/namespaces/default/ports",
            &[],
            None,
        )
        .await;
    assert_eq!(c, 404);
}

#[tokio::test]
async fn fv_01_duplicate_fields_are_reported() {
    let s = TestServer::start(Backend::Embedded).await;
    let dup = r#"{"apiVersion":"sdn.cozystack.io/v1alpha1","kind":"VPC","metadata":{"name":"a","name":"a"},"spec":{"cidrs":["10.0.0.0/24"]}}"#;
    let (c, _, b) = s
        .raw(
            "POST",
            &format!("{VPCS}?fieldValidation=Strict"),
            &[JSON],
            Some(dup),
        )
        .await;
    assert_eq!(c, 400, "{b}");
    assert!(b.contains("duplicate field"), "{b}");
}
