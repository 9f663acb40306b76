//! The control loops that read the kube-apiserver (issue 5): Port GC through Nodes and
//! SecurityGroup membership through Pods. The server runs in delegated mode against the kube
//! stand-in, which also proxies `sdn.cozystack.io` to it. Its `--kubeconfig` is a ServiceAccount
//! token bound to the chart's `cozyplane-apiserver` ClusterRole, built from the RBAC table
//! (issue 15): the loops must work with exactly that (`cozyplane_conformance::delegated`).
//! Every wait on an object is a watch (`kube::runtime::wait::await_condition`); the deadline
//! only turns a hang into a failure.

use std::collections::BTreeMap;
use std::time::Duration;

use cozyplane_apis::v1alpha1::{
    LocalVPCRef, Port, PortSpec, SecurityGroup, SecurityGroupSpec, VPC, VPCRef, VPCSpec,
};
use cozyplane_apiserver::alloc::scan::scan;
use cozyplane_conformance::delegated::Delegated;
use cozyplane_conformance::objects::{WAIT, wait_for, wait_gone};
use cozyplane_conformance::standin::{Cozyplane, Options, StandIn};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::Condition;
use serde_json::json;

/// The informers the server runs with a kube connection (`/readyz` checks `informer-<name>`;
/// `configmaps` is cozyplane-authz's watch of `extension-apiserver-authentication`).
const INFORMERS: [&str; 5] = ["configmaps", "namespaces", "nodes", "pods", "resourcequotas"];

/// Polls `/readyz?verbose` of our server until `pred` holds (readiness has no watch; the
/// deadline turns a hang into a failure).
async fn readyz_until(cozy: &Cozyplane, what: &str, pred: impl Fn(&str) -> bool) -> String {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (_, body) = cozy.get("/readyz?verbose").await;
        if pred(&body) {
            return body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "/readyz never showed {what}:\n{body}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn all_informers_synced(cozy: &Cozyplane) -> String {
    readyz_until(cozy, "every informer synced", |b| {
        INFORMERS
            .iter()
            .all(|i| b.contains(&format!("[+]informer-{i} ok\n")))
    })
    .await
}

/// The stand-in, our server behind it (registered and Available; its kube identity bound to the
/// chart's role minus `without`), and an admin client.
async fn setup(extra: &[&str]) -> (StandIn, Cozyplane, kube::Client) {
    setup_without(&[], extra).await
}

async fn setup_without(without: &[&str], extra: &[&str]) -> (StandIn, Cozyplane, kube::Client) {
    let d = Delegated::start(Options::default(), without, extra).await;
    d.namespace("t1").await;
    let client = d.client.clone();
    let vpcs: Api<VPC> = Api::namespaced(client.clone(), "t1");
    let mut v = VPC::new(
        "v1",
        VPCSpec {
            cidrs: vec!["10.0.0.0/24".into()],
            mtu: 0,
            dhcp: None,
            dns64: false,
        },
    );
    v.metadata.namespace = Some("t1".into());
    vpcs.create(&PostParams::default(), &v).await.unwrap();
    (d.standin, d.cozy, client)
}

async fn node(client: &kube::Client, name: &str) -> Node {
    let mut n = Node::default();
    n.metadata.name = Some(name.into());
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &n)
        .await
        .unwrap()
}

/// A Port in `t1/v1` on `node` (with the agent's sever finalizer), optionally for a pod of t1.
async fn port(client: &kube::Client, node: &str, pod: Option<&str>) -> Port {
    let mut p = Port::new(
        "",
        PortSpec {
            vpc_ref: VPCRef {
                namespace: "t1".into(),
                name: "v1".into(),
            },
            node: node.into(),
            node_ip: "192.168.0.1".into(),
            pod_namespace: pod.map_or_else(String::new, |_| "t1".into()),
            pod_name: pod.unwrap_or_default().into(),
            ..Default::default()
        },
    );
    p.metadata.name = None;
    p.metadata.generate_name = Some("p-".into());
    p.metadata.finalizers = Some(vec!["sdn.cozystack.io/sever".into()]);
    Api::<Port>::all(client.clone())
        .create(&PostParams::default(), &p)
        .await
        .unwrap()
}

fn name_uid(o: &impl kube::Resource) -> (String, String) {
    (o.meta().name.clone().unwrap(), o.meta().uid.clone().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ports_of_missing_nodes_are_collected() {
    let (s, cozy, client) = setup(&["--port-gc-grace=2s"]).await;
    all_informers_synced(&cozy).await;
    let ports: Api<Port> = Api::all(client.clone());
    let n1 = node(&client, "n1").await;
    let (p1, p1_uid) = name_uid(&port(&client, "n1", None).await);
    // n2 never exists: its Port goes once older than the grace, sever finalizer and all.
    let (p2, p2_uid) = name_uid(&port(&client, "n2", None).await);
    wait_gone(&ports, &p2, &p2_uid).await;
    // The same passes kept the Port of the existing node.
    let kept = ports.get(&p1).await.expect("the n1 Port stays");
    assert!(kept.metadata.deletion_timestamp.is_none(), "{kept:?}");

    // The node goes: its Port follows (n1 was seen, so without waiting for a grace).
    Api::<Node>::all(client.clone())
        .delete(n1.metadata.name.as_deref().unwrap(), &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&ports, &p1, &p1_uid).await;

    let report = scan(&cozy.storage).await.unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_eq!(
        report.claims, 1,
        "only the VPC's VNI is still claimed: {report:?}"
    );
    assert_eq!(
        s.forbidden_requests(),
        0,
        "the chart's role grants everything the server asks for"
    );
}

/// Issue 11: a pod deleted while its node's agent is down leaves its Port, which nothing else
/// would ever delete. The server deletes a Port whose pod is gone (never existed: once older
/// than the grace; deleted: at its delete event) or was recreated with another uid. The delete
/// only marks it: the address stays claimed until the node's agent removes the sever finalizer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ports_of_missing_pods_are_deleted_and_wait_for_their_node() {
    let (s, cozy, client) = setup(&["--port-gc-grace=2s"]).await;
    all_informers_synced(&cozy).await;
    node(&client, "n1").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "t1");
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "db-0"},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]}}))
    .unwrap();
    let uid = pods
        .create(&PostParams::default(), &pod)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    let ports: Api<Port> = Api::all(client.clone());
    let (live, _) = name_uid(&port(&client, "n1", Some("db-0")).await);
    let (ghost, _) = name_uid(&port(&client, "n1", Some("never-was")).await);
    // A Port labelled with an older pod of the same name.
    let mut stale = port(&client, "n1", Some("db-0")).await;
    let labels = json!({"metadata": {"labels": {"sdn.cozystack.io/pod-uid": "an-older-uid"}}});
    stale = ports
        .patch(
            stale.metadata.name.as_deref().unwrap(),
            &PatchParams::default(),
            &Patch::Merge(&labels),
        )
        .await
        .unwrap();
    let marked = |o: Option<&Port>| o.is_some_and(|p| p.metadata.deletion_timestamp.is_some());
    wait_for(&ports, &ghost, "marked (no such pod)", marked).await;
    let stale_name = stale.metadata.name.clone().unwrap();
    wait_for(&ports, &stale_name, "marked (another uid)", marked).await;
    let p = ports.get(&live).await.unwrap();
    assert!(p.metadata.deletion_timestamp.is_none(), "{p:?}");

    // The pod goes while no agent runs on n1: its Port is marked, and stays claimed.
    pods.delete("db-0", &DeleteParams::default()).await.unwrap();
    wait_gone(&pods, "db-0", &uid).await;
    let p = wait_for(&ports, &live, "marked (pod deleted)", marked).await;
    assert_eq!(
        p.metadata.finalizers.as_deref(),
        Some(&["sdn.cozystack.io/sever".to_string()][..]),
        "the node's agent releases it"
    );
    let report = scan(&cozy.storage).await.unwrap();
    assert_eq!(
        report.claims,
        1 + 3 * 2,
        "the VNI, and each Port's address and MAC: {report:?}"
    );
    // What the agent does once back.
    for name in [&live, &ghost, &stale_name] {
        let p = ports
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await
            .unwrap();
        wait_gone(&ports, name, p.metadata.uid.as_deref().unwrap()).await;
    }
    let report = scan(&cozy.storage).await.unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_eq!(report.claims, 1, "only the VNI: {report:?}");
    assert_eq!(
        s.forbidden_requests(),
        0,
        "the chart's role grants everything the server asks for"
    );
}

fn sg(name: &str, selector: LabelSelector) -> SecurityGroup {
    let mut g = SecurityGroup::new(
        name,
        SecurityGroupSpec {
            vpc_ref: LocalVPCRef { name: "v1".into() },
            pod_selector: selector,
            ..Default::default()
        },
    );
    g.metadata.namespace = Some("t1".into());
    g
}

fn expr(op: &str, values: &[&str]) -> LabelSelector {
    LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: "app".into(),
            operator: op.into(),
            values: Some(values.iter().map(|v| (*v).to_string()).collect()),
        }]),
        match_labels: None,
    }
}

fn groups_are(want: Vec<i32>) -> impl Condition<Port> {
    move |o: Option<&Port>| {
        o.is_some_and(|p| p.status.as_ref().map_or(&[][..], |s| s.groups.as_slice()) == want.as_slice())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn port_groups_follow_pod_labels() {
    let (s, cozy, client) = setup(&[]).await;
    all_informers_synced(&cozy).await;
    node(&client, "n1").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "t1");
    let mut pod = Pod::default();
    pod.metadata.name = Some("web-1".into());
    pod.metadata.labels = Some(BTreeMap::from([("app".to_string(), "web".to_string())]));
    pod.spec = Some(k8s_openapi::api::core::v1::PodSpec {
        node_name: Some("n1".into()),
        containers: vec![k8s_openapi::api::core::v1::Container {
            name: "c".into(),
            image: Some("i".into()),
            ..Default::default()
        }],
        ..Default::default()
    });
    pods.create(&PostParams::default(), &pod).await.unwrap();

    let sgs: Api<SecurityGroup> = Api::namespaced(client.clone(), "t1");
    let id = |g: &SecurityGroup| g.status.as_ref().map_or(0, |s| s.id);
    let web = sgs
        .create(
            &PostParams::default(),
            &sg(
                "web",
                LabelSelector {
                    match_labels: Some(BTreeMap::from([("app".to_string(), "web".to_string())])),
                    match_expressions: None,
                },
            ),
        )
        .await
        .unwrap();
    let db = sgs
        .create(&PostParams::default(), &sg("db", expr("In", &["db", "cache"])))
        .await
        .unwrap();
    let not_web = sgs
        .create(&PostParams::default(), &sg("not-web", expr("NotIn", &["web"])))
        .await
        .unwrap();
    let (web_id, db_id, not_web_id) = (id(&web), id(&db), id(&not_web));
    assert!(web_id > 0 && db_id > 0 && not_web_id > 0);

    let ports: Api<Port> = Api::all(client.clone());
    let (p, _) = name_uid(&port(&client, "n1", Some("web-1")).await);
    wait_for(&ports, &p, "grouped as web", groups_are(vec![web_id])).await;

    // Relabel the pod: membership follows.
    pods.patch(
        "web-1",
        &PatchParams::default(),
        &Patch::Merge(json!({ "metadata": { "labels": { "app": "db" } } })),
    )
    .await
    .unwrap();
    let mut want = vec![db_id, not_web_id];
    want.sort_unstable();
    wait_for(&ports, &p, "grouped as db", groups_are(want)).await;

    // A deleted group drops out.
    sgs.delete("db", &DeleteParams::default()).await.unwrap();
    wait_for(&ports, &p, "left db", groups_are(vec![not_web_id])).await;
    assert_eq!(
        s.forbidden_requests(),
        0,
        "the chart's role grants everything the server asks for"
    );
}

fn metric(text: &str, line_start: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(line_start))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {line_start} in\n{text}"))
}

/// Without `nodes` in the role the Node informer is refused: `/readyz` says so by name (and
/// fails), the failures are counted in a metric, and the retries slow down (exponential
/// backoff, not a reset before every re-list) while the other informers are unaffected.
/// No timing assertion: only the order of the gaps between retries is compared.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forbidden_informer_backs_off_and_is_reported() {
    let (s, cozy, _client) = setup_without(&["nodes"], &[]).await;
    let body = readyz_until(&cozy, "the nodes informer failing", |b| {
        b.contains("[-]informer-nodes failed: ") && b.contains("[+]informer-pods ok")
    })
    .await;
    assert!(body.contains("nodes is forbidden"), "{body}");
    let (code, _) = cozy.get("/readyz").await;
    assert_eq!(code, 500, "not ready while a required informer cannot sync");

    // The first five refused lists: the gaps between them grow (800 ms doubling, jittered
    // up to ×2: the fourth gap is at least 6.4 s, the first below 1.6 s), where a backoff reset
    // before every re-list keeps them all at 0.8–1.6 s.
    let deadline = tokio::time::Instant::now() + WAIT;
    let times = loop {
        let t = s.request_times("list", "nodes", false);
        if t.len() >= 5 {
            break t;
        }
        assert!(tokio::time::Instant::now() < deadline, "only {} retries", t.len());
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let gaps: Vec<Duration> = times.windows(2).take(4).map(|w| w[1] - w[0]).collect();
    println!("gaps between refused Node lists: {gaps:?}");
    assert!(
        gaps[2] > gaps[0] && gaps[3] > gaps[0] * 3,
        "the retries slow down: gaps {gaps:?}"
    );

    let (_, metrics) = cozy.get("/metrics").await;
    let failures = metric(
        &metrics,
        "cozyplane_kube_watch_failures_total{resource=\"nodes\"} ",
    );
    assert!(failures >= 5, "{failures} counted; {metrics}");
    assert_eq!(
        metric(&metrics, "cozyplane_kube_informer_healthy{resource=\"nodes\"} "),
        0
    );
    assert_eq!(
        metric(&metrics, "cozyplane_kube_informer_healthy{resource=\"pods\"} "),
        1
    );
}

/// A watch without events stays open: the watch client has no read timeout (a 10 s one ended
/// every quiet watch, which was then re-listed and re-opened). Nothing changes Nodes here, so
/// the one watch of the Node informer must still be the only one 25 s later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quiet_watches_stay_open() {
    let (s, cozy, _client) = setup(&[]).await;
    all_informers_synced(&cozy).await;
    let count = || {
        (
            s.requests("list", "nodes", true),
            s.requests("watch", "nodes", true),
        )
    };
    // The watch follows the list at once; wait for it to reach the stand-in.
    let deadline = tokio::time::Instant::now() + WAIT;
    while count().1 == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the Node watch never opened"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let before = count();
    tokio::time::sleep(Duration::from_secs(25)).await;
    assert_eq!(count(), before, "(lists, watches) of nodes");
}
