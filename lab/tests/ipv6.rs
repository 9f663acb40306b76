//! `make e2e`, two nodes, tunnels over IPv4: IPv6 and dual-stack VPCs and the dual-stack
//! default network with real packets (issue 11, item 4). Needs root, ping, iperf3, and the
//! agent and CNI binaries built. The control-plane helpers are shared with `e2e.rs`
//! (`common/`).
//!
//! Layout: the default network is dual-stack ([`Lab::dual_stack`]: each node has a v4 and a
//! v6 fabric block; the nodes' host stacks also have a v6 underlay address, the VXLAN tunnels
//! stay v4). VPC `six` (t1, `fd00:6::/64`, IPv6 only) with s1 and s2 on n1 and s3 on n2; VPC
//! `dual` (t2, `10.30.0.0/24` + `fd00:30::/64`) with d1 on n1 and d2 on n2; default-network
//! pods a on n1 and b on n2.

use std::net::IpAddr;

use cozyplane_apis::v1alpha1::Port;
use cozyplane_lab::{Lab, LabPod, Netns, capture, invoke_cni};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};

mod common;
use common::net::{drops, pod_addr, remote_of};
use common::{Cp, half, pod, pod_addrs, tenant, tenant_ranges, wait};

/// The pod's fabric address of `family` (4 or 6), from its CNI result.
fn fabric(p: &LabPod, family: u8) -> IpAddr {
    p.result["ips"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["address"].as_str()?.split('/').next()?.parse::<IpAddr>().ok())
        .find(|a| (family == 4) == a.is_ipv4())
        .unwrap_or_else(|| panic!("{}: no IPv{family} fabric address in {}", p.name, p.result))
}

/// A one-second TCP stream (iperf3) from `client` to `server` at `to`. A refused connection
/// is tried again (twice): on a loaded machine the server may not listen yet.
fn tcp(client: &LabPod, server: &LabPod, to: IpAddr, port: u16) {
    tcp_from(&client.ns, &client.name, server, to, port);
}

/// [`tcp`] from any namespace (a node's, as a kubelet probe comes).
fn tcp_from(client: &Netns, client_name: &str, server: &LabPod, to: IpAddr, port: u16) {
    let _srv = server.ns.iperf_server(port);
    let run = || {
        client.exec(&[
            "iperf3",
            "-c",
            &to.to_string(),
            "-p",
            &port.to_string(),
            "-t",
            "1",
            "--connect-timeout",
            "3000",
        ])
    };
    let mut out = run();
    for _ in 0..2 {
        if out.status.success() || !String::from_utf8_lossy(&out.stderr).contains("refused") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
        out = run();
    }
    assert!(
        out.status.success(),
        "TCP {} -> {} ({to}): {}{}",
        client_name,
        server.name,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Pings both ways.
fn ping_both(a: &LabPod, b: &LabPod, family: u8) {
    let (x, y) = (pod_addr(a, family), pod_addr(b, family));
    assert!(a.ns.ping(y, 3, 3), "IPv{family} {} -> {} ({y})", a.name, b.name);
    assert!(b.ns.ping(x, 3, 3), "IPv{family} {} -> {} ({x})", b.name, a.name);
}

#[test]
fn lab_ipv6() {
    // One lab after the other (not two tests in parallel): the machine is small.
    Lab::run_on(Lab::dual_stack(2), body);
    Lab::run_on(Lab::v6_underlay(2), v6_underlay);
}

/// The same cluster with IPv6 tunnels: the outer packets are IPv6, both families inside.
async fn v6_underlay(lab: &mut Lab) {
    let cp = Cp::start(lab).await;
    let lab = &*lab;
    let n2 = &lab.nodes[1];
    tenant_ranges(&cp, "t2", "dual", &["10.30.0.0/24", "fd00:30::/64"]).await;
    let d1 = pod(&cp, lab, 0, "t2", "d1", Some("t2/dual")).await;
    let d2 = pod(&cp, lab, 1, "t2", "d2", Some("t2/dual")).await;
    wait("n1 learns d2's addresses", || {
        remote_of(lab, 0, pod_addr(&d2, 4)) && remote_of(lab, 0, pod_addr(&d2, 6))
    });
    wait("n2 learns d1's addresses", || {
        remote_of(lab, 1, pod_addr(&d1, 4)) && remote_of(lab, 1, pod_addr(&d1, 6))
    });
    let d2v4 = pod_addr(&d2, 4);
    let v6_outer = capture(&n2.ns, "ul0", "ip6 and udp port 4789", || {
        assert!(
            d1.ns.ping(d2v4, 3, 3),
            "VPC v4 d1 -> d2 over the v6 underlay; drops {:?}",
            lab.nodes.iter().map(drops).collect::<Vec<_>>()
        );
    });
    assert!(
        v6_outer >= 6,
        "VXLAN over IPv6 on n2's underlay: {v6_outer} packets"
    );
    let v4_outer = capture(&n2.ns, "ul0", "ip and udp port 4789", || {
        ping_both(&d1, &d2, 6);
    });
    assert_eq!(v4_outer, 0, "no VXLAN over IPv4 left");
    ping_both(&d1, &d2, 4);
    tcp(&d1, &d2, pod_addr(&d2, 6), 5311);

    let a = pod(&cp, lab, 0, "default", "a", None).await;
    let b = pod(&cp, lab, 1, "default", "b", None).await;
    ping_both(&a, &b, 4);
    ping_both(&a, &b, 6);
    let n1 = &lab.nodes[0];
    assert!(
        n1.ns.ping(fabric(&b, 4), 3, 3),
        "node n1 -> b (v4) over the v6 underlay"
    );
    assert!(
        n1.ns.ping(fabric(&b, 6), 3, 3),
        "node n1 -> b (v6) over the v6 underlay"
    );
    assert!(
        n2.ns.ping(fabric(&d1, 6), 3, 3),
        "node n2 -> d1's v6 fabric address"
    );
    // Nothing here is meant to be dropped: the hosts' and pods' link-scoped IPv6 (MLD, NDP)
    // is no isolation or spoofing drop.
    for n in &lab.nodes {
        assert_eq!(drops(n), vec![], "{}: drops", n.name);
    }
}

async fn body(lab: &mut Lab) {
    let cp = Cp::start(lab).await;
    let lab = &*lab;

    // --- An IPv6-only VPC on the IPv4 underlay.
    tenant(&cp, "t1", "six", "fd00:6::/64").await;
    let s1 = pod(&cp, lab, 0, "t1", "s1", Some("t1/six")).await;
    let s2 = pod(&cp, lab, 0, "t1", "s2", Some("t1/six")).await;
    let s3 = pod(&cp, lab, 1, "t1", "s3", Some("t1/six")).await;
    for p in [&s1, &s2, &s3] {
        let a = pod_addrs(p);
        assert!(
            a.len() == 1 && a[0].is_ipv6(),
            "{}: one IPv6 VPC address, got {a:?}",
            p.name
        );
    }
    let s3_addr = pod_addr(&s3, 6);
    let s1_addr = pod_addr(&s1, 6);
    wait("n1 learns s3's node", || remote_of(lab, 0, s3_addr));
    wait("n2 learns s1's node", || remote_of(lab, 1, s1_addr));
    ping_both(&s1, &s2, 6); // same node
    ping_both(&s1, &s3, 6); // across nodes, v6 inside v4
    tcp(&s1, &s2, pod_addr(&s2, 6), 5301);
    tcp(&s3, &s1, s1_addr, 5302);
    tcp(&s1, &s3, s3_addr, 5303);
    // The gateway's neighbour entry came from the datapath's advertisement (no interface
    // owns fe80::1 and no static entry is made).
    let neigh = s1.ns.ip_ok(&["-6", "neigh", "show", "dev", "eth0"]);
    assert!(
        neigh
            .lines()
            .any(|l| l.starts_with("fe80::1 ") && l.contains("02:cf:00:00:00:01") && l.contains("router")),
        "s1's neighbour table: {neigh}"
    );

    // --- A dual-stack VPC: one address (and one Port) per family.
    tenant_ranges(&cp, "t2", "dual", &["10.30.0.0/24", "fd00:30::/64"]).await;
    let d1 = pod(&cp, lab, 0, "t2", "d1", Some("t2/dual")).await;
    let d2 = pod(&cp, lab, 1, "t2", "d2", Some("t2/dual")).await;
    for p in [&d1, &d2] {
        let (v4, v6) = (pod_addr(p, 4), pod_addr(p, 6));
        let ports = Api::<Port>::all(cp.sdn.clone())
            .list(&ListParams::default())
            .await
            .unwrap();
        let mut held: Vec<IpAddr> = ports
            .items
            .iter()
            .filter(|x| x.spec.pod_namespace == "t2" && x.spec.pod_name == p.name)
            .map(|x| x.spec.ip.parse().unwrap())
            .collect();
        held.sort();
        assert_eq!(held, vec![v4, v6], "{}: one Port per family", p.name);
    }
    let (d2v4, d2v6) = (pod_addr(&d2, 4), pod_addr(&d2, 6));
    wait("n1 learns d2's addresses", || {
        remote_of(lab, 0, d2v4) && remote_of(lab, 0, d2v6)
    });
    wait("n2 learns d1's addresses", || {
        remote_of(lab, 1, pod_addr(&d1, 4)) && remote_of(lab, 1, pod_addr(&d1, 6))
    });
    ping_both(&d1, &d2, 4);
    ping_both(&d1, &d2, 6);
    tcp(&d1, &d2, d2v6, 5304);
    tcp(&d2, &d1, pod_addr(&d1, 4), 5305);
    // The families stay apart from the other VPC: s1 reaches no address of d.
    assert!(
        !s1.ns.ping(d2v6, 2, 1),
        "v6-only VPC -> dual-stack VPC must not pass"
    );

    // --- IPv6 peering: six (v6-only) and dual (dual-stack) peered, both halves; v6 pods talk
    // with their own addresses, same node (s1, d1 on n1) and across nodes.
    half(&cp, ("t1", "six"), ("t2", "dual")).await;
    half(&cp, ("t2", "dual"), ("t1", "six")).await;
    wait("the v6 peering is programmed (s1 -> d2)", || {
        s1.ns.ping(d2v6, 1, 1)
    });
    let d1v6 = pod_addr(&d1, 6);
    assert!(s1.ns.ping(d1v6, 3, 3), "s1 -> d1, peered, same node (v6)");
    assert!(d1.ns.ping(s1_addr, 3, 3), "d1 -> s1, peered, same node (v6)");
    assert!(d2.ns.ping(s1_addr, 3, 3), "d2 (n2) -> s1 (n1), peered (v6)");
    assert!(s3.ns.ping(d1v6, 3, 3), "s3 (n2) -> d1 (n1), peered (v6)");
    let seen = capture(&d2.ns, "eth0", &format!("icmp6 and src host {s1_addr}"), || {
        let _ = s1.ns.ping(d2v6, 3, 3);
    });
    assert!(seen >= 3, "d2 sees s1's own VPC address ({seen})");

    // --- The dual-stack default network: one fabric address per family.
    let (n1, n2) = (&lab.nodes[0], &lab.nodes[1]);
    let a = pod(&cp, lab, 0, "default", "a", None).await;
    let b = pod(&cp, lab, 1, "default", "b", None).await;
    for p in [&a, &b] {
        let (f4, f6) = (fabric(p, 4), fabric(p, 6));
        let mut have = pod_addrs(p);
        have.sort();
        assert_eq!(
            have,
            vec![f4, f6],
            "{}: the pod has its two fabric addresses",
            p.name
        );
        let st = Api::<Pod>::namespaced(cp.kube.clone(), "default")
            .get(&p.name)
            .await
            .unwrap()
            .status
            .unwrap();
        let ips: Vec<String> = st.pod_ips.unwrap_or_default().into_iter().map(|i| i.ip).collect();
        assert_eq!(
            ips,
            vec![f4.to_string(), f6.to_string()],
            "{}: status.podIPs",
            p.name
        );
    }
    let (b4, b6) = (fabric(&b, 4), fabric(&b, 6));
    ping_both(&a, &b, 4);
    ping_both(&a, &b, 6);
    tcp(&a, &b, b6, 5306);
    tcp(&b, &a, fabric(&a, 6), 5307);
    // Node <-> pod in both families, across nodes (host routes into the tunnel).
    let (n1v6, n2v6) = (n1.v6.as_ref().unwrap().1, n2.v6.as_ref().unwrap().1);
    assert!(n1.ns.ping(b4, 3, 3), "node n1 -> b (v4)");
    assert!(n1.ns.ping(b6, 3, 3), "node n1 -> b (v6)");
    assert!(n2.ns.ping(fabric(&a, 6), 3, 3), "node n2 -> a (v6)");
    assert!(b.ns.ping(n1v6, 3, 3), "b -> node n1 (v6)");
    assert!(a.ns.ping(n2v6, 3, 3), "a -> node n2 (v6)");

    // --- The fabric bridge for IPv6: the fabric address of each family reaches the VPC
    // address of that family (kubelet probes to status.podIPs), on the node and across.
    assert!(
        n1.ns.ping(fabric(&s1, 6), 3, 3),
        "node n1 -> s1's v6 fabric address"
    );
    assert!(
        n2.ns.ping(fabric(&s1, 6), 3, 3),
        "node n2 -> s1's v6 fabric address"
    );
    assert!(b.ns.ping(fabric(&s1, 6), 3, 3), "pod b -> s1's v6 fabric address");
    assert!(
        n2.ns.ping(fabric(&d1, 4), 3, 3),
        "node n2 -> d1's v4 fabric address"
    );
    assert!(
        n2.ns.ping(fabric(&d1, 6), 3, 3),
        "node n2 -> d1's v6 fabric address"
    );
    tcp(&b, &d1, fabric(&d1, 6), 5308);
    // NAT46: a v6-only VPC pod's v4 fabric address (its status.podIP where the default
    // network's primary family is v4) is translated by the bridge (lib/xlat.h). The node, as
    // a kubelet probe comes, the other node and a default-network pod reach it by ping and
    // TCP; s1 listens on IPv6 only and sees the client as fe80::1.
    let s1v4 = fabric(&s1, 4);
    assert!(n1.ns.ping(s1v4, 3, 3), "node n1 -> s1's v4 fabric address");
    assert!(n2.ns.ping(s1v4, 3, 3), "node n2 -> s1's v4 fabric address");
    assert!(b.ns.ping(s1v4, 3, 3), "pod b -> s1's v4 fabric address");
    tcp_from(&n1.ns, "node n1", &s1, s1v4, 5309);
    tcp_from(&n2.ns, "node n2", &s1, s1v4, 5310);
    tcp(&b, &s1, s1v4, 5311);

    // --- CHECK of dual-stack pods, and DEL of a dual-stack VPC pod: both Ports go, and so
    // do both of its endpoints.
    for (p, ns) in [(&a, "default"), (&d1, "t2")] {
        let mut conf = n1.conf();
        conf["prevResult"] = p.result.clone();
        let (code, v) = invoke_cni(n1, "CHECK", &p.cid, &p.ns.path(), (ns, &p.name, &p.uid), &conf);
        assert_eq!(code, 0, "CHECK {}: {v}", p.name);
    }
    let (d1v4, d1v6) = (pod_addr(&d1, 4), pod_addr(&d1, 6));
    let (code, v) = invoke_cni(
        n1,
        "DEL",
        &d1.cid,
        &d1.ns.path(),
        ("t2", "d1", &d1.uid),
        &n1.conf(),
    );
    assert_eq!(code, 0, "DEL d1: {v}");
    let left = Api::<Port>::all(cp.sdn.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|x| x.spec.pod_name == "d1")
        .count();
    assert_eq!(left, 0, "DEL deletes both of d1's Ports");
    let eps = cozyplane_bpf::maps::endpoints::EndpointsMap::from_pin(&n1.scratch.pins()).unwrap();
    let keys: Vec<IpAddr> = eps
        .inner()
        .keys()
        .filter_map(Result::ok)
        .map(|k| IpAddr::from(k.ip))
        .collect();
    assert!(
        !keys.contains(&d1v4) && !keys.contains(&d1v6),
        "d1's endpoints are gone: {keys:?}"
    );
    assert!(!d2.ns.ping(d1v6, 2, 1), "deleted pod unreachable");
}
