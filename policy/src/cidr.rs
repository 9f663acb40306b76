//! Address prefixes in the datapath's 128-bit form, and the CIDR classes built from them.
//!
//! IPv4 lives under `64:ff9b::/96` (as in `bpf/include/sdn/addr.h`); the family is part of
//! the class key, so `::/0` never covers IPv4.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

const NAT64: u128 = 0x0064_ff9b_u128 << 96;

/// A prefix of the 128-bit address space, with its family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Prefix {
    /// IPv6 (true) or IPv4 under `64:ff9b::/96`.
    pub v6: bool,
    /// Prefix length in the 128-bit form (an IPv4 /24 is 120).
    pub len: u8,
    /// The address bits (those below `len` are 0).
    pub bits: u128,
}

/// The 128-bit form of an address.
pub fn addr128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => NAT64 | u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

fn mask(len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(len.min(128)))
    }
}

impl Prefix {
    /// `ip/len` with `len` in the address's own family (masked).
    pub fn new(ip: IpAddr, len: u8) -> Self {
        let (v6, len) = match ip {
            IpAddr::V4(_) => (false, 96 + len.min(32)),
            IpAddr::V6(_) => (true, len.min(128)),
        };
        Self {
            v6,
            len,
            bits: addr128(ip) & mask(len),
        }
    }

    /// The host prefix of `ip`.
    pub fn host(ip: IpAddr) -> Self {
        Self::new(ip, if ip.is_ipv4() { 32 } else { 128 })
    }

    /// Does the prefix hold `ip`?
    pub fn contains(&self, ip: IpAddr) -> bool {
        ip.is_ipv6() == self.v6 && addr128(ip) & mask(self.len) == self.bits
    }

    /// Is `o` inside this prefix (or equal)?
    pub fn covers(&self, o: &Self) -> bool {
        self.v6 == o.v6 && o.len >= self.len && o.bits & mask(self.len) == self.bits
    }

    /// Do the two prefixes share an address?
    pub fn overlaps(&self, o: &Self) -> bool {
        self.covers(o) || o.covers(self)
    }

    /// The prefix as an address and its own-family length.
    pub fn net(&self) -> IpNet {
        if self.v6 {
            IpNet::new(IpAddr::V6(Ipv6Addr::from(self.bits)), self.len).expect("len <= 128")
        } else {
            let v4 = Ipv4Addr::from((self.bits & 0xffff_ffff) as u32);
            IpNet::new(IpAddr::V4(v4), self.len - 96).expect("len <= 32")
        }
    }
}

impl std::str::FromStr for Prefix {
    type Err = ipnet::AddrParseError;
    /// `a.b.c.d/n` or `x::/n`; a bare address is its host prefix.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.parse::<IpNet>() {
            Ok(n) => Ok(Self::new(n.addr(), n.prefix_len())),
            Err(e) => s.parse::<IpAddr>().map(Self::host).map_err(|_| e),
        }
    }
}

impl std::fmt::Display for Prefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.net())
    }
}

/// A peer given by addresses: `cidr` minus every `except` (`ipBlock`, an SG or HF CIDR).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Block {
    /// The range.
    pub cidr: Prefix,
    /// Holes in it.
    pub except: Vec<Prefix>,
}

impl Block {
    /// Does the block hold `ip`?
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.cidr.contains(ip) && !self.except.iter().any(|e| e.contains(ip))
    }

    /// Does the block hold every address of class prefix `c`, given that `c` is the longest
    /// prefix of a set that includes this block's own prefixes? (Then it holds all of `c`
    /// or none of it.)
    pub fn holds_class(&self, c: &Prefix) -> bool {
        self.cidr.covers(c) && !self.except.iter().any(|e| e.covers(c))
    }

    /// The prefixes the block contributes to its scope's class set.
    pub fn prefixes(&self) -> impl Iterator<Item = &Prefix> {
        std::iter::once(&self.cidr).chain(&self.except)
    }
}

/// The longest prefix of `set` holding `ip`, as the datapath's trie finds it.
pub fn longest(set: &BTreeSet<Prefix>, ip: IpAddr) -> Option<Prefix> {
    let v6 = ip.is_ipv6();
    let lo = if v6 { 0 } else { 96 };
    (lo..=128u8)
        .rev()
        .map(|len| Prefix {
            v6,
            len,
            bits: addr128(ip) & mask(len),
        })
        .find(|p| set.contains(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v6_any_does_not_cover_v4() {
        let any6: Prefix = "::/0".parse().unwrap();
        let any4: Prefix = "0.0.0.0/0".parse().unwrap();
        assert!(!any6.contains("10.0.0.1".parse().unwrap()));
        assert!(any4.contains("10.0.0.1".parse().unwrap()));
        assert!(!any4.contains("64:ff9b::a00:1".parse().unwrap()));
        assert_eq!(any4.to_string(), "0.0.0.0/0");
        assert_eq!("10.1.0.0/16".parse::<Prefix>().unwrap().len, 112);
    }

    #[test]
    fn a_class_is_wholly_in_or_out_of_a_block() {
        let b = Block {
            cidr: "10.0.0.0/8".parse().unwrap(),
            except: vec!["10.1.0.0/16".parse().unwrap()],
        };
        let set: BTreeSet<Prefix> = b.prefixes().copied().collect();
        for ip in ["10.0.0.1", "10.1.2.3", "11.0.0.1"] {
            let ip: IpAddr = ip.parse().unwrap();
            let by_class = longest(&set, ip).is_some_and(|c| b.holds_class(&c));
            assert_eq!(by_class, b.contains(ip), "{ip}");
        }
    }
}
