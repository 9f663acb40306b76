//! The RFC 6052 form in which every datapath map stores addresses.
//!
//! Map keys are 128 bits wide for both families, so one lookup serves IPv4 and IPv6. An IPv4
//! address is embedded in the well-known NAT64 prefix `64:ff9b::/96` (never as IPv4-mapped
//! `::ffff:a.b.c.d`). Inside the datapath, that prefix therefore *means* IPv4: a genuine IPv6
//! address in `64:ff9b::/96` cannot be told apart and must not be used in a VPC.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::Ipv6Net;

/// The well-known NAT64 prefix `64:ff9b::/96` (RFC 6052 §2.1).
pub const NAT64_PREFIX: Ipv6Net = Ipv6Net::new_assert(Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0), 96);

/// `a.b.c.d` → `64:ff9b::a.b.c.d`.
pub fn to_nat64(v4: Ipv4Addr) -> Ipv6Addr {
    let mut octets = NAT64_PREFIX.addr().octets();
    octets[12..].copy_from_slice(&v4.octets());
    Ipv6Addr::from(octets)
}

/// `64:ff9b::a.b.c.d` → `a.b.c.d`; `None` for addresses outside [`NAT64_PREFIX`].
pub fn from_nat64(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let octets = v6.octets();
    NAT64_PREFIX
        .contains(&v6)
        .then(|| Ipv4Addr::new(octets[12], octets[13], octets[14], octets[15]))
}

/// The map form of any address: IPv4 (also IPv4-mapped IPv6) in NAT64 form, IPv6 unchanged.
/// Use [`Ipv6Addr::octets`] for the key bytes (network order).
pub fn to_map_addr(ip: IpAddr) -> Ipv6Addr {
    match ip.to_canonical() {
        IpAddr::V4(v4) => to_nat64(v4),
        IpAddr::V6(v6) => v6,
    }
}

/// Inverse of [`to_map_addr`]: addresses in [`NAT64_PREFIX`] are IPv4.
pub fn from_map_addr(v6: Ipv6Addr) -> IpAddr {
    from_nat64(v6).map_or(IpAddr::V6(v6), IpAddr::V4)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn embeds_ipv4_in_the_well_known_prefix() {
        let v6 = to_nat64(Ipv4Addr::new(192, 0, 2, 33));
        // RFC 6052 §2.4 example for the well-known prefix.
        assert_eq!(v6, "64:ff9b::192.0.2.33".parse::<Ipv6Addr>().unwrap());
        assert_eq!(v6.to_string(), "64:ff9b::c000:221");
        assert_eq!(from_nat64(v6), Some(Ipv4Addr::new(192, 0, 2, 33)));
    }

    #[test]
    fn ipv4_mapped_input_is_stored_as_nat64_not_mapped() {
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert_eq!(to_map_addr(mapped), to_nat64(Ipv4Addr::new(10, 0, 0, 1)));
    }

    #[test]
    fn addresses_outside_the_prefix_are_not_ipv4() {
        for v6 in ["64:ff9b:1::1", "::ffff:10.0.0.1", "fd00::1", "::"] {
            assert_eq!(from_nat64(v6.parse().unwrap()), None, "{v6}");
        }
    }

    proptest! {
        #[test]
        fn nat64_round_trips(bits: u32) {
            let v4 = Ipv4Addr::from(bits);
            prop_assert_eq!(from_nat64(to_nat64(v4)), Some(v4));
            prop_assert!(NAT64_PREFIX.contains(&to_nat64(v4)));
        }

        #[test]
        fn map_form_round_trips_for_every_address_outside_the_prefix(bits: u128, v4: bool) {
            let ip = if v4 { IpAddr::V4(Ipv4Addr::from(bits as u32)) } else { IpAddr::V6(Ipv6Addr::from(bits)) };
            prop_assume!(!matches!(ip, IpAddr::V6(v6) if NAT64_PREFIX.contains(&v6)));
            prop_assert_eq!(from_map_addr(to_map_addr(ip)), ip.to_canonical());
        }
    }
}
