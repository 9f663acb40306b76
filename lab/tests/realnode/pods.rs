//! Steps on pods that the real-node tests share: a pod's manifest, waiting for it to run, a
//! request from a busybox pod through `kubectl exec`, what our CNI left on a node for a pod
//! (IPAM record, veth, `sdn_endpoints` entry, the ADDs served), and a delete followed down to
//! our CNI DEL. Each test file is a crate of its own that includes this module; a step one of
//! them does not take is not dead code.
#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use cozyplane_conformance::realkube::ControlPlane;
use cozyplane_lab::Node;
use serde_json::{Value, json};

use super::images;
use super::kit::Cluster;

/// The server's port (agnhost `netexec`).
pub(crate) const SERVER_PORT: u16 = 8080;

/// A fresh namespace `<prefix>-<random>` whose default ServiceAccount exists (a pod needs it).
pub(crate) async fn namespace(cp: &ControlPlane, prefix: &str) -> String {
    let ns = cp.namespace(prefix).await;
    cp.eventually("the namespace's default ServiceAccount", || async {
        cp.kubectl(&cp.admin, &["get", "serviceaccount", "default", "-n", &ns])
            .await
            .status
            .success()
    })
    .await;
    ns
}

/// A pod on `node`, or left to the scheduler when `node` is empty: one container `c` of
/// `image` with `args`, never pulled, a grace period of 2 s. JSON, which `kubectl apply`
/// reads as YAML; set labels or hooks on it before applying.
pub(crate) fn pod(ns: &str, name: &str, node: &str, image: &str, args: &[&str]) -> Value {
    let mut p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": name, "namespace": ns },
        "spec": {
            "terminationGracePeriodSeconds": 2,
            "containers": [{ "name": "c", "image": image, "imagePullPolicy": "Never", "args": args }]
        }
    });
    if !node.is_empty() {
        p["spec"]["nodeName"] = json!(node);
    }
    p
}

/// The pod's `status.podIP` once it is Running; panics with its description after 60 s.
pub(crate) async fn wait_running(cluster: &Cluster, ns: &str, pod: &str) -> Ipv4Addr {
    let cp = &cluster.cp;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = cp
            .kubectl(
                &cp.admin,
                &[
                    "get",
                    "pod",
                    pod,
                    "-n",
                    ns,
                    "-o",
                    "jsonpath={.status.phase} {.status.podIP}",
                ],
            )
            .await;
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        if let Some(ip) = text.strip_prefix("Running ")
            && let Ok(ip) = ip.trim().parse()
        {
            return ip;
        }
        if Instant::now() > deadline {
            let describe = cp.kubectl(&cp.admin, &["describe", "pod", pod, "-n", ns]).await;
            let logs = cluster.node_logs();
            panic!(
                "pod {ns}/{pod} not Running after 60 s ({text})\n{}\n{logs}",
                String::from_utf8_lossy(&describe.stdout)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `ip` lies in the CIDR `block`.
pub(crate) fn in_block(ip: Ipv4Addr, block: &str) -> bool {
    block.parse::<ipnet::Ipv4Net>().is_ok_and(|net| net.contains(&ip))
}

/// The `server` pod (agnhost `netexec` on [`SERVER_PORT`], label `app: server`) on
/// `server_node` and the `client` pod (busybox sleeping, label `app: client`) on
/// `client_node`, created with `kubectl apply` and Running with an address of their node's
/// block: `(server, client)` addresses.
pub(crate) async fn server_and_client(
    cluster: &Cluster,
    ns: &str,
    server_node: &Node,
    client_node: &Node,
) -> (Ipv4Addr, Ipv4Addr) {
    let cp = &cluster.cp;
    let created = Instant::now();
    let port = format!("--http-port={SERVER_PORT}");
    let mut server = pod(
        ns,
        "server",
        &server_node.name,
        images::AGNHOST,
        &["netexec", &port],
    );
    server["metadata"]["labels"] = json!({ "app": "server" });
    cp.apply(&server.to_string()).await;
    let mut client = pod(
        ns,
        "client",
        &client_node.name,
        images::BUSYBOX,
        &["sleep", "3600"],
    );
    client["metadata"]["labels"] = json!({ "app": "client" });
    cp.apply(&client.to_string()).await;
    let server = wait_running(cluster, ns, "server").await;
    let client = wait_running(cluster, ns, "client").await;
    eprintln!("both pods Running {:?} after create", created.elapsed());
    assert!(
        in_block(server, &server_node.block),
        "server {server} outside {}",
        server_node.block
    );
    assert!(
        in_block(client, &client_node.block),
        "client {client} outside {}",
        client_node.block
    );
    (server, client)
}

/// The server's `/hostname` (it answers its pod's name, `server`).
pub(crate) fn hostname_url(server: Ipv4Addr) -> String {
    format!("http://{server}:{SERVER_PORT}/hostname")
}

/// What one request from a pod gave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The response body, trimmed.
    Body(String),
    /// The request failed (refused, unreachable, or not answered within its bound).
    Failed,
    /// `kubectl exec` itself failed (its stderr): nothing is known of the request.
    NoExec(String),
}

/// The server's answer to [`hostname_url`].
pub(crate) fn reached() -> Outcome {
    Outcome::Body("server".into())
}

/// One HTTP GET of `url` from inside the busybox pod `ns/pod` by `kubectl exec`, bounded by
/// busybox's `timeout secs` (Debian's busybox-static 1.35 `wget -T` segfaults).
pub(crate) async fn fetch(cp: &ControlPlane, ns: &str, pod: &str, url: &str, secs: u32) -> Outcome {
    let script = format!("timeout {secs} wget -qO- {url} || echo FAILED");
    let out = cp
        .kubectl(&cp.admin, &["exec", "-n", ns, pod, "--", "sh", "-c", &script])
        .await;
    if !out.status.success() {
        return Outcome::NoExec(String::from_utf8_lossy(&out.stderr).trim().to_string());
    }
    let body = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if body.ends_with("FAILED") {
        Outcome::Failed
    } else {
        Outcome::Body(body)
    }
}

/// When [`wait_for`] saw what it waited for.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Seen {
    /// From the call to the end of the request that showed it.
    pub(crate) after: Duration,
    /// Which request that was (1: the first).
    pub(crate) request: usize,
}

impl std::fmt::Display for Seen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?} (request {})", self.after, self.request)
    }
}

/// Fetches `url` from `ns/pod` (each bounded by 2 s, so a refused request takes that long)
/// until the outcome is `want`, at most `within`. Panics with the last outcome and the
/// nodes' logs.
pub(crate) async fn wait_for(
    cluster: &Cluster,
    ns: &str,
    pod: &str,
    url: &str,
    want: &Outcome,
    within: Duration,
) -> Seen {
    let start = Instant::now();
    let mut request = 0;
    loop {
        request += 1;
        let got = fetch(&cluster.cp, ns, pod, url, 2).await;
        if got == *want {
            return Seen {
                after: start.elapsed(),
                request,
            };
        }
        assert!(
            start.elapsed() < within,
            "{ns}/{pod} fetching {url}: {got:?} for {within:?}, never {want:?}\n{}",
            cluster.node_logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `times` more fetches of `url` from `ns/pod` all give `want`: a change that holds, not a
/// blip.
pub(crate) async fn holds(cluster: &Cluster, ns: &str, pod: &str, url: &str, want: &Outcome, times: usize) {
    for i in 0..times {
        let got = fetch(&cluster.cp, ns, pod, url, 2).await;
        assert_eq!(
            got, *want,
            "{ns}/{pod} fetching {url}, confirmation {i}: {got:?}, not {want:?} as just before"
        );
    }
}

/// `{.status.phase} {restartCount} {containerID}` of the pod's first container.
pub(crate) async fn container_state(cp: &ControlPlane, ns: &str, pod: &str) -> String {
    cp.ok(
        &cp.admin,
        &[
            "get",
            "pod",
            pod,
            "-n",
            ns,
            "-o",
            "jsonpath={.status.phase} {.status.containerStatuses[0].restartCount} {.status.containerStatuses[0].containerID}",
        ],
    )
    .await
}

/// The host-side device of the route to `ip` in `node`'s netns (the pod's veth).
pub(crate) fn route_dev(node: &Node, ip: Ipv4Addr) -> String {
    let out = node.ns.ip_ok(&["-o", "route", "get", &ip.to_string()]);
    let mut w = out.split_whitespace().skip_while(|w| *w != "dev");
    w.next();
    w.next().unwrap_or_default().to_string()
}

/// The container (sandbox) ids of the agent's IPAM records on `node` naming pod `ns/name`.
pub(crate) fn ipam_records(node: &Node, pod: &str) -> Vec<String> {
    let text = std::fs::read_to_string(node.scratch.dir.path().join("state/ipam.json")).unwrap_or_default();
    let state: Value = serde_json::from_str(&text).unwrap_or_default();
    state["allocations"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["pod"] == pod)
        .filter_map(|a| Some(a["containerId"].as_str()?.to_string()))
        .collect()
}

/// The host sides of the pods' veths in `node`'s netns (our plugin names them `cph…`).
pub(crate) fn pod_veths(node: &Node) -> Vec<String> {
    let mut v: Vec<String> = node
        .ns
        .ip_ok(&["-o", "link", "show"])
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .map(|n| n.split('@').next().unwrap_or_default().to_string())
        .filter(|n| n.starts_with("cph"))
        .collect();
    v.sort();
    v
}

/// The CNI ADDs `node`'s agents have served so far (their log lines; every run appends).
pub(crate) fn cni_adds(node: &Node) -> usize {
    node.log_text().matches("command=Add ").count()
}

/// What our CNI left on a node for one pod, and what the node has besides.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Wiring {
    /// The sandbox ids of the agent's IPAM records naming the pod.
    pub(crate) sandboxes: Vec<String>,
    /// The host side of its veth (the route to its address).
    pub(crate) veth: String,
    /// Its net-0 `sdn_endpoints` entry: veth ifindex, MAC, flags.
    pub(crate) endpoint: Option<(u32, [u8; 6], u16)>,
    /// Every pod veth of the node.
    pub(crate) veths: Vec<String>,
    /// CNI ADDs the node's agents have served.
    pub(crate) adds: usize,
}

impl Wiring {
    /// Now, for pod `ns/name` at `ip` on `node`.
    pub(crate) fn of(node: &Node, ns: &str, name: &str, ip: Ipv4Addr) -> Self {
        let endpoint = cozyplane_bpf::maps::endpoints::EndpointsMap::from_pin(&node.scratch.pins())
            .ok()
            .and_then(|m| m.get(0, IpAddr::V4(ip)).ok().flatten())
            .map(|e| (e.ifindex, e.mac, e.flags));
        Self {
            sandboxes: ipam_records(node, &format!("{ns}/{name}")),
            veth: route_dev(node, ip),
            endpoint,
            veths: pod_veths(node),
            adds: cni_adds(node),
        }
    }

    /// One IPAM record, a pod veth routed to, an endpoint entry, an ADD logged: the pod is
    /// wired (and a later ADD would show in [`Wiring::adds`]).
    pub(crate) fn assert_wired(&self, what: &str) {
        assert!(
            self.sandboxes.len() == 1
                && self.veth.starts_with("cph")
                && self.veths.contains(&self.veth)
                && self.endpoint.is_some()
                && self.adds > 0,
            "{what} not wired: {self:?}"
        );
    }
}

/// Deletes pod `ns/name` (at `ip` on `node`) with `kubectl delete --wait` and waits until
/// its veth has left the node's netns and its IPAM record the agent's state; then the agent
/// must have logged our plugin's DEL for the sandbox the ADD was for. Returns how long after
/// the delete that was.
pub(crate) async fn delete_torn_down(
    cluster: &Cluster,
    node: &Node,
    ns: &str,
    name: &str,
    ip: Ipv4Addr,
) -> Duration {
    let cp = &cluster.cp;
    let pod = format!("{ns}/{name}");
    let veth = route_dev(node, ip);
    assert!(veth.starts_with("cph"), "{pod}'s veth on {}: {veth:?}", node.name);
    let sandbox = ipam_records(node, &pod);
    assert_eq!(sandbox.len(), 1, "the agent's IPAM record of {pod}: {sandbox:?}");
    let deleted = Instant::now();
    cp.ok(
        &cp.admin,
        &["delete", "pod", "-n", ns, name, "--wait=true", "--timeout=60s"],
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let link = node.ns.ip(&["link", "show", "dev", &veth]);
        if !link.status.success() && ipam_records(node, &pod).is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "after deleting {pod}: veth {veth} still there: {}, IPAM records: {:?}\n{}\n{}",
            link.status.success(),
            ipam_records(node, &pod),
            node.log_text(),
            cluster.node_logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let took = deleted.elapsed();
    // ... through our plugin's DEL from containerd, for the sandbox ADD was for.
    let del = format!("command=Del container={}", sandbox[0]);
    assert!(
        node.log_text().contains(&del),
        "no `{del}` in the agent's log:\n{}",
        node.log_text()
    );
    took
}
