//! `make e2e`, two nodes: the default network's admin tiers through real connections
//! (issue 29). AdminNetworkPolicies, a BaselineAdminNetworkPolicy and NetworkPolicies are
//! written through the kube stand-in (which serves the network-policy-api kinds as the
//! chart's CRDs do) and followed by both agents; pods a (n1) and b (n2) in namespace `t1`,
//! c (n1) in `t2`. Each step's expectation is the API's precedence: ANP first (first
//! match), then NetworkPolicy if one isolates the pod, then the BANP, then open. An ANP
//! `Deny` created under a running flow cuts it within the contract's 1 s (asserted,
//! printed). Needs root and the agent and CNI binaries built.

use std::net::IpAddr;

use cozyplane_apis::admin_policy::{AdminNetworkPolicy, BaselineAdminNetworkPolicy};
use cozyplane_lab::{Lab, LabPod};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

mod common;
// The SecurityGroup lab's kit (it allows its own dead code): its echo server and long flow.
mod sg_lab;
use common::{Cp, now, pod, wait};
use sg_lab::{Flow, OPEN, serve, tcp_ok};

#[test]
fn lab_anp() {
    Lab::run(2, body);
}

/// Waits until `from` reaching `to` on the open port is `want` (the agents follow the
/// API within a second or so); panics with `what` after the kit's deadline.
fn expect(what: &str, from: &LabPod, to: &LabPod, want: bool) {
    let dst = IpAddr::V4(to.fabric);
    wait(what, || tcp_ok(&from.ns, dst, OPEN) == want);
    // Held: not a moment between two writes.
    for _ in 0..3 {
        assert_eq!(tcp_ok(&from.ns, dst, OPEN), want, "{what}: held");
    }
    eprintln!("PASS {what}");
}

async fn body(lab: &mut Lab) {
    let cp = Cp::start(lab).await;
    let lab = &*lab;
    for ns in ["t1", "t2"] {
        Api::<Namespace>::all(cp.kube.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
            )
            .await
            .unwrap();
    }
    let a = pod(&cp, lab, 0, "t1", "a", None).await;
    let b = pod(&cp, lab, 1, "t1", "b", None).await;
    let c = pod(&cp, lab, 0, "t2", "c", None).await;
    serve(&b);
    expect("no policy: a reaches b", &a, &b, true);
    expect("no policy: c reaches b", &c, &b, true);

    let anps = Api::<AdminNetworkPolicy>::all(cp.kube.clone());
    let banps = Api::<BaselineAdminNetworkPolicy>::all(cp.kube.clone());
    let nps = Api::<NetworkPolicy>::namespaced(cp.kube.clone(), "t1");

    // 1. An ANP Deny under a running flow cuts it within 1 s.
    let flow = Flow::start(&a.ns, IpAddr::V4(b.fabric), OPEN);
    wait("the long flow exchanges", || flow.exchanges() >= 10);
    let deny: AdminNetworkPolicy = serde_json::from_value(json!({
        "metadata": {"name": "t1-closed"},
        "spec": {"priority": 10,
                 "subject": {"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "t1"}}},
                 "ingress": [{"name": "from-anyone", "action": "Deny", "from": [{"namespaces": {}}]}]}
    }))
    .unwrap();
    let before = now();
    anps.create(&PostParams::default(), &deny).await.unwrap();
    let answered = now();
    wait("the flow the ANP refuses is cut", || flow.ended());
    let exchanged = flow.exchanges();
    let lost = flow.finish().expect("the flow lost an exchange");
    assert!(
        lost >= before,
        "the flow ran until the ANP ({exchanged} exchanges)"
    );
    eprintln!(
        "AdminNetworkPolicy Deny created: the established flow a (n1) -> b (n2) lost its first \
         exchange {:.3} s after the create was sent ({:.3} s after its API response)",
        lost - before,
        lost - answered
    );
    assert!(
        lost - before < 1.0,
        "the flow lost its first exchange {:.3} s after the ANP's create, over the 1 s bound",
        lost - before
    );
    expect("ANP Deny: a no longer reaches b", &a, &b, false);

    // 2. A NetworkPolicy admitting everything does not override an ANP Deny.
    let allow_all: NetworkPolicy = serde_json::from_value(json!({
        "metadata": {"namespace": "t1", "name": "allow-all"},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{}]}
    }))
    .unwrap();
    nps.create(&PostParams::default(), &allow_all).await.unwrap();
    expect(
        "ANP Deny above an allowing NetworkPolicy: c still refused",
        &c,
        &b,
        false,
    );

    // 3. The ANP's rule becomes Pass: the NetworkPolicy decides (it admits).
    let to_pass = json!({"spec": {"ingress": [
        {"name": "from-anyone", "action": "Pass", "from": [{"namespaces": {}}]}]}});
    anps.patch("t1-closed", &PatchParams::default(), &Patch::Merge(&to_pass))
        .await
        .unwrap();
    expect("ANP Pass, an NP admits: a reaches b", &a, &b, true);

    // 4. A BANP refusing t2: the NetworkPolicy still decides (it isolates b)...
    let banp: BaselineAdminNetworkPolicy = serde_json::from_value(json!({
        "metadata": {"name": "default"},
        "spec": {"subject": {"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "t1"}}},
                 "ingress": [{"name": "not-t2", "action": "Deny",
                              "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "t2"}}}]}]}
    }))
    .unwrap();
    banps.create(&PostParams::default(), &banp).await.unwrap();
    expect("BANP under an isolating NP: c reaches b", &c, &b, true);
    // ... until it is gone: then Pass falls to the BANP, which refuses t2 and nothing else.
    nps.delete("allow-all", &DeleteParams::default()).await.unwrap();
    expect("ANP Pass, no NP, the BANP denies t2: c refused", &c, &b, false);
    expect(
        "ANP Pass, no NP, the BANP has no rule for t1: a reaches b",
        &a,
        &b,
        true,
    );

    // 5. A higher-priority ANP Allow beats everything below it.
    let allow_c: AdminNetworkPolicy = serde_json::from_value(json!({
        "metadata": {"name": "t2-in"},
        "spec": {"priority": 5,
                 "subject": {"pods": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "t1"}},
                                      "podSelector": {}}},
                 "ingress": [{"name": "t2", "action": "Allow",
                              "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "t2"}}}],
                              "ports": [{"portNumber": {"protocol": "TCP", "port": OPEN}}]}]}
    }))
    .unwrap();
    anps.create(&PostParams::default(), &allow_c).await.unwrap();
    expect(
        "ANP Allow (priority 5) above the BANP's Deny: c reaches b",
        &c,
        &b,
        true,
    );

    // 6. Everything deleted: open again.
    anps.delete("t2-in", &DeleteParams::default()).await.unwrap();
    anps.delete("t1-closed", &DeleteParams::default()).await.unwrap();
    banps.delete("default", &DeleteParams::default()).await.unwrap();
    expect("all admin policy gone: c reaches b", &c, &b, true);
    expect("all admin policy gone: a reaches b", &a, &b, true);
}
