//! Shared by the resolver's tests: a two-tenant view and query helpers.
#![allow(dead_code, unreachable_pub)]

use std::net::IpAddr;

use cozyplane_resolver::{Endpoint, Protocol, Service, ServicePort, View};
use hickory_proto::op::{Edns, Message, Query};
use hickory_proto::rr::{Name, RecordType};

/// Pod fabric addresses (what the steering makes the source).
pub const BLUE_POD: &str = "10.244.1.10";
pub const RED_POD: &str = "10.244.1.11";
pub const GREEN_POD: &str = "10.244.1.12";
pub const STRANGER: &str = "10.244.1.99";

pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn vpc(ns: &str, n: &str) -> (String, String) {
    (ns.into(), n.into())
}

/// Tenants: blue (t1/blue) with `web` (VIP) and `db` (headless, two endpoints), red
/// (t2/red, same CIDR) with its own `web`, green (t3/green) peered with blue.
pub fn view() -> View {
    let mut v = View::new();
    v.add_querier(ip(BLUE_POD), vpc("t1", "blue"))
        .add_querier(ip(RED_POD), vpc("t2", "red"))
        .add_querier(ip(GREEN_POD), vpc("t3", "green"))
        .add_peering(vpc("t1", "blue"), vpc("t3", "green"))
        .set_generation(7);
    v.add_service(
        ("t1".into(), "web".into()),
        Service {
            vpc: vpc("t1", "blue"),
            headless: false,
            vips: vec![ip("172.16.0.250"), ip("fd00::fa")],
            ports: vec![ServicePort {
                name: "http".into(),
                protocol: Protocol::Tcp,
                port: 80,
            }],
            endpoints: vec![],
        },
    );
    v.add_service(
        ("t1".into(), "db".into()),
        Service {
            vpc: vpc("t1", "blue"),
            headless: true,
            vips: vec![],
            ports: vec![ServicePort {
                name: "pg".into(),
                protocol: Protocol::Tcp,
                port: 5432,
            }],
            endpoints: vec![
                Endpoint {
                    hostname: Some("db-0".into()),
                    addrs: vec![ip("172.16.0.5")],
                },
                Endpoint {
                    hostname: None,
                    addrs: vec![ip("172.16.0.6")],
                },
            ],
        },
    );
    v.add_service(
        ("t2".into(), "web".into()),
        Service {
            vpc: vpc("t2", "red"),
            headless: false,
            vips: vec![ip("172.16.0.251")],
            ports: vec![],
            endpoints: vec![],
        },
    );
    // Attached to blue, VIP not allocated yet.
    v.add_service(
        ("t1".into(), "pending".into()),
        Service {
            vpc: vpc("t1", "blue"),
            headless: false,
            vips: vec![],
            ports: vec![],
            endpoints: vec![],
        },
    );
    v
}

/// A query for `name`/`t`, with an EDNS OPT offering `edns` bytes if given.
pub fn query(name: &str, t: RecordType, edns: Option<u16>) -> Vec<u8> {
    let mut m = Message::query();
    m.metadata.id = 0x4242;
    m.metadata.recursion_desired = true;
    m.add_query(Query::query(Name::from_ascii(name).unwrap(), t));
    if let Some(size) = edns {
        let mut e = Edns::new();
        e.set_max_payload(size);
        m.set_edns(e);
    }
    m.to_vec().unwrap()
}
