//! `make e2e`: the inbound doors of a VPC with real packets from the internet host (issue 12):
//! a Floating IP (1:1 NAT both ways, the client's address preserved, winning over the
//! gateway for its target; the younger of two FloatingIPs of one target gets nothing) and
//! LoadBalancer ingress into the VPC (refused until the gateway admits it), each crossing
//! metered per door on the agents' `/metrics`. Needs root, ping, tcpdump, and the agent and
//! CNI binaries built.
//!
//! The whole chain runs: the server's FloatingIP and gateway loops own LoadBalancer Services,
//! the kube stand-in assigns their addresses from the pool (as MetalLB's controller does) and
//! the lab's router `rtr` attracts the pool to one node (as MetalLB's L2 or BGP mode would);
//! the agents program the maps from the FloatingIPs' and gateways' status. Nobody writes a
//! status by hand.
//!
//! Layout: two nodes and the outside world of `cozyplane_lab::outside` (`inet`
//! 198.51.100.2 behind `rtr`). Tenant t1's VPC a (10.60.0.0/24) has a VPCGateway with NAT
//! and, at first, `ingress.loadBalancer: false`; pod f1 on n1 has the Floating IP, pod f2 on
//! n2 is the backend of the LoadBalancer Service `web` (port 80 → 8080).

use std::collections::HashSet;
use std::io::{BufRead as _, BufReader, Write as _};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cozyplane_apis::v1alpha1::{FloatingIP, VPCGateway};
use cozyplane_bpf::DropReason;
use cozyplane_bpf::maps::fip_in::FipInMap;
use cozyplane_bpf::maps::lbg_front::LbgFrontMap;
use cozyplane_bpf::maps::lbg_ingress::LbgIngressMap;
use cozyplane_lab::outside::INET4;
use cozyplane_lab::{Lab, LabPod, Node, Outside, capture, run_in};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

mod common;
use common::{Cp, CpOptions, door_metric, pod, tenant, until, vni, vpc_ip, wait};

const APP_PORT: u16 = 8080;
const LB_PORT: u16 = 80;
const TCP: u8 = 6;

#[test]
fn lab_fip() {
    Lab::run_on(Lab::new(2), body);
}

/// Sources of the packets in tcpdump lines (`IP a.b.c.d[.port] > ...`), ports cut.
fn sources(lines: &[String]) -> HashSet<String> {
    lines
        .iter()
        .filter_map(|l| {
            let mut w = l.split_whitespace().skip_while(|w| *w != "IP");
            w.next()?;
            Some(w.next()?.split('.').take(4).collect::<Vec<_>>().join("."))
        })
        .collect()
}

/// Who connected to a [`tcp_server`].
type Peers = Arc<Mutex<Vec<SocketAddr>>>;

/// A TCP server inside `p` on [`APP_PORT`], every address: it records each client's address
/// as the pod sees it and answers the pod's name. Runs until the process ends (a thread in
/// the pod's netns).
fn tcp_server(p: &LabPod) -> Peers {
    let path = p.ns.path();
    let name = p.name.clone();
    let peers: Peers = Arc::default();
    let log = peers.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let f = std::fs::File::open(&path).unwrap();
        nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
        let l = TcpListener::bind(("0.0.0.0", APP_PORT)).unwrap();
        tx.send(()).unwrap();
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            if let Ok(a) = c.peer_addr() {
                log.lock().unwrap().push(a);
            }
            let _ = writeln!(c, "{name}");
        }
    });
    rx.recv().unwrap();
    peers
}

/// One TCP connection from the internet host to `to:port`: the first line answered, or
/// `None` if no connection was made (2 s to connect, as a client gives up).
fn connect(outside: &Outside, to: IpAddr, port: u16) -> Option<String> {
    run_in(&outside.internet, || {
        let s = TcpStream::connect_timeout(&SocketAddr::new(to, port), Duration::from_secs(2)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line).ok()?;
        Some(line.trim().to_string())
    })
}

async fn floating_ip(cp: &Cp, name: &str, target: Ipv4Addr) {
    let f: FloatingIP = serde_json::from_value(json!({
        "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "FloatingIP",
        "metadata": {"name": name, "namespace": "t1"},
        "spec": {"vpcRef": {"name": "a"}, "target": target.to_string()}
    }))
    .unwrap();
    Api::<FloatingIP>::namespaced(cp.sdn.clone(), "t1")
        .create(&PostParams::default(), &f)
        .await
        .unwrap();
}

/// The ingress addresses of the Services at the stand-in labelled `selector`.
async fn owned_ingress(cp: &Cp, selector: &str) -> (usize, Vec<IpAddr>) {
    let svcs = Api::<Service>::namespaced(cp.kube.clone(), "t1")
        .list(&ListParams::default().labels(selector))
        .await
        .unwrap();
    let ips = svcs
        .items
        .iter()
        .flat_map(|s| s.status.iter().flat_map(|st| st.load_balancer.iter()))
        .flat_map(|lb| lb.ingress.iter().flatten())
        .filter_map(|i| i.ip.as_ref()?.parse().ok())
        .collect();
    (svcs.items.len(), ips)
}

fn fips(n: &Node) -> Vec<(IpAddr, (u32, IpAddr))> {
    FipInMap::from_pin(&n.scratch.pins())
        .and_then(|m| m.entries())
        .unwrap_or_default()
}

fn has_front(n: &Node, addr: IpAddr) -> bool {
    LbgFrontMap::from_pin(&n.scratch.pins())
        .and_then(|m| m.entries())
        .unwrap_or_default()
        .iter()
        .any(|(f, _, _, be)| *f == (addr, LB_PORT, TCP) && !be.is_empty())
}

fn admitted(n: &Node, vni: u32) -> bool {
    LbgIngressMap::from_pin(&n.scratch.pins())
        .and_then(|m| m.nets())
        .unwrap_or_default()
        .contains(&vni)
}

async fn body(lab: &mut Lab) {
    let cp = Cp::start_with(lab, CpOptions { doors: true }).await;
    let lab = &*lab;
    let (n1, n2) = (&lab.nodes[0], &lab.nodes[1]);
    let outside = Outside::new(lab, 1500);

    tenant(&cp, "t1", "a", "10.60.0.0/24").await;
    let f1 = pod(&cp, lab, 0, "t1", "f1", Some("a")).await;
    let f2 = pod(&cp, lab, 1, "t1", "f2", Some("a")).await;
    let vpc = (vni(&cp, "t1", "a").await, "t1", "a");
    let gws: Api<VPCGateway> = Api::namespaced(cp.sdn.clone(), "t1");
    let g: VPCGateway = serde_json::from_value(json!({
        "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "VPCGateway",
        "metadata": {"name": "gw", "namespace": "t1"},
        "spec": {"vpcRef": {"name": "a"}, "nat": {"enabled": true},
                 "ingress": {"loadBalancer": false}}
    }))
    .unwrap();
    gws.create(&PostParams::default(), &g).await.unwrap();
    let nat4: Ipv4Addr = until("the gateway's natAddress", || async {
        gws.get("gw").await.ok()?.status?.nat_address.parse().ok()
    })
    .await;

    // --- The Floating IP of f1: the FloatingIP loop's Service gets an address from the
    // pool, which becomes the FloatingIP's status.address and both agents' entry.
    let target = vpc_ip(&cp, &f1).await;
    floating_ip(&cp, "eip-a", target).await;
    let fip_api: Api<FloatingIP> = Api::namespaced(cp.sdn.clone(), "t1");
    let eip: Ipv4Addr = until("eip-a Ready with an address", || async {
        let st = fip_api.get("eip-a").await.ok()?.status?;
        (st.phase == "Ready").then_some(())?;
        st.address.parse().ok()
    })
    .await;
    let (n, ips) = owned_ingress(&cp, "sdn.cozystack.io/floating-ip=eip-a").await;
    eprintln!("eip-a: {eip} for {target}; its Service's ingress {ips:?}; gateway NAT {nat4}");
    assert_eq!(
        (n, ips),
        (1, vec![IpAddr::V4(eip)]),
        "one Service, whose address is the Floating IP"
    );
    assert_ne!(eip, nat4, "the Floating IP is not the gateway's address");
    wait("both agents programmed the Floating IP", || {
        [n1, n2].iter().all(|n| {
            fips(n)
                .iter()
                .any(|(a, t)| *a == IpAddr::V4(eip) && *t == (vpc.0, IpAddr::V4(target)))
        })
    });

    // --- A younger FloatingIP of the same target gets no Service, and says why.
    floating_ip(&cp, "eip-b", target).await;
    let why = until("eip-b's TargetExclusive=False", || async {
        let st = fip_api.get("eip-b").await.ok()?.status?;
        let c = st
            .conditions
            .iter()
            .find(|c| c.type_ == "TargetExclusive" && c.status == "False")?;
        Some((
            st.phase.clone(),
            st.address.clone(),
            c.reason.clone(),
            c.message.clone(),
        ))
    })
    .await;
    eprintln!("eip-b: {why:?}");
    assert_eq!(why.0, "Pending", "the loser is not Ready");
    assert_eq!(why.1, "", "the loser has no address");
    assert_eq!(why.2, "TargetConflict");
    assert!(why.3.contains("eip-a"), "the message names the winner: {}", why.3);
    let (n, _) = owned_ingress(&cp, "sdn.cozystack.io/floating-ip=eip-b").await;
    assert_eq!(n, 0, "the loser got no Service at the stand-in");
    assert_eq!(fips(n1).len(), 1, "the agents hold the winner's entry only");

    // --- Inbound: the internet host reaches f1 on the Floating IP, TCP and ping, with the
    // pool attracted first to n2 (not f1's node: DNAT there, then the overlay), then to n1.
    let peers = tcp_server(&f1);
    for at in [1, 0] {
        outside.attract(lab, at);
        let via = &lab.nodes[at];
        let in0 = door_metric(via, "packets", vpc, "eip", "in");
        let out0 = door_metric(n1, "packets", vpc, "eip", "out");
        peers.lock().unwrap().clear();
        let answer = connect(&outside, IpAddr::V4(eip), APP_PORT);
        eprintln!(
            "inet -> {eip}:{APP_PORT} (attracted to {}): {answer:?}, f1 saw {:?}",
            via.name,
            peers.lock().unwrap()
        );
        assert_eq!(answer.as_deref(), Some("f1"), "TCP through the Floating IP");
        assert!(
            peers.lock().unwrap().iter().all(|a| a.ip() == IpAddr::V4(INET4))
                && !peers.lock().unwrap().is_empty(),
            "f1 sees the client's real address"
        );
        let mut ok = false;
        let seen = capture(&f1.ns, "eth0", &format!("icmp and src host {INET4}"), || {
            ok = outside.internet.ping(eip, 3, 2);
        });
        assert!(ok, "the internet host's pings to {eip} are answered");
        assert!(seen >= 3, "f1 received the pings from {INET4} itself: {seen}");
        let (in1, out1) = (
            door_metric(via, "packets", vpc, "eip", "in"),
            door_metric(n1, "packets", vpc, "eip", "out"),
        );
        eprintln!(
            "eip packets: in on {} {in0} -> {in1}, out on n1 {out0} -> {out1}",
            via.name
        );
        assert!(
            in1 >= in0 + 5.0,
            "eip/in metered on {}, where it came in",
            via.name
        );
        assert!(out1 >= out0 + 4.0, "eip/out metered on n1, f1's node");
    }

    // --- Outbound: f1 leaves as its Floating IP (it wins over the gateway), f2 as the
    // gateway's NAT address.
    for (p, public) in [(&f1, eip), (&f2, nat4)] {
        let mut ok = false;
        let seen = outside.capture("icmp", || ok = p.ns.ping(INET4, 3, 2));
        let src = sources(&seen);
        eprintln!("{} -> inet: replies {ok}, sources {src:?}", p.name);
        assert!(ok, "{} got its echo replies", p.name);
        assert_eq!(
            src,
            HashSet::from([public.to_string(), INET4.to_string()]),
            "{} left as {public} only",
            p.name
        );
    }

    // --- LoadBalancer ingress: Service `web` (no selector; its EndpointSlice names f2, as
    // the endpointslice controller would) gets an address from the pool; traffic to it is
    // refused while the gateway says `ingress.loadBalancer: false`, admitted once true.
    let svc: Service = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": "t1"},
        "spec": {"type": "LoadBalancer",
                 "ports": [{"port": LB_PORT, "targetPort": APP_PORT, "protocol": "TCP"}]}
    }))
    .unwrap();
    let svcs: Api<Service> = Api::namespaced(cp.kube.clone(), "t1");
    svcs.create(&PostParams::default(), &svc).await.unwrap();
    let slice: EndpointSlice = serde_json::from_value(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "web-1", "namespace": "t1",
                     "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [f2.fabric.to_string()], "conditions": {"ready": true},
                       "nodeName": n2.name,
                       "targetRef": {"kind": "Pod", "namespace": "t1", "name": "f2"}}],
        "ports": [{"name": "", "port": APP_PORT, "protocol": "TCP"}]
    }))
    .unwrap();
    Api::<EndpointSlice>::namespaced(cp.kube.clone(), "t1")
        .create(&PostParams::default(), &slice)
        .await
        .unwrap();
    let lb: IpAddr = until("web's LoadBalancer address", || async {
        let st = svcs.get("web").await.ok()?.status?;
        st.load_balancer?.ingress?.first()?.ip.as_ref()?.parse().ok()
    })
    .await;
    eprintln!("web: LoadBalancer {lb} -> f2 {}", vpc_ip(&cp, &f2).await);
    wait("both agents hold web's frontend", || {
        [n1, n2].iter().all(|n| has_front(n, lb))
    });
    assert!(!admitted(n1, vpc.0) && !admitted(n2, vpc.0), "the gate is closed");
    outside.attract(lab, 0);
    let web_peers = tcp_server(&f2);
    let drops0 = n1.drops(DropReason::LbRefused);
    let refused0 = door_metric(n1, "refused_packets", vpc, "loadbalancer", "in");
    let answer = connect(&outside, lb, LB_PORT);
    let refused1 = door_metric(n1, "refused_packets", vpc, "loadbalancer", "in");
    eprintln!("inet -> {lb}:{LB_PORT}, gate closed: {answer:?}; refused packets {refused0} -> {refused1}");
    assert_eq!(answer, None, "refused: no connection");
    assert!(web_peers.lock().unwrap().is_empty(), "nothing reached f2");
    assert!(
        n1.drops(DropReason::LbRefused) > drops0,
        "DROP_LB_REFUSED counted on n1"
    );
    assert!(refused1 > refused0, "loadbalancer/in refusal metered on n1");

    gws.patch(
        "gw",
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"ingress": {"loadBalancer": true}}})),
    )
    .await
    .unwrap();
    wait("both agents open the gate", || {
        [n1, n2].iter().all(|n| admitted(n, vpc.0))
    });
    let in0 = door_metric(n1, "bytes", vpc, "loadbalancer", "in");
    let out0 = door_metric(n2, "bytes", vpc, "loadbalancer", "out");
    let answer = connect(&outside, lb, LB_PORT);
    let (in1, out1) = (
        door_metric(n1, "bytes", vpc, "loadbalancer", "in"),
        door_metric(n2, "bytes", vpc, "loadbalancer", "out"),
    );
    eprintln!(
        "inet -> {lb}:{LB_PORT}, gate open: {answer:?}, f2 saw {:?}; loadbalancer bytes in on n1 {in0} -> {in1}, out on n2 {out0} -> {out1}",
        web_peers.lock().unwrap()
    );
    assert_eq!(answer.as_deref(), Some("f2"), "admitted: f2 answers");
    assert_eq!(
        web_peers
            .lock()
            .unwrap()
            .iter()
            .map(SocketAddr::ip)
            .collect::<Vec<_>>(),
        vec![IpAddr::V4(INET4)],
        "f2 sees the client's real address"
    );
    assert!(in1 > in0, "loadbalancer/in metered on n1, where it came in");
    assert!(out1 > out0, "loadbalancer/out metered on n2, f2's node");
}
