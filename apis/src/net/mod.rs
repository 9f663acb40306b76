//! Address and name formats shared by the API server, the agent and the CNI plugin.
//!
//! - [`claim`] – object names that claim an address in a VPC (`v<vni>.<ip>` for a [`Port`],
//!   `sv<vni>.<ip>` for a [`ServiceVIP`]);
//! - [`nat64`] – the 128-bit form every datapath map stores addresses in;
//! - [`cidr`] – strict parsing of address ranges, families, overlap;
//! - [`mac`] – the [`MacAddr`] type.
//!
//! Text forms of addresses are canonical when they equal what [`canonical_ip`] prints. Parsing
//! here is stricter than `ipnet`'s (no leading zeros, no zones), matching what the Go server
//! accepted, because names and specs are compared as strings.
//!
//! [`Port`]: crate::v1alpha1::Port
//! [`ServiceVIP`]: crate::v1alpha1::ServiceVIP

use std::net::IpAddr;

pub use ipnet::{IpNet, Ipv4Net, Ipv6Net};

pub mod cidr;
pub mod claim;
pub mod mac;
pub mod nat64;

pub use cidr::{IpFamily, cidr_lists_overlap, cidrs_overlap, parse_canonical_cidr, parse_cidr};
pub use claim::{Claim, ClaimKind, port_name, service_vip_name};
pub use mac::MacAddr;
pub use nat64::{from_map_addr, from_nat64, to_map_addr, to_nat64};

/// Why an address, range, MAC or claim name was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The text is not an IP address (IPv4 dotted quad without leading zeros, or IPv6 without
    /// a zone).
    #[error("{text:?} is not an IP address")]
    InvalidIp {
        /// The rejected text.
        text: String,
    },
    /// The text is an IP address, but not written the canonical way (e.g. `FD00::1`,
    /// `fd00:0::1`, or an IPv4-mapped `::ffff:10.0.0.1`). Use `canonical` instead.
    #[error("{text:?} is not in canonical form, which is {canonical}")]
    NonCanonicalIp {
        /// The rejected text.
        text: String,
        /// The same address in canonical form.
        canonical: IpAddr,
    },
    /// The text is not `<address>/<prefix length>` with a prefix length valid for the family.
    #[error("{text:?} is not a CIDR (address/prefix length)")]
    InvalidCidr {
        /// The rejected text.
        text: String,
    },
    /// The range has bits set after its prefix (`10.0.0.1/24`); returned only where the
    /// network must be written as such. `canonical` is the range meant.
    #[error("{text:?} has host bits set; the network is {canonical}")]
    HostBitsSet {
        /// The rejected text.
        text: String,
        /// The network the text denotes.
        canonical: IpNet,
    },
    /// The range is a network, but its address is not written canonically (e.g. `FD00::/8`).
    #[error("{text:?} is not in canonical form, which is {canonical}")]
    NonCanonicalCidr {
        /// The rejected text.
        text: String,
        /// The same range in canonical form.
        canonical: IpNet,
    },
    /// The text is not six hexadecimal octets separated by `:` (or all by `-`).
    #[error("{text:?} is not a MAC address")]
    InvalidMac {
        /// The rejected text.
        text: String,
    },
    /// The name is not a claim name (`v<vni>.<escaped ip>` or `sv<vni>.<escaped ip>`).
    #[error("{name:?} is not an address claim name: {reason}")]
    InvalidClaim {
        /// The rejected name.
        name: String,
        /// Which part is wrong.
        reason: &'static str,
    },
}

/// `Result` with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Parses an IP address the way the API accepts it anywhere (`spec.ip`, `spec.target`, …):
/// std syntax, so no leading zeros in IPv4 octets and no IPv6 zone.
///
/// The result is canonical: an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) becomes the IPv4
/// address, because the datapath has one form per address and IPv4 is never stored mapped.
pub fn parse_ip(text: &str) -> Result<IpAddr> {
    text.parse::<IpAddr>()
        .map(|ip| ip.to_canonical())
        .map_err(|_| Error::InvalidIp {
            text: text.to_owned(),
        })
}

/// Parses an IP address that must already be written canonically (Port and ServiceVIP
/// `spec.ip`, whose text is part of the object name).
pub fn parse_canonical_ip(text: &str) -> Result<IpAddr> {
    let ip = parse_ip(text)?;
    if canonical_ip(ip) == text {
        Ok(ip)
    } else {
        Err(Error::NonCanonicalIp {
            text: text.to_owned(),
            canonical: ip,
        })
    }
}

/// The canonical text of an address: IPv4 dotted quad, IPv6 per RFC 5952 (lower case, longest
/// zero run compressed), IPv4-mapped IPv6 printed as IPv4.
pub fn canonical_ip(ip: IpAddr) -> String {
    ip.to_canonical().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_ip_accepts_only_canonical_text() {
        for ok in ["10.0.0.2", "fd00:10::2", "::1", "::", "2001:db8::1:0:0:1"] {
            assert_eq!(canonical_ip(parse_canonical_ip(ok).unwrap()), ok);
        }
        for (bad, canonical) in [
            ("FD00::1", "fd00::1"),
            ("fd00:0::1", "fd00::1"),
            ("2001:db8:0:0:1:0:0:1", "2001:db8::1:0:0:1"),
            ("::ffff:10.0.0.1", "10.0.0.1"),
        ] {
            let err = parse_canonical_ip(bad).unwrap_err();
            assert_eq!(
                err,
                Error::NonCanonicalIp {
                    text: bad.into(),
                    canonical: canonical.parse().unwrap()
                }
            );
        }
    }

    #[test]
    fn parse_ip_rejects_leading_zeros_zones_and_junk() {
        for bad in [
            "010.0.0.1",
            "fe80::1%eth0",
            "10.0.0",
            "",
            " 10.0.0.1",
            "10.0.0.1/32",
        ] {
            assert!(matches!(parse_ip(bad), Err(Error::InvalidIp { .. })), "{bad}");
        }
    }
}
