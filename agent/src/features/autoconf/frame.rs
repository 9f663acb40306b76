//! The few Ethernet, IPv4, IPv6 and UDP fields a guest's request and the gateway's answer
//! carry, read and written by hand: every length is checked against the frame before a field
//! is read, so a malformed frame is an `Err`, never a panic. Checksums are written, not
//! checked (a frame from a pod's veth may carry a partial one, completed by offload).

use std::net::{Ipv4Addr, Ipv6Addr};

/// Ethernet type of IPv4.
pub const ETH_P_IP: u16 = 0x0800;
/// Ethernet type of IPv6.
pub const ETH_P_IPV6: u16 = 0x86dd;
/// IP protocol numbers.
pub const UDP: u8 = 17;
/// ICMPv6.
pub const ICMPV6: u8 = 58;
const ETH_HLEN: usize = 14;

/// Why a frame was not read (the `malformed` drop reason).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("malformed frame: {0}")]
pub struct Malformed(pub &'static str);

/// A parsed IPv4 UDP datagram.
#[derive(Debug, PartialEq, Eq)]
pub struct Udp4<'a> {
    /// The sender's MAC.
    pub src_mac: [u8; 6],
    /// Addresses and ports.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// The UDP payload.
    pub payload: &'a [u8],
}

/// A parsed IPv6 packet without extension headers.
#[derive(Debug, PartialEq, Eq)]
pub struct Ip6<'a> {
    /// The sender's MAC.
    pub src_mac: [u8; 6],
    /// Source address.
    pub src: Ipv6Addr,
    /// Destination address.
    pub dst: Ipv6Addr,
    /// The next header (no extension header is walked).
    pub proto: u8,
    /// Hop limit.
    pub hops: u8,
    /// The payload (the L4 header and what follows it).
    pub payload: &'a [u8],
}

fn be16(b: &[u8], at: usize) -> Result<u16, Malformed> {
    b.get(at..at + 2)
        .map(|s| u16::from_be_bytes([s[0], s[1]]))
        .ok_or(Malformed("truncated"))
}

fn mac_at(b: &[u8], at: usize) -> [u8; 6] {
    let mut m = [0; 6];
    m.copy_from_slice(&b[at..at + 6]);
    m
}

/// The UDP datagram of an Ethernet/IPv4 frame (a whole one: fragments are refused).
pub fn udp4(f: &[u8]) -> Result<Udp4<'_>, Malformed> {
    if f.len() < ETH_HLEN + 20 || be16(f, 12)? != ETH_P_IP {
        return Err(Malformed("not ipv4"));
    }
    let ip = &f[ETH_HLEN..];
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    if ip[0] >> 4 != 4 || ihl < 20 {
        return Err(Malformed("ip header"));
    }
    let total = usize::from(be16(ip, 2)?);
    if total < ihl + 8 || total > ip.len() {
        return Err(Malformed("ip length"));
    }
    if be16(ip, 6)? & 0x3fff != 0 {
        return Err(Malformed("fragment"));
    }
    if ip[9] != UDP {
        return Err(Malformed("not udp"));
    }
    let udp = &ip[ihl..total];
    let len = usize::from(be16(udp, 4)?);
    if len < 8 || len > udp.len() {
        return Err(Malformed("udp length"));
    }
    Ok(Udp4 {
        src_mac: mac_at(f, 6),
        src: Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]),
        dst: Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]),
        sport: be16(udp, 0)?,
        dport: be16(udp, 2)?,
        payload: &udp[8..len],
    })
}

/// The IPv6 packet of an Ethernet frame.
pub fn ip6(f: &[u8]) -> Result<Ip6<'_>, Malformed> {
    if f.len() < ETH_HLEN + 40 || be16(f, 12)? != ETH_P_IPV6 {
        return Err(Malformed("not ipv6"));
    }
    let ip = &f[ETH_HLEN..];
    if ip[0] >> 4 != 6 {
        return Err(Malformed("ip header"));
    }
    let len = usize::from(be16(ip, 4)?);
    if 40 + len > ip.len() {
        return Err(Malformed("ip length"));
    }
    let addr = |at: usize| {
        let mut a = [0u8; 16];
        a.copy_from_slice(&ip[at..at + 16]);
        Ipv6Addr::from(a)
    };
    Ok(Ip6 {
        src_mac: mac_at(f, 6),
        src: addr(8),
        dst: addr(24),
        proto: ip[6],
        hops: ip[7],
        payload: &ip[40..40 + len],
    })
}

/// The ports and payload of a UDP segment.
pub fn udp_of(seg: &[u8]) -> Result<(u16, u16, &[u8]), Malformed> {
    let len = usize::from(be16(seg, 4)?);
    if len < 8 || len > seg.len() {
        return Err(Malformed("udp length"));
    }
    Ok((be16(seg, 0)?, be16(seg, 2)?, &seg[8..len]))
}

fn sum16(b: &[u8]) -> u32 {
    b.chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum()
}

fn fold(mut s: u32) -> u16 {
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

fn eth(dst: [u8; 6], src: [u8; 6], ty: u16, len: usize) -> Vec<u8> {
    let mut f = Vec::with_capacity(ETH_HLEN + len);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&ty.to_be_bytes());
    f
}

fn udp_seg(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut s = Vec::with_capacity(8 + payload.len());
    s.extend_from_slice(&sport.to_be_bytes());
    s.extend_from_slice(&dport.to_be_bytes());
    s.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    s.extend_from_slice(&[0, 0]);
    s.extend_from_slice(payload);
    s
}

/// Addresses of a frame to build.
#[derive(Debug, Clone, Copy)]
pub struct Ends<A> {
    /// Source MAC.
    pub src_mac: [u8; 6],
    /// Destination MAC.
    pub dst_mac: [u8; 6],
    /// Source address.
    pub src: A,
    /// Destination address.
    pub dst: A,
}

/// An Ethernet/IPv4/UDP frame with both checksums.
pub fn build_udp4(e: Ends<Ipv4Addr>, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut seg = udp_seg(sport, dport, payload);
    let sum =
        sum16(&seg) + sum16(&e.src.octets()) + sum16(&e.dst.octets()) + u32::from(UDP) + seg.len() as u32;
    // A zero UDP checksum means "none": send its other form.
    let c = match fold(sum) {
        0 => 0xffff,
        c => c,
    };
    seg[6..8].copy_from_slice(&c.to_be_bytes());
    let mut ip = vec![0x45, 0];
    ip.extend_from_slice(&((20 + seg.len()) as u16).to_be_bytes());
    ip.extend_from_slice(&[0, 0, 0, 0, 64, UDP, 0, 0]);
    ip.extend_from_slice(&e.src.octets());
    ip.extend_from_slice(&e.dst.octets());
    let c = fold(sum16(&ip));
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    let mut f = eth(e.dst_mac, e.src_mac, ETH_P_IP, ip.len() + seg.len());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&seg);
    f
}

/// An Ethernet/IPv6 frame of `proto` (UDP or ICMPv6: `l4` is its segment, whose checksum
/// field is filled in here) with hop limit `hops`.
pub fn build_ip6(e: Ends<Ipv6Addr>, proto: u8, hops: u8, mut l4: Vec<u8>) -> Vec<u8> {
    let off = if proto == UDP { 6 } else { 2 };
    l4[off..off + 2].copy_from_slice(&[0, 0]);
    let sum =
        sum16(&l4) + sum16(&e.src.octets()) + sum16(&e.dst.octets()) + u32::from(proto) + l4.len() as u32;
    l4[off..off + 2].copy_from_slice(&fold(sum).to_be_bytes());
    let mut f = eth(e.dst_mac, e.src_mac, ETH_P_IPV6, 40 + l4.len());
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&(l4.len() as u16).to_be_bytes());
    f.extend_from_slice(&[proto, hops]);
    f.extend_from_slice(&e.src.octets());
    f.extend_from_slice(&e.dst.octets());
    f.extend_from_slice(&l4);
    f
}

/// An Ethernet/IPv6/UDP frame (hop limit 255, as a link-local answer).
pub fn build_udp6(e: Ends<Ipv6Addr>, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    build_ip6(e, UDP, 255, udp_seg(sport, dport, payload))
}

/// The multicast MAC of an IPv6 group (33:33 + its low 32 bits).
pub fn mcast_mac(a: Ipv6Addr) -> [u8; 6] {
    let o = a.octets();
    [0x33, 0x33, o[12], o[13], o[14], o[15]]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_frames_parse_back_and_verify() {
        let e = Ends {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src: Ipv4Addr::new(169, 254, 1, 1),
            dst: Ipv4Addr::new(10, 0, 0, 5),
        };
        let f = build_udp4(e, 67, 68, b"hello");
        let u = udp4(&f).unwrap();
        assert_eq!(
            (u.src, u.dst, u.sport, u.dport, u.payload),
            (e.src, e.dst, 67, 68, &b"hello"[..])
        );
        assert_eq!(u.src_mac, e.src_mac);
        // Both checksums verify: the IPv4 header, and UDP under its pseudo-header.
        assert_eq!(fold(sum16(&f[14..34])), 0);
        let seg = &f[34..];
        let s = sum16(seg) + sum16(&e.src.octets()) + sum16(&e.dst.octets()) + 17 + seg.len() as u32;
        assert_eq!(fold(s), 0);

        let e6 = Ends {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src: "fe80::1".parse().unwrap(),
            dst: "fe80::2".parse().unwrap(),
        };
        let f = build_udp6(e6, 547, 546, b"x");
        let p = ip6(&f).unwrap();
        assert_eq!((p.src, p.dst, p.proto, p.hops), (e6.src, e6.dst, UDP, 255));
        assert_eq!(udp_of(p.payload).unwrap(), (547, 546, &b"x"[..]));
        let s = sum16(p.payload)
            + sum16(&e6.src.octets())
            + sum16(&e6.dst.octets())
            + 17
            + p.payload.len() as u32;
        assert_eq!(fold(s), 0);
    }

    #[test]
    fn short_and_lying_frames_are_malformed() {
        let e = Ends {
            src_mac: [0; 6],
            dst_mac: [0; 6],
            src: Ipv4Addr::UNSPECIFIED,
            dst: Ipv4Addr::BROADCAST,
        };
        let f = build_udp4(e, 68, 67, &[1, 2, 3]);
        for n in 0..f.len() {
            assert!(udp4(&f[..n]).is_err(), "{n} bytes");
        }
        let mut lying = f.clone();
        lying[14 + 2..14 + 4].copy_from_slice(&9999u16.to_be_bytes());
        assert_eq!(udp4(&lying), Err(Malformed("ip length")));
        let mut frag = f;
        frag[14 + 6] = 0x20;
        assert_eq!(udp4(&frag), Err(Malformed("fragment")));
    }
}
