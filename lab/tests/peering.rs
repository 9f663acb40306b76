//! `make e2e`, three nodes: VPC peering and overlay hygiene with real packets (issue 11,
//! items 1, 2 and 7). Needs root, ping, tcpdump, iperf3, and the agent and CNI binaries
//! built. The control-plane helpers are shared with `e2e.rs` (`common/`).
//!
//! Layout: VPC a (10.20.0.0/24) with a1 on n1 and a2 on n2; b (10.21.0.0/24) with b1 on n1
//! and b3 on n3; c (10.22.0.0/24) with c2 on n2; d (10.20.0.0/24, a's range) with d3 on n3.
//! Peerings: a–b and b–c (both halves each), a–d (both halves, overlapping: stays Pending).
//! The VPCs live in the test server's fixture namespaces: a in t1, b in t2, c in team-a, d
//! in team-b.

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use cozyplane_apis::v1alpha1::{VPC, VPCPeering};
use cozyplane_bpf::DropReason;
use cozyplane_bpf::maps::xnet_allow::XnetAllowMap;
use cozyplane_lab::{CTL_IP, Lab, LabPod, Netns, Node, Proc, capture, start_tcpdump, stop_tcpdump};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;

mod common;
use common::{Cp, half, metric, now, pod, stamps, tenant, vni, vpc_ip, wait};

/// `status.phase` of a peering half once the status loop has written one.
async fn phase(cp: &Cp, ns: &str, name: &str) -> String {
    let t = Instant::now();
    loop {
        let p = Api::<VPCPeering>::namespaced(cp.sdn.clone(), ns)
            .get(name)
            .await
            .unwrap();
        let ph = p.status.map(|s| s.phase).unwrap_or_default();
        if !ph.is_empty() {
            return ph;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "peering {ns}/{name} got no phase"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn allows(pins: &Path, s: u32, t: u32) -> bool {
    XnetAllowMap::from_pin(pins)
        .and_then(|m| m.entries())
        .unwrap_or_default()
        .iter()
        .any(|(k, _)| *k == (s, t))
}

#[test]
fn lab_peering() {
    Lab::run(3, body);
}

async fn body(lab: &mut Lab) {
    let cp = Cp::start(lab).await;
    let lab = &*lab;
    let (n1, n2, n3) = (&lab.nodes[0], &lab.nodes[1], &lab.nodes[2]);

    tenant(&cp, "t1", "a", "10.20.0.0/24").await;
    tenant(&cp, "t2", "b", "10.21.0.0/24").await;
    tenant(&cp, "team-a", "c", "10.22.0.0/24").await;
    tenant(&cp, "team-b", "d", "10.20.0.0/24").await;
    let (va, vb, vc, vd) = (
        vni(&cp, "t1", "a").await,
        vni(&cp, "t2", "b").await,
        vni(&cp, "team-a", "c").await,
        vni(&cp, "team-b", "d").await,
    );
    let a1 = pod(&cp, lab, 0, "t1", "a1", Some("a")).await;
    let a2 = pod(&cp, lab, 1, "t1", "a2", Some("a")).await;
    let b1 = pod(&cp, lab, 0, "t2", "b1", Some("b")).await;
    let b3 = pod(&cp, lab, 2, "t2", "b3", Some("b")).await;
    let c2 = pod(&cp, lab, 1, "team-a", "c2", Some("c")).await;
    let d3 = pod(&cp, lab, 2, "team-b", "d3", Some("d")).await;
    let (ia1, ia2, ib1, ib3, ic2, id3) = (
        vpc_ip(&cp, &a1).await,
        vpc_ip(&cp, &a2).await,
        vpc_ip(&cp, &b1).await,
        vpc_ip(&cp, &b3).await,
        vpc_ip(&cp, &c2).await,
        vpc_ip(&cp, &d3).await,
    );
    eprintln!("a {ia1} {ia2} (vni {va}), b {ib1} {ib3} (vni {vb}), c {ic2} (vni {vc}), d {id3} (vni {vd})");
    wait("every node learns the others' VPC pods", || {
        n1.remote(vb, ib3).is_some() && n3.remote(va, ia1).is_some() && n1.remote(vc, ic2).is_some()
    });
    // The VPC pods' MTU is the underlay's minus the VXLAN overhead (50).
    let mtu = |ns: &Netns, dev: &str| -> u32 {
        let out = ns.ip_ok(&["-o", "link", "show", "dev", dev]);
        let after = out.split(" mtu ").nth(1).unwrap_or_default();
        after
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .parse()
            .unwrap()
    };
    for (p, n) in [(&a1, n1), (&b3, n3)] {
        assert_eq!(mtu(&p.ns, "eth0"), mtu(&n.ns, "ul0") - 50, "{} MTU", p.name);
    }
    // Unpeered, nothing crosses.
    assert!(!a1.ns.ping(ib1, 2, 1), "a1 -> b1 before any peering");

    // --- a–b, b–c and the overlapping a–d, each with both halves.
    let ab = half(&cp, ("t1", "a"), ("t2", "b")).await;
    let ba = half(&cp, ("t2", "b"), ("t1", "a")).await;
    half(&cp, ("t2", "b"), ("team-a", "c")).await;
    half(&cp, ("team-a", "c"), ("t2", "b")).await;
    let ad = half(&cp, ("t1", "a"), ("team-b", "d")).await;
    half(&cp, ("team-b", "d"), ("t1", "a")).await;
    for n in &lab.nodes {
        let pins = n.scratch.pins();
        wait(&format!("{} programs a-b and b-c", n.name), || {
            allows(&pins, va, vb) && allows(&pins, vb, va) && allows(&pins, vb, vc) && allows(&pins, vc, vb)
        });
    }

    // Peered pods talk both ways, same node (n1) and across nodes (n1 <-> n3, n1 <-> n2).
    assert!(a1.ns.ping(ib1, 3, 3), "a1 -> b1, same node");
    assert!(b1.ns.ping(ia1, 3, 3), "b1 -> a1, same node");
    assert!(a1.ns.ping(ib3, 3, 3), "a1 (n1) -> b3 (n3)");
    assert!(b3.ns.ping(ia1, 3, 3), "b3 (n3) -> a1 (n1)");
    assert!(a2.ns.ping(ib3, 3, 3), "a2 (n2) -> b3 (n3)");
    assert!(b1.ns.ping(ic2, 3, 3), "b1 (n1) -> c2 (n2)");
    assert!(c2.ns.ping(ib1, 3, 3), "c2 (n2) -> b1 (n1)");
    // Native addresses: b3 sees a1's own VPC address.
    let seen = capture(&b3.ns, "eth0", &format!("icmp and src host {ia1}"), || {
        let _ = a1.ns.ping(ib3, 3, 3);
    });
    assert!(seen >= 3, "b3 sees a1's VPC address as the source ({seen})");
    let text = n1.metrics();
    let crossed = metric(
        &text,
        &format!("cozyplane_xnet_packets_total{{from=\"{va}\",to=\"{vb}\"}}"),
    );
    assert!(
        crossed >= 6.0,
        "n1's /metrics counts a->b crossings ({crossed}):\n{text}"
    );
    eprintln!("PASS peered VPC pods talk both ways, same node and across nodes, native addresses");

    // --- Not transitive: a–b and b–c give no a–c.
    // To a, c's range is no address it may reach: outside the cluster as far as a is
    // concerned, where only a gateway would take it (a has none).
    let shut = |n: &Node| n.drops(DropReason::VpcIsolation) + n.drops(DropReason::NoGateway);
    let iso0 = shut(n1);
    assert!(!a1.ns.ping(ic2, 2, 1), "a1 -> c2 through b's peerings");
    assert!(!c2.ns.ping(ia1, 2, 1), "c2 -> a1 through b's peerings");
    assert!(
        shut(n1) >= iso0 + 2,
        "a1's packets for c are dropped and counted on n1 (no peering, no door)"
    );
    assert!(!allows(&n1.scratch.pins(), va, vc) && !allows(&n2.scratch.pins(), vc, va));
    eprintln!("PASS a-b and b-c peered gives no a-c (dropped and counted)");

    // --- The overlapping pair stays Pending; a1's packets for d3's address never reach d3.
    assert_eq!(phase(&cp, "t1", &ad).await, "Pending", "a-d overlaps");
    assert_eq!(phase(&cp, "t1", &ab).await, "Ready", "a-b");
    for n in &lab.nodes {
        assert!(
            !allows(&n.scratch.pins(), va, vd) && !allows(&n.scratch.pins(), vd, va),
            "{} programs no a-d",
            n.name
        );
    }
    let seen = capture(&d3.ns, "eth0", "icmp", || {
        let _ = a1.ns.ping(id3, 3, 0);
    });
    assert_eq!(seen, 0, "a capture in d3 (n3) sees nothing of a1 (n1)");
    eprintln!("PASS an overlapping pair stays Pending and nothing crosses");

    // --- Deleting a half cuts established TCP streams at once: a1 (n1) -> b3 (n3) across
    // nodes and b1 -> a1 on n1. Arrival times are taken by captures inside the receiving
    // pods, one per direction of each stream, on the kernel's clock.
    let dir = tempfile::tempdir().unwrap();
    let srv_b3 = b3.ns.iperf_server(5301);
    let srv_a1 = a1.ns.iperf_server(5302);
    let flows = [
        // (what, receiving pod, capture filter)
        ("a1->b3 data", &b3, format!("tcp and src host {ia1}")),
        ("a1->b3 acks", &a1, format!("tcp and src host {ib3}")),
        ("b1->a1 data", &a1, format!("tcp and src host {ib1}")),
        (
            "b1->a1 acks",
            &b1,
            format!("tcp and src host {ia1} and src port 5302"),
        ),
    ];
    let caps: Vec<_> = flows
        .iter()
        .enumerate()
        .map(|(i, (_, p, f))| {
            let file = dir.path().join(format!("{i}.pcap"));
            (start_tcpdump(&p.ns, "eth0", f, &file), file)
        })
        .collect();
    let stream = |from: &LabPod, to: Ipv4Addr, port: u16| {
        Proc(
            from.ns
                .command(&[
                    "iperf3",
                    "-c",
                    &to.to_string(),
                    "-p",
                    &port.to_string(),
                    "-t",
                    "8",
                    // Small writes at a steady rate: a packet about every millisecond,
                    // so the last arrival says when the path closed.
                    "-b",
                    "10M",
                    "-l",
                    "1400",
                    "--connect-timeout",
                    "3000",
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        )
    };
    let cli1 = stream(&a1, ib3, 5301);
    let cli2 = stream(&b1, ia1, 5302);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let cut = now();
    Api::<VPCPeering>::namespaced(cp.sdn.clone(), "t2")
        .delete(&ba, &DeleteParams::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    drop((cli1, cli2, srv_b3, srv_a1));
    let mut report = Vec::new();
    for ((what, _, _), (p, file)) in flows.iter().zip(caps) {
        stop_tcpdump(p);
        let ts = stamps(&file);
        let before = ts.iter().filter(|t| **t < cut).count();
        let last = ts.iter().copied().fold(f64::MIN, f64::max);
        assert!(
            before >= 10 && last > cut - 0.2,
            "{what}: the stream was running when the half was deleted ({before} packets before)"
        );
        let after = last - cut;
        eprintln!(
            "{what}: {before} packets before the delete, last one {:.0} ms after it",
            after * 1000.0
        );
        report.push((*what, after));
    }
    for (what, after) in &report {
        assert!(
            *after < 1.0,
            "{what}: packets still passed {after:.3} s after the delete"
        );
    }
    for n in &lab.nodes {
        assert!(!allows(&n.scratch.pins(), va, vb), "{} still allows a->b", n.name);
    }
    assert!(!a1.ns.ping(ib1, 2, 1), "a1 -> b1 after the cut");
    assert!(b1.ns.ping(ic2, 2, 2), "b-c is untouched by the a-b cut");
    eprintln!("PASS deleting a half cuts established TCP streams in both directions within 1 s");

    // --- A CIDR change that makes b and c overlap (c grows to 10.16.0.0/12, which holds
    // b's range) removes their path on every node.
    let patch = json!({"spec": {"cidrs": ["10.16.0.0/12"]}});
    Api::<VPC>::namespaced(cp.sdn.clone(), "team-a")
        .patch("c", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    for n in &lab.nodes {
        let pins = n.scratch.pins();
        wait(&format!("{} removes b-c", n.name), || {
            !allows(&pins, vb, vc) && !allows(&pins, vc, vb)
        });
    }
    assert!(!b1.ns.ping(ic2, 2, 1), "b1 -> c2 once c overlaps b");
    eprintln!("PASS a CIDR change that makes a peered pair overlap removes the path");

    // --- Overlay hygiene: VXLAN from the control namespace (on the underlay, but no node)
    // under a's VNI, addressed to a1: dropped on n1 and counted, never delivered.
    let src0 = n1.drops(DropReason::OverlaySource);
    let ctl = &lab.ctl;
    ctl.ip_ok(&[
        "link",
        "add",
        "vxs",
        "type",
        "vxlan",
        "id",
        &va.to_string(),
        "remote",
        &n1.ip.to_string(),
        "local",
        &CTL_IP.to_string(),
        "dstport",
        "4789",
        "dev",
        "ul0",
    ]);
    ctl.ip_ok(&["addr", "add", "10.20.0.250/24", "dev", "vxs"]);
    ctl.ip_ok(&["link", "set", "vxs", "up"]);
    ctl.ip_ok(&[
        "neigh",
        "replace",
        &ia1.to_string(),
        "lladdr",
        "02:cf:cf:cf:cf:cf",
        "dev",
        "vxs",
    ]);
    let seen = capture(&a1.ns, "eth0", "icmp and src host 10.20.0.250", || {
        let _ = ctl.exec(&[
            "ping",
            "-n",
            "-q",
            "-c",
            "5",
            "-i",
            "0.05",
            "-W",
            "1",
            &ia1.to_string(),
        ]);
    });
    ctl.ip_ok(&["link", "del", "vxs"]);
    assert_eq!(seen, 0, "a forged overlay packet reaches no pod");
    let forged = n1.drops(DropReason::OverlaySource) - src0;
    assert!(forged >= 5, "forged overlay packets counted on n1 ({forged})");
    eprintln!("PASS overlay packets from an unknown outer source are dropped and counted ({forged})");
}
