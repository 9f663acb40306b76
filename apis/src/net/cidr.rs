//! Address ranges: strict parsing, canonical form, family and overlap.
//!
//! Two parsers, for the two places ranges appear: [`parse_cidr`] accepts host bits
//! (`10.0.0.1/24`, like Go's `net.ParseCIDR`; used for policy peers, where the validator only
//! requires that the text parses), [`parse_canonical_cidr`] requires the network written as
//! such and says what to write instead.

use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;

use super::{Error, Result};

/// An address family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IpFamily {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

impl IpFamily {
    /// The family of an address; IPv4-mapped IPv6 counts as IPv4.
    pub fn of(ip: IpAddr) -> Self {
        match ip.to_canonical() {
            IpAddr::V4(_) => Self::V4,
            IpAddr::V6(_) => Self::V6,
        }
    }

    /// The family of a range.
    pub fn of_net(net: &IpNet) -> Self {
        match net {
            IpNet::V4(_) => Self::V4,
            IpNet::V6(_) => Self::V6,
        }
    }

    /// The Kubernetes spelling (`Service.spec.ipFamilies`): `IPv4` or `IPv6`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::V4 => "IPv4",
            Self::V6 => "IPv6",
        }
    }
}

impl fmt::Display for IpFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Parses `<address>/<prefix length>`; bits after the prefix are allowed and kept (call
/// [`IpNet::trunc`] for the network).
///
/// Stricter than `ipnet`'s parser: the address follows [`parse_ip`](super::parse_ip) syntax
/// (no leading zeros in IPv4 octets, no zone), and the prefix length is plain decimal without
/// leading zeros.
pub fn parse_cidr(text: &str) -> Result<IpNet> {
    let invalid = || Error::InvalidCidr {
        text: text.to_owned(),
    };
    let (addr, len) = text.split_once('/').ok_or_else(invalid)?;
    let addr: IpAddr = addr.parse().map_err(|_| invalid())?;
    let plain_decimal = !len.is_empty()
        && len.bytes().all(|b| b.is_ascii_digit())
        && !(len.len() > 1 && len.starts_with('0'));
    if !plain_decimal {
        return Err(invalid());
    }
    let len: u8 = len.parse().map_err(|_| invalid())?;
    IpNet::new(addr, len).map_err(|_| invalid())
}

/// Parses a range that must be written as its network in canonical form (`10.0.0.0/24`,
/// `fd00:10::/64`), reporting the canonical text when it is not.
pub fn parse_canonical_cidr(text: &str) -> Result<IpNet> {
    let net = parse_cidr(text)?;
    let canonical = net.trunc();
    if net != canonical {
        Err(Error::HostBitsSet {
            text: text.to_owned(),
            canonical,
        })
    } else if canonical.to_string() != text {
        Err(Error::NonCanonicalCidr {
            text: text.to_owned(),
            canonical,
        })
    } else {
        Ok(canonical)
    }
}

/// `true` if some address is in both ranges. Ranges of different families never overlap.
pub fn cidrs_overlap(a: &IpNet, b: &IpNet) -> bool {
    // Aligned prefixes either nest or are disjoint, so checking each network address suffices.
    match (a, b) {
        (IpNet::V4(a), IpNet::V4(b)) => a.contains(&b.network()) || b.contains(&a.network()),
        (IpNet::V6(a), IpNet::V6(b)) => a.contains(&b.network()) || b.contains(&a.network()),
        _ => false,
    }
}

/// `true` if any range of `a` overlaps any range of `b` (e.g. the CIDRs of two VPCs about to
/// be peered). Entries that do not parse ([`parse_cidr`]) are ignored: VPC CIDRs are not
/// validated on write, and an unusable entry holds no addresses.
pub fn cidr_lists_overlap<A, B>(a: &[A], b: &[B]) -> bool
where
    A: AsRef<str>,
    B: AsRef<str>,
{
    let parse = |s: &str| parse_cidr(s).ok();
    let b: Vec<IpNet> = b.iter().filter_map(|s| parse(s.as_ref())).collect();
    a.iter()
        .filter_map(|s| parse(s.as_ref()))
        .any(|a| b.iter().any(|b| cidrs_overlap(&a, b)))
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use proptest::prelude::*;

    use super::*;

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    #[test]
    fn parse_keeps_host_bits_and_rejects_junk() {
        assert_eq!(parse_cidr("10.0.0.1/24").unwrap(), net("10.0.0.1/24"));
        assert_eq!(parse_cidr("fd00::1/64").unwrap().trunc(), net("fd00::/64"));
        for bad in [
            "10.0.0.0",
            "10.0.0.0/",
            "10.0.0.0/33",
            "fd00::/129",
            "010.0.0.0/8",
            "10.0.0.0/08",
            "10.0.0.0/+8",
            "10.0.0.0/8 ",
            "fe80::%eth0/64",
            "/8",
            "10.0.0.0/8/8",
        ] {
            assert!(matches!(parse_cidr(bad), Err(Error::InvalidCidr { .. })), "{bad}");
        }
    }

    #[test]
    fn canonical_parse_reports_the_network_to_write() {
        assert_eq!(parse_canonical_cidr("10.0.0.0/24").unwrap(), net("10.0.0.0/24"));
        assert_eq!(parse_canonical_cidr("fd00:10::/64").unwrap(), net("fd00:10::/64"));
        assert_eq!(
            parse_canonical_cidr("10.0.0.1/24"),
            Err(Error::HostBitsSet {
                text: "10.0.0.1/24".into(),
                canonical: net("10.0.0.0/24")
            })
        );
        assert_eq!(
            parse_canonical_cidr("FD00:10:0::/64"),
            Err(Error::NonCanonicalCidr {
                text: "FD00:10:0::/64".into(),
                canonical: net("fd00:10::/64")
            })
        );
    }

    #[test]
    fn overlap_examples() {
        assert!(cidrs_overlap(&net("10.0.0.0/8"), &net("10.1.0.0/16")));
        assert!(cidrs_overlap(&net("10.1.0.0/16"), &net("10.0.0.0/8")));
        assert!(!cidrs_overlap(&net("10.0.0.0/24"), &net("10.0.1.0/24")));
        assert!(cidrs_overlap(&net("fd00::/48"), &net("fd00:0:0:1::/64")));
        assert!(!cidrs_overlap(&net("0.0.0.0/0"), &net("::/0")));
        assert!(cidr_lists_overlap(
            &["junk", "10.0.0.0/24"],
            &["fd00::/64", "10.0.0.128/25"]
        ));
        assert!(!cidr_lists_overlap(
            &["10.0.0.0/24"],
            &["10.0.1.0/24", "fd00::/8"]
        ));
        assert!(!cidr_lists_overlap::<&str, &str>(&[], &["10.0.0.0/8"]));
    }

    #[test]
    fn family_of_mapped_address_is_v4() {
        assert_eq!(IpFamily::of("::ffff:10.0.0.1".parse().unwrap()), IpFamily::V4);
        assert_eq!(IpFamily::of_net(&net("fd00::/8")), IpFamily::V6);
        assert_eq!(IpFamily::V6.to_string(), "IPv6");
    }

    /// A range inside 10.0.0.0/22, small enough to compare against every address.
    fn small_net() -> impl Strategy<Value = IpNet> {
        (0u32..1024, 22u8..=32)
            .prop_map(|(off, len)| IpNet::new(IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + off)), len).unwrap())
    }

    proptest! {
        #[test]
        fn overlap_agrees_with_brute_force(a in small_net(), b in small_net()) {
            let brute = (0u32..1024)
                .map(|off| IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + off)))
                .any(|ip| a.contains(&ip) && b.contains(&ip));
            prop_assert_eq!(cidrs_overlap(&a, &b), brute);
            prop_assert_eq!(cidrs_overlap(&a, &b), cidrs_overlap(&b, &a));
        }

        #[test]
        fn canonical_text_parses_to_itself(bits: u128, len in 0u8..=128, v4: bool) {
            let net = if v4 {
                IpNet::new(IpAddr::V4(Ipv4Addr::from(bits as u32)), len % 33).unwrap()
            } else {
                IpNet::new(IpAddr::V6(bits.into()), len).unwrap()
            };
            let text = net.to_string();
            prop_assert_eq!(parse_cidr(&text), Ok(net));
            let canonical = net.trunc();
            prop_assert_eq!(parse_canonical_cidr(&canonical.to_string()), Ok(canonical));
        }
    }
}
