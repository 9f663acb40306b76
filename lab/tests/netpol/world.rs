//! The lab's NetworkPolicy world: labelled pods with named container ports, wired as
//! kubelet does, each serving the probe ports; the probe runner; and the gate that tells
//! when both nodes' agents have applied every policy written before it.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::IpAddr;
use std::process::Stdio;
use std::time::{Duration, Instant};

use cozyplane_lab::{Lab, LabPod, Netns, Proc, add_network, result_ip};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::common::Cp;

/// TCP and UDP ports every pod serves (the generator's probe ports).
pub(crate) const TCP_PORTS: &str = "80,81,8080,8081,9000";
pub(crate) const UDP_PORTS: &str = "53,80,81";

fn probe_py() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/netpol/probe.py").to_string()
}

/// A namespace at the stand-in with these labels.
pub(crate) async fn namespace(cp: &Cp, name: &str, labels: &BTreeMap<String, String>) {
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap();
    Api::<Namespace>::all(cp.kube.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
}

/// A default-network pod on `node` with `labels` and one container whose `ports` are
/// `(name, protocol, port)`: the Pod object, its netns, CNI ADD and the status kubelet
/// writes.
pub(crate) async fn pod(
    cp: &Cp,
    lab: &Lab,
    (node, ns, name): (usize, &str, &str),
    labels: &BTreeMap<String, String>,
    ports: &[(String, String, u16)],
) -> LabPod {
    let n = &lab.nodes[node];
    let ports: Vec<serde_json::Value> = ports
        .iter()
        .map(|(pn, pr, pt)| json!({"name": pn, "protocol": pr, "containerPort": pt}))
        .collect();
    let obj: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": name, "namespace": ns, "labels": labels },
        "spec": { "nodeName": n.name,
                  "containers": [{ "name": "c", "image": "pause", "ports": ports }] }
    }))
    .unwrap();
    let api = Api::<Pod>::namespaced(cp.kube.clone(), ns);
    let uid = api
        .create(&PostParams::default(), &obj)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap_or_default();
    let pns = Netns::new("p");
    let cid = format!("{ns}-{name}");
    let (code, result) = add_network(n, &cid, &pns.path(), (ns, name, &uid), &json!({}));
    assert_eq!(code, 0, "ADD {ns}/{name}: {result}\n{}", n.log_text());
    let fabric = result_ip(&result).unwrap();
    let status = json!({ "status": { "podIP": fabric.to_string(), "podIPs": [{"ip": fabric.to_string()}],
        "hostIP": n.ip.to_string(), "phase": "Running" } });
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    LabPod {
        name: name.into(),
        namespace: ns.into(),
        node,
        cid,
        uid,
        result,
        fabric,
        ns: pns,
    }
}

/// A hostNetwork pod on `node` with `labels`: no netns of its own, the node's address.
pub(crate) async fn host_network_pod(
    cp: &Cp,
    lab: &Lab,
    (node, ns, name): (usize, &str, &str),
    labels: &BTreeMap<String, String>,
) {
    let n = &lab.nodes[node];
    let obj: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": name, "namespace": ns, "labels": labels },
        "spec": { "nodeName": n.name, "hostNetwork": true,
                  "containers": [{ "name": "c", "image": "pause",
                                   "ports": [{"name": "web", "protocol": "TCP", "containerPort": 18080}] }] }
    }))
    .unwrap();
    let api = Api::<Pod>::namespaced(cp.kube.clone(), ns);
    api.create(&PostParams::default(), &obj).await.unwrap();
    let ip = n.ip.to_string();
    let status =
        json!({ "status": { "podIP": ip, "podIPs": [{"ip": ip}], "hostIP": ip, "phase": "Running" } });
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

/// The probe server in `ns` on `tcp` and `udp` (comma-separated ports), once it listens.
pub(crate) fn serve(ns: &Netns, tcp: &str, udp: &str) -> Proc {
    let mut c = ns
        .command(&["python3", &probe_py(), "serve", tcp, udp])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(c.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready", "probe server in {}", ns.0);
    Proc(c)
}

/// One probe: `(destination, "TCP"/"UDP", port)`.
pub(crate) type Probe = (IpAddr, &'static str, u16);

/// Runs every netns's probes at once (each netns's in one process, all at once inside
/// it), `timeout` seconds each: whether each connected and was answered, in order.
pub(crate) fn run_probes(jobs: &[(&Netns, Vec<Probe>)], timeout: f64) -> Vec<Vec<bool>> {
    let mut children = Vec::new();
    for (ns, probes) in jobs {
        let mut c = ns
            .command(&["python3", &probe_py(), "probe", &timeout.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut input = String::new();
        for (i, (ip, proto, port)) in probes.iter().enumerate() {
            input.push_str(&format!("{i} {ip} {proto} {port}\n"));
        }
        c.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        children.push(c);
    }
    children
        .into_iter()
        .zip(jobs)
        .map(|(c, (ns, probes))| {
            let out = c.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "probe in {}: {}",
                ns.0,
                String::from_utf8_lossy(&out.stderr)
            );
            let mut got = vec![None; probes.len()];
            for l in String::from_utf8_lossy(&out.stdout).lines() {
                let (i, v) = l.split_once(' ').unwrap();
                got[i.parse::<usize>().unwrap()] = Some(v == "1");
            }
            got.into_iter()
                .enumerate()
                .map(|(i, v)| v.unwrap_or_else(|| panic!("probe {i} in {} gave no answer", ns.0)))
                .collect()
        })
        .collect()
}

/// The gate: a prober and a target pod on every node (namespace `gate`), and a
/// NetworkPolicy on the targets admitting TCP 80 or 81 only, flipped after every change.
/// The agent applies the events of one watch in order, so once both nodes admit exactly
/// the new port, every NetworkPolicy written before the flip is in both nodes' maps. Only
/// a success proves the new state (the old one refused that port), so a slow probe cannot
/// open the gate early.
pub(crate) struct Gate {
    /// `(prober, target)` per node.
    pub(crate) pairs: Vec<(LabPod, LabPod)>,
    _servers: Vec<Proc>,
    flips: u32,
}

impl Gate {
    /// The gate's pods, created after every other pod: once the gate works, the agents
    /// have seen the pods created before it too (one watch, in order).
    pub(crate) async fn new(cp: &Cp, lab: &Lab) -> Self {
        let l = |role: &str| crate::npgen::labels(&[("role", role)]);
        namespace(
            cp,
            "gate",
            &crate::npgen::labels(&[("kubernetes.io/metadata.name", "gate")]),
        )
        .await;
        let mut pairs = Vec::new();
        let mut servers = Vec::new();
        for node in 0..lab.nodes.len() {
            let p = pod(
                cp,
                lab,
                (node, "gate", &format!("prober{node}")),
                &l("prober"),
                &[],
            )
            .await;
            let t = pod(
                cp,
                lab,
                (node, "gate", &format!("target{node}")),
                &l("target"),
                &[],
            )
            .await;
            servers.push(serve(&t.ns, "80,81", ""));
            pairs.push((p, t));
        }
        Self {
            pairs,
            _servers: servers,
            flips: 0,
        }
    }

    /// Flips the gate and waits until both nodes apply it (a hang guard of 30 s).
    pub(crate) async fn flip(&mut self, cp: &Cp) {
        let api = Api::<NetworkPolicy>::namespaced(cp.kube.clone(), "gate");
        if self.flips > 0 {
            api.delete(&format!("gate-{}", self.flips - 1), &DeleteParams::default())
                .await
                .unwrap();
        }
        let open = if self.flips.is_multiple_of(2) { 80 } else { 81 };
        let np: NetworkPolicy = serde_json::from_value(json!({
            "metadata": {"namespace": "gate", "name": format!("gate-{}", self.flips)},
            "spec": {"podSelector": {"matchLabels": {"role": "target"}}, "policyTypes": ["Ingress"],
                     "ingress": [{"ports": [{"protocol": "TCP", "port": open}]}]}
        }))
        .unwrap();
        api.create(&PostParams::default(), &np).await.unwrap();
        self.flips += 1;
        let t = Instant::now();
        loop {
            let jobs: Vec<(&Netns, Vec<Probe>)> = self
                .pairs
                .iter()
                .map(|(p, tg)| {
                    let ip = IpAddr::V4(tg.fabric);
                    (&p.ns, vec![(ip, "TCP", 80), (ip, "TCP", 81)])
                })
                .collect();
            let got = run_probes(&jobs, 0.5);
            let want = vec![open == 80, open == 81];
            if got.iter().all(|g| *g == want) {
                return;
            }
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "the gate never flipped to TCP {open}: {got:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
