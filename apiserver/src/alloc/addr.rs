//! Address arithmetic over a VPC CIDR: which addresses are allocatable, as integers.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use cozyplane_apis::net::{IpFamily, IpNet};

/// An address as a number (IPv4 in the low 32 bits).
pub fn to_int(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

/// The address of `family` with number `n`.
pub fn from_int(family: IpFamily, n: u128) -> IpAddr {
    match family {
        IpFamily::V4 => IpAddr::V4(Ipv4Addr::from(u32::try_from(n).unwrap_or(u32::MAX))),
        IpFamily::V6 => IpAddr::V6(Ipv6Addr::from(n)),
    }
}

/// The allocatable range of `net`: network+2 (the network address and the gateway `.1` are
/// reserved) up to the last address (IPv4 also skips the broadcast). `None` if empty.
pub fn host_range(net: &IpNet) -> Option<(u128, u128)> {
    let first = to_int(net.network());
    let last = to_int(net.broadcast());
    let hi = match net {
        IpNet::V4(_) => last.checked_sub(1)?,
        IpNet::V6(_) => last,
    };
    let lo = first.checked_add(2)?;
    (lo <= hi).then_some((lo, hi))
}

/// The gateway address (`.1`) of `net`.
pub fn gateway(net: &IpNet) -> IpAddr {
    from_int(IpFamily::of_net(net), to_int(net.network()) + 1)
}

/// How many addresses `host_range` holds (saturating).
pub fn range_size((lo, hi): (u128, u128)) -> u128 {
    (hi - lo).saturating_add(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    #[test]
    fn ranges_skip_network_gateway_and_broadcast() {
        let (lo, hi) = host_range(&net("10.0.0.0/24")).unwrap();
        assert_eq!(from_int(IpFamily::V4, lo).to_string(), "10.0.0.2");
        assert_eq!(from_int(IpFamily::V4, hi).to_string(), "10.0.0.254");
        assert_eq!(range_size((lo, hi)), 253);
        let (lo, hi) = host_range(&net("fd00::/120")).unwrap();
        assert_eq!(from_int(IpFamily::V6, lo).to_string(), "fd00::2");
        assert_eq!(from_int(IpFamily::V6, hi).to_string(), "fd00::ff");
        assert!(host_range(&net("10.0.0.0/31")).is_none());
        assert_eq!(host_range(&net("10.0.0.0/30")).map(range_size), Some(1));
        assert_eq!(gateway(&net("10.0.0.0/24")).to_string(), "10.0.0.1");
    }
}
