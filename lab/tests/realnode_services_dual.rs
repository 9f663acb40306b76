//! The real-node lab (issue 40) dual-stack, with cozyplane as the Service proxy (issue 26):
//! the control plane hands out ClusterIPs of both families, the kubelets report both
//! InternalIPs and every pod's two addresses, the endpointslice controller fills one slice
//! per family, and each family's frontend is balanced over its own family's endpoints:
//!
//! 1. every pod has an IPv4 and an IPv6 address;
//! 2. a `RequireDualStack` ClusterIP Service: each of its two ClusterIPs reaches both
//!    backends (one on each node) from a pod, and from a node's own network namespace (the
//!    socket hooks); a backend sees the client pod's own address of that family;
//! 3. a dual-stack NodePort from outside the cluster over IPv6 (the lab's internet host):
//!    `externalTrafficPolicy: Local` at the node of its endpoint keeps the client's address;
//!    `Cluster` at a node reaches both backends, the other node's NATed to the receiving
//!    node's IPv6 address;
//! 4. a LoadBalancer Service's ingress IPs and a Service's external IPs, one of each family:
//!    both backends from outside (the lab's router sends the pool to `n2`), from a pod and
//!    from a node.
//!
//! Shares the kit of `realnode.rs`; needs what it needs.

#[path = "realnode/host.rs"]
mod host;
#[path = "realnode/images.rs"]
mod images;
#[path = "realnode/kit.rs"]
mod kit;
#[path = "realnode/pods.rs"]
mod pods;
#[path = "realnode/svc.rs"]
mod svc;

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use cozyplane_conformance::realkube::ControlPlane;
use cozyplane_lab::{Lab, Node};
use pods::{Outcome, SERVER_PORT};
use serde_json::json;

/// An agnhost `netexec` pod `name` on `node` labelled `app: <app>`, its port named `http`.
fn server(ns: &str, name: &str, app: &str, node: &Node) -> serde_json::Value {
    let port = format!("--http-port={SERVER_PORT}");
    let mut p = pods::pod(ns, name, &node.name, images::AGNHOST, &["netexec", &port]);
    p["metadata"]["labels"] = json!({ "app": app });
    p["spec"]["containers"][0]["ports"] = json!([{ "name": "http", "containerPort": SERVER_PORT }]);
    p["spec"]["containers"][0]["readinessProbe"] = json!({
        "httpGet": { "path": "/hostname", "port": "http" },
        "periodSeconds": 1
    });
    p
}

/// A `RequireDualStack` Service `name` of `type_` on port 80 to the pods `app: <app>`.
fn service(ns: &str, name: &str, app: &str, type_: &str, etp: Option<&str>) -> serde_json::Value {
    let mut s = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": { "name": name, "namespace": ns },
        "spec": {
            "type": type_,
            "ipFamilyPolicy": "RequireDualStack",
            "ipFamilies": ["IPv4", "IPv6"],
            "selector": { "app": app },
            "ports": [{ "name": "web", "port": 80, "protocol": "TCP", "targetPort": "http" }]
        }
    });
    if let Some(p) = etp {
        s["spec"]["externalTrafficPolicy"] = json!(p);
    }
    s
}

async fn get(cp: &ControlPlane, kind: &str, ns: &str, name: &str, path: &str) -> String {
    let path = format!("jsonpath={path}");
    cp.ok(&cp.admin, &["get", kind, name, "-n", ns, "-o", &path])
        .await
        .trim()
        .to_string()
}

/// The addresses of `{.status.podIPs}` or `{.spec.clusterIPs}` (space-separated).
fn addrs(text: &str) -> Vec<IpAddr> {
    text.split_whitespace().filter_map(|a| a.parse().ok()).collect()
}

fn url(ip: IpAddr, port: u16, path: &str) -> String {
    match ip {
        IpAddr::V4(a) => format!("http://{a}:{port}{path}"),
        IpAddr::V6(a) => format!("http://[{a}]:{port}{path}"),
    }
}

/// `n` GETs of `url` from the internet host: their bodies (empty when one failed).
fn from_outside(outside: &cozyplane_lab::Outside, url: &str, n: usize) -> Vec<String> {
    (0..n).map(|_| svc::get(outside, url)).collect()
}

#[test]
fn dual_stack_services_on_real_nodes() {
    Lab::run_on(Lab::dual_stack(2), async |lab| {
        let t0 = Instant::now();
        let cluster = kit::Cluster::start(lab).await;
        let cp = &cluster.cp;
        let ns = pods::namespace(cp, "dual").await;
        let (n1, n2): (&Node, &Node) = (&lab.nodes[0], &lab.nodes[1]);

        cp.apply(&server(&ns, "web-a", "web", n1).to_string()).await;
        cp.apply(&server(&ns, "web-b", "web", n2).to_string()).await;
        cp.apply(&server(&ns, "local", "local", n1).to_string()).await;
        let client = pods::pod(&ns, "client", &n1.name, images::BUSYBOX, &["sleep", "3600"]);
        cp.apply(&client.to_string()).await;
        for p in ["web-a", "web-b", "local", "client"] {
            pods::wait_running(&cluster, &ns, p).await;
        }

        // 1. Both families on every pod.
        let client_ips = addrs(&get(cp, "pod", &ns, "client", "{.status.podIPs[*].ip}").await);
        assert!(
            client_ips.len() == 2 && client_ips.iter().any(IpAddr::is_ipv6),
            "the client pod's addresses: {client_ips:?}"
        );
        eprintln!("PASS the client pod has {client_ips:?}");

        // 2. Each ClusterIP reaches both backends, from a pod and from a node.
        cp.apply(&service(&ns, "web", "web", "ClusterIP", None).to_string())
            .await;
        let vips = addrs(&get(cp, "service", &ns, "web", "{.spec.clusterIPs[*]}").await);
        assert_eq!(vips.len(), 2, "two ClusterIPs: {vips:?}");
        let both = BTreeSet::from(["web-a".to_string(), "web-b".to_string()]);
        for vip in &vips {
            let u = url(*vip, 80, "/hostname");
            let seen = pods::wait_for(
                &cluster,
                &ns,
                "client",
                &u,
                &Outcome::Body("web-b".into()),
                Duration::from_secs(30),
            )
            .await;
            let mut names = BTreeSet::new();
            for _ in 0..16 {
                match pods::fetch(cp, &ns, "client", &u, 3).await {
                    Outcome::Body(b) => names.insert(b),
                    other => panic!("{u} from the client pod: {other:?}"),
                };
            }
            assert_eq!(names, both, "16 connections through {vip} from the client pod");
            let mut names = BTreeSet::new();
            for _ in 0..12 {
                let out = n1.ns.exec(&["timeout", "5", "busybox", "wget", "-qO-", &u]);
                names.insert(String::from_utf8_lossy(&out.stdout).trim().to_string());
            }
            assert_eq!(
                names, both,
                "12 connections through {vip} from n1's own network namespace"
            );
            let Outcome::Body(seen_as) = pods::fetch(cp, &ns, "client", &url(*vip, 80, "/clientip"), 3).await
            else {
                panic!("/clientip through {vip}");
            };
            let own = client_ips.iter().find(|a| a.is_ipv4() == vip.is_ipv4()).unwrap();
            assert!(
                seen_as.contains(&own.to_string()),
                "the backend saw {seen_as:?} through {vip}, not the client's {own}"
            );
            eprintln!(
                "PASS ClusterIP {vip}: both backends from the client pod ({seen}) and from n1; the backend saw {seen_as}"
            );
        }

        // 3. NodePorts from outside over IPv6.
        let outside = lab.outside(1500);
        let inet6 = cozyplane_lab::outside::INET6.to_string();
        let n1_6 = n1.v6.as_ref().expect("dual-stack lab").1;
        let n2_6 = n2.v6.as_ref().expect("dual-stack lab").1;

        cp.apply(&service(&ns, "np-local", "local", "NodePort", Some("Local")).to_string())
            .await;
        let port: u16 = get(cp, "service", &ns, "np-local", "{.spec.ports[0].nodePort}")
            .await
            .parse()
            .expect("nodePort");
        let u = url(n1_6.into(), port, "/clientip");
        let deadline = Instant::now() + Duration::from_secs(30);
        let seen = loop {
            let got = from_outside(&outside, &u, 1).remove(0);
            if !got.is_empty() || Instant::now() > deadline {
                break got;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        };
        assert!(
            seen.contains(&inet6),
            "{u} (externalTrafficPolicy Local) from outside: the backend saw {seen:?}, not {inet6}\n{}",
            cluster.node_logs()
        );
        eprintln!("PASS NodePort (Local) {u} from outside over IPv6: the client's address kept ({seen})");

        cp.apply(&service(&ns, "np", "web", "NodePort", None).to_string())
            .await;
        let port: u16 = get(cp, "service", &ns, "np", "{.spec.ports[0].nodePort}")
            .await
            .parse()
            .expect("nodePort");
        let u = url(n2_6.into(), port, "/hostname");
        let deadline = Instant::now() + Duration::from_secs(30);
        let names: BTreeSet<String> = loop {
            let got: BTreeSet<String> = from_outside(&outside, &u, 16).into_iter().collect();
            if got == both || Instant::now() > deadline {
                break got;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        };
        assert_eq!(
            names,
            both,
            "{u} (Cluster) from outside: 16 connections\n{}",
            cluster.node_logs()
        );
        let seen: BTreeSet<String> = from_outside(&outside, &url(n2_6.into(), port, "/clientip"), 16)
            .into_iter()
            .map(|s| {
                if s.contains(&inet6) {
                    "the client".to_string()
                } else if s.contains(&n2_6.to_string()) {
                    "n2".to_string()
                } else {
                    s
                }
            })
            .collect();
        assert!(
            seen.iter().all(|s| s == "the client" || s == "n2") && seen.contains("n2"),
            "what the backends saw through n2's NodePort: {seen:?}"
        );
        eprintln!(
            "PASS NodePort (Cluster) {u} from outside over IPv6: both backends; they saw {seen:?} (web-a on n1 NATed to n2's {n2_6})"
        );
        // 4. A LoadBalancer Service (Cluster) with an ingress IP of each family, and a
        // ClusterIP Service with an external IP of each family: the pool routed to n2, each
        // address reaches both backends from outside and from the client pod.
        outside.attract(lab, 1);
        cp.apply(&service(&ns, "lb", "web", "LoadBalancer", None).to_string())
            .await;
        let ingress = json!({"status": {"loadBalancer": {"ingress": [
            {"ip": "203.0.113.20"}, {"ip": "2001:db8:cafe::20"}]}}});
        svc::patch(cp, &ns, "lb", true, &ingress).await;
        let mut ext = service(&ns, "ext", "web", "ClusterIP", None);
        ext["spec"]["externalIPs"] = json!(["203.0.113.21", "2001:db8:cafe::21"]);
        cp.apply(&ext.to_string()).await;
        for (what, ip) in [
            ("LoadBalancer ingress", "203.0.113.20"),
            ("LoadBalancer ingress", "2001:db8:cafe::20"),
            ("external IP", "203.0.113.21"),
            ("external IP", "2001:db8:cafe::21"),
        ] {
            let u = url(ip.parse().unwrap(), 80, "/hostname");
            let t = Instant::now();
            let names: BTreeSet<String> = loop {
                let got: BTreeSet<String> = from_outside(&outside, &u, 16).into_iter().collect();
                if got == both || t.elapsed() > Duration::from_secs(30) {
                    break got;
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            };
            assert_eq!(
                names,
                both,
                "{what} {u} from outside (through n2)\n{}",
                cluster.node_logs()
            );
            let mut names = BTreeSet::new();
            for _ in 0..16 {
                match pods::fetch(cp, &ns, "client", &u, 3).await {
                    Outcome::Body(b) => names.insert(b),
                    other => panic!("{what} {u} from the client pod: {other:?}"),
                };
            }
            assert_eq!(names, both, "{what} {u} from the client pod");
            let mut names = BTreeSet::new();
            for _ in 0..12 {
                let out = n1.ns.exec(&["timeout", "5", "busybox", "wget", "-qO-", &u]);
                names.insert(String::from_utf8_lossy(&out.stdout).trim().to_string());
            }
            assert_eq!(names, both, "{what} {u} from n1's own network namespace");
            eprintln!(
                "PASS {what} {ip}: both backends from outside (through n2), from the client pod and from n1"
            );
        }
        drop(cluster);
        eprintln!("real-node dual-stack Services: {:?} in all", t0.elapsed());
    });
}
