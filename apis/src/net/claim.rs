//! Names that claim an address in a VPC.
//!
//! A [`Port`](crate::v1alpha1::Port) is named `v<vni>.<escaped ip>` and a
//! [`ServiceVIP`](crate::v1alpha1::ServiceVIP) `sv<vni>.<escaped ip>`, where the escaped IP is
//! the canonical text with every `.` and `:` replaced by `-` (`10.0.0.2` → `10-0-0-2`,
//! `fd00:10::2` → `fd00-10--2`). Because object names are unique, creating the object claims the
//! address; the server additionally refuses a claim whose *twin* (same VNI and address, other
//! kind) exists, so Ports and ServiceVIPs share one address space.
//!
//! The escape is unambiguous: an IPv4 address has exactly three separators and no empty group,
//! which no IPv6 address with four groups can have (it would need `::`). Addresses are
//! canonicalized first ([`canonical_ip`](super::canonical_ip)), so an IPv4-mapped IPv6 address
//! claims the IPv4 address.
//!
//! Some addresses give names Kubernetes rejects (a label may not start or end with `-`, as in
//! `v100.--1` for `::1`); those are never allocated (network addresses, loopback).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use super::{Error, Result};

/// Which kind of object a claim name belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ClaimKind {
    /// A [`Port`](crate::v1alpha1::Port): `v<vni>.…`.
    Port,
    /// A [`ServiceVIP`](crate::v1alpha1::ServiceVIP): `sv<vni>.…`.
    ServiceVIP,
}

impl ClaimKind {
    /// The name prefix before the VNI: `v` or `sv`.
    pub const fn prefix(self) -> &'static str {
        match self {
            Self::Port => "v",
            Self::ServiceVIP => "sv",
        }
    }

    /// The other kind, whose claim on the same address conflicts with this one's.
    pub const fn twin(self) -> Self {
        match self {
            Self::Port => Self::ServiceVIP,
            Self::ServiceVIP => Self::Port,
        }
    }
}

/// A claim on one address in one VPC, i.e. the parsed form of a Port or ServiceVIP name.
///
/// ```
/// use cozyplane_apis::net::{Claim, ClaimKind};
///
/// let claim: Claim = "v100.fd00-10--2".parse().unwrap();
/// assert_eq!(claim, Claim::port(100, "fd00:10::2".parse().unwrap()));
/// assert_eq!(claim.twin().to_string(), "sv100.fd00-10--2");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Claim {
    /// Port or ServiceVIP.
    pub kind: ClaimKind,
    /// The VPC's VNI; never 0.
    pub vni: u32,
    /// The claimed address.
    pub ip: IpAddr,
}

impl Claim {
    /// A Port's claim on `ip` in VPC `vni`.
    pub fn port(vni: u32, ip: IpAddr) -> Self {
        Self {
            kind: ClaimKind::Port,
            vni,
            ip: ip.to_canonical(),
        }
    }

    /// A ServiceVIP's claim on `ip` in VPC `vni`.
    pub fn service_vip(vni: u32, ip: IpAddr) -> Self {
        Self {
            kind: ClaimKind::ServiceVIP,
            vni,
            ip: ip.to_canonical(),
        }
    }

    /// The same address claimed by the other kind.
    pub fn twin(self) -> Self {
        Self {
            kind: self.kind.twin(),
            ..self
        }
    }

    /// The object name; same as `to_string()`.
    pub fn name(&self) -> String {
        self.to_string()
    }

    /// Parses a claim name. Accepts exactly the names [`Claim::name`] produces: prefix `v` or
    /// `sv`, a decimal VNI above 0 without leading zeros, `.`, and a canonical escaped address.
    pub fn parse(name: &str) -> Result<Self> {
        let invalid = |reason| Error::InvalidClaim {
            name: name.to_owned(),
            reason,
        };
        let (kind, rest) = if let Some(rest) = name.strip_prefix(ClaimKind::ServiceVIP.prefix()) {
            (ClaimKind::ServiceVIP, rest)
        } else if let Some(rest) = name.strip_prefix(ClaimKind::Port.prefix()) {
            (ClaimKind::Port, rest)
        } else {
            return Err(invalid("it starts with neither `v` nor `sv`"));
        };
        let (vni, escaped) = rest
            .split_once('.')
            .ok_or_else(|| invalid("there is no `.` after the VNI"))?;
        let vni = parse_vni(vni).ok_or_else(|| invalid("the VNI is not a decimal number above 0"))?;
        let ip =
            unescape_ip(escaped).ok_or_else(|| invalid("the part after `.` is not an escaped address"))?;
        if escape_ip(ip) != escaped {
            return Err(invalid("the address is not in canonical form"));
        }
        Ok(Self { kind, vni, ip })
    }
}

impl fmt::Display for Claim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}.{}", self.kind.prefix(), self.vni, escape_ip(self.ip))
    }
}

impl FromStr for Claim {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        Self::parse(s)
    }
}

/// The name of the Port claiming `ip` in VPC `vni`: `v<vni>.<escaped ip>`.
pub fn port_name(vni: u32, ip: IpAddr) -> String {
    Claim::port(vni, ip).name()
}

/// The name of the ServiceVIP claiming `ip` in VPC `vni`: `sv<vni>.<escaped ip>`.
pub fn service_vip_name(vni: u32, ip: IpAddr) -> String {
    Claim::service_vip(vni, ip).name()
}

/// The canonical text of `ip` with `.` and `:` replaced by `-`.
pub fn escape_ip(ip: IpAddr) -> String {
    super::canonical_ip(ip).replace(['.', ':'], "-")
}

/// Inverse of [`escape_ip`] for canonical input; `None` if `escaped` denotes no address.
pub fn unescape_ip(escaped: &str) -> Option<IpAddr> {
    if let Ok(v4) = escaped.replace('-', ".").parse::<Ipv4Addr>() {
        return Some(IpAddr::V4(v4));
    }
    escaped
        .replace('-', ":")
        .parse::<Ipv6Addr>()
        .ok()
        .map(|v6| IpAddr::V6(v6).to_canonical())
}

fn parse_vni(text: &str) -> Option<u32> {
    let canonical_decimal = !text.is_empty()
        && text.bytes().all(|b| b.is_ascii_digit())
        && !(text.len() > 1 && text.starts_with('0'));
    text.parse().ok().filter(|vni| canonical_decimal && *vni > 0)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn names_follow_the_documented_examples() {
        assert_eq!(port_name(100, ip("10.0.0.2")), "v100.10-0-0-2");
        assert_eq!(port_name(100, ip("fd00:10::2")), "v100.fd00-10--2");
        assert_eq!(service_vip_name(7, ip("10.0.255.254")), "sv7.10-0-255-254");
        assert_eq!(port_name(1, ip("::ffff:10.0.0.2")), "v1.10-0-0-2");
    }

    #[test]
    fn parse_accepts_both_kinds() {
        assert_eq!(
            Claim::parse("v100.10-0-0-2").unwrap(),
            Claim::port(100, ip("10.0.0.2"))
        );
        assert_eq!(
            Claim::parse("sv100.fd00-10--2").unwrap(),
            Claim::service_vip(100, ip("fd00:10::2"))
        );
        assert_eq!(
            Claim::parse("v100.10-0-0-2").unwrap().twin().name(),
            "sv100.10-0-0-2"
        );
    }

    #[test]
    fn parse_rejects_malformed_names() {
        for bad in [
            "",
            "x100.10-0-0-2",
            "100.10-0-0-2",
            "v.10-0-0-2",
            "v0.10-0-0-2",
            "v0100.10-0-0-2",
            "v+100.10-0-0-2",
            "v-1.10-0-0-2",
            "v99999999999.10-0-0-2",
            "v100",
            "v100.",
            "v100.10-0-0",
            "v100.10.0.0.2",
            "v100.10-0-0-2.x",
            "v100.010-0-0-2",
            "v100.FD00-10--2",
            "v100.fd00-10-0-0-0-0-0-2",
            "v100.fd00:10::2",
            "sv100.10-0-0-256",
        ] {
            assert!(
                matches!(Claim::parse(bad), Err(Error::InvalidClaim { .. })),
                "{bad:?} parsed"
            );
        }
    }

    fn any_ip() -> impl Strategy<Value = IpAddr> {
        prop_oneof![
            any::<u32>().prop_map(|b| IpAddr::V4(Ipv4Addr::from(b))),
            any::<u128>().prop_map(|b| IpAddr::V6(Ipv6Addr::from(b))),
            // Short IPv6 forms with `::` are where escaping could go wrong.
            (any::<u16>(), any::<u16>(), 0usize..8).prop_map(|(a, b, at)| {
                let mut segs = [0u16; 8];
                segs[at] = a;
                segs[(at + 3) % 8] = b;
                IpAddr::V6(Ipv6Addr::from(segs))
            }),
        ]
    }

    proptest! {
        #[test]
        fn names_round_trip(vni in 1u32.., ip in any_ip(), vip: bool) {
            let claim = if vip { Claim::service_vip(vni, ip) } else { Claim::port(vni, ip) };
            let parsed = Claim::parse(&claim.name());
            prop_assert_eq!(parsed, Ok(claim));
            prop_assert_eq!(claim.ip, ip.to_canonical());
        }

        #[test]
        fn parse_accepts_only_what_name_produces(name in "s?v[0-9]{1,4}\\.[0-9a-f-]{1,12}") {
            if let Ok(claim) = Claim::parse(&name) {
                prop_assert_eq!(claim.name(), name);
            }
        }

        #[test]
        fn different_addresses_never_share_a_name(a in any_ip(), b in any_ip()) {
            prop_assume!(a.to_canonical() != b.to_canonical());
            prop_assert_ne!(port_name(100, a), port_name(100, b));
        }
    }
}
