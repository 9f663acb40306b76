//! The trace API's authorization and what it reveals, through the real path: client
//! certificates, the authorization layer's SubjectAccessReview (`create` on `vpcs/trace` in
//! the namespace) against the fake kube-apiserver of `common`. A tenant traces its own VPC,
//! across a peering into another tenant's, and learns that tenant's VPC (its own VPCPeering
//! names it) but none of its SecurityGroups, rules or Ports; it cannot trace the other
//! tenant's VPC at all (403).

mod common;

use common::{FakeApiserver, call, grant_tenant, path, setup};
use serde_json::{Value, json};

const API: &str = "sdn.cozystack.io/v1alpha1";

fn grant(fake: &FakeApiserver, user: &str, ns: &str) {
    grant_tenant(fake, user, ns);
    for verb in ["create", "get", "list", "delete", "update", "patch"] {
        fake.allow(user, verb, "securitygroups", ns);
    }
    fake.allow(user, "peer", "vpcs", ns);
    fake.allow(user, "create", "vpcs/trace", ns);
}

fn obj(kind: &str, name: &str, spec: &Value) -> Value {
    json!({"apiVersion": API, "kind": kind, "metadata": {"name": name}, "spec": spec})
}

fn trace_path(ns: &str, vpc: &str) -> String {
    format!("{}/{vpc}/trace", path(ns, "vpcs"))
}

fn question(src_port: &str, dst: &str, port: u16) -> Value {
    json!({"apiVersion": API, "kind": "VPCTrace", "spec": {
        "source": {"port": src_port}, "destination": {"address": dst}, "protocol": "TCP", "port": port}})
}

#[tokio::test]
async fn a_tenant_traces_only_its_own_vpc_and_learns_no_names_of_another() {
    let s = setup().await;
    s.fake.add_namespace("t1", false);
    s.fake.add_namespace("t2", false);
    grant(&s.fake, "alice", "t1");
    grant(&s.fake, "bob", "t2");
    for verb in ["create", "get", "update"] {
        s.fake.allow("admin", verb, "ports", "*");
    }
    s.fake.allow("admin", "update", "ports/status", "*");
    let alice = s.users.client("alice").await;
    let bob = s.users.client("bob").await;
    let admin = s.users.client("admin").await;
    let post = |c: &kube::Client, ns: &str, plural: &str, body: Value| {
        let (c, p) = (c.clone(), path(ns, plural));
        async move { call(&c, "POST", &p, Some(body)).await.unwrap() }
    };

    let va = post(
        &alice,
        "t1",
        "vpcs",
        obj("VPC", "va", &json!({"cidrs": ["10.1.0.0/24"]})),
    )
    .await;
    let vb = post(
        &bob,
        "t2",
        "vpcs",
        obj("VPC", "vb", &json!({"cidrs": ["10.2.0.0/24"]})),
    )
    .await;
    post(
        &bob,
        "t2",
        "vpcs",
        obj("VPC", "vc", &json!({"cidrs": ["10.3.0.0/24"]})),
    )
    .await;
    let half = |vpc: &str, ns: &str, peer: &str| json!({"vpcRef": {"name": vpc}, "peerRef": {"namespace": ns, "name": peer}});
    post(
        &alice,
        "t1",
        "vpcpeerings",
        obj("VPCPeering", "to-bob", &half("va", "t2", "vb")),
    )
    .await;
    post(
        &bob,
        "t2",
        "vpcpeerings",
        obj("VPCPeering", "to-alice", &half("vb", "t1", "va")),
    )
    .await;
    // Alice asks vc for a peering bob never reciprocates.
    post(
        &alice,
        "t1",
        "vpcpeerings",
        obj("VPCPeering", "to-vc", &half("va", "t2", "vc")),
    )
    .await;
    let web = post(&alice, "t1", "securitygroups", obj("SecurityGroup", "web", &json!({
        "vpcRef": {"name": "va"},
        "egress": [
            {"to": {"group": "secret-db", "vpc": {"namespace": "t2", "name": "vb"}}, "ports": [{"protocol": "TCP", "port": 5432}]},
            {"to": {"cidr": "10.2.0.0/24"}},
        ]}))).await;
    let db = post(&bob, "t2", "securitygroups", obj("SecurityGroup", "secret-db", &json!({
        "vpcRef": {"name": "vb"},
        "ingress": [{"from": {"group": "web", "vpc": {"namespace": "t1", "name": "va"}}, "ports": [{"protocol": "TCP", "port": 5432}]}]}))).await;

    // The Ports, as the CNI and the label loop would make them.
    let mut names = Vec::new();
    for (vpc, ip, group) in [(&va, "10.1.0.2", &web), (&vb, "10.2.0.2", &db)] {
        let vni = vpc["status"]["vni"].as_u64().unwrap();
        let name = format!("v{vni}.{}", ip.replace('.', "-"));
        let p = call(
            &admin,
            "POST",
            &format!("/apis/{API}/ports"),
            Some(json!({
            "apiVersion": API, "kind": "Port", "metadata": {"name": name},
            "spec": {"vpcRef": {"namespace": vpc["metadata"]["namespace"], "name": vpc["metadata"]["name"]},
                     "ip": ip, "node": "n1", "nodeIP": "192.168.10.1"}})),
        )
        .await
        .unwrap();
        let mut p = p;
        p["status"] = json!({"groups": [group["status"]["id"]]});
        call(
            &admin,
            "PUT",
            &format!("/apis/{API}/ports/{name}/status"),
            Some(p),
        )
        .await
        .unwrap();
        names.push(name);
    }
    let (alice_port, bob_port) = (&names[0], &names[1]);

    // Across the peering: alice's rule named, bob's redacted.
    let v = call(
        &alice,
        "POST",
        &trace_path("t1", "va"),
        Some(question(alice_port, "10.2.0.2", 5432)),
    )
    .await
    .unwrap();
    let st = &v["status"];
    assert_eq!(st["verdict"], "Allowed", "{v}");
    assert_eq!(st["layer"], "SecurityGroup");
    assert_eq!(
        st["egress"]["rule"],
        json!({"vpc": {"namespace": "t1", "name": "va"}, "securityGroup": "web", "direction": "egress", "index": 0})
    );
    assert_eq!(st["ingress"]["decision"], "Rule");
    assert_eq!(
        st["ingress"]["rule"],
        json!({"vpc": {"namespace": "t2", "name": "vb"}, "direction": "ingress", "redacted": true})
    );
    assert_eq!(st["source"]["groups"], json!(["web"]));
    assert!(st["destination"].get("groups").is_none(), "{v}");
    // Bob's side refuses another port: by default deny, still without a name.
    let d = call(
        &alice,
        "POST",
        &trace_path("t1", "va"),
        Some(question(alice_port, "10.2.0.2", 22)),
    )
    .await
    .unwrap();
    assert_eq!(d["status"]["verdict"], "Dropped", "{d}");
    assert_eq!(d["status"]["egress"]["rule"]["index"], 1, "{d}");
    assert_eq!(d["status"]["ingress"]["decision"], "DefaultDeny", "{d}");
    for answer in [&v, &d] {
        let text = answer.to_string();
        for secret in ["secret-db", "to-alice", bob_port.as_str(), "vc"] {
            assert!(!text.contains(secret), "{secret} leaked: {text}");
        }
    }

    // A VPC named by an unreciprocated half: not connected.
    let n = call(
        &alice,
        "POST",
        &trace_path("t1", "va"),
        Some(question(alice_port, "10.3.0.9", 80)),
    )
    .await
    .unwrap();
    assert_eq!(
        (
            &n["status"]["verdict"],
            &n["status"]["layer"],
            &n["status"]["reason"]
        ),
        (&json!("Dropped"), &json!("Isolation"), &json!("NotConnected")),
        "{n}"
    );

    // Another tenant's VPC: no RBAC there, 403 before anything is read.
    let err = call(
        &alice,
        "POST",
        &trace_path("t2", "vb"),
        Some(question(bob_port, "10.1.0.2", 80)),
    )
    .await
    .unwrap_err();
    assert_eq!(err.0, 403, "{err:?}");
    assert!(
        err.1.contains("cannot create resource \"vpcs/trace\""),
        "{}",
        err.1
    );
    // Its own namespace, a VPC that does not exist: 404.
    let err = call(
        &alice,
        "POST",
        &trace_path("t1", "nope"),
        Some(question(alice_port, "10.1.0.3", 80)),
    )
    .await
    .unwrap_err();
    assert_eq!(err.0, 404, "{err:?}");
    // Bob, in his own VPC: his group is named, alice's rule is not.
    let b = call(&bob, "POST", &trace_path("t2", "vb"), Some(json!({"apiVersion": API, "kind": "VPCTrace", "spec": {
        "source": {"address": "10.1.0.2"}, "destination": {"port": bob_port}, "protocol": "TCP", "port": 5432}})))
    .await
    .unwrap();
    assert_eq!(b["status"]["verdict"], "Allowed", "{b}");
    assert_eq!(
        b["status"]["ingress"]["rule"]["securityGroup"], "secret-db",
        "{b}"
    );
    assert_eq!(b["status"]["egress"]["rule"]["redacted"], true, "{b}");
    assert!(!b.to_string().contains("\"web\""), "{b}");
}
