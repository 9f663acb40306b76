//! `make e2e`, two nodes: ServiceVIPs load-balanced in eBPF inside a VPC (issue 13, item 4),
//! with real connections. Needs root, python3 and the agent and CNI binaries built.
//!
//! The lab's API server runs without a kube connection, so the ServiceVIP loop (proven
//! against the kube stand-in in `conformance/tests/service_vip.rs`) does not run here: the
//! test writes the ServiceVIP and its `status.backends` as that loop would, and checks what
//! the agents and the datapath make of it. Names are resolved elsewhere (addresses only).
//!
//! Layout: VPC a (10.50.0.0/24, t1) with the client c1 and backend b1 on n1 and backends
//! b2, b3 on n2; VPC x (t2) with the same range and x1 on n1; VPC p (10.51.0.0/24, team-a),
//! peered with a, with p2 on n2. Each backend runs `tests/vip/probe.py serve <name>`: TCP
//! 8080 answers its name then echoes, UDP 5353 answers its name.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::process::Stdio;

use cozyplane_apis::v1alpha1::ServiceVIP;
use cozyplane_bpf::maps::lb_svc::{Frontend, LbSvcMap};
use cozyplane_lab::{Lab, LabPod, Proc};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

mod common;
use common::{Cp, half, metric, pod, tenant, vni, vpc_ip, wait};

fn probe() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vip/probe.py").to_string()
}

fn serve(p: &LabPod) -> Proc {
    let mut c =
        p.ns.command(&["python3", &probe(), "serve", &p.name])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
    // Ready once it says so.
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(c.stdout.take().unwrap()), &mut line).unwrap();
    assert_eq!(line.trim(), "ready", "{} serves", p.name);
    Proc(c)
}

/// The names the backends answered `n` new TCP connections from `p` to `ip:port` with.
fn tcp(p: &LabPod, ip: Ipv4Addr, port: u16, n: usize) -> Vec<String> {
    let out = p.ns.exec(&[
        "python3",
        &probe(),
        "tcp",
        &ip.to_string(),
        &port.to_string(),
        &n.to_string(),
    ]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

fn udp(p: &LabPod, ip: Ipv4Addr, port: u16) -> String {
    let out =
        p.ns.exec(&["python3", &probe(), "udp", &ip.to_string(), &port.to_string()]);
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The ServiceVIP of `t1/web` in VPC a (TCP 80 → 8080, UDP 53 → 5353), address allocated by
/// the server from the top of a's range.
async fn create_vip(cp: &Cp) -> ServiceVIP {
    let v: ServiceVIP = serde_json::from_value(json!({
        "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "ServiceVIP",
        "metadata": { "generateName": "sv" },
        "spec": {
            "vpcRef": { "namespace": "t1", "name": "a" }, "ip": "0.0.0.0",
            "serviceRef": { "namespace": "t1", "name": "web" },
            "ports": [ { "protocol": "TCP", "port": 80 }, { "protocol": "UDP", "port": 53 } ],
        },
    }))
    .unwrap();
    Api::<ServiceVIP>::all(cp.sdn.clone())
        .create(&PostParams::default(), &v)
        .await
        .unwrap()
}

/// Sets the VIP's backends, as the ServiceVIP loop writes them.
async fn set_backends(cp: &Cp, name: &str, ips: &[Ipv4Addr]) {
    let backends: Vec<_> = ips
        .iter()
        .map(|ip| {
            json!({ "ip": ip.to_string(), "ports": [
                { "protocol": "TCP", "port": 80, "targetPort": 8080 },
                { "protocol": "UDP", "port": 53, "targetPort": 5353 },
            ]})
        })
        .collect();
    let status = json!({ "status": { "backends": backends, "phase": "Ready" } });
    Api::<ServiceVIP>::all(cp.sdn.clone())
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

/// Every node's frontend for VIP:80 has `n` backends.
fn programmed(lab: &Lab, net: u32, vip: Ipv4Addr, n: u32) {
    for node in &lab.nodes {
        let pins = node.scratch.pins();
        wait(
            &format!("{} programs {vip}:80 with {n} backends", node.name),
            || {
                LbSvcMap::from_pin(&pins)
                    .and_then(|m| {
                        m.get(Frontend {
                            net,
                            vip: vip.into(),
                            proto: 6,
                            port: 80,
                        })
                    })
                    .ok()
                    .flatten()
                    .is_some_and(|s| s.count == n)
            },
        );
    }
}

#[test]
fn lab_vip() {
    Lab::run(2, body);
}

async fn body(lab: &mut Lab) {
    let cp = Cp::start(lab).await;
    let lab = &*lab;
    let n1 = &lab.nodes[0];
    tenant(&cp, "t1", "a", "10.50.0.0/24").await;
    tenant(&cp, "t2", "x", "10.50.0.0/24").await;
    tenant(&cp, "team-a", "p", "10.51.0.0/24").await;
    let va = vni(&cp, "t1", "a").await;
    let c1 = pod(&cp, lab, 0, "t1", "c1", Some("a")).await;
    let b1 = pod(&cp, lab, 0, "t1", "b1", Some("a")).await;
    let b2 = pod(&cp, lab, 1, "t1", "b2", Some("a")).await;
    let b3 = pod(&cp, lab, 1, "t1", "b3", Some("a")).await;
    let x1 = pod(&cp, lab, 0, "t2", "x1", Some("x")).await;
    let p2 = pod(&cp, lab, 1, "team-a", "p2", Some("p")).await;
    let (ib1, ib2, ib3) = (
        vpc_ip(&cp, &b1).await,
        vpc_ip(&cp, &b2).await,
        vpc_ip(&cp, &b3).await,
    );
    let _servers: Vec<Proc> = [&b1, &b2, &b3].into_iter().map(serve).collect();
    // The backends answer directly (the control for everything below).
    assert_eq!(tcp(&c1, ib2, 8080, 1), ["b2"], "c1 reaches b2 directly");

    let vip = create_vip(&cp).await;
    let vname = vip.metadata.name.clone().unwrap();
    let vaddr: Ipv4Addr = vip.spec.ip.parse().unwrap();
    assert_eq!(vaddr, Ipv4Addr::new(10, 50, 0, 254), "from the top of a's range");
    set_backends(&cp, &vname, &[ib1, ib2]).await;
    programmed(lab, va, vaddr, 2);

    // --- 20 new connections land on backends of both nodes; UDP answers from the VIP.
    let names = tcp(&c1, vaddr, 80, 20);
    let set: BTreeSet<&str> = names.iter().map(String::as_str).collect();
    assert_eq!(
        set,
        BTreeSet::from(["b1", "b2"]),
        "20 connections to the VIP: {names:?}"
    );
    let u = udp(&c1, vaddr, 53);
    let (who, from) = u.split_once(' ').unwrap_or(("ERR", ""));
    assert!(who == "b1" || who == "b2", "UDP to the VIP: {u}");
    assert_eq!(from, vaddr.to_string(), "the UDP answer comes from the VIP");
    eprintln!("PASS a VPC pod reaches its ServiceVIP over TCP and UDP; 20 connections land on both nodes");

    // --- An established stream survives a backend added (b3) and another removed.
    let flag = tempfile::NamedTempFile::new().unwrap().into_temp_path();
    let flag_path = flag.to_path_buf();
    drop(flag);
    let mut hold = c1
        .ns
        .command(&[
            "python3",
            &probe(),
            "hold",
            &vaddr.to_string(),
            "80",
            flag_path.to_str().unwrap(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(hold.stdout.take().unwrap());
    let mut first = String::new();
    std::io::BufRead::read_line(&mut out, &mut first).unwrap();
    let held = first.trim().to_string();
    assert!(
        held == "b1" || held == "b2",
        "the held stream's backend: {held:?}"
    );
    let (keep, other) = if held == "b1" { (ib1, ib2) } else { (ib2, ib1) };
    set_backends(&cp, &vname, &[keep, ib3]).await;
    programmed(lab, va, vaddr, 2);
    std::fs::write(&flag_path, b"go").unwrap();
    let mut echo = String::new();
    std::io::BufRead::read_line(&mut out, &mut echo).unwrap();
    let _ = hold.wait();
    let _ = std::fs::remove_file(&flag_path);
    assert_eq!(
        echo.trim(),
        "still-here",
        "the stream to {held} after the backend change"
    );
    let names = tcp(&c1, vaddr, 80, 20);
    let other_name = if held == "b1" { "b2" } else { "b1" };
    assert!(
        !names.iter().any(|n| n == other_name),
        "a new flow went to the removed {other}: {names:?}"
    );
    assert!(
        names.iter().any(|n| n == "b3"),
        "no new flow reached the added b3: {names:?}"
    );
    assert!(!names.iter().any(|n| n == "ERR"), "{names:?}");
    eprintln!("PASS an established stream survives a backend added and another removed");

    // --- Another VPC with the same range cannot reach the VIP.
    let names = tcp(&x1, vaddr, 80, 2);
    assert_eq!(
        names,
        ["ERR", "ERR"],
        "x1 (VPC x, same range) reaches nothing at a's VIP"
    );
    eprintln!("PASS a pod of another VPC with the same CIDR cannot reach the VIP");

    // --- A peered VPC's pod reaches it (p2 on n2; backends on both nodes).
    assert_eq!(tcp(&p2, vaddr, 80, 1), ["ERR"], "p2 before the peering");
    half(&cp, ("t1", "a"), ("team-a", "p")).await;
    half(&cp, ("team-a", "p"), ("t1", "a")).await;
    let mut ok = Vec::new();
    wait("p2 reaches a's VIP once peered", || {
        ok = tcp(&p2, vaddr, 80, 1);
        ok.first().is_some_and(|n| n != "ERR")
    });
    let names = tcp(&p2, vaddr, 80, 10);
    assert!(
        names.iter().all(|n| n == "b3" || *n == held),
        "p2 through the VIP: {names:?}"
    );
    eprintln!("PASS a peered VPC's pod reaches the VIP");

    let text = n1.metrics();
    assert!(
        metric(&text, "cozyplane_lb_flows_total") >= 40.0,
        "n1 counts its balanced flows:\n{text}"
    );
}
