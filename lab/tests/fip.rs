//! `make e2e`: the inbound doors of a VPC with real packets from the internet host (issue 12):
//! a Floating IP (1:1 NAT both ways, the client's address preserved, winning over the
//! gateway for its target; the younger of two FloatingIPs of one target gets nothing until
//! the older goes) and LoadBalancer ingress into the VPC (refused until the gateway admits
//! it, and again once the gateway is deleted), each crossing metered per door on the agents'
//! `/metrics`. Needs root, ping, tcpdump, and the agent and
//! CNI binaries built.
//!
//! The whole chain runs: the server's FloatingIP and gateway loops own LoadBalancer Services,
//! the kube stand-in assigns their addresses from the pool (as MetalLB's controller does) and
//! the lab's router `rtr` attracts the pool to one node (as MetalLB's L2 or BGP mode would);
//! the agents program the maps from the FloatingIPs' and gateways' status. Nobody writes a
//! status by hand.
//!
//! Layout: two dual-stack nodes and the outside world of `cozyplane_lab::outside` (`inet`
//! 198.51.100.2 and 2001:db8:100::2 behind `rtr`). Tenant t1's dual-stack VPC a
//! (10.60.0.0/24, fd00:60::/64) has a VPCGateway with NAT and, at first,
//! `ingress.loadBalancer: false`; pod f1 on n1 has a Floating IP per family, pod f2 on n2 is
//! the backend of the LoadBalancer Service `web` (port 80 → 8080).

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
use cozyplane_lab::outside::{INET4, INET6};
use cozyplane_lab::{Lab, LabPod, Node, Outside, capture, run_in};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

mod common;
use common::{Cp, CpOptions, door_metric, pod, pod_addrs, sources, tenant_ranges, until, vni, vpc_ip, wait};

const APP_PORT: u16 = 8080;
const LB_PORT: u16 = 80;
const TCP: u8 = 6;

#[test]
fn lab_fip() {
    Lab::run_on(Lab::dual_stack(2), body);
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
        // One socket for both families (IPv4 clients as mapped addresses).
        let l = TcpListener::bind(("::", APP_PORT)).unwrap();
        tx.send(()).unwrap();
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            if let Ok(a) = c.peer_addr() {
                log.lock()
                    .unwrap()
                    .push(SocketAddr::new(a.ip().to_canonical(), a.port()));
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

async fn floating_ip(cp: &Cp, name: &str, target: IpAddr) {
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

/// FloatingIP `name` for `target`, through the chain: Ready, its address its one Service's
/// ingress at the stand-in, and programmed on both agents. Returns the address.
async fn floating_ip_ready(cp: &Cp, lab: &Lab, name: &str, (vni, target): (u32, IpAddr)) -> IpAddr {
    floating_ip(cp, name, target).await;
    ready(cp, lab, name, (vni, target)).await
}

/// FloatingIP `name` of `target` Ready, as [`floating_ip_ready`] says; its address.
async fn ready(cp: &Cp, lab: &Lab, name: &str, (vni, target): (u32, IpAddr)) -> IpAddr {
    let api: Api<FloatingIP> = Api::namespaced(cp.sdn.clone(), "t1");
    let eip: IpAddr = until(&format!("{name} Ready with an address"), || async {
        let st = api.get(name).await.ok()?.status?;
        (st.phase == "Ready").then_some(())?;
        st.address.parse().ok()
    })
    .await;
    let (n, ips) = owned_ingress(cp, &format!("sdn.cozystack.io/floating-ip={name}")).await;
    eprintln!("{name}: {eip} for {target}; its Service's ingress {ips:?}");
    assert_eq!(
        (n, ips),
        (1, vec![eip]),
        "one Service, whose address is the Floating IP"
    );
    wait(&format!("both agents programmed {name}"), || {
        lab.nodes.iter().all(|n| fips(n).contains(&(eip, (vni, target))))
    });
    eip
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
    let cp = Cp::start_with(lab, CpOptions::doors()).await;
    let lab = &*lab;
    let (n1, n2) = (&lab.nodes[0], &lab.nodes[1]);
    let outside = Outside::new(lab, 1500);

    tenant_ranges(&cp, "t1", "a", &["10.60.0.0/24", "fd00:60::/64"]).await;
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

    // --- The Floating IPs of f1, one per family: the FloatingIP loop's Service gets an
    // address from the pool, which becomes the FloatingIP's status.address and both agents'
    // entry.
    let target = IpAddr::V4(vpc_ip(&cp, &f1).await);
    let target6 = pod_addrs(&f1)
        .into_iter()
        .find(IpAddr::is_ipv6)
        .expect("f1 has a VPC IPv6 address");
    let eip = floating_ip_ready(&cp, lab, "eip-a", (vpc.0, target)).await;
    let eip6 = floating_ip_ready(&cp, lab, "eip-6", (vpc.0, target6)).await;
    assert_ne!(
        eip,
        IpAddr::V4(nat4),
        "the Floating IP is not the gateway's address"
    );
    let fip_api: Api<FloatingIP> = Api::namespaced(cp.sdn.clone(), "t1");

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
    assert_eq!(fips(n1).len(), 2, "the agents hold the winners' entries only");

    // --- Inbound: the internet host reaches f1 on either Floating IP, TCP and ping, with
    // the pool attracted first to n2 (not f1's node: DNAT there, then the overlay), then to
    // n1. f1 sees the client's own address.
    let peers = tcp_server(&f1);
    for at in [1, 0] {
        outside.attract(lab, at);
        let via = &lab.nodes[at];
        let in0 = door_metric(via, "packets", vpc, "eip", "in");
        let out0 = door_metric(n1, "packets", vpc, "eip", "out");
        for (public, client, icmp) in [
            (eip, IpAddr::V4(INET4), "icmp"),
            (eip6, IpAddr::V6(INET6), "icmp6"),
        ] {
            peers.lock().unwrap().clear();
            let answer = connect(&outside, public, APP_PORT);
            let seen_by_f1 = peers.lock().unwrap().clone();
            eprintln!(
                "inet -> {public} port {APP_PORT} (attracted to {}): {answer:?}, f1 saw {seen_by_f1:?}",
                via.name,
            );
            assert_eq!(
                answer.as_deref(),
                Some("f1"),
                "TCP through the Floating IP {public}"
            );
            assert_eq!(
                seen_by_f1.iter().map(SocketAddr::ip).collect::<Vec<_>>(),
                vec![client],
                "f1 sees the client's real address"
            );
            let mut ok = false;
            let seen = capture(&f1.ns, "eth0", &format!("{icmp} and src host {client}"), || {
                ok = outside.internet.ping(public, 3, 2);
            });
            assert!(ok, "the internet host's pings to {public} are answered");
            assert!(seen >= 3, "f1 received the pings from {client} itself: {seen}");
        }
        let (in1, out1) = (
            door_metric(via, "packets", vpc, "eip", "in"),
            door_metric(n1, "packets", vpc, "eip", "out"),
        );
        eprintln!(
            "eip packets: in on {} {in0} -> {in1}, out on n1 {out0} -> {out1}",
            via.name
        );
        assert!(
            in1 >= in0 + 10.0,
            "eip/in metered on {}, where it came in",
            via.name
        );
        assert!(out1 >= out0 + 8.0, "eip/out metered on n1, f1's node");
    }

    // --- Outbound: f1 leaves as its Floating IPs (they win over the gateway), f2 as the
    // gateway's NAT address.
    let echo6 = "icmp6 and (ip6[40] == 128 or ip6[40] == 129)";
    for (p, public, to, filter) in [
        (&f1, eip, IpAddr::V4(INET4), "icmp"),
        (&f1, eip6, IpAddr::V6(INET6), echo6),
        (&f2, IpAddr::V4(nat4), IpAddr::V4(INET4), "icmp"),
    ] {
        let mut ok = false;
        let seen = outside.capture(filter, || ok = p.ns.ping(to, 3, 2));
        let src = sources(&seen);
        eprintln!("{} -> {to}: replies {ok}, sources {src:?}", p.name);
        assert!(ok, "{} got its echo replies", p.name);
        assert_eq!(
            src,
            HashSet::from([public.to_string(), to.to_string()]),
            "{} left as {public} only",
            p.name
        );
    }

    // --- The winner goes: the younger FloatingIP takes the target over, with a Service and
    // an address of its own, and the agents follow.
    fip_api.delete("eip-a", &Default::default()).await.unwrap();
    let eip_b = ready(&cp, lab, "eip-b", (vpc.0, target)).await;
    wait("eip-a's entry gone", || {
        lab.nodes
            .iter()
            .all(|n| fips(n).iter().filter(|(_, t)| *t == (vpc.0, target)).count() == 1)
    });
    assert_eq!(
        connect(&outside, eip_b, APP_PORT).as_deref(),
        Some("f1"),
        "TCP through the new Floating IP {eip_b}"
    );

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
    // Attracted to f2's own node, it is delivered there.
    outside.attract(lab, 1);
    assert_eq!(
        connect(&outside, lb, LB_PORT).as_deref(),
        Some("f2"),
        "admitted at the backend's node"
    );

    // --- The gateway goes: its Services go, the agents forget the NAT address and the gate,
    // so f2 has no way out and the LoadBalancer is refused again.
    gws.delete("gw", &Default::default()).await.unwrap();
    until("the gateway's Services gone at the stand-in", || async {
        let (n, _) = owned_ingress(&cp, "sdn.cozystack.io/vpc-gateway=gw").await;
        (n == 0).then_some(())
    })
    .await;
    wait("both agents dropped the gateway and closed the gate", || {
        [n1, n2]
            .iter()
            .all(|n| !admitted(n, vpc.0) && !has_gateway(n, vpc.0))
    });
    let before = n2.drops(DropReason::NoGateway);
    let mut ok = true;
    let seen = outside.capture("icmp", || ok = f2.ns.ping(INET4, 3, 1));
    assert!(!ok && seen.is_empty(), "f2 has no way out: {seen:?}");
    assert!(
        n2.drops(DropReason::NoGateway) >= before + 3,
        "DROP_NO_GATEWAY counted on n2"
    );
    let refused = n2.drops(DropReason::LbRefused);
    assert_eq!(connect(&outside, lb, LB_PORT), None, "refused again");
    assert!(
        n2.drops(DropReason::LbRefused) > refused,
        "DROP_LB_REFUSED counted on n2"
    );
}

fn has_gateway(n: &Node, vni: u32) -> bool {
    cozyplane_bpf::maps::snat_gws::SnatGwsMap::from_pin(&n.scratch.pins())
        .and_then(|m| m.entries())
        .unwrap_or_default()
        .iter()
        .any(|(v, _)| *v == vni)
}
