//! HostFirewall lockout protection over HTTP (issue 14, item 4): a rule set that would cut the
//! nodes off from the API server is refused with a 422 whose cause names the field, and the
//! `sdn.cozystack.io/allow-lockout: "true"` annotation lets it through; an update that removes
//! the API server's port is refused the same way.

use cozyplane_conformance::{Backend, TestServer};
use serde_json::{Value, json};

const HFS: &str = "/apis/sdn.cozystack.io/v1alpha1/hostfirewalls";
const JSON: (&str, &str) = ("content-type", "application/json");

fn hf(name: &str, annotations: &Value, spec: &Value) -> String {
    json!({ "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "HostFirewall",
        "metadata": { "name": name, "annotations": annotations }, "spec": spec })
    .to_string()
}

fn causes(body: &str) -> Vec<(String, String)> {
    let v: Value = serde_json::from_str(body).unwrap();
    v["details"]["causes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            (
                c["field"].as_str().unwrap_or_default().to_owned(),
                c["reason"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn lockout_is_refused_unless_overridden() {
    let s = TestServer::start(Backend::Embedded).await;
    // Ingress closed on every node, egress closed but for DNS.
    let closed = json!({ "policyTypes": ["Ingress", "Egress"],
        "ingress": [{ "ports": [{ "protocol": "TCP", "port": 22 }] }],
        "egress": [{ "ports": [{ "protocol": "UDP", "port": 53 }] }] });
    let (c, _, b) = s
        .raw("POST", HFS, &[JSON], Some(&hf("closed", &json!({}), &closed)))
        .await;
    assert_eq!(c, 422, "{b}");
    assert_eq!(
        causes(&b),
        [
            ("spec.ingress".to_owned(), "FieldValueForbidden".to_owned()),
            ("spec.egress".to_owned(), "FieldValueForbidden".to_owned())
        ],
        "{b}"
    );
    assert!(
        b.contains("sdn.cozystack.io/allow-lockout"),
        "the message names the override: {b}"
    );

    // The override.
    let (c, _, b) = s
        .raw(
            "POST",
            HFS,
            &[JSON],
            Some(&hf(
                "closed",
                &json!({ "sdn.cozystack.io/allow-lockout": "true" }),
                &closed,
            )),
        )
        .await;
    assert_eq!(c, 201, "{b}");

    // Admitting the API server's port is enough; taking it away again is refused.
    let open = json!({ "policyTypes": ["Ingress", "Egress"],
        "ingress": [{ "ports": [{ "protocol": "TCP", "port": 22 }, { "protocol": "TCP", "port": 6443 }] }],
        "egress": [{ "ports": [{ "protocol": "UDP", "port": 53 }, { "protocol": "TCP", "port": 6443 }] }] });
    let (c, _, b) = s
        .raw("POST", HFS, &[JSON], Some(&hf("open", &json!({}), &open)))
        .await;
    assert_eq!(c, 201, "{b}");
    let patch = json!({ "spec": { "egress": [{ "ports": [{ "protocol": "UDP", "port": 53 }] }] } });
    let (c, _, b) = s
        .raw(
            "PATCH",
            &format!("{HFS}/open"),
            &[("content-type", "application/merge-patch+json")],
            Some(&patch.to_string()),
        )
        .await;
    assert_eq!(c, 422, "{b}");
    assert_eq!(
        causes(&b),
        [("spec.egress".to_owned(), "FieldValueForbidden".to_owned())],
        "{b}"
    );

    // Nodes away from the control plane may close their ingress.
    let workers = json!({ "nodeSelector": { "matchExpressions": [
            { "key": "node-role.kubernetes.io/control-plane", "operator": "DoesNotExist" }] },
        "policyTypes": ["Ingress"], "ingress": [{ "ports": [{ "protocol": "TCP", "port": 22 }] }] });
    let (c, _, b) = s
        .raw("POST", HFS, &[JSON], Some(&hf("workers", &json!({}), &workers)))
        .await;
    assert_eq!(c, 201, "{b}");
}
