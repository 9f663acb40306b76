//! The upstream `[sig-network] Services` behaviours (issue 26's acceptance), reproduced on the
//! real-node lab one by one: real kube-apiserver, kube-controller-manager and kubelets,
//! containerd, agnhost and busybox pods, and the cozyplane agents with
//! `--kube-proxy-replacement` as the cluster's only Service proxy (the kit of `realnode.rs`).
//!
//! Three tests, each on a cluster of its own (one at a time: the kit's cgroups are named after
//! the process and the node); each runs its steps one after the other, one step per upstream
//! test, named after it. A step that fails is reported (`FAIL <upstream name>: …`) and the
//! next one still runs; the test fails at the end naming every failed step. A step that passes
//! prints `PASS <upstream name>: <what was measured>`. `REALNODE_STEP=<part of a name>` runs
//! only the steps whose upstream name contains it (and starts no cluster for a test without
//! one).
//!
//! Every check is on real answers: agnhost `netexec`'s `/hostname` names the backend pod that
//! served each new connection, made from inside a pod (`kubectl exec`, busybox `wget`, each
//! bounded by 2 s, several in one exec), from a node's own network namespace or from the lab's
//! internet host.
//!
//! * [`session_affinity`]: ClientIP affinity without a timeout through a ClusterIP and a
//!   NodePort (with a Service without affinity over the same pods as the control that
//!   connections do spread), switching it off and on, and with `timeoutSeconds: 3`: after the
//!   timeout passes without traffic, new connections spread again.
//! * [`service_types_ports_and_endpoints`]: a NodePort on every node's address from a pod and
//!   from the nodes; backends added and removed one by one; a multiport Service whose ports
//!   reach different pods; a Service without endpoints refusing at once (timed); a pod reaching
//!   itself through its Service; a Service changed ExternalName → ClusterIP → NodePort →
//!   LoadBalancer → ClusterIP → ExternalName, reachable (and no longer) as each type says.
//! * [`terminating_backends_and_traffic_distribution`]: a terminating backend still serving
//!   when none is ready; a Deployment rolled (every backend replaced, each old one terminating
//!   for seconds with a preStop sleep) under a client making a new connection every 50 ms, none
//!   failing, and an established connection to a terminating backend answering until the pod
//!   goes; `trafficDistribution: PreferSameNode` keeping a client on its node's backend and
//!   falling back to the other node's when that one goes, no connection failing.

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

use std::collections::{BTreeMap, BTreeSet};
use std::panic::AssertUnwindSafe;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use cozyplane_conformance::realkube::ControlPlane;
use cozyplane_lab::{Lab, Node};
use futures::FutureExt as _;
use pods::SERVER_PORT;
use serde_json::{Value, json};

// The upstream tests reproduced (v1.36 `e2e.test`), as the suite names them.
const AFFINITY_CLUSTER_IP: &str = "[sig-network] Services should have session affinity work for service with type clusterIP [LinuxOnly] [Conformance]";
const AFFINITY_NODE_PORT: &str =
    "[sig-network] Services should have session affinity work for NodePort service [LinuxOnly] [Conformance]";
const AFFINITY_SWITCH: &str = "[sig-network] Services should be able to switch session affinity for service with type clusterIP [LinuxOnly] [Conformance]";
const AFFINITY_TIMEOUT: &str = "[sig-network] Services should have session affinity timeout work for service with type clusterIP [LinuxOnly]";
const NODE_PORT: &str =
    "[sig-network] Services should be able to create a functioning NodePort service [Conformance]";
const BASIC_ENDPOINT: &str = "[sig-network] Services should serve a basic endpoint from pods [Conformance]";
const MULTIPORT: &str = "[sig-network] Services should serve multiport endpoints from pods [Conformance]";
const NO_ENDPOINTS: &str = "[sig-network] Services should be rejected when no endpoints exist";
const HAIRPIN: &str =
    "[sig-network] Services should allow pods to hairpin back to themselves through services";
const TYPE_CHANGES: &str = "[sig-network] Services should be able to change the type from ExternalName to ClusterIP [Conformance] + from ExternalName to NodePort [Conformance] + from NodePort to ExternalName [Conformance] + from ClusterIP to ExternalName [Conformance] (one chain, through LoadBalancer)";
const TERMINATING_FALLBACK: &str = "[sig-network] Services should fallback to terminating endpoints when there are no ready endpoints with internalTrafficPolicy=Cluster";
const ROLLING: &str = "[sig-network] LoadBalancers [Feature:LoadBalancer] should not have connectivity disruption during rolling update with externalTrafficPolicy=Cluster [Slow] (through a ClusterIP, a Deployment rolled; with an established connection to a terminating backend)";
const PREFER_SAME_NODE: &str = "[sig-network] Traffic Distribution should route traffic to an endpoint on the same node when using PreferSameNode and fall back when the endpoint becomes unavailable";

/// The kit's cgroups are named `cplab-<pid>-<node>` and the kubelets share the machine's
/// sysctls: one cluster at a time in this process.
static ONE_CLUSTER: Mutex<()> = Mutex::new(());

fn one_cluster() -> MutexGuard<'static, ()> {
    ONE_CLUSTER.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Whether any of `names` is selected by `REALNODE_STEP` (all are without it).
fn wanted(names: &[&str]) -> bool {
    match std::env::var("REALNODE_STEP") {
        Ok(f) if !f.is_empty() => names.iter().any(|n| n.contains(f.as_str())),
        _ => true,
    }
}

/// The steps of one test: each runs whatever the previous ones did, a failure is recorded
/// and reported at the end.
#[derive(Default)]
struct Steps {
    failed: Vec<String>,
}

impl Steps {
    /// Runs `body` as the step reproducing upstream test `name`: `PASS <name>: <figure>` with
    /// what it returns, or `FAIL <name>: <first line of the panic>`.
    async fn run(&mut self, name: &str, body: impl Future<Output = String>) {
        if !wanted(&[name]) {
            eprintln!("SKIP {name} (REALNODE_STEP)");
            return;
        }
        eprintln!("---- {name}");
        let t = Instant::now();
        match AssertUnwindSafe(body).catch_unwind().await {
            Ok(figure) => eprintln!("PASS {name}: {figure} [{:.1?}]", t.elapsed()),
            Err(p) => {
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_string()))
                    .unwrap_or_default();
                let first: String = msg.lines().next().unwrap_or_default().chars().take(600).collect();
                eprintln!("FAIL {name}: {first} [{:.1?}]", t.elapsed());
                self.failed.push(format!("{name}: {first}"));
            }
        }
    }

    fn finish(self, what: &str, t0: Instant) {
        eprintln!("{what}: {:?} in all", t0.elapsed());
        assert!(
            self.failed.is_empty(),
            "{} step(s) failed:\n{}",
            self.failed.len(),
            self.failed.join("\n")
        );
    }
}

/// An agnhost `netexec` pod `name` on `node` (or left to the scheduler: `""`), label
/// `app: <app>`, its port 8080 named `http`, Ready once `/hostname` answers.
fn server(ns: &str, name: &str, node: &str, app: &str) -> Value {
    let port = format!("--http-port={SERVER_PORT}");
    let mut p = pods::pod(ns, name, node, images::AGNHOST, &["netexec", &port]);
    p["metadata"]["labels"] = json!({ "app": app });
    p["spec"]["containers"][0]["ports"] = json!([{ "name": "http", "containerPort": SERVER_PORT }]);
    p["spec"]["containers"][0]["readinessProbe"] = json!({
        "httpGet": { "path": "/hostname", "port": "http" },
        "periodSeconds": 1
    });
    p
}

/// Makes every container of pod (or pod template spec) `spec` stay terminating: a preStop
/// `sleep <secs>`, and `grace` seconds before the kubelet kills what is left.
fn slow_to_stop(spec: &mut Value, secs: u32, grace: u32) {
    spec["terminationGracePeriodSeconds"] = json!(grace);
    for c in spec["containers"].as_array_mut().into_iter().flatten() {
        c["lifecycle"] = json!({ "preStop": { "exec": { "command": ["sleep", secs.to_string()] } } });
    }
}

/// A busybox pod sleeping on `node`: the client.
fn busybox(ns: &str, name: &str, node: &Node) -> Value {
    pods::pod(ns, name, &node.name, images::BUSYBOX, &["sleep", "3600"])
}

/// Applies `manifests` (pods), then waits until every one is Ready.
async fn start_pods(cluster: &kit::Cluster, ns: &str, manifests: &[Value]) {
    let cp = &cluster.cp;
    for m in manifests {
        cp.apply(&m.to_string()).await;
    }
    for m in manifests {
        let name = m["metadata"]["name"].as_str().expect("pod name");
        wait_ready(cluster, ns, name).await;
    }
}

/// Waits until pod `ns/name` is Ready (60 s).
async fn wait_ready(cluster: &kit::Cluster, ns: &str, name: &str) {
    let cp = &cluster.cp;
    let out = cp
        .kubectl(
            &cp.admin,
            &[
                "wait",
                "--for=condition=Ready",
                &format!("pod/{name}"),
                "-n",
                ns,
                "--timeout=60s",
            ],
        )
        .await;
    if !out.status.success() {
        let describe = cp.kubectl(&cp.admin, &["describe", "pod", name, "-n", ns]).await;
        panic!(
            "pod {ns}/{name} not Ready after 60 s: {}\n{}\n{}",
            String::from_utf8_lossy(&out.stderr).trim(),
            String::from_utf8_lossy(&describe.stdout),
            cluster.node_logs()
        );
    }
}

/// A Service `name` selecting `app: <app>` with `ports`.
fn service(ns: &str, name: &str, app: &str, ports: &Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": { "name": name, "namespace": ns },
        "spec": { "selector": { "app": app }, "ports": ports }
    })
}

/// Port 80 to the pods' port named `http`.
fn web_ports() -> Value {
    json!([{ "name": "web", "port": 80, "protocol": "TCP", "targetPort": "http" }])
}

/// A field of `what` (e.g. `service/web`) in `ns` by its JSONPath, e.g. `{.spec.clusterIP}`.
async fn field(cp: &ControlPlane, ns: &str, what: &str, path: &str) -> String {
    let path = format!("jsonpath={path}");
    cp.ok(&cp.admin, &["get", what, "-n", ns, "-o", &path])
        .await
        .trim()
        .to_string()
}

/// A field of Service `ns/svc`'s EndpointSlices by its JSONPath (over the list).
async fn slices(cp: &ControlPlane, ns: &str, svc: &str, path: &str) -> String {
    let label = format!("kubernetes.io/service-name={svc}");
    let path = format!("jsonpath={path}");
    cp.ok(
        &cp.admin,
        &["get", "endpointslices", "-n", ns, "-l", &label, "-o", &path],
    )
    .await
    .trim()
    .to_string()
}

/// A field of the pods labelled `app: <app>` in `ns` by its JSONPath (over the list).
async fn labelled(cp: &ControlPlane, ns: &str, app: &str, path: &str) -> String {
    let label = format!("app={app}");
    let path = format!("jsonpath={path}");
    cp.ok(&cp.admin, &["get", "pods", "-n", ns, "-l", &label, "-o", &path])
        .await
        .trim()
        .to_string()
}

/// What one request gave: the body (the backend's name for `/hostname`), `refused`, `no
/// answer` (nothing within 2 s), or wget's error.
fn outcome(ok: bool, body: &str, err: &str) -> String {
    if ok {
        return body.trim().to_string();
    }
    if err.contains("refused") {
        "refused".into()
    } else if err.trim().is_empty() {
        "no answer".into()
    } else {
        err.trim().to_string()
    }
}

/// `n` new connections one after the other from inside pod `ns/pod` (busybox or agnhost):
/// a GET of `url` by busybox `wget`, each bounded by 2 s, all in one `kubectl exec`; the
/// outcome of each ([`outcome`]). Stops at the first request that got no answer (each costs
/// its 2 s).
async fn batch(cp: &ControlPlane, ns: &str, pod: &str, url: &str, n: usize) -> Vec<String> {
    let script = format!(
        "for i in $(seq {n}); do if r=$(timeout 2 wget -qO- {url} 2>&1); then echo \"OK $r\"; \
         else echo \"FAILED $r\"; [ -z \"$r\" ] && break; fi; done; true"
    );
    let mut tries = 0;
    loop {
        tries += 1;
        let out = cp
            .kubectl(&cp.admin, &["exec", "-n", ns, pod, "--", "sh", "-c", &script])
            .await;
        if out.status.success() {
            return String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(|l| match l.strip_prefix("OK ") {
                    Some(body) => outcome(true, body, ""),
                    None => outcome(false, "", l.strip_prefix("FAILED").unwrap_or(l)),
                })
                .collect();
        }
        assert!(
            tries < 3,
            "kubectl exec into {ns}/{pod}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// `n` new connections to `url` from `node`'s own network namespace (the host network).
fn from_node(node: &Node, url: &str, n: usize) -> Vec<String> {
    (0..n)
        .map(|_| {
            let out = node.ns.exec(&["timeout", "3", "busybox", "wget", "-qO-", url]);
            outcome(
                out.status.success(),
                &String::from_utf8_lossy(&out.stdout),
                &String::from_utf8_lossy(&out.stderr),
            )
        })
        .collect()
}

/// How many times each outcome occurred.
fn tally(got: &[String]) -> BTreeMap<String, usize> {
    let mut t = BTreeMap::new();
    for g in got {
        *t.entry(g.clone()).or_insert(0) += 1;
    }
    t
}

/// `web-a ×9, web-b ×7`.
fn show(got: &[String]) -> String {
    tally(got)
        .iter()
        .map(|(k, v)| format!("{k} ×{v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The distinct outcomes of `got`.
fn distinct(got: &[String]) -> BTreeSet<String> {
    got.iter().cloned().collect()
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| (*s).to_string()).collect()
}

/// Batches of `n` requests from `ns/pod` to `url` until `ok` holds for one (30 s at most,
/// then a panic saying `what`); how long that took and the batch.
async fn until(
    cluster: &kit::Cluster,
    ns: &str,
    pod: &str,
    url: &str,
    n: usize,
    what: &str,
    ok: impl Fn(&[String]) -> bool,
) -> (Duration, Vec<String>) {
    let start = Instant::now();
    loop {
        let got = batch(&cluster.cp, ns, pod, url, n).await;
        if ok(&got) {
            return (start.elapsed(), got);
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{what}: {url} from {ns}/{pod} never so in 30 s; the last {n} requests: {}",
            show(&got)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Every request answered by exactly the backends `names`.
fn exactly(names: &[&str]) -> impl Fn(&[String]) -> bool {
    let want = set(names);
    move |got| distinct(got) == want
}

/// Lines of file `path` in pod `ns/pod` (empty if it is not there yet).
async fn pod_file(cp: &ControlPlane, ns: &str, pod: &str, path: &str) -> Vec<String> {
    let out = cp
        .kubectl(
            &cp.admin,
            &[
                "exec",
                "-n",
                ns,
                pod,
                "--",
                "sh",
                "-c",
                &format!("cat {path} 2>/dev/null; true"),
            ],
        )
        .await;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// Starts a loop in pod `ns/pod` (busybox) making a new connection to `url` every 50 ms
/// (busybox `wget`, bounded by 2 s) and appending each outcome to `log` until `log.stop`
/// exists; returns when the loop ends (the exec's future).
async fn connection_loop(cp: &ControlPlane, ns: &str, pod: &str, url: &str, log: &str) {
    let script = format!(
        "rm -f {log} {log}.stop; while [ ! -e {log}.stop ]; do \
         if r=$(timeout 2 wget -qO- {url} 2>&1); then echo \"OK $r\"; else echo \"FAILED $r\"; fi >> {log}; \
         sleep 0.05; done"
    );
    let out = cp
        .kubectl(&cp.admin, &["exec", "-n", ns, pod, "--", "sh", "-c", &script])
        .await;
    assert!(
        out.status.success(),
        "the connection loop in {ns}/{pod}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The outcomes [`connection_loop`] logged so far.
async fn loop_log(cp: &ControlPlane, ns: &str, pod: &str, log: &str) -> Vec<String> {
    pod_file(cp, ns, pod, log)
        .await
        .iter()
        .map(|l| match l.strip_prefix("OK ") {
            Some(body) => outcome(true, body, ""),
            None => outcome(false, "", l.strip_prefix("FAILED").unwrap_or(l)),
        })
        .collect()
}

/// Waits until [`connection_loop`]'s `log` has at least `n` lines (30 s).
async fn loop_has(cp: &ControlPlane, ns: &str, pod: &str, log: &str, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = loop_log(cp, ns, pod, log).await;
        if got.len() >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the connection loop in {ns}/{pod} logged {} lines in 30 s",
            got.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `{.metadata.name} {.metadata.deletionTimestamp}` of pod `ns/name`; empty once it is gone.
async fn pod_state(cp: &ControlPlane, ns: &str, name: &str) -> String {
    cp.ok(
        &cp.admin,
        &[
            "get",
            "pod",
            name,
            "-n",
            ns,
            "--ignore-not-found",
            "-o",
            "jsonpath={.metadata.name} {.metadata.deletionTimestamp}",
        ],
    )
    .await
    .trim()
    .to_string()
}

/// Waits until pod `ns/name` is gone from the API (`within`); how long that took.
async fn wait_gone(cp: &ControlPlane, ns: &str, name: &str, within: Duration) -> Duration {
    let start = Instant::now();
    while !pod_state(cp, ns, name).await.is_empty() {
        assert!(
            start.elapsed() < within,
            "pod {ns}/{name} still there after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    start.elapsed()
}

fn epoch_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

/// What the steps of one test share: the cluster, the lab and the test's namespace.
struct Ctx<'a> {
    cluster: &'a kit::Cluster,
    lab: &'a Lab,
    ns: &'a str,
}

impl Ctx<'_> {
    fn cp(&self) -> &ControlPlane {
        &self.cluster.cp
    }

    fn n1(&self) -> &Node {
        &self.lab.nodes[0]
    }

    fn n2(&self) -> &Node {
        &self.lab.nodes[1]
    }

    /// The ClusterIP of Service `name`.
    async fn vip(&self, name: &str) -> String {
        field(
            self.cp(),
            self.ns,
            &format!("service/{name}"),
            "{.spec.clusterIP}",
        )
        .await
    }

    /// [`until`] from pod `pod` of the namespace.
    async fn until(
        &self,
        pod: &str,
        url: &str,
        n: usize,
        what: &str,
        ok: impl Fn(&[String]) -> bool,
    ) -> (Duration, Vec<String>) {
        until(self.cluster, self.ns, pod, url, n, what, ok).await
    }

    /// [`batch`] from pod `pod` of the namespace.
    async fn batch(&self, pod: &str, url: &str, n: usize) -> Vec<String> {
        batch(self.cp(), self.ns, pod, url, n).await
    }

    /// `kubectl <args>` as the admin, which must succeed.
    async fn kubectl(&self, args: &[&str]) -> String {
        self.cp().ok(&self.cp().admin, args).await
    }
}

// ---- session affinity ----

/// The backends of the affinity steps.
const WEB3: [&str; 3] = ["web-0", "web-1", "web-2"];

/// Every outcome is one of [`WEB3`].
fn web3_only(got: &[String]) -> bool {
    got.iter().all(|o| WEB3.contains(&o.as_str()))
}

/// 20 outcomes, one backend of [`WEB3`].
fn one_of_web3(got: &[String]) -> bool {
    got.len() == 20 && web3_only(got) && distinct(got).len() == 1
}

/// Two backends or more, every request answered.
fn spread(got: &[String]) -> bool {
    web3_only(got) && distinct(got).len() >= 2
}

/// The affinity test's Services: `plain` (none), `sticky` (NodePort, ClientIP without a
/// timeout), `timed` (ClientIP, `timeoutSeconds: 3`).
struct AffinityServices {
    plain_url: String,
    sticky_url: String,
    node_port: String,
    timed_vip: String,
    timed_url: String,
}

#[test]
fn session_affinity() {
    const STEPS: [&str; 4] = [
        AFFINITY_CLUSTER_IP,
        AFFINITY_NODE_PORT,
        AFFINITY_SWITCH,
        AFFINITY_TIMEOUT,
    ];
    if !wanted(&STEPS) {
        return;
    }
    let _one = one_cluster();
    Lab::run(2, async |lab| {
        let t0 = Instant::now();
        let cluster = kit::Cluster::start(lab).await;
        let cp = &cluster.cp;
        let ns = pods::namespace(cp, "affinity").await;
        let c = Ctx {
            cluster: &cluster,
            lab,
            ns: &ns,
        };
        let ns = c.ns;
        // Three backends over both nodes, as upstream's three replicas.
        start_pods(
            &cluster,
            ns,
            &[
                server(ns, "web-0", &c.n1().name, "web"),
                server(ns, "web-1", &c.n2().name, "web"),
                server(ns, "web-2", &c.n1().name, "web"),
                busybox(ns, "client", c.n1()),
            ],
        )
        .await;
        cp.apply(&service(ns, "plain", "web", &web_ports()).to_string())
            .await;
        let mut sticky = service(ns, "sticky", "web", &web_ports());
        sticky["spec"]["type"] = json!("NodePort");
        sticky["spec"]["sessionAffinity"] = json!("ClientIP");
        cp.apply(&sticky.to_string()).await;
        let mut timed = service(ns, "timed", "web", &web_ports());
        timed["spec"]["sessionAffinity"] = json!("ClientIP");
        timed["spec"]["sessionAffinityConfig"] = json!({ "clientIP": { "timeoutSeconds": 3 } });
        cp.apply(&timed.to_string()).await;
        let timed_vip = c.vip("timed").await;
        let s = AffinityServices {
            plain_url: format!("http://{}/hostname", c.vip("plain").await),
            sticky_url: format!("http://{}/hostname", c.vip("sticky").await),
            node_port: field(cp, ns, "service/sticky", "{.spec.ports[0].nodePort}").await,
            timed_url: format!("http://{timed_vip}/hostname"),
            timed_vip,
        };
        let mut steps = Steps::default();
        steps.run(AFFINITY_CLUSTER_IP, affinity_cluster_ip(&c, &s)).await;
        steps.run(AFFINITY_NODE_PORT, affinity_node_port(&c, &s)).await;
        steps.run(AFFINITY_SWITCH, affinity_switch(&c, &s)).await;
        steps.run(AFFINITY_TIMEOUT, affinity_timeout(&c, &s)).await;
        drop(cluster);
        steps.finish("session affinity", t0);
    });
}

async fn affinity_cluster_ip(c: &Ctx<'_>, s: &AffinityServices) -> String {
    // The control: without affinity, the same client's connections spread.
    let what = "without affinity, 20 connections reach two backends or more";
    let (_, control) = c.until("client", &s.plain_url, 20, what, spread).await;
    let what = "the affinity Service answers";
    c.until("client", &s.sticky_url, 1, what, web3_only).await;
    let got = c.batch("client", &s.sticky_url, 20).await;
    assert!(
        one_of_web3(&got),
        "sessionAffinity ClientIP: 20 connections from one pod to {} reached {}",
        s.sticky_url,
        show(&got)
    );
    let host = from_node(c.n1(), &s.sticky_url, 10);
    assert!(
        web3_only(&host) && distinct(&host).len() == 1,
        "sessionAffinity ClientIP: 10 connections from n1's own network namespace reached {}",
        show(&host)
    );
    format!(
        "20 of 20 connections from the pod to the ClusterIP reached {}, 10 of 10 from n1's netns \
         reached {}; without affinity the same client's 20 reached {}",
        got[0],
        host[0],
        show(&control)
    )
}

async fn affinity_node_port(c: &Ctx<'_>, s: &AffinityServices) -> String {
    let mut figure = Vec::new();
    for target in [c.n1(), c.n2()] {
        let url = format!("http://{}:{}/hostname", target.ip, s.node_port);
        c.until("client", &url, 1, "the NodePort answers", web3_only)
            .await;
        let got = c.batch("client", &url, 20).await;
        assert!(
            one_of_web3(&got),
            "sessionAffinity ClientIP: 20 connections from one pod to {url} reached {}",
            show(&got)
        );
        figure.push(format!("{}:{} 20 of 20 to {}", target.name, s.node_port, got[0]));
    }
    figure.join(", ")
}

async fn affinity_switch(c: &Ctx<'_>, s: &AffinityServices) -> String {
    let off = json!({"spec": {"sessionAffinity": "None", "sessionAffinityConfig": null}});
    svc::patch(c.cp(), c.ns, "sticky", false, &off).await;
    let what = "affinity switched off: 20 connections reach two backends or more";
    let (off, got) = c.until("client", &s.sticky_url, 20, what, spread).await;
    svc::patch(
        c.cp(),
        c.ns,
        "sticky",
        false,
        &json!({"spec": {"sessionAffinity": "ClientIP"}}),
    )
    .await;
    let what = "affinity switched on again: 20 connections reach one backend";
    let (on, again) = c.until("client", &s.sticky_url, 20, what, one_of_web3).await;
    let confirm = c.batch("client", &s.sticky_url, 20).await;
    assert_eq!(
        distinct(&confirm),
        distinct(&again),
        "affinity on again: 20 more connections reached {} after {}",
        show(&confirm),
        show(&again)
    );
    format!(
        "off: spread ({}) {off:.1?} after the patch; on again: 40 of 40 to {} {on:.1?} after the patch",
        show(&got),
        again[0]
    )
}

async fn affinity_timeout(c: &Ctx<'_>, s: &AffinityServices) -> String {
    let what = "the Service with the affinity timeout answers";
    c.until("client", &s.timed_url, 1, what, web3_only).await;
    // The timeout reached the datapath: n1's frontend of the ClusterIP says 3 s.
    let front = cozyplane_bpf::maps::lb_svc::Frontend {
        net: 0,
        vip: s.timed_vip.parse().expect("ClusterIP"),
        proto: 6,
        port: 80,
    };
    let programmed = cozyplane_bpf::maps::lb_svc::LbSvcMap::from_pin(&c.n1().scratch.pins())
        .and_then(|m| m.get(front))
        .ok()
        .flatten()
        .map(|v| v.affinity);
    assert_eq!(
        programmed,
        Some(3),
        "n1's datapath frontend {}:80: affinity {programmed:?}, not the Service's 3 s",
        s.timed_vip
    );
    // Within the timeout (each connection renews it): one backend.
    let got = c.batch("client", &s.timed_url, 15).await;
    assert!(
        got.len() == 15 && web3_only(&got) && distinct(&got).len() == 1,
        "timeoutSeconds 3: 15 connections in a row reached {}",
        show(&got)
    );
    // After it (4 s without a connection: upstream sleeps the timeout + 1 s), the backend is
    // chosen anew: upstream passes once it saw two backends, trying up to 10 times. Here up to
    // 8 times (three backends: a fair choice repeats itself 8 times with probability (1/3)^8).
    let mut seen = vec![got[0].clone()];
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_secs(4)).await;
        let one = c.batch("client", &s.timed_url, 1).await;
        assert!(
            web3_only(&one),
            "a connection after the affinity timeout failed: {one:?}"
        );
        seen.push(one[0].clone());
        if distinct(&seen).len() > 1 {
            break;
        }
    }
    assert!(
        distinct(&seen).len() > 1,
        "sessionAffinity ClientIP timeoutSeconds 3 (the datapath's frontend says 3 s): after {} idle \
         periods of 4 s, every new connection still reached {}: {seen:?}",
        seen.len() - 1,
        seen[0]
    );
    format!(
        "15 of 15 to {} within the timeout; after idle periods of 4 s the connections reached {seen:?}",
        got[0]
    )
}

// ---- Service types, ports and endpoints ----

/// The backends of the types test.
const WEB2: [&str; 2] = ["web-a", "web-b"];

/// Every outcome is one of [`WEB2`].
fn web2_only(got: &[String]) -> bool {
    got.iter().all(|o| WEB2.contains(&o.as_str()))
}

/// No outcome is one of [`WEB2`] (refused, or no answer).
fn no_web2(got: &[String]) -> bool {
    !got.iter().any(|o| WEB2.contains(&o.as_str()))
}

#[test]
fn service_types_ports_and_endpoints() {
    const STEPS: [&str; 6] = [
        NODE_PORT,
        BASIC_ENDPOINT,
        MULTIPORT,
        NO_ENDPOINTS,
        HAIRPIN,
        TYPE_CHANGES,
    ];
    if !wanted(&STEPS) {
        return;
    }
    let _one = one_cluster();
    Lab::run(2, async |lab| {
        let t0 = Instant::now();
        let cluster = kit::Cluster::start(lab).await;
        let ns = pods::namespace(&cluster.cp, "types").await;
        let c = Ctx {
            cluster: &cluster,
            lab,
            ns: &ns,
        };
        let ns = c.ns;
        // The client is an agnhost pod: busybox's wget, and curl and `agnhost connect` as
        // upstream's checks use them.
        start_pods(
            &cluster,
            ns,
            &[
                server(ns, "web-a", &c.n1().name, "web"),
                server(ns, "web-b", &c.n2().name, "web"),
                pods::pod(ns, "client", &c.n1().name, images::AGNHOST, &["pause"]),
            ],
        )
        .await;
        let mut steps = Steps::default();
        steps.run(NODE_PORT, node_port(&c)).await;
        steps.run(BASIC_ENDPOINT, basic_endpoint(&c)).await;
        steps.run(MULTIPORT, multiport(&c)).await;
        steps.run(NO_ENDPOINTS, no_endpoints(&c)).await;
        steps.run(HAIRPIN, hairpin(&c)).await;
        steps.run(TYPE_CHANGES, type_changes(&c)).await;
        drop(cluster);
        steps.finish("Service types, ports and endpoints", t0);
    });
}

async fn node_port(c: &Ctx<'_>) -> String {
    let mut np = service(c.ns, "nodeport-test", "web", &web_ports());
    np["spec"]["type"] = json!("NodePort");
    c.cp().apply(&np.to_string()).await;
    let port = field(c.cp(), c.ns, "service/nodeport-test", "{.spec.ports[0].nodePort}").await;
    let mut figure = Vec::new();
    for target in [c.n1(), c.n2()] {
        let url = format!("http://{}:{port}/hostname", target.ip);
        let what = "16 connections to the NodePort reach both backends";
        let (took, got) = c.until("client", &url, 16, what, exactly(&WEB2)).await;
        figure.push(format!(
            "{}:{port} from the pod: {} ({took:.1?})",
            target.name,
            show(&got)
        ));
        for from in [c.n1(), c.n2()] {
            let got = from_node(from, &url, 6);
            assert!(
                web2_only(&got),
                "{url} from {}'s own network namespace: {}",
                from.name,
                show(&got)
            );
            figure.push(format!("from {}: {}", from.name, show(&got)));
        }
    }
    figure.join("; ")
}

async fn basic_endpoint(c: &Ctx<'_>) -> String {
    let (cp, ns) = (c.cp(), c.ns);
    cp.apply(&service(ns, "endpoint-test2", "basic", &web_ports()).to_string())
        .await;
    let url = format!("http://{}/hostname", c.vip("endpoint-test2").await);
    let (none, _) = c
        .until("client", &url, 2, "no pods: refused", exactly(&["refused"]))
        .await;
    let t = Instant::now();
    start_pods(c.cluster, ns, &[server(ns, "basic-1", &c.n1().name, "basic")]).await;
    let what = "basic-1 added: every connection reaches it";
    c.until("client", &url, 16, what, exactly(&["basic-1"])).await;
    let one = t.elapsed();
    let t = Instant::now();
    start_pods(c.cluster, ns, &[server(ns, "basic-2", &c.n2().name, "basic")]).await;
    let what = "basic-2 added: connections reach both";
    let (_, two) = c
        .until("client", &url, 16, what, exactly(&["basic-1", "basic-2"]))
        .await;
    let two_t = t.elapsed();
    let t = Instant::now();
    c.kubectl(&["delete", "pod", "basic-1", "-n", ns, "--wait=false"])
        .await;
    let what = "basic-1 deleted: every connection reaches basic-2";
    c.until("client", &url, 16, what, exactly(&["basic-2"])).await;
    let minus_one = t.elapsed();
    let t = Instant::now();
    c.kubectl(&["delete", "pod", "basic-2", "-n", ns, "--wait=false"])
        .await;
    c.until(
        "client",
        &url,
        4,
        "basic-2 deleted: refused",
        exactly(&["refused"]),
    )
    .await;
    let minus_two = t.elapsed();
    format!(
        "no pods: refused ({none:.1?}); +basic-1: 16 of 16 to basic-1 {one:.1?} after its create; \
         +basic-2: {} {two_t:.1?} after its create; −basic-1: 16 of 16 to basic-2 {minus_one:.1?} \
         after the delete; −basic-2: refused {minus_two:.1?} after the delete",
        show(&two)
    )
}

async fn multiport(c: &Ctx<'_>) -> String {
    let (cp, ns) = (c.cp(), c.ns);
    let mut pods = Vec::new();
    for (name, node, port, port_name) in [("pod1", c.n1(), 100, "svc1"), ("pod2", c.n2(), 101, "svc2")] {
        let arg = format!("--http-port={port}");
        let mut p = pods::pod(ns, name, &node.name, images::AGNHOST, &["netexec", &arg]);
        p["metadata"]["labels"] = json!({ "app": "multi" });
        p["spec"]["containers"][0]["ports"] = json!([{ "name": port_name, "containerPort": port }]);
        p["spec"]["containers"][0]["readinessProbe"] =
            json!({ "tcpSocket": { "port": port_name }, "periodSeconds": 1 });
        pods.push(p);
    }
    start_pods(c.cluster, ns, &pods).await;
    let ports = json!([
        { "name": "portname1", "port": 80, "protocol": "TCP", "targetPort": "svc1" },
        { "name": "portname2", "port": 81, "protocol": "TCP", "targetPort": "svc2" }
    ]);
    cp.apply(&service(ns, "multi-endpoint-test", "multi", &ports).to_string())
        .await;
    let vip = c.vip("multi-endpoint-test").await;
    let mut figure = Vec::new();
    for (port, pod) in [(80, "pod1"), (81, "pod2")] {
        let url = format!("http://{vip}:{port}/hostname");
        let what = "each Service port reaches its own pod only";
        let (took, got) = c.until("client", &url, 16, what, exactly(&[pod])).await;
        figure.push(format!("port {port}: {} ({took:.1?})", show(&got)));
    }
    figure.join(", ")
}

async fn no_endpoints(c: &Ctx<'_>) -> String {
    let (cp, ns) = (c.cp(), c.ns);
    cp.apply(&service(ns, "no-pods", "nobody", &web_ports()).to_string())
        .await;
    let vip = c.vip("no-pods").await;
    // Until the frontend is there (before it, 10.96.x is routed nowhere).
    let url = format!("http://{vip}/");
    c.until("client", &url, 1, "no endpoints: refused", exactly(&["refused"]))
        .await;
    // Upstream's check: `agnhost connect` says REFUSED (not TIMEOUT).
    let script = format!("/agnhost connect --timeout=3s {vip}:80 2>&1; true");
    let connect = c
        .kubectl(&["exec", "-n", ns, "client", "--", "sh", "-c", &script])
        .await;
    assert!(
        connect.contains("REFUSED"),
        "agnhost connect {vip}:80: {connect:?}"
    );
    // Timed inside the pod: curl's total time of 5 connections (exit code 7: no connection).
    let script = format!(
        "for i in 1 2 3 4 5; do curl -sS -o /dev/null --connect-timeout 5 \
         -w '%{{time_total}} %{{exitcode}}\\n' http://{vip}/ 2>&1; done; true"
    );
    let out = c
        .kubectl(&["exec", "-n", ns, "client", "--", "sh", "-c", &script])
        .await;
    let mut pod_times = Vec::new();
    for l in out.lines().filter(|l| !l.starts_with("curl:")) {
        let mut w = l.split_whitespace();
        let secs: f64 = w.next().and_then(|s| s.parse().ok()).unwrap_or(f64::MAX);
        assert_eq!(w.next(), Some("7"), "curl to {vip}:80 (no endpoints): {out}");
        pod_times.push(secs);
    }
    assert_eq!(pod_times.len(), 5, "curl to {vip}:80: {out}");
    let pod_max = pod_times.iter().copied().fold(0.0, f64::max);
    assert!(pod_max < 0.5, "a refusal took {pod_max} s in the pod: {out}");
    // And from n1's own network namespace (the socket-level path), timed here.
    let addr = std::net::SocketAddr::from((vip.parse::<std::net::Ipv4Addr>().expect("ClusterIP"), 80));
    let node_times: Vec<(Duration, Option<std::io::ErrorKind>)> = cozyplane_lab::run_in(&c.n1().ns, || {
        (0..5)
            .map(|_| {
                let t = Instant::now();
                let r = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(3));
                (t.elapsed(), r.err().map(|e| e.kind()))
            })
            .collect()
    });
    for (took, err) in &node_times {
        assert_eq!(
            *err,
            Some(std::io::ErrorKind::ConnectionRefused),
            "connect to {addr} from n1: {node_times:?}"
        );
        assert!(
            *took < Duration::from_millis(500),
            "connect to {addr} from n1 took {took:?}"
        );
    }
    let node_max = node_times.iter().map(|(t, _)| *t).max().unwrap_or_default();
    format!(
        "agnhost connect: REFUSED; curl in the pod refused 5 of 5, the slowest in {:.2} ms; connect() \
         in n1's netns refused 5 of 5, the slowest in {node_max:?}",
        pod_max * 1000.0
    )
}

async fn hairpin(c: &Ctx<'_>) -> String {
    let (cp, ns) = (c.cp(), c.ns);
    start_pods(c.cluster, ns, &[server(ns, "hairpin", &c.n2().name, "hairpin")]).await;
    let ports = json!([{ "name": "http", "port": 8080, "protocol": "TCP", "targetPort": 8080 }]);
    cp.apply(&service(ns, "hairpin-test", "hairpin", &ports).to_string())
        .await;
    let vip = c.vip("hairpin-test").await;
    let mut figure = Vec::new();
    // By the ClusterIP, and by the Service's name as upstream (the cluster DNS).
    for url in [
        format!("http://{vip}:8080/hostname"),
        "http://hairpin-test:8080/hostname".to_string(),
    ] {
        let what = "the pod reaches itself through its Service";
        let (took, got) = c.until("hairpin", &url, 8, what, exactly(&["hairpin"])).await;
        figure.push(format!("{url}: {} ({took:.1?})", show(&got)));
    }
    let ip = field(cp, ns, "pod/hairpin", "{.status.podIP}").await;
    let seen = c
        .batch("hairpin", &format!("http://{vip}:8080/clientip"), 1)
        .await;
    figure.push(format!(
        "the server saw the connection from {} (the pod is {ip})",
        seen[0]
    ));
    figure.join("; ")
}

async fn type_changes(c: &Ctx<'_>) -> String {
    let (cp, ns, lab) = (c.cp(), c.ns, c.lab);
    let (n1, n2) = (c.n1(), c.n2());
    let outside = lab.outside(1500);
    let name = "mutability-test";
    let svc = "service/mutability-test";
    let mut s = service(ns, name, "web", &web_ports());
    s["spec"]["type"] = json!("ExternalName");
    s["spec"]["externalName"] = json!("web.example.com");
    cp.apply(&s.to_string()).await;
    let mut figure = Vec::new();

    // ExternalName: no ClusterIP, nothing to reach.
    let ip = field(cp, ns, svc, "{.spec.clusterIP}").await;
    assert_eq!(ip, "", "an ExternalName Service has no ClusterIP");

    // → ClusterIP.
    svc::patch(
        cp,
        ns,
        name,
        false,
        &json!({"spec": {"type": "ClusterIP", "externalName": null}}),
    )
    .await;
    let vip = field(cp, ns, svc, "{.spec.clusterIP}").await;
    assert!(!vip.is_empty(), "ExternalName → ClusterIP: no ClusterIP");
    let vip_url = format!("http://{vip}/hostname");
    let what = "→ ClusterIP: the ClusterIP reaches both backends";
    let (took, got) = c.until("client", &vip_url, 16, what, exactly(&WEB2)).await;
    figure.push(format!("→ClusterIP {vip}: {} ({took:.1?})", show(&got)));

    // → NodePort.
    svc::patch(cp, ns, name, false, &json!({"spec": {"type": "NodePort"}})).await;
    let port = field(cp, ns, svc, "{.spec.ports[0].nodePort}").await;
    let np_urls: Vec<String> = [n1, n2]
        .iter()
        .map(|n| format!("http://{}:{port}/hostname", n.ip))
        .collect();
    for url in &np_urls {
        let what = "→ NodePort: the node port reaches both backends";
        c.until("client", url, 16, what, exactly(&WEB2)).await;
        let host = from_node(n1, url, 4);
        assert!(web2_only(&host), "→ NodePort: {url} from n1: {}", show(&host));
    }
    let what = "→ NodePort: the ClusterIP still answers";
    c.until("client", &vip_url, 8, what, web2_only).await;
    figure.push(format!(
        "→NodePort {port}: both nodes' addresses from the pod and from n1"
    ));

    // → LoadBalancer: the lab has no load balancer controller; the ingress IP is set through
    // the status subresource and the router sends the pool to n1.
    svc::patch(cp, ns, name, false, &json!({"spec": {"type": "LoadBalancer"}})).await;
    let lb_ip = "203.0.113.20";
    let ingress = json!({"status": {"loadBalancer": {"ingress": [{"ip": lb_ip}]}}});
    svc::patch(cp, ns, name, true, &ingress).await;
    outside.attract(lab, 0);
    let lb_url = format!("http://{lb_ip}/hostname");
    let what = "→ LoadBalancer: the ingress IP from a pod reaches both backends";
    c.until("client", &lb_url, 16, what, exactly(&WEB2)).await;
    let what = "→ LoadBalancer: the ingress IP from outside";
    let body = svc::from_outside(&outside, &lb_url, |b| WEB2.contains(&b), || what.to_string()).await;
    let kept = field(cp, ns, svc, "{.spec.ports[0].nodePort}").await;
    assert_eq!(kept, port, "→ LoadBalancer did not keep the node port");
    let what = "→ LoadBalancer: the node port still answers";
    c.until("client", &np_urls[1], 4, what, web2_only).await;
    figure.push(format!(
        "→LoadBalancer {lb_ip}: from the pod and from outside ({body})"
    ));

    // → ClusterIP: the node ports are released, the load balancer goes (its controller would
    // clear the status: done here if the API server left it).
    let back = json!({"spec": {
        "type": "ClusterIP",
        "externalTrafficPolicy": null,
        "allocateLoadBalancerNodePorts": null,
        "ports": web_ports()
    }});
    svc::patch(cp, ns, name, false, &back).await;
    let np = field(cp, ns, svc, "{.spec.ports[0].nodePort}").await;
    assert_eq!(np, "", "→ ClusterIP: a node port left");
    let left = field(cp, ns, svc, "{.status.loadBalancer.ingress}").await;
    if !left.is_empty() {
        svc::patch(
            cp,
            ns,
            name,
            true,
            &json!({"status": {"loadBalancer": {"ingress": null}}}),
        )
        .await;
    }
    let t = Instant::now();
    let mut gone = Vec::new();
    for url in np_urls.iter().chain([&lb_url]) {
        let what = "→ ClusterIP: the old node port and ingress IP answer no more";
        let (_, got) = c.until("client", url, 1, what, no_web2).await;
        let again = c.batch("client", url, 2).await;
        assert!(
            no_web2(&again),
            "→ ClusterIP: {url} answered again: {}",
            show(&again)
        );
        gone.push(format!("{url} {}", got[0]));
    }
    for url in &np_urls {
        let host = from_node(n1, url, 2);
        assert!(no_web2(&host), "→ ClusterIP: {url} from n1: {}", show(&host));
    }
    let what = "→ ClusterIP: the old ingress IP from outside answers no more";
    svc::from_outside(&outside, &lb_url, str::is_empty, || what.to_string()).await;
    let what = "→ ClusterIP: the ClusterIP reaches both backends";
    let (_, got) = c.until("client", &vip_url, 16, what, exactly(&WEB2)).await;
    figure.push(format!(
        "→ClusterIP (LB status {}): ClusterIP {}; the old node port and ingress IP gone within \
         {:.1?}: {}, and from outside",
        if left.is_empty() {
            "cleared by the API server"
        } else {
            "cleared here as a controller would"
        },
        show(&got),
        t.elapsed(),
        gone.join(", ")
    ));

    // → ExternalName: the ClusterIP is released and answers no more.
    let external = json!({"spec": {
        "type": "ExternalName",
        "externalName": "web.example.com",
        "clusterIP": null,
        "clusterIPs": null,
        "ipFamilies": null,
        "ipFamilyPolicy": null
    }});
    svc::patch(cp, ns, name, false, &external).await;
    let ip = field(cp, ns, svc, "{.spec.clusterIP}").await;
    assert_eq!(ip, "", "→ ExternalName: the ClusterIP stayed");
    let what = "→ ExternalName: the old ClusterIP answers no more";
    let (took, got) = c.until("client", &vip_url, 1, what, no_web2).await;
    figure.push(format!(
        "→ExternalName: {vip} {} {took:.1?} after the patch",
        got[0]
    ));
    figure.join("; ")
}

// ---- terminating backends and traffic distribution ----

#[test]
fn terminating_backends_and_traffic_distribution() {
    const STEPS: [&str; 3] = [TERMINATING_FALLBACK, ROLLING, PREFER_SAME_NODE];
    if !wanted(&STEPS) {
        return;
    }
    let _one = one_cluster();
    Lab::run(2, async |lab| {
        let t0 = Instant::now();
        let cluster = kit::Cluster::start(lab).await;
        let ns = pods::namespace(&cluster.cp, "terminating").await;
        let c = Ctx {
            cluster: &cluster,
            lab,
            ns: &ns,
        };
        let clients = [
            busybox(c.ns, "client", c.n1()),
            busybox(c.ns, "client-n2", c.n2()),
        ];
        start_pods(&cluster, c.ns, &clients).await;
        let mut steps = Steps::default();
        steps.run(TERMINATING_FALLBACK, terminating_fallback(&c)).await;
        steps.run(ROLLING, rolling(&c)).await;
        steps.run(PREFER_SAME_NODE, prefer_same_node(&c)).await;
        drop(cluster);
        steps.finish("terminating backends and traffic distribution", t0);
    });
}

async fn terminating_fallback(c: &Ctx<'_>) -> String {
    let (cp, ns) = (c.cp(), c.ns);
    let mut lone = server(ns, "lone", &c.n2().name, "lone");
    slow_to_stop(&mut lone["spec"], 8, 12);
    start_pods(c.cluster, ns, &[lone]).await;
    cp.apply(&service(ns, "lone", "lone", &web_ports()).to_string())
        .await;
    let url = format!("http://{}/hostname", c.vip("lone").await);
    let what = "the Service reaches its one pod";
    c.until("client", &url, 4, what, exactly(&["lone"])).await;
    c.kubectl(&["delete", "pod", "lone", "-n", ns, "--wait=false"])
        .await;
    let deleted = Instant::now();
    // Its endpoint: not ready, serving, terminating.
    cp.eventually("the endpoint terminating", || async {
        slices(cp, ns, "lone", "{.items[*].endpoints[*].conditions.terminating}").await == "true"
    })
    .await;
    let marked = deleted.elapsed();
    let conditions = slices(cp, ns, "lone", "{.items[*].endpoints[*].conditions}").await;
    let got = c.batch("client", &url, 8).await;
    let served = deleted.elapsed();
    assert!(
        got.len() == 8 && distinct(&got) == set(&["lone"]),
        "the only endpoint terminating ({conditions}): 8 new connections reached {}",
        show(&got)
    );
    assert!(
        !pod_state(cp, ns, "lone").await.is_empty(),
        "lone went before the check ended ({served:?} after the delete): the check proves nothing"
    );
    wait_gone(cp, ns, "lone", Duration::from_secs(30)).await;
    let gone = deleted.elapsed();
    let (_, after) = c
        .until("client", &url, 2, "lone gone: refused", exactly(&["refused"]))
        .await;
    format!(
        "the endpoint {conditions} {marked:.1?} after the delete; 8 of 8 new connections reached the \
         terminating lone until {served:.1?} after it; it went {gone:.1?} after the delete, then {}",
        show(&after)
    )
}

/// What the driver of [`rolling`] saw.
struct Rolled {
    /// The pod the established connection reached.
    first: String,
    /// When it was first seen terminating: after the restart, and the Unix time.
    terminating: Option<(Duration, u64)>,
    /// When it was gone, after the restart.
    first_gone: Duration,
    /// The pods at the end.
    new: BTreeSet<String>,
    /// When only those were left, after the restart.
    rolled: Duration,
}

/// The names in a space-separated list.
fn names(s: &str) -> BTreeSet<String> {
    s.split_whitespace().map(str::to_string).collect()
}

async fn rolling(c: &Ctx<'_>) -> String {
    let (cp, ns) = (c.cp(), c.ns);
    // Three replicas of a pod with two servers: agnhost on 8080 (`/hostname`) and busybox `nc`
    // on 9000 answering each line with `<pod> <line> <unix time>`; both stay 5 s in a preStop
    // sleep, and the pod goes after at most 8 s.
    let echo = "echo 'while read l; do echo \"$(hostname) $l $(date +%s)\"; done' > /tmp/echo.sh; \
                exec nc -ll -p 9000 -e sh /tmp/echo.sh";
    let mut template = server(ns, "unused", "", "roll");
    template["spec"]["containers"][0]["name"] = json!("web");
    let stream = json!({
        "name": "stream", "image": images::BUSYBOX, "imagePullPolicy": "Never",
        "args": ["sh", "-c", echo],
        "ports": [{ "name": "stream", "containerPort": 9000 }]
    });
    template["spec"]["containers"]
        .as_array_mut()
        .expect("containers")
        .push(stream);
    slow_to_stop(&mut template["spec"], 5, 8);
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": { "name": "roll", "namespace": ns },
        "spec": {
            "replicas": 3,
            "selector": { "matchLabels": { "app": "roll" } },
            "strategy": { "type": "RollingUpdate", "rollingUpdate": { "maxSurge": 1, "maxUnavailable": 0 } },
            "template": { "metadata": { "labels": { "app": "roll" } }, "spec": template["spec"] }
        }
    });
    cp.apply(&deployment.to_string()).await;
    let ports = json!([
        { "name": "web", "port": 80, "protocol": "TCP", "targetPort": "http" },
        { "name": "stream", "port": 9000, "protocol": "TCP", "targetPort": "stream" }
    ]);
    cp.apply(&service(ns, "roll", "roll", &ports).to_string()).await;
    c.kubectl(&["rollout", "status", "deployment/roll", "-n", ns, "--timeout=90s"])
        .await;
    let old = names(&labelled(cp, ns, "roll", "{.items[*].metadata.name}").await);
    assert_eq!(old.len(), 3, "the first rollout: {old:?}");
    let vip = c.vip("roll").await;
    let url = format!("http://{vip}/hostname");
    let what = "the Service answers from the first three";
    c.until("client", &url, 12, what, |g| g.iter().all(|o| old.contains(o)))
        .await;
    let log = "/tmp/roll.log";
    let stream_log = "/tmp/stream.log";
    let stream_script = format!(
        "rm -f {stream_log} {stream_log}.stop; (i=0; while [ ! -e {stream_log}.stop ]; \
         do i=$((i+1)); echo $i; sleep 0.5; done) | nc {vip} 9000 > {stream_log}; echo nc ended $?"
    );
    let stream = async {
        let args = ["exec", "-n", ns, "client", "--", "sh", "-c", &stream_script];
        cp.kubectl(&cp.admin, &args).await
    };
    let (_, stream_out, r) = tokio::join!(
        connection_loop(cp, ns, "client", &url, log),
        stream,
        roll_and_follow(c, &old, log, stream_log)
    );
    // New connections: none failed, each reached an old or a new pod, the last ones new pods.
    let got = loop_log(cp, ns, "client", log).await;
    let failed = got
        .iter()
        .filter(|o| !old.contains(*o) && !r.new.contains(*o))
        .count();
    assert!(
        failed == 0 && got.len() >= 50,
        "a new connection every 50 ms while every backend was replaced: {failed} of {} failed: {}",
        got.len(),
        show(&got)
    );
    let tail = &got[got.len() - 10..];
    assert!(
        tail.iter().all(|o| r.new.contains(o)),
        "the last 10 connections reached {}, not only new pods",
        show(tail)
    );
    // The established connection: one backend, every line answered in order, answers while it
    // was terminating, until it went.
    let first = &r.first;
    let lines = pod_file(cp, ns, "client", stream_log).await;
    let mut times = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let w: Vec<&str> = l.split_whitespace().collect();
        assert!(
            w.len() == 3 && w[0] == first && w[1] == (i + 1).to_string(),
            "line {} of the stream: {l:?} (want `{first} {} <time>`)\n{lines:?}",
            i + 1,
            i + 1
        );
        times.push(w[2].parse::<u64>().unwrap_or_default());
    }
    let (marked, at) = r
        .terminating
        .unwrap_or_else(|| panic!("{first} was never seen terminating"));
    let during = times.iter().filter(|t| **t >= at).count();
    let last = times.last().copied().unwrap_or_default();
    assert!(
        during >= 6 && last >= at + 3,
        "the established connection to {first}: {during} answers after it was seen terminating (at \
         {at}), the last at {last}: it did not keep working while terminating\n{lines:?}"
    );
    let stream_end = String::from_utf8_lossy(&stream_out.stdout).trim().to_string();
    format!(
        "{} new connections (one every 50 ms plus the request) while all 3 backends were replaced \
         ({:.1?}), 0 failed: {}; the established connection to {first}: {} answers in order, \
         {during} of them after it was seen terminating ({marked:.1?} after the restart), the last \
         {} s after that; it went {:.1?} after the restart ({stream_end})",
        got.len(),
        r.rolled,
        show(&got),
        lines.len(),
        last.saturating_sub(at),
        r.first_gone
    )
}

/// The driver of [`rolling`]: once the loop and the stream run, restarts the Deployment,
/// follows the stream's backend until it is gone and the rollout until only new pods are
/// left, then stops the loop and the stream.
async fn roll_and_follow(c: &Ctx<'_>, old: &BTreeSet<String>, log: &str, stream_log: &str) -> Rolled {
    let (cp, ns) = (c.cp(), c.ns);
    loop_has(cp, ns, "client", log, 10).await;
    // The established connection's backend.
    let deadline = Instant::now() + Duration::from_secs(30);
    let first = loop {
        let lines = pod_file(cp, ns, "client", stream_log).await;
        if lines.len() >= 2 {
            break lines[0].split_whitespace().next().unwrap_or_default().to_string();
        }
        assert!(Instant::now() < deadline, "the stream got {lines:?} in 30 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        old.contains(&first),
        "the stream's backend {first:?} is none of {old:?}"
    );
    let restarted = Instant::now();
    c.kubectl(&["rollout", "restart", "deployment/roll", "-n", ns])
        .await;
    // Follow the stream's backend until it is gone.
    let mut terminating = None;
    loop {
        let state = pod_state(cp, ns, &first).await;
        if state.is_empty() {
            break;
        }
        if terminating.is_none() && state.split_whitespace().count() > 1 {
            terminating = Some((restarted.elapsed(), epoch_now()));
        }
        assert!(
            restarted.elapsed() < Duration::from_secs(120),
            "{first} still there 120 s after the restart: {state}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let first_gone = restarted.elapsed();
    c.kubectl(&["rollout", "status", "deployment/roll", "-n", ns, "--timeout=90s"])
        .await;
    // Until only the three new pods are left.
    let deadline = Instant::now() + Duration::from_secs(60);
    let new = loop {
        let path = "{range .items[*]}{.metadata.name}={.metadata.deletionTimestamp} {end}";
        let now = labelled(cp, ns, "roll", path).await;
        let live: BTreeSet<String> = now
            .split_whitespace()
            .filter_map(|p| p.strip_suffix('='))
            .map(str::to_string)
            .collect();
        if now.split_whitespace().count() == 3 && live.len() == 3 && live.is_disjoint(old) {
            break live;
        }
        assert!(
            Instant::now() < deadline,
            "the rollout did not end with three new pods: {now}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let rolled = restarted.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (stop, stream_stop) = (format!("{log}.stop"), format!("{stream_log}.stop"));
    c.kubectl(&["exec", "-n", ns, "client", "--", "touch", &stop, &stream_stop])
        .await;
    Rolled {
        first,
        terminating,
        first_gone,
        new,
        rolled,
    }
}

async fn prefer_same_node(c: &Ctx<'_>) -> String {
    let (cp, ns) = (c.cp(), c.ns);
    let mut pods = Vec::new();
    for (name, node) in [("td-1", c.n1()), ("td-2", c.n2())] {
        let mut p = server(ns, name, &node.name, "td");
        slow_to_stop(&mut p["spec"], 4, 6);
        pods.push(p);
    }
    start_pods(c.cluster, ns, &pods).await;
    let mut td = service(ns, "td", "td", &web_ports());
    td["spec"]["trafficDistribution"] = json!("PreferSameNode");
    cp.apply(&td.to_string()).await;
    cp.apply(&service(ns, "td-plain", "td", &web_ports()).to_string())
        .await;
    let url = format!("http://{}/hostname", c.vip("td").await);
    let plain = format!("http://{}/hostname", c.vip("td-plain").await);
    let what = "without trafficDistribution, both backends";
    let (_, control) = c
        .until("client", &plain, 16, what, exactly(&["td-1", "td-2"]))
        .await;
    let what = "PreferSameNode: the client on n1 reaches td-1 only";
    let (_, on_n1) = c.until("client", &url, 16, what, exactly(&["td-1"])).await;
    let what = "PreferSameNode: the client on n2 reaches td-2 only";
    let (_, on_n2) = c.until("client-n2", &url, 16, what, exactly(&["td-2"])).await;
    let hints = slices(cp, ns, "td", "{.items[*].endpoints[*].hints}").await;
    let log = "/tmp/td.log";
    let driver = async {
        loop_has(cp, ns, "client", log, 10).await;
        c.kubectl(&["delete", "pod", "td-1", "-n", ns, "--wait=false"])
            .await;
        let gone = wait_gone(cp, ns, "td-1", Duration::from_secs(30)).await;
        let before = loop_log(cp, ns, "client", log).await.len();
        loop_has(cp, ns, "client", log, before + 10).await;
        let stop = format!("{log}.stop");
        c.kubectl(&["exec", "-n", ns, "client", "--", "touch", &stop])
            .await;
        gone
    };
    let (_, gone) = tokio::join!(connection_loop(cp, ns, "client", &url, log), driver);
    let got = loop_log(cp, ns, "client", log).await;
    let switched = got.iter().position(|o| o != "td-1").unwrap_or(got.len());
    assert!(
        switched > 0 && switched < got.len() && got[switched..].iter().all(|o| o == "td-2"),
        "a new connection every 50 ms from n1 while td-1 went: td-1 first, then td-2 only, nothing \
         failing; got {} in order: {got:?}",
        show(&got)
    );
    format!(
        "from n1: {}; from n2: {}; without it: {}; slice hints {hints}; a new connection every 50 ms \
         from n1 while td-1 went ({gone:.1?} after its delete): {} connections, 0 failed, {switched} \
         to td-1 then {} to td-2",
        show(&on_n1),
        show(&on_n2),
        show(&control),
        got.len(),
        got.len() - switched
    )
}
