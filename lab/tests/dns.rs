//! `make e2e`, one dual-stack node: VPC pods resolve names through the DNS steering and the
//! node's split-horizon resolver, and reach what they resolved (issue 13). Needs root,
//! python3, Debian's dnsmasq and the agent and CNI binaries built.
//!
//! Layout ([`Lab::dual_stack`], the lab's outside world with its internet host):
//! * VPC blue (t1, 10.41.0.0/24): client c1, backends b1 and b2 (`tests/vip/probe.py serve`);
//!   Service t1/web attached to blue with a ServiceVIP (TCP 80 → 8080, UDP 53 → 5353, both
//!   backends; the server's ServiceVIP loop does not run in the lab, so the test writes what
//!   it would), headless Service t1/db with an EndpointSlice naming b1 (hostname db-0) and b2.
//! * VPC red (t2, the same range): c2, and its own t2/web.
//! * VPC green (team-a, 10.43.0.0/24): g1; peered with blue half-way through.
//! * VPC dual (team-b, 10.44.0.0/24 + fd00:44::/64): v1; Service team-b/web6 with a ServiceVIP per
//!   family.
//! * A default-network pod `plain`.
//! * The cluster DNS is 10.96.0.10 / fd00:96::a (`--cluster-dns`); on n1 a stand-in for it
//!   (dnsmasq on the node's loopback) answers every name with addresses no VPC pod may see.
//! * The internet host runs dnsmasq with `www.example.test`; n1's resolver has it as its
//!   upstream (`--dns-upstream 198.51.100.2`).
//!
//! Pods ask the cluster DNS from inside their netns with hickory-built queries over UDP and
//! TCP (connected sockets: the answer must come from the address asked), and resolve by name
//! with glibc (`/etc/netns/<pod>/resolv.conf`, which `ip netns exec` mounts) before
//! connecting. Asserted: blue resolves its Service to the VIP from its own range and reaches
//! it by name over TCP and UDP; the headless Service answers the backends' VPC addresses (per
//! hostname too); red gets NXDOMAIN with the zone's SOA for blue's name and resolves its own;
//! green gets NXDOMAIN before the peering, then resolves and reaches blue's Service by name;
//! the external name is dnsmasq's answer, over UDP and TCP; the default-network pod's query
//! reaches the cluster DNS untouched; the dual-stack pod's IPv6 queries to fd00:96::a are
//! answered (AAAA from its VPC's IPv6 range, the external AAAA forwarded).

use std::net::IpAddr;
use std::process::Stdio;

use cozyplane_apis::v1alpha1::ServiceVIP;
use cozyplane_lab::outside::Dnsmasq;
use cozyplane_lab::{Lab, LabPod, Proc};
use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::RecordType;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

mod common;
use common::net::{ResolvConf, answer_addrs, dns_ask_until};
use common::{Cp, half, metric, pod, tenant, tenant_ranges, vpc_ip, wait};

const CLUSTER_DNS: &str = "10.96.0.10";
const CLUSTER_DNS6: &str = "fd00:96::a";
/// What the stand-in cluster DNS answers for every name: a VPC pod that gets it was not steered.
const CLUSTER_DNS_ANSWER: &str = "192.0.2.99";
const EXTERNAL: &str = "www.example.test.";
const EXTERNAL4: &str = "192.0.2.80";
const EXTERNAL6: &str = "2001:db8:80::80";

/// [`dns_ask_until`] with the server as text.
fn ask_until(
    p: &LabPod,
    (server, name, t): (&str, &str, RecordType),
    tcp: bool,
    done: impl Fn(&Message) -> bool,
) -> Message {
    dns_ask_until(p, (server.parse().unwrap(), name, t), tcp, done)
}

fn a(name: &str) -> (&str, &str, RecordType) {
    (CLUSTER_DNS, name, RecordType::A)
}

fn probe() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vip/probe.py").to_string()
}

/// The first lines of `n` new TCP connections from `p` to `host:port`, the name resolved by
/// glibc inside the pod (`ERR` for one that failed, resolution included).
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

/// One datagram from `p` to `host:port` by name: `"<answer> <source address>"` or `ERR`.
fn udp_by_name(p: &LabPod, host: &str, port: u16) -> String {
    let out = p.ns.exec(&["python3", &probe(), "udp", host, &port.to_string()]);
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn serve(p: &LabPod) -> Proc {
    let mut c =
        p.ns.command(&["python3", &probe(), "serve", &p.name])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(c.stdout.take().unwrap()), &mut line).unwrap();
    assert_eq!(line.trim(), "ready", "{} serves", p.name);
    Proc(c)
}

async fn service(cp: &Cp, ns: &str, name: &str, vpc: &str, cluster_ip: &str) {
    let s: Service = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": ns, "annotations": {"sdn.cozystack.io/vpc": vpc}},
        "spec": {"clusterIP": cluster_ip, "ports": [
            {"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080},
            {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 5353}]}}))
    .unwrap();
    Api::<Service>::namespaced(cp.kube.clone(), ns)
        .create(&PostParams::default(), &s)
        .await
        .unwrap();
}

/// The ServiceVIP the server's controller would make for `ns/svc` in `ns/vpc`, of the family
/// of `any` (`0.0.0.0` or `::`), with `backends` (VPC addresses) as it would write them;
/// the server allocates its address.
async fn vip(cp: &Cp, (ns, svc, vpc): (&str, &str, &str), any: &str, backends: &[IpAddr]) -> IpAddr {
    let v: ServiceVIP = serde_json::from_value(json!({"apiVersion": "sdn.cozystack.io/v1alpha1",
        "kind": "ServiceVIP", "metadata": {"generateName": "sv"},
        "spec": {"vpcRef": {"namespace": ns, "name": vpc}, "serviceRef": {"namespace": ns, "name": svc},
                 "ip": any,
                 "ports": [{"name": "http", "protocol": "TCP", "port": 80},
                           {"name": "dns", "protocol": "UDP", "port": 53}]}}))
    .unwrap();
    let api = Api::<ServiceVIP>::all(cp.sdn.clone());
    let made = api.create(&PostParams::default(), &v).await.unwrap();
    if !backends.is_empty() {
        let b: Vec<_> = backends
            .iter()
            .map(|ip| {
                json!({ "ip": ip.to_string(), "ports": [
                    { "protocol": "TCP", "port": 80, "targetPort": 8080 },
                    { "protocol": "UDP", "port": 53, "targetPort": 5353 },
                ]})
            })
            .collect();
        let status = json!({ "status": { "backends": b, "phase": "Ready" } });
        api.patch_status(
            made.metadata.name.as_deref().unwrap(),
            &PatchParams::default(),
            &Patch::Merge(&status),
        )
        .await
        .unwrap();
    }
    made.spec.ip.parse().expect("the server allocated the VIP")
}

/// The EndpointSlice of headless `t1/db`: ready endpoints b1 (hostname db-0) and b2, by their
/// pods (the addresses are the fabric ones, as the endpoint controller writes them).
async fn db_slice(cp: &Cp, b1: &LabPod, b2: &LabPod) {
    let ep = |p: &LabPod, host: Option<&str>| {
        let mut e = json!({"addresses": [p.fabric.to_string()], "conditions": {"ready": true},
            "targetRef": {"kind": "Pod", "namespace": p.namespace, "name": p.name}});
        if let Some(h) = host {
            e["hostname"] = json!(h);
        }
        e
    };
    let s: EndpointSlice = serde_json::from_value(json!({"apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice", "metadata": {"name": "db-abcde", "namespace": "t1",
            "labels": {"kubernetes.io/service-name": "db"}},
        "addressType": "IPv4", "endpoints": [ep(b1, Some("db-0")), ep(b2, None)],
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}))
    .unwrap();
    Api::<EndpointSlice>::namespaced(cp.kube.clone(), "t1")
        .create(&PostParams::default(), &s)
        .await
        .unwrap();
}

/// A stand-in for the cluster DNS on `n`: its addresses on the node's loopback, dnsmasq
/// answering [`CLUSTER_DNS_ANSWER`] for the names asked here.
fn cluster_dns(n: &cozyplane_lab::Node) -> Dnsmasq {
    n.ns.ip_ok(&["addr", "add", &format!("{CLUSTER_DNS}/32"), "dev", "lo"]);
    let answer: IpAddr = CLUSTER_DNS_ANSWER.parse().unwrap();
    Dnsmasq::start(
        &n.ns,
        &[CLUSTER_DNS.parse().unwrap()],
        &[("web.t1.svc.cozy.local", answer), ("www.example.test", answer)],
    )
}

#[test]
fn lab_dns() {
    Lab::run_on(Lab::dual_stack(1), body);
}

async fn body(lab: &mut Lab) {
    let cp = Cp::start(lab).await;
    let lab = &*lab;
    let n1 = &lab.nodes[0];
    let outside = lab.outside(1500);
    let _internet_dns = outside.dns(&[
        (EXTERNAL.trim_end_matches('.'), EXTERNAL4.parse().unwrap()),
        (EXTERNAL.trim_end_matches('.'), EXTERNAL6.parse().unwrap()),
    ]);
    let _cluster_dns = cluster_dns(n1);
    n1.start_agent_with(
        &cp.kube_kubeconfig(),
        &cp.server.kubeconfig,
        &[
            "--dns-resolver",
            "--cluster-domain",
            "cozy.local",
            "--cluster-dns",
            &format!("{CLUSTER_DNS},{CLUSTER_DNS6}"),
            "--dns-upstream",
            &cozyplane_lab::outside::INET4.to_string(),
        ],
    );

    tenant(&cp, "t1", "blue", "10.41.0.0/24").await;
    tenant(&cp, "t2", "red", "10.41.0.0/24").await;
    tenant(&cp, "team-a", "green", "10.43.0.0/24").await;
    tenant_ranges(&cp, "team-b", "dual", &["10.44.0.0/24", "fd00:44::/64"]).await;
    let c1 = pod(&cp, lab, 0, "t1", "c1", Some("blue")).await;
    let b1 = pod(&cp, lab, 0, "t1", "b1", Some("blue")).await;
    let b2 = pod(&cp, lab, 0, "t1", "b2", Some("blue")).await;
    let c2 = pod(&cp, lab, 0, "t2", "c2", Some("red")).await;
    let g1 = pod(&cp, lab, 0, "team-a", "g1", Some("green")).await;
    let v1 = pod(&cp, lab, 0, "team-b", "v1", Some("dual")).await;
    // A namespace without a VPCBinding: nothing there joins a VPC.
    Api::<k8s_openapi::api::core::v1::Namespace>::all(cp.kube.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "t0"}})).unwrap(),
        )
        .await
        .unwrap();
    let plain = pod(&cp, lab, 0, "t0", "plain", None).await;
    let (ib1, ib2) = (
        IpAddr::from(vpc_ip(&cp, &b1).await),
        IpAddr::from(vpc_ip(&cp, &b2).await),
    );
    let _servers = [serve(&b1), serve(&b2)];
    let _resolv = [&c1, &c2, &g1].map(|p| ResolvConf::new(p, CLUSTER_DNS.parse().unwrap()));

    service(&cp, "t1", "web", "blue", "10.96.7.7").await;
    service(&cp, "t2", "web", "red", "10.96.7.8").await;
    service(&cp, "t1", "db", "blue", "None").await;
    service(&cp, "team-b", "web6", "dual", "10.96.7.9").await;
    db_slice(&cp, &b1, &b2).await;
    let blue_vip = vip(&cp, ("t1", "web", "blue"), "0.0.0.0", &[ib1, ib2]).await;
    let red_vip = vip(&cp, ("t2", "web", "red"), "0.0.0.0", &[]).await;
    let dual_vip4 = vip(&cp, ("team-b", "web6", "dual"), "0.0.0.0", &[]).await;
    let dual_vip6 = vip(&cp, ("team-b", "web6", "dual"), "::", &[]).await;
    eprintln!("blue's web {blue_vip}, red's web {red_vip}, dual's web6 {dual_vip4} {dual_vip6}");
    let in_blue = |a: IpAddr| matches!(a, IpAddr::V4(v4) if v4.octets()[..3] == [10, 41, 0]);
    assert!(in_blue(blue_vip) && in_blue(red_vip));
    assert!(matches!(dual_vip6, IpAddr::V6(v6) if v6.segments()[..4] == [0xfd00, 0x44, 0, 0]));

    // --- Blue resolves its Service to the VIP from its own range; red its own; red gets
    // NXDOMAIN with the zone's SOA for blue's name, as for a name that does not exist.
    for tcp in [false, true] {
        let m = ask_until(&c1, a("web.t1.svc.cozy.local."), tcp, |m| !m.answers.is_empty());
        assert_eq!(m.metadata.response_code, ResponseCode::NoError);
        assert_eq!(
            answer_addrs(&m),
            vec![blue_vip],
            "blue resolves its Service to the VIP (tcp: {tcp})"
        );
        let m = ask_until(&c2, a("web.t2.svc.cozy.local."), tcp, |m| !m.answers.is_empty());
        assert_eq!(
            answer_addrs(&m),
            vec![red_vip],
            "red resolves its own (tcp: {tcp})"
        );
        let m = ask_until(&c2, a("web.t1.svc.cozy.local."), tcp, |_| true);
        assert_eq!(m.metadata.response_code, ResponseCode::NXDomain, "{m:?}");
        assert!(m.answers.is_empty() && !m.authorities.is_empty());
    }
    eprintln!("PASS blue resolves its Service to its VIP; red gets NXDOMAIN for it");

    // --- ... and reaches it by name (glibc, the pod's resolv.conf), over TCP and UDP.
    let mut names = Vec::new();
    wait("c1 reaches web by name", || {
        names = tcp_by_name(&c1, "web", 80, 6);
        !names.is_empty() && names.iter().all(|n| n == "b1" || n == "b2")
    });
    let u = udp_by_name(&c1, "web", 53);
    let (who, from) = u.split_once(' ').unwrap_or(("ERR", ""));
    assert!(who == "b1" || who == "b2", "UDP to web by name: {u}");
    assert_eq!(from, blue_vip.to_string(), "the UDP answer comes from the VIP");
    assert_eq!(
        tcp_by_name(&c2, "web.t1", 80, 1),
        ["ERR"],
        "red cannot even name blue's web"
    );
    eprintln!("PASS c1 reaches web by name over TCP ({names:?}) and UDP ({u})");

    // --- The headless Service answers the backends' VPC addresses, per hostname too.
    for tcp in [false, true] {
        let m = ask_until(&c1, a("db.t1.svc.cozy.local."), tcp, |m| m.answers.len() == 2);
        let mut want = vec![ib1, ib2];
        want.sort();
        assert_eq!(answer_addrs(&m), want, "headless db (tcp: {tcp})");
        let m = ask_until(&c1, a("db-0.db.t1.svc.cozy.local."), tcp, |m| {
            !m.answers.is_empty()
        });
        assert_eq!(answer_addrs(&m), vec![ib1], "db-0 is b1 (tcp: {tcp})");
    }
    eprintln!("PASS the headless Service resolves to the backends' VPC addresses");

    // --- Green sees nothing of blue until peered; then resolves and reaches web by name.
    let m = ask_until(&g1, a("web.t1.svc.cozy.local."), false, |_| true);
    assert_eq!(
        m.metadata.response_code,
        ResponseCode::NXDomain,
        "green before the peering"
    );
    half(&cp, ("t1", "blue"), ("team-a", "green")).await;
    half(&cp, ("team-a", "green"), ("t1", "blue")).await;
    for tcp in [false, true] {
        let m = ask_until(&g1, a("web.t1.svc.cozy.local."), tcp, |m| !m.answers.is_empty());
        assert_eq!(
            answer_addrs(&m),
            vec![blue_vip],
            "green resolves blue's web once peered (tcp: {tcp})"
        );
    }
    wait("g1 reaches blue's web by name", || {
        names = tcp_by_name(&g1, "web.t1", 80, 3);
        names.iter().all(|n| n == "b1" || n == "b2")
    });
    eprintln!("PASS a peered VPC resolves blue's Service and reaches it by name ({names:?})");

    // --- An external name: answered by the internet host's dnsmasq, through the steering.
    for tcp in [false, true] {
        let m = ask_until(&c1, a(EXTERNAL), tcp, |m| !m.answers.is_empty());
        assert_eq!(m.metadata.response_code, ResponseCode::NoError);
        assert_eq!(
            answer_addrs(&m),
            vec![EXTERNAL4.parse::<IpAddr>().unwrap()],
            "tcp: {tcp}"
        );
    }
    let text = n1.metrics();
    for t in ["udp", "tcp"] {
        let sample = format!("cozyplane_dns_forwarded_total{{transport=\"{t}\",outcome=\"ok\"}}");
        assert!(metric(&text, &sample) >= 1.0, "{sample}:\n{text}");
    }
    eprintln!("PASS an external name is answered by the internet's dnsmasq (UDP and TCP)");

    // --- A default-network pod's DNS is untouched: it reaches the cluster DNS itself.
    for tcp in [false, true] {
        let m = ask_until(&plain, a("web.t1.svc.cozy.local."), tcp, |m| {
            !m.answers.is_empty()
        });
        assert_eq!(
            answer_addrs(&m),
            vec![CLUSTER_DNS_ANSWER.parse::<IpAddr>().unwrap()],
            "the default-network pod is answered by the cluster DNS (tcp: {tcp})"
        );
    }
    eprintln!("PASS a default-network pod's DNS is untouched");

    // --- IPv6: the dual-stack pod's queries to the cluster DNS's IPv6 address are steered
    // to the resolver's IPv6 address and answered from its view.
    for tcp in [false, true] {
        let q = (CLUSTER_DNS6, "web6.team-b.svc.cozy.local.", RecordType::AAAA);
        let m = ask_until(&v1, q, tcp, |m| !m.answers.is_empty());
        assert_eq!(
            answer_addrs(&m),
            vec![dual_vip6],
            "AAAA over IPv6 from dual's range (tcp: {tcp})"
        );
        let q = (CLUSTER_DNS6, "web6.team-b.svc.cozy.local.", RecordType::A);
        let m = ask_until(&v1, q, tcp, |m| !m.answers.is_empty());
        assert_eq!(answer_addrs(&m), vec![dual_vip4], "A over IPv6 (tcp: {tcp})");
        let q = (CLUSTER_DNS6, EXTERNAL, RecordType::AAAA);
        let m = ask_until(&v1, q, tcp, |m| !m.answers.is_empty());
        assert_eq!(
            answer_addrs(&m),
            vec![EXTERNAL6.parse::<IpAddr>().unwrap()],
            "external AAAA (tcp: {tcp})"
        );
        let q = (CLUSTER_DNS6, "web.t1.svc.cozy.local.", RecordType::A);
        let m = ask_until(&v1, q, tcp, |_| true);
        assert_eq!(
            m.metadata.response_code,
            ResponseCode::NXDomain,
            "dual does not see blue"
        );
    }
    eprintln!("PASS IPv6 queries are steered and answered");

    let text = n1.metrics();
    assert!(
        metric(
            &text,
            "cozyplane_dns_queries_total{transport=\"udp\",answer=\"answer\"}"
        ) >= 1.0,
        "{text}"
    );
    assert!(
        metric(
            &text,
            "cozyplane_dns_queries_total{transport=\"tcp\",answer=\"nxdomain\"}"
        ) >= 1.0
    );
    assert_eq!(n1.drops(cozyplane_bpf::DropReason::DnsNoCt), 0);
}
