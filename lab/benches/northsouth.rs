//! North-south benchmarks on the netns lab (issue 12). Needs root and the agent and CNI of the
//! bench's profile (release for `cargo bench`):
//!
//! ```text
//! cargo build --release -p cozyplane-agent && cargo build --release --manifest-path cni/bin/Cargo.toml
//! cargo bench -p cozyplane-lab --bench northsouth
//! ```
//!
//! A two-node dual-stack lab with the outside world of `cozyplane_lab::outside` (border
//! router, internet host behind it, 1500 everywhere) and the whole control-plane chain of the
//! lab's tests
//! (`Cp::start_with(.., CpOptions::doors())`): the server's gateway and FloatingIP loops
//! own LoadBalancer Services, the kube stand-in assigns their addresses from the pool the
//! router attracts to n1, and the agents program the maps from the status. The bench writes no
//! status by hand. Same node n1, same router, same internet host for every path:
//!
//! * **net-0 masquerade**: a default-network pod, masqueraded by the datapath to n1's address;
//! * **gateway NAT**: a VPC pod whose VPC's gateway has NAT (its address attracted to n1);
//! * **Floating IP**: another pod of that VPC with a FloatingIP (1:1 NAT both ways; it wins
//!   over the gateway, so the pod also leaves as its Floating IP);
//! * **reference, masquerade**: a namespace wired to n1 by a plain veth with kernel routing
//!   and `iptables -t nat -A POSTROUTING -s <its subnet> -o ul0 -j MASQUERADE` inside n1
//!   (what a user would otherwise run), with the pods' MTU;
//! * **reference, 1:1 NAT**: a second such namespace with a public address of its own from
//!   the end of the pool (`DNAT` in `PREROUTING`, `SNAT` in `POSTROUTING`, inside n1): what
//!   a Floating IP replaces.
//!
//! The VPC is dual-stack and its gateway has an IPv6 NAT address too; the masquerade
//! reference namespace also has an IPv6 subnet, masqueraded by `ip6tables -t nat -A
//! POSTROUTING -s <subnet> -o ul0 -j MASQUERADE` to n1's underlay address, the address the
//! datapath masquerades net-0 pods' IPv6 to.
//!
//! Measured, pod-initiated (every path): TCP throughput (iperf3, both directions: pod →
//! internet and internet → pod over the same connection direction, `-R`) and NAT connection
//! set-up rate (new TCP connections per second, each connect + close, from the pod to a
//! listener on the internet host, counted as the listener accepts them). Internet-initiated
//! (Floating IP and the 1:1 reference only): the same three figures with the internet host
//! as the client of the public address and the server in the pod. Ratios are against the
//! masquerade reference (pod-initiated table) and the 1:1 reference (internet-initiated
//! table). A third table repeats the pod-initiated figures over IPv6 for the reference,
//! net-0 masquerade and the gateway, against the ip6tables reference. Figures are printed,
//! never asserted. `NS_SECS` sets the seconds per measurement
//! (default 5; `NS_SECS=1` for a quick proof that it runs).

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::AtomicU64;

use cozyplane_apis::v1alpha1::{FloatingIP, VPCGateway};
use cozyplane_bpf::maps::fip_in::FipInMap;
use cozyplane_lab::load::{self, conn_server};
use cozyplane_lab::outside::{INET4, INET6};
use cozyplane_lab::{Lab, Netns, Outside, bin_dir, sh_ok};
use kube::api::{Api, PostParams};
use serde_json::json;

#[path = "../tests/common/mod.rs"]
mod common;
use common::{Cp, CpOptions, pod, tenant_ranges, until, vni, vpc_ip, wait};

/// The masquerade reference's subnet (first three octets).
const REF_NET: &str = "10.99.0";
/// The masquerade reference's IPv6 subnet (a /64, without the host part).
const REF_NET6: &str = "fd99:0:0:1";
/// The 1:1 reference's subnet (first three octets).
const REF1_NET: &str = "10.99.1";
/// The 1:1 reference's public address: the pool's last (the stand-in assigns from the start).
const REF1_PUBLIC: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 62);

fn secs() -> u64 {
    std::env::var("NS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    cozyplane_lab::require_root();
    let _ = bin_dir();
    Lab::run_on(Lab::dual_stack(2), body);
}

fn iperf(server: &Netns, client: &Netns, to: IpAddr, reverse: bool) -> f64 {
    load::iperf(server, client, to, reverse, secs())
}

fn conn_rate(client: &Netns, to: IpAddr, accepted: &AtomicU64) -> f64 {
    load::conn_rate(client, to, accepted, secs())
}

/// `iptables -t nat <rule>` inside `n`.
fn nat_rule(n: &cozyplane_lab::Node, rule: &[&str]) {
    let mut args = vec!["ip", "netns", "exec", &n.ns.0, "iptables", "-t", "nat"];
    args.extend_from_slice(rule);
    sh_ok(&args);
}

/// A namespace `<net>.2` behind a plain veth `dev` (`<net>.1`) on node `n`, kernel routing,
/// MTU `mtu`; the NAT is the caller's.
fn plain(n: &cozyplane_lab::Node, (dev, net): (&str, &str), mtu: u32) -> Netns {
    let r = Netns::new("ref");
    let m = mtu.to_string();
    n.ns.ip_ok(&[
        "link", "add", dev, "type", "veth", "peer", "name", "eth0", "netns", &r.0,
    ]);
    n.ns.ip_ok(&["link", "set", dev, "mtu", &m, "up"]);
    n.ns.ip_ok(&["addr", "add", &format!("{net}.1/24"), "dev", dev]);
    r.ip_ok(&["link", "set", "eth0", "mtu", &m, "up"]);
    r.ip_ok(&["addr", "add", &format!("{net}.2/24"), "dev", "eth0"]);
    r.ip_ok(&["route", "add", "default", "via", &format!("{net}.1")]);
    r
}

/// The masquerade reference: [`plain`] with iptables MASQUERADE inside the node namespace,
/// and an IPv6 subnet with ip6tables MASQUERADE (the node forwarding IPv6).
fn reference(n: &cozyplane_lab::Node, mtu: u32) -> Netns {
    let r = plain(n, ("refh", REF_NET), mtu);
    let src = format!("{REF_NET}.0/24");
    nat_rule(
        n,
        &["-A", "POSTROUTING", "-s", &src, "-o", "ul0", "-j", "MASQUERADE"],
    );
    n.ns.ip_ok(&[
        "-6",
        "addr",
        "add",
        &format!("{REF_NET6}::1/64"),
        "dev",
        "refh",
        "nodad",
    ]);
    r.ip_ok(&[
        "-6",
        "addr",
        "add",
        &format!("{REF_NET6}::2/64"),
        "dev",
        "eth0",
        "nodad",
    ]);
    r.ip_ok(&["-6", "route", "add", "default", "via", &format!("{REF_NET6}::1")]);
    n.ns.sysctl("net.ipv6.conf.all.forwarding=1");
    let src6 = format!("{REF_NET6}::/64");
    sh_ok(&[
        "ip",
        "netns",
        "exec",
        &n.ns.0,
        "ip6tables",
        "-t",
        "nat",
        "-A",
        "POSTROUTING",
        "-s",
        &src6,
        "-o",
        "ul0",
        "-j",
        "MASQUERADE",
    ]);
    r
}

/// The 1:1 reference: [`plain`] with iptables DNAT and SNAT between [`REF1_PUBLIC`] and the
/// namespace inside the node namespace, what a Floating IP replaces.
fn reference_1to1(n: &cozyplane_lab::Node, mtu: u32) -> Netns {
    let r = plain(n, ("ref1h", REF1_NET), mtu);
    let (public, private) = (REF1_PUBLIC.to_string(), format!("{REF1_NET}.2"));
    nat_rule(
        n,
        &[
            "-A",
            "PREROUTING",
            "-d",
            &public,
            "-j",
            "DNAT",
            "--to-destination",
            &private,
        ],
    );
    nat_rule(
        n,
        &[
            "-A",
            "POSTROUTING",
            "-s",
            &private,
            "-o",
            "ul0",
            "-j",
            "SNAT",
            "--to-source",
            &public,
        ],
    );
    r
}

fn pod_mtu(ns: &Netns) -> u32 {
    let o = ns.ip_ok(&["-o", "link", "show", "dev", "eth0"]);
    o.split(" mtu ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|m| m.parse().ok())
        .unwrap_or(1450)
}

/// One row: throughput client → server, server → client (Gbit/s), connections per second.
type Row<'a> = (&'a str, f64, f64, f64);

fn print_table(title: &str, cols: (&str, &str), rows: &[Row<'_>]) {
    let (_, ru, rd, rr) = rows[0];
    println!("\n{title}:");
    println!(
        "{:<50} {:>14} {:>8} {:>14} {:>8} {:>12} {:>8}",
        "path", cols.0, "ratio", cols.1, "ratio", "conn/s", "ratio"
    );
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    for &(name, up, down, rate) in rows {
        println!(
            "{name:<50} {up:>14.2} {:>7.0}% {down:>14.2} {:>7.0}% {rate:>12.0} {:>7.0}%",
            100.0 * ratio(up, ru),
            100.0 * ratio(down, rd),
            100.0 * ratio(rate, rr)
        );
    }
}

async fn body(lab: &mut Lab) {
    let cp = Cp::start_with(lab, CpOptions::doors()).await;
    let lab = &*lab;
    let n1 = &lab.nodes[0];
    let outside = Outside::new(lab, 1500);
    outside.attract(lab, 0);

    let p0 = pod(&cp, lab, 0, "default", "p0", None).await;
    tenant_ranges(&cp, "t1", "a", &["10.30.0.0/24", "fd00:30::/64"]).await;
    let a1 = pod(&cp, lab, 0, "t1", "a1", Some("a")).await;
    let f1 = pod(&cp, lab, 0, "t1", "f1", Some("a")).await;
    let vni = vni(&cp, "t1", "a").await;
    // The gateway's NAT address and the Floating IP come from the chain: the server's loops
    // own LoadBalancer Services, the stand-in assigns from the pool attracted to n1.
    let gws: Api<VPCGateway> = Api::namespaced(cp.sdn.clone(), "t1");
    let g: VPCGateway = serde_json::from_value(json!({
        "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "VPCGateway",
        "metadata": {"name": "gw", "namespace": "t1"},
        "spec": {"vpcRef": {"name": "a"}, "nat": {"enabled": true}}
    }))
    .unwrap();
    gws.create(&PostParams::default(), &g).await.unwrap();
    let (nat4, nat6): (Ipv4Addr, std::net::Ipv6Addr) =
        until("the gateway's natAddress and natAddress6", || async {
            let st = gws.get("gw").await.ok()?.status?;
            Some((st.nat_address.parse().ok()?, st.nat_address6.parse().ok()?))
        })
        .await;
    let target = IpAddr::V4(vpc_ip(&cp, &f1).await);
    let fips: Api<FloatingIP> = Api::namespaced(cp.sdn.clone(), "t1");
    let f: FloatingIP = serde_json::from_value(json!({
        "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "FloatingIP",
        "metadata": {"name": "eip", "namespace": "t1"},
        "spec": {"vpcRef": {"name": "a"}, "target": target.to_string()}
    }))
    .unwrap();
    fips.create(&PostParams::default(), &f).await.unwrap();
    let eip: IpAddr = until("the FloatingIP Ready with an address", || async {
        let st = fips.get("eip").await.ok()?.status?;
        (st.phase == "Ready").then_some(())?;
        st.address.parse().ok()
    })
    .await;
    assert!(
        eip != IpAddr::V4(REF1_PUBLIC) && nat4 != REF1_PUBLIC,
        "the stand-in assigned the 1:1 reference's address"
    );
    wait("n1 programmed the gateway", || {
        cozyplane_bpf::maps::snat_gws::SnatGwsMap::from_pin(&n1.scratch.pins())
            .and_then(|m| m.entries())
            .is_ok_and(|e| e.iter().any(|(_, g)| *g == (Some(nat4), Some(nat6))))
    });
    wait("n1 programmed the Floating IP", || {
        FipInMap::from_pin(&n1.scratch.pins())
            .and_then(|m| m.entries())
            .is_ok_and(|e| e.contains(&(eip, (vni, target))))
    });
    wait("the pods reach the internet host", || {
        p0.ns.ping(INET4, 1, 1) && a1.ns.ping(INET4, 1, 1) && f1.ns.ping(INET4, 1, 1)
    });
    wait("the pods reach the internet host over IPv6", || {
        p0.ns.ping(INET6, 1, 1) && a1.ns.ping(INET6, 1, 1)
    });
    wait("the internet host reaches the Floating IP", || {
        outside.internet.ping(eip, 1, 1)
    });
    let mtu = pod_mtu(&p0.ns);
    let r = reference(n1, mtu);
    let r1 = reference_1to1(n1, mtu);
    assert!(
        r.ping(INET4, 1, 1) && r1.ping(INET4, 1, 1),
        "the reference namespaces reach the internet host"
    );
    wait(
        "the masquerade reference reaches the internet host over IPv6",
        || r.ping(INET6, 1, 1),
    );
    assert!(
        outside.internet.ping(REF1_PUBLIC, 1, 1),
        "the internet host reaches the 1:1 reference"
    );
    let [at_inet, at_f1, at_r1] = [&outside.internet, &f1.ns, &r1].map(conn_server);

    let inet = IpAddr::V4(INET4);
    let out_paths: [(&str, &Netns); 5] = [
        ("reference (kernel routing + iptables MASQUERADE)", &r),
        ("reference 1:1 (iptables DNAT + SNAT)", &r1),
        ("net-0 masquerade (eBPF)", &p0.ns),
        ("gateway NAT (eBPF, VPC)", &a1.ns),
        ("Floating IP (eBPF, VPC)", &f1.ns),
    ];
    let mut out_rows = Vec::new();
    for (name, ns) in out_paths {
        let up = iperf(&outside.internet, ns, inet, false);
        let down = iperf(&outside.internet, ns, inet, true);
        out_rows.push((name, up, down, conn_rate(ns, inet, &at_inet)));
    }
    let in_paths: [(&str, &Netns, IpAddr, &AtomicU64); 2] = [
        (
            "reference 1:1 (iptables DNAT + SNAT)",
            &r1,
            IpAddr::V4(REF1_PUBLIC),
            &at_r1,
        ),
        ("Floating IP (eBPF, VPC)", &f1.ns, eip, &at_f1),
    ];
    let mut in_rows = Vec::new();
    for (name, ns, public, accepted) in in_paths {
        let down = iperf(ns, &outside.internet, public, false);
        let up = iperf(ns, &outside.internet, public, true);
        in_rows.push((name, down, up, conn_rate(&outside.internet, public, accepted)));
    }
    let inet6 = IpAddr::V6(INET6);
    let v6_paths: [(&str, &Netns); 3] = [
        ("reference (kernel routing + ip6tables MASQUERADE)", &r),
        ("net-0 masquerade (eBPF)", &p0.ns),
        ("gateway NAT (eBPF, VPC)", &a1.ns),
    ];
    let mut v6_rows = Vec::new();
    for (name, ns) in v6_paths {
        let up = iperf(&outside.internet, ns, inet6, false);
        let down = iperf(&outside.internet, ns, inet6, true);
        v6_rows.push((name, up, down, conn_rate(ns, inet6, &at_inet)));
    }
    println!(
        "\nnorth-south, {} s per figure, MTU {mtu} (node n1, router, internet host; gateway {nat4} and {nat6}, Floating IP {eip}):",
        secs(),
    );
    print_table(
        "pod-initiated (pod → internet host)",
        ("pod→inet Gb/s", "inet→pod Gb/s"),
        &out_rows,
    );
    print_table(
        "internet-initiated (internet host → public address → pod)",
        ("inet→pod Gb/s", "pod→inet Gb/s"),
        &in_rows,
    );
    print_table(
        "pod-initiated over IPv6 (pod → internet host)",
        ("pod→inet Gb/s", "inet→pod Gb/s"),
        &v6_rows,
    );
}
