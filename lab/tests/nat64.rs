//! `make e2e`, two nodes, an IPv4-only default network: an IPv6-only VPC lives on a cluster that
//! has no IPv6 anywhere (issue 28's cross-family acceptance). Needs root, ping, python3,
//! tcpdump, Debian's dnsmasq and the agent and CNI binaries built. The control-plane helpers
//! are shared with `e2e.rs` (`common/`).
//!
//! Layout ([`Lab::new`]: v4 fabric blocks, v4 underlay, v4 tunnels; the outside world of
//! `cozyplane_lab::outside` with its router and internet host, the LoadBalancer pool attracted
//! to n1). The control plane runs the door loops ([`CpOptions::doors`]: the gateways' NAT
//! Services, the ServiceVIPs); every agent runs its resolver (`--dns-resolver`, cluster domain
//! `cozy.local`, cluster DNS 10.96.0.10, upstream the internet host's dnsmasq, which knows
//! `v4only.example.test` by an A record only).
//! * VPC `six` (t1, `fd00:6::/64` only, `spec.dns64: true`, a VPCGateway with NAT): s1 on n1,
//!   s2 on n2. Each has one IPv6 address inside and an IPv4 fabric address (its CNI result,
//!   its `status.podIP`). Their resolv.conf names the cluster DNS in its NAT64 form,
//!   `64:ff9b::a60:a`. Service t1/web is attached to `six` with s2 as its one endpoint; the
//!   server's ServiceVIP loop gives it an IPv6 ServiceVIP.
//! * VPC `dual` (t2, `10.30.0.0/24` + `fd00:30::/64`, a VPCGateway with NAT): d1 on n1, d2 on n2.
//!
//! Asserted, in this order:
//! 1. kubelet-style probes on `status.podIP`: both nodes ping s1's v4 fabric address and
//!    connect over TCP to a port s1 listens on with IPv6 only; s1 sees the client as `fe80::1`
//!    (the bridge's NAT46).
//! 2. s1 resolves `web` (glibc, the search list of its resolv.conf) and asks
//!    `web.t1.svc.cozy.local` AAAA over UDP and TCP at `64:ff9b::a60:a`: the answer is the
//!    ServiceVIP; s1 connects to it by name and by address and reaches s2 on the other node.
//! 3. The dual-stack VPC keeps working: d1 and d2 ping each other in both families and ping the
//!    internet host through their gateway, which sees only the VPC's IPv4 NAT address.
//! 4. DNS64 and the gateway's NAT64: s1 asks AAAA for `v4only.example.test` and gets
//!    `64:ff9b::c633:6402` (198.51.100.2 under the well-known prefix), also by glibc; s1 and s2
//!    ping it and connect to a TCP server of the internet host on it, by address and by name,
//!    and the internet host sees the VPC `six`'s IPv4 NAT address (the gateway's
//!    `status.natAddress`) as the source, in its captures and in what its server answers.
//! 5. An IPv4 FloatingIP of s1 (`spec.ipFamily: IPv4`, its target s1's IPv6 address): the
//!    internet host pings it and connects to s1's IPv6-only listener at it, which sees the host
//!    as `64:ff9b::c633:6402`; s1's connection to the host leaves from the Floating IP.

use std::io::BufRead as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::process::Stdio;
use std::time::{Duration, Instant};

use cozyplane_apis::net::to_nat64;
use cozyplane_apis::v1alpha1::{FloatingIP, ServiceVIP, VPC, VPCGateway};
use cozyplane_bpf::maps::snat_gws::SnatGwsMap;
use cozyplane_lab::outside::INET4;
use cozyplane_lab::{Lab, LabPod, Netns, Outside, Proc, run_in};
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

mod common;
use common::net::{ResolvConf, all_drops, answer_addrs, dns_ask_until, pod_addr, remote_of};
use common::{Cp, CpOptions, pod, pod_addrs, sources, tenant_ranges, until, wait};

const CLUSTER_DNS: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 10);
/// An outside name with an A record only (the internet host itself).
const V4ONLY: &str = "v4only.example.test";
/// The internet host's TCP server: it answers each connection with the source it sees.
const WHO_PORT: u16 = 7778;
/// s1's IPv6-only listener for the nodes' probes.
const PROBE_PORT: u16 = 8081;
/// The ServiceVIP's port and the backend's.
const WEB_PORT: u16 = 80;
const WEB_TARGET: u16 = 8080;

#[test]
fn lab_nat64() {
    let t = Instant::now();
    Lab::run_on(Lab::new(2), body);
    eprintln!("lab_nat64: {:.1} s", t.elapsed().as_secs_f64());
}

/// Every address of the pod's CNI result.
fn result_ips(p: &LabPod) -> Vec<IpAddr> {
    p.result["ips"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["address"].as_str()?.split('/').next()?.parse().ok())
        .collect()
}

/// A TCP server in `ns` on `bind`:`port` (IPv6 only when `bind` is IPv6) that answers every
/// connection with one line, `greeting` or else the client's address as it sees it, and
/// closes it. Killed by PID when dropped.
fn line_server(ns: &Netns, bind: IpAddr, port: u16, greeting: Option<&str>) -> Proc {
    const SCRIPT: &str = r#"
import socket, sys
fam = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
s = socket.socket(fam, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
if fam == socket.AF_INET6:
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(64)
print("ready", flush=True)
while True:
    c, peer = s.accept()
    try:
        c.sendall(((sys.argv[3] if len(sys.argv) > 3 else peer[0]) + "\n").encode())
    except OSError:
        pass
    c.close()
"#;
    let (b, p) = (bind.to_string(), port.to_string());
    let mut args = vec!["python3", "-c", SCRIPT, &b, &p];
    args.extend(greeting);
    let mut c = ns
        .command(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("python3");
    let mut line = String::new();
    std::io::BufReader::new(c.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read ready");
    assert_eq!(line.trim(), "ready", "server on [{bind}]:{port} in {}", ns.0);
    Proc(c)
}

/// One TCP connection from inside `ns` to `to` (a plain connect, as kubelet's TCP probe or a
/// client makes): the first line the server sends, or why there is none.
fn tcp_line(ns: &Netns, to: SocketAddr) -> Result<String, String> {
    run_in(ns, || {
        let s = TcpStream::connect_timeout(&to, Duration::from_secs(3))
            .map_err(|e| format!("connect {to}: {e}"))?;
        s.set_read_timeout(Some(Duration::from_secs(3)))
            .map_err(|e| e.to_string())?;
        let mut line = String::new();
        std::io::BufReader::new(s)
            .read_line(&mut line)
            .map_err(|e| format!("read from {to}: {e}"))?;
        Ok(line.trim().to_string())
    })
}

/// [`tcp_line`] tried until it answers (a datapath entry or a listener may lag by a moment),
/// at most 20 s; the failure names every node's drops.
fn tcp_line_until(lab: &Lab, (ns, who): (&Netns, &str), to: SocketAddr) -> String {
    let t = Instant::now();
    loop {
        match tcp_line(ns, to) {
            Ok(l) if !l.is_empty() => return l,
            other => assert!(
                t.elapsed() < Duration::from_secs(20),
                "TCP {who} -> {to}: {other:?}; drops {}",
                all_drops(lab)
            ),
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn probe() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vip/probe.py").to_string()
}

/// The first lines of `n` new TCP connections from `p` to `host:port`, the name resolved by
/// glibc inside the pod with its resolv.conf (`ERR` for one that failed, resolution included).
fn tcp_by_name(p: &LabPod, host: &str, port: u16, n: usize) -> Vec<String> {
    let out = p.ns.exec(&[
        "python3",
        &probe(),
        "tcp",
        host,
        &port.to_string(),
        &n.to_string(),
    ]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// What glibc resolves `name` to inside `p` (`getent ahosts`: both families asked), each
/// address once, sorted.
fn getent(p: &LabPod, name: &str) -> Vec<IpAddr> {
    let out = p.ns.exec(&["getent", "ahosts", name]);
    let mut a: Vec<IpAddr> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect();
    a.sort();
    a.dedup();
    a
}

/// Gateway `gw` of `ns/vpc` with NAT on, through the real chain (the server's gateway loop
/// owns a LoadBalancer Service per family, the stand-in assigns pool addresses, the loop
/// copies them into the status). Returns at once: [`nat_address`] waits for the address.
async fn gateway(cp: &Cp, ns: &str, vpc: &str) {
    let g: VPCGateway = serde_json::from_value(json!({
        "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "VPCGateway",
        "metadata": {"name": "gw", "namespace": ns},
        "spec": {"vpcRef": {"name": vpc}, "nat": {"enabled": true}}
    }))
    .unwrap();
    Api::<VPCGateway>::namespaced(cp.sdn.clone(), ns)
        .create(&PostParams::default(), &g)
        .await
        .unwrap();
}

/// The IPv4 NAT address (`status.natAddress`) of gateway `ns/gw`, once it has one and every
/// agent has programmed it for the VPC; fails after 20 s with the gateway's status.
async fn nat_address(cp: &Cp, lab: &Lab, ns: &str) -> Ipv4Addr {
    let api: Api<VPCGateway> = Api::namespaced(cp.sdn.clone(), ns);
    let t = Instant::now();
    let nat4 = loop {
        let st = api.get("gw").await.unwrap().status.unwrap_or_default();
        if let Ok(a) = st.nat_address.parse::<Ipv4Addr>() {
            break a;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "gateway {ns}/gw got no IPv4 NAT address (status.natAddress), which NAT64 leaves \
             from: {st:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    wait(&format!("every agent programs {ns}/gw's {nat4}"), || {
        lab.nodes.iter().all(|n| {
            SnatGwsMap::from_pin(&n.scratch.pins())
                .and_then(|m| m.entries())
                .unwrap_or_default()
                .iter()
                .any(|(_, g)| g.0 == Some(nat4))
        })
    });
    nat4
}

/// Pings `to` from `p` while the internet host captures its ICMP (IPv4): whether the replies
/// came, and the sources the internet host saw.
fn ping_out(outside: &Outside, p: &LabPod, to: IpAddr) -> (bool, std::collections::HashSet<String>) {
    let mut ok = false;
    let seen = outside.capture("icmp", || ok = p.ns.ping(to, 3, 2));
    (ok, sources(&seen))
}

async fn body(lab: &mut Lab) {
    let upstream = INET4.to_string();
    let cluster_dns = CLUSTER_DNS.to_string();
    let cp = Cp::start_with_args(
        lab,
        CpOptions::doors(),
        &[
            "--dns-resolver",
            "--cluster-domain",
            "cozy.local",
            "--cluster-dns",
            &cluster_dns,
            "--dns-upstream",
            &upstream,
        ],
    )
    .await;
    let lab = &*lab;
    let (n1, n2) = (&lab.nodes[0], &lab.nodes[1]);
    assert!(
        lab.nodes.iter().all(|n| n.v6.is_none()),
        "an IPv4-only default network"
    );
    let outside = Outside::new(lab, 1500);
    let _internet_dns = outside.dns(&[(V4ONLY, INET4.into())]);
    outside.attract(lab, 0);
    let dns64 = to_nat64(CLUSTER_DNS);
    assert_eq!(dns64.to_string(), "64:ff9b::a60:a");

    // --- VPC six: IPv6 only, DNS64 on, a NAT gateway; s1 on n1, s2 on n2.
    tenant_ranges(&cp, "t1", "six", &["fd00:6::/64"]).await;
    Api::<VPC>::namespaced(cp.sdn.clone(), "t1")
        .patch(
            "six",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"dns64": true}})),
        )
        .await
        .unwrap();
    gateway(&cp, "t1", "six").await;
    let s1 = pod(&cp, lab, 0, "t1", "s1", Some("six")).await;
    let s2 = pod(&cp, lab, 1, "t1", "s2", Some("six")).await;
    let six: ipnet::Ipv6Net = "fd00:6::/64".parse().unwrap();
    for p in [&s1, &s2] {
        let inside = pod_addrs(p);
        assert!(
            matches!(inside[..], [IpAddr::V6(a)] if six.contains(&a)),
            "{}: one IPv6 address from six inside, got {inside:?}",
            p.name
        );
        let fabric = result_ips(p);
        assert_eq!(
            fabric,
            vec![IpAddr::V4(p.fabric)],
            "{}: the CNI result is the IPv4 fabric address",
            p.name
        );
        let st = Api::<Pod>::namespaced(cp.kube.clone(), "t1")
            .get(&p.name)
            .await
            .unwrap()
            .status
            .unwrap();
        assert_eq!(
            st.pod_ip.as_deref(),
            Some(p.fabric.to_string().as_str()),
            "{}: status.podIP",
            p.name
        );
    }
    let (s1v6, s2v6) = (pod_addr(&s1, 6), pod_addr(&s2, 6));
    wait("n1 learns s2", || remote_of(lab, 0, s2v6));
    wait("n2 learns s1", || remote_of(lab, 1, s1v6));
    assert!(
        s1.ns.ping(s2v6, 3, 3),
        "s1 -> s2 inside six; drops {}",
        all_drops(lab)
    );
    eprintln!(
        "s1 {s1v6} (status.podIP {}), s2 {s2v6} (status.podIP {})",
        s1.fabric, s2.fabric
    );

    // --- 1. kubelet-style probes on status.podIP: NAT46 in the bridge.
    let _probe_srv = line_server(&s1.ns, Ipv6Addr::UNSPECIFIED.into(), PROBE_PORT, None);
    for n in [n1, n2] {
        assert!(
            n.ns.ping(s1.fabric, 3, 3),
            "node {} -> s1's status.podIP {}; drops {}",
            n.name,
            s1.fabric,
            all_drops(lab)
        );
        let seen = tcp_line_until(lab, (&n.ns, &n.name), SocketAddr::from((s1.fabric, PROBE_PORT)));
        assert!(
            seen.starts_with("fe80::1"),
            "s1 (IPv6 only) sees node {}'s probe from fe80::1, got {seen:?}",
            n.name
        );
    }
    eprintln!("PASS both nodes ping and TCP-probe s1's IPv4 status.podIP; s1 sees fe80::1");

    // --- 2. A VPC Service: resolved through 64:ff9b::a60:a, reached by name.
    let _web = line_server(&s2.ns, Ipv6Addr::UNSPECIFIED.into(), WEB_TARGET, Some("s2"));
    let svc: Service = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": "t1", "annotations": {"sdn.cozystack.io/vpc": "six"}},
        "spec": {"clusterIP": "10.96.7.7", "ports": [
            {"name": "http", "port": WEB_PORT, "protocol": "TCP", "targetPort": WEB_TARGET}]}}))
    .unwrap();
    Api::<Service>::namespaced(cp.kube.clone(), "t1")
        .create(&PostParams::default(), &svc)
        .await
        .unwrap();
    let slice: EndpointSlice = serde_json::from_value(json!({"apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice", "metadata": {"name": "web-abcde", "namespace": "t1",
            "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4", "endpoints": [{"addresses": [s2.fabric.to_string()],
            "conditions": {"ready": true},
            "targetRef": {"kind": "Pod", "namespace": "t1", "name": "s2"}}],
        "ports": [{"name": "http", "port": WEB_TARGET, "protocol": "TCP"}]}))
    .unwrap();
    Api::<EndpointSlice>::namespaced(cp.kube.clone(), "t1")
        .create(&PostParams::default(), &slice)
        .await
        .unwrap();
    let vips: Api<ServiceVIP> = Api::all(cp.sdn.clone());
    let (vip, backends) = until("the ServiceVIP of t1/web with s2 as its backend", || async {
        let l = vips.list(&ListParams::default()).await.ok()?;
        let v = l
            .items
            .into_iter()
            .find(|v| v.spec.service_ref.namespace == "t1" && v.spec.service_ref.name == "web")?;
        let b: Vec<String> = v.status?.backends.into_iter().map(|b| b.ip).collect();
        (!b.is_empty()).then_some((v.spec.ip.parse::<IpAddr>().ok()?, b))
    })
    .await;
    eprintln!("t1/web: ServiceVIP {vip}, backends {backends:?}");
    assert!(
        matches!(vip, IpAddr::V6(a) if six.contains(&a)),
        "an IPv6 ServiceVIP from six's range: {vip}"
    );
    assert_eq!(
        backends,
        vec![s2v6.to_string()],
        "s2's VPC address is the backend"
    );
    // The cluster DNS in its NAT64 form, as the pod's dnsConfig names it.
    let _resolv = ResolvConf::new(&s1, dns64.into());
    for tcp in [false, true] {
        let q = (IpAddr::V6(dns64), "web.t1.svc.cozy.local.", RecordType::AAAA);
        let m = dns_ask_until(&s1, q, tcp, |m| !m.answers.is_empty());
        assert_eq!(m.metadata.response_code, ResponseCode::NoError);
        assert_eq!(
            answer_addrs(&m),
            vec![vip],
            "s1 asks {dns64} (tcp: {tcp}): the ServiceVIP"
        );
    }
    assert_eq!(getent(&s1, "web"), vec![vip], "glibc resolves web");
    let mut names = Vec::new();
    wait("s1 reaches web by name", || {
        names = tcp_by_name(&s1, "web", WEB_PORT, 3);
        names.len() == 3 && names.iter().all(|n| n == "s2")
    });
    assert_eq!(
        tcp_line_until(lab, (&s1.ns, "s1"), SocketAddr::new(vip, WEB_PORT)),
        "s2"
    );
    eprintln!("PASS s1 resolves web through {dns64} to {vip} and reaches s2 by name ({names:?})");

    // --- 3. The dual-stack VPC on the same lab: both families inside, IPv4 out.
    tenant_ranges(&cp, "t2", "dual", &["10.30.0.0/24", "fd00:30::/64"]).await;
    gateway(&cp, "t2", "dual").await;
    let d1 = pod(&cp, lab, 0, "t2", "d1", Some("dual")).await;
    let d2 = pod(&cp, lab, 1, "t2", "d2", Some("dual")).await;
    wait("n1 learns d2", || {
        remote_of(lab, 0, pod_addr(&d2, 4)) && remote_of(lab, 0, pod_addr(&d2, 6))
    });
    wait("n2 learns d1", || {
        remote_of(lab, 1, pod_addr(&d1, 4)) && remote_of(lab, 1, pod_addr(&d1, 6))
    });
    for family in [4, 6] {
        let (x, y) = (pod_addr(&d1, family), pod_addr(&d2, family));
        assert!(
            d1.ns.ping(y, 3, 3),
            "IPv{family} d1 -> d2 ({y}); drops {}",
            all_drops(lab)
        );
        assert!(
            d2.ns.ping(x, 3, 3),
            "IPv{family} d2 -> d1 ({x}); drops {}",
            all_drops(lab)
        );
    }
    let dual_nat = nat_address(&cp, lab, "t2").await;
    for p in [&d1, &d2] {
        let (ok, src) = ping_out(&outside, p, INET4.into());
        eprintln!("{} -> {INET4}: replies {ok}, sources {src:?}", p.name);
        assert!(ok, "{} pings the internet host through dual's gateway", p.name);
        assert_eq!(
            src,
            [dual_nat.to_string(), INET4.to_string()].into(),
            "only dual's NAT address left"
        );
    }
    eprintln!("PASS the dual-stack VPC: both families inside, out as {dual_nat}");

    // --- 4. DNS64 and the gateway's NAT64.
    let target = to_nat64(INET4);
    assert_eq!(target.to_string(), "64:ff9b::c633:6402");
    for tcp in [false, true] {
        let q = (IpAddr::V6(dns64), "v4only.example.test.", RecordType::AAAA);
        let m = dns_ask_until(&s1, q, tcp, |m| !m.answers.is_empty());
        assert_eq!(
            answer_addrs(&m),
            vec![IpAddr::V6(target)],
            "DNS64 for an A-only outside name (tcp: {tcp})"
        );
    }
    let resolved = getent(&s1, &format!("{V4ONLY}."));
    assert!(
        resolved.contains(&IpAddr::V6(target)),
        "glibc gets the synthesized address: {resolved:?}"
    );
    eprintln!("PASS DNS64: {V4ONLY} is {target} for s1 ({resolved:?} by glibc)");
    let six_nat = nat_address(&cp, lab, "t1").await;
    let _who = line_server(&outside.internet, INET4.into(), WHO_PORT, None);
    for p in [&s1, &s2] {
        let (ok, src) = ping_out(&outside, p, target.into());
        eprintln!("{} -> {target}: replies {ok}, sources {src:?}", p.name);
        assert!(
            ok,
            "{} pings the internet host at {target} through six's NAT64; drops {}",
            p.name,
            all_drops(lab)
        );
        assert_eq!(
            src,
            [six_nat.to_string(), INET4.to_string()].into(),
            "the internet host sees six's IPv4 NAT address only"
        );
        let seen = tcp_line_until(lab, (&p.ns, &p.name), SocketAddr::from((target, WHO_PORT)));
        assert_eq!(
            seen,
            six_nat.to_string(),
            "the internet host's server sees {} as six's NAT address",
            p.name
        );
    }
    assert_eq!(
        tcp_by_name(&s1, V4ONLY, WHO_PORT, 2),
        [six_nat.to_string(), six_nat.to_string()],
        "s1 reaches {V4ONLY} by name through NAT64"
    );
    eprintln!("PASS NAT64: s1 and s2 reach {INET4} at {target}, seen as {six_nat}");

    // --- 5. An IPv4 Floating IP of the v6-only s1 (`spec.ipFamily: IPv4`): the internet host
    // reaches s1 at it and s1 sees the host as its 64:ff9b:: form (NAT46); s1's own packets to
    // the host leave from the Floating IP, not the gateway's address (NAT64 at the door).
    let s1v6 = pod_addr(&s1, 6);
    let f: FloatingIP = serde_json::from_value(json!({
        "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "FloatingIP",
        "metadata": {"name": "s1-v4", "namespace": "t1"},
        "spec": {"vpcRef": {"name": "six"}, "target": s1v6.to_string(), "ipFamily": "IPv4"}
    }))
    .unwrap();
    let fips: Api<FloatingIP> = Api::namespaced(cp.sdn.clone(), "t1");
    fips.create(&PostParams::default(), &f).await.unwrap();
    let eip: Ipv4Addr = until("s1-v4 Ready with an IPv4 address", || async {
        let st = fips.get("s1-v4").await.ok()?.status?;
        (st.phase == "Ready").then_some(())?;
        st.address.parse().ok()
    })
    .await;
    let seen = tcp_line_until(
        lab,
        (&outside.internet, "the internet host"),
        SocketAddr::from((eip, PROBE_PORT)),
    );
    assert_eq!(
        seen,
        target.to_string(),
        "s1 sees the internet host as {target} through its Floating IP {eip}"
    );
    assert!(
        outside.internet.ping(eip, 3, 2),
        "the internet host pings s1 at {eip}"
    );
    let seen = tcp_line_until(lab, (&s1.ns, "s1"), SocketAddr::from((target, WHO_PORT)));
    assert_eq!(
        seen,
        eip.to_string(),
        "s1 leaves from its Floating IP, which wins over the gateway"
    );
    eprintln!("PASS Floating IP: {eip} reaches s1 ({s1v6}) and s1 leaves from it");
}
