//! `spec.dhcp` in the answers: the merged options reach the guest in each protocol's own
//! options, decoded here with dhcproto (and the RA's by hand, as a guest's kernel reads it).

use cozyplane_apis::v1alpha1::{GuestConfig, GuestRoute};
use ipnet::Ipv6Net;

use super::*;
use crate::features::autoconf::guest as guest_of;
use crate::features::autoconf::options::{Level, Table};

fn flags() -> AutoconfFlags {
    AutoconfFlags {
        autoconf: true,
        autoconf_dns: vec!["10.96.0.10".parse().unwrap(), "fd96::a".parse().unwrap()],
        autoconf_domain: "cozy.local".into(),
        autoconf_lease: 3600,
        autoconf_ra_interval: 200,
    }
}

fn allocation() -> crate::core::ipam::Allocation {
    serde_json::from_value(serde_json::json!({
        "ip": "10.244.0.5", "containerId": "c", "ifname": "eth0", "pod": "tenant-a/vm",
        "mac": "02:cf:00:0a:00:05", "hostIfindex": 7,
        "vpc": {"vni": 100, "ip": "10.0.0.5", "port": "v100.10-0-0-5", "vpc": "tenant-a/blue",
                "other": {"ip": "fd00::5", "port": "v100.fd00--5"}},
    }))
    .unwrap()
}

fn vpc_level() -> Level {
    Level::of(&GuestConfig {
        dns_servers: vec!["10.0.0.53".into(), "fd00::53".into()],
        search_domains: vec!["corp.example".into(), "example.com".into()],
        mtu: 9000,
        routes: vec![
            GuestRoute {
                destination: "192.168.10.0/24".into(),
                gateway: String::new(),
            },
            GuestRoute {
                destination: "fd10::/48".into(),
                gateway: String::new(),
            },
        ],
        lease_seconds: 600,
    })
}

/// The guest of [`allocation`] with the VPC's options and a Port overriding the IPv4
/// resolvers, the MTU and the routes.
fn merged_guest() -> Guest {
    let mut t = Table::default();
    t.vpcs.insert(("tenant-a".into(), "blue".into()), vpc_level());
    t.ports.insert(
        "v100.10-0-0-5".into(),
        Level::of(&GuestConfig {
            dns_servers: vec!["10.9.9.9".into()],
            mtu: 1400,
            routes: vec![GuestRoute {
                destination: "172.16.0.0/12".into(),
                gateway: "10.0.0.1".into(),
            }],
            ..GuestConfig::default()
        }),
    );
    let a = allocation();
    guest_of(&a, 1450, &flags(), &t.level_of(&a)).unwrap()
}

/// A secondary interface's guest (issue 37): its VPC's ranges recorded at ADD are its routes,
/// it has no default route, and the flags' resolvers and search list are the pod network's
/// business; what its Port or VPC sets still reaches it.
#[test]
fn a_secondary_guest_routes_its_vpc_ranges_and_takes_no_flag_resolvers() {
    let mut a = allocation();
    a.ifname = "net1".into();
    a.secondary = Some(crate::core::ipam::Secondary::Delegated);
    if let Some(v) = a.vpc.as_mut() {
        v.routes = vec!["10.0.0.0/24".into(), "fd00::/64".into()];
    }
    let g = guest_of(&a, 1450, &flags(), &Level::default()).unwrap();
    assert!(!g.default_route);
    assert_eq!(
        g.routes4,
        vec![("10.0.0.0/24".parse().unwrap(), Ipv4Addr::new(169, 254, 1, 1))]
    );
    assert_eq!(g.routes6, vec!["fd00::/64".parse::<Ipv6Net>().unwrap()]);
    assert!(g.dns4.is_empty() && g.dns6.is_empty() && g.search.is_empty());
    let vpc = guest_of(&a, 1450, &flags(), &vpc_level()).unwrap();
    assert_eq!(vpc.dns4, vec![Ipv4Addr::new(10, 0, 0, 53)], "the VPC's own");
    assert_eq!(vpc.routes4.len(), 2, "the VPC's spec.dhcp routes and its range");
    assert!(
        guest_of(&allocation(), 1450, &flags(), &Level::default())
            .unwrap()
            .default_route
    );
}

#[test]
fn a_guest_takes_the_ports_fields_then_the_vpcs_then_the_flags() {
    let a = allocation();
    let plain = guest_of(&a, 1450, &flags(), &Level::default()).unwrap();
    assert_eq!(plain.dns4, vec![Ipv4Addr::new(10, 96, 0, 10)]);
    assert_eq!(plain.search[0], "tenant-a.svc.cozy.local");
    assert_eq!((plain.mtu, plain.lease_secs), (1450, 3600));
    assert!(plain.routes4.is_empty() && plain.routes6.is_empty());

    let vpc = guest_of(&a, 1450, &flags(), &vpc_level()).unwrap();
    assert_eq!(vpc.mtu, 1450, "9000 asked, the link's 1450 given");
    assert_eq!(vpc.search, vec!["corp.example", "example.com"]);
    assert_eq!(vpc.lease_secs, 600);

    let g = merged_guest();
    assert_eq!(g.dns4, vec![Ipv4Addr::new(10, 9, 9, 9)], "the Port's");
    assert_eq!(g.dns6, vec!["fd00::53".parse::<Ipv6Addr>().unwrap()], "the VPC's");
    assert_eq!(g.mtu, 1400);
    assert_eq!(
        g.routes4,
        vec![("172.16.0.0/12".parse().unwrap(), Ipv4Addr::new(10, 0, 0, 1))]
    );
    assert!(
        g.routes6.is_empty(),
        "the Port's routes replace the VPC's, both families"
    );
    assert_eq!(g.lease_secs, 600);
}

#[test]
fn dhcpv4_carries_the_merged_options() {
    let g = merged_guest();
    let (_, m, _, _) = reply4(answer(
        &dhcp4(MessageType::Discover, MAC, Ipv4Addr::UNSPECIFIED, &[]),
        false,
        &g,
        &settings(),
    ));
    let o = m.opts();
    assert_eq!(
        o.get(OptionCode::DomainNameServer),
        Some(&DhcpOption::DomainNameServer(vec![Ipv4Addr::new(10, 9, 9, 9)]))
    );
    assert_eq!(
        o.get(OptionCode::DomainName),
        Some(&DhcpOption::DomainName("corp.example".into()))
    );
    let Some(DhcpOption::DomainSearch(names)) = o.get(OptionCode::DomainSearch) else {
        panic!("no option 119")
    };
    let names: Vec<String> = names
        .iter()
        .map(|n| n.to_utf8().trim_end_matches('.').to_string())
        .collect();
    assert_eq!(names, vec!["corp.example", "example.com"]);
    let gw = Ipv4Addr::new(169, 254, 1, 1);
    assert_eq!(
        o.get(OptionCode::ClasslessStaticRoute),
        Some(&DhcpOption::ClasslessStaticRoute(vec![
            ("169.254.1.1/32".parse().unwrap(), Ipv4Addr::UNSPECIFIED),
            ("172.16.0.0/12".parse().unwrap(), Ipv4Addr::new(10, 0, 0, 1)),
            ("0.0.0.0/0".parse().unwrap(), gw),
        ]))
    );
    assert_eq!(
        o.get(OptionCode::InterfaceMtu),
        Some(&DhcpOption::InterfaceMtu(1400))
    );
    assert_eq!(
        o.get(OptionCode::AddressLeaseTime),
        Some(&DhcpOption::AddressLeaseTime(600))
    );
    assert_eq!(o.get(OptionCode::Renewal), Some(&DhcpOption::Renewal(300)));
}

#[test]
fn dhcpv6_carries_the_merged_resolvers_domains_and_lease() {
    let g = merged_guest();
    let (_, m) = reply6(answer(
        &dhcp6(v6::MessageType::Solicit, true, None),
        true,
        &g,
        &settings(),
    ));
    assert_eq!(
        m.opts().get(v6::OptionCode::DomainNameServers),
        Some(&v6::DhcpOption::DomainNameServers(vec![
            "fd00::53".parse().unwrap()
        ]))
    );
    let Some(v6::DhcpOption::DomainSearchList(names)) = m.opts().get(v6::OptionCode::DomainSearchList) else {
        panic!("no option 24")
    };
    assert_eq!(names.len(), 2);
    let Some(v6::DhcpOption::IANA(ia)) = m.opts().get(v6::OptionCode::IANA) else {
        panic!("no IA_NA")
    };
    let Some(v6::DhcpOption::IAAddr(a)) = ia.opts.get(v6::OptionCode::IAAddr) else {
        panic!("no IA address")
    };
    assert_eq!((a.valid_life, ia.t1), (600, 300));
}

/// The options of a router advertisement frame, as (type, body after type and length).
fn ra_options(f: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let p = frame::ip6(f).unwrap();
    let mut o = &p.payload[16..];
    let mut v = Vec::new();
    while !o.is_empty() {
        let n = usize::from(o[1]) * 8;
        v.push((o[0], o[2..n].to_vec()));
        o = &o[n..];
    }
    v
}

#[test]
fn router_advertisements_carry_the_mtu_resolvers_domains_and_routes() {
    let mut t = Table::default();
    t.vpcs.insert(("tenant-a".into(), "blue".into()), vpc_level());
    let a = allocation();
    let mut g = guest_of(&a, 1450, &flags(), &t.level_of(&a)).unwrap();
    // One route of each length class: /0 is not allowed by the API, so /48 and /128.
    g.routes6.push("fd20::1/128".parse::<Ipv6Net>().unwrap());
    let Outcome::Answer("ra", f) = answer(&rs(MAC, 255), true, &g, &settings()) else {
        panic!("no RA")
    };
    let opts = ra_options(&f);
    let kinds: Vec<u8> = opts.iter().map(|(t, _)| *t).collect();
    assert_eq!(kinds, vec![1, 5, 25, 24, 24, 31]);
    let body = |t: u8| opts.iter().find(|(k, _)| *k == t).unwrap().1.clone();
    assert_eq!(u32::from_be_bytes(body(5)[2..6].try_into().unwrap()), 1450);
    assert_eq!(
        &body(25)[6..22],
        &"fd00::53".parse::<Ipv6Addr>().unwrap().octets()
    );
    let rio: Vec<&Vec<u8>> = opts.iter().filter(|(k, _)| *k == 24).map(|(_, b)| b).collect();
    // Prefix length, flags (medium preference), lifetime, the prefix's 8 (or 16) bytes.
    assert_eq!((rio[0][0], rio[0][1]), (48, 0));
    assert_eq!(
        u32::from_be_bytes(rio[0][2..6].try_into().unwrap()),
        u32::from(ra::ROUTER_LIFETIME)
    );
    assert_eq!(rio[0].len(), 6 + 8);
    assert_eq!(
        &rio[0][6..14],
        &"fd10::".parse::<Ipv6Addr>().unwrap().octets()[..8]
    );
    assert_eq!((rio[1][0], rio[1].len()), (128, 6 + 16));
    assert_eq!(&rio[1][6..22], &"fd20::1".parse::<Ipv6Addr>().unwrap().octets());
    let dnssl = body(31);
    assert!(dnssl.windows(4).any(|w| w == b"corp"), "DNSSL names corp.example");
}
