//! North-south benchmarks on the netns lab (issue 12). Needs root and the agent and CNI of the
//! bench's profile (release for `cargo bench`):
//!
//! ```text
//! cargo build --release -p cozyplane-agent && cargo build --release --manifest-path cni/bin/Cargo.toml
//! cargo bench -p cozyplane-lab --bench northsouth
//! ```
//!
//! A two-node lab with the outside world of `cozyplane_lab::outside` (border router, internet
//! host behind it, 1500 everywhere). Three ways out of node n1, same node, same router, same
//! internet host:
//!
//! * **net-0 masquerade**: a default-network pod, masqueraded by the datapath to n1's address;
//! * **gateway NAT**: a VPC pod whose VPC's gateway has NAT (its address attracted to n1);
//! * **reference**: a namespace wired to n1 by a plain veth with kernel routing and
//!   `iptables -t nat -A POSTROUTING -s <its subnet> -o ul0 -j MASQUERADE` inside n1 (what a
//!   user would otherwise run), with the pods' MTU.
//!
//! Measured: TCP throughput (iperf3, both directions: pod → internet and internet → pod over
//! the same connection direction, `-R`) and NAT connection set-up rate (new TCP connections
//! per second, each connect + close, from the pod to a listener on the internet host).
//! Ratios are against the reference. Figures are printed, never asserted. `NS_SECS` sets the
//! seconds per measurement (default 5; `NS_SECS=1` for a quick proof that it runs).

use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use cozyplane_apis::v1alpha1::VPCGateway;
use cozyplane_lab::outside::INET4;
use cozyplane_lab::{Lab, Netns, Outside, bin_dir, run_in, sh_ok};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

#[path = "../tests/common/mod.rs"]
mod common;
use common::{Cp, pod, tenant, wait};

const NAT4: &str = "203.0.113.10";
const CONN_PORT: u16 = 7070;
const REF_NET: &str = "10.99.0";

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
    Lab::run(2, body);
}

/// iperf3 from `client` to the internet host; `reverse`: the host sends. Gbit/s received.
fn iperf(outside: &Outside, client: &Netns, reverse: bool) -> f64 {
    let server = outside.internet.iperf_server(5201);
    let t = secs().to_string();
    let mut args = vec![
        "timeout",
        "60",
        "iperf3",
        "-c",
        "198.51.100.2",
        "-t",
        &t,
        "-O",
        "1",
        "--json",
    ];
    if reverse {
        args.push("-R");
    }
    let o = client.exec(&args);
    drop(server);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
    v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap_or(0.0)
        / 1e9
}

/// A listener on the internet host that accepts and drops connections until the process ends.
fn conn_server(ns: &Netns) {
    let path = ns.path();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let f = std::fs::File::open(&path).unwrap();
        nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
        let l = TcpListener::bind(("0.0.0.0", CONN_PORT)).unwrap();
        tx.send(()).unwrap();
        for c in l.incoming() {
            drop(c);
        }
    });
    rx.recv().unwrap();
}

/// New TCP connections per second from `client` to the internet host (connect, then close),
/// two connecting threads for `secs()` seconds.
fn conn_rate(client: &Netns) -> f64 {
    let dur = Duration::from_secs(secs());
    let counts: Vec<u64> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    run_in(client, || {
                        let t = Instant::now();
                        let mut n = 0u64;
                        while t.elapsed() < dur {
                            if let Ok(c) =
                                TcpStream::connect_timeout(&(INET4, CONN_PORT).into(), Duration::from_secs(2))
                            {
                                drop(c);
                                n += 1;
                            }
                        }
                        n
                    })
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    counts.iter().sum::<u64>() as f64 / dur.as_secs_f64()
}

/// The reference: a namespace behind a plain veth on node `n`, kernel routing and iptables
/// MASQUERADE inside the node namespace only, MTU `mtu`.
fn reference(n: &cozyplane_lab::Node, mtu: u32) -> Netns {
    let r = Netns::new("ref");
    let m = mtu.to_string();
    n.ns.ip_ok(&[
        "link", "add", "refh", "type", "veth", "peer", "name", "eth0", "netns", &r.0,
    ]);
    n.ns.ip_ok(&["link", "set", "refh", "mtu", &m, "up"]);
    n.ns.ip_ok(&["addr", "add", &format!("{REF_NET}.1/24"), "dev", "refh"]);
    r.ip_ok(&["link", "set", "eth0", "mtu", &m, "up"]);
    r.ip_ok(&["addr", "add", &format!("{REF_NET}.2/24"), "dev", "eth0"]);
    r.ip_ok(&["route", "add", "default", "via", &format!("{REF_NET}.1")]);
    sh_ok(&[
        "ip",
        "netns",
        "exec",
        &n.ns.0,
        "iptables",
        "-t",
        "nat",
        "-A",
        "POSTROUTING",
        "-s",
        &format!("{REF_NET}.0/24"),
        "-o",
        "ul0",
        "-j",
        "MASQUERADE",
    ]);
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

async fn body(lab: &mut Lab) {
    let cp = Cp::start(lab).await;
    let lab = &*lab;
    let n1 = &lab.nodes[0];
    let outside = Outside::new(lab, 1500);

    let p0 = pod(&cp, lab, 0, "default", "p0", None).await;
    tenant(&cp, "t1", "a", "10.30.0.0/24").await;
    let a1 = pod(&cp, lab, 0, "t1", "a1", Some("a")).await;
    // The gateway's NAT address, written through the status subresource: it stands for the
    // server's gateway loop and the LoadBalancer implementation.
    let gws: Api<VPCGateway> = Api::namespaced(cp.sdn.clone(), "t1");
    let g: VPCGateway = serde_json::from_value(json!({
        "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "VPCGateway",
        "metadata": {"name": "gw", "namespace": "t1"},
        "spec": {"vpcRef": {"name": "a"}, "nat": {"enabled": true}}
    }))
    .unwrap();
    gws.create(&PostParams::default(), &g).await.unwrap();
    gws.patch_status(
        "gw",
        &PatchParams::default(),
        &Patch::Merge(&json!({"status": {"natAddress": NAT4}})),
    )
    .await
    .unwrap();
    outside.attract(lab, 0);
    let nat4: Ipv4Addr = NAT4.parse().unwrap();
    wait("n1 programmed the gateway", || {
        cozyplane_bpf::maps::snat_gws::SnatGwsMap::from_pin(&n1.scratch.pins())
            .and_then(|m| m.entries())
            .is_ok_and(|e| e.iter().any(|(_, (a, _))| *a == Some(nat4)))
    });
    wait("the pods reach the internet host", || {
        p0.ns.ping(INET4, 1, 1) && a1.ns.ping(INET4, 1, 1)
    });
    let r = reference(n1, pod_mtu(&p0.ns));
    assert!(
        r.ping(INET4, 1, 1),
        "the reference namespace reaches the internet host"
    );
    conn_server(&outside.internet);

    let paths: [(&str, &Netns); 3] = [
        ("reference (kernel routing + iptables MASQUERADE)", &r),
        ("net-0 masquerade (eBPF)", &p0.ns),
        ("gateway NAT (eBPF, VPC)", &a1.ns),
    ];
    let mut rows = Vec::new();
    for (name, ns) in paths {
        let up = iperf(&outside, ns, false);
        let down = iperf(&outside, ns, true);
        let rate = conn_rate(ns);
        rows.push((name, up, down, rate));
    }
    let (_, ru, rd, rr) = rows[0];
    println!(
        "\nnorth-south, {} s per figure, MTU {} (node n1, router, internet host):",
        secs(),
        pod_mtu(&p0.ns)
    );
    println!(
        "{:<50} {:>14} {:>8} {:>14} {:>8} {:>12} {:>8}",
        "path", "pod→inet Gb/s", "ratio", "inet→pod Gb/s", "ratio", "conn/s", "ratio"
    );
    for (name, up, down, rate) in rows {
        let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
        println!(
            "{name:<50} {up:>14.2} {:>7.0}% {down:>14.2} {:>7.0}% {rate:>12.0} {:>7.0}%",
            100.0 * ratio(up, ru),
            100.0 * ratio(down, rd),
            100.0 * ratio(rate, rr)
        );
    }
}
