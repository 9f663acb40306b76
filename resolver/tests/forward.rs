//! Forwarding against a real upstream: Debian's dnsmasq on loopback. External names go
//! through it over the client's transport (truncation included); cluster names never do;
//! a dead upstream ends in SERVFAIL, a dead first upstream falls through to the next; a
//! DNS64 VPC gets AAAA records synthesized from A-only names, and only it.

mod common;
#[path = "common/dnsmasq.rs"]
mod dnsmasq;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use common::{ip, query, view};
use cozyplane_resolver::answer::Zone;
use cozyplane_resolver::{Metrics, Resolver, Upstreams, ViewHandle};
use dnsmasq::Dnsmasq;
use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::RecordType;
use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpStream, UdpSocket};

/// 60 A records for one name: ~1 KiB of answer, over 512 bytes.
fn big_hosts() -> String {
    let mut s = String::new();
    for i in 1..=60 {
        s.push_str(&format!("198.51.100.{i} big.example\n"));
    }
    s
}

struct Running {
    addr: SocketAddr,
    tasks: Vec<tokio::task::JoinHandle<std::io::Result<()>>>,
    registry: Registry,
}

impl Drop for Running {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// A resolver on loopback whose querier 127.0.0.1 is a pod of VPC `vpc`.
async fn resolver(upstreams: Vec<SocketAddr>, vpc: (&str, &str), timeout: Duration) -> Running {
    resolver_in(upstreams, vpc, false, timeout).await
}

/// [`resolver`], the VPC with DNS64 on if `dns64`.
async fn resolver_in(
    upstreams: Vec<SocketAddr>,
    vpc: (&str, &str),
    dns64: bool,
    timeout: Duration,
) -> Running {
    let mut v = view();
    v.add_querier(ip("127.0.0.1"), (vpc.0.into(), vpc.1.into()));
    if dns64 {
        v.add_dns64((vpc.0.into(), vpc.1.into()));
    }
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let r = Arc::new(Resolver::new(
        ViewHandle::new(v),
        Zone::new("cluster.local", 5).unwrap(),
        Upstreams {
            servers: upstreams,
            timeout,
        },
        metrics,
    ));
    let (udp, tcp) = cozyplane_resolver::server::bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let addr = udp.local_addr().unwrap();
    let tasks = vec![
        tokio::spawn(r.clone().serve_udp(udp)),
        tokio::spawn(r.serve_tcp(tcp)),
    ];
    Running {
        addr,
        tasks,
        registry,
    }
}

async fn udp_ask(to: SocketAddr, wire: &[u8]) -> Message {
    let s = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    s.send_to(wire, to).await.unwrap();
    let mut buf = vec![0u8; 65535];
    let (n, _) = tokio::time::timeout(Duration::from_secs(10), s.recv_from(&mut buf))
        .await
        .expect("an answer (hang guard)")
        .unwrap();
    Message::from_vec(&buf[..n]).unwrap()
}

async fn tcp_ask(to: SocketAddr, wire: &[u8]) -> Message {
    let mut s = TcpStream::connect(to).await.unwrap();
    s.write_all(&u16::try_from(wire.len()).unwrap().to_be_bytes())
        .await
        .unwrap();
    s.write_all(wire).await.unwrap();
    let fut = async {
        let n = s.read_u16().await.unwrap();
        let mut buf = vec![0u8; usize::from(n)];
        s.read_exact(&mut buf).await.unwrap();
        buf
    };
    let buf = tokio::time::timeout(Duration::from_secs(10), fut)
        .await
        .expect("an answer (hang guard)");
    Message::from_vec(&buf).unwrap()
}

fn addrs(m: &Message) -> Vec<IpAddr> {
    m.answers.iter().filter_map(|r| r.data.ip_addr()).collect()
}

fn metric(r: &Registry, line_start: &str) -> bool {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, r).unwrap();
    out.lines().any(|l| l.starts_with(line_start))
}

#[tokio::test]
async fn external_names_are_forwarded_over_the_clients_transport_with_truncation() {
    let up = Dnsmasq::start(
        &big_hosts(),
        &["ext.example,192.0.2.10", "web.t1.svc.cluster.local,203.0.113.66"],
    );
    let r = resolver(vec![up.addr], ("t1", "blue"), Duration::from_secs(2)).await;

    for m in [
        udp_ask(r.addr, &query("ext.example.", RecordType::A, None)).await,
        tcp_ask(r.addr, &query("ext.example.", RecordType::A, None)).await,
    ] {
        assert_eq!(m.metadata.response_code, ResponseCode::NoError);
        assert_eq!(m.metadata.id, 0x4242);
        assert_eq!(addrs(&m), vec![ip("192.0.2.10")]);
    }
    // Upstream truncates for a plain UDP client; the TC answer reaches it as is, and the
    // retry over TCP gets everything.
    let m = udp_ask(r.addr, &query("big.example.", RecordType::A, None)).await;
    assert!(m.metadata.truncation, "{m:?}");
    assert!(m.answers.len() < 60);
    let m = tcp_ask(r.addr, &query("big.example.", RecordType::A, None)).await;
    assert!(!m.metadata.truncation);
    assert_eq!(m.answers.len(), 60);
    // EDNS size honoured: 1232 bytes hold them all over UDP.
    let m = udp_ask(r.addr, &query("big.example.", RecordType::A, Some(1232))).await;
    assert!(!m.metadata.truncation);
    assert_eq!(m.answers.len(), 60);

    // A cluster name is never forwarded, though the upstream has a record for it.
    let m = udp_ask(r.addr, &query("web.t1.svc.cluster.local.", RecordType::A, None)).await;
    assert_eq!(addrs(&m), vec![ip("172.16.0.250")]);
    assert!(metric(
        &r.registry,
        "cozyplane_dns_forwarded_total{transport=\"udp\",outcome=\"ok\"} 3"
    ));
    assert!(metric(
        &r.registry,
        "cozyplane_dns_queries_total{transport=\"udp\",answer=\"answer\"} 1"
    ));
    let r2 = resolver(vec![up.addr], ("t2", "red"), Duration::from_secs(2)).await;
    let m = udp_ask(r2.addr, &query("web.t1.svc.cluster.local.", RecordType::A, None)).await;
    assert_eq!(m.metadata.response_code, ResponseCode::NXDomain);
    assert!(addrs(&m).is_empty());
}

#[tokio::test]
async fn a_dead_upstream_is_servfail_and_the_next_one_is_tried() {
    // Nothing listens on `closed`; `silent` is a bound socket that never answers.
    let closed: SocketAddr = ([127, 0, 0, 1], dnsmasq::free_port()).into();
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let silent_addr = silent.local_addr().unwrap();
    let r = resolver(
        vec![closed, silent_addr],
        ("t1", "blue"),
        Duration::from_millis(300),
    )
    .await;
    for m in [
        udp_ask(r.addr, &query("ext.example.", RecordType::A, None)).await,
        tcp_ask(r.addr, &query("ext.example.", RecordType::A, None)).await,
    ] {
        assert_eq!(m.metadata.response_code, ResponseCode::ServFail);
        assert_eq!(m.metadata.id, 0x4242);
        assert_eq!(m.queries.len(), 1);
    }
    assert!(metric(
        &r.registry,
        "cozyplane_dns_queries_total{transport=\"udp\",answer=\"servfail\"} 1"
    ));

    let up = Dnsmasq::start("", &["ext.example,192.0.2.10"]);
    let r = resolver(
        vec![silent_addr, up.addr],
        ("t1", "blue"),
        Duration::from_millis(300),
    )
    .await;
    let m = udp_ask(r.addr, &query("ext.example.", RecordType::A, None)).await;
    assert_eq!(addrs(&m), vec![ip("192.0.2.10")]);
    drop(silent);
}

#[tokio::test]
async fn unknown_sources_are_refused_and_counted() {
    let up = Dnsmasq::start("", &["ext.example,192.0.2.10"]);
    // Loopback is no querier in this view.
    let v = view();
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let res = Arc::new(Resolver::new(
        ViewHandle::new(v),
        Zone::new("cluster.local", 5).unwrap(),
        Upstreams {
            servers: vec![up.addr],
            timeout: Duration::from_secs(2),
        },
        metrics,
    ));
    let (udp, _tcp) = cozyplane_resolver::server::bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let addr = udp.local_addr().unwrap();
    let task = tokio::spawn(res.serve_udp(udp));
    let m = udp_ask(addr, &query("ext.example.", RecordType::A, None)).await;
    assert_eq!(m.metadata.response_code, ResponseCode::Refused);
    assert!(metric(&registry, "cozyplane_dns_refused_total 1"));
    task.abort();
}

#[tokio::test]
async fn a_dns64_vpc_gets_aaaa_synthesized_from_a_only_names() {
    // v4only: A only; dual: A and AAAA; alias: a CNAME to v4only. `--local`: dnsmasq answers
    // example.test itself, NODATA for a missing type and NXDOMAIN for a missing name (else it
    // refuses what it would have to forward, having no upstream).
    let up = Dnsmasq::start_with(
        "",
        &[
            "v4only.example.test,203.0.113.7",
            "dual.example.test,203.0.113.8,2001:db8::8",
        ],
        &[
            "--cname=alias.example.test,v4only.example.test",
            "--local=/example.test/",
        ],
    );
    let six = resolver_in(vec![up.addr], ("t2", "red"), true, Duration::from_secs(2)).await;
    let synth = ip("64:ff9b::cb00:7107");

    for m in [
        udp_ask(six.addr, &query("v4only.example.test.", RecordType::AAAA, None)).await,
        tcp_ask(
            six.addr,
            &query("v4only.example.test.", RecordType::AAAA, Some(1232)),
        )
        .await,
    ] {
        assert_eq!(m.metadata.response_code, ResponseCode::NoError, "{m:?}");
        assert_eq!(m.metadata.id, 0x4242);
        assert_eq!(m.queries[0].query_type(), RecordType::AAAA);
        assert_eq!(addrs(&m), vec![synth], "{m:?}");
        assert!(m.answers.iter().all(|r| r.ttl <= 60), "{m:?}");
    }
    // The CNAME chain is kept, the address synthesized at its end.
    let m = udp_ask(six.addr, &query("alias.example.test.", RecordType::AAAA, None)).await;
    let types: Vec<RecordType> = m
        .answers
        .iter()
        .map(hickory_proto::rr::Record::record_type)
        .collect();
    assert_eq!(types, vec![RecordType::CNAME, RecordType::AAAA], "{m:?}");
    assert_eq!(addrs(&m), vec![synth]);
    // A name that does not exist stays NXDOMAIN.
    let m = udp_ask(six.addr, &query("nx.example.test.", RecordType::AAAA, None)).await;
    assert_eq!(m.metadata.response_code, ResponseCode::NXDomain, "{m:?}");
    // A name with a real AAAA keeps it; A questions are untouched.
    let m = udp_ask(six.addr, &query("dual.example.test.", RecordType::AAAA, None)).await;
    assert_eq!(addrs(&m), vec![ip("2001:db8::8")]);
    let m = udp_ask(six.addr, &query("v4only.example.test.", RecordType::A, None)).await;
    assert_eq!(addrs(&m), vec![ip("203.0.113.7")]);
    // Cluster names are the view's, never synthesized: red's web has only an IPv4 VIP, and
    // its AAAA is NODATA from the view.
    let m = udp_ask(
        six.addr,
        &query("web.t2.svc.cluster.local.", RecordType::AAAA, None),
    )
    .await;
    assert_eq!(m.metadata.response_code, ResponseCode::NoError);
    assert!(m.metadata.authoritative && addrs(&m).is_empty(), "{m:?}");
    assert!(metric(
        &six.registry,
        "cozyplane_dns_queries_total{transport=\"udp\",answer=\"dns64\"} 2"
    ));
    assert!(metric(
        &six.registry,
        "cozyplane_dns_queries_total{transport=\"tcp\",answer=\"dns64\"} 1"
    ));

    // A VPC without DNS64 gets the upstream's NODATA for the A-only name.
    let four = resolver_in(vec![up.addr], ("t1", "blue"), false, Duration::from_secs(2)).await;
    let m = udp_ask(four.addr, &query("v4only.example.test.", RecordType::AAAA, None)).await;
    assert_eq!(m.metadata.response_code, ResponseCode::NoError);
    assert!(addrs(&m).is_empty(), "{m:?}");
    let m = udp_ask(four.addr, &query("dual.example.test.", RecordType::AAAA, None)).await;
    assert_eq!(addrs(&m), vec![ip("2001:db8::8")]);
    assert!(!metric(
        &four.registry,
        "cozyplane_dns_queries_total{transport=\"udp\",answer=\"dns64\"}"
    ));
}
