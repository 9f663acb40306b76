//! The VPC trace beyond SecurityGroups: north-south flows through the VPC's doors (a
//! FloatingIP in and out, the VPCGateway's NAT out, none) and a severed Port. Each answer names
//! the layer the datapath drops in (`docs/datapath.md`, "Drops (isolation)": `DROP_NO_GATEWAY`
//! is `NorthSouth`/`NoGateway`, `DROP_POL_SG` at a door is `SecurityGroup`, `DROP_SEVERED` is
//! `Severed`), and the door with its public address when it lets the flow through.
//!
//! In process: the router over embedded storage, as `trace.rs`. The doors' status is written
//! as the server's controllers write it (`Ready`, the address the load balancer assigned).

mod trace_kit;

use cozyplane_apis::net::claim::port_name;
use serde_json::{Value, json};
use trace_kit::{API, Server};

const NS: &str = "t1";
const PORT_A: &str = "10.1.0.2";
const PORT_B: &str = "10.1.0.3";
const OUTSIDE: &str = "192.0.2.10";
const FIP: &str = "198.51.100.7";
const NAT: &str = "198.51.100.1";

fn obj(kind: &str, name: &str, spec: Value) -> Value {
    let mut o = json!({"apiVersion": "sdn.cozystack.io/v1alpha1", "kind": kind, "metadata": {"name": name}});
    o["spec"] = spec;
    o
}

/// Writes `status` of the namespaced object at `path` (as the server's controller does).
async fn set_status(s: &Server, path: &str, status: Value) {
    let (code, mut o) = s.call("GET", path, None).await;
    assert_eq!(code, 200, "{path}: {o}");
    o["status"] = status;
    s.ok("PUT", &format!("{path}/status"), &o).await;
}

async fn port(s: &Server, vni: u32, ip: &str) -> String {
    let name = port_name(vni, ip.parse().unwrap());
    s.ok(
        "POST",
        &format!("{API}/ports"),
        &json!({"apiVersion":"sdn.cozystack.io/v1alpha1","kind":"Port","metadata":{"name":name},
            "spec":{"vpcRef":{"namespace":NS,"name":"va"},"ip":ip,"node":"n1","nodeIP":"192.168.10.1"}}),
    )
    .await;
    name
}

fn tcp(src: Value, dst: Value, port: u16) -> Value {
    let mut q = json!({"protocol": "TCP", "port": port});
    q["source"] = src;
    q["destination"] = dst;
    q
}

fn address(ip: &str) -> Value {
    json!({"address": ip})
}

/// Asks and checks the answer's verdict, layer, reason and door (`null`: none).
async fn expect(s: &Server, what: &str, spec: &Value, want: (&str, &str, &str), door: Value) -> Value {
    let (code, v) = s.trace_in(NS, "va", spec).await;
    assert_eq!(code, 201, "{what}: {v}");
    let st = &v["status"];
    assert_eq!(
        (
            st["verdict"].as_str().unwrap_or_default(),
            st["layer"].as_str().unwrap_or_default(),
            st["reason"].as_str().unwrap_or_default()
        ),
        want,
        "{what}\n{v:#}"
    );
    assert_eq!(st["door"], door, "{what}\n{v:#}");
    eprintln!("{what:<70} {} by {} ({})", want.0, want.1, want.2);
    v
}

#[tokio::test]
async fn north_south_doors_and_severed_ports_name_their_layer() {
    let s = Server::start().await;
    let v = s
        .ok(
            "POST",
            &format!("{API}/namespaces/{NS}/vpcs"),
            &obj("VPC", "va", json!({"cidrs": ["10.1.0.0/24"]})),
        )
        .await;
    let vni = v["status"]["vni"].as_u64().unwrap() as u32;
    let a = port(&s, vni, PORT_A).await;
    let b = port(&s, vni, PORT_B).await;
    let out_a = tcp(json!({"port": a}), address(OUTSIDE), 443);
    let in_a = tcp(address(OUTSIDE), json!({"port": a}), 22);

    // No door at all.
    let v = expect(
        &s,
        "a -> outside, no gateway: refused at the boundary",
        &out_a,
        ("Dropped", "NorthSouth", "NoGateway"),
        Value::Null,
    )
    .await;
    assert_eq!(v["status"]["destination"]["external"], true, "{v:#}");
    assert_eq!(v["status"]["destination"].get("vpc"), None, "{v:#}");
    assert_eq!(
        v["status"].get("egress"),
        None,
        "no SecurityGroup was asked: {v:#}"
    );
    expect(
        &s,
        "outside -> a, no FloatingIP: nothing lets it in",
        &in_a,
        ("Dropped", "NorthSouth", "NoDoor"),
        Value::Null,
    )
    .await;

    // The gateway: NAT on, its address assigned.
    s.ok(
        "POST",
        &format!("{API}/namespaces/{NS}/vpcgateways"),
        &obj(
            "VPCGateway",
            "gw",
            json!({"vpcRef": {"name": "va"}, "nat": {"enabled": true}}),
        ),
    )
    .await;
    let gw_path = format!("{API}/namespaces/{NS}/vpcgateways/gw");
    expect(
        &s,
        "a -> outside, the gateway has no address yet",
        &out_a,
        ("Dropped", "NorthSouth", "NoGateway"),
        Value::Null,
    )
    .await;
    set_status(&s, &gw_path, json!({"natAddress": NAT, "phase": "Ready"})).await;
    let gw = json!({"kind": "VPCGateway", "name": "gw", "direction": "out", "address": NAT});
    expect(
        &s,
        "a -> outside through the gateway",
        &out_a,
        ("Allowed", "NorthSouth", "Gateway"),
        gw.clone(),
    )
    .await;
    // A SecurityGroup isolating a's egress to 203.0.113.0/24 port 443: the gateway's flow is
    // the group's to refuse.
    let g = s
        .ok(
            "POST",
            &format!("{API}/namespaces/{NS}/securitygroups"),
            &obj(
                "SecurityGroup",
                "web",
                json!({"vpcRef": {"name": "va"},
                "egress": [{"to": {"cidr": "203.0.113.0/24"}, "ports": [{"protocol": "TCP", "port": 443}]}]}),
            ),
        )
        .await;
    let id = g["status"]["id"].as_i64().unwrap();
    let (_, mut p) = s.call("GET", &format!("{API}/ports/{a}"), None).await;
    p["status"] = json!({"groups": [id]});
    s.ok("PUT", &format!("{API}/ports/{a}/status"), &p).await;
    let v = expect(
        &s,
        "a (grouped) -> outside: no rule of its group admits it",
        &out_a,
        ("Dropped", "SecurityGroup", "DefaultDeny"),
        gw.clone(),
    )
    .await;
    assert_eq!(v["status"]["egress"]["decision"], "DefaultDeny", "{v:#}");
    expect(
        &s,
        "a (grouped) -> 203.0.113.9: its group's CIDR rule admits it",
        &tcp(json!({"port": a}), address("203.0.113.9"), 443),
        ("Allowed", "NorthSouth", "Gateway"),
        gw.clone(),
    )
    .await;

    // A FloatingIP of b: b's flows in and out use it, not the gateway.
    s.ok(
        "POST",
        &format!("{API}/namespaces/{NS}/floatingips"),
        &obj(
            "FloatingIP",
            "b-public",
            json!({"vpcRef": {"name": "va"}, "target": PORT_B}),
        ),
    )
    .await;
    let fip_path = format!("{API}/namespaces/{NS}/floatingips/b-public");
    expect(
        &s,
        "outside -> b, its FloatingIP has no address yet",
        &tcp(address(OUTSIDE), json!({"port": b}), 80),
        ("Dropped", "NorthSouth", "NoDoor"),
        Value::Null,
    )
    .await;
    set_status(&s, &fip_path, json!({"address": FIP, "phase": "Ready"})).await;
    expect(
        &s,
        "outside -> b through its FloatingIP",
        &tcp(address(OUTSIDE), json!({"port": b}), 80),
        ("Allowed", "NorthSouth", "FloatingIP"),
        json!({"kind": "FloatingIP", "name": "b-public", "direction": "in", "address": FIP}),
    )
    .await;
    expect(
        &s,
        "b -> outside leaves as its FloatingIP",
        &tcp(json!({"port": b}), address(OUTSIDE), 443),
        ("Allowed", "NorthSouth", "FloatingIP"),
        json!({"kind": "FloatingIP", "name": "b-public", "direction": "out", "address": FIP}),
    )
    .await;
    expect(
        &s,
        "outside -> a: b's FloatingIP is not a's door",
        &in_a,
        ("Dropped", "NorthSouth", "NoDoor"),
        Value::Null,
    )
    .await;

    // b's Port is deleted (its binding revoked): the agent's finalizer holds it while its node
    // severs it; the trace says so before any other layer.
    let (code, v) = s.call("DELETE", &format!("{API}/ports/{b}"), None).await;
    assert!((200..300).contains(&code), "{v}");
    let v = expect(
        &s,
        "a -> b after b's Port was deleted: severed",
        &tcp(json!({"address": PORT_A}), json!({"address": PORT_B}), 80),
        ("Dropped", "Severed", "Severed"),
        Value::Null,
    )
    .await;
    assert_eq!(v["status"]["destination"]["severed"], true, "{v:#}");
    expect(
        &s,
        "outside -> b after the delete: severed, whatever its FloatingIP",
        &tcp(address(OUTSIDE), json!({"address": PORT_B}), 80),
        ("Dropped", "Severed", "Severed"),
        Value::Null,
    )
    .await;
    expect(
        &s,
        "a -> an address of the VPC no Port holds: nothing is there",
        &tcp(json!({"port": a}), address("10.1.0.9"), 80),
        ("Dropped", "Isolation", "NoPort"),
        Value::Null,
    )
    .await;
    // b's Port gone for good (its node removed the finalizer): no Port holds the address.
    let (_, mut p) = s.call("GET", &format!("{API}/ports/{b}"), None).await;
    p["metadata"]["finalizers"] = json!([]);
    s.ok("PUT", &format!("{API}/ports/{b}"), &p).await;
    expect(
        &s,
        "a -> b once b's Port is gone: no Port holds it",
        &tcp(json!({"address": PORT_A}), json!({"address": PORT_B}), 80),
        ("Dropped", "Isolation", "NoPort"),
        Value::Null,
    )
    .await;
}
