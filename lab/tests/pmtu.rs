//! `make e2e`: ICMP errors and fragments through the fabric bridge, with real packets
//! (issue 11, items 6 and 7). Needs root, ping, tracepath, tcpdump, iperf3, and the agent and
//! CNI binaries built. The control-plane helpers are shared with `e2e.rs` (`common/`).
//!
//! Layout: two nodes; VPC a (10.30.0.0/24) with a1 on n1 and a2 on n2. Outside the cluster
//! (RFC 5737 ranges), a router `rtr` hangs off n1, a narrow link (MTU 1280) joins it to a second
//! router `far`, and an outside host `ext` sits behind `far` on an ordinary link (MTU 1500).
//! `ext` reaches the VPC pods only through their fabric addresses (the bridge), via n1 (and
//! n1's overlay route for n2's block); the nodes route 203.0.113.0/24 back via n1. So the
//! "fragmentation needed" a VPC pod's packets provoke comes from a router that is no node
//! (`rtr`), and is forwarded by n1 to the pod's fabric address.
//!
//! ```text
//!   ext ─1500─ far ─1280─ rtr ─1500─ n1 ─┬─ a1 (VPC a)
//!   203.0.113.2   192.0.2.0/24   198.51.100.0/24 └─ underlay ─ n2 ─ a2 (VPC a)
//! ```

use cozyplane_lab::{Lab, LabPod, Netns, capture};

mod common;
use common::{Cp, pod, tenant, vpc_ip, wait};

const NARROW_MTU: u32 = 1280;
const EXT_IP: &str = "203.0.113.2";

#[test]
fn lab_pmtu() {
    Lab::run(2, body);
}

/// A veth pair `a` (in `x`) – `b` (in `y`) with these addresses (/24) and MTU.
fn link(x: &Netns, a: &str, xa: &str, y: &Netns, b: &str, ya: &str, mtu: u32) {
    let mtu = mtu.to_string();
    x.ip_ok(&["link", "add", a, "type", "veth", "peer", "name", b, "netns", &y.0]);
    x.ip_ok(&["link", "set", a, "mtu", &mtu, "up"]);
    x.ip_ok(&["addr", "add", &format!("{xa}/24"), "dev", a]);
    y.ip_ok(&["link", "set", b, "mtu", &mtu, "up"]);
    y.ip_ok(&["addr", "add", &format!("{ya}/24"), "dev", b]);
}

/// `rtr`, `far` and `ext` as in the module doc; dropped (deleted) by the caller.
fn outside(lab: &Lab) -> [Netns; 3] {
    let (n1, n2) = (&lab.nodes[0], &lab.nodes[1]);
    let (rtr, far, ext) = (Netns::new("rtr"), Netns::new("far"), Netns::new("ext"));
    link(&n1.ns, "out0", "198.51.100.1", &rtr, "in0", "198.51.100.2", 1500);
    link(&rtr, "thin0", "192.0.2.1", &far, "thin1", "192.0.2.2", NARROW_MTU);
    link(&far, "out0", "203.0.113.1", &ext, "eth0", EXT_IP, 1500);
    for r in [&rtr, &far] {
        r.sysctl("net.ipv4.ip_forward=1");
    }
    rtr.ip_ok(&["route", "add", "10.244.0.0/16", "via", "198.51.100.1"]);
    rtr.ip_ok(&["route", "add", "203.0.113.0/24", "via", "192.0.2.2"]);
    far.ip_ok(&["route", "add", "10.244.0.0/16", "via", "192.0.2.1"]);
    ext.ip_ok(&["route", "add", "default", "via", "203.0.113.1"]);
    n1.ns
        .ip_ok(&["route", "add", "203.0.113.0/24", "via", "198.51.100.2"]);
    n2.ns
        .ip_ok(&["route", "add", "203.0.113.0/24", "via", &n1.ip.to_string()]);
    // Replies from n2's pods reach n1 over the underlay, requests over the tunnel: loose
    // or no source validation, as on the nodes of a real cluster with such a gateway.
    for n in [n1, n2] {
        n.ns.sysctl("net.ipv4.conf.all.rp_filter=0");
        n.ns.sysctl("net.ipv4.conf.ul0.rp_filter=0");
    }
    [rtr, far, ext]
}

fn out(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
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
    tenant(&cp, "t1", "a", "10.30.0.0/24").await;
    let a1: LabPod = pod(&cp, lab, 0, "t1", "a1", Some("a")).await;
    let a2: LabPod = pod(&cp, lab, 1, "t1", "a2", Some("a")).await;
    let (ia1, ia2) = (vpc_ip(&cp, &a1).await, vpc_ip(&cp, &a2).await);
    eprintln!("a1 {ia1} (fabric {}), a2 {ia2} (fabric {})", a1.fabric, a2.fabric);
    let [_rtr, _far, ext] = outside(lab);
    wait("n1 routes n2's block over the tunnel", || {
        n1.ns
            .ip_ok(&["route", "show", &lab.nodes[1].block])
            .contains("encap")
    });
    wait("ext reaches a1 and a2 through their fabric addresses", || {
        ext.ping(a1.fabric, 1, 1) && ext.ping(a2.fabric, 1, 1)
    });

    // --- Overlay hygiene: the VPC pods' MTU is the underlay's less the VXLAN overhead.
    let mtu = |ns: &Netns, dev: &str| -> u32 {
        let o = ns.ip_ok(&["-o", "link", "show", "dev", dev]);
        o.split(" mtu ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|m| m.parse().ok())
            .unwrap_or_else(|| panic!("no mtu in {o}"))
    };
    for (p, n) in [(&a1, n1), (&a2, n2)] {
        assert_eq!(mtu(&p.ns, "eth0"), mtu(&n.ns, "ul0") - 50, "{} MTU", p.name);
    }
    let pod_mtu = mtu(&a1.ns, "eth0");
    assert!(
        pod_mtu > NARROW_MTU,
        "the narrow link must be narrower than the pods ({pod_mtu})"
    );

    // --- Path MTU discovery by the VPC pod: a1 sends a TCP stream (iperf3 -R) to ext in
    // segments of its own MTU with DF; rtr cannot forward them over the narrow link and
    // answers "fragmentation needed" to a1's fabric address, which n1 routes to a1's veth. Only if the bridge translates
    // that error into a1's view does a1 learn the path MTU and the stream flow.
    // ext must not know the path MTU yet: a host that does advertises an MSS that fits,
    // and the pod never sends anything too big (tracepath, below, teaches it to ext).
    ext.ip_ok(&["route", "flush", "cache"]);
    let server = a1.ns.iperf_server(5201);
    let mut json = String::new();
    let frag_needed = capture(&a1.ns, "eth0", "icmp[0] = 3 and icmp[1] = 4", || {
        let o = ext.exec(&[
            "timeout",
            "30",
            "iperf3",
            "-c",
            &a1.fabric.to_string(),
            "-R",
            "-t",
            "2",
            "--json",
        ]);
        json = String::from_utf8_lossy(&o.stdout).to_string();
    });
    drop(server);
    let bytes = received_bytes(&json);
    eprintln!("pod -> ext TCP over the narrow link: {bytes} bytes; frag-needed seen in a1: {frag_needed}");
    assert!(frag_needed >= 1, "the ICMP error reached a1 inside its VPC");
    assert!(
        bytes > 1e6,
        "the stream flowed after PMTU discovery ({bytes} bytes)"
    );
    let cached = out(&a1.ns.exec(&["ip", "route", "get", "169.254.1.1"]));
    assert!(
        cached.contains(&format!("mtu {NARROW_MTU}")),
        "a1 cached the path MTU towards its gateway: {cached}"
    );

    // --- tracepath to a VPC pod's fabric address: the narrow link's MTU is reported, and the
    // trace ends at the pod: its port unreachable about the last probe left through the
    // bridge (translated, quote included) and was matched to tracepath's socket.
    let o = ext.exec(&[
        "timeout",
        "60",
        "tracepath",
        "-n",
        "-m",
        "6",
        &a1.fabric.to_string(),
    ]);
    let trace = out(&o);
    eprintln!("tracepath ext -> a1:\n{trace}");
    assert!(
        trace.contains(&format!("pmtu {NARROW_MTU}")),
        "reduced path MTU reported"
    );
    assert!(
        trace.contains("reached"),
        "the pod's port unreachable made it back"
    );

    // --- Fragments: ping -s 4000 from ext to the VPC pod on the other node (n2) through its
    // fabric address. ext's fragments are refragmented for the narrow link, cross n1 and the
    // overlay, pass n2's bridge (the first fragment decides, the rest follow) and the pod's
    // reply, fragmented by the pod, goes back the same way.
    let o = ext.exec(&[
        "ping",
        "-n",
        "-c",
        "3",
        "-i",
        "0.2",
        "-W",
        "2",
        "-s",
        "4000",
        &a2.fabric.to_string(),
    ]);
    let summary = out(&o);
    assert!(
        cozyplane_lab::received(&summary) >= 2,
        "fragmented echo ext -> a2 (n2) through the bridge:\n{summary}"
    );
    // A fragmented UDP datagram of 4000 bytes, counted by the receiving pod's iperf3.
    let server = a2.ns.iperf_server(5202);
    let o = ext.exec(&[
        "timeout",
        "30",
        "iperf3",
        "-c",
        &a2.fabric.to_string(),
        "-p",
        "5202",
        "-u",
        "-l",
        "4000",
        "-b",
        "200K",
        "-t",
        "1",
        "--json",
    ]);
    drop(server);
    // The server's count, reported back to the client (`sum` is the sender's own).
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
    let got = &v["end"]["sum_received"];
    let (datagrams, bytes) = (
        got["packets"].as_u64().unwrap_or(0),
        got["bytes"].as_u64().unwrap_or(0),
    );
    eprintln!("UDP -l 4000 ext -> a2: a2 received {datagrams} datagrams, {bytes} bytes");
    assert!(
        datagrams >= 1 && bytes >= 4000 * datagrams,
        "4000-byte UDP datagrams reached a2 whole: {}",
        out(&o)
    );
    // Inside the VPC, across nodes (no bridge): fragments travel by address alone.
    let o = a1.ns.exec(&[
        "ping",
        "-n",
        "-c",
        "3",
        "-i",
        "0.2",
        "-W",
        "2",
        "-s",
        "4000",
        &ia2.to_string(),
    ]);
    assert!(
        cozyplane_lab::received(&out(&o)) >= 2,
        "fragmented echo a1 -> a2 inside the VPC:\n{}",
        out(&o)
    );
}
