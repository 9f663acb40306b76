//! `spec.dhcp` of VPCs and Ports (issue 28) through the server: a bad value is a 422 whose
//! causes name each field, on create and on update; a Port's options change on update (its
//! address and VPC stay immutable); OpenAPI publishes the fields (what `kubectl explain`
//! reads) and server-side apply merges them. A VPC's `spec.dns64` (issue 28, DNS64 in the VPC
//! resolver) needs an IPv6 range and may be turned on and off.
//!
//! In process: the router over embedded storage, every request as the server itself.

mod trace_kit;

use axum::body::Body;
use axum::http::Request;
use cozyplane_apiserver::registry::hooks::Requester;
use serde_json::{Value, json};
use tower::ServiceExt as _;
use trace_kit::{API, Server};

const VPCS: &str = "/apis/sdn.cozystack.io/v1alpha1/namespaces/t1/vpcs";

fn vpc(dhcp: &Value) -> Value {
    json!({"apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "VPC",
        "metadata": {"name": "blue", "namespace": "t1"},
        "spec": {"cidrs": ["10.1.0.0/24", "fd00:1::/64"], "dhcp": dhcp}})
}

fn port(name: &str, dhcp: &Value) -> Value {
    json!({"apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "Port", "metadata": {"name": name},
        "spec": {"vpcRef": {"namespace": "t1", "name": "blue"}, "ip": "10.1.0.2",
                 "node": "n1", "nodeIP": "192.168.10.1", "dhcp": dhcp}})
}

/// The `(field, reason)` causes of a 422 Invalid.
fn causes(code: u16, v: &Value) -> Vec<(String, String)> {
    assert_eq!((code, v["reason"].as_str()), (422, Some("Invalid")), "{v}");
    let mut c: Vec<(String, String)> = v["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["field"].as_str().unwrap().to_string(),
                c["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    c.sort();
    c
}

fn pairs(want: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut w: Vec<(String, String)> = want.iter().map(|(f, r)| ((*f).into(), (*r).into())).collect();
    w.sort();
    w
}

/// A server-side apply of `body` to `path` by `manager`.
async fn apply(s: &Server, path: &str, manager: &str, body: &Value) -> (u16, Value) {
    let mut req = Request::builder()
        .method("PATCH")
        .uri(format!("{path}?fieldManager={manager}"))
        .header("content-type", "application/apply-patch+yaml")
        .body(Body::from(body.to_string()))
        .unwrap();
    req.extensions_mut().insert(Requester::Server);
    let r = s.app.clone().oneshot(req).await.unwrap();
    let code = r.status().as_u16();
    let bytes = axum::body::to_bytes(r.into_body(), usize::MAX).await.unwrap();
    (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

/// A JSON merge patch of `body` to `path`.
async fn merge_patch(s: &Server, path: &str, body: &Value) -> (u16, Value) {
    let mut req = Request::builder()
        .method("PATCH")
        .uri(path)
        .header("content-type", "application/merge-patch+json")
        .body(Body::from(body.to_string()))
        .unwrap();
    req.extensions_mut().insert(Requester::Server);
    let r = s.app.clone().oneshot(req).await.unwrap();
    let code = r.status().as_u16();
    let bytes = axum::body::to_bytes(r.into_body(), usize::MAX).await.unwrap();
    (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

#[tokio::test]
async fn bad_options_are_422_with_their_fields_and_a_ports_options_may_change() {
    let s = Server::start().await;
    let bad = json!({
        "dnsServers": ["10.0.0.53", "not-an-ip", "10.0.0.53"],
        "searchDomains": ["Corp.example"],
        "mtu": 100,
        "routes": [{"destination": "10.9.0.1/16"}, {"destination": "fd10::/48", "gateway": "fd00::1"}],
        "leaseSeconds": 10,
    });
    let (code, v) = s.call("POST", VPCS, Some(&vpc(&bad))).await;
    assert_eq!(
        causes(code, &v),
        pairs(&[
            ("spec.dhcp.dnsServers[1]", "FieldValueInvalid"),
            ("spec.dhcp.dnsServers[2]", "FieldValueDuplicate"),
            ("spec.dhcp.searchDomains[0]", "FieldValueInvalid"),
            ("spec.dhcp.mtu", "FieldValueInvalid"),
            ("spec.dhcp.routes[0].destination", "FieldValueInvalid"),
            ("spec.dhcp.routes[1].gateway", "FieldValueForbidden"),
            ("spec.dhcp.leaseSeconds", "FieldValueInvalid"),
        ])
    );

    let good = json!({"dnsServers": ["10.0.0.53"], "searchDomains": ["corp.example"]});
    let created = s.ok("POST", VPCS, &vpc(&good)).await;
    assert_eq!(created["spec"]["dhcp"], good, "stored as sent");
    let vni = created["status"]["vni"].as_u64().unwrap();
    let name = format!("v{vni}.10-1-0-2");
    let ports = format!("{API}/ports");

    // A Port with a bad option is refused with the field; one with good options is stored.
    let (code, v) = s
        .call(
            "POST",
            &ports,
            Some(&port(
                &name,
                &json!({"routes": [{"destination": "192.168.0.0/16", "gateway": "fd00::1"}]}),
            )),
        )
        .await;
    assert_eq!(
        causes(code, &v),
        pairs(&[("spec.dhcp.routes[0].gateway", "FieldValueInvalid")])
    );
    let p = s.ok("POST", &ports, &port(&name, &json!({"mtu": 1400}))).await;
    assert_eq!(p["spec"]["dhcp"], json!({"mtu": 1400}));

    // On update the options change ...
    let mut next = p.clone();
    next["spec"]["dhcp"] = json!({"leaseSeconds": 600, "routes": [{"destination": "192.168.0.0/16"}]});
    let v = s.ok("PUT", &format!("{ports}/{name}"), &next).await;
    assert_eq!(v["spec"]["dhcp"]["leaseSeconds"], 600);
    // ... and a bad one is refused with its field, on update too.
    let mut worse = v.clone();
    worse["spec"]["dhcp"]["dnsServers"] = json!(["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"]);
    let (code, e) = s.call("PUT", &format!("{ports}/{name}"), Some(&worse)).await;
    assert_eq!(
        causes(code, &e),
        pairs(&[("spec.dhcp.dnsServers[3]", "FieldValueInvalid")])
    );
    // Removing them is an update like any other.
    let mut none = v.clone();
    none["spec"].as_object_mut().unwrap().remove("dhcp");
    let v = s.ok("PUT", &format!("{ports}/{name}"), &none).await;
    assert!(v["spec"].get("dhcp").is_none(), "{v}");
}

#[tokio::test]
async fn openapi_publishes_the_options_and_apply_merges_them() {
    let s = Server::start().await;
    let (code, doc) = s.call("GET", "/openapi/v2", None).await;
    assert_eq!(code, 200);
    let defs = &doc["definitions"];
    let guest = &defs["io.cozystack.sdn.v1alpha1.GuestConfig"]["properties"];
    for f in ["dnsServers", "searchDomains", "mtu", "routes", "leaseSeconds"] {
        assert!(guest.get(f).is_some(), "GuestConfig.{f}: {guest}");
    }
    assert_eq!(guest["routes"]["x-kubernetes-list-type"], "atomic");
    let route = &defs["io.cozystack.sdn.v1alpha1.GuestRoute"];
    assert_eq!(route["required"], json!(["destination"]), "{route}");
    for spec in ["PortSpec", "VPCSpec"] {
        let dhcp = &defs[format!("io.cozystack.sdn.v1alpha1.{spec}")]["properties"]["dhcp"];
        assert!(dhcp.to_string().contains("GuestConfig"), "{spec}.dhcp: {dhcp}");
    }
    let dns64 = &defs["io.cozystack.sdn.v1alpha1.VPCSpec"]["properties"]["dns64"];
    assert_eq!(dns64["type"], "boolean", "VPCSpec.dns64: {dns64}");
    let target = &defs["io.cozystack.sdn.v1alpha1.PortSpec"]["properties"]["migrationTarget"];
    assert!(target.to_string().contains("PortMigrationTarget"), "{target}");
    // OpenAPI v2 has no anyOf/oneOf: kube-apiserver refuses the whole aggregated document
    // (and kubectl's validation with it) when one is there, as an Option field's schema
    // renders it unless it is published as its inner type.
    for (name, def) in defs
        .as_object()
        .unwrap()
        .iter()
        .filter(|(n, _)| n.starts_with("io.cozystack."))
    {
        let text = def.to_string();
        assert!(
            !text.contains("\"anyOf\"") && !text.contains("\"oneOf\""),
            "{name}: {text}"
        );
    }

    // Server-side apply: a second manager's option joins the first's fields.
    let path = format!("{VPCS}/blue");
    let (code, v) = apply(&s, &path, "first", &vpc(&json!({"dnsServers": ["10.0.0.53"]}))).await;
    assert_eq!(code, 201, "{v}");
    let second = json!({"apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "VPC",
        "metadata": {"name": "blue", "namespace": "t1"}, "spec": {"dhcp": {"mtu": 1400}}});
    let (code, v) = apply(&s, &path, "second", &second).await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(
        v["spec"]["dhcp"],
        json!({"dnsServers": ["10.0.0.53"], "mtu": 1400}),
        "{v}"
    );
}

#[tokio::test]
async fn dns64_needs_an_ipv6_range_and_may_be_turned_on_and_off() {
    let s = Server::start().await;
    let vpc = |cidrs: &[&str], dns64: bool| {
        json!({"apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "VPC",
            "metadata": {"name": "v6", "namespace": "t1"},
            "spec": {"cidrs": cidrs, "dns64": dns64}})
    };
    // An IPv4-only VPC has nobody to synthesize AAAA records for.
    let (code, v) = s.call("POST", VPCS, Some(&vpc(&["10.7.0.0/24"], true))).await;
    assert_eq!(causes(code, &v), pairs(&[("spec.dns64", "FieldValueForbidden")]));

    // An IPv6-only VPC turns it on; off is left out of the stored object.
    let created = s.ok("POST", VPCS, &vpc(&["fd00:7::/64"], true)).await;
    assert_eq!(created["spec"]["dns64"], true, "{created}");
    let path = format!("{VPCS}/v6");
    let mut off = created.clone();
    off["spec"]["dns64"] = json!(false);
    let v = s.ok("PUT", &path, &off).await;
    assert!(v["spec"].get("dns64").is_none(), "{v}");
    // On again, by merge patch, after an IPv4 range joined.
    let (code, v) = merge_patch(
        &s,
        &path,
        &json!({"spec": {"cidrs": ["fd00:7::/64", "10.7.0.0/24"], "dns64": true}}),
    )
    .await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["spec"]["dns64"], true, "{v}");
    // Dropping the last IPv6 range while it is on is refused at spec.dns64.
    let mut v4 = v.clone();
    v4["spec"]["cidrs"] = json!(["10.7.0.0/24"]);
    let (code, e) = s.call("PUT", &path, Some(&v4)).await;
    assert_eq!(causes(code, &e), pairs(&[("spec.dns64", "FieldValueForbidden")]));
}
