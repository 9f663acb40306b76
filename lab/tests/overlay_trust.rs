//! `make e2e`: overlay trust per node (issue 29, item 3) with hand-built VXLAN packets. A
//! known node may inject only the inner sources it holds (its block, its Ports' addresses
//! per VNI), with the groups they hold; anything else is dropped at the receiver's
//! `sdn_from_overlay` and counted in `sdn_forged` under the sender, which the agent exports as
//! `cozyplane_overlay_forged_{packets,bytes}_total{node,address,reason}`. Needs root, ping,
//! and the agent and CNI binaries built.
//!
//! Layout, two nodes and a third Node object without an agent ("n3", block 10.244.3.0/24,
//! InternalIP 192.168.77.3, an address n1 borrows to send as n3):
//!
//! * net 0: p1 on n1, p2 and q2 on n2;
//! * VPC t1/a (10.72.0.0/24): a1 (group `snd`) and f1 (no group) on n1, a2 (group `rcv`) and
//!   o2 (no group) on n2; `snd` may send UDP 7000 and ICMP echo to `rcv`, `rcv` accepts them
//!   from `snd`; a third group `other` has no member;
//! * VPC t2/b (10.72.0.0/24 too: the ranges overlap, as tenants' do): b2 on n2.
//!
//! First real traffic both ways (ping, TCP, the rule's UDP), net 0 and VPC: nothing is counted
//! as forged on either node. Then each case sends three packets from n1's netns through a UDP
//! socket bound to n1's underlay address (the tunnel address n2 knows), to n2's VXLAN port: a
//! VXLAN header (with the GBP extension, flags 0x88 and the 16-bit policy id, when the case
//! carries a tag; the lab's devices have `gbp`), the inner Ethernet, IPv4 and UDP to a
//! listener on port 7000 in a pod of n2. A forged case must reach no listener and add exactly
//! its packets to n2's counter of the right sender and reason, in the map and in the metric;
//! a control case, the same packet with a legitimate source, must be delivered with nothing
//! counted, so every forged case has a twin that would fail if the check refused too much.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cozyplane_bpf::DropReason;
use cozyplane_bpf::maps::forged::ForgedMap;
use cozyplane_bpf::maps::sg_members::SgMembersMap;
use cozyplane_lab::{Lab, LabPod, Netns, Node, run_in};
use k8s_openapi::api::core::v1::Node as KubeNode;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

mod common;
mod sg_lab;
use common::{Cp, CpOptions, metric, pod, tenant, vni, vpc_ip, wait};
use sg_lab::{OPEN, group, relabel, serve, tcp_ok};

/// The listeners' UDP port, and the port `snd` may send to.
const PORT: u16 = 7000;
/// Packets per case.
const K: u64 = 3;
/// The lab's VXLAN port (the agent's default for VXLAN).
const VXLAN_PORT: u16 = 4789;
/// The VNI of the default network (the agent's `--net0-vni` default).
const NET0_VNI: u32 = 1;
/// The Node object without an agent: its name, tunnel address and block.
const GHOST: (&str, Ipv4Addr, &str) = ("n3", Ipv4Addr::new(192, 168, 77, 3), "10.244.3.0/24");

#[test]
fn lab_overlay_trust() {
    Lab::run(2, body);
}

/// A UDP listener on [`PORT`] in a pod's netns: every datagram's payload and source, kept
/// until the process ends.
#[derive(Clone)]
struct Listener {
    pod: String,
    got: Arc<Mutex<Vec<(String, IpAddr)>>>,
}

impl Listener {
    fn start(p: &LabPod) -> Self {
        let got: Arc<Mutex<Vec<(String, IpAddr)>>> = Arc::default();
        let (path, sink) = (p.ns.path(), got.clone());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let f = std::fs::File::open(&path).unwrap();
            nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
            let s = UdpSocket::bind(("0.0.0.0", PORT)).unwrap();
            tx.send(()).unwrap();
            let mut buf = [0u8; 2048];
            while let Ok((n, from)) = s.recv_from(&mut buf) {
                let text = String::from_utf8_lossy(&buf[..n]).to_string();
                sink.lock().unwrap().push((text, from.ip()));
            }
        });
        rx.recv().unwrap();
        Self {
            pod: p.name.clone(),
            got,
        }
    }

    /// Datagrams whose payload starts with `prefix`, and their sources.
    fn seen(&self, prefix: &str) -> Vec<IpAddr> {
        self.got
            .lock()
            .unwrap()
            .iter()
            .filter(|(t, _)| t.starts_with(prefix))
            .map(|(_, ip)| *ip)
            .collect()
    }
}

/// `sdn_forged` of `node`: packets per (sender, reason).
fn forged(node: &Node) -> BTreeMap<(IpAddr, u32), u64> {
    ForgedMap::from_pin(&node.scratch.pins())
        .and_then(|m| m.all())
        .unwrap_or_default()
        .into_iter()
        .map(|f| ((f.node, f.reason.index()), f.stats.packets))
        .collect()
}

/// The `reason` label of a forged reason.
fn label(r: DropReason) -> &'static str {
    match r {
        DropReason::OverlayForgedSrc => "source",
        _ => "tag",
    }
}

/// One sample of `node`'s forged-packet counter for sender `(name, address)`, scraped now.
fn forged_metric(node: &Node, what: &str, (name, addr): (&str, Ipv4Addr), r: DropReason) -> f64 {
    let sample = format!(
        "cozyplane_overlay_forged_{what}_total{{node=\"{name}\",address=\"{addr}\",reason=\"{}\"}}",
        label(r)
    );
    metric(&node.metrics(), &sample)
}

/// The MAC of `dev` in `ns`.
fn mac(ns: &Netns, dev: &str) -> [u8; 6] {
    let out = ns.ip_ok(&["-o", "link", "show", "dev", dev]);
    let hex = out
        .split_whitespace()
        .skip_while(|w| *w != "link/ether")
        .nth(1)
        .unwrap_or_else(|| panic!("no MAC of {dev}: {out}"));
    let b: Vec<u8> = hex
        .split(':')
        .map(|x| u8::from_str_radix(x, 16).unwrap())
        .collect();
    b.try_into().unwrap()
}

/// The one's-complement sum of `b` folded to 16 bits, inverted (the IPv4 header checksum).
fn csum(b: &[u8]) -> u16 {
    let mut s: u32 = b
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    !(u16::try_from(s).unwrap())
}

/// The VXLAN payload of one hand-built packet: the VXLAN header (GBP when `tag` is given:
/// flags `0x88`, the policy id in bytes 2–3), then Ethernet to `dst_mac`, IPv4 `src` →
/// `dst`, UDP 40000 → [`PORT`] carrying `text`.
fn vxlan(
    vni: u32,
    tag: Option<u16>,
    dst_mac: [u8; 6],
    (src, dst): (Ipv4Addr, Ipv4Addr),
    text: &str,
) -> Vec<u8> {
    let mut p = Vec::with_capacity(96);
    let id = tag.unwrap_or(0).to_be_bytes();
    p.extend([if tag.is_some() { 0x88 } else { 0x08 }, 0, id[0], id[1]]);
    p.extend(&(vni << 8).to_be_bytes());
    p.extend(dst_mac);
    p.extend([0x02, 0x7e, 0x57, 0, 0, 0x01]); // a source MAC that is no device's
    p.extend([0x08, 0x00]);
    let udp_len = 8 + text.len();
    let total = u16::try_from(20 + udp_len).unwrap();
    let mut ip = vec![0x45, 0, 0, 0, 0x12, 0x34, 0x40, 0, 64, 17, 0, 0];
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip.extend(src.octets());
    ip.extend(dst.octets());
    let c = csum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    p.extend(ip);
    p.extend(40000u16.to_be_bytes());
    p.extend(PORT.to_be_bytes());
    p.extend(u16::try_from(udp_len).unwrap().to_be_bytes());
    p.extend([0, 0]); // no UDP checksum (IPv4)
    p.extend(text.as_bytes());
    p
}

/// What a case must come to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Want {
    Delivered,
    Forged(DropReason),
}

/// One hand-built packet, sent [`K`] times.
struct Case<'a> {
    name: &'a str,
    /// The outer source: the sender's tunnel address (bound in n1's netns) and its Node name.
    from: (&'a str, Ipv4Addr),
    vni: u32,
    tag: Option<u16>,
    src: Ipv4Addr,
    dst: Ipv4Addr,
    to: &'a Listener,
    want: Want,
}

/// Sends `c` from n1's netns to n2 and checks its outcome at n2: the listener and the
/// counters (map and metric). Returns one line of the table.
fn run(lab: &Lab, tunnel_mac: [u8; 6], c: &Case) -> String {
    let (n1, n2) = (&lab.nodes[0], &lab.nodes[1]);
    let before = forged(n2);
    let metric_before = match c.want {
        Want::Forged(r) => forged_metric(n2, "packets", c.from, r),
        Want::Delivered => 0.0,
    };
    let to = SocketAddr::from((n2.ip, VXLAN_PORT));
    run_in(&n1.ns, || {
        let s = UdpSocket::bind((c.from.1, 0)).unwrap();
        for i in 0..K {
            let pkt = vxlan(
                c.vni,
                c.tag,
                tunnel_mac,
                (c.src, c.dst),
                &format!("{}#{i}", c.name),
            );
            s.send_to(&pkt, to).unwrap();
        }
    });
    let prefix = format!("{}#", c.name);
    let t = Instant::now();
    let counted = |after: &BTreeMap<(IpAddr, u32), u64>, r: DropReason| {
        let k = (IpAddr::V4(c.from.1), r.index());
        after
            .get(&k)
            .copied()
            .unwrap_or(0)
            .saturating_sub(before.get(&k).copied().unwrap_or(0))
    };
    match c.want {
        Want::Delivered => {
            while (c.to.seen(&prefix).len() as u64) < K && t.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Want::Forged(r) => {
            while counted(&forged(n2), r) < K && t.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(20));
            }
            // Anything late would show by now.
            std::thread::sleep(Duration::from_millis(300));
        }
    }
    let after = forged(n2);
    let seen = c.to.seen(&prefix);
    let (src_n, tag_n) = (
        counted(&after, DropReason::OverlayForgedSrc),
        counted(&after, DropReason::OverlayForgedTag),
    );
    let tag = c.tag.map_or("-".to_string(), |t| format!("{t:#06x}"));
    let line = format!(
        "{:<34} from {:<2} vni {:<5} {:>15} -> {:<15} tag {:<6} to {:<3} delivered {}/{K} forged source {src_n} tag {tag_n}",
        c.name,
        c.from.0,
        c.vni,
        c.src,
        c.dst,
        tag,
        c.to.pod,
        seen.len()
    );
    eprintln!("{line}");
    match c.want {
        Want::Delivered => {
            assert_eq!(seen.len() as u64, K, "{}: delivered", c.name);
            assert!(
                seen.iter().all(|s| *s == IpAddr::V4(c.src)),
                "{}: with its source {}: {seen:?}",
                c.name,
                c.src
            );
            assert_eq!(after, before, "{}: nothing counted as forged", c.name);
        }
        Want::Forged(r) => {
            assert!(seen.is_empty(), "{}: reached {}: {seen:?}", c.name, c.to.pod);
            assert_eq!(counted(&after, r), K, "{}: counted as {}", c.name, label(r));
            let other = if r == DropReason::OverlayForgedSrc {
                tag_n
            } else {
                src_n
            };
            assert_eq!(other, 0, "{}: under its reason only", c.name);
            // The agent's metric names the sender.
            let got = forged_metric(n2, "packets", c.from, r) - metric_before;
            assert_eq!(
                got,
                K as f64,
                "{}: cozyplane_overlay_forged_packets_total{{node=\"{}\",reason=\"{}\"}} on n2",
                c.name,
                c.from.0,
                label(r)
            );
        }
    }
    line
}

/// A UDP datagram `text` from `from`'s netns to `to:PORT`, as an application sends it.
fn udp(from: &LabPod, to: Ipv4Addr, text: &str) {
    run_in(&from.ns, || {
        let s = UdpSocket::bind("0.0.0.0:0").unwrap();
        s.send_to(text.as_bytes(), (to, PORT)).unwrap();
    });
}

/// Registers the Node object of [`GHOST`] as kubelet and kube-controller-manager would, with
/// no agent behind it.
async fn ghost(cp: &Cp) {
    let (name, ip, block) = GHOST;
    let nodes: Api<KubeNode> = Api::all(cp.kube.clone());
    let n: KubeNode = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
        "spec": {"podCIDR": block, "podCIDRs": [block]}
    }))
    .unwrap();
    nodes.create(&PostParams::default(), &n).await.unwrap();
    let status = json!({"status": {"addresses": [{"type": "InternalIP", "address": ip.to_string()}]}});
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

async fn body(lab: &mut Lab) {
    let cp = Cp::start_with(lab, CpOptions::doors()).await;
    let lab = &*lab;
    let (n1, n2) = (&lab.nodes[0], &lab.nodes[1]);
    for n in &lab.nodes {
        let d = n.ns.ip_ok(&["-d", "link", "show", "dev", "cozyplane0"]);
        assert!(
            d.split_whitespace().any(|w| w == "gbp"),
            "{}: the tunnel device has gbp: {d}",
            n.name
        );
    }
    let tunnel_mac = mac(&n2.ns, "cozyplane0");

    // --- The layout.
    ghost(&cp).await;
    tenant(&cp, "t1", "a", "10.72.0.0/24").await;
    tenant(&cp, "t2", "b", "10.72.0.0/24").await;
    let (va, vb) = (vni(&cp, "t1", "a").await, vni(&cp, "t2", "b").await);
    let p1 = pod(&cp, lab, 0, "default", "p1", None).await;
    let p2 = pod(&cp, lab, 1, "default", "p2", None).await;
    let q2 = pod(&cp, lab, 1, "default", "q2", None).await;
    let a1 = pod(&cp, lab, 0, "t1", "a1", Some("a")).await;
    let f1 = pod(&cp, lab, 0, "t1", "f1", Some("a")).await;
    let a2 = pod(&cp, lab, 1, "t1", "a2", Some("a")).await;
    let o2 = pod(&cp, lab, 1, "t1", "o2", Some("a")).await;
    let b2 = pod(&cp, lab, 1, "t2", "b2", Some("b")).await;
    let (ia1, if1, ia2, io2, ib2) = (
        vpc_ip(&cp, &a1).await,
        vpc_ip(&cp, &f1).await,
        vpc_ip(&cp, &a2).await,
        vpc_ip(&cp, &o2).await,
        vpc_ip(&cp, &b2).await,
    );
    eprintln!(
        "net 0: p1 {} (n1), p2 {} q2 {} (n2); VPC a (vni {va}): a1 {ia1} f1 {if1} (n1), a2 {ia2} o2 {io2} (n2); VPC b (vni {vb}): b2 {ib2} (n2)",
        p1.fabric, p2.fabric, q2.fabric
    );
    let (udp_port, echo) = (
        json!({"protocol": "UDP", "port": PORT}),
        json!({"protocol": "ICMP", "port": 8}),
    );
    let snd = group(
        &cp,
        ("t1", "a", "snd"),
        "snd",
        (
            &json!([]),
            &json!([{"to": {"group": "rcv"}, "ports": [udp_port, echo]}]),
        ),
    )
    .await;
    let rcv = group(
        &cp,
        ("t1", "a", "rcv"),
        "rcv",
        (
            &json!([{"from": {"group": "snd"}, "ports": [udp_port, echo]}]),
            &json!([]),
        ),
    )
    .await;
    let other = group(&cp, ("t1", "a", "other"), "other", (&json!([]), &json!([]))).await;
    assert!(
        snd < 16 && rcv < 16 && other < 16,
        "the groups travel in the GBP id"
    );
    relabel(&cp, &a1, Some("snd")).await;
    relabel(&cp, &a2, Some("rcv")).await;
    let ghost_block_addr = Ipv4Addr::new(10, 244, 3, 5);
    let members = |n: &Node| -> BTreeMap<(u32, IpAddr), u64> {
        SgMembersMap::from_pin(&n.scratch.pins())
            .and_then(|m| m.entries())
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| ((k.net, k.ip.into()), v.groups))
            .collect()
    };
    wait(
        "both nodes know every pod, the ghost's block and the groups",
        || {
            n2.remote(0, p1.fabric) == Some(n1.ip.into())
                && n1.remote(0, p2.fabric) == Some(n2.ip.into())
                && n2.remote(0, ghost_block_addr) == Some(GHOST.1.into())
                && n2.remote(va, ia1) == Some(n1.ip.into())
                && n2.remote(va, if1) == Some(n1.ip.into())
                && n1.remote(va, ia2) == Some(n2.ip.into())
                && n1.remote(va, io2) == Some(n2.ip.into())
                && lab.nodes.iter().all(|n| {
                    let m = members(n);
                    m.get(&(va, IpAddr::V4(ia1))) == Some(&(1u64 << snd))
                        && m.get(&(va, IpAddr::V4(ia2))) == Some(&(1u64 << rcv))
                })
        },
    );
    let lp2 = Listener::start(&p2);
    let la2 = Listener::start(&a2);
    let lo2 = Listener::start(&o2);
    let lb2 = Listener::start(&b2);
    for p in [&p1, &p2, &f1, &o2] {
        serve(p);
    }

    // --- Real traffic both ways, net 0 and VPC: nothing is forged.
    let t = Instant::now();
    assert!(p1.ns.ping(p2.fabric, 3, 3), "net 0: p1 -> p2");
    assert!(p2.ns.ping(p1.fabric, 3, 3), "net 0: p2 -> p1");
    assert!(n1.ns.ping(p2.fabric, 3, 3), "net 0: node n1 -> p2");
    assert!(p2.ns.ping(n1.ip, 3, 3), "net 0: p2 -> node n1");
    assert!(tcp_ok(&p1.ns, IpAddr::V4(p2.fabric), OPEN), "net 0: TCP p1 -> p2");
    assert!(tcp_ok(&p2.ns, IpAddr::V4(p1.fabric), OPEN), "net 0: TCP p2 -> p1");
    assert!(f1.ns.ping(io2, 3, 3), "VPC a: f1 -> o2");
    assert!(o2.ns.ping(if1, 3, 3), "VPC a: o2 -> f1");
    assert!(tcp_ok(&f1.ns, IpAddr::V4(io2), OPEN), "VPC a: TCP f1 -> o2");
    assert!(tcp_ok(&o2.ns, IpAddr::V4(if1), OPEN), "VPC a: TCP o2 -> f1");
    // Grouped: the echo by the rules, its replies with a2's groups on the wire.
    assert!(a1.ns.ping(ia2, 3, 3), "VPC a: a1 -> a2 (snd -> rcv, ICMP echo)");
    // The rule's UDP, with a1's groups on the wire (retried while the rules settle).
    let mut sent = 0;
    wait("a1's UDP to a2 (snd -> rcv) arrives", || {
        udp(&a1, ia2, &format!("real#{sent}"));
        sent += 1;
        !la2.seen("real#").is_empty()
    });
    for i in 0..20 {
        udp(&a1, ia2, &format!("real-more#{i}"));
    }
    wait("all of a1's UDP arrives", || la2.seen("real-more#").len() == 20);
    let real_ms = t.elapsed().as_millis();
    for n in &lab.nodes {
        let f = forged(n);
        assert!(f.is_empty(), "{}: real traffic counted as forged: {f:?}", n.name);
    }
    eprintln!(
        "PASS real traffic (net 0 and VPC, both ways: 7 pings x3, 4 TCP exchanges, {} UDP) in {real_ms} ms: sdn_forged empty on both nodes",
        20 + la2.seen("real#").len()
    );

    // --- Hand-built packets from n1 (and from n1 posing as the ghost n3) to n2.
    n1.ns
        .ip_ok(&["addr", "add", &format!("{}/24", GHOST.1), "dev", "ul0"]);
    let me = ("n1", n1.ip);
    let n3 = (GHOST.0, GHOST.1);
    let tag_of = |groups: u64| Some(u16::try_from(groups | 1).unwrap());
    let src = Want::Forged(DropReason::OverlayForgedSrc);
    let tag = Want::Forged(DropReason::OverlayForgedTag);
    let c = |name, from, vni, tag, (src, dst), to, want| Case {
        name,
        from,
        vni,
        tag,
        src,
        dst,
        to,
        want,
    };
    let cases = [
        // Net 0.
        c(
            "net0 control: n1's pod",
            me,
            NET0_VNI,
            None,
            (p1.fabric, p2.fabric),
            &lp2,
            Want::Delivered,
        ),
        c(
            "net0 control: n1 itself",
            me,
            NET0_VNI,
            None,
            (n1.ip, p2.fabric),
            &lp2,
            Want::Delivered,
        ),
        c(
            "(a) net0: n2's own pod q2",
            me,
            NET0_VNI,
            None,
            (q2.fabric, p2.fabric),
            &lp2,
            src,
        ),
        c(
            "(a) net0: the ghost n3's block",
            me,
            NET0_VNI,
            None,
            (ghost_block_addr, p2.fabric),
            &lp2,
            src,
        ),
        c(
            "(b) net0: n2's own address",
            me,
            NET0_VNI,
            None,
            (n2.ip, p2.fabric),
            &lp2,
            src,
        ),
        c(
            "(b) net0: the ghost n3's address",
            me,
            NET0_VNI,
            None,
            (GHOST.1, p2.fabric),
            &lp2,
            src,
        ),
        // A free address of the receiver's own block: no pod's, no other node's (the
        // receiver's block is a load-time knob of its datapath, `own_block`).
        c(
            "(b) net0: a free address of n2's block",
            me,
            NET0_VNI,
            None,
            (Ipv4Addr::new(10, 244, 2, 200), p2.fabric),
            &lp2,
            src,
        ),
        // Documented (docs/datapath.md, "Overlay trust"): an outside source passes in net 0.
        c(
            "documented: an outside address in net 0",
            me,
            NET0_VNI,
            None,
            (Ipv4Addr::new(198, 51, 100, 9), p2.fabric),
            &lp2,
            Want::Delivered,
        ),
        c(
            "net0 control: n3 sends its block",
            n3,
            NET0_VNI,
            None,
            (ghost_block_addr, p2.fabric),
            &lp2,
            Want::Delivered,
        ),
        c(
            "net0: n3 sends n1's pod",
            n3,
            NET0_VNI,
            None,
            (p1.fabric, p2.fabric),
            &lp2,
            src,
        ),
        // VPC a: sources.
        c(
            "vpc control: f1, no tag",
            me,
            va,
            None,
            (if1, io2),
            &lo2,
            Want::Delivered,
        ),
        c(
            "vpc control: f1, its tag (none)",
            me,
            va,
            tag_of(0),
            (if1, io2),
            &lo2,
            Want::Delivered,
        ),
        c("(c) vpc: n2's a2", me, va, None, (ia2, io2), &lo2, src),
        c(
            "(c) vpc: unheld address of a",
            me,
            va,
            None,
            (Ipv4Addr::new(10, 72, 0, 200), io2),
            &lo2,
            src,
        ),
        c("vpc: n3 sends f1", n3, va, None, (if1, io2), &lo2, src),
        // The wrong VNI: f1's address is b's range too (the VPCs overlap), held there by no
        // node of n1's.
        c(
            "(d) wrong vni: f1 under b's vni",
            me,
            vb,
            None,
            (if1, ib2),
            &lb2,
            src,
        ),
        c(
            "(d) wrong vni: a1 under b's vni",
            me,
            vb,
            tag_of(1 << snd),
            (ia1, ib2),
            &lb2,
            src,
        ),
        // Documented (docs/datapath.md, "Overlay trust"): an address outside the VPC's ranges
        // passes, since the doors carry outside sources into a VPC.
        c(
            "documented: outside source into b",
            me,
            vb,
            None,
            (Ipv4Addr::new(198, 51, 100, 7), ib2),
            &lb2,
            Want::Delivered,
        ),
        // VPC a: tags.
        c(
            "tag control: a1 as snd",
            me,
            va,
            tag_of(1 << snd),
            (ia1, ia2),
            &la2,
            Want::Delivered,
        ),
        c(
            "tag control: a1, no tag",
            me,
            va,
            None,
            (ia1, ia2),
            &la2,
            Want::Delivered,
        ),
        c(
            "(e) tag: f1 claims snd",
            me,
            va,
            tag_of(1 << snd),
            (if1, ia2),
            &la2,
            tag,
        ),
        c(
            "(e) tag: a1 claims snd+other",
            me,
            va,
            tag_of((1 << snd) | (1 << other)),
            (ia1, ia2),
            &la2,
            tag,
        ),
        c(
            "(e) tag: a1 claims no group",
            me,
            va,
            tag_of(0),
            (ia1, ia2),
            &la2,
            tag,
        ),
        c(
            "(e) tag: a1 claims rcv",
            me,
            va,
            tag_of(1 << rcv),
            (ia1, ia2),
            &la2,
            tag,
        ),
    ];
    let mut table = Vec::new();
    for case in &cases {
        table.push(run(lab, tunnel_mac, case));
    }
    n1.ns
        .ip_ok(&["addr", "del", &format!("{}/24", GHOST.1), "dev", "ul0"]);

    // --- The totals: per sender in the metric, the same packets in sdn_drops by reason.
    let f = forged(n2);
    let want = |r: DropReason, from: &str| {
        cases
            .iter()
            .filter(|c| c.want == Want::Forged(r) && c.from.0 == from)
            .count() as u64
            * K
    };
    let text = n2.metrics();
    let mut lines: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("cozyplane_overlay_forged_"))
        .collect();
    lines.sort_unstable();
    eprintln!("n2's /metrics:\n  {}", lines.join("\n  "));
    for (from, r) in [
        (me, DropReason::OverlayForgedSrc),
        (me, DropReason::OverlayForgedTag),
        (n3, DropReason::OverlayForgedSrc),
    ] {
        let n = want(r, from.0);
        assert_eq!(
            f.get(&(IpAddr::V4(from.1), r.index())),
            Some(&n),
            "{from:?} {r:?}"
        );
        assert_eq!(forged_metric(n2, "packets", from, r), n as f64, "{from:?} {r:?}");
        assert!(forged_metric(n2, "bytes", from, r) > 0.0, "{from:?} {r:?} bytes");
    }
    assert_eq!(
        f.get(&(IpAddr::V4(GHOST.1), DropReason::OverlayForgedTag.index())),
        None
    );
    let (src_all, tag_all) = (
        f.iter()
            .filter(|((_, r), _)| *r == DropReason::OverlayForgedSrc.index())
            .map(|(_, v)| v)
            .sum::<u64>(),
        f.iter()
            .filter(|((_, r), _)| *r == DropReason::OverlayForgedTag.index())
            .map(|(_, v)| v)
            .sum::<u64>(),
    );
    assert_eq!(
        n2.drops(DropReason::OverlayForgedSrc),
        src_all,
        "sdn_drops agrees (source)"
    );
    assert_eq!(
        n2.drops(DropReason::OverlayForgedTag),
        tag_all,
        "sdn_drops agrees (tag)"
    );
    assert!(forged(n1).is_empty(), "n1 received nothing forged");

    // --- Real traffic still flows after all of it.
    assert!(p1.ns.ping(p2.fabric, 3, 3), "net 0: p1 -> p2 afterwards");
    assert!(f1.ns.ping(io2, 3, 3), "VPC a: f1 -> o2 afterwards");
    assert_eq!(forged(n2), f, "nothing more counted");
    eprintln!(
        "PASS {} hand-built cases ({} forged: {src_all} packets as source, {tag_all} as tag, every one counted under its sender; {} controls delivered)",
        table.len(),
        cases.iter().filter(|c| c.want != Want::Delivered).count(),
        cases.iter().filter(|c| c.want == Want::Delivered).count()
    );
}
