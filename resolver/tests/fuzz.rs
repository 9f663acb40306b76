//! The request path under hostile input: whatever the bytes, the resolver answers with an
//! error (or a well-formed answer) or says nothing; it never panics, and every answer it
//! gives parses and fits the transport. The DNS64 steps take damaged queries and any
//! upstream answers the same way.

mod common;

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use common::{BLUE_POD, STRANGER, ip, query, view};
use cozyplane_resolver::answer::{Action, Transport, Zone, answer_limit, handle};
use cozyplane_resolver::dns64;
use cozyplane_resolver::{Metrics, Resolver, Upstreams, ViewHandle};
use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::{A, CNAME, SOA};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use proptest::prelude::*;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

fn zone() -> Zone {
    Zone::new("cluster.local", 5).unwrap()
}

/// Every reply is a response that parses, echoes the id and fits the transport.
fn check(wire: &[u8], a: &Action, t: Transport) {
    if let Action::Reply { bytes, .. } = a {
        let m = Message::from_vec(bytes).expect("our own answer parses");
        assert_eq!(m.metadata.message_type, MessageType::Response);
        assert_eq!(&bytes[..2], &wire[..2], "id echoed");
        let limit = answer_limit(Message::from_vec(wire).ok().as_ref(), t);
        assert!(bytes.len() <= limit, "{} > {limit}", bytes.len());
    }
}

/// Valid queries, then damaged: cut, bytes flipped, junk appended, counts lied about.
fn damaged() -> impl Strategy<Value = Vec<u8>> {
    let names = prop_oneof![
        Just("web.t1.svc.cluster.local."),
        Just("db.t1.svc.cluster.local."),
        Just("_pg._tcp.db.t1.svc.cluster.local."),
        Just("example.org."),
    ];
    let types = prop_oneof![
        Just(RecordType::A),
        Just(RecordType::AAAA),
        Just(RecordType::SRV),
        Just(RecordType::ANY)
    ];
    (
        names,
        types,
        proptest::option::of(any::<u16>()),
        any::<usize>(),
        proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6),
        proptest::collection::vec(any::<u8>(), 0..64),
    )
        .prop_map(|(n, t, edns, cut, flips, tail)| {
            let mut w = query(n, t, edns);
            for (at, b) in flips {
                let i = at % w.len();
                w[i] = b;
            }
            w.extend(tail);
            let keep = cut % (w.len() + 1);
            if keep > 0 {
                w.truncate(keep.max(1));
            }
            w
        })
}

/// Upstream answers to an A (or AAAA) question: random A records (any address, any TTL),
/// maybe a CNAME first, maybe an SOA in authority, any rcode and TC bit; sometimes cut.
fn upstream_answers() -> impl Strategy<Value = Vec<u8>> {
    (
        proptest::collection::vec((any::<[u8; 4]>(), any::<u32>()), 0..120),
        any::<bool>(),
        any::<bool>(),
        0u16..6,
        any::<bool>(),
        any::<usize>(),
    )
        .prop_map(|(records, cname, soa, rcode, tc, cut)| {
            let owner = Name::from_ascii("example.org.").unwrap();
            let mut m = Message::response(0x4242, OpCode::Query);
            m.add_query(Query::query(owner.clone(), RecordType::A));
            if cname {
                m.add_answer(Record::from_rdata(
                    owner.clone(),
                    30,
                    RData::CNAME(CNAME(owner.clone())),
                ));
            }
            for (a, ttl) in records {
                m.add_answer(Record::from_rdata(
                    owner.clone(),
                    ttl,
                    RData::A(A::from(Ipv4Addr::from(a))),
                ));
            }
            if soa {
                let s = SOA::new(owner.clone(), owner.clone(), 1, 1, 1, 1, 7);
                m.add_authority(Record::from_rdata(owner.clone(), 60, RData::SOA(s)));
            }
            m.metadata.response_code = ResponseCode::from_low(u8::try_from(rcode).unwrap());
            m.metadata.truncation = tc;
            let mut w = m.to_vec().unwrap();
            if cut % 4 == 0 {
                let keep = cut % (w.len() + 1);
                w.truncate(keep);
            }
            w
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(wire in proptest::collection::vec(any::<u8>(), 0..700)) {
        for t in [Transport::Udp, Transport::Tcp] {
            for src in [BLUE_POD, STRANGER] {
                let a = handle(&view(), &zone(), ip(src), &wire, t);
                check(&wire, &a, t);
            }
        }
    }

    #[test]
    fn damaged_queries_get_an_error_or_nothing(wire in damaged()) {
        for t in [Transport::Udp, Transport::Tcp] {
            let a = handle(&view(), &zone(), ip(BLUE_POD), &wire, t);
            check(&wire, &a, t);
        }
    }

    #[test]
    fn dns64_with_damaged_queries_and_answers_never_panics(
        q in damaged(),
        aaaa in upstream_answers(),
        a in upstream_answers(),
        junk in proptest::collection::vec(any::<u8>(), 0..300),
    ) {
        // A blue pod with DNS64 on: the decision never panics either.
        let mut v = view();
        v.add_dns64(("t1".into(), "blue".into()));
        for t in [Transport::Udp, Transport::Tcp] {
            let act = handle(&v, &zone(), ip(BLUE_POD), &q, t);
            check(&q, &act, t);
        }
        let _ = dns64::a_query(&q);
        for (x, y) in [(&aaaa, &a), (&junk, &a), (&aaaa, &junk)] {
            let _ = dns64::wants_a(x);
            for t in [Transport::Udp, Transport::Tcp] {
                if let Some(out) = dns64::synthesize(&q, x, y, t) {
                    check(&q, &Action::Reply { bytes: out, outcome: cozyplane_resolver::Outcome::Answer }, t);
                }
            }
        }
    }

    #[test]
    fn oversized_queries_never_panic(pad in 0usize..65000, edns in proptest::option::of(any::<u16>())) {
        let mut wire = query("web.t1.svc.cluster.local.", RecordType::A, edns);
        wire.resize(wire.len() + pad, 0xff);
        let a = handle(&view(), &zone(), ip(BLUE_POD), &wire, Transport::Udp);
        check(&wire, &a, Transport::Udp);
    }
}

#[test]
fn specific_bad_queries_get_the_right_error() {
    let code = |wire: &[u8]| match handle(&view(), &zone(), ip(BLUE_POD), wire, Transport::Udp) {
        Action::Reply { bytes, .. } => Some(Message::from_vec(&bytes).unwrap().metadata.response_code),
        Action::Drop(_) => None,
        Action::Forward | Action::ForwardDns64 => panic!("forwarded"),
    };
    // Shorter than a header: nothing.
    assert_eq!(code(&[0x42]), None);
    // A response: nothing (no loops between resolvers).
    let mut resp = query("web.t1.svc.cluster.local.", RecordType::A, None);
    resp[2] |= 0x80;
    assert_eq!(code(&resp), None);
    // A header promising a question that is not there: FORMERR.
    let mut cut = query("web.t1.svc.cluster.local.", RecordType::A, None);
    cut.truncate(14);
    assert_eq!(code(&cut), Some(ResponseCode::FormErr));
    // Two questions: FORMERR.
    let mut m = Message::from_vec(&query("web.t1.svc.cluster.local.", RecordType::A, None)).unwrap();
    m.add_query(m.queries[0].clone());
    assert_eq!(code(&m.to_vec().unwrap()), Some(ResponseCode::FormErr));
    // EDNS version 1: BADVERS (16, which shares its number with BADSIG).
    let mut m = Message::from_vec(&query("web.t1.svc.cluster.local.", RecordType::A, Some(1232))).unwrap();
    m.edns.as_mut().unwrap().set_version(1);
    assert_eq!(code(&m.to_vec().unwrap()).map(u16::from), Some(16));
    // Two OPT records: FORMERR (RFC 6891).
    let mut two = query("web.t1.svc.cluster.local.", RecordType::A, Some(1232));
    let opt = two[two.len() - 11..].to_vec();
    two.extend(opt);
    two[11] = 2;
    assert_eq!(code(&two), Some(ResponseCode::FormErr));
    // An opcode other than QUERY: NOTIMP.
    let mut notify = query("web.t1.svc.cluster.local.", RecordType::A, None);
    notify[2] = (notify[2] & 0x87) | (4 << 3);
    assert_eq!(code(&notify), Some(ResponseCode::NotImp));
}

/// TCP clients that lie about lengths, stall or send junk: the server stays up and keeps
/// answering a well-behaved client.
#[tokio::test]
async fn tcp_length_prefix_lies_do_not_hang_the_server() {
    let (udp, tcp) = cozyplane_resolver::server::bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let addr = tcp.local_addr().unwrap();
    // Queries from 127.0.0.1 must be someone's: make loopback the blue pod.
    let mut v = view();
    v.add_querier(ip("127.0.0.1"), ("t1".into(), "blue".into()));
    let res = Arc::new(Resolver::new(
        ViewHandle::new(v),
        zone(),
        Upstreams {
            servers: vec![],
            timeout: Duration::from_millis(100),
        },
        Metrics::default(),
    ));
    drop(udp);
    let server = tokio::spawn(res.clone().serve_tcp(tcp));

    // Promises 500 bytes, sends 10, then waits: holds only its own connection.
    let mut liar = tokio::net::TcpStream::connect(addr).await.unwrap();
    liar.write_all(&500u16.to_be_bytes()).await.unwrap();
    liar.write_all(&[0u8; 10]).await.unwrap();
    // Promises 20 bytes of junk and sends them: FORMERR or silence, then the next.
    let mut junk = tokio::net::TcpStream::connect(addr).await.unwrap();
    junk.write_all(&20u16.to_be_bytes()).await.unwrap();
    junk.write_all(&[0xab; 20]).await.unwrap();
    // Zero length: closed.
    let mut zero = tokio::net::TcpStream::connect(addr).await.unwrap();
    zero.write_all(&0u16.to_be_bytes()).await.unwrap();
    let mut sink = [0u8; 16];
    let n = tokio::time::timeout(Duration::from_secs(5), zero.read(&mut sink))
        .await
        .expect("closed, not hung")
        .unwrap();
    assert_eq!(n, 0);

    // A good client, two queries on one connection.
    let mut good = tokio::net::TcpStream::connect(addr).await.unwrap();
    for _ in 0..2 {
        let q = query("web.t1.svc.cluster.local.", RecordType::A, None);
        good.write_all(&u16::try_from(q.len()).unwrap().to_be_bytes())
            .await
            .unwrap();
        good.write_all(&q).await.unwrap();
        let len = tokio::time::timeout(Duration::from_secs(5), good.read_u16())
            .await
            .expect("answered")
            .unwrap();
        let mut buf = vec![0u8; usize::from(len)];
        good.read_exact(&mut buf).await.unwrap();
        let m = Message::from_vec(&buf).unwrap();
        assert_eq!(m.answers.len(), 1);
    }
    drop((liar, junk, res));
    server.abort();
}
