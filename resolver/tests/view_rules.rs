//! The split-horizon rules through the request path: what each tenant's pod gets for each
//! cluster name (bytes in, parsed answer out; no sockets).

mod common;

use std::net::IpAddr;

use common::{BLUE_POD, GREEN_POD, RED_POD, STRANGER, ip, query, view};
use cozyplane_resolver::answer::{Action, Outcome, Transport, Zone, handle};
use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::{RData, RecordType};

fn ask(from: &str, name: &str, t: RecordType) -> (Message, Outcome) {
    ask_in("cluster.local", from, name, t)
}

fn ask_in(domain: &str, from: &str, name: &str, t: RecordType) -> (Message, Outcome) {
    let zone = Zone::new(domain, 5).unwrap();
    match handle(
        &view(),
        &zone,
        ip(from),
        &query(name, t, Some(1232)),
        Transport::Udp,
    ) {
        Action::Reply { bytes, outcome } => (Message::from_vec(&bytes).unwrap(), outcome),
        other => panic!("{name}: expected an answer, got {other:?}"),
    }
}

fn addrs(m: &Message) -> Vec<IpAddr> {
    let mut v: Vec<IpAddr> = m.answers.iter().filter_map(|r| r.data.ip_addr()).collect();
    v.sort();
    v
}

/// NXDOMAIN or NODATA: the synthesized SOA of the zone in authority, nothing answered.
fn assert_negative(m: &Message, code: ResponseCode, domain: &str) {
    assert_eq!(m.metadata.response_code, code);
    assert!(m.answers.is_empty(), "{m:?}");
    assert!(m.metadata.authoritative);
    let soa = m.authorities.first().expect("SOA in authority");
    assert_eq!(soa.name.to_ascii(), format!("{domain}."));
    match &soa.data {
        RData::SOA(s) => assert_eq!(s.serial, 7),
        other => panic!("not a SOA: {other:?}"),
    }
}

#[test]
fn an_attached_service_answers_its_vip_to_its_own_vpc() {
    let (m, o) = ask(BLUE_POD, "web.t1.svc.cluster.local.", RecordType::A);
    assert_eq!(o, Outcome::Answer);
    assert_eq!(m.metadata.response_code, ResponseCode::NoError);
    assert!(m.metadata.authoritative && m.metadata.recursion_available);
    assert_eq!(m.metadata.id, 0x4242);
    assert_eq!(addrs(&m), vec![ip("172.16.0.250")]);
    let (m, _) = ask(BLUE_POD, "WEB.T1.svc.Cluster.Local.", RecordType::AAAA);
    assert_eq!(addrs(&m), vec![ip("fd00::fa")], "names are case-insensitive");
}

#[test]
fn a_peered_vpc_sees_the_service_and_an_unpeered_one_gets_nxdomain_with_soa() {
    let (m, _) = ask(GREEN_POD, "web.t1.svc.cluster.local.", RecordType::A);
    assert_eq!(addrs(&m), vec![ip("172.16.0.250")]);
    // red has a Service of the same name in its own namespace, and the same CIDR:
    // it sees its own, never blue's.
    let (m, o) = ask(RED_POD, "web.t1.svc.cluster.local.", RecordType::A);
    assert_eq!(o, Outcome::NxDomain);
    assert_negative(&m, ResponseCode::NXDomain, "cluster.local");
    let (m, _) = ask(RED_POD, "web.t2.svc.cluster.local.", RecordType::A);
    assert_eq!(addrs(&m), vec![ip("172.16.0.251")]);
    // Peering is not transitive and not a view of red: green cannot see red's.
    let (m, _) = ask(GREEN_POD, "web.t2.svc.cluster.local.", RecordType::A);
    assert_negative(&m, ResponseCode::NXDomain, "cluster.local");
}

#[test]
fn another_tenants_names_cannot_be_probed() {
    // Existing-but-invisible and absent answer alike, down to the namespace level.
    for name in [
        "db.t1.svc.cluster.local.",
        "db-0.db.t1.svc.cluster.local.",
        "_pg._tcp.db.t1.svc.cluster.local.",
        "t1.svc.cluster.local.",
    ] {
        let (seen, _) = ask(RED_POD, name, RecordType::A);
        let (absent, _) = ask(RED_POD, &name.replace("t1", "nope"), RecordType::A);
        assert_negative(&seen, ResponseCode::NXDomain, "cluster.local");
        assert_eq!(seen.authorities, absent.authorities, "{name}");
    }
    let (m, _) = ask(BLUE_POD, "t1.svc.cluster.local.", RecordType::A);
    assert_negative(&m, ResponseCode::NoError, "cluster.local");
}

#[test]
fn unknown_sources_are_refused() {
    let zone = Zone::new("cluster.local", 5).unwrap();
    for name in ["web.t1.svc.cluster.local.", "example.org."] {
        let Action::Reply { bytes, outcome } = handle(
            &view(),
            &zone,
            ip(STRANGER),
            &query(name, RecordType::A, None),
            Transport::Udp,
        ) else {
            panic!("no answer");
        };
        assert_eq!(outcome, Outcome::Refused);
        let m = Message::from_vec(&bytes).unwrap();
        assert_eq!(m.metadata.response_code, ResponseCode::Refused);
        assert!(m.answers.is_empty());
    }
}

#[test]
fn a_headless_service_answers_its_ready_endpoints_and_each_hostname() {
    let (m, _) = ask(BLUE_POD, "db.t1.svc.cluster.local.", RecordType::A);
    assert_eq!(addrs(&m), vec![ip("172.16.0.5"), ip("172.16.0.6")]);
    let (m, _) = ask(BLUE_POD, "db-0.db.t1.svc.cluster.local.", RecordType::A);
    assert_eq!(addrs(&m), vec![ip("172.16.0.5")]);
    // Without a hostname, the endpoint answers under its dashed address.
    let (m, _) = ask(BLUE_POD, "172-16-0-6.db.t1.svc.cluster.local.", RecordType::A);
    assert_eq!(addrs(&m), vec![ip("172.16.0.6")]);
    let (m, _) = ask(BLUE_POD, "db-9.db.t1.svc.cluster.local.", RecordType::A);
    assert_negative(&m, ResponseCode::NXDomain, "cluster.local");
    // A VIP Service has no per-host names.
    let (m, _) = ask(BLUE_POD, "db-0.web.t1.svc.cluster.local.", RecordType::A);
    assert_negative(&m, ResponseCode::NXDomain, "cluster.local");
}

#[test]
fn srv_names_ports_and_targets_with_their_addresses() {
    let (m, _) = ask(BLUE_POD, "_http._tcp.web.t1.svc.cluster.local.", RecordType::SRV);
    assert_eq!(m.answers.len(), 1);
    let RData::SRV(srv) = &m.answers[0].data else {
        panic!("{m:?}")
    };
    assert_eq!(srv.port, 80);
    assert_eq!(srv.target.to_ascii(), "web.t1.svc.cluster.local.");
    let extra: Vec<_> = m.additionals.iter().filter_map(|r| r.data.ip_addr()).collect();
    assert!(extra.contains(&ip("172.16.0.250")));

    let (m, _) = ask(BLUE_POD, "_pg._tcp.db.t1.svc.cluster.local.", RecordType::SRV);
    let mut targets: Vec<String> = m
        .answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::SRV(s) => Some(format!("{}:{}", s.target.to_ascii(), s.port)),
            _ => None,
        })
        .collect();
    targets.sort();
    assert_eq!(
        targets,
        vec![
            "172-16-0-6.db.t1.svc.cluster.local.:5432",
            "db-0.db.t1.svc.cluster.local.:5432"
        ]
    );
    // Wrong protocol or port name: no such name.
    let (m, _) = ask(BLUE_POD, "_http._udp.web.t1.svc.cluster.local.", RecordType::SRV);
    assert_negative(&m, ResponseCode::NXDomain, "cluster.local");
    // The SRV name exists; an A query for it is NODATA.
    let (m, o) = ask(BLUE_POD, "_http._tcp.web.t1.svc.cluster.local.", RecordType::A);
    assert_eq!(o, Outcome::NoData);
    assert_negative(&m, ResponseCode::NoError, "cluster.local");
}

#[test]
fn an_existing_name_without_records_of_the_type_is_nodata_with_soa() {
    // red's web has no IPv6 VIP.
    let (m, o) = ask(RED_POD, "web.t2.svc.cluster.local.", RecordType::AAAA);
    assert_eq!(o, Outcome::NoData);
    assert_negative(&m, ResponseCode::NoError, "cluster.local");
    let (m, _) = ask(BLUE_POD, "web.t1.svc.cluster.local.", RecordType::TXT);
    assert_negative(&m, ResponseCode::NoError, "cluster.local");
    // Attached, VIP not allocated yet: the name exists.
    let (m, _) = ask(BLUE_POD, "pending.t1.svc.cluster.local.", RecordType::A);
    assert_negative(&m, ResponseCode::NoError, "cluster.local");
}

#[test]
fn the_cluster_domain_is_a_setting_and_other_names_are_forwarded() {
    let (m, _) = ask_in("cozy.local", BLUE_POD, "web.t1.svc.cozy.local.", RecordType::A);
    assert_eq!(addrs(&m), vec![ip("172.16.0.250")]);
    let (m, _) = ask_in("cozy.local", RED_POD, "web.t1.svc.cozy.local.", RecordType::A);
    assert_negative(&m, ResponseCode::NXDomain, "cozy.local");
    let zone = Zone::new("cozy.local", 5).unwrap();
    for name in ["web.t1.svc.cluster.local.", "example.org.", "cozy.localhost."] {
        assert_eq!(
            handle(
                &view(),
                &zone,
                ip(BLUE_POD),
                &query(name, RecordType::A, None),
                Transport::Udp
            ),
            Action::Forward,
            "{name}"
        );
    }
    // Anything else below the domain never leaves the node.
    let (m, _) = ask_in(
        "cozy.local",
        BLUE_POD,
        "10-0-0-1.t1.pod.cozy.local.",
        RecordType::A,
    );
    assert_negative(&m, ResponseCode::NXDomain, "cozy.local");
}

#[test]
fn an_answer_larger_than_the_clients_udp_limit_is_truncated() {
    let mut v = view();
    let many: Vec<_> = (1..=60u8)
        .map(|i| cozyplane_resolver::Endpoint {
            hostname: None,
            addrs: vec![IpAddr::from([172, 16, 1, i])],
        })
        .collect();
    v.add_service(
        ("t1".into(), "big".into()),
        cozyplane_resolver::Service {
            vpc: ("t1".into(), "blue".into()),
            headless: true,
            vips: vec![],
            ports: vec![],
            endpoints: many,
        },
    );
    let zone = Zone::new("cluster.local", 5).unwrap();
    let name = "big.t1.svc.cluster.local.";
    let get = |edns, t| match handle(&v, &zone, ip(BLUE_POD), &query(name, RecordType::A, edns), t) {
        Action::Reply { bytes, .. } => bytes,
        other => panic!("{other:?}"),
    };
    // 60 A records are ~1 KiB: over 512 without EDNS.
    let plain = get(None, Transport::Udp);
    let m = Message::from_vec(&plain).unwrap();
    assert!(plain.len() <= 512 && m.metadata.truncation && m.answers.is_empty());
    // An EDNS client offering 1232 gets them all; over TCP too.
    for (edns, t) in [(Some(1232), Transport::Udp), (None, Transport::Tcp)] {
        let m = Message::from_vec(&get(edns, t)).unwrap();
        assert!(!m.metadata.truncation);
        assert_eq!(m.answers.len(), 60);
    }
}
