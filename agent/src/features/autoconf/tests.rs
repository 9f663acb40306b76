//! The responder's unit tier: each protocol's answers are the Port's and only the Port's,
//! and no input, however malformed (proptest), panics or answers with another address.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Instant;

use dhcproto::v4::{self, DhcpOption, Message, MessageType, OptionCode};
use dhcproto::v6;
use dhcproto::{Decodable as _, Encodable as _};
use proptest::prelude::*;

use super::frame::{self, Ends};
use super::*;

const MAC: [u8; 6] = [0x02, 0xcf, 0, 0x0a, 0, 5];
const OTHER_MAC: [u8; 6] = [0x02, 0xcf, 0, 0x0a, 0, 6];
const GW_MAC: [u8; 6] = [0x02, 0xcf, 0, 0, 0, 1];

fn guest() -> Guest {
    Guest {
        mac: MAC,
        v4: Some(Ipv4Addr::new(10, 0, 0, 5)),
        v6: Some("fd00::5".parse().unwrap()),
        mtu: 1450,
        dns4: vec![Ipv4Addr::new(10, 96, 0, 10)],
        dns6: vec!["fd96::a".parse().unwrap()],
        search: search_list("tenant-a/vm", "cozy.local"),
        routes4: vec![],
        routes6: vec![],
        lease_secs: 3600,
        default_route: true,
    }
}

fn settings() -> Settings {
    Settings {
        gw_mac: GW_MAC,
        ra_interval_secs: 200,
    }
}

fn dhcp4(t: MessageType, mac: [u8; 6], ciaddr: Ipv4Addr, opts: &[DhcpOption]) -> Vec<u8> {
    let mut m = Message::new(
        ciaddr,
        Ipv4Addr::UNSPECIFIED,
        Ipv4Addr::UNSPECIFIED,
        Ipv4Addr::UNSPECIFIED,
        &mac,
    );
    m.set_xid(0x1234_5678);
    m.opts_mut().insert(DhcpOption::MessageType(t));
    for o in opts {
        m.opts_mut().insert(o.clone());
    }
    let src = if ciaddr.is_unspecified() {
        Ipv4Addr::UNSPECIFIED
    } else {
        ciaddr
    };
    let dst = if ciaddr.is_unspecified() {
        Ipv4Addr::BROADCAST
    } else {
        Ipv4Addr::new(169, 254, 1, 1)
    };
    let e = Ends {
        src_mac: mac,
        dst_mac: [0xff; 6],
        src,
        dst,
    };
    frame::build_udp4(e, 68, 67, &m.to_vec().unwrap())
}

/// The DHCPv4 message of an answer frame, and its frame's destination.
fn reply4(out: Outcome) -> (&'static str, Message, Ipv4Addr, [u8; 6]) {
    let Outcome::Answer(kind, f) = out else {
        panic!("no answer: {out:?}")
    };
    let u = frame::udp4(&f).unwrap();
    assert_eq!((u.src, u.sport, u.dport), (Ipv4Addr::new(169, 254, 1, 1), 67, 68));
    let mut dst_mac = [0; 6];
    dst_mac.copy_from_slice(&f[..6]);
    (kind, Message::from_bytes(u.payload).unwrap(), u.dst, dst_mac)
}

#[test]
fn discover_gets_the_ports_address_as_a_cni_pod_has_it() {
    let (kind, m, dst, dst_mac) = reply4(answer(
        &dhcp4(MessageType::Discover, MAC, Ipv4Addr::UNSPECIFIED, &[]),
        false,
        &guest(),
        &settings(),
    ));
    assert_eq!(kind, "offer");
    assert_eq!(m.opts().msg_type(), Some(MessageType::Offer));
    assert_eq!(m.xid(), 0x1234_5678);
    assert_eq!(m.yiaddr(), Ipv4Addr::new(10, 0, 0, 5));
    assert_eq!((dst, dst_mac), (Ipv4Addr::new(10, 0, 0, 5), MAC));
    let o = m.opts();
    assert_eq!(
        o.get(OptionCode::SubnetMask),
        Some(&DhcpOption::SubnetMask(Ipv4Addr::BROADCAST))
    );
    assert_eq!(
        o.get(OptionCode::Router),
        Some(&DhcpOption::Router(vec![Ipv4Addr::new(169, 254, 1, 1)]))
    );
    let Some(DhcpOption::ClasslessStaticRoute(routes)) = o.get(OptionCode::ClasslessStaticRoute) else {
        panic!("no option 121")
    };
    assert_eq!(
        routes,
        &vec![
            ("169.254.1.1/32".parse().unwrap(), Ipv4Addr::UNSPECIFIED),
            ("0.0.0.0/0".parse().unwrap(), Ipv4Addr::new(169, 254, 1, 1)),
        ]
    );
    assert_eq!(
        o.get(OptionCode::InterfaceMtu),
        Some(&DhcpOption::InterfaceMtu(1450))
    );
    assert_eq!(
        o.get(OptionCode::DomainNameServer),
        Some(&DhcpOption::DomainNameServer(vec![Ipv4Addr::new(10, 96, 0, 10)]))
    );
    assert_eq!(
        o.get(OptionCode::DomainName),
        Some(&DhcpOption::DomainName("tenant-a.svc.cozy.local".into()))
    );
    assert_eq!(
        o.get(OptionCode::AddressLeaseTime),
        Some(&DhcpOption::AddressLeaseTime(3600))
    );
}

#[test]
fn request_renew_rebind_are_acked_another_address_is_naked() {
    let g = guest();
    let s = settings();
    let ip = g.v4.unwrap();
    // Selecting: requested address + our server id.
    let sel = dhcp4(
        MessageType::Request,
        MAC,
        Ipv4Addr::UNSPECIFIED,
        &[
            DhcpOption::RequestedIpAddress(ip),
            DhcpOption::ServerIdentifier(Ipv4Addr::new(169, 254, 1, 1)),
        ],
    );
    let (kind, m, _, _) = reply4(answer(&sel, false, &g, &s));
    assert_eq!((kind, m.yiaddr()), ("ack", ip));
    // Renewing/rebinding: ciaddr, no option 50; unicast back to it.
    let (kind, m, dst, _) = reply4(answer(&dhcp4(MessageType::Request, MAC, ip, &[]), false, &g, &s));
    assert_eq!((kind, m.yiaddr(), dst), ("ack", ip, ip));
    // Another address (init-reboot after a move, or a lie): NAK, broadcast.
    let other = dhcp4(
        MessageType::Request,
        MAC,
        Ipv4Addr::UNSPECIFIED,
        &[DhcpOption::RequestedIpAddress(Ipv4Addr::new(10, 0, 0, 6))],
    );
    let (kind, m, dst, _) = reply4(answer(&other, false, &g, &s));
    assert_eq!(
        (kind, m.opts().msg_type(), dst),
        ("nak", Some(MessageType::Nak), Ipv4Addr::BROADCAST)
    );
    assert_eq!(m.yiaddr(), Ipv4Addr::UNSPECIFIED);
    // Another server chosen: quiet.
    let elsewhere = dhcp4(
        MessageType::Request,
        MAC,
        Ipv4Addr::UNSPECIFIED,
        &[
            DhcpOption::RequestedIpAddress(ip),
            DhcpOption::ServerIdentifier(Ipv4Addr::new(10, 0, 0, 1)),
        ],
    );
    assert_eq!(answer(&elsewhere, false, &g, &s), Outcome::Quiet("other_server"));
    assert_eq!(
        answer(&dhcp4(MessageType::Release, MAC, ip, &[]), false, &g, &s),
        Outcome::Quiet("release")
    );
    assert_eq!(
        answer(
            &dhcp4(MessageType::Decline, MAC, Ipv4Addr::UNSPECIFIED, &[]),
            false,
            &g,
            &s
        ),
        Outcome::Quiet("decline")
    );
}

#[test]
fn another_mac_or_no_v4_address_gets_nothing() {
    let s = settings();
    let f = dhcp4(MessageType::Discover, OTHER_MAC, Ipv4Addr::UNSPECIFIED, &[]);
    assert_eq!(answer(&f, false, &guest(), &s), Outcome::Drop(Drop::Mac));
    let g = Guest { v4: None, ..guest() };
    let f = dhcp4(MessageType::Discover, MAC, Ipv4Addr::UNSPECIFIED, &[]);
    assert_eq!(answer(&f, false, &g, &s), Outcome::Drop(Drop::NoAddress));
}

fn dhcp6(t: v6::MessageType, rapid: bool, server: Option<Vec<u8>>) -> Vec<u8> {
    let mut m = v6::Message::new_with_id(t, [1, 2, 3]);
    let o = m.opts_mut();
    o.insert(v6::DhcpOption::ClientId(vec![0, 3, 0, 1, 2, 0xcf, 0, 0x0a, 0, 5]));
    o.insert(v6::DhcpOption::IANA(v6::IANA {
        id: 7,
        t1: 0,
        t2: 0,
        opts: Default::default(),
    }));
    if rapid {
        o.insert(v6::DhcpOption::RapidCommit);
    }
    if let Some(id) = server {
        o.insert(v6::DhcpOption::ServerId(id));
    }
    let e = Ends {
        src_mac: MAC,
        dst_mac: frame::mcast_mac("ff02::1:2".parse().unwrap()),
        src: "fe80::cf:aff:fe00:5".parse::<Ipv6Addr>().unwrap(),
        dst: "ff02::1:2".parse().unwrap(),
    };
    frame::build_udp6(e, 546, 547, &m.to_vec().unwrap())
}

fn reply6(out: Outcome) -> (&'static str, v6::Message) {
    let Outcome::Answer(kind, f) = out else {
        panic!("no answer: {out:?}")
    };
    let p = frame::ip6(&f).unwrap();
    assert_eq!(p.src, "fe80::1".parse::<Ipv6Addr>().unwrap());
    let (sp, dp, payload) = frame::udp_of(p.payload).unwrap();
    assert_eq!((sp, dp), (547, 546));
    (kind, v6::Message::from_bytes(payload).unwrap())
}

fn addresses(m: &v6::Message) -> Vec<Ipv6Addr> {
    m.opts()
        .iter()
        .filter_map(|o| match o {
            v6::DhcpOption::IANA(ia) => Some(ia),
            _ => None,
        })
        .flat_map(|ia| {
            ia.opts.iter().filter_map(|o| match o {
                v6::DhcpOption::IAAddr(a) => Some(a.addr),
                _ => None,
            })
        })
        .collect()
}

#[test]
fn dhcpv6_gives_exactly_the_ports_128_with_rapid_commit() {
    let (g, s) = (guest(), settings());
    let (kind, m) = reply6(answer(&dhcp6(v6::MessageType::Solicit, true, None), true, &g, &s));
    assert_eq!((kind, m.msg_type()), ("reply", v6::MessageType::Reply));
    assert!(m.opts().get(v6::OptionCode::RapidCommit).is_some());
    assert_eq!(addresses(&m), vec![g.v6.unwrap()]);
    assert_eq!(
        m.opts().get(v6::OptionCode::DomainNameServers),
        Some(&v6::DhcpOption::DomainNameServers(g.dns6.clone()))
    );
    assert!(m.opts().get(v6::OptionCode::DomainSearchList).is_some());
    // Without rapid commit: ADVERTISE, then REQUEST to us -> REPLY; to another server: quiet.
    let (kind, m) = reply6(answer(
        &dhcp6(v6::MessageType::Solicit, false, None),
        true,
        &g,
        &s,
    ));
    assert_eq!((kind, addresses(&m)), ("advertise", vec![g.v6.unwrap()]));
    assert_eq!(
        m.opts().get(v6::OptionCode::Preference),
        Some(&v6::DhcpOption::Preference(255)),
        "the only server: the client requests at once"
    );
    let ours = dhcp6::server_duid(GW_MAC);
    for t in [v6::MessageType::Request, v6::MessageType::Renew] {
        let (_, m) = reply6(answer(&dhcp6(t, false, Some(ours.clone())), true, &g, &s));
        assert_eq!(addresses(&m), vec![g.v6.unwrap()], "{t:?}");
    }
    let (_, m) = reply6(answer(&dhcp6(v6::MessageType::Rebind, false, None), true, &g, &s));
    assert_eq!(addresses(&m), vec![g.v6.unwrap()]);
    let (kind, m) = reply6(answer(
        &dhcp6(v6::MessageType::Release, false, Some(ours)),
        true,
        &g,
        &s,
    ));
    assert_eq!((kind, addresses(&m)), ("release", vec![]));
    assert_eq!(
        answer(
            &dhcp6(
                v6::MessageType::Request,
                false,
                Some(vec![0, 3, 0, 1, 9, 9, 9, 9, 9, 9])
            ),
            true,
            &g,
            &s
        ),
        Outcome::Quiet("other_server")
    );
}

fn rs(mac: [u8; 6], hops: u8) -> Vec<u8> {
    let e = Ends {
        src_mac: mac,
        dst_mac: frame::mcast_mac("ff02::2".parse().unwrap()),
        src: "fe80::cf:aff:fe00:5".parse::<Ipv6Addr>().unwrap(),
        dst: "ff02::2".parse().unwrap(),
    };
    let mut body = vec![133, 0, 0, 0, 0, 0, 0, 0, 1, 1];
    body.extend_from_slice(&mac);
    frame::build_ip6(e, frame::ICMPV6, hops, body)
}

#[test]
fn a_solicitation_gets_a_managed_advertisement_without_prefixes() {
    let (g, s) = (guest(), settings());
    let Outcome::Answer("ra", f) = answer(&rs(MAC, 255), true, &g, &s) else {
        panic!()
    };
    let p = frame::ip6(&f).unwrap();
    assert_eq!(
        (p.src, p.hops, p.proto),
        ("fe80::1".parse().unwrap(), 255, frame::ICMPV6)
    );
    let ra = p.payload;
    assert_eq!(ra[0], 134);
    assert_eq!(ra[5] & 0xc0, 0xc0, "M and O set");
    assert_eq!(u16::from_be_bytes([ra[6], ra[7]]), ra::ROUTER_LIFETIME);
    let mut o = &ra[16..];
    let mut seen = Vec::new();
    while !o.is_empty() {
        let n = usize::from(o[1]) * 8;
        seen.push(o[0]);
        if o[0] == 5 {
            assert_eq!(u32::from_be_bytes([o[4], o[5], o[6], o[7]]), 1450);
        }
        if o[0] == 25 {
            assert_eq!(&o[8..24], &g.dns6[0].octets());
        }
        o = &o[n..];
    }
    assert_eq!(seen, vec![1, 5, 25, 31], "no prefix information (3)");
    // Off-link (hop limit) or another MAC: nothing.
    assert_eq!(answer(&rs(MAC, 64), true, &g, &s), Outcome::Drop(Drop::Malformed));
    assert_eq!(
        answer(&rs(OTHER_MAC, 255), true, &g, &s),
        Outcome::Drop(Drop::Mac)
    );
}

/// A secondary interface's guest (issue 37): its VPC's ranges through the gateway, and no
/// default route in either family (no DHCP router, no default in option 121, an RA with router
/// lifetime 0 whose route information still names the ranges).
#[test]
fn a_secondary_interface_gets_its_vpc_ranges_and_no_default_route() {
    let g = Guest {
        default_route: false,
        routes4: vec![("10.10.0.0/24".parse().unwrap(), Ipv4Addr::new(169, 254, 1, 1))],
        routes6: vec!["fd10::/64".parse().unwrap()],
        ..guest()
    };
    let (_, m, _, _) = reply4(answer(
        &dhcp4(MessageType::Discover, MAC, Ipv4Addr::UNSPECIFIED, &[]),
        false,
        &g,
        &settings(),
    ));
    let o = m.opts();
    assert_eq!(o.get(OptionCode::Router), None);
    let Some(DhcpOption::ClasslessStaticRoute(routes)) = o.get(OptionCode::ClasslessStaticRoute) else {
        panic!("no option 121")
    };
    assert_eq!(
        routes,
        &vec![
            ("169.254.1.1/32".parse().unwrap(), Ipv4Addr::UNSPECIFIED),
            ("10.10.0.0/24".parse().unwrap(), Ipv4Addr::new(169, 254, 1, 1)),
        ]
    );
    let Outcome::Answer("ra", f) = answer(&rs(MAC, 255), true, &g, &settings()) else {
        panic!()
    };
    let ra = frame::ip6(&f).unwrap().payload;
    assert_eq!(u16::from_be_bytes([ra[6], ra[7]]), 0, "not a default router");
    let mut o = &ra[16..];
    let mut routes = Vec::new();
    while !o.is_empty() {
        let n = usize::from(o[1]) * 8;
        if o[0] == 24 {
            routes.push((o[2], o[8..16].to_vec()));
        }
        o = &o[n..];
    }
    let want: ipnet::Ipv6Net = "fd10::/64".parse().unwrap();
    assert_eq!(routes, vec![(64, want.network().octets()[..8].to_vec())]);
}

/// An IPv4-only guest's kernel solicits routers whenever its link comes up: no answer, and
/// counted as ignored (`cozyplane_autoconf_ignored_total{reason="no_ipv6"}`), never as a drop,
/// so that a drop alert means a fault. A solicitation with another MAC stays a drop.
#[test]
fn a_solicitation_from_a_v4_only_guest_is_ignored_not_dropped() {
    let s = settings();
    let g = Guest {
        v6: None,
        dns6: vec![],
        ..guest()
    };
    assert_eq!(answer(&rs(MAC, 255), true, &g, &s), Outcome::Ignored("no_ipv6"));
    assert_eq!(
        answer(&rs(OTHER_MAC, 255), true, &g, &s),
        Outcome::Drop(Drop::Mac)
    );
    // As exposed: in the ignored family, none in the drops.
    let mut r = prometheus_client::registry::Registry::default();
    let m = metrics::AutoconfMetrics::register(&mut r);
    m.ignored("no_ipv6");
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &r).unwrap();
    assert!(
        text.contains("cozyplane_autoconf_ignored_total{reason=\"no_ipv6\"} 1"),
        "{text}"
    );
    assert!(!text.contains("cozyplane_autoconf_drops_total{"), "{text}");
}

#[test]
fn the_search_list_is_kubelets() {
    assert_eq!(
        search_list("ns/p", "cozy.local."),
        vec!["ns.svc.cozy.local", "svc.cozy.local", "cozy.local"]
    );
    assert_eq!(
        search_list("", "cluster.local"),
        vec!["svc.cluster.local", "cluster.local"]
    );
}

/// Every address an answer frame names (yiaddr, IA addresses), by scanning it for the
/// Port's and another Port's bytes.
fn names_other(f: &[u8]) -> bool {
    let other4 = [10u8, 0, 0, 6];
    let other6: Ipv6Addr = "fd00::6".parse().unwrap();
    f.windows(4).any(|w| w == other4) || f.windows(16).any(|w| w == other6.octets())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    /// Random bytes, and valid requests with random bytes flipped or cut, never panic, and
    /// an answer (if any) never names another address than the Port's.
    #[test]
    fn malformed_requests_never_panic_nor_answer_another_port(
        junk in proptest::collection::vec(any::<u8>(), 0..600),
        which in 0usize..5,
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..8),
        cut in any::<usize>(),
    ) {
        let (g, s) = (guest(), settings());
        let base = match which {
            0 => dhcp4(MessageType::Discover, MAC, Ipv4Addr::UNSPECIFIED, &[]),
            1 => dhcp4(MessageType::Request, MAC, Ipv4Addr::new(10, 0, 0, 5), &[]),
            2 => dhcp6(v6::MessageType::Solicit, true, None),
            3 => rs(MAC, 255),
            _ => junk.clone(),
        };
        let mut f = base;
        for (at, b) in &flips {
            if !f.is_empty() {
                let n = f.len();
                f[at % n] ^= b;
            }
        }
        if cut % 3 == 0 && !f.is_empty() {
            f.truncate(cut % f.len());
        }
        for v6 in [false, true] {
            if let Outcome::Answer(_, out) = answer(&f, v6, &g, &s) {
                // The guest's own request may have carried another address (NAK'd): the
                // answer must still not name it anywhere but nowhere else either.
                let asked_other = names_other(&f);
                prop_assert!(asked_other || !names_other(&out), "answer names another Port's address");
                if let Ok(u) = frame::udp4(&out)
                    && let Ok(m) = Message::from_bytes(u.payload)
                {
                    prop_assert!(m.yiaddr().is_unspecified() || Some(m.yiaddr()) == g.v4);
                }
            }
        }
    }
}

/// The responder's own cost per request (parse, build, encode), p99 over 20 000 runs of
/// each kind; `docs/benchmarks.md` quotes it. Bound generously (debug build, shared CI).
#[test]
fn answering_takes_microseconds() {
    let (g, s) = (guest(), settings());
    let reqs = [
        (
            "discover",
            dhcp4(MessageType::Discover, MAC, Ipv4Addr::UNSPECIFIED, &[]),
            false,
        ),
        ("solicit", dhcp6(v6::MessageType::Solicit, true, None), true),
        ("rs", rs(MAC, 255), true),
    ];
    for (what, f, v6) in reqs {
        let mut d: Vec<u128> = (0..20_000)
            .map(|_| {
                let t = Instant::now();
                let out = answer(&f, v6, &g, &s);
                let ns = t.elapsed().as_nanos();
                assert!(matches!(out, Outcome::Answer(..)));
                ns
            })
            .collect();
        d.sort_unstable();
        let p99 = d[d.len() * 99 / 100];
        eprintln!("{what}: p50 {} µs, p99 {} µs", d[d.len() / 2] / 1000, p99 / 1000);
        assert!(p99 < 5_000_000, "{what}: p99 {p99} ns");
    }
    let _ = v4::Opcode::BootReply;
}

// `spec.dhcp` in the answers.
mod options;

/// Where no option names an IPv6 resolver: the flags' IPv6 ones; an IPv6-only guest on a
/// cluster whose DNS is IPv4 only gets that DNS in its NAT64 form (the datapath translates),
/// a guest with an IPv4 address does not (it asks over IPv4).
#[test]
fn an_ipv6_only_guest_on_an_ipv4_dns_gets_its_nat64_form() {
    let v4_only: Vec<IpAddr> = vec!["10.96.0.10".parse().unwrap()];
    let dual: Vec<IpAddr> = vec!["10.96.0.10".parse().unwrap(), "fd00:96::a".parse().unwrap()];
    let nat64: Ipv6Addr = "64:ff9b::a60:a".parse().unwrap();
    assert_eq!(super::default_dns6(&v4_only, false), vec![nat64]);
    assert_eq!(super::default_dns6(&v4_only, true), Vec::<Ipv6Addr>::new());
    assert_eq!(
        super::default_dns6(&dual, false),
        vec!["fd00:96::a".parse::<Ipv6Addr>().unwrap()]
    );
}
