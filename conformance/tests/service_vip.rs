//! ServiceVIPs (issue 13): a Service annotated `sdn.cozystack.io/vpc` in a namespace with a
//! VPCBinding for that VPC gets a ServiceVIP per family of the VPC, its backends follow the
//! EndpointSlices (mapped to the endpoint pods' VPC addresses through their Ports), and it goes
//! with the Service or with the binding; without the binding there is none, and an Event and an
//! annotation on the Service say why. The server runs delegated against the kube stand-in with
//! the chart's role (`cozyplane_conformance::delegated`). Waits poll the API under a deadline that only
//! turns a hang into a failure.

use std::time::Duration;

use cozyplane_apis::v1alpha1::{
    Port, PortSpec, ServiceVIP, VPC, VPCBinding, VPCBindingSpec, VPCRef, VPCSpec,
};
use cozyplane_conformance::delegated::Delegated;
use cozyplane_conformance::objects::WAIT;
use cozyplane_conformance::standin::{Cozyplane, Options, StandIn};
use k8s_openapi::api::core::v1::{Event, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const ATTACHMENT: &str = "sdn.cozystack.io/vpc-attachment";

/// The stand-in, our server behind it (Available, with the chart's role), an admin client, and
/// namespace t1 with the dual-stack VPC v1 and its binding.
async fn setup() -> (StandIn, Cozyplane, kube::Client) {
    let d = Delegated::start(Options::default(), &[], &[]).await;
    for ns in ["t1", "t2"] {
        d.namespace(ns).await;
    }
    let client = d.client.clone();
    let mut v = VPC::new(
        "v1",
        VPCSpec {
            cidrs: vec!["10.0.0.0/24".into(), "fd00:1::/64".into()],
            mtu: 0,
            dhcp: None,
            dns64: false,
        },
    );
    v.metadata.namespace = Some("t1".into());
    Api::<VPC>::namespaced(client.clone(), "t1")
        .create(&PostParams::default(), &v)
        .await
        .unwrap();
    bind(&client, "t1").await;
    (d.standin, d.cozy, client)
}

async fn bind(client: &kube::Client, ns: &str) {
    let mut b = VPCBinding::new(
        "v1",
        VPCBindingSpec {
            vpc_ref: VPCRef {
                namespace: "t1".into(),
                name: "v1".into(),
            },
        },
    );
    b.metadata.namespace = Some(ns.into());
    Api::<VPCBinding>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &b)
        .await
        .unwrap();
}

/// Polls `cond` until it holds; the deadline only turns a hang into a failure.
async fn until<F, Fut>(what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    while !cond().await {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Service `web` in `ns`, annotated for `t1/v1`: TCP 80 → 8080 (`http`), UDP 53 (`dns`).
async fn service(client: &kube::Client, ns: &str) -> Service {
    let svc: Service = serde_json::from_value(json!({
        "metadata": { "name": "web", "namespace": ns, "annotations": { "sdn.cozystack.io/vpc": "t1/v1" } },
        "spec": {
            "ports": [
                { "name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080 },
                { "name": "dns", "protocol": "UDP", "port": 53 },
            ],
            "sessionAffinity": "ClientIP",
        },
    }))
    .unwrap();
    Api::<Service>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &svc)
        .await
        .unwrap()
}

/// A pod's Port in t1/v1 (the address allocated by the server), as the CNI makes it.
async fn pod_port(client: &kube::Client, ns: &str, pod: &str, ip: &str) -> Port {
    let mut p = Port::new(
        "",
        PortSpec {
            vpc_ref: VPCRef {
                namespace: "t1".into(),
                name: "v1".into(),
            },
            ip: ip.into(),
            node: "n1".into(),
            node_ip: "192.168.0.1".into(),
            pod_namespace: ns.into(),
            pod_name: pod.into(),
            ..Default::default()
        },
    );
    p.metadata.name = None;
    p.metadata.generate_name = Some("p-".into());
    Api::<Port>::all(client.clone())
        .create(&PostParams::default(), &p)
        .await
        .unwrap()
}

/// The EndpointSlice of `web` in `ns` listing `pods` (`(name, ready)`) on port 8080/`http`.
fn slice(ns: &str, pods: &[(&str, bool)]) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": { "name": "web-1", "namespace": ns, "labels": { "kubernetes.io/service-name": "web" } },
        "addressType": "IPv4",
        "ports": [{ "name": "http", "protocol": "TCP", "port": 8080 }],
        "endpoints": pods.iter().enumerate().map(|(i, (p, ready))| json!({
            "addresses": [format!("192.168.77.{}", i + 1)],
            "conditions": { "ready": ready },
            "targetRef": { "kind": "Pod", "namespace": ns, "name": p },
        })).collect::<Vec<_>>(),
    })
}

async fn vips_of(client: &kube::Client, ns: &str) -> Vec<ServiceVIP> {
    let lp = ListParams::default().labels(&format!(
        "sdn.cozystack.io/service-namespace={ns},sdn.cozystack.io/service-name=web"
    ));
    Api::<ServiceVIP>::all(client.clone())
        .list(&lp)
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|v| v.metadata.deletion_timestamp.is_none())
        .collect()
}

/// The ServiceVIPs of `web` once there are `n` and `cond` holds for them.
async fn vips_until(
    client: &kube::Client,
    ns: &str,
    n: usize,
    what: &str,
    cond: impl Fn(&[ServiceVIP]) -> bool,
) -> Vec<ServiceVIP> {
    until(what, || async {
        let v = vips_of(client, ns).await;
        v.len() == n && cond(&v)
    })
    .await;
    vips_of(client, ns).await
}

fn backends(v: &[ServiceVIP], v4: bool) -> Vec<(String, i32, i32)> {
    v.iter()
        .filter(|x| x.spec.ip.contains('.') == v4)
        .flat_map(|x| x.status.iter().flat_map(|s| s.backends.iter()))
        .flat_map(|b| b.ports.iter().map(|p| (b.ip.clone(), p.port, p.target_port)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_service_gets_a_vip_per_family_from_the_vpc_range() {
    let (_s, _cozy, client) = setup().await;
    service(&client, "t1").await;
    // The status is written after the create, by the next round.
    let v = vips_until(&client, "t1", 2, "two ServiceVIPs with a status", |v| {
        v.iter()
            .all(|x| x.status.as_ref().is_some_and(|s| !s.phase.is_empty()))
    })
    .await;
    let mut ips: Vec<&str> = v.iter().map(|x| x.spec.ip.as_str()).collect();
    ips.sort_unstable();
    assert_eq!(
        ips,
        ["10.0.0.254", "fd00:1::ffff:ffff:ffff:ffff"],
        "top-down in each range"
    );
    for x in &v {
        assert_eq!(
            (x.spec.vpc_ref.namespace.as_str(), x.spec.vpc_ref.name.as_str()),
            ("t1", "v1")
        );
        assert_eq!(x.spec.session_affinity, "ClientIP");
        let ports: Vec<(&str, i32)> = x
            .spec
            .ports
            .iter()
            .map(|p| (p.protocol.as_str(), p.port))
            .collect();
        assert_eq!(ports, [("TCP", 80), ("UDP", 53)]);
        assert_eq!(
            x.status.as_ref().map(|s| s.phase.as_str()),
            Some("Pending"),
            "no backends yet"
        );
    }
    let svcs: Api<Service> = Api::namespaced(client.clone(), "t1");
    until("the Service says Attached", || async {
        svcs.get("web")
            .await
            .unwrap()
            .metadata
            .annotations
            .unwrap_or_default()
            .get(ATTACHMENT)
            .map(String::as_str)
            == Some("Attached")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backends_follow_the_endpoint_slices() {
    let (s, _cozy, client) = setup().await;
    service(&client, "t1").await;
    vips_until(&client, "t1", 2, "two ServiceVIPs", |_| true).await;
    let a = pod_port(&client, "t1", "a", "10.0.0.10").await;
    let b = pod_port(&client, "t1", "b", "10.0.0.11").await;
    pod_port(&client, "t1", "b", "fd00:1::11").await;
    s.create("endpointslices", Some("t1"), slice("t1", &[("a", true)]))
        .await
        .unwrap();
    let v = vips_until(&client, "t1", 2, "a as the backend", |v| {
        backends(v, true) == [("10.0.0.10".to_string(), 80, 8080)]
    })
    .await;
    assert!(backends(&v, false).is_empty(), "a has no v6 address");
    assert!(
        v.iter()
            .any(|x| x.status.as_ref().is_some_and(|s| s.phase == "Ready"))
    );

    // b joins (both families); a stops being ready.
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "t1");
    let body = slice("t1", &[("a", false), ("b", true)]);
    slices
        .patch("web-1", &PatchParams::default(), &Patch::Merge(&body))
        .await
        .unwrap();
    vips_until(&client, "t1", 2, "b as the only backend", |v| {
        backends(v, true) == [("10.0.0.11".to_string(), 80, 8080)]
            && backends(v, false) == [("fd00:1::11".to_string(), 80, 8080)]
    })
    .await;
    // b's Port goes: b is no backend any more.
    drop(a);
    Api::<Port>::all(client.clone())
        .delete(b.metadata.name.as_deref().unwrap(), &DeleteParams::default())
        .await
        .unwrap();
    vips_until(&client, "t1", 2, "no v4 backend", |v| {
        backends(v, true).is_empty()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_vips_go_with_the_service() {
    let (_s, _cozy, client) = setup().await;
    service(&client, "t1").await;
    vips_until(&client, "t1", 2, "two ServiceVIPs", |_| true).await;
    Api::<Service>::namespaced(client.clone(), "t1")
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    vips_until(&client, "t1", 0, "no ServiceVIP", |_| true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_vips_go_with_the_binding_and_come_back_with_it() {
    let (_s, _cozy, client) = setup().await;
    // A Service of t2 attaches to t1's VPC through t2's own binding.
    bind(&client, "t2").await;
    service(&client, "t2").await;
    vips_until(&client, "t2", 2, "two ServiceVIPs", |_| true).await;
    Api::<VPCBinding>::namespaced(client.clone(), "t2")
        .delete("v1", &DeleteParams::default())
        .await
        .unwrap();
    vips_until(&client, "t2", 0, "no ServiceVIP", |_| true).await;
    bind(&client, "t2").await;
    vips_until(&client, "t2", 2, "two ServiceVIPs again", |_| true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_binding_there_is_no_vip_and_an_event_says_why() {
    let (_s, _cozy, client) = setup().await;
    service(&client, "t2").await;
    let events: Api<Event> = Api::namespaced(client.clone(), "t2");
    until("a VPCBindingMissing Event on t2/web", || async {
        events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .any(|e| {
                e.reason.as_deref() == Some("VPCBindingMissing")
                    && e.involved_object.name.as_deref() == Some("web")
                    && e.type_.as_deref() == Some("Warning")
            })
    })
    .await;
    let svc = Api::<Service>::namespaced(client.clone(), "t2")
        .get("web")
        .await
        .unwrap();
    let why = svc
        .metadata
        .annotations
        .unwrap_or_default()
        .get(ATTACHMENT)
        .cloned()
        .unwrap_or_default();
    assert!(
        why.starts_with("VPCBindingMissing") && why.contains("t1/v1"),
        "{why}"
    );
    assert!(
        vips_of(&client, "t2").await.is_empty(),
        "no ServiceVIP without the binding"
    );
}
