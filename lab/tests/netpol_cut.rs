//! `make e2e`, two nodes: a NetworkPolicy change cuts the established default-network flow it
//! no longer allows within the contract's 1 s (issue 29, item 5), asserted and printed. Pod a
//! on n1 has a line-echo flow running to pod b on n2; a policy isolating b's namespace for
//! ingress is created; the flow's first lost exchange must come less than 1 s after the
//! create was sent. Needs root and the agent and CNI binaries built.

use std::net::IpAddr;

use cozyplane_lab::Lab;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, PostParams};
use serde_json::json;

mod common;
// The SecurityGroup lab's kit (it allows its own dead code): its echo server and long flow.
mod sg_lab;
use common::{Cp, now, pod, wait};
use sg_lab::{Flow, OPEN, serve};

#[test]
fn lab_netpol_cut() {
    Lab::run(2, body);
}

async fn body(lab: &mut Lab) {
    let cp = Cp::start(lab).await;
    let lab = &*lab;
    Api::<Namespace>::all(cp.kube.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "np"}})).unwrap(),
        )
        .await
        .unwrap();
    let a = pod(&cp, lab, 0, "np", "a", None).await;
    let b = pod(&cp, lab, 1, "np", "b", None).await;
    serve(&b);
    let flow = Flow::start(&a.ns, IpAddr::V4(b.fabric), OPEN);
    wait("the long flow exchanges", || flow.exchanges() >= 10);
    assert!(!flow.ended(), "the flow runs before the policy");

    let deny: NetworkPolicy = serde_json::from_value(json!({
        "metadata": {"namespace": "np", "name": "deny-ingress"},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}
    }))
    .unwrap();
    let before = now();
    Api::<NetworkPolicy>::namespaced(cp.kube.clone(), "np")
        .create(&PostParams::default(), &deny)
        .await
        .unwrap();
    let answered = now();
    wait("the flow the policy refuses is cut", || flow.ended());
    let exchanged = flow.exchanges();
    let lost = flow.finish().expect("the flow lost an exchange");
    assert!(
        lost >= before,
        "the flow ran until the policy ({exchanged} exchanges)"
    );
    eprintln!(
        "NetworkPolicy created: the established flow a (n1) -> b (n2) lost its first exchange {:.3} s \
         after the create was sent ({:.3} s after its API response; {exchanged} exchanges before)",
        lost - before,
        lost - answered
    );
    assert!(
        lost - before < 1.0,
        "the flow lost its first exchange {:.3} s after the policy's create, over the 1 s bound",
        lost - before
    );
    eprintln!("PASS a NetworkPolicy change cuts the established flow it no longer allows within 1 s");
}
