//! Conversions between `std::net` addresses and the datapath's 128-bit [`Addr`].

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::abi::Addr;

/// `64:ff9b::/96`, the RFC 6052 well-known prefix IPv4 addresses are stored under.
pub const NAT64_PREFIX: [u8; 12] = [0x00, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0];

impl Addr {
    /// The IPv4 address `ip` in its `64:ff9b::a.b.c.d` form.
    pub fn from_v4(ip: Ipv4Addr) -> Self {
        let mut b = [0; 16];
        b[..12].copy_from_slice(&NAT64_PREFIX);
        b[12..].copy_from_slice(&ip.octets());
        Self { b }
    }

    /// The IPv4 address this holds, if it is in the `64:ff9b::/96` form.
    pub fn to_v4(self) -> Option<Ipv4Addr> {
        (self.b[..12] == NAT64_PREFIX).then(|| Ipv4Addr::new(self.b[12], self.b[13], self.b[14], self.b[15]))
    }
}

impl From<IpAddr> for Addr {
    fn from(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(v4) => Self::from_v4(v4),
            IpAddr::V6(v6) => Self { b: v6.octets() },
        }
    }
}

impl From<Ipv4Addr> for Addr {
    fn from(ip: Ipv4Addr) -> Self {
        Self::from_v4(ip)
    }
}

impl From<Ipv6Addr> for Addr {
    fn from(ip: Ipv6Addr) -> Self {
        Self { b: ip.octets() }
    }
}

impl From<Addr> for IpAddr {
    /// `64:ff9b::/96` reads back as IPv4: the datapath never stores a real IPv6 address
    /// from that prefix (NAT64 is not a cozyplane feature).
    fn from(a: Addr) -> Self {
        match a.to_v4() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(a.b)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_uses_the_well_known_nat64_prefix() {
        let a = Addr::from(IpAddr::from([10, 1, 2, 3]));
        assert_eq!(
            Ipv6Addr::from(a.b),
            "64:ff9b::a01:203".parse::<Ipv6Addr>().unwrap()
        );
        assert_eq!(IpAddr::from(a), IpAddr::from([10, 1, 2, 3]));
    }

    #[test]
    fn ipv6_round_trips_unchanged() {
        let ip: IpAddr = "fd00::5".parse().unwrap();
        assert_eq!(IpAddr::from(Addr::from(ip)), ip);
    }

    #[test]
    fn v4_mapped_is_not_treated_as_ipv4() {
        let ip: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert_eq!(Addr::from(ip).to_v4(), None);
    }
}
