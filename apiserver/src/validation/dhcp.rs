//! `spec.dhcp` of a VPC and of a Port ([`GuestConfig`]): options for guests that configure
//! themselves from the network. Shared by [`super::vpc`] and [`super::port`].
//!
//! Rules, each bounded by what the guest's side can hold:
//! - `dnsServers`: canonical host addresses (no loopback, link-local, multicast, …), no
//!   repeats, at most [`MAX_DNS_PER_FAMILY`] per family (resolv.conf reads no more: an extra
//!   one would be handed out and never asked); the first one too many is the one reported;
//! - `searchDomains`: at most [`MAX_SEARCH_DOMAINS`], each a lower-case DNS name (DNS-1123
//!   subdomain, labels of at most 63 characters, no trailing dot), no repeats, at most
//!   [`MAX_SEARCH_CHARS`] characters joined by spaces (glibc's classic resolv.conf limits,
//!   which older guests still have);
//! - `mtu`: 0 (the link's) or [`MIN_MTU`] to [`MAX_MTU`], the VPC's own bounds; the agent
//!   lowers it to the link's MTU where that is smaller (a node-dependent value, not known here);
//! - `routes`: at most [`MAX_ROUTES`]; `destination` a required canonical range, not the
//!   default route (`/0`: the default route is always the link gateway's), not touching a
//!   reserved range, no repeats; `gateway` optional, a canonical host address of the
//!   destination's family, and only for IPv4 (router advertisements, which carry the IPv6
//!   routes, have no next hop but the advertising router);
//! - `leaseSeconds`: 0 (the agent's) or [`MIN_LEASE_SECONDS`] to [`MAX_LEASE_SECONDS`].

use std::net::IpAddr;

use cozyplane_apis::net::IpFamily;
use cozyplane_apis::v1alpha1::GuestConfig;

use super::common;
use super::field::{FieldError, FieldErrors, FieldPath};
use super::format;
use super::vpc::{MAX_MTU, MIN_MTU};

/// Resolvers per family: resolv.conf's `MAXNS`.
pub const MAX_DNS_PER_FAMILY: usize = 3;
/// Search domains: resolv.conf's classic `MAXDNSRCH`.
pub const MAX_SEARCH_DOMAINS: usize = 6;
/// Characters of the search list, joined by spaces: resolv.conf's classic limit.
pub const MAX_SEARCH_CHARS: usize = 256;
/// Extra routes: option 121 and the router advertisement stay small.
pub const MAX_ROUTES: usize = 16;
/// The shortest lease: a guest renews at half of it.
pub const MIN_LEASE_SECONDS: i32 = 60;
/// The longest lease: one day.
pub const MAX_LEASE_SECONDS: i32 = 86_400;

/// Validates `c`, found at `path` (`spec.dhcp`).
pub fn validate_guest_config(c: &GuestConfig, path: &FieldPath) -> FieldErrors {
    let mut errs = FieldErrors::new();
    dns_servers(&mut errs, &path.child("dnsServers"), &c.dns_servers);
    search_domains(&mut errs, &path.child("searchDomains"), &c.search_domains);
    if c.mtu != 0 && !(MIN_MTU..=MAX_MTU).contains(&c.mtu) {
        errs.push(FieldError::invalid_int(
            path.child("mtu"),
            c.mtu.into(),
            format!("must be 0 (the link's MTU) or between {MIN_MTU} and {MAX_MTU}, inclusive"),
        ));
    }
    routes(&mut errs, &path.child("routes"), c);
    if c.lease_seconds != 0 && !(MIN_LEASE_SECONDS..=MAX_LEASE_SECONDS).contains(&c.lease_seconds) {
        errs.push(FieldError::invalid_int(
            path.child("leaseSeconds"),
            c.lease_seconds.into(),
            format!(
                "must be 0 (the agent's lease) or between {MIN_LEASE_SECONDS} and {MAX_LEASE_SECONDS} \
                 seconds, inclusive"
            ),
        ));
    }
    errs
}

fn dns_servers(errs: &mut FieldErrors, path: &FieldPath, list: &[String]) {
    let mut seen: Vec<IpAddr> = Vec::new();
    for (i, text) in list.iter().enumerate() {
        let p = path.index(i);
        let Some(ip) = common::host_ip(errs, p.clone(), text) else {
            continue;
        };
        if seen.contains(&ip) {
            errs.push(FieldError::duplicate(p, text));
            continue;
        }
        let family = IpFamily::of(ip);
        if seen.iter().filter(|s| IpFamily::of(**s) == family).count() >= MAX_DNS_PER_FAMILY {
            errs.push(FieldError::invalid(
                p,
                text,
                format!(
                    "at most {MAX_DNS_PER_FAMILY} {family} resolvers: a guest's resolv.conf reads no more"
                ),
            ));
            continue;
        }
        seen.push(ip);
    }
}

fn search_domains(errs: &mut FieldErrors, path: &FieldPath, list: &[String]) {
    if list.len() > MAX_SEARCH_DOMAINS {
        errs.push(FieldError::too_many(path.clone(), list.len(), MAX_SEARCH_DOMAINS));
    }
    for (i, d) in list.iter().enumerate() {
        let p = path.index(i);
        if d.is_empty() {
            errs.push(FieldError::required(p, "a DNS name"));
        } else if let Err(msg) = format::dns1123_subdomain(d) {
            errs.push(FieldError::invalid(p, d, msg));
        } else if d.split('.').any(|l| l.len() > format::DNS_LABEL_MAX) {
            errs.push(FieldError::invalid(
                p,
                d,
                format!(
                    "every label must be no more than {} characters",
                    format::DNS_LABEL_MAX
                ),
            ));
        } else if list[..i].contains(d) {
            errs.push(FieldError::duplicate(p, d));
        }
    }
    let chars = list.iter().map(String::len).sum::<usize>() + list.len().saturating_sub(1);
    if chars > MAX_SEARCH_CHARS {
        errs.push(FieldError::too_long(
            path.clone(),
            MAX_SEARCH_CHARS,
            "characters in all",
        ));
    }
}

fn routes(errs: &mut FieldErrors, path: &FieldPath, c: &GuestConfig) {
    if c.routes.len() > MAX_ROUTES {
        errs.push(FieldError::too_many(path.clone(), c.routes.len(), MAX_ROUTES));
    }
    let mut seen = Vec::new();
    for (i, r) in c.routes.iter().enumerate() {
        let p = path.index(i);
        let dst_path = p.child("destination");
        let dst = common::canonical_cidr(errs, dst_path.clone(), &r.destination);
        if let Some(net) = dst {
            if net.prefix_len() == 0 {
                errs.push(FieldError::invalid(
                    dst_path.clone(),
                    &r.destination,
                    "must not be the default route: it always leads through the link gateway",
                ));
            } else if let Some(msg) = common::reserved_overlap(&net) {
                errs.push(FieldError::invalid(dst_path.clone(), &r.destination, msg));
            } else if seen.contains(&net) {
                errs.push(FieldError::duplicate(dst_path.clone(), &r.destination));
            } else {
                seen.push(net);
            }
        }
        if r.gateway.is_empty() {
            continue;
        }
        let gw_path = p.child("gateway");
        let family = dst.as_ref().map(IpFamily::of_net);
        if family == Some(IpFamily::V6) {
            errs.push(FieldError::forbidden(
                gw_path,
                "an IPv6 route leads through the link gateway fe80::1 (router advertisements \
                 announce no other next hop): omit the gateway",
            ));
            continue;
        }
        let Some(gw) = common::host_ip(errs, gw_path.clone(), &r.gateway) else {
            continue;
        };
        if let Some(f) = family
            && IpFamily::of(gw) != f
        {
            errs.push(FieldError::invalid(
                gw_path,
                &r.gateway,
                format!("must be an {f} address, as the destination is"),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use cozyplane_apis::v1alpha1::GuestRoute;
    use proptest::prelude::*;

    use super::*;
    use crate::validation::ErrorType;
    use crate::validation::test_util::assert_errors;

    fn check(c: &GuestConfig) -> FieldErrors {
        validate_guest_config(c, &FieldPath::new("spec").child("dhcp"))
    }

    fn route(dst: &str, gw: &str) -> GuestRoute {
        GuestRoute {
            destination: dst.into(),
            gateway: gw.into(),
        }
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn a_full_config_and_an_empty_one_pass() {
        assert_errors(&check(&GuestConfig::default()), &[]);
        let c = GuestConfig {
            dns_servers: strings(&["10.96.0.10", "1.1.1.1", "8.8.8.8", "fd00::53", "2001:db8::53"]),
            search_domains: strings(&["corp.example", "example.com", "a.b.c"]),
            mtu: 1400,
            routes: vec![
                route("192.168.10.0/24", ""),
                route("172.16.0.0/12", "10.0.0.1"),
                route("fd10::/48", ""),
            ],
            lease_seconds: 600,
        };
        assert_errors(&check(&c), &[]);
        let edges = GuestConfig {
            mtu: 9000,
            lease_seconds: 86_400,
            ..GuestConfig::default()
        };
        assert_errors(&check(&edges), &[]);
    }

    #[test]
    fn dns_servers_are_canonical_host_addresses_three_per_family() {
        let c = GuestConfig {
            dns_servers: strings(&[
                "10.0.0.1",
                "010.0.0.2",
                "127.0.0.1",
                "10.0.0.1",
                "10.0.0.3",
                "10.0.0.4",
                "10.0.0.5",
                "fd00::1",
                "FD00::2",
                "dns.example",
            ]),
            ..GuestConfig::default()
        };
        assert_errors(
            &check(&c),
            &[
                ("spec.dhcp.dnsServers[1]", ErrorType::Invalid),
                ("spec.dhcp.dnsServers[2]", ErrorType::Invalid),
                ("spec.dhcp.dnsServers[3]", ErrorType::Duplicate),
                // 10.0.0.1, .3, .4 are three: .5 is one too many.
                ("spec.dhcp.dnsServers[6]", ErrorType::Invalid),
                ("spec.dhcp.dnsServers[8]", ErrorType::Invalid),
                ("spec.dhcp.dnsServers[9]", ErrorType::Invalid),
            ],
        );
        let errs = check(&c);
        let six = errs
            .iter()
            .find(|e| e.path.as_str() == "spec.dhcp.dnsServers[6]")
            .unwrap();
        assert!(six.detail.contains("at most 3 IPv4"), "{}", six.detail);
    }

    #[test]
    fn search_domains_are_dns_names_six_and_256_characters_at_most() {
        let c = GuestConfig {
            search_domains: strings(&["ok.example", "Upper.example", "trailing.", "", "ok.example"]),
            ..GuestConfig::default()
        };
        assert_errors(
            &check(&c),
            &[
                ("spec.dhcp.searchDomains[1]", ErrorType::Invalid),
                ("spec.dhcp.searchDomains[2]", ErrorType::Invalid),
                ("spec.dhcp.searchDomains[3]", ErrorType::Required),
                ("spec.dhcp.searchDomains[4]", ErrorType::Duplicate),
            ],
        );
        let label = format!("{}.example", "a".repeat(64));
        let c = GuestConfig {
            search_domains: vec![label],
            ..GuestConfig::default()
        };
        assert_errors(&check(&c), &[("spec.dhcp.searchDomains[0]", ErrorType::Invalid)]);
        let seven: Vec<String> = (0..7).map(|i| format!("d{i}.example")).collect();
        let c = GuestConfig {
            search_domains: seven,
            ..GuestConfig::default()
        };
        assert_errors(&check(&c), &[("spec.dhcp.searchDomains", ErrorType::TooMany)]);
        // Three names of 85 characters and their two spaces: 257.
        let long: Vec<String> = (0..3)
            .map(|i| format!("{}.{i}{}", "a".repeat(60), "b".repeat(23)))
            .collect();
        assert_eq!(long.iter().map(String::len).sum::<usize>() + 2, 257);
        let c = GuestConfig {
            search_domains: long,
            ..GuestConfig::default()
        };
        assert_errors(&check(&c), &[("spec.dhcp.searchDomains", ErrorType::TooLong)]);
    }

    #[test]
    fn mtu_and_lease_are_in_range_or_zero() {
        for (mtu, lease) in [(1279, 59), (9001, 86_401), (-1, -1)] {
            let c = GuestConfig {
                mtu,
                lease_seconds: lease,
                ..GuestConfig::default()
            };
            assert_errors(
                &check(&c),
                &[
                    ("spec.dhcp.mtu", ErrorType::Invalid),
                    ("spec.dhcp.leaseSeconds", ErrorType::Invalid),
                ],
            );
        }
    }

    #[test]
    fn routes_name_a_range_and_an_ipv4_gateway_of_its_family() {
        let c = GuestConfig {
            routes: vec![
                route("192.168.10.1/24", ""),
                route("0.0.0.0/0", ""),
                route("169.254.0.0/16", ""),
                route("10.8.0.0/16", ""),
                route("10.8.0.0/16", ""),
                route("10.9.0.0/16", "fd00::1"),
                route("fd10::/48", "fe80::1"),
                route("10.10.0.0/16", "127.0.0.1"),
                route("", ""),
                route("::/0", ""),
            ],
            ..GuestConfig::default()
        };
        assert_errors(
            &check(&c),
            &[
                ("spec.dhcp.routes[0].destination", ErrorType::Invalid),
                ("spec.dhcp.routes[1].destination", ErrorType::Invalid),
                ("spec.dhcp.routes[2].destination", ErrorType::Invalid),
                ("spec.dhcp.routes[4].destination", ErrorType::Duplicate),
                ("spec.dhcp.routes[5].gateway", ErrorType::Invalid),
                ("spec.dhcp.routes[6].gateway", ErrorType::Forbidden),
                ("spec.dhcp.routes[7].gateway", ErrorType::Invalid),
                ("spec.dhcp.routes[8].destination", ErrorType::Required),
                ("spec.dhcp.routes[9].destination", ErrorType::Invalid),
            ],
        );
        let many = GuestConfig {
            routes: (0..17).map(|i| route(&format!("10.{i}.0.0/16"), "")).collect(),
            ..GuestConfig::default()
        };
        assert_errors(&check(&many), &[("spec.dhcp.routes", ErrorType::TooMany)]);
    }

    proptest! {
        #[test]
        fn random_values_never_panic(
            dns in proptest::collection::vec("\\PC{0,40}", 0..8),
            search in proptest::collection::vec("[a-zA-Z0-9.-]{0,70}", 0..8),
            dst in "[0-9a-f:./]{0,45}",
            gw in "[0-9a-f:.]{0,40}",
            mtu in any::<i32>(),
            lease in any::<i32>(),
        ) {
            let c = GuestConfig {
                dns_servers: dns,
                search_domains: search,
                mtu,
                routes: vec![route(&dst, &gw)],
                lease_seconds: lease,
            };
            let _ = check(&c);
        }
    }
}
