//! `make e2e`: the north-south SNAT doors with real packets, asserted by captures taken on the
//! internet host (issue 12: net-0 masquerade and the VPC gateway's NAT; issue 11's last
//! datapath item: tracepath and PMTU from a VPC pod across a narrower outside link). Needs
//! root, ping, tracepath, tcpdump, iperf3, and the agent and CNI binaries built.
//!
//! Layout: a dual-stack two-node lab with the outside world of `cozyplane_lab::outside`: the
//! router `rtr` on the underlay (every node's default route), the internet host `inet`
//! (198.51.100.2, 2001:db8:100::2) behind it, and the LoadBalancer pool (203.0.113.0/26,
//! 2001:db8:cafe::/112) routed by `rtr` to one node. The control plane runs the door loops
//! (`CpOptions { doors: true }`): the stand-in assigns pool addresses to LoadBalancer
//! Services as MetalLB's controller would. Tenant t1's dual-stack VPC a (10.30.0.0/24,
//! fd00:30::/64) has a VPCGateway with NAT, whose `natAddress`/`natAddress6` come from its
//! owned Services; tenant t2's VPC b has no gateway.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, UdpSocket};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cozyplane_apis::v1alpha1::VPCGateway;
use cozyplane_bpf::DropReason;
use cozyplane_bpf::maps::snat_gws::{Gw, SnatGwsMap};
use cozyplane_lab::outside::{INET4, INET6};
use cozyplane_lab::{Lab, LabPod, Netns, Node, Outside};
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

mod common;
use common::{Cp, CpOptions, door_metric, pod, pod_addrs, sources, tenant, tenant_ranges, until, vni, wait};

const NARROW_MTU: u32 = 1280;
const ECHO_PORT: u16 = 7777;
const FLOWS_PER_POD: usize = 1000;

#[test]
fn lab_egress() {
    Lab::run_on(Lab::dual_stack(2), body);
}

fn out(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The gateway `gw` of `ns/vpc` with NAT on, through the real chain: the server's gateway
/// loop owns one LoadBalancer Service per family of the VPC, the stand-in (as MetalLB's
/// controller) assigns each an address from the pool the router attracts, and the loop
/// copies it into `status.natAddress`/`natAddress6`. Returns those addresses, once both are
/// there and each is its family's Service's ingress at the stand-in.
async fn gateway(cp: &Cp, ns: &str, vpc: &str) -> (Ipv4Addr, Ipv6Addr) {
    let api: Api<VPCGateway> = Api::namespaced(cp.sdn.clone(), ns);
    let g: VPCGateway = serde_json::from_value(json!({
        "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "VPCGateway",
        "metadata": {"name": "gw", "namespace": ns},
        "spec": {"vpcRef": {"name": vpc}, "nat": {"enabled": true}}
    }))
    .unwrap();
    api.create(&PostParams::default(), &g).await.unwrap();
    let (nat4, nat6) = until("the gateway's natAddress and natAddress6", || async {
        let st = api.get("gw").await.ok()?.status?;
        Some((st.nat_address.parse().ok()?, st.nat_address6.parse().ok()?))
    })
    .await;
    let svcs: Api<Service> = Api::namespaced(cp.kube.clone(), ns);
    let owned = svcs
        .list(&ListParams::default().labels("sdn.cozystack.io/vpc-gateway=gw"))
        .await
        .unwrap();
    let ingress: HashSet<IpAddr> = owned
        .items
        .iter()
        .flat_map(|s| s.status.iter().flat_map(|st| st.load_balancer.iter()))
        .flat_map(|lb| lb.ingress.iter().flatten())
        .filter_map(|i| i.ip.as_ref()?.parse().ok())
        .collect();
    eprintln!(
        "gateway {ns}/gw: natAddress {nat4}, natAddress6 {nat6}; Services {:?}",
        owned
            .items
            .iter()
            .map(|s| s.metadata.name.clone())
            .collect::<Vec<_>>()
    );
    assert_eq!(owned.items.len(), 2, "one owned Service per family");
    assert_eq!(
        ingress,
        HashSet::from([IpAddr::V4(nat4), IpAddr::V6(nat6)]),
        "the NAT addresses are the Services' ingress"
    );
    (nat4, nat6)
}

fn gateways(n: &Node) -> Vec<(u32, Gw)> {
    SnatGwsMap::from_pin(&n.scratch.pins())
        .and_then(|m| m.entries())
        .unwrap_or_default()
}

/// What the echo server saw: every source (address, port) and the payloads it carried.
type Seen = Arc<Mutex<HashMap<std::net::SocketAddr, HashSet<Vec<u8>>>>>;

/// A UDP echo server in `ns` on every address, port [`ECHO_PORT`]; it runs until the process
/// ends (a thread in the internet host's netns) and records who sent what.
fn echo_server(ns: &Netns) -> Seen {
    let path = ns.path();
    let seen: Seen = Arc::default();
    let log = seen.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let f = std::fs::File::open(&path).unwrap();
        nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
        let s = UdpSocket::bind(("0.0.0.0", ECHO_PORT)).unwrap();
        tx.send(()).unwrap();
        let mut buf = [0u8; 2048];
        while let Ok((n, from)) = s.recv_from(&mut buf) {
            log.lock()
                .unwrap()
                .entry(from)
                .or_default()
                .insert(buf[..n].to_vec());
            let _ = s.send_to(&buf[..n], from);
        }
    });
    rx.recv().unwrap();
    seen
}

/// `n` UDP flows from inside `pod` to the echo server, all open at once: each client sends its
/// own payload (resent every 300 ms until answered) and checks that what comes back is its
/// own. Returns (answered, answered with someone else's payload).
fn flows(pod: &LabPod, n: usize) -> (usize, usize) {
    cozyplane_lab::run_in(&pod.ns, || {
        let socks: Vec<UdpSocket> = (0..n)
            .map(|_| {
                let s = UdpSocket::bind("0.0.0.0:0").unwrap();
                s.set_nonblocking(true).unwrap();
                s.connect((INET4, ECHO_PORT)).unwrap();
                s
            })
            .collect();
        let payload = |i: usize| format!("{}-{i}", pod.name);
        let mut done = vec![false; n];
        let mut wrong = 0;
        let t = Instant::now();
        let mut last_send: Option<Instant> = None;
        let mut buf = [0u8; 256];
        while done.iter().any(|d| !d) && t.elapsed() < Duration::from_secs(30) {
            if last_send.is_none_or(|l| l.elapsed() > Duration::from_millis(300)) {
                for (i, s) in socks.iter().enumerate().filter(|(i, _)| !done[*i]) {
                    let _ = s.send(payload(i).as_bytes());
                }
                last_send = Some(Instant::now());
            }
            for (i, s) in socks.iter().enumerate() {
                while let Ok(k) = s.recv(&mut buf) {
                    if buf[..k] == *payload(i).as_bytes() {
                        done[i] = true;
                    } else {
                        wrong += 1;
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        (done.iter().filter(|d| **d).count(), wrong)
    })
}

async fn body(lab: &mut Lab) {
    let cp = Cp::start_with(lab, CpOptions::doors()).await;
    let lab = &*lab;
    let (n1, n2) = (&lab.nodes[0], &lab.nodes[1]);
    let mut outside = Outside::new(lab, 1500);

    // --- Net 0: a default-network pod reaches the internet host from its node's address, in
    // both families, and gets the replies; its fabric address never shows outside.
    let p0 = pod(&cp, lab, 0, "default", "p0", None).await;
    let addrs = pod_addrs(&p0);
    let fabric6 = addrs
        .iter()
        .find(|a| a.is_ipv6())
        .copied()
        .expect("dual-stack pod");
    let n1_v6 = n1.v6.as_ref().unwrap().1;
    for (to, node_addr, fabric) in [
        (IpAddr::V4(INET4), IpAddr::V4(n1.ip), IpAddr::V4(p0.fabric)),
        (IpAddr::V6(INET6), IpAddr::V6(n1_v6), fabric6),
    ] {
        let mut ok = false;
        let seen = outside.capture("icmp or icmp6", || ok = p0.ns.ping(to, 3, 2));
        let src = sources(&seen);
        eprintln!("p0 -> {to}: replies {ok}, sources on the internet host {src:?}");
        assert!(ok, "p0 got its echo replies from {to}");
        assert!(
            src.contains(&node_addr.to_string()),
            "arrived from the node's address"
        );
        assert!(
            !src.contains(&fabric.to_string()),
            "the fabric address never leaves"
        );
    }
    // TCP too (a stream set up and torn down through the masquerade).
    let server = outside.internet.iperf_server(5201);
    let o = p0.ns.exec(&[
        "timeout",
        "20",
        "iperf3",
        "-c",
        &INET4.to_string(),
        "-t",
        "1",
        "--json",
    ]);
    drop(server);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
    let bytes = v["end"]["sum_received"]["bytes"].as_f64().unwrap_or(0.0);
    assert!(bytes > 1e5, "TCP through the masquerade: {}", out(&o));

    // --- The VPC gateway: dual-stack VPC a leaves as its natAddress / natAddress6, from
    // either node, with the pool attracted to n1; the crossings are metered per door.
    tenant_ranges(&cp, "t1", "a", &["10.30.0.0/24", "fd00:30::/64"]).await;
    tenant(&cp, "t2", "b", "10.40.0.0/24").await;
    let a1 = pod(&cp, lab, 0, "t1", "a1", Some("a")).await;
    let a2 = pod(&cp, lab, 1, "t1", "a2", Some("a")).await;
    let b1 = pod(&cp, lab, 0, "t2", "b1", Some("b")).await;
    let (nat4, nat6) = gateway(&cp, "t1", "a").await;
    outside.attract(lab, 0);
    wait("both agents programmed VPC a's gateway", || {
        [n1, n2]
            .iter()
            .all(|n| gateways(n).iter().any(|(_, g)| *g == (Some(nat4), Some(nat6))))
    });
    let vpc_a = (vni(&cp, "t1", "a").await, "t1", "a");
    // ICMP echo of either family (an IPv6 capture must leave out neighbour discovery).
    let echo6 = "icmp6 and (ip6[40] == 128 or ip6[40] == 129)";
    for p in [&a1, &a2] {
        let node = &lab.nodes[p.node];
        let meter = |door_dir: &str| door_metric(node, "bytes", vpc_a, "gateway", door_dir);
        let (out0, in0) = (meter("out"), meter("in"));
        for (to, nat, filter) in [
            (IpAddr::V4(INET4), IpAddr::V4(nat4), "icmp"),
            (IpAddr::V6(INET6), IpAddr::V6(nat6), echo6),
        ] {
            let mut ok = false;
            let seen = outside.capture(filter, || ok = p.ns.ping(to, 3, 2));
            let src = sources(&seen);
            eprintln!("{} -> {to}: replies {ok}, sources {src:?}", p.name);
            assert!(
                ok,
                "{} got its echo replies from {to} through the gateway",
                p.name
            );
            assert_eq!(
                src,
                HashSet::from([nat.to_string(), to.to_string()]),
                "only the NAT address left"
            );
        }
        // Metered where the door is: the pod's node, both ways (a reply attracted to the
        // other node is un-NATed, and counted, at the node that owns the flow).
        let (out1, in1) = (meter("out"), meter("in"));
        eprintln!(
            "{}: gateway bytes out {out0} -> {out1}, in {in0} -> {in1}",
            node.name
        );
        assert!(out1 >= out0 + 6.0 * 84.0, "gateway/out metered on {}", node.name);
        assert!(in1 >= in0 + 4.0 * 84.0, "gateway/in metered on {}", node.name);
    }

    // --- A VPC without a gateway has no way out: nothing reaches the internet host, and the
    // drop is counted, and metered as VPC b's refusal at the gateway door.
    let vpc_b = (vni(&cp, "t2", "b").await, "t2", "b");
    let before = n1.drops(DropReason::NoGateway);
    let refused = door_metric(n1, "refused_packets", vpc_b, "gateway", "out");
    let mut ok = true;
    let seen = outside.capture("icmp", || ok = b1.ns.ping(INET4, 3, 1));
    assert!(!ok, "b1 (no gateway) got a reply");
    assert!(
        seen.is_empty(),
        "b1's packets reached the internet host: {seen:?}"
    );
    assert!(
        n1.drops(DropReason::NoGateway) >= before + 3,
        "DROP_NO_GATEWAY counted"
    );
    assert!(
        door_metric(n1, "refused_packets", vpc_b, "gateway", "out") >= refused + 3.0,
        "gateway/out refusal metered for VPC b"
    );

    // --- Path MTU from a VPC pod across the narrower outside link (issue 11): the router's
    // "fragmentation needed" about the NATed packet is translated back into a1.
    outside.set_wan_mtu(NARROW_MTU);
    let big = (NARROW_MTU + 100).to_string();
    let mut o = None;
    let frag_needed = cozyplane_lab::capture(&a1.ns, "eth0", "icmp[0] = 3 and icmp[1] = 4", || {
        o = Some(a1.ns.exec(&[
            "ping",
            "-n",
            "-c",
            "2",
            "-W",
            "1",
            "-M",
            "do",
            "-s",
            &big,
            &INET4.to_string(),
        ]));
    });
    let o = o.unwrap();
    eprintln!("ping -M do -s {big}:\n{}", out(&o));
    assert!(frag_needed >= 1, "the ICMP error reached a1 inside its VPC");
    assert!(
        out(&o).contains(&format!("mtu = {NARROW_MTU}")) || out(&o).contains(&format!("mtu={NARROW_MTU}")),
        "ping saw the path MTU"
    );
    a1.ns.ip_ok(&["route", "flush", "cache"]);
    let o = a1
        .ns
        .exec(&["timeout", "60", "tracepath", "-n", "-m", "6", &INET4.to_string()]);
    let trace = out(&o);
    eprintln!("tracepath a1 -> inet:\n{trace}");
    assert!(
        trace.contains(&format!("pmtu {NARROW_MTU}")),
        "reduced path MTU reported"
    );
    assert!(
        trace.contains("reached"),
        "the internet host's port unreachable made it back"
    );
    outside.set_wan_mtu(1500);

    // --- NAT ports never collide: 2,000 concurrent UDP flows from a1 (n1) and a2 (n2) through
    // one NAT address attracted to n2, which does not own a1's flows: each client gets its
    // own payload back, none gets another's.
    outside.attract(lab, 1);
    let seen = echo_server(&outside.internet);
    let ((got1, wrong1), (got2, wrong2)) = std::thread::scope(|s| {
        let h1 = s.spawn(|| flows(&a1, FLOWS_PER_POD));
        let h2 = s.spawn(|| flows(&a2, FLOWS_PER_POD));
        (h1.join().unwrap(), h2.join().unwrap())
    });
    eprintln!(
        "flows: a1 {got1}/{FLOWS_PER_POD} (wrong {wrong1}), a2 {got2}/{FLOWS_PER_POD} (wrong {wrong2})"
    );
    // What the internet host saw: each flow from a NAT port of its own, no port shared.
    let seen = seen.lock().unwrap();
    let shared = seen.values().filter(|p| p.len() > 1).count();
    let from_nat = seen.keys().filter(|a| a.ip() == IpAddr::V4(nat4)).count();
    eprintln!(
        "internet host: {} sources ({from_nat} from the NAT address), {shared} shared by flows",
        seen.len()
    );
    assert_eq!(shared, 0, "a NAT port carried two flows at once");
    assert_eq!(
        from_nat,
        2 * FLOWS_PER_POD,
        "one NAT port per flow, all from the NAT address"
    );
    assert_eq!(seen.len(), 2 * FLOWS_PER_POD, "nothing left un-NATed");
    assert_eq!((wrong1, wrong2), (0, 0), "no reply landed in the wrong flow");
    assert_eq!(
        (got1, got2),
        (FLOWS_PER_POD, FLOWS_PER_POD),
        "every flow got its reply"
    );
    for n in [n1, n2] {
        assert_eq!(
            n.drops(DropReason::SnatFull),
            0,
            "{}: no NAT port ran out",
            n.name
        );
    }
}
