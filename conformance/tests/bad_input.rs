//! Bad input over raw HTTPS: every malformed request gets the right `Status` (code, reason,
//! causes) and never a 5xx. Test names cite the aggregator-contract item IDs.

use cozyplane_conformance::{Backend, TestServer};
use proptest::prelude::*;
use serde_json::{Value, json};

const VPCS: &str = "/apis/sdn.cozystack.io/v1alpha1/namespaces/default/vpcs";
const JSON: (&str, &str) = ("content-type", "application/json");
const MERGE: (&str, &str) = ("content-type", "application/merge-patch+json");
const JSONPATCH: (&str, &str) = ("content-type", "application/json-patch+json");

fn vpc(name: &str) -> Value {
    json!({
        "apiVersion": "sdn.cozystack.io/v1alpha1",
        "kind": "VPC",
        "metadata": { "name": name },
        "spec": { "cidrs": ["10.0.0.0/24"] },
    })
}

fn parse(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("{e}: {s}"))
}

/// Asserts `body` is a failure `Status` with `code` and `reason`, and returns it.
fn status(code: u16, body: &str, want_code: u16, reason: &str) -> Value {
    assert_eq!(code, want_code, "{body}");
    let s = parse(body);
    assert_eq!(s["kind"], "Status", "{body}");
    assert_eq!(s["apiVersion"], "v1", "{body}");
    assert_eq!(s["status"], "Failure", "{body}");
    assert_eq!(s["code"], want_code, "{body}");
    assert_eq!(s["reason"], reason, "{body}");
    assert!(s["message"].as_str().is_some_and(|m| !m.is_empty()), "{body}");
    s
}

/// `(field, reason)` of every cause of an Invalid status.
fn causes(s: &Value) -> Vec<(String, String)> {
    s["details"]["causes"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .map(|c| {
                    (
                        c["field"].as_str().unwrap_or_default().to_string(),
                        c["reason"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// One client for many requests (a new client per request costs a TLS handshake).
struct Raw {
    client: kube::Client,
}

impl Raw {
    async fn new(s: &TestServer) -> Self {
        Self {
            client: s.client().await,
        }
    }

    async fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> (u16, http::HeaderMap, String) {
        let mut b = http::Request::builder().method(method).uri(path);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let req = b.body(body).expect("request builds");
        let resp = self
            .client
            .send(req.map(kube::client::Body::from))
            .await
            .expect("request is sent");
        let code = resp.status().as_u16();
        let headers = resp.headers().clone();
        let bytes = http_body_util::BodyExt::collect(resp.into_body())
            .await
            .expect("body")
            .to_bytes();
        (code, headers, String::from_utf8_lossy(&bytes).into_owned())
    }

    async fn call(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> (u16, http::HeaderMap, String) {
        self.send(method, path, headers, body.as_bytes().to_vec()).await
    }
}

fn warnings(h: &http::HeaderMap) -> Vec<String> {
    h.get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn err_05_obj_05_malformed_bodies_wrong_type_meta_and_media_types() {
    let s = TestServer::start(Backend::Embedded).await;
    let r = Raw::new(&s).await;
    for bad in ["{not json", "", "[1,2", "{\"metadata\":", "\u{0}"] {
        let (c, _, b) = r.call("POST", VPCS, &[JSON], bad).await;
        status(c, &b, 400, "BadRequest");
    }
    // A JSON value that is not an object cannot be a VPC.
    for not_object in ["[]", "42", "\"vpc\"", "null"] {
        let (c, _, b) = r.call("POST", VPCS, &[JSON], not_object).await;
        assert!(c == 400 || c == 422, "{not_object}: {c} {b}");
        status(c, &b, c, if c == 400 { "BadRequest" } else { "Invalid" });
    }
    // A field of the wrong JSON type.
    let mut wrong = vpc("a");
    wrong["spec"]["cidrs"] = json!("10.0.0.0/24");
    let (c, _, b) = r.call("POST", VPCS, &[JSON], &wrong.to_string()).await;
    status(c, &b, 400, "BadRequest");
    // Wrong apiVersion and wrong kind.
    let mut av = vpc("a");
    av["apiVersion"] = json!("v1");
    let (c, _, b) = r.call("POST", VPCS, &[JSON], &av.to_string()).await;
    let st = status(c, &b, 400, "BadRequest");
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .contains("does not match the expected API version"),
        "{b}"
    );
    let mut kind = vpc("a");
    kind["kind"] = json!("Port");
    let (c, _, b) = r.call("POST", VPCS, &[JSON], &kind.to_string()).await;
    let st = status(c, &b, 400, "BadRequest");
    assert!(st["message"].as_str().unwrap().contains("kind"), "{b}");
    // YAML and protobuf bodies are not accepted: 415, not a parse error.
    for ct in [
        "application/yaml",
        "application/vnd.kubernetes.protobuf",
        "text/plain",
    ] {
        let (c, _, b) = r
            .call(
                "POST",
                VPCS,
                &[("content-type", ct)],
                "metadata: {name: a}\n  - broken: [",
            )
            .await;
        status(c, &b, 415, "UnsupportedMediaType");
    }
    // Malformed patch documents.
    r.call("POST", VPCS, &[JSON], &vpc("p").to_string()).await;
    let (c, _, b) = r.call("PATCH", &format!("{VPCS}/p"), &[MERGE], "{oops").await;
    status(c, &b, 400, "BadRequest");
    let (c, _, b) = r
        .call(
            "PATCH",
            &format!("{VPCS}/p"),
            &[JSONPATCH],
            r#"[{"op":"frobnicate","path":"/spec"}]"#,
        )
        .await;
    status(c, &b, 400, "BadRequest");
    // Nothing was stored by any of the above but the one valid VPC.
    let (_, _, b) = r.call("GET", VPCS, &[], "").await;
    assert_eq!(parse(&b)["items"].as_array().unwrap().len(), 1, "{b}");
}

#[tokio::test]
async fn fv_01_unknown_fields_strict_warn_ignore_including_zero_values() {
    let s = TestServer::start(Backend::Embedded).await;
    let r = Raw::new(&s).await;
    // Zero values are unknown fields too: the schema decides, not the typed round trip.
    let mut body = vpc("a");
    body["spec"]["foo"] = json!(0);
    body["spec"]["bar"] = json!("");
    body["metadata"]["nope"] = json!(null);
    let (c, _, b) = r
        .call(
            "POST",
            &format!("{VPCS}?fieldValidation=Strict"),
            &[JSON],
            &body.to_string(),
        )
        .await;
    let st = status(c, &b, 400, "BadRequest");
    let msg = st["message"].as_str().unwrap();
    assert!(msg.starts_with("strict decoding error: "), "{msg}");
    for f in ["spec.foo", "spec.bar", "metadata.nope"] {
        assert!(msg.contains(&format!("unknown field \"{f}\"")), "{msg}");
    }
    let (c, _, _) = r.call("GET", &format!("{VPCS}/a"), &[], "").await;
    assert_eq!(c, 404, "Strict must not store anything");
    // Strict is judged before validation: an invalid object with an unknown field is 400.
    let mut invalid = body.clone();
    invalid["spec"]["cidrs"] = json!(["not-a-cidr"]);
    let (c, _, b) = r
        .call(
            "POST",
            &format!("{VPCS}?fieldValidation=Strict"),
            &[JSON],
            &invalid.to_string(),
        )
        .await;
    status(c, &b, 400, "BadRequest");
    // Warn (the default): stored, one warning per field.
    let (c, h, b) = r.call("POST", VPCS, &[JSON], &body.to_string()).await;
    assert_eq!(c, 201, "{b}");
    let w = warnings(&h);
    assert_eq!(w.len(), 3, "{w:?}");
    assert!(w.iter().all(|w| w.starts_with("299 - \"unknown field")), "{w:?}");
    // Ignore: stored silently.
    body["metadata"]["name"] = json!("b");
    let (c, h, b) = r
        .call(
            "POST",
            &format!("{VPCS}?fieldValidation=Ignore"),
            &[JSON],
            &body.to_string(),
        )
        .await;
    assert_eq!(c, 201, "{b}");
    assert!(warnings(&h).is_empty());
    // An unknown mode is a bad request.
    let (c, _, b) = r
        .call(
            "POST",
            &format!("{VPCS}?fieldValidation=Loose"),
            &[JSON],
            &vpc("c").to_string(),
        )
        .await;
    status(c, &b, 400, "BadRequest");
    // PUT: Strict refuses, Warn warns.
    let (_, _, b) = r.call("GET", &format!("{VPCS}/a"), &[], "").await;
    let mut cur = parse(&b);
    cur["spec"]["extra"] = json!(false);
    let (c, _, b) = r
        .call(
            "PUT",
            &format!("{VPCS}/a?fieldValidation=Strict"),
            &[JSON],
            &cur.to_string(),
        )
        .await;
    let st = status(c, &b, 400, "BadRequest");
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .contains("unknown field \"spec.extra\""),
        "{b}"
    );
    let (c, h, b) = r
        .call("PUT", &format!("{VPCS}/a"), &[JSON], &cur.to_string())
        .await;
    assert_eq!(c, 200, "{b}");
    assert!(warnings(&h).iter().any(|w| w.contains("spec.extra")), "{h:?}");
}

#[tokio::test]
async fn fv_01_patch_03_field_validation_applies_to_patches() {
    let s = TestServer::start(Backend::Embedded).await;
    let r = Raw::new(&s).await;
    let (_, _, b) = r.call("POST", VPCS, &[JSON], &vpc("a").to_string()).await;
    let rv = parse(&b)["metadata"]["resourceVersion"].clone();
    let strict = format!("{VPCS}/a?fieldValidation=Strict");
    // Merge patch, zero-valued unknown field.
    let (c, _, b) = r.call("PATCH", &strict, &[MERGE], r#"{"spec":{"foo":0}}"#).await;
    let st = status(c, &b, 400, "BadRequest");
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .contains("unknown field \"spec.foo\""),
        "{b}"
    );
    // Duplicate keys in a merge patch.
    let (c, _, b) = r
        .call("PATCH", &strict, &[MERGE], r#"{"spec":{"mtu":1400,"mtu":1500}}"#)
        .await;
    let st = status(c, &b, 400, "BadRequest");
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .contains("duplicate field \"spec.mtu\""),
        "{b}"
    );
    // JSON patch adding an unknown field.
    let (c, _, b) = r
        .call(
            "PATCH",
            &strict,
            &[JSONPATCH],
            r#"[{"op":"add","path":"/spec/foo","value":""}]"#,
        )
        .await;
    status(c, &b, 400, "BadRequest");
    // /status too.
    let (c, _, b) = r
        .call(
            "PATCH",
            &format!("{VPCS}/a/status?fieldValidation=Strict"),
            &[MERGE],
            r#"{"status":{"bogus":1}}"#,
        )
        .await;
    status(c, &b, 400, "BadRequest");
    // Nothing changed.
    let (_, _, b) = r.call("GET", &format!("{VPCS}/a"), &[], "").await;
    assert_eq!(parse(&b)["metadata"]["resourceVersion"], rv);
    // Warn: the patch applies (the unknown field is dropped) with a warning.
    let (c, h, b) = r
        .call(
            "PATCH",
            &format!("{VPCS}/a"),
            &[MERGE],
            r#"{"spec":{"foo":0,"mtu":1400}}"#,
        )
        .await;
    assert_eq!(c, 200, "{b}");
    assert_eq!(parse(&b)["spec"]["mtu"], 1400);
    assert!(parse(&b)["spec"].get("foo").is_none(), "{b}");
    let w = warnings(&h);
    assert!(
        w.iter()
            .any(|w| w.contains("unknown field \\\"spec.foo\\\"") || w.contains("unknown field 'spec.foo'")),
        "{w:?}"
    );
    // Ignore: no warning.
    let (c, h, _) = r
        .call(
            "PATCH",
            &format!("{VPCS}/a?fieldValidation=Ignore"),
            &[MERGE],
            r#"{"spec":{"foo":1}}"#,
        )
        .await;
    assert_eq!(c, 200);
    assert!(warnings(&h).is_empty());
}

#[tokio::test]
async fn obj_03_err_04_invalid_names_are_422_with_causes() {
    let s = TestServer::start(Backend::Embedded).await;
    let r = Raw::new(&s).await;
    let long = "a".repeat(300);
    for bad in [
        "UPPER",
        "with_underscore",
        "-leading",
        "trailing-",
        "a..b",
        long.as_str(),
    ] {
        let (c, _, b) = r.call("POST", VPCS, &[JSON], &vpc(bad).to_string()).await;
        let st = status(c, &b, 422, "Invalid");
        assert_eq!(st["details"]["kind"], "VPC", "{b}");
        assert_eq!(st["details"]["group"], "sdn.cozystack.io", "{b}");
        let cs = causes(&st);
        assert!(cs.iter().any(|(f, _)| f == "metadata.name"), "{bad}: {cs:?}");
    }
    // A name in the URL that no object can have is simply not found.
    let (c, _, b) = r.call("GET", &format!("{VPCS}/NOT_A_NAME"), &[], "").await;
    status(c, &b, 404, "NotFound");
    // Neither name nor generateName.
    let mut anon = vpc("x");
    anon["metadata"] = json!({});
    let (c, _, b) = r.call("POST", VPCS, &[JSON], &anon.to_string()).await;
    let st = status(c, &b, 422, "Invalid");
    assert!(
        causes(&st).contains(&("metadata.name".into(), "FieldValueRequired".into())),
        "{b}"
    );
    // An invalid generateName prefix.
    anon["metadata"] = json!({ "generateName": "Bad_" });
    let (c, _, b) = r.call("POST", VPCS, &[JSON], &anon.to_string()).await;
    status(c, &b, 422, "Invalid");
}

#[tokio::test]
async fn obj_18_owner_references_are_validated_and_deduplicated() {
    let s = TestServer::start(Backend::Embedded).await;
    let r = Raw::new(&s).await;
    let owner = json!({ "apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "u-1" });
    let mut missing = vpc("a");
    missing["metadata"]["ownerReferences"] =
        json!([{ "apiVersion": "v1", "kind": "ConfigMap", "name": "o" }]);
    let (c, _, b) = r.call("POST", VPCS, &[JSON], &missing.to_string()).await;
    let st = status(c, &b, 422, "Invalid");
    assert_eq!(
        causes(&st),
        [(
            "metadata.ownerReferences[0].uid".to_string(),
            "FieldValueRequired".to_string()
        )]
    );
    let mut two = vpc("a");
    let mut o2 = owner.clone();
    o2["uid"] = json!("u-2");
    o2["controller"] = json!(true);
    let mut o1 = owner.clone();
    o1["controller"] = json!(true);
    two["metadata"]["ownerReferences"] = json!([o1, o2]);
    let (c, _, b) = r.call("POST", VPCS, &[JSON], &two.to_string()).await;
    let st = status(c, &b, 422, "Invalid");
    assert!(
        causes(&st)
            .iter()
            .any(|(f, _)| f.starts_with("metadata.ownerReferences")),
        "{b}"
    );
    let mut dup = vpc("a");
    dup["metadata"]["ownerReferences"] = json!([owner, owner]);
    let (c, h, b) = r.call("POST", VPCS, &[JSON], &dup.to_string()).await;
    assert_eq!(c, 201, "{b}");
    assert_eq!(parse(&b)["metadata"]["ownerReferences"], json!([owner]));
    assert!(
        warnings(&h).iter().any(|w| w.contains("ownerReferences")),
        "{h:?}"
    );
}

#[tokio::test]
async fn err_05_sel_01_sel_02_invalid_selectors_and_list_options_are_400() {
    let s = TestServer::start(Backend::Embedded).await;
    let r = Raw::new(&s).await;
    for q in [
        "labelSelector=a%20in%20b",
        "labelSelector=%3D%3D",
        "labelSelector=a%3D(b",
        "labelSelector=!",
        "fieldSelector=spec.foo%3D1",
        "fieldSelector=metadata.name",
        "fieldSelector=metadata.name%3E1",
        "limit=-1",
        "limit=ten",
        "resourceVersion=abc",
    ] {
        let (c, _, b) = r.call("GET", &format!("{VPCS}?{q}"), &[], "").await;
        status(c, &b, 400, "BadRequest");
        // Watches and deletecollection parse the same way.
        let (c, _, b) = r.call("GET", &format!("{VPCS}?watch=1&{q}"), &[], "").await;
        status(c, &b, 400, "BadRequest");
        let (c, _, b) = r.call("DELETE", &format!("{VPCS}?{q}"), &[], "").await;
        status(c, &b, 400, "BadRequest");
    }
    let (c, _, b) = r
        .call("GET", &format!("{VPCS}?fieldSelector=spec.vni%3D1"), &[], "")
        .await;
    let st = status(c, &b, 400, "BadRequest");
    assert!(st["message"].as_str().unwrap().contains("spec.vni"), "{b}");
    // Watching one object with a selector naming another.
    let (c, _, b) = r
        .call(
            "GET",
            &format!("{VPCS}/a?watch=1&fieldSelector=metadata.name%3Db"),
            &[],
            "",
        )
        .await;
    status(c, &b, 400, "BadRequest");
}

#[tokio::test]
async fn list_02_err_05_tampered_continue_tokens_are_400() {
    let s = TestServer::start(Backend::Embedded).await;
    let r = Raw::new(&s).await;
    for n in ["a", "b", "c"] {
        r.call("POST", VPCS, &[JSON], &vpc(n).to_string()).await;
    }
    let (_, _, b) = r.call("GET", &format!("{VPCS}?limit=1"), &[], "").await;
    let token = parse(&b)["metadata"]["continue"].as_str().unwrap().to_string();
    use base64::Engine;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let forged = |v: Value| b64.encode(v.to_string());
    let mut flipped = token.clone().into_bytes();
    flipped[3] = if flipped[3] == b'A' { b'B' } else { b'A' };
    for bad in [
        "not-a-token!".to_string(),
        "%25%25%25".to_string(),
        b64.encode("{\"hello\":1}"),
        forged(json!({ "v": 9, "rv": 1, "start": "a" })),
        forged(json!({ "v": 1, "rv": 0, "start": "a" })),
        forged(json!({ "v": 1, "rv": 2, "start": "" })),
        format!("{token}xyz"),
        String::from_utf8(flipped).unwrap(),
    ] {
        let (c, _, b) = r
            .call("GET", &format!("{VPCS}?limit=1&continue={bad}"), &[], "")
            .await;
        let st = status(c, &b, 400, "BadRequest");
        assert!(st["message"].as_str().unwrap().contains("continue"), "{bad}: {b}");
    }
    // A token cannot be steered outside the collection it was issued for.
    let (c, _, b) = r
        .call(
            "GET",
            &format!(
                "{VPCS}?limit=5&continue={}",
                forged(json!({ "v": 1, "rv": 1, "start": "../../secrets/x" }))
            ),
            &[],
            "",
        )
        .await;
    assert!(c == 200 || c == 400 || c == 410, "{c} {b}");
    if c == 200 {
        for i in parse(&b)["items"].as_array().unwrap() {
            assert_eq!(i["kind"], "VPC");
        }
    }
    // The genuine token still works.
    let (c, _, _) = r
        .call("GET", &format!("{VPCS}?limit=1&continue={token}"), &[], "")
        .await;
    assert_eq!(c, 200);
}

#[tokio::test]
async fn err_08_list_03_compacted_revisions_and_expired_continue_are_410() {
    let s = TestServer::start(Backend::Embedded).await;
    let r = Raw::new(&s).await;
    let mut first_rv = String::new();
    for n in ["a", "b", "c"] {
        let (_, _, b) = r.call("POST", VPCS, &[JSON], &vpc(n).to_string()).await;
        if first_rv.is_empty() {
            first_rv = parse(&b)["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .to_string();
        }
    }
    let (_, _, b) = r.call("GET", &format!("{VPCS}?limit=1"), &[], "").await;
    let token = parse(&b)["metadata"]["continue"].as_str().unwrap().to_string();
    // Exact at an RV still in history works before compaction.
    let (c, _, b) = r
        .call(
            "GET",
            &format!("{VPCS}?resourceVersion={first_rv}&resourceVersionMatch=Exact"),
            &[],
            "",
        )
        .await;
    assert_eq!(c, 200, "{b}");
    assert_eq!(parse(&b)["metadata"]["resourceVersion"], first_rv.as_str());
    // One more write, then compact everything up to now.
    r.call("POST", VPCS, &[JSON], &vpc("d").to_string()).await;
    let now = s.storage.current_revision().await.unwrap();
    s.storage.compact(now).await.unwrap();
    let (c, _, b) = r
        .call(
            "GET",
            &format!("{VPCS}?resourceVersion={first_rv}&resourceVersionMatch=Exact"),
            &[],
            "",
        )
        .await;
    status(c, &b, 410, "Expired");
    // A paged list at an exact compacted RV too.
    let (c, _, b) = r
        .call(
            "GET",
            &format!("{VPCS}?resourceVersion={first_rv}&limit=1"),
            &[],
            "",
        )
        .await;
    status(c, &b, 410, "Expired");
    let (c, _, b) = r
        .call("GET", &format!("{VPCS}?limit=1&continue={token}"), &[], "")
        .await;
    let st = status(c, &b, 410, "Expired");
    assert!(st["message"].as_str().unwrap().contains("continue"), "{b}");
    // A fresh list works.
    let (c, _, b) = r.call("GET", &format!("{VPCS}?limit=1"), &[], "").await;
    assert_eq!(c, 200, "{b}");
}

#[tokio::test]
async fn watch_06_watch_from_a_too_old_resource_version_ends_with_410_event() {
    let s = TestServer::start(Backend::Embedded).await;
    let r = Raw::new(&s).await;
    let (_, _, b) = r.call("POST", VPCS, &[JSON], &vpc("a").to_string()).await;
    let old = parse(&b)["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    // More changes than the watch cache remembers (and than the store keeps after compaction).
    for i in 0..1100 {
        let (c, _, b) = r
            .call(
                "PATCH",
                &format!("{VPCS}/a"),
                &[MERGE],
                &format!(r#"{{"metadata":{{"labels":{{"i":"{i}"}}}}}}"#),
            )
            .await;
        assert_eq!(c, 200, "{b}");
    }
    let now = s.storage.current_revision().await.unwrap();
    s.storage.compact(now).await.unwrap();
    let (c, _, b) = r
        .call(
            "GET",
            &format!("{VPCS}?watch=1&resourceVersion={old}&timeoutSeconds=5"),
            &[],
            "",
        )
        .await;
    // Go rule: the watch itself starts (200); the failure is one ERROR event.
    assert_eq!(c, 200, "{b}");
    let events: Vec<Value> = b.lines().filter(|l| !l.trim().is_empty()).map(parse).collect();
    assert_eq!(events.len(), 1, "{b}");
    assert_eq!(events[0]["type"], "ERROR");
    let o = &events[0]["object"];
    assert_eq!(
        (
            o["kind"].as_str(),
            o["status"].as_str(),
            o["reason"].as_str(),
            o["code"].as_i64()
        ),
        (Some("Status"), Some("Failure"), Some("Expired"), Some(410)),
        "{b}"
    );
    assert!(
        o["message"]
            .as_str()
            .unwrap()
            .contains("too old resource version"),
        "{b}"
    );
}

#[tokio::test]
async fn err_01_obj_too_large_body_is_413_status() {
    let s = TestServer::start(Backend::Embedded).await;
    let r = Raw::new(&s).await;
    let mut big = vpc("a");
    big["metadata"]["annotations"] = json!({ "x": "y".repeat(4 * 1024 * 1024) });
    let (c, _, b) = r.call("POST", VPCS, &[JSON], &big.to_string()).await;
    status(c, &b, 413, "RequestEntityTooLarge");
    r.call("POST", VPCS, &[JSON], &vpc("a").to_string()).await;
    let (c, _, b) = r
        .call("PATCH", &format!("{VPCS}/a"), &[MERGE], &big.to_string())
        .await;
    status(c, &b, 413, "RequestEntityTooLarge");
    // Below the limit but over the per-object annotation budget: a validation error.
    let mut fat = vpc("b");
    fat["metadata"]["annotations"] = json!({ "x": "y".repeat(300 * 1024) });
    let (c, _, b) = r.call("POST", VPCS, &[JSON], &fat.to_string()).await;
    let st = status(c, &b, 422, "Invalid");
    assert!(
        causes(&st).iter().any(|(f, _)| f == "metadata.annotations"),
        "{b}"
    );
}

#[tokio::test]
async fn err_01_max_request_body_bytes_sets_the_413_limit() {
    const LIMIT: usize = 4096;
    let s =
        TestServer::start_with_args(Backend::Embedded, &[&format!("--max-request-body-bytes={LIMIT}")]).await;
    let r = Raw::new(&s).await;
    // A VPC whose JSON encoding is exactly `len` bytes (padding in an annotation).
    let sized = |name: &str, len: usize| {
        let mut v = vpc(name);
        v["metadata"]["annotations"] = json!({ "pad": "" });
        let pad = len - v.to_string().len();
        v["metadata"]["annotations"]["pad"] = json!("p".repeat(pad));
        let body = v.to_string();
        assert_eq!(body.len(), len);
        body
    };
    let (c, _, b) = r.call("POST", VPCS, &[JSON], &sized("over", LIMIT + 1)).await;
    status(c, &b, 413, "RequestEntityTooLarge");
    let (c, _, b) = r.call("POST", VPCS, &[JSON], &sized("at", LIMIT)).await;
    assert_eq!(c, 201, "{b}");
    let (c, _, b) = r.call("POST", VPCS, &[JSON], &sized("under", LIMIT - 1)).await;
    assert_eq!(c, 201, "{b}");
    // Patches are bounded the same way.
    let patch = |len: usize| {
        let mut p = json!({ "metadata": { "annotations": { "pad": "" } } });
        let pad = len - p.to_string().len();
        p["metadata"]["annotations"]["pad"] = json!("p".repeat(pad));
        let body = p.to_string();
        assert_eq!(body.len(), len);
        body
    };
    let (c, _, b) = r
        .call("PATCH", &format!("{VPCS}/under"), &[MERGE], &patch(LIMIT + 1))
        .await;
    status(c, &b, 413, "RequestEntityTooLarge");
    let (c, _, b) = r
        .call("PATCH", &format!("{VPCS}/under"), &[MERGE], &patch(LIMIT - 1))
        .await;
    assert_eq!(c, 200, "{b}");
}

// === property test: random bodies never panic the server or get a 5xx ===

/// Arbitrary JSON, biased towards the shape of a VPC so that deep paths get exercised.
fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        "[a-z0-9./:-]{0,12}".prop_map(Value::String),
        Just(json!("10.0.0.0/24")),
        Just(json!("sdn.cozystack.io/v1alpha1")),
        Just(json!("VPC")),
        any::<String>().prop_map(Value::String),
    ];
    let keys = prop_oneof![
        Just("apiVersion".to_string()),
        Just("kind".to_string()),
        Just("metadata".to_string()),
        Just("name".to_string()),
        Just("spec".to_string()),
        Just("status".to_string()),
        Just("cidrs".to_string()),
        Just("labels".to_string()),
        Just("ownerReferences".to_string()),
        Just("finalizers".to_string()),
        Just("op".to_string()),
        Just("path".to_string()),
        Just("value".to_string()),
        "[a-zA-Z]{1,8}",
    ];
    leaf.prop_recursive(5, 48, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(keys.clone(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A body: random JSON, a mutated valid VPC, a JSON patch, or raw bytes.
fn arb_body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        arb_json().prop_map(|v| v.to_string().into_bytes()),
        (
            arb_json(),
            "[a-z]{1,6}",
            prop::sample::select(vec!["metadata", "spec", "status"])
        )
            .prop_map(|(v, k, at)| {
                let mut o = vpc("p");
                o[at][k] = v;
                o.to_string().into_bytes()
            }),
        (
            prop::sample::select(vec!["add", "replace", "remove", "test", "move", "copy", "x"]),
            "(/[a-zA-Z~0-9]{0,8}){0,4}",
            arb_json()
        )
            .prop_map(|(op, path, value)| {
                json!([{ "op": op, "path": path, "from": "/spec", "value": value }])
                    .to_string()
                    .into_bytes()
            }),
        prop::collection::vec(any::<u8>(), 0..256),
    ]
}

#[test]
fn err_01_random_bodies_never_get_a_5xx_or_a_malformed_status() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (s, r) = rt.block_on(async {
        let s = TestServer::start(Backend::Embedded).await;
        let r = Raw::new(&s).await;
        let (c, _, b) = r.call("POST", VPCS, &[JSON], &vpc("p").to_string()).await;
        assert_eq!(c, 201, "{b}");
        (s, r)
    });
    let cfg = ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let targets: Vec<(&str, String, &str)> = vec![
        ("POST", VPCS.to_string(), "application/json"),
        (
            "POST",
            format!("{VPCS}?fieldValidation=Strict"),
            "application/json",
        ),
        ("PUT", format!("{VPCS}/p"), "application/json"),
        ("PATCH", format!("{VPCS}/p"), "application/merge-patch+json"),
        (
            "PATCH",
            format!("{VPCS}/p?fieldValidation=Strict"),
            "application/merge-patch+json",
        ),
        ("PATCH", format!("{VPCS}/p"), "application/json-patch+json"),
        (
            "PATCH",
            format!("{VPCS}/p/status"),
            "application/merge-patch+json",
        ),
        (
            "PATCH",
            format!("{VPCS}/p"),
            "application/strategic-merge-patch+json",
        ),
        ("PATCH", format!("{VPCS}/p"), "application/apply-patch+yaml"),
    ];
    proptest!(cfg, |(body in arb_body(), t in 0..targets.len())| {
        let (method, path, ct) = &targets[t];
        let apply = ct.contains("apply");
        let path = if apply { format!("{path}?fieldManager=prop") } else { path.clone() };
        let (c, _, b) = rt.block_on(r.send(method, &path, &[("content-type", ct)], body.clone()));
        prop_assert!(c < 500, "{method} {path} {ct}: {c} {b}\nbody: {}", String::from_utf8_lossy(&body));
        if c >= 400 {
            let st: Value = serde_json::from_str(&b).map_err(|e| TestCaseError::fail(format!("{e}: {b}")))?;
            prop_assert_eq!(&st["kind"], "Status", "{}", b);
            prop_assert_eq!(&st["status"], "Failure", "{}", b);
            prop_assert_eq!(st["code"].as_u64(), Some(u64::from(c)), "{}", b);
            prop_assert!(st["reason"].as_str().is_some_and(|r| !r.is_empty()), "{}", b);
        }
    });
    // Still healthy, and the object still readable.
    rt.block_on(async {
        let (c, _, b) = r.call("GET", "/readyz", &[], "").await;
        assert_eq!((c, b.as_str()), (200, "ok"));
        let (c, _, b) = r.call("GET", VPCS, &[], "").await;
        assert_eq!(c, 200, "{b}");
    });
    drop(r);
    drop(s);
}
