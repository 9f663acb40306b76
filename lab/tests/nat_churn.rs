//! `make e2e`: the SNAT doors under connection churn (issue 12's set-up rate), and the
//! ICMP errors pods send about NATed flows. Needs root, tcpdump, and the agent and CNI
//! binaries built.
//!
//! The agent runs with a masquerade range of 16 ports (`--masquerade-ports`) and 1,024
//! gateway shards (`--nat-shards`: 63 ports each), so a few hundred connections are many
//! times the span. From a default-network pod (masquerade) and a VPC pod (its gateway's
//! NAT) to one listener on the internet host, each opens four times its span of TCP
//! connections one after the other (connect, close): every one must be accepted, and no
//! SYN may find the span full (`DROP_SNAT_FULL` stays 0), which holds only if a closed
//! connection gives its port back at once. Then each pod answers a datagram that arrives
//! after its socket closed with a port unreachable, which must reach the internet host from
//! the NAT address, quoting the NAT port. Last, the internet host opens connections to a
//! Floating IP whose target listens: all set up, nothing dropped by the datapath.
//!
//! Layout: one node, the outside world of `cozyplane_lab::outside` with the pool attracted
//! to it, tenant t1's VPC a (10.30.0.0/24) with a NAT-enabled gateway.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::Ordering;
use std::time::Duration;

use cozyplane_apis::v1alpha1::{FloatingIP, VPCGateway};
use cozyplane_bpf::DropReason;
use cozyplane_bpf::maps::snat_gws::SnatGwsMap;
use cozyplane_lab::load::{CONN_PORT, conn_server};
use cozyplane_lab::outside::INET4;
use cozyplane_lab::{Lab, LabPod, Netns, Outside, run_in};
use kube::api::{Api, PostParams};
use serde_json::json;

mod common;
use common::{Cp, CpOptions, pod, tenant, until, vpc_ip, wait};

const ECHO_PORT: u16 = 7777;
const MASQ_PORTS: (u16, u16) = (61000, 61015);
const NAT_SHARDS: u16 = 1024;
/// Ports per gateway shard with [`NAT_SHARDS`] (the agent's `shard_size`).
const SHARD_SIZE: u16 = (65535 - 1024 + 1) / NAT_SHARDS;

#[test]
fn lab_nat_churn() {
    Lab::run(1, body);
}

/// `TcpExtTCPSynRetrans` of `ns`: SYNs its TCP had to send again.
fn syn_retrans(ns: &Netns) -> u64 {
    let o = ns.exec(&["nstat", "-asz", "TcpExtTCPSynRetrans"]);
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .find_map(|l| {
            l.strip_prefix("TcpExtTCPSynRetrans")?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

/// A UDP server on the internet host that answers each datagram after 300 ms (its sender's
/// socket is closed by then); the source of each datagram it got.
fn late_echo(ns: &Netns) -> std::sync::mpsc::Receiver<SocketAddr> {
    let path = ns.path();
    let (tx, rx) = std::sync::mpsc::channel();
    let (up, ready) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let f = std::fs::File::open(&path).unwrap();
        nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
        let s = UdpSocket::bind(("0.0.0.0", ECHO_PORT)).unwrap();
        up.send(()).unwrap();
        let mut buf = [0u8; 512];
        while let Ok((n, from)) = s.recv_from(&mut buf) {
            let _ = tx.send(from);
            std::thread::sleep(Duration::from_millis(300));
            let _ = s.send_to(&buf[..n], from);
        }
    });
    ready.recv().unwrap();
    rx
}

/// One connection to `to`, closed by the server first (read to its FIN), then by us: whether
/// it was set up and closed. A connect that gets no answer in 5 s (its SYN and a
/// retransmission dropped) counts as failed: the bound only keeps a broken datapath from
/// hanging the test.
fn connect_close(to: SocketAddr) -> bool {
    let Ok(mut c) = TcpStream::connect_timeout(&to, Duration::from_secs(5)) else {
        return false;
    };
    let _ = c.set_read_timeout(Some(Duration::from_secs(5)));
    // Waiting for the server's close keeps one connection at a time: a client that closes
    // and moves on would leave half-closed ones behind (the listener accepts later), which
    // rightly keep their ports.
    matches!(std::io::Read::read(&mut c, &mut [0u8; 16]), Ok(0))
}

/// `n` connections from `p` to the listener, one after the other; how many were set up.
fn churn(p: &LabPod, n: u32) -> u32 {
    run_in(&p.ns, || {
        let to = SocketAddr::from((INET4, CONN_PORT));
        (0..n).filter(|_| connect_close(to)).count() as u32
    })
}

/// `p` sends a datagram to the late echo and closes its socket; the echo's answer meets a
/// closed port, and the pod's port unreachable must reach the internet host from `nat`,
/// quoting `nat` and the NAT port the echo saw.
fn unreachable_leaves_translated(
    outside: &Outside,
    echo: &std::sync::mpsc::Receiver<SocketAddr>,
    p: &LabPod,
    nat: Ipv4Addr,
) {
    let seen = outside.capture("icmp", || {
        run_in(&p.ns, || {
            let s = UdpSocket::bind("0.0.0.0:0").unwrap();
            s.send_to(b"knock", (INET4, ECHO_PORT)).unwrap();
        });
        std::thread::sleep(Duration::from_millis(800));
    });
    let from = echo
        .recv_timeout(Duration::from_secs(5))
        .expect("the echo got the datagram");
    eprintln!(
        "{}: the echo saw {from}; ICMP on the internet host: {seen:?}",
        p.name
    );
    assert_eq!(
        from.ip(),
        IpAddr::V4(nat),
        "the datagram left from the NAT address"
    );
    let want = format!(
        "IP {nat} > {INET4}: ICMP {nat} udp port {} unreachable",
        from.port()
    );
    assert!(
        seen.iter().any(|l| l.contains(&want)),
        "{}: no `{want}` among {seen:?}",
        p.name
    );
}

async fn body(lab: &mut Lab) {
    let (lo, hi) = (MASQ_PORTS.0.to_string(), MASQ_PORTS.1.to_string());
    let masq = format!("{lo}-{hi}");
    let shards = NAT_SHARDS.to_string();
    let cp = Cp::start_with_args(
        lab,
        CpOptions::doors(),
        &["--masquerade-ports", &masq, "--nat-shards", &shards],
    )
    .await;
    let lab = &*lab;
    let n1 = &lab.nodes[0];
    let outside = Outside::new(lab, 1500);
    outside.attract(lab, 0);

    let p0 = pod(&cp, lab, 0, "default", "p0", None).await;
    tenant(&cp, "t1", "a", "10.30.0.0/24").await;
    let a1 = pod(&cp, lab, 0, "t1", "a1", Some("a")).await;
    let gws: Api<VPCGateway> = Api::namespaced(cp.sdn.clone(), "t1");
    let g: VPCGateway = serde_json::from_value(json!({
        "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "VPCGateway",
        "metadata": {"name": "gw", "namespace": "t1"},
        "spec": {"vpcRef": {"name": "a"}, "nat": {"enabled": true}}
    }))
    .unwrap();
    gws.create(&PostParams::default(), &g).await.unwrap();
    let nat4: Ipv4Addr = until("the gateway's natAddress", || async {
        gws.get("gw").await.ok()?.status?.nat_address.parse().ok()
    })
    .await;
    wait("n1 programmed the gateway", || {
        SnatGwsMap::from_pin(&n1.scratch.pins())
            .and_then(|m| m.entries())
            .is_ok_and(|e| e.iter().any(|(_, (a, _))| *a == Some(nat4)))
    });
    wait("the pods reach the internet host", || {
        p0.ns.ping(INET4, 1, 1) && a1.ns.ping(INET4, 1, 1)
    });

    let accepted = conn_server(&outside.internet);
    let span_masq = u32::from(MASQ_PORTS.1 - MASQ_PORTS.0 + 1);
    for (p, span) in [(&p0, span_masq), (&a1, u32::from(SHARD_SIZE))] {
        let n = 4 * span;
        let before = accepted.load(Ordering::Relaxed);
        let ok = churn(p, n);
        std::thread::sleep(Duration::from_millis(300));
        let got = accepted.load(Ordering::Relaxed) - before;
        eprintln!(
            "{}: {ok}/{n} connected over a span of {span} ports, {got} accepted; drops: \
             SNAT full {}, TCP without a flow {}",
            p.name,
            n1.drops(DropReason::SnatFull),
            n1.drops(DropReason::SnatTcpNoFlow)
        );
        assert_eq!(ok, n, "{}: every connection set up", p.name);
        assert_eq!(got, u64::from(n), "{}: the listener accepted them all", p.name);
        assert_eq!(
            n1.drops(DropReason::SnatFull),
            0,
            "{}: no SYN found the span full",
            p.name
        );
    }

    // Internet-initiated, through a Floating IP: the internet host connects to the public
    // address, the listener is in the pod.
    let f1 = pod(&cp, lab, 0, "t1", "f1", Some("a")).await;
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
    wait("the internet host reaches the Floating IP", || {
        outside.internet.ping(eip, 1, 1)
    });
    let at_f1 = conn_server(&f1.ns);
    let retrans = syn_retrans(&outside.internet);
    let n = 500;
    let ok = run_in(&outside.internet, || {
        let to = SocketAddr::from((eip, CONN_PORT));
        (0..n).filter(|_| connect_close(to)).count()
    });
    let dropped: Vec<_> = DropReason::ALL
        .iter()
        .map(|r| (r.c_name(), n1.drops(*r)))
        .filter(|(_, c)| *c > 0)
        .collect();
    eprintln!(
        "inet -> {eip} (f1): {ok}/{n} set up, {} accepted, SYN retransmissions {}; n1 drops {dropped:?}",
        at_f1.load(Ordering::Relaxed),
        syn_retrans(&outside.internet) - retrans,
    );
    assert_eq!(ok, n, "every connection to the Floating IP set up");
    assert_eq!(at_f1.load(Ordering::Relaxed), n as u64, "f1 accepted them all");
    assert!(dropped.is_empty(), "the datapath dropped nothing: {dropped:?}");

    let echo = late_echo(&outside.internet);
    unreachable_leaves_translated(&outside, &echo, &p0, n1.ip);
    unreachable_leaves_translated(&outside, &echo, &a1, nat4);
}
