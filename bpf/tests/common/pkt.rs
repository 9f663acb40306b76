//! Packet builders and checkers for the tests. Checksums are computed from scratch, so a
//! test comparing them checks the programs' incremental updates.

use std::net::{Ipv4Addr, Ipv6Addr};

pub const ETH_IP: u16 = 0x0800;
pub const ETH_ARP: u16 = 0x0806;
pub const ETH_IPV6: u16 = 0x86dd;
pub const TCP: u8 = 6;
pub const UDP: u8 = 17;
pub const ICMP: u8 = 1;
pub const ICMPV6: u8 = 58;
pub const SCTP: u8 = 132;

/// CRC32c (Castagnoli, reflected), SCTP's checksum (RFC 9260, appendix A).
fn crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for b in data {
        crc ^= u32::from(*b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82f6_3b78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

fn fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

fn sum16(data: &[u8]) -> u32 {
    data.chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum()
}

fn eth(dst: [u8; 6], src: [u8; 6], proto: u16) -> Vec<u8> {
    let mut p = Vec::with_capacity(128);
    p.extend_from_slice(&dst);
    p.extend_from_slice(&src);
    p.extend_from_slice(&proto.to_be_bytes());
    p
}

/// L4 header + payload for `proto`, checksum field zero. ICMP: echo request (type 8) or
/// reply (type 0) with `sport` as the identifier.
fn l4(proto: u8, sport: u16, dport: u16, icmp_type: u8) -> Vec<u8> {
    let payload = b"cozyplane";
    let mut h = Vec::new();
    match proto {
        TCP => {
            h.extend_from_slice(&sport.to_be_bytes());
            h.extend_from_slice(&dport.to_be_bytes());
            h.extend_from_slice(&1u32.to_be_bytes()); // seq
            h.extend_from_slice(&0u32.to_be_bytes()); // ack
            h.extend_from_slice(&[0x50, 0x02]); // 20-byte header, SYN
            h.extend_from_slice(&64240u16.to_be_bytes());
            h.extend_from_slice(&[0, 0, 0, 0]); // csum, urg
        }
        UDP => {
            h.extend_from_slice(&sport.to_be_bytes());
            h.extend_from_slice(&dport.to_be_bytes());
            h.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
            h.extend_from_slice(&[0, 0]);
        }
        ICMP | ICMPV6 => {
            h.extend_from_slice(&[icmp_type, 0, 0, 0]);
            h.extend_from_slice(&sport.to_be_bytes());
            h.extend_from_slice(&1u16.to_be_bytes());
        }
        SCTP => {
            // The common header (verification tag 0, as an INIT's) and one INIT chunk: an
            // association's first packet. The CRC32c over it all, stored as Linux stores it.
            h.extend_from_slice(&sport.to_be_bytes());
            h.extend_from_slice(&dport.to_be_bytes());
            h.extend_from_slice(&[0; 8]);
            h.extend_from_slice(&[1, 0, 0, 20]);
            h.extend_from_slice(&0x1234_5678u32.to_be_bytes()); // initiate tag
            h.extend_from_slice(&65536u32.to_be_bytes()); // a_rwnd
            h.extend_from_slice(&[0, 10, 0, 10]); // streams out, in
            h.extend_from_slice(&1u32.to_be_bytes()); // initial TSN
            let c = crc32c(&h);
            h[8..12].copy_from_slice(&c.to_le_bytes());
            return h;
        }
        _ => unreachable!(),
    }
    h.extend_from_slice(payload);
    h
}

fn l4_csum_off(proto: u8) -> usize {
    match proto {
        TCP => 16,
        UDP => 6,
        _ => 2,
    }
}

/// An Ethernet/IPv4 packet with valid checksums.
#[allow(clippy::too_many_arguments, reason = "a packet has that many fields")]
pub fn ipv4(
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src: Ipv4Addr,
    dst: Ipv4Addr,
    proto: u8,
    sport: u16,
    dport: u16,
    icmp_type: u8,
) -> Vec<u8> {
    let mut seg = l4(proto, sport, dport, icmp_type);
    if proto != SCTP {
        let mut sum = sum16(&seg);
        if proto != ICMP {
            sum += sum16(&src.octets()) + sum16(&dst.octets()) + u32::from(proto) + seg.len() as u32;
        }
        let c = fold(sum);
        let off = l4_csum_off(proto);
        seg[off..off + 2].copy_from_slice(&c.to_be_bytes());
    }

    let mut ip = vec![0x45, 0];
    ip.extend_from_slice(&((20 + seg.len()) as u16).to_be_bytes());
    ip.extend_from_slice(&[0, 1, 0x40, 0, 64, proto, 0, 0]); // id 1, DF, ttl 64
    ip.extend_from_slice(&src.octets());
    ip.extend_from_slice(&dst.octets());
    let c = fold(sum16(&ip));
    ip[10..12].copy_from_slice(&c.to_be_bytes());

    let mut p = eth(dst_mac, src_mac, ETH_IP);
    p.extend_from_slice(&ip);
    p.extend_from_slice(&seg);
    p
}

/// An Ethernet/IPv6 UDP packet with a valid checksum.
pub fn ipv6_udp(
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src: Ipv6Addr,
    dst: Ipv6Addr,
    sport: u16,
    dport: u16,
) -> Vec<u8> {
    let mut seg = l4(UDP, sport, dport, 0);
    let sum = sum16(&seg) + sum16(&src.octets()) + sum16(&dst.octets()) + u32::from(UDP) + seg.len() as u32;
    seg[6..8].copy_from_slice(&fold(sum).to_be_bytes());
    let mut p = eth(dst_mac, src_mac, ETH_IPV6);
    p.extend_from_slice(&[0x60, 0, 0, 0]);
    p.extend_from_slice(&(seg.len() as u16).to_be_bytes());
    p.extend_from_slice(&[UDP, 64]);
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    p.extend_from_slice(&seg);
    p
}

/// A broadcast ARP request from `sha`/`spa` for `tpa`.
pub fn arp_request(sha: [u8; 6], spa: Ipv4Addr, tpa: Ipv4Addr) -> Vec<u8> {
    let mut p = eth([0xff; 6], sha, ETH_ARP);
    p.extend_from_slice(&[0, 1, 0x08, 0x00, 6, 4, 0, 1]);
    p.extend_from_slice(&sha);
    p.extend_from_slice(&spa.octets());
    p.extend_from_slice(&[0; 6]);
    p.extend_from_slice(&tpa.octets());
    p
}

/// Parsed view of an Ethernet/IPv4 packet.
#[derive(Debug, PartialEq, Eq)]
pub struct V4 {
    pub dst_mac: [u8; 6],
    pub src_mac: [u8; 6],
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub proto: u8,
    /// TCP/UDP ports; ICMP: the echo id in both.
    pub sport: u16,
    pub dport: u16,
}

pub fn parse_v4(p: &[u8]) -> V4 {
    assert_eq!(u16::from_be_bytes([p[12], p[13]]), ETH_IP, "not IPv4");
    let ip = &p[14..];
    let proto = ip[9];
    let l4 = &ip[20..];
    let (sport, dport) = if proto == ICMP {
        let id = u16::from_be_bytes([l4[4], l4[5]]);
        (id, id)
    } else {
        (
            u16::from_be_bytes([l4[0], l4[1]]),
            u16::from_be_bytes([l4[2], l4[3]]),
        )
    };
    V4 {
        dst_mac: p[0..6].try_into().unwrap(),
        src_mac: p[6..12].try_into().unwrap(),
        src: Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]),
        dst: Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]),
        proto,
        sport,
        dport,
    }
}

/// Both the IPv4 header checksum and the L4 checksum verify.
pub fn assert_v4_checksums(p: &[u8]) {
    let ip = &p[14..34];
    assert_eq!(fold(sum16(ip)), 0, "IPv4 header checksum");
    let proto = ip[9];
    let seg = &p[34..];
    let mut sum = sum16(seg);
    if proto != ICMP {
        sum += sum16(&ip[12..20]) + u32::from(proto) + seg.len() as u32;
    }
    assert_eq!(fold(sum), 0, "L4 checksum (proto {proto})");
}

// === ICMP errors and fragments (bridge_icmp.rs) ===

/// The one's complement checksum of `data`, as it would be written into a zeroed field.
pub fn csum(data: &[u8]) -> u16 {
    fold(sum16(data))
}

/// The TCP/UDP checksum of `seg` (its own checksum field included) under the IPv4
/// pseudo-header: 0 when the segment verifies.
pub fn l4_csum_v4(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, seg: &[u8]) -> u16 {
    fold(sum16(seg) + sum16(&src.octets()) + sum16(&dst.octets()) + u32::from(proto) + seg.len() as u32)
}

/// A UDP segment with `payload` and a valid checksum.
pub fn udp_seg(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut seg = Vec::with_capacity(8 + payload.len());
    seg.extend_from_slice(&sport.to_be_bytes());
    seg.extend_from_slice(&dport.to_be_bytes());
    seg.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    seg.extend_from_slice(&[0, 0]);
    seg.extend_from_slice(payload);
    let c = l4_csum_v4(src, dst, UDP, &seg);
    seg[6..8].copy_from_slice(&c.to_be_bytes());
    seg
}

/// An IPv4 header (no options, valid checksum) followed by `payload`. `frag` is the
/// flags/fragment-offset field (host order).
pub fn ip4_raw(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, id: u16, frag: u16, payload: &[u8]) -> Vec<u8> {
    let mut ip = vec![0x45, 0];
    ip.extend_from_slice(&((20 + payload.len()) as u16).to_be_bytes());
    ip.extend_from_slice(&id.to_be_bytes());
    ip.extend_from_slice(&frag.to_be_bytes());
    ip.extend_from_slice(&[64, proto, 0, 0]);
    ip.extend_from_slice(&src.octets());
    ip.extend_from_slice(&dst.octets());
    let c = csum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    ip.extend_from_slice(payload);
    ip
}

/// `ip` (an IPv4 packet) in an Ethernet frame.
pub fn frame(dst_mac: [u8; 6], src_mac: [u8; 6], ip: &[u8]) -> Vec<u8> {
    let mut p = eth(dst_mac, src_mac, ETH_IP);
    p.extend_from_slice(ip);
    p
}

/// An ICMPv4 error (`typ`/`code`, `rest` = the 4 bytes after the checksum, e.g. the next-hop
/// MTU) quoting `quote`, from `src` to `dst`, with valid checksums.
pub fn icmp4_error(src: Ipv4Addr, dst: Ipv4Addr, typ: u8, code: u8, rest: [u8; 4], quote: &[u8]) -> Vec<u8> {
    let mut m = vec![typ, code, 0, 0];
    m.extend_from_slice(&rest);
    m.extend_from_slice(quote);
    let c = csum(&m);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    ip4_raw(src, dst, ICMP, 7, 0, &m)
}

/// Splits the IPv4 packet `ip` (no options) into fragments carrying at most `chunk`
/// bytes of payload each (a multiple of 8), as a router would.
pub fn fragment(ip: &[u8], chunk: usize) -> Vec<Vec<u8>> {
    assert_eq!(chunk % 8, 0);
    let (hdr, payload) = ip.split_at(20);
    let src = Ipv4Addr::new(hdr[12], hdr[13], hdr[14], hdr[15]);
    let dst = Ipv4Addr::new(hdr[16], hdr[17], hdr[18], hdr[19]);
    let id = u16::from_be_bytes([hdr[4], hdr[5]]);
    let pieces: Vec<&[u8]> = payload.chunks(chunk).collect();
    let n = pieces.len();
    pieces
        .iter()
        .enumerate()
        .map(|(i, piece)| {
            let more = if i + 1 < n { 0x2000 } else { 0 };
            ip4_raw(src, dst, hdr[9], id, more | (i * chunk / 8) as u16, piece)
        })
        .collect()
}

/// The IPv4 packet of an Ethernet frame.
pub fn ip_of(frame: &[u8]) -> &[u8] {
    assert_eq!(u16::from_be_bytes([frame[12], frame[13]]), ETH_IP, "not IPv4");
    &frame[14..]
}

/// Source and destination of an IPv4 packet.
pub fn addrs(ip: &[u8]) -> (Ipv4Addr, Ipv4Addr) {
    (
        Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]),
        Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]),
    )
}

/// Reassembles fragments (each an IPv4 packet whose header checksum must verify) into
/// the datagram's header fields (addresses, protocol) and payload.
pub fn reassemble(frags: &[Vec<u8>]) -> (Ipv4Addr, Ipv4Addr, u8, Vec<u8>) {
    let mut payload = Vec::new();
    let (src, dst) = addrs(&frags[0]);
    for f in frags {
        assert_eq!(csum(&f[..20]), 0, "fragment header checksum");
        assert_eq!(
            addrs(f),
            (src, dst),
            "every fragment has the first one's addresses"
        );
        let off = usize::from(u16::from_be_bytes([f[6], f[7]]) & 0x1fff) * 8;
        assert_eq!(off, payload.len(), "fragments in order");
        payload.extend_from_slice(&f[20..]);
    }
    (src, dst, frags[0][9], payload)
}

/// An Ethernet/IPv6 packet (TCP, UDP or ICMPv6 echo) with a valid checksum.
#[allow(clippy::too_many_arguments, reason = "a packet has that many fields")]
pub fn ipv6(
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src: Ipv6Addr,
    dst: Ipv6Addr,
    proto: u8,
    sport: u16,
    dport: u16,
    icmp_type: u8,
) -> Vec<u8> {
    let mut seg = l4(proto, sport, dport, icmp_type);
    let sum = sum16(&seg) + sum16(&src.octets()) + sum16(&dst.octets()) + u32::from(proto) + seg.len() as u32;
    let off = l4_csum_off(proto);
    seg[off..off + 2].copy_from_slice(&fold(sum).to_be_bytes());
    v6_frame(src_mac, dst_mac, src, dst, proto, 64, &seg)
}

fn v6_frame(
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src: Ipv6Addr,
    dst: Ipv6Addr,
    proto: u8,
    hops: u8,
    seg: &[u8],
) -> Vec<u8> {
    let mut p = eth(dst_mac, src_mac, ETH_IPV6);
    p.extend_from_slice(&[0x60, 0, 0, 0]);
    p.extend_from_slice(&(seg.len() as u16).to_be_bytes());
    p.extend_from_slice(&[proto, hops]);
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    p.extend_from_slice(seg);
    p
}

/// A neighbour solicitation from `sha`/`src` for `target` to its solicited-node address,
/// with the source link-layer option if `option`.
pub fn neighbour_solicitation(sha: [u8; 6], src: Ipv6Addr, target: Ipv6Addr, option: bool) -> Vec<u8> {
    let t = target.octets();
    let snm = Ipv6Addr::new(
        0xff02,
        0,
        0,
        0,
        0,
        1,
        0xff00 | u16::from(t[13]),
        u16::from_be_bytes([t[14], t[15]]),
    );
    let mut seg = vec![135, 0, 0, 0, 0, 0, 0, 0];
    seg.extend_from_slice(&t);
    if option {
        seg.extend_from_slice(&[1, 1]);
        seg.extend_from_slice(&sha);
    }
    let sum =
        sum16(&seg) + sum16(&src.octets()) + sum16(&snm.octets()) + u32::from(ICMPV6) + seg.len() as u32;
    seg[2..4].copy_from_slice(&fold(sum).to_be_bytes());
    let o = snm.octets();
    v6_frame(
        sha,
        [0x33, 0x33, o[12], o[13], o[14], o[15]],
        src,
        snm,
        ICMPV6,
        255,
        &seg,
    )
}

/// Parsed view of an Ethernet/IPv6 packet without extension headers.
#[derive(Debug, PartialEq, Eq)]
pub struct V6 {
    pub dst_mac: [u8; 6],
    pub src_mac: [u8; 6],
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
    pub proto: u8,
    /// TCP/UDP ports; ICMPv6: the type, then the echo id in both.
    pub sport: u16,
    pub dport: u16,
    pub icmp_type: u8,
}

pub fn parse_v6(p: &[u8]) -> V6 {
    assert_eq!(u16::from_be_bytes([p[12], p[13]]), ETH_IPV6, "not IPv6");
    let ip = &p[14..];
    let proto = ip[6];
    let l4 = &ip[40..];
    let (sport, dport) = if proto == ICMPV6 {
        let id = u16::from_be_bytes([l4[4], l4[5]]);
        (id, id)
    } else {
        (
            u16::from_be_bytes([l4[0], l4[1]]),
            u16::from_be_bytes([l4[2], l4[3]]),
        )
    };
    let a = |o: usize| Ipv6Addr::from(<[u8; 16]>::try_from(&ip[o..o + 16]).unwrap());
    V6 {
        dst_mac: p[0..6].try_into().unwrap(),
        src_mac: p[6..12].try_into().unwrap(),
        src: a(8),
        dst: a(24),
        proto,
        sport,
        dport,
        icmp_type: if proto == ICMPV6 { l4[0] } else { 0 },
    }
}

/// The L4 checksum of an IPv6 packet verifies, and the payload length is the segment's.
pub fn assert_v6_checksums(p: &[u8]) {
    let ip = &p[14..54];
    let seg = &p[54..];
    assert_eq!(
        usize::from(u16::from_be_bytes([ip[4], ip[5]])),
        seg.len(),
        "payload length"
    );
    let proto = ip[6];
    let sum = sum16(seg) + sum16(&ip[8..40]) + u32::from(proto) + seg.len() as u32;
    assert_eq!(fold(sum), 0, "L4 checksum (proto {proto})");
}

// === ICMPv6 errors (bridge_icmp6.rs, snat_icmp6.rs) ===

/// The TCP/UDP/ICMPv6 checksum of `seg` (its own checksum field included) under the IPv6
/// pseudo-header: 0 when the segment verifies.
pub fn l4_csum_v6(src: Ipv6Addr, dst: Ipv6Addr, proto: u8, seg: &[u8]) -> u16 {
    fold(sum16(seg) + sum16(&src.octets()) + sum16(&dst.octets()) + u32::from(proto) + seg.len() as u32)
}

/// An IPv6 header (hop limit 64, no extension headers) followed by `payload`.
pub fn ip6_raw(src: Ipv6Addr, dst: Ipv6Addr, proto: u8, payload: &[u8]) -> Vec<u8> {
    v6_frame([0; 6], [0; 6], src, dst, proto, 64, payload)[14..].to_vec()
}

/// `ip` (an IPv6 packet) in an Ethernet frame.
pub fn frame6(dst_mac: [u8; 6], src_mac: [u8; 6], ip: &[u8]) -> Vec<u8> {
    let mut p = eth(dst_mac, src_mac, ETH_IPV6);
    p.extend_from_slice(ip);
    p
}

/// An ICMPv6 error (`typ`/`code`; `rest`: the 4 bytes after the checksum, the MTU of a
/// packet too big, the pointer of a parameter problem) from `src` to `dst` quoting `quote`,
/// with a valid checksum. An IPv6 packet.
pub fn icmp6_error(src: Ipv6Addr, dst: Ipv6Addr, typ: u8, code: u8, rest: [u8; 4], quote: &[u8]) -> Vec<u8> {
    let mut m = vec![typ, code, 0, 0];
    m.extend_from_slice(&rest);
    m.extend_from_slice(quote);
    let c = l4_csum_v6(src, dst, ICMPV6, &m);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    ip6_raw(src, dst, ICMPV6, &m)
}

/// The IPv6 packet of an Ethernet frame.
pub fn ip6_of(frame: &[u8]) -> &[u8] {
    assert_eq!(u16::from_be_bytes([frame[12], frame[13]]), ETH_IPV6, "not IPv6");
    &frame[14..]
}

/// Source and destination of an IPv6 packet.
pub fn addrs6(ip: &[u8]) -> (Ipv6Addr, Ipv6Addr) {
    let a = |o: usize| Ipv6Addr::from(<[u8; 16]>::try_from(&ip[o..o + 16]).unwrap());
    (a(8), a(24))
}

/// An ICMPv6 error packet `ip`: its payload length is right and its checksum (pseudo-header
/// and the whole quote) verifies; with a whole quoted packet, the quoted L4 checksum (under
/// the quoted addresses) verifies too.
#[track_caller]
pub fn assert_icmp6_error_checksums(ip: &[u8], whole_quote: bool) {
    assert_eq!(ip[6], ICMPV6, "an ICMPv6 message");
    assert_eq!(
        usize::from(u16::from_be_bytes([ip[4], ip[5]])),
        ip.len() - 40,
        "payload length"
    );
    let (s, d) = addrs6(ip);
    assert_eq!(
        l4_csum_v6(s, d, ICMPV6, &ip[40..]),
        0,
        "ICMPv6 checksum (pseudo-header and quote)"
    );
    if whole_quote {
        let quote = &ip[48..];
        let (qs, qd) = addrs6(quote);
        assert_eq!(
            l4_csum_v6(qs, qd, quote[6], &quote[40..]),
            0,
            "quoted L4 checksum (proto {})",
            quote[6]
        );
    }
}
