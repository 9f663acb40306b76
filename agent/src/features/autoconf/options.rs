//! What a guest gets beyond its address: `spec.dhcp` of its Port and of the Port's VPC
//! ([`GuestConfig`]), merged field by field over the agent's flags.
//!
//! Precedence, each field on its own: the Port's, then the VPC's, then the flags (and the link:
//! its MTU, the gateway routes). `dnsServers` is taken per family, so a VPC that lists only
//! IPv4 resolvers keeps the flags' IPv6 ones for its dual-stack guests. A dual-stack
//! attachment has two Ports (one per family): the primary's fields win over the other's.
//!
//! The server validated every value; what does not parse here (an object written before a
//! rule existed) is left out rather than handed to a guest.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Mutex;

use cozyplane_apis::v1alpha1::GuestConfig;
use ipnet::{IpNet, Ipv4Net, Ipv6Net};

use crate::core::datapath::netdev::GATEWAY;
use crate::core::ipam::Allocation;

/// The options of one level (a Port's or a VPC's `spec.dhcp`): `None` where it sets nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Level {
    /// IPv4 resolvers.
    pub dns4: Option<Vec<Ipv4Addr>>,
    /// IPv6 resolvers.
    pub dns6: Option<Vec<Ipv6Addr>>,
    /// Search domains.
    pub search: Option<Vec<String>>,
    /// The MTU asked for (before the link's clamps it).
    pub mtu: Option<u32>,
    /// Extra routes.
    pub routes: Option<Routes>,
    /// Lease, seconds.
    pub lease_secs: Option<u32>,
}

/// Extra routes of a guest, per family.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Routes {
    /// IPv4 destinations and their next hop (the link gateway when none is given).
    pub v4: Vec<(Ipv4Net, Ipv4Addr)>,
    /// IPv6 destinations, through the link gateway (router advertisements say no other).
    pub v6: Vec<Ipv6Net>,
}

impl Level {
    /// The level `c` describes.
    pub fn of(c: &GuestConfig) -> Self {
        let ips: Vec<IpAddr> = c.dns_servers.iter().filter_map(|s| s.parse().ok()).collect();
        let dns4: Vec<Ipv4Addr> = ips
            .iter()
            .filter_map(|i| match i {
                IpAddr::V4(v) => Some(*v),
                IpAddr::V6(_) => None,
            })
            .collect();
        let dns6: Vec<Ipv6Addr> = ips
            .iter()
            .filter_map(|i| match i {
                IpAddr::V6(v) => Some(*v),
                IpAddr::V4(_) => None,
            })
            .collect();
        let mut routes = Routes::default();
        for r in &c.routes {
            match r.destination.parse::<IpNet>() {
                Ok(IpNet::V4(n)) if r.gateway.is_empty() => routes.v4.push((n, GATEWAY)),
                Ok(IpNet::V4(n)) => {
                    if let Ok(gw) = r.gateway.parse::<Ipv4Addr>() {
                        routes.v4.push((n, gw));
                    }
                }
                Ok(IpNet::V6(n)) => routes.v6.push(n),
                Err(_) => {}
            }
        }
        let positive = |n: i32| u32::try_from(n).ok().filter(|n| *n > 0);
        Self {
            dns4: (!dns4.is_empty()).then_some(dns4),
            dns6: (!dns6.is_empty()).then_some(dns6),
            search: (!c.search_domains.is_empty()).then(|| c.search_domains.clone()),
            mtu: positive(c.mtu),
            routes: (!routes.v4.is_empty() || !routes.v6.is_empty()).then_some(routes),
            lease_secs: positive(c.lease_seconds),
        }
    }

    /// `self` over `below`: each field of `self` that is set, else `below`'s.
    pub fn over(self, below: &Level) -> Level {
        Level {
            dns4: self.dns4.or_else(|| below.dns4.clone()),
            dns6: self.dns6.or_else(|| below.dns6.clone()),
            search: self.search.or_else(|| below.search.clone()),
            mtu: self.mtu.or(below.mtu),
            routes: self.routes.or_else(|| below.routes.clone()),
            lease_secs: self.lease_secs.or(below.lease_secs),
        }
    }
}

/// The levels the watch knows: this node's Ports and every VPC, each only when it sets
/// `spec.dhcp`.
#[derive(Clone, Debug, Default)]
pub struct Table {
    /// Port name → its level.
    pub ports: HashMap<String, Level>,
    /// VPC (namespace, name) → its level.
    pub vpcs: HashMap<(String, String), Level>,
}

impl Table {
    /// The merged level of attachment `a` (nothing for a net-0 pod: it has no Port).
    pub fn level_of(&self, a: &Allocation) -> Level {
        let Some(v) = &a.vpc else {
            return Level::default();
        };
        let port = |name: &str| self.ports.get(name).cloned().unwrap_or_default();
        let other = v.other.as_ref().map(|o| port(&o.port)).unwrap_or_default();
        let vpc = v
            .vpc
            .split_once('/')
            .and_then(|(ns, name)| self.vpcs.get(&(ns.to_string(), name.to_string())))
            .cloned()
            .unwrap_or_default();
        port(&v.port).over(&other).over(&vpc)
    }
}

/// The MTU a guest gets: the one asked for, never above the link's.
pub fn mtu(asked: Option<u32>, link: u32) -> u32 {
    asked.map_or(link, |m| m.min(link))
}

/// Says once per (Port, asked, link) that an MTU was lowered to the link's: each renewal
/// would repeat it otherwise.
#[derive(Debug, Default)]
pub struct Clamps(Mutex<HashSet<(String, u32, u32)>>);

impl Clamps {
    /// Logs when `asked` is above `link` for the first time for `port`.
    pub fn note(&self, port: &str, asked: Option<u32>, link: u32) {
        let Some(asked) = asked.filter(|m| *m > link) else {
            return;
        };
        let mut seen = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if seen.insert((port.to_string(), asked, link)) {
            tracing::warn!(
                port,
                asked,
                link,
                "autoconf: spec.dhcp.mtu is above the link's MTU; the guest gets the link's"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use cozyplane_apis::v1alpha1::GuestRoute;

    use super::*;
    use crate::core::ipam::{VpcAddress, VpcAttachment};

    fn config(dns: &[&str], search: &[&str], mtu: i32, lease: i32) -> GuestConfig {
        GuestConfig {
            dns_servers: dns.iter().map(|s| (*s).to_string()).collect(),
            search_domains: search.iter().map(|s| (*s).to_string()).collect(),
            mtu,
            routes: vec![],
            lease_seconds: lease,
        }
    }

    fn attachment(port: &str, other: Option<&str>) -> Allocation {
        serde_json::from_value(serde_json::json!({
            "ip": "10.244.0.5", "containerId": "c", "ifname": "eth0",
        }))
        .map(|mut a: Allocation| {
            a.vpc = Some(VpcAttachment {
                vni: 100,
                ip: "10.0.0.5".parse().unwrap(),
                port: port.into(),
                vpc: "t1/blue".into(),
                other: other.map(|p| VpcAddress {
                    ip: "fd00::5".parse().unwrap(),
                    port: p.into(),
                }),
                persistent: false,
                migration_peer: None,
                routes: Vec::new(),
            });
            a
        })
        .unwrap()
    }

    #[test]
    fn a_level_reads_each_family_and_routes_apart() {
        let mut c = config(
            &["10.0.0.53", "fd00::53", "10.0.0.54"],
            &["corp.example"],
            1400,
            600,
        );
        c.routes = vec![
            GuestRoute {
                destination: "192.168.10.0/24".into(),
                gateway: String::new(),
            },
            GuestRoute {
                destination: "172.16.0.0/12".into(),
                gateway: "10.0.0.1".into(),
            },
            GuestRoute {
                destination: "fd10::/48".into(),
                gateway: String::new(),
            },
        ];
        let l = Level::of(&c);
        assert_eq!(
            l.dns4,
            Some(vec![Ipv4Addr::new(10, 0, 0, 53), Ipv4Addr::new(10, 0, 0, 54)])
        );
        assert_eq!(l.dns6, Some(vec!["fd00::53".parse().unwrap()]));
        assert_eq!(l.search, Some(vec!["corp.example".to_string()]));
        assert_eq!((l.mtu, l.lease_secs), (Some(1400), Some(600)));
        let r = l.routes.unwrap();
        assert_eq!(
            r.v4,
            vec![
                ("192.168.10.0/24".parse().unwrap(), GATEWAY),
                ("172.16.0.0/12".parse().unwrap(), Ipv4Addr::new(10, 0, 0, 1)),
            ]
        );
        assert_eq!(r.v6, vec!["fd10::/48".parse::<Ipv6Net>().unwrap()]);
        assert_eq!(Level::of(&GuestConfig::default()), Level::default());
    }

    #[test]
    fn the_port_wins_per_field_over_the_vpc() {
        let vpc = Level::of(&config(&["10.0.0.53", "fd00::53"], &["vpc.example"], 1400, 600));
        let port = Level::of(&config(&["10.9.9.9"], &[], 0, 120));
        let m = port.over(&vpc);
        assert_eq!(m.dns4, Some(vec![Ipv4Addr::new(10, 9, 9, 9)]));
        assert_eq!(
            m.dns6,
            Some(vec!["fd00::53".parse().unwrap()]),
            "the Port sets no IPv6 resolver: the VPC's stays"
        );
        assert_eq!(m.search, Some(vec!["vpc.example".to_string()]));
        assert_eq!((m.mtu, m.lease_secs), (Some(1400), Some(120)));
    }

    #[test]
    fn an_attachment_merges_its_ports_then_its_vpc() {
        let mut t = Table::default();
        t.vpcs.insert(
            ("t1".into(), "blue".into()),
            Level::of(&config(&["10.0.0.53"], &["vpc.example"], 1400, 0)),
        );
        t.ports.insert(
            "v100.10-0-0-5".into(),
            Level::of(&config(&[], &["port.example"], 0, 0)),
        );
        t.ports.insert(
            "v100.fd00--5".into(),
            Level::of(&config(&[], &["other.example"], 1300, 0)),
        );
        let l = t.level_of(&attachment("v100.10-0-0-5", Some("v100.fd00--5")));
        assert_eq!(
            l.search,
            Some(vec!["port.example".to_string()]),
            "the primary Port's"
        );
        assert_eq!(l.mtu, Some(1300), "the other Port's, over the VPC's");
        assert_eq!(l.dns4, Some(vec![Ipv4Addr::new(10, 0, 0, 53)]), "the VPC's");
        // A Port without options: the VPC's alone; another VPC: nothing.
        let l = t.level_of(&attachment("v100.10-0-0-9", None));
        assert_eq!(
            (l.mtu, l.search.as_deref()),
            (Some(1400), Some(&["vpc.example".to_string()][..]))
        );
        let mut elsewhere = attachment("v100.10-0-0-9", None);
        elsewhere.vpc.as_mut().unwrap().vpc = "t2/green".into();
        assert_eq!(t.level_of(&elsewhere), Level::default());
    }

    #[test]
    fn the_mtu_never_exceeds_the_links() {
        assert_eq!(mtu(None, 1450), 1450);
        assert_eq!(mtu(Some(1400), 1450), 1400);
        assert_eq!(mtu(Some(9000), 1450), 1450);
        let c = Clamps::default();
        c.note("p", Some(9000), 1450);
        c.note("p", Some(9000), 1450);
        c.note("p", Some(1400), 1450);
        assert_eq!(c.0.lock().unwrap().len(), 1, "logged once, and only when lowered");
    }
}
