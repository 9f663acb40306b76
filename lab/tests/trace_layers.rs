//! `make e2e`, two nodes: every policy drop the lab makes, asked of the trace API (issue 29,
//! item 4). Each step makes the kernel drop a flow, waits for the drop reason's counter on the
//! node that drops it, then asks the trace (`podtraces` for the default network,
//! `vpcs/<vpc>/trace` for a VPC) about the same flow: its verdict must be `Dropped` and its
//! layer the one that reason belongs to ([`LAYER`]). The kernel's verdict and the trace's
//! answer, side by side, for: NetworkPolicy, AdminNetworkPolicy, BaselineAdminNetworkPolicy,
//! HostFirewall (a pod into its node), the VPC gateway's refusal, isolation from the cluster,
//! a severed Port, a Port gone (dropped at the sender as isolation: no endpoint, no remote),
//! and SecurityGroups. Needs root and the agent and CNI binaries
//! built.

use std::net::IpAddr;

use cozyplane_apis::net::claim::port_name;
use cozyplane_apis::v1alpha1::{Port, VPC};
use cozyplane_bpf::DropReason;
use cozyplane_lab::{CTL_IP, Lab, LabPod, Node};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

mod common;
mod sg_lab;
use common::{Cp, CpOptions, pod, tenant, until, vni, vpc_ip, wait};
use sg_lab::{OPEN, serve, tcp_ok};

/// The layer a trace must name for each drop reason this test makes the kernel count.
const LAYER: [(DropReason, &str); 8] = [
    (DropReason::PolNp, "NetworkPolicy"),
    (DropReason::PolAnp, "AdminNetworkPolicy"),
    (DropReason::PolBanp, "BaselineAdminNetworkPolicy"),
    (DropReason::PolHfIngress, "HostFirewall"),
    (DropReason::PolSg, "SecurityGroup"),
    (DropReason::NoGateway, "NorthSouth"),
    (DropReason::VpcIsolation, "Isolation"),
    (DropReason::Severed, "Severed"),
];

/// The kubelet's read-only port: nothing listens, the SYN is what the firewall judges.
const NODE_PORT: u16 = 10255;
const OUTSIDE: &str = "192.0.2.77";

#[test]
fn lab_trace_layers() {
    Lab::run(2, body);
}

/// A trace question: the podtraces of a namespace, or a VPC's `trace` subresource.
enum Q {
    Pod(&'static str),
    Vpc(&'static str, &'static str),
}

async fn ask(cp: &Cp, q: &Q, spec: Value) -> Value {
    let pp = PostParams::default();
    match q {
        Q::Pod(ns) => {
            let ar = ApiResource {
                group: "sdn.cozystack.io".into(),
                version: "v1alpha1".into(),
                api_version: "sdn.cozystack.io/v1alpha1".into(),
                kind: "PodTrace".into(),
                plural: "podtraces".into(),
            };
            let body: DynamicObject = serde_json::from_value(
                json!({"apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "PodTrace", "metadata": {}, "spec": spec}),
            )
            .unwrap();
            let a = Api::<DynamicObject>::namespaced_with(cp.sdn.clone(), ns, &ar)
                .create(&pp, &body)
                .await
                .unwrap_or_else(|e| panic!("a pod trace in {ns}: {e}"));
            serde_json::to_value(a).unwrap()
        }
        Q::Vpc(ns, vpc) => {
            let body = json!({"apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "VPCTrace", "spec": spec});
            Api::<VPC>::namespaced(cp.sdn.clone(), ns)
                .create_subresource::<Value, Value>("trace", vpc, &pp, &body)
                .await
                .unwrap_or_else(|e| panic!("a trace of VPC {ns}/{vpc}: {e}"))
        }
    }
}

/// Sends `probe` until the nodes count `reason` (the datapath decides a flow at the first hook
/// that can: a NetworkPolicy ingress may drop at the source's node), then asks the trace `(path, kind, spec)`: it
/// must drop the flow in the reason's layer (and `reason` when given).
#[expect(clippy::too_many_arguments, reason = "one step's kernel and trace sides")]
async fn step(
    cp: &Cp,
    what: &str,
    nodes: [&Node; 2],
    reason: DropReason,
    probe: impl Fn() -> bool,
    (q, spec): (Q, Value),
    want_reason: Option<&str>,
    passes: &mut Vec<(DropReason, String)>,
) {
    let count = || nodes.iter().map(|n| n.drops(reason)).sum::<u64>();
    let before = count();
    // The agents follow the API within a second or so: until the flow fails and is counted.
    wait(&format!("{what}: the kernel counts {reason:?}"), || {
        !probe() && count() > before
    });
    let a = ask(cp, &q, spec).await;
    let st = &a["status"];
    let layer = LAYER.iter().find(|(r, _)| *r == reason).map(|(_, l)| *l).unwrap();
    assert_eq!(st["verdict"], "Dropped", "{what}: the kernel drops it\n{a:#}");
    assert_eq!(st["layer"], layer, "{what}: kernel {reason:?}\n{a:#}");
    if let Some(r) = want_reason {
        assert_eq!(st["reason"], r, "{what}\n{a:#}");
    }
    let line = format!(
        "{what:<58} kernel {reason:?} ({} packets) = trace {} / {}",
        count() - before,
        layer,
        st["reason"].as_str().unwrap_or_default()
    );
    eprintln!("PASS {line}");
    passes.push((reason, line));
}

fn addr(ip: impl std::fmt::Display) -> Value {
    json!({"address": ip.to_string()})
}

fn tcp(src: Value, dst: Value, port: u16) -> Value {
    let mut q = json!({"protocol": "TCP", "port": port});
    q["source"] = src;
    q["destination"] = dst;
    q
}

async fn namespace(cp: &Cp, ns: &str) {
    Api::<Namespace>::all(cp.kube.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
        )
        .await
        .unwrap();
}

/// Creates the object `v` through `api` (its type is the API's).
macro_rules! create {
    ($api:expr, $v:expr $(,)?) => {
        $api.create(&PostParams::default(), &serde_json::from_value($v).unwrap())
            .await
            .unwrap()
    };
}

async fn body(lab: &mut Lab) {
    let cp = Cp::start_with(lab, CpOptions::doors()).await;
    let lab = &*lab;
    let (n1, n2) = (&lab.nodes[0], &lab.nodes[1]);
    let mut passes = Vec::new();

    // --- The default network: a (n1) probes one pod per tier on n2, each in its namespace.
    for ns in ["src", "np", "anp", "banp"] {
        namespace(&cp, ns).await;
    }
    let a = pod(&cp, lab, 0, "src", "a", None).await;
    let b = pod(&cp, lab, 1, "np", "b", None).await;
    let c = pod(&cp, lab, 1, "anp", "c", None).await;
    let e = pod(&cp, lab, 1, "banp", "e", None).await;
    for p in [&b, &c, &e] {
        serve(p);
        wait(&format!("a reaches {} before any policy", p.name), || {
            tcp_ok(&a.ns, IpAddr::V4(p.fabric), OPEN)
        });
    }
    let to = |p: &LabPod| IpAddr::V4(p.fabric);
    let pod_q =
        |ns: &'static str, p: &LabPod| (Q::Pod(ns), tcp(addr(a.fabric), json!({"pod": p.name}), OPEN));

    create!(
        Api::<k8s_openapi::api::networking::v1::NetworkPolicy>::namespaced(cp.kube.clone(), "np"),
        json!({"metadata": {"name": "closed"}, "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}}),
    );
    let question = pod_q("np", &b);
    step(
        &cp,
        "a -> np/b: b's NetworkPolicy isolates it",
        [n1, n2],
        DropReason::PolNp,
        || tcp_ok(&a.ns, to(&b), OPEN),
        question,
        Some("DefaultDeny"),
        &mut passes,
    )
    .await;

    create!(
        Api::<cozyplane_apis::admin_policy::AdminNetworkPolicy>::all(cp.kube.clone()),
        json!({"metadata": {"name": "anp-closed"},
               "spec": {"priority": 10,
                        "subject": {"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "anp"}}},
                        "ingress": [{"name": "from-anyone", "action": "Deny", "from": [{"namespaces": {}}]}]}}),
    );
    let question = pod_q("anp", &c);
    step(
        &cp,
        "a -> anp/c: an AdminNetworkPolicy denies",
        [n1, n2],
        DropReason::PolAnp,
        || tcp_ok(&a.ns, to(&c), OPEN),
        question,
        Some("Deny"),
        &mut passes,
    )
    .await;

    create!(
        Api::<cozyplane_apis::admin_policy::BaselineAdminNetworkPolicy>::all(cp.kube.clone()),
        json!({"metadata": {"name": "default"},
               "spec": {"subject": {"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "banp"}}},
                        "ingress": [{"name": "baseline-closed", "action": "Deny", "from": [{"namespaces": {}}]}]}}),
    );
    let question = pod_q("banp", &e);
    step(
        &cp,
        "a -> banp/e: the BaselineAdminNetworkPolicy denies",
        [n1, n2],
        DropReason::PolBanp,
        || tcp_ok(&a.ns, to(&e), OPEN),
        question,
        Some("Deny"),
        &mut passes,
    )
    .await;

    // A HostFirewall on n1 admitting only the lab's control namespace (the API servers): a, on
    // n1, is refused at its node after its own egress passed.
    Api::<k8s_openapi::api::core::v1::Node>::all(cp.kube.clone())
        .patch(
            &n1.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"trace-hf": "on"}}})),
        )
        .await
        .unwrap();
    create!(
        Api::<cozyplane_apis::v1alpha1::HostFirewall>::all(cp.sdn.clone()),
        json!({"apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "HostFirewall",
               "metadata": {"name": "n1-in"},
               "spec": {"nodeSelector": {"matchLabels": {"trace-hf": "on"}}, "policyTypes": ["Ingress"],
                        "ingress": [{"from": [{"cidr": format!("{CTL_IP}/32")}]}]}}),
    );
    step(
        &cp,
        "a -> its node n1: the node's HostFirewall refuses",
        [n1, n2],
        DropReason::PolHfIngress,
        || tcp_ok(&a.ns, IpAddr::V4(n1.ip), NODE_PORT),
        (Q::Pod("src"), tcp(json!({"pod": "a"}), addr(n1.ip), NODE_PORT)),
        Some("DefaultDeny"),
        &mut passes,
    )
    .await;
    Api::<cozyplane_apis::v1alpha1::HostFirewall>::all(cp.sdn.clone())
        .delete("n1-in", &DeleteParams::default())
        .await
        .unwrap();
    // Gone from n1's datapath: the port nothing serves refuses again (a RST, not a drop).
    let n1_port = format!("</dev/tcp/{}/{NODE_PORT}", n1.ip);
    wait("n1's firewall lifted", || {
        let o = a.ns.exec(&["timeout", "2", "bash", "-c", &n1_port]);
        String::from_utf8_lossy(&o.stderr).contains("refused")
    });

    // --- A VPC: p1 (n1) probes outside, the cluster, p3 (severed, then gone) and p2.
    tenant(&cp, "t1", "va", "10.50.0.0/24").await;
    let p1 = pod(&cp, lab, 0, "t1", "p1", Some("va")).await;
    let p2 = pod(&cp, lab, 1, "t1", "p2", Some("va")).await;
    let p3 = pod(&cp, lab, 1, "t1", "p3", Some("va")).await;
    let (ip1, ip2, ip3) = (
        vpc_ip(&cp, &p1).await,
        vpc_ip(&cp, &p2).await,
        vpc_ip(&cp, &p3).await,
    );
    let vni = vni(&cp, "t1", "va").await;
    let from_p1 = |dst: Value, port| tcp(json!({"port": port_name(vni, IpAddr::V4(ip1))}), dst, port);
    for p in [&p2, &p3] {
        serve(p);
    }
    wait("p1 reaches p3", || tcp_ok(&p1.ns, IpAddr::V4(ip3), OPEN));

    step(
        &cp,
        "p1 -> outside: VPC va has no gateway",
        [n1, n2],
        DropReason::NoGateway,
        || tcp_ok(&p1.ns, OUTSIDE.parse().unwrap(), 80),
        (Q::Vpc("t1", "va"), from_p1(addr(OUTSIDE), 80)),
        Some("NoGateway"),
        &mut passes,
    )
    .await;
    step(
        &cp,
        "p1 -> node n2: the cluster is not the VPC's",
        [n1, n2],
        DropReason::VpcIsolation,
        || tcp_ok(&p1.ns, IpAddr::V4(n2.ip), NODE_PORT),
        (Q::Vpc("t1", "va"), from_p1(addr(n2.ip), NODE_PORT)),
        Some("ClusterInternal"),
        &mut passes,
    )
    .await;

    // p3's Port deleted with a finalizer of the test's own: it stays terminating after n2's
    // agent severed the pod and removed its own.
    let ports = Api::<Port>::all(cp.sdn.clone());
    let p3_port = port_name(vni, IpAddr::V4(ip3));
    ports
        .patch(
            &p3_port,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"finalizers": ["sdn.cozystack.io/sever", "lab.cozystack.io/hold"]}}),
            ),
        )
        .await
        .unwrap();
    ports.delete(&p3_port, &DeleteParams::default()).await.unwrap();
    step(
        &cp,
        "p1 -> p3: p3's Port is deleted, its node severed it",
        [n1, n2],
        DropReason::Severed,
        || tcp_ok(&p1.ns, IpAddr::V4(ip3), OPEN),
        (Q::Vpc("t1", "va"), from_p1(addr(ip3), OPEN)),
        Some("Severed"),
        &mut passes,
    )
    .await;
    ports
        .patch(
            &p3_port,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    until("p3's Port is gone", || async {
        ports.get_opt(&p3_port).await.unwrap().is_none().then_some(())
    })
    .await;
    step(
        &cp,
        "p1 -> p3's address once its Port is gone: no endpoint",
        [n1, n2],
        DropReason::VpcIsolation,
        || tcp_ok(&p1.ns, IpAddr::V4(ip3), OPEN),
        (Q::Vpc("t1", "va"), from_p1(addr(ip3), OPEN)),
        Some("NoPort"),
        &mut passes,
    )
    .await;

    // Last, a SecurityGroup over every pod of the VPC with no rule.
    wait("p1 reaches p2", || tcp_ok(&p1.ns, IpAddr::V4(ip2), OPEN));
    create!(
        Api::<cozyplane_apis::v1alpha1::SecurityGroup>::namespaced(cp.sdn.clone(), "t1"),
        json!({"apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "SecurityGroup",
               "metadata": {"name": "closed"}, "spec": {"vpcRef": {"name": "va"}, "podSelector": {}}}),
    );
    step(
        &cp,
        "p1 -> p2: their SecurityGroup admits nothing",
        [n1, n2],
        DropReason::PolSg,
        || tcp_ok(&p1.ns, IpAddr::V4(ip2), OPEN),
        (Q::Vpc("t1", "va"), from_p1(addr(ip2), OPEN)),
        Some("DefaultDeny"),
        &mut passes,
    )
    .await;

    eprintln!("every drop of this lab, named by the trace:");
    for (_, p) in &passes {
        eprintln!("  {p}");
    }
    for (r, _) in LAYER {
        assert!(
            passes.iter().any(|(x, _)| *x == r),
            "no step made the kernel count {r:?}"
        );
    }
}
