//! The real-node lab (issue 40) with Services and no kube-proxy (issue 26): the agents run
//! with `--kube-proxy-replacement`, kube-controller-manager's endpointslice controller fills
//! the slices from the pods the real kubelets report Ready, and the requests are made from
//! inside a busybox pod on `n1`:
//!
//! 1. nothing plays kube-proxy: no ruleset of any lab netns or of the machine names a
//!    ClusterIP;
//! 2. a ClusterIP Service with a named `targetPort` in front of two agnhost servers, one on
//!    each node: new connections reach both (each answers its own name);
//!    the nodes themselves (their own netns, the host network) too, through the socket hooks;
//! 3. `sessionAffinity: ClientIP`: every request of the client reaches one backend;
//! 4. a backend deleted: every request reaches the other, none fails;
//! 5. a NodePort Service: each node's address at the node port, from the pod and from `n1`;
//!    from outside the cluster (the lab's internet host), a NodePort with
//!    `externalTrafficPolicy: Local` on the node of its endpoint, the client's address kept;
//!    one with `Cluster` on the node without an endpoint, NATed to that node's address;
//!    a LoadBalancer ingress IP from outside, and its health-check node port (200 with the
//!    local endpoint count where there is one, 503 elsewhere);
//!    a pod's hostPort from outside, served by the datapath;
//! 6. a Service without endpoints: the connection is refused at once (a reset), not left to
//!    time out.
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
use std::time::{Duration, Instant};

use cozyplane_lab::{Lab, Node};
use pods::{Outcome, SERVER_PORT};
use serde_json::json;

/// An agnhost `netexec` pod `name` on `node` (label `app: web`, its port named `http`).
fn server(ns: &str, name: &str, node: &Node) -> serde_json::Value {
    let port = format!("--http-port={SERVER_PORT}");
    let mut p = pods::pod(ns, name, &node.name, images::AGNHOST, &["netexec", &port]);
    p["metadata"]["labels"] = json!({ "app": "web" });
    p["spec"]["containers"][0]["ports"] = json!([{ "name": "http", "containerPort": SERVER_PORT }]);
    p["spec"]["containers"][0]["readinessProbe"] = json!({
        "httpGet": { "path": "/hostname", "port": "http" },
        "periodSeconds": 1
    });
    p
}

/// A ClusterIP Service `name` on port 80 to the pods labelled `app: <app>`, target `http`.
fn service(ns: &str, name: &str, app: &str, affinity: bool) -> serde_json::Value {
    let mut s = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": { "name": name, "namespace": ns },
        "spec": {
            "selector": { "app": app },
            "ports": [{ "name": "web", "port": 80, "protocol": "TCP", "targetPort": "http" }]
        }
    });
    if affinity {
        s["spec"]["sessionAffinity"] = json!("ClientIP");
        s["spec"]["sessionAffinityConfig"] = json!({ "clientIP": { "timeoutSeconds": 60 } });
    }
    s
}

/// A field of Service `ns/name` by its JSONPath, e.g. `{.spec.clusterIP}`.
async fn field(
    cp: &cozyplane_conformance::realkube::ControlPlane,
    ns: &str,
    name: &str,
    path: &str,
) -> String {
    let path = format!("jsonpath={path}");
    cp.ok(&cp.admin, &["get", "service", name, "-n", ns, "-o", &path])
        .await
        .trim()
        .to_string()
}

async fn cluster_ip(cp: &cozyplane_conformance::realkube::ControlPlane, ns: &str, name: &str) -> String {
    field(cp, ns, name, "{.spec.clusterIP}").await
}

/// The backends `n` requests to `url` from the client reached, in order.
async fn answers(cluster: &kit::Cluster, ns: &str, url: &str, n: usize) -> Vec<Outcome> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(pods::fetch(&cluster.cp, ns, "client", url, 3).await);
    }
    out
}

fn names(outcomes: &[Outcome]) -> BTreeSet<String> {
    outcomes
        .iter()
        .map(|o| match o {
            Outcome::Body(b) => b.clone(),
            other => format!("{other:?}"),
        })
        .collect()
}

#[test]
fn services_without_kube_proxy_on_real_nodes() {
    Lab::run(2, async |lab| {
        let t0 = Instant::now();
        let cluster = kit::Cluster::start(lab).await;
        let cp = &cluster.cp;
        let ns = pods::namespace(cp, "svc").await;
        let (n1, n2): (&Node, &Node) = (&lab.nodes[0], &lab.nodes[1]);

        cp.apply(&server(&ns, "web-a", n1).to_string()).await;
        cp.apply(&server(&ns, "web-b", n2).to_string()).await;
        let mut client = pods::pod(&ns, "client", &n1.name, images::BUSYBOX, &["sleep", "3600"]);
        client["metadata"]["labels"] = json!({ "app": "client" });
        cp.apply(&client.to_string()).await;
        for p in ["web-a", "web-b", "client"] {
            pods::wait_running(&cluster, &ns, p).await;
        }
        cp.apply(&service(&ns, "web", "web", false).to_string()).await;
        let vip = cluster_ip(cp, &ns, "web").await;
        let url = format!("http://{vip}/hostname");

        // 1. Nothing plays kube-proxy.
        let mut rulesets = vec![(
            "the machine".to_string(),
            cozyplane_lab::sh(&["nft", "list", "ruleset"]),
        )];
        for n in &lab.nodes {
            rulesets.push((n.name.clone(), n.ns.exec(&["nft", "list", "ruleset"])));
        }
        for (who, out) in &rulesets {
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                !text.contains(&vip) && !text.contains("KUBE-SVC"),
                "{who}'s nftables ruleset names the ClusterIP {vip}:\n{text}"
            );
        }
        eprintln!("PASS no nftables ruleset (machine, n1, n2) names the ClusterIP {vip}");

        // 2. Both backends, through the ClusterIP, from a pod on n1.
        let seen = pods::wait_for(
            &cluster,
            &ns,
            "client",
            &url,
            &Outcome::Body("web-b".into()),
            Duration::from_secs(30),
        )
        .await;
        eprintln!("PASS the ClusterIP reached web-b on n2 {seen} after the Service was made");
        let got = answers(&cluster, &ns, &url, 16).await;
        assert_eq!(
            names(&got),
            BTreeSet::from(["web-a".to_string(), "web-b".to_string()]),
            "16 new connections through {vip}: {got:?}"
        );
        eprintln!("PASS 16 connections through the ClusterIP reached both backends, none failed");

        // 2b. From the nodes themselves (the host network): the socket-level path.
        for n in &lab.nodes {
            let mut seen = BTreeSet::new();
            for _ in 0..12 {
                let out = n.ns.exec(&["timeout", "5", "busybox", "wget", "-qO-", &url]);
                seen.insert(String::from_utf8_lossy(&out.stdout).trim().to_string());
            }
            assert_eq!(
                seen,
                BTreeSet::from(["web-a".to_string(), "web-b".to_string()]),
                "12 connections from {}'s own network namespace to {vip}",
                n.name
            );
        }
        eprintln!("PASS from each node's own network namespace, 12 connections reached both backends");

        // 3. ClientIP affinity: one backend for every request of the client.
        cp.apply(&service(&ns, "sticky", "web", true).to_string()).await;
        let sticky = format!("http://{}/hostname", cluster_ip(cp, &ns, "sticky").await);
        let deadline = Instant::now() + Duration::from_secs(30);
        let first = loop {
            match pods::fetch(cp, &ns, "client", &sticky, 3).await {
                Outcome::Body(b) => break b,
                other => assert!(
                    Instant::now() < deadline,
                    "{sticky} never answered: {other:?}\n{}",
                    cluster.node_logs()
                ),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let got = answers(&cluster, &ns, &sticky, 8).await;
        assert_eq!(
            names(&got),
            BTreeSet::from([first.clone()]),
            "sessionAffinity ClientIP: the first request reached {first}, then {got:?}"
        );
        eprintln!("PASS sessionAffinity ClientIP: 9 connections, one backend ({first})");

        // 4. A backend goes: the other serves every request.
        cp.ok(
            &cp.admin,
            &[
                "delete",
                "pod",
                "web-b",
                "-n",
                &ns,
                "--wait=true",
                "--timeout=60s",
            ],
        )
        .await;
        let deleted = Instant::now();
        let seen = pods::wait_for(
            &cluster,
            &ns,
            "client",
            &url,
            &Outcome::Body("web-a".into()),
            Duration::from_secs(30),
        )
        .await;
        let got = answers(&cluster, &ns, &url, 8).await;
        assert_eq!(
            names(&got),
            BTreeSet::from(["web-a".to_string()]),
            "after web-b went: {got:?}"
        );
        eprintln!(
            "PASS web-b deleted: 8 of 8 connections reached web-a ({seen}, {:?} after the delete)",
            deleted.elapsed()
        );

        // 5. NodePort: every node's address, from a pod and from a node.
        let mut np = service(&ns, "np", "web", false);
        np["spec"]["type"] = json!("NodePort");
        cp.apply(&np.to_string()).await;
        let node_port = field(cp, &ns, "np", "{.spec.ports[0].nodePort}").await;
        for target in [n1, n2] {
            let url = format!("http://{}:{node_port}/hostname", target.ip);
            let seen = pods::wait_for(
                &cluster,
                &ns,
                "client",
                &url,
                &Outcome::Body("web-a".into()),
                Duration::from_secs(30),
            )
            .await;
            let out = n1.ns.exec(&["timeout", "5", "busybox", "wget", "-qO-", &url]);
            assert_eq!(
                String::from_utf8_lossy(&out.stdout).trim(),
                "web-a",
                "{url} from n1's own network namespace"
            );
            eprintln!(
                "PASS NodePort {url} ({}'s address) from the client pod ({seen}) and from n1",
                target.name
            );
        }

        // 5b. From outside the cluster (the lab's internet host, through its router): a
        // NodePort with externalTrafficPolicy Local, its endpoint web-a on n1, keeps the
        // client's address.
        let outside = lab.outside(1500);
        let mut local = service(&ns, "np-local", "web", false);
        local["spec"]["type"] = json!("NodePort");
        local["spec"]["externalTrafficPolicy"] = json!("Local");
        cp.apply(&local.to_string()).await;
        let local_port = field(cp, &ns, "np-local", "{.spec.ports[0].nodePort}").await;
        let url = format!("http://{}:{local_port}/clientip", n1.ip);
        let asked = Instant::now();
        let seen = svc::from_outside(
            &outside,
            &url,
            |b| !b.is_empty(),
            || {
                format!(
                    "n1's frontends {:?}\n{}",
                    cozyplane_bpf::maps::lb_svc::LbSvcMap::from_pin(&n1.scratch.pins())
                        .and_then(|m| m.frontends()),
                    cluster.node_logs()
                )
            },
        )
        .await;
        assert!(
            seen.starts_with(&format!("{}:", cozyplane_lab::outside::INET4)),
            "the backend saw {seen:?}, not the internet host's address"
        );
        eprintln!(
            "PASS NodePort (externalTrafficPolicy Local) {url} from outside: the backend saw the client as {seen} ({:?})",
            asked.elapsed()
        );

        // 5b'. externalTrafficPolicy Cluster (np): n2 has no endpoint since web-b went; from
        // outside, its NodePort reaches web-a on n1, NATed to n2's address (bpf/lib/lb_snat.h).
        let url = format!("http://{}:{node_port}/clientip", n2.ip);
        let asked = Instant::now();
        let seen = svc::from_outside(&outside, &url, |b| !b.is_empty(), || cluster.node_logs()).await;
        assert!(
            seen.starts_with(&format!("{}:", n2.ip)),
            "web-a saw {seen:?} through n2's NodePort, not n2's address"
        );
        let url = format!("http://{}:{node_port}/hostname", n2.ip);
        let name = svc::from_outside(&outside, &url, |b| !b.is_empty(), || cluster.node_logs()).await;
        assert_eq!(name, "web-a", "{url} from outside");
        eprintln!(
            "PASS NodePort (externalTrafficPolicy Cluster) on n2, its endpoint on n1: from outside web-a answered, seeing the client as {seen} ({:?})",
            asked.elapsed()
        );

        // 5c. A LoadBalancer Service with externalTrafficPolicy Local: its ingress IP (set by
        // hand: the lab has no load balancer controller; the router sends the pool to n1) is
        // served from outside by n1, its endpoint's node; its health-check node port answers
        // 200 with one local endpoint on n1 and 503 on n2.
        let mut lb = service(&ns, "lb", "web", false);
        lb["spec"]["type"] = json!("LoadBalancer");
        lb["spec"]["externalTrafficPolicy"] = json!("Local");
        cp.apply(&lb.to_string()).await;
        let lb_ip = "203.0.113.10";
        let ingress = json!({"status": {"loadBalancer": {"ingress": [{"ip": lb_ip}]}}});
        svc::patch(cp, &ns, "lb", true, &ingress).await;
        outside.attract(lab, 0);
        let hc = field(cp, &ns, "lb", "{.spec.healthCheckNodePort}").await;
        let url = format!("http://{lb_ip}/hostname");
        svc::from_outside(&outside, &url, |b| b == "web-a", || cluster.node_logs()).await;
        eprintln!("PASS LoadBalancer ingress {lb_ip} reached from outside through n1");
        for (n, code, local) in [(n1, "200", 1), (n2, "503", 0)] {
            let hc_url = format!("http://{}:{hc}/healthz", n.ip);
            let out = outside.internet.exec(&[
                "timeout",
                "3",
                "curl",
                "-s",
                "-o",
                "/dev/stderr",
                "-w",
                "%{http_code}",
                &hc_url,
            ]);
            let body = String::from_utf8_lossy(&out.stderr).to_string();
            assert_eq!(String::from_utf8_lossy(&out.stdout), code, "{hc_url}: {body}");
            let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            assert_eq!(v["localEndpoints"], local, "{hc_url}: {body}");
        }
        eprintln!("PASS health-check node port {hc}: 200 with 1 local endpoint on n1, 503 with 0 on n2");

        // 5d. A hostPort (a pod's own, no Service): from outside, through n1's uplink.
        let mut hp = server(&ns, "hp", n1);
        hp["metadata"]["labels"] = json!({ "app": "hp" });
        hp["spec"]["containers"][0]["ports"][0]["hostPort"] = json!(8081);
        cp.apply(&hp.to_string()).await;
        pods::wait_running(&cluster, &ns, "hp").await;
        let url = format!("http://{}:8081/hostname", n1.ip);
        svc::from_outside(&outside, &url, |b| b == "hp", || cluster.node_logs()).await;
        let outside_front = cozyplane_bpf::maps::lb_svc::Frontend {
            net: cozyplane_bpf::abi::LB_NET_EXTERNAL,
            vip: std::net::IpAddr::V4(n1.ip),
            proto: 6,
            port: 8081,
        };
        let fronts = cozyplane_bpf::maps::lb_svc::LbSvcMap::from_pin(&n1.scratch.pins())
            .and_then(|m| m.frontends())
            .unwrap_or_default();
        assert!(
            fronts.contains(&outside_front),
            "the hostPort is no frontend of n1's datapath: {fronts:?}"
        );
        eprintln!("PASS hostPort {url} from outside, a frontend of n1's datapath");

        // 6. No endpoints: refused at once.
        cp.apply(&service(&ns, "empty", "nobody", false).to_string())
            .await;
        let empty = cluster_ip(cp, &ns, "empty").await;
        let script = format!("timeout 10 wget -qO- http://{empty}/ 2>&1; true");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let asked = Instant::now();
            let out = cp
                .kubectl(
                    &cp.admin,
                    &["exec", "-n", &ns, "client", "--", "sh", "-c", &script],
                )
                .await;
            let text = String::from_utf8_lossy(&out.stdout).to_string();
            if text.contains("refused") {
                eprintln!(
                    "PASS a Service without endpoints refuses the connection ({:?} for the exec and the refusal)",
                    asked.elapsed()
                );
                break;
            }
            assert!(
                Instant::now() < deadline,
                "a connection to {empty}:80 (no endpoints) was never refused: {text:?}\n{}",
                cluster.node_logs()
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        drop(cluster);
        eprintln!("real-node Services: {:?} in all", t0.elapsed());
    });
}
