//! `make e2e`, one node: a VPC pod resolves names through the DNS steering and the node's
//! split-horizon resolver (issue 13). Needs root and the agent and CNI binaries built.
//!
//! Layout: VPC blue (10.41.0.0/24) of t1 and VPC red of t2 with the same range, one pod
//! each on n1; Service t1/web attached to blue (annotation), with a ServiceVIP in blue's
//! range written here (the server's ServiceVIP controller would create it). n1's agent runs
//! with `--dns-resolver --cluster-domain cozy.local --cluster-dns 10.96.0.10`. The pods ask
//! 10.96.0.10:53, the address their resolv.conf would name, over UDP and TCP. Asserted: blue's
//! pod gets the VIP (from its own range), red's pod gets NXDOMAIN for the same name and its
//! own Service's answer is not blue's; the answers come from 10.96.0.10 (the socket is
//! connected to it). External names end to end wait for the lab's internet host.

use std::io::{Read as _, Write as _};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use cozyplane_apis::v1alpha1::ServiceVIP;
use cozyplane_lab::{Lab, LabPod, run_in};
use hickory_proto::op::{Message, Query, ResponseCode};
use hickory_proto::rr::{Name, RecordType};
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, PostParams};
use serde_json::json;

mod common;
use common::{Cp, pod, tenant};

const CLUSTER_DNS: &str = "10.96.0.10";

fn query(name: &str) -> Vec<u8> {
    let mut m = Message::query();
    m.metadata.recursion_desired = true;
    m.add_query(Query::query(Name::from_ascii(name).unwrap(), RecordType::A));
    m.to_vec().unwrap()
}

/// One UDP query from inside the pod to the cluster DNS; `None` when nothing came back.
fn ask_udp(p: &LabPod, name: &str) -> Option<Message> {
    let q = query(name);
    run_in(&p.ns, || {
        let s = UdpSocket::bind("0.0.0.0:0").ok()?;
        // Connected: the kernel delivers only datagrams from 10.96.0.10:53.
        s.connect((CLUSTER_DNS, 53)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        s.send(&q).ok()?;
        let mut buf = [0u8; 1500];
        let n = s.recv(&mut buf).ok()?;
        Message::from_vec(&buf[..n]).ok()
    })
}

fn ask_tcp(p: &LabPod, name: &str) -> Option<Message> {
    let q = query(name);
    run_in(&p.ns, || {
        let to: SocketAddr = (CLUSTER_DNS.parse::<Ipv4Addr>().ok()?, 53).into();
        let mut s = TcpStream::connect_timeout(&to, Duration::from_secs(2)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        s.write_all(&u16::try_from(q.len()).ok()?.to_be_bytes()).ok()?;
        s.write_all(&q).ok()?;
        let mut len = [0u8; 2];
        s.read_exact(&mut len).ok()?;
        let mut buf = vec![0u8; usize::from(u16::from_be_bytes(len))];
        s.read_exact(&mut buf).ok()?;
        Message::from_vec(&buf).ok()
    })
}

fn addrs(m: &Message) -> Vec<IpAddr> {
    m.answers.iter().filter_map(|r| r.data.ip_addr()).collect()
}

/// Ask until `done` holds for the answer (the agent's watches and maps catch up), at most 30 s.
fn ask_until(p: &LabPod, name: &str, tcp: bool, done: impl Fn(&Message) -> bool) -> Message {
    let t = Instant::now();
    loop {
        let m = if tcp { ask_tcp(p, name) } else { ask_udp(p, name) };
        match m {
            Some(m) if done(&m) => return m,
            other => assert!(
                t.elapsed() < Duration::from_secs(30),
                "{}/{} asking {name} (tcp: {tcp}): last answer {other:?}",
                p.namespace,
                p.name
            ),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

async fn service(cp: &Cp, ns: &str, name: &str, vpc: &str, cluster_ip: &str) {
    let s: Service = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": ns, "annotations": {"sdn.cozystack.io/vpc": vpc}},
        "spec": {"clusterIP": cluster_ip, "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}}))
    .unwrap();
    Api::<Service>::namespaced(cp.kube.clone(), ns)
        .create(&PostParams::default(), &s)
        .await
        .unwrap();
}

/// The ServiceVIP the server's controller would make; the server allocates its address.
async fn vip(cp: &Cp, ns: &str, svc: &str, vpc: &str) -> IpAddr {
    let v: ServiceVIP = serde_json::from_value(json!({"apiVersion": "sdn.cozystack.io/v1alpha1",
        "kind": "ServiceVIP", "metadata": {},
        "spec": {"vpcRef": {"namespace": ns, "name": vpc}, "serviceRef": {"namespace": ns, "name": svc},
                 "ports": [{"name": "http", "protocol": "TCP", "port": 80}]}}))
    .unwrap();
    let made = Api::<ServiceVIP>::all(cp.sdn.clone())
        .create(&PostParams::default(), &v)
        .await
        .unwrap();
    made.spec.ip.parse().expect("the server allocated the VIP")
}

#[test]
fn lab_dns() {
    Lab::run(1, body);
}

async fn body(lab: &mut Lab) {
    let cp = Cp::start(lab).await;
    let lab = &*lab;
    let n1 = &lab.nodes[0];
    n1.start_agent_with(
        &cp.standin.admin_kubeconfig(),
        &cp.server.kubeconfig,
        &[
            "--dns-resolver",
            "--cluster-domain",
            "cozy.local",
            "--cluster-dns",
            CLUSTER_DNS,
            // No upstream here: external names wait for the lab's internet host.
            "--dns-upstream",
            "127.0.0.1:9",
            "--dns-upstream-timeout-ms",
            "300",
        ],
    );

    tenant(&cp, "t1", "blue", "10.41.0.0/24").await;
    tenant(&cp, "t2", "red", "10.41.0.0/24").await;
    let c1 = pod(&cp, lab, 0, "t1", "c1", Some("blue")).await;
    let c2 = pod(&cp, lab, 0, "t2", "c2", Some("red")).await;
    service(&cp, "t1", "web", "blue", "10.96.7.7").await;
    service(&cp, "t2", "web", "red", "10.96.7.8").await;
    let blue_vip = vip(&cp, "t1", "web", "blue").await;
    let red_vip = vip(&cp, "t2", "web", "red").await;
    eprintln!("blue's web {blue_vip}, red's web {red_vip}");
    let in_range = |a: IpAddr| matches!(a, IpAddr::V4(v4) if v4.octets()[..3] == [10, 41, 0]);
    assert!(in_range(blue_vip) && in_range(red_vip));

    for tcp in [false, true] {
        let m = ask_until(&c1, "web.t1.svc.cozy.local.", tcp, |m| !m.answers.is_empty());
        assert_eq!(m.metadata.response_code, ResponseCode::NoError);
        assert_eq!(
            addrs(&m),
            vec![blue_vip],
            "blue resolves its Service to the VIP (tcp: {tcp})"
        );
        let m = ask_until(&c2, "web.t2.svc.cozy.local.", tcp, |m| !m.answers.is_empty());
        assert_eq!(addrs(&m), vec![red_vip], "red resolves its own (tcp: {tcp})");
        // The other tenant's name: NXDOMAIN with the zone's SOA, like a name that does not exist.
        let m = ask_until(&c2, "web.t1.svc.cozy.local.", tcp, |_| true);
        assert_eq!(m.metadata.response_code, ResponseCode::NXDomain, "{m:?}");
        assert!(m.answers.is_empty() && !m.authorities.is_empty());
    }
    // An external name with a dead upstream: SERVFAIL, answered through the same steering.
    let m = ask_until(&c1, "example.org.", false, |_| true);
    assert_eq!(m.metadata.response_code, ResponseCode::ServFail);
    let metrics = n1.metrics();
    assert!(
        metrics.contains("cozyplane_dns_queries_total{transport=\"udp\",answer=\"answer\"}"),
        "{metrics}"
    );
    assert_eq!(n1.drops(cozyplane_bpf::DropReason::DnsNoCt), 0);
}
