//! HostFirewall lockout protection over HTTP (issue 14, item 4). A rule set that would close the
//! API server's port is stored like any other — clients create `spec: {}` firewalls, and
//! refusing them would break every generic client — because the compiler keeps that port open
//! on the restricted nodes (`policy/tests/hf.rs`) unless the object carries the override
//! annotation, which the server stores and returns as given.

use cozyplane_apis::v1alpha1::ALLOW_LOCKOUT_ANNOTATION;
use cozyplane_conformance::{Backend, TestServer};
use serde_json::{Value, json};

const HFS: &str = "/apis/sdn.cozystack.io/v1alpha1/hostfirewalls";
const JSON: (&str, &str) = ("content-type", "application/json");

fn hf(name: &str, annotations: &Value, spec: &Value) -> String {
    json!({ "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "HostFirewall",
        "metadata": { "name": name, "annotations": annotations }, "spec": spec })
    .to_string()
}

#[tokio::test]
async fn closing_rule_sets_are_stored_and_the_override_kept() {
    let s = TestServer::start(Backend::Embedded).await;
    let closed = json!({ "policyTypes": ["Ingress", "Egress"],
        "ingress": [{ "ports": [{ "protocol": "TCP", "port": 22 }] }],
        "egress": [{ "ports": [{ "protocol": "UDP", "port": 53 }] }] });
    for (name, annotations, spec) in [
        ("empty", json!({}), json!({})),
        ("closed", json!({}), closed.clone()),
        ("overridden", json!({ ALLOW_LOCKOUT_ANNOTATION: "true" }), closed),
    ] {
        let (c, _, b) = s
            .raw("POST", HFS, &[JSON], Some(&hf(name, &annotations, &spec)))
            .await;
        assert_eq!(c, 201, "{name}: {b}");
        let v: Value = serde_json::from_str(&b).unwrap();
        assert_eq!(v["metadata"]["annotations"], annotations, "{name}: {b}");
    }
}
