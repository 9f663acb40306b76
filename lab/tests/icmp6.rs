//! `make e2e`: ICMPv6 errors with real packets, through the north-south NAT doors (issue 12,
//! items 2 and 4: "ICMP errors translated back") and through the fabric bridge (issue 11,
//! item 6). Needs root, ping, tracepath, tcpdump, iperf3, and the agent and CNI binaries built.
//!
//! Layout: a dual-stack two-node lab (tunnels over IPv4) with the outside world of
//! `cozyplane_lab::outside`: the router `rtr` on the underlay (every node's default route) and
//! the internet host `inet` (2001:db8:100::2) behind it; the IPv6 LoadBalancer pool routed by
//! `rtr` to n1, then to n2. On n1: s1, a pod of the IPv6-only VPC `six` (t1, fd00:6::/64) whose VPCGateway
//! has the NAT address 2001:db8:cafe::10, and p0, a default-network pod masqueraded as n1's
//! fd77::1. For the bridge, `rtr` also has a narrow link (MTU 1280) to a second router `far`,
//! with the host `ext` behind it on an ordinary link, so that the narrowing is in the middle of
//! the path and ext's own MTU is 1500; `rtr` routes s1's IPv6 fabric address to n1.
//!
//! ```text
//!   s1, p0 ─ n1 ─ underlay ─ rtr ─┬─ wan (1500 / 1280) ─ inet 2001:db8:100::2
//!                                 └─ thin (1280) ─ far ─ (1500) ─ ext 2001:db8:300::2
//! ```

use std::net::{IpAddr, Ipv6Addr};

use cozyplane_apis::v1alpha1::VPCGateway;
use cozyplane_bpf::maps::snat_gws::SnatGwsMap;
use cozyplane_lab::outside::INET6;
use cozyplane_lab::{Lab, LabPod, Netns, Node, Outside, capture};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

mod common;
use common::net::drops;
use common::{Cp, pod, tenant, wait};

const NAT6: &str = "2001:db8:cafe::10";
const NARROW_MTU: u32 = 1280;
const EXT6: &str = "2001:db8:300::2";
/// tcpdump: an ICMPv6 packet too big (no extension headers before it).
const TOO_BIG: &str = "icmp6 and ip6[40] == 2";

#[test]
fn lab_icmp6() {
    Lab::run_on(Lab::dual_stack(2), body);
}

fn out(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The pod's IPv6 fabric address, from its CNI result.
fn fabric6(p: &LabPod) -> Ipv6Addr {
    p.result["ips"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["address"].as_str()?.split('/').next()?.parse::<Ipv6Addr>().ok())
        .next()
        .unwrap_or_else(|| panic!("{}: no IPv6 fabric address in {}", p.name, p.result))
}

/// The gateway of `ns/vpc` with NAT on and the IPv6 NAT address `nat6`, written through the
/// status subresource: this stands for the server's gateway loop and the LoadBalancer
/// implementation (the owned Service's `status.loadBalancer.ingress`).
async fn gateway6(cp: &Cp, ns: &str, vpc: &str, nat6: &str) {
    let api: Api<VPCGateway> = Api::namespaced(cp.sdn.clone(), ns);
    let g: VPCGateway = serde_json::from_value(json!({
        "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "VPCGateway",
        "metadata": {"name": "gw", "namespace": ns},
        "spec": {"vpcRef": {"name": vpc}, "nat": {"enabled": true}}
    }))
    .unwrap();
    api.create(&PostParams::default(), &g).await.unwrap();
    api.patch_status(
        "gw",
        &PatchParams::default(),
        &Patch::Merge(&json!({"status": {"natAddress6": nat6}})),
    )
    .await
    .unwrap();
}

fn has_gateway6(n: &Node, nat6: Ipv6Addr) -> bool {
    SnatGwsMap::from_pin(&n.scratch.pins())
        .and_then(|m| m.entries())
        .is_ok_and(|v| v.iter().any(|(_, (_, a6))| *a6 == Some(nat6)))
}

/// From inside `p`: a ping with don't-fragment above the narrow link gets the packet too big
/// back in the pod, and `tracepath -6` reports the narrow link's MTU and reaches `to`.
fn pmtu_from_pod(lab: &Lab, p: &LabPod, to: IpAddr, door: &str) {
    let drops = || lab.nodes.iter().map(drops).collect::<Vec<_>>();
    let big = (NARROW_MTU + 100).to_string();
    let mut o = None;
    let seen = capture(&p.ns, "eth0", TOO_BIG, || {
        o = Some(p.ns.exec(&[
            "ping",
            "-6",
            "-n",
            "-c",
            "2",
            "-W",
            "1",
            "-M",
            "do",
            "-s",
            &big,
            &to.to_string(),
        ]));
    });
    let o = out(&o.unwrap());
    eprintln!("{door}: ping -6 -M do -s {big} {to}:\n{o}");
    assert!(
        seen >= 1,
        "{door}: the packet too big reached {} inside; drops {:?}",
        p.name,
        drops()
    );
    let mtu = NARROW_MTU;
    assert!(
        [
            format!("mtu={mtu}"),
            format!("mtu = {mtu}"),
            format!("mtu: {mtu}")
        ]
        .iter()
        .any(|m| o.contains(m.as_str())),
        "{door}: ping saw the path MTU"
    );
    // Forget it again: tracepath must discover it itself.
    p.ns.ip_ok(&["-6", "route", "flush", "cache"]);
    let trace = out(&p.ns.exec(&[
        "timeout",
        "60",
        "tracepath",
        "-6",
        "-n",
        "-m",
        "6",
        &to.to_string(),
    ]));
    eprintln!("{door}: tracepath -6 {} -> {to}:\n{trace}", p.name);
    assert!(
        trace.contains(&format!("pmtu {NARROW_MTU}")),
        "{door}: reduced path MTU reported"
    );
    assert!(
        trace.contains("reached"),
        "{door}: the far end's port unreachable made it back into {}; drops {:?}",
        p.name,
        drops()
    );
}

/// `far` and `ext` behind `rtr` (module doc); dropped (deleted) by the caller.
fn narrow_branch(outside: &Outside, lab: &Lab, s1_fabric: Ipv6Addr) -> [Netns; 2] {
    let rtr = &outside.router;
    let (far, ext) = (Netns::new("far"), Netns::new("ext"));
    let mtu = NARROW_MTU.to_string();
    rtr.ip_ok(&[
        "link", "add", "thin0", "type", "veth", "peer", "name", "thin1", "netns", &far.0,
    ]);
    rtr.ip_ok(&["link", "set", "thin0", "mtu", &mtu, "up"]);
    rtr.ip_ok(&["addr", "add", "2001:db8:200::1/64", "dev", "thin0", "nodad"]);
    far.ip_ok(&["link", "set", "thin1", "mtu", &mtu, "up"]);
    far.ip_ok(&["addr", "add", "2001:db8:200::2/64", "dev", "thin1", "nodad"]);
    far.ip_ok(&[
        "link", "add", "out0", "type", "veth", "peer", "name", "eth0", "netns", &ext.0,
    ]);
    far.ip_ok(&["link", "set", "out0", "up"]);
    far.ip_ok(&["addr", "add", "2001:db8:300::1/64", "dev", "out0", "nodad"]);
    ext.ip_ok(&["link", "set", "eth0", "up"]);
    ext.ip_ok(&["addr", "add", &format!("{EXT6}/64"), "dev", "eth0", "nodad"]);
    far.sysctl("net.ipv6.conf.all.forwarding=1");
    far.ip_ok(&["-6", "route", "add", "default", "via", "2001:db8:200::1"]);
    ext.ip_ok(&["-6", "route", "add", "default", "via", "2001:db8:300::1"]);
    rtr.ip_ok(&[
        "-6",
        "route",
        "add",
        "2001:db8:300::/64",
        "via",
        "2001:db8:200::2",
    ]);
    let n1_v6 = lab.nodes[0].v6.as_ref().unwrap().1;
    rtr.ip_ok(&[
        "-6",
        "route",
        "add",
        &format!("{s1_fabric}/128"),
        "via",
        &n1_v6.to_string(),
    ]);
    [far, ext]
}

/// Bytes the client received in an `iperf3 --json` run (0 if the run produced none).
fn received_bytes(json: &str) -> f64 {
    serde_json::from_str::<serde_json::Value>(json)
        .ok()
        .and_then(|v| v["end"]["sum_received"]["bytes"].as_f64())
        .unwrap_or(0.0)
}

async fn body(lab: &mut Lab) {
    let cp = Cp::start(lab).await;
    let lab = &*lab;
    let (n1, n2) = (&lab.nodes[0], &lab.nodes[1]);
    let mut outside = Outside::new(lab, 1500);

    // --- The doors: s1 leaves through VPC six's gateway as NAT6, p0 masqueraded as n1.
    tenant(&cp, "t1", "six", "fd00:6::/64").await;
    let s1 = pod(&cp, lab, 0, "t1", "s1", Some("t1/six")).await;
    let p0 = pod(&cp, lab, 0, "default", "p0", None).await;
    gateway6(&cp, "t1", "six", NAT6).await;
    outside.attract(lab, 0);
    let nat6: Ipv6Addr = NAT6.parse().unwrap();
    wait("both agents programmed VPC six's IPv6 gateway", || {
        [n1, n2].iter().all(|n| has_gateway6(n, nat6))
    });
    // The router's first neighbour solicitations wait for its own link-local address
    // (duplicate address detection): the first replies may be late.
    for p in [&s1, &p0] {
        wait(&format!("{} reaches the internet host over IPv6", p.name), || {
            p.ns.ping(INET6, 1, 1)
        });
    }
    // --- Path MTU across the narrowed internet link: the router's packet too big, hop limit
    // exceeded and the internet host's port unreachable, all about NATed packets, are
    // translated back into the pods.
    outside.set_wan_mtu(NARROW_MTU);
    pmtu_from_pod(lab, &s1, IpAddr::V6(INET6), "VPC gateway");
    pmtu_from_pod(lab, &p0, IpAddr::V6(INET6), "net-0 masquerade");
    // The NAT address attracted to n2, which does not own s1's flows: the errors go on to n1
    // over the overlay (sdn_snat_from_overlay) before they are translated.
    outside.attract(lab, 1);
    s1.ns.ip_ok(&["-6", "route", "flush", "cache"]);
    pmtu_from_pod(lab, &s1, IpAddr::V6(INET6), "VPC gateway, attracted to n2");
    outside.set_wan_mtu(1500);

    // --- The fabric bridge: ext reaches s1 only through its IPv6 fabric address.
    let s1_fabric = fabric6(&s1);
    let [_far, ext] = narrow_branch(&outside, lab, s1_fabric);
    wait("ext reaches s1 through its IPv6 fabric address", || {
        ext.ping(s1_fabric, 1, 1)
    });

    // PMTU discovery by the pod: s1 streams to ext (iperf3 -R) in segments of its own MTU;
    // rtr cannot forward them over the narrow link and sends packet too big to the fabric
    // address, which n1 routes to s1's veth. Only if the bridge translates it into s1's view
    // (gateway fe80::1 -> VPC address, the quote as s1 sent it) does the stream flow.
    ext.ip_ok(&["-6", "route", "flush", "cache"]);
    let server = s1.ns.iperf_server(5201);
    let mut json = String::new();
    let seen = capture(&s1.ns, "eth0", TOO_BIG, || {
        let o = ext.exec(&[
            "timeout",
            "30",
            "iperf3",
            "-c",
            &s1_fabric.to_string(),
            "-R",
            "-t",
            "2",
            "--json",
        ]);
        json = String::from_utf8_lossy(&o.stdout).to_string();
    });
    drop(server);
    let bytes = received_bytes(&json);
    eprintln!("s1 -> ext TCP over the narrow link: {bytes} bytes; packet too big seen in s1: {seen}");
    assert!(
        seen >= 1,
        "the packet too big reached s1 inside its VPC; drops {:?}",
        lab.nodes.iter().map(drops).collect::<Vec<_>>()
    );
    assert!(
        bytes > 1e6,
        "the stream flowed after PMTU discovery ({bytes} bytes)"
    );

    // tracepath -6 from ext to the fabric address: the narrow link's MTU is reported, and the
    // trace ends at the pod: its port unreachable about the last probe left through the bridge
    // (translated, quote included) and was matched to tracepath's socket.
    let trace = out(&ext.exec(&[
        "timeout",
        "60",
        "tracepath",
        "-6",
        "-n",
        "-m",
        "8",
        &s1_fabric.to_string(),
    ]));
    eprintln!("tracepath -6 ext -> s1 ({s1_fabric}):\n{trace}");
    assert!(
        trace.contains(&format!("pmtu {NARROW_MTU}")),
        "reduced path MTU reported"
    );
    assert!(
        trace.contains("reached"),
        "s1's port unreachable made it back; drops {:?}",
        lab.nodes.iter().map(drops).collect::<Vec<_>>()
    );
}
