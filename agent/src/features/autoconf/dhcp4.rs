//! DHCPv4 for a guest (RFC 2131): every answer names the one address of the Port behind the
//! link the request came in on. DISCOVER gets an OFFER, REQUEST (selecting, renewing,
//! rebinding, init-reboot) an ACK when it asks for that address and a NAK when it asks for
//! any other, INFORM an ACK without an address; DECLINE and RELEASE are counted and need no
//! answer (the address is the Port's, not a pool's: there is no lease table to update).
//!
//! What the guest gets is what CNI ADD configures in a pod (`netdev::create_pod_veth`): the
//! address as a /32, a classless static route (option 121) to the gateway `169.254.1.1` on
//! the link and the default route through it (and the same as option 3 for clients that
//! ignore 121), the MTU of the link, the resolvers and search domains, a lease time; and what
//! `spec.dhcp` adds or changes ([`super::options`]): its routes in option 121, its MTU
//! (26), resolvers (6), search domains (15, 119) and lease (51).

use std::net::Ipv4Addr;

use dhcproto::v4::{DhcpOption, Flags, Message, MessageType, Opcode, OptionCode};
use dhcproto::{Decodable as _, Encodable as _, Name};
use ipnet::Ipv4Net;

use super::frame::{self, Ends};
use super::{Drop, Guest, Outcome, Settings};
use crate::core::datapath::netdev::GATEWAY;

/// The server and client ports.
pub const SERVER: u16 = 67;
/// The client port.
pub const CLIENT: u16 = 68;

/// The answer to the DHCPv4 frame `f` from the guest `g`.
pub fn answer(f: &[u8], g: &Guest, s: &Settings) -> Outcome {
    let Ok(u) = frame::udp4(f) else {
        return Outcome::Drop(Drop::Malformed);
    };
    if (u.sport, u.dport) != (CLIENT, SERVER) {
        return Outcome::Drop(Drop::Malformed);
    }
    let Ok(req) = Message::from_bytes(u.payload) else {
        return Outcome::Drop(Drop::Malformed);
    };
    if req.opcode() != Opcode::BootRequest || req.hlen() != 6 || req.chaddr().len() < 6 {
        return Outcome::Drop(Drop::Malformed);
    }
    // Only the Port's own MAC is answered: a frame and a chaddr both of the Port.
    if u.src_mac != g.mac || req.chaddr()[..6] != g.mac {
        return Outcome::Drop(Drop::Mac);
    }
    let Some(ip) = g.v4 else {
        return Outcome::Drop(Drop::NoAddress);
    };
    let server_id = match req.opts().get(OptionCode::ServerIdentifier) {
        Some(DhcpOption::ServerIdentifier(id)) => Some(*id),
        _ => None,
    };
    let requested = match req.opts().get(OptionCode::RequestedIpAddress) {
        Some(DhcpOption::RequestedIpAddress(r)) => Some(*r),
        _ => None,
    };
    let (kind, reply) = match req.opts().msg_type() {
        Some(MessageType::Discover) => ("offer", reply(&req, MessageType::Offer, Some(ip), g)),
        Some(MessageType::Request) => {
            // Another server was selected: not ours to answer.
            if server_id.is_some_and(|id| id != GATEWAY) {
                return Outcome::Quiet("other_server");
            }
            let asked = requested.unwrap_or(req.ciaddr());
            if asked == ip {
                ("ack", reply(&req, MessageType::Ack, Some(ip), g))
            } else {
                ("nak", nak(&req))
            }
        }
        Some(MessageType::Inform) => ("ack", reply(&req, MessageType::Ack, None, g)),
        Some(MessageType::Decline) => return Outcome::Quiet("decline"),
        Some(MessageType::Release) => return Outcome::Quiet("release"),
        _ => return Outcome::Drop(Drop::Unsupported),
    };
    let Ok(payload) = reply.to_vec() else {
        return Outcome::Drop(Drop::Malformed);
    };
    // RFC 2131 4.1: a NAK is broadcast; an answer to a client with an address (renewing,
    // INFORM) goes to it; else to the broadcast address when the client asks for it, to the
    // offered address and MAC otherwise.
    let ciaddr = req.ciaddr();
    let (dst, dst_mac) = if kind == "nak" || (ciaddr.is_unspecified() && req.flags().broadcast()) {
        (Ipv4Addr::BROADCAST, [0xff; 6])
    } else if !ciaddr.is_unspecified() {
        (ciaddr, g.mac)
    } else {
        (ip, g.mac)
    };
    let ends = Ends {
        src_mac: s.gw_mac,
        dst_mac,
        src: GATEWAY,
        dst,
    };
    Outcome::Answer(kind, frame::build_udp4(ends, SERVER, CLIENT, &payload))
}

fn base(req: &Message, t: MessageType) -> Message {
    let mut m = Message::default();
    m.set_opcode(Opcode::BootReply)
        .set_xid(req.xid())
        .set_flags(if req.flags().broadcast() {
            Flags::default().set_broadcast()
        } else {
            Flags::default()
        })
        .set_giaddr(req.giaddr())
        .set_chaddr(req.chaddr());
    m.opts_mut().insert(DhcpOption::MessageType(t));
    m.opts_mut().insert(DhcpOption::ServerIdentifier(GATEWAY));
    m
}

fn nak(req: &Message) -> Message {
    base(req, MessageType::Nak)
}

fn reply(req: &Message, t: MessageType, yiaddr: Option<Ipv4Addr>, g: &Guest) -> Message {
    let mut m = base(req, t);
    if let Some(ip) = yiaddr {
        m.set_yiaddr(ip);
        let o = m.opts_mut();
        o.insert(DhcpOption::AddressLeaseTime(g.lease_secs));
        o.insert(DhcpOption::Renewal(g.lease_secs / 2));
        o.insert(DhcpOption::Rebinding(g.lease_secs / 8 * 7));
    } else {
        m.set_ciaddr(req.ciaddr());
    }
    let o = m.opts_mut();
    o.insert(DhcpOption::SubnetMask(Ipv4Addr::BROADCAST));
    if g.default_route {
        o.insert(DhcpOption::Router(vec![GATEWAY]));
    }
    // The gateway on the link (a /32 route without a next hop) first, as the routes through
    // it need it; then `spec.dhcp`'s routes and the default.
    let gw = Ipv4Net::new(GATEWAY, 32).unwrap_or_default();
    let mut routes = vec![(gw, Ipv4Addr::UNSPECIFIED)];
    routes.extend(g.routes4.iter().copied());
    if g.default_route {
        routes.push((Ipv4Net::default(), GATEWAY));
    }
    o.insert(DhcpOption::ClasslessStaticRoute(routes));
    if let Ok(mtu) = u16::try_from(g.mtu) {
        o.insert(DhcpOption::InterfaceMtu(mtu));
    }
    let dns: Vec<Ipv4Addr> = g.dns4.clone();
    if !dns.is_empty() {
        o.insert(DhcpOption::DomainNameServer(dns));
    }
    if let Some(first) = g.search.first() {
        o.insert(DhcpOption::DomainName(first.clone()));
        let names: Vec<Name> = g.search.iter().filter_map(|d| Name::from_ascii(d).ok()).collect();
        o.insert(DhcpOption::DomainSearch(names));
    }
    m
}
