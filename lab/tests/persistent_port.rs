//! `make e2e`, two nodes: a VM's Port outlives its launcher pod (issue 27, item 1). A KubeVirt
//! virt-launcher pod is played by a pod labelled `vm.kubevirt.io/name: vm1` in VPC t1/va: its
//! Port carries the workload (`sdn.cozystack.io/vm-name`, `sdn.cozystack.io/interface`). A
//! second live launcher of the same VM is refused; the first deleted (DEL, Pod gone) leaves the
//! Port live; a storm of eight launchers added at once on both nodes leaves exactly one holder
//! and one endpoint, and the refused ones' DELs leave it alone; the next launcher, on the other node, gets the same address and MAC (read in its
//! netns and captured on the wire as the source of its replies), reachable from both nodes.
//! A VM pinning its address and MAC gets them; pins outside the VPC's ranges or held by another
//! Port are refused with the server's 422 on the field, and nothing is left behind. With no
//! launcher left (and no KubeVirt objects: the stand-in serves none) the server releases the
//! Port after its grace. Needs root and the agent and CNI binaries built.

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use cozyplane_apis::net::claim::port_name;
use cozyplane_apis::v1alpha1::Port;
use cozyplane_bpf::maps::endpoints::EndpointsMap;
use cozyplane_lab::{Lab, LabPod, Netns, add_network, capture, del_network};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams};
use serde_json::json;

mod common;
use common::{Cp, CpOptions, create_pod_with, gone, pod, pod_labelled, tenant, until, vni, vpc_ip, wait};

const VM: (&str, &str) = ("vm.kubevirt.io/name", "vm1");
/// The server's grace for releasing a workload's Port (and for Port GC), short for the lab.
const GRACE: &str = "--port-gc-grace=3s";

#[test]
fn lab_persistent_port() {
    Lab::run(2, body);
}

fn mac_of(p: &LabPod) -> String {
    let o = p.ns.exec(&["cat", "/sys/class/net/eth0/address"]);
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// Pod object and ADD on n2 of a launcher the agent must refuse; its exit code and output.
async fn refused_add(cp: &Cp, lab: &Lab, name: &str, meta: common::Meta<'_>) -> (i32, serde_json::Value) {
    let uid = create_pod_with(cp, lab, (1, "t1", name, Some("va")), meta).await;
    let ns = Netns::new("p");
    add_network(
        &lab.nodes[1],
        &format!("t1-{name}"),
        &ns.path(),
        ("t1", name, &uid),
        &json!({}),
    )
}

/// Launchers of vm1 created at once by [`storm`], alternating between the nodes.
const STORM: usize = 8;

/// A storm of [`STORM`] launchers of vm1 (no migration target among them), their CNI ADDs at
/// once on both nodes, with the real server deciding: exactly one holds Port `name`, the others
/// are refused, and no node ever has a second endpoint of the address. Their DELs (kubelet's,
/// after a failed ADD) leave the winner's Port alone; then the winner goes too.
async fn storm(
    cp: &Cp,
    lab: &Lab,
    (ports, name): (&Api<Port>, &str),
    (vni, ip): (u32, Ipv4Addr),
    q: &LabPod,
) {
    let names: Vec<String> = (0..STORM).map(|i| format!("virt-launcher-vm1-s{i}")).collect();
    let mut uids = Vec::new();
    for (i, n) in names.iter().enumerate() {
        uids.push(create_pod_with(cp, lab, (i % 2, "t1", n, Some("va")), (&[VM], &[])).await);
    }
    let nss: Vec<Netns> = names.iter().map(|_| Netns::new("p")).collect();
    let cid = |n: &str| format!("t1-{n}");
    let endpoints = |node: usize| {
        EndpointsMap::from_pin(&lab.nodes[node].scratch.pins())
            .and_then(|m| m.get(vni, IpAddr::V4(ip)))
            .ok()
            .flatten()
    };
    let results: Vec<(i32, serde_json::Value)> = std::thread::scope(|s| {
        let runs: Vec<_> = (0..STORM)
            .map(|i| {
                let (node, ns, n, uid) = (&lab.nodes[i % 2], &nss[i], &names[i], &uids[i]);
                s.spawn(move || add_network(node, &cid(n), &ns.path(), ("t1", n, uid), &json!({})))
            })
            .collect();
        runs.into_iter().map(|h| h.join().expect("ADD thread")).collect()
    });
    let won: Vec<usize> = (0..STORM).filter(|i| results[*i].0 == 0).collect();
    assert_eq!(
        won.len(),
        1,
        "exactly one of {STORM} concurrent launchers holds the Port: {results:?}"
    );
    let w = won[0];
    let p = ports.get(name).await.unwrap();
    assert_eq!(
        (p.spec.node.as_str(), p.spec.pod_name.as_str()),
        (lab.nodes[w % 2].name.as_str(), names[w].as_str()),
        "the Port is the winner's"
    );
    for (i, (code, out)) in results.iter().enumerate().filter(|(i, _)| *i != w) {
        assert_ne!(*code, 0);
        eprintln!("  {} refused: {}", names[i], out["msg"]);
    }
    assert!(endpoints(w % 2).is_some(), "the winner's node has the endpoint");
    assert!(
        endpoints(1 - w % 2).is_none(),
        "never a second endpoint on the other node"
    );
    // kubelet DELs a sandbox whose ADD failed: that must not take the winner's Port.
    for i in (0..STORM).filter(|i| *i != w) {
        let (code, out) = del_network(
            &lab.nodes[i % 2],
            &cid(&names[i]),
            &nss[i].path(),
            ("t1", &names[i], &uids[i]),
            (&json!({}), None),
        );
        assert_eq!(code, 0, "DEL of refused {}: {out}", names[i]);
        Api::<Pod>::namespaced(cp.kube.clone(), "t1")
            .delete(&names[i], &DeleteParams::default().grace_period(0))
            .await
            .unwrap();
    }
    let p = ports.get(name).await.unwrap();
    assert_eq!(
        p.spec.pod_name, names[w],
        "the refused launchers' DELs left the Port alone"
    );
    assert!(endpoints(w % 2).is_some(), "and its endpoint");
    wait("q reaches the storm's winner", || q.ns.ping(ip, 1, 1));
    let winner = LabPod {
        name: names[w].clone(),
        namespace: "t1".into(),
        node: w % 2,
        cid: cid(&names[w]),
        uid: uids[w].clone(),
        fabric: cozyplane_lab::result_ip(&results[w].1).unwrap_or(Ipv4Addr::UNSPECIFIED),
        result: results[w].1.clone(),
        ns: nss.into_iter().nth(w).expect("the winner's netns"),
    };
    gone(cp, lab, &winner).await;
    eprintln!(
        "PASS a storm of {STORM} launchers: {} on {} holds the Port, {} refused, one endpoint",
        names[w],
        lab.nodes[w % 2].name,
        STORM - 1
    );
}

/// Pinned address and MAC: made with them; outside the ranges or taken, refused with the
/// server's 422 on the field, nothing made.
async fn pins(cp: &Cp, lab: &Lab, ports: &Api<Port>, vni: u32) {
    let vm2 = ("vm.kubevirt.io/name", "vm2");
    let pinned = [
        ("sdn.cozystack.io/ip", "10.60.0.77"),
        ("sdn.cozystack.io/mac", "02:aa:bb:cc:dd:ee"),
    ];
    let c = pod_labelled(
        cp,
        lab,
        (0, "t1", "virt-launcher-vm2-a", Some("va")),
        (&[vm2], &pinned),
    )
    .await;
    assert_eq!(
        vpc_ip(cp, &c).await.to_string(),
        "10.60.0.77",
        "the pinned address"
    );
    assert_eq!(mac_of(&c), "02:aa:bb:cc:dd:ee", "the pinned MAC");
    let p = ports
        .get(&port_name(vni, "10.60.0.77".parse().unwrap()))
        .await
        .unwrap();
    assert_eq!(p.spec.mac, "02:aa:bb:cc:dd:ee");
    eprintln!("PASS vm2 made with its pins: 10.60.0.77 02:aa:bb:cc:dd:ee");
    for (vm, ip, mac, want) in [
        ("vm3", "10.99.0.5", "02:aa:bb:cc:dd:01", "not in the VPC's CIDRs"),
        (
            "vm4",
            "10.60.0.77",
            "02:aa:bb:cc:dd:02",
            "already allocated to Port",
        ),
        (
            "vm5",
            "10.60.0.78",
            "02:aa:bb:cc:dd:ee",
            "already allocated to Port",
        ),
    ] {
        let name = format!("virt-launcher-{vm}-a");
        let (code, out) = refused_add(
            cp,
            lab,
            &name,
            (
                &[("vm.kubevirt.io/name", vm)],
                &[("sdn.cozystack.io/ip", ip), ("sdn.cozystack.io/mac", mac)],
            ),
        )
        .await;
        let text = out.to_string();
        assert_ne!(code, 0, "{vm}: {text}");
        assert_eq!(out["code"], 7, "{vm}: a refusal no retry passes: {text}");
        assert!(text.contains(want), "{vm}: {text}");
        let made = ports
            .list(&kube::api::ListParams::default().labels(&format!("sdn.cozystack.io/vm-name={vm}")))
            .await
            .unwrap();
        assert!(made.items.is_empty(), "{vm}: a Port was left: {:?}", made.items);
        eprintln!("PASS {vm} ({ip}, {mac}) refused: {text}");
    }
}

async fn body(lab: &mut Lab) {
    let cp = Cp::start_with(
        lab,
        CpOptions {
            doors: true,
            server_args: &[GRACE],
        },
    )
    .await;
    let lab = &*lab;
    tenant(&cp, "t1", "va", "10.60.0.0/24").await;
    let ports = Api::<Port>::all(cp.sdn.clone());
    let q = pod(&cp, lab, 1, "t1", "q", Some("va")).await;
    let r = pod(&cp, lab, 0, "t1", "r", Some("va")).await;

    // 1. The first launcher, on n1: a Port of the workload, the pod's MAC its MAC.
    let a = pod_labelled(
        &cp,
        lab,
        (0, "t1", "virt-launcher-vm1-a", Some("va")),
        (&[VM], &[]),
    )
    .await;
    let ip = vpc_ip(&cp, &a).await;
    let mac = mac_of(&a);
    let vni = vni(&cp, "t1", "va").await;
    let name = port_name(vni, IpAddr::V4(ip));
    let p = ports.get(&name).await.unwrap();
    let labels = p.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get("sdn.cozystack.io/vm-name").map(String::as_str),
        Some("vm1")
    );
    assert_eq!(
        labels.get("sdn.cozystack.io/interface").map(String::as_str),
        Some("eth0")
    );
    assert_eq!(p.spec.mac, mac, "the pod's MAC is its Port's");
    assert_eq!(p.spec.node, lab.nodes[0].name);
    wait("q (n2) reaches the VM on n1", || q.ns.ping(ip, 1, 1));
    eprintln!("PASS launcher a on n1: {ip} {mac} (Port {name})");

    // 2. A second live launcher of vm1 is refused: one live holder per Port.
    let dup = "virt-launcher-vm1-dup";
    let (code, out) = refused_add(&cp, lab, dup, (&[VM], &[])).await;
    assert_ne!(code, 0, "a second live launcher took the Port: {out}");
    assert!(
        out.to_string().contains("already has a live pod"),
        "refused for its reason: {out}"
    );
    let p = ports.get(&name).await.unwrap();
    assert_eq!(p.spec.node, lab.nodes[0].name, "the Port stayed with a");
    assert!(q.ns.ping(ip, 1, 1), "a still answers");
    Api::<Pod>::namespaced(cp.kube.clone(), "t1")
        .delete(dup, &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    eprintln!("PASS a second live launcher refused: {}", out["msg"]);

    // 3. The launcher goes (DEL, Pod deleted): the Port stays the workload's.
    gone(&cp, lab, &a).await;
    drop(a);
    let p = ports.get(&name).await.unwrap();
    assert!(
        p.metadata.deletion_timestamp.is_none(),
        "DEL kept the workload's Port"
    );
    eprintln!("PASS launcher a gone, Port {name} kept");

    storm(&cp, lab, (&ports, &name), (vni, ip), &q).await;

    // 4. The next launcher, on n2: the same address and MAC.
    let b = pod_labelled(
        &cp,
        lab,
        (1, "t1", "virt-launcher-vm1-b", Some("va")),
        (&[VM], &[]),
    )
    .await;
    assert_eq!(vpc_ip(&cp, &b).await, ip, "the same address");
    assert_eq!(mac_of(&b), mac, "the same MAC");
    let p = ports.get(&name).await.unwrap();
    assert_eq!(p.spec.node, lab.nodes[1].name, "the Port points at n2");
    assert_eq!(p.spec.pod_name, "virt-launcher-vm1-b");
    wait("r (n1) reaches the VM on n2", || r.ns.ping(ip, 1, 1));
    let mut ok = false;
    let seen = capture(&b.ns, "eth0", &format!("ether src {mac} and icmp[0] = 0"), || {
        ok = q.ns.ping(ip, 3, 3);
    });
    assert!(ok, "q (same node now) reaches the VM");
    assert!(seen >= 3, "the VM's replies leave with its MAC ({seen} captured)");
    eprintln!("PASS launcher b on n2: {ip} {mac}, {seen} replies captured from {mac}");

    pins(&cp, lab, &ports, vni).await;

    // 5. No launcher left (and no VirtualMachine or instance): released after the grace.
    gone(&cp, lab, &b).await;
    let t = Instant::now();
    until("the workload's Port is released", || async {
        ports.get_opt(&name).await.unwrap().is_none().then_some(())
    })
    .await;
    eprintln!(
        "PASS no launcher left: Port {name} released {:.1} s after the last DEL (grace {GRACE})",
        t.elapsed().as_secs_f64()
    );
    assert!(t.elapsed() >= Duration::from_secs(2), "released before the grace");
}
