//! DHCPv6 for a guest (RFC 8415), stateful for exactly one address: the /128 of the Port
//! behind the link. SOLICIT gets an ADVERTISE (a REPLY when it asks for rapid commit),
//! REQUEST, RENEW, REBIND and CONFIRM a REPLY naming that address in the client's IA_NA,
//! INFORMATION-REQUEST a REPLY with the resolvers only, RELEASE and DECLINE a REPLY with
//! status Success (nothing to free: the address is the Port's). A message for another server
//! is not ours to answer. An ADVERTISE has preference 255 (the client need not wait for
//! others). Every answer carries the resolvers (option 23) and the domain list
//! (24), `spec.dhcp`'s where it sets them ([`super::options`]), and the lifetimes are its
//! lease. The server's DUID is a DUID-LL of the gateway's MAC.

use dhcproto::v6::{DhcpOption, IAAddr, IANA, Message, MessageType, OptionCode, Status, StatusCode};
use dhcproto::{Decodable as _, Encodable as _, Name};

use super::frame::{self, Ends};
use super::{Drop, Guest, Outcome, Settings};
use crate::core::datapath::netdev::GATEWAY6;

/// The client port.
pub const CLIENT: u16 = 546;
/// The server port.
pub const SERVER: u16 = 547;

/// The server's DUID: type 3 (DUID-LL), hardware type 1 (Ethernet), the gateway MAC.
pub fn server_duid(gw_mac: [u8; 6]) -> Vec<u8> {
    let mut d = vec![0, 3, 0, 1];
    d.extend_from_slice(&gw_mac);
    d
}

/// The answer to the DHCPv6 frame `f` from the guest `g`.
pub fn answer(f: &[u8], g: &Guest, s: &Settings) -> Outcome {
    let Ok(p) = frame::ip6(f) else {
        return Outcome::Drop(Drop::Malformed);
    };
    if p.proto != frame::UDP {
        return Outcome::Drop(Drop::Malformed);
    }
    let Ok((CLIENT, SERVER, payload)) = frame::udp_of(p.payload) else {
        return Outcome::Drop(Drop::Malformed);
    };
    // The client answers from its link-local address (RFC 8415 13.1).
    if !p.src.is_unicast_link_local() {
        return Outcome::Drop(Drop::Malformed);
    }
    if p.src_mac != g.mac {
        return Outcome::Drop(Drop::Mac);
    }
    let Ok(req) = Message::from_bytes(payload) else {
        return Outcome::Drop(Drop::Malformed);
    };
    let Some(ip) = g.v6 else {
        return Outcome::Drop(Drop::NoAddress);
    };
    let Some(DhcpOption::ClientId(client)) = req.opts().get(OptionCode::ClientId) else {
        return Outcome::Drop(Drop::Malformed);
    };
    let ours = server_duid(s.gw_mac);
    let server = match req.opts().get(OptionCode::ServerId) {
        Some(DhcpOption::ServerId(id)) => Some(id),
        _ => None,
    };
    let rapid = req.opts().get(OptionCode::RapidCommit).is_some();
    let (kind, t, with_addr) = match req.msg_type() {
        MessageType::Solicit if server.is_none() && rapid => ("reply", MessageType::Reply, true),
        MessageType::Solicit if server.is_none() => ("advertise", MessageType::Advertise, true),
        MessageType::Request | MessageType::Renew | MessageType::Release | MessageType::Decline
            if server != Some(&ours) =>
        {
            return Outcome::Quiet("other_server");
        }
        MessageType::Request | MessageType::Renew | MessageType::Rebind | MessageType::Confirm => {
            ("reply", MessageType::Reply, true)
        }
        MessageType::InformationRequest => ("reply", MessageType::Reply, false),
        MessageType::Release => ("release", MessageType::Reply, false),
        MessageType::Decline => ("decline", MessageType::Reply, false),
        _ => return Outcome::Drop(Drop::Unsupported),
    };
    let mut m = Message::new_with_id(t, req.xid());
    let o = m.opts_mut();
    o.insert(DhcpOption::ClientId(client.clone()));
    o.insert(DhcpOption::ServerId(ours));
    if t == MessageType::Reply && req.msg_type() == MessageType::Solicit {
        o.insert(DhcpOption::RapidCommit);
    }
    // The only server on the link: preference 255 lets the client request at once instead of
    // collecting advertisements for its first retransmission time, 1 s (RFC 8415 18.2.1).
    if t == MessageType::Advertise {
        o.insert(DhcpOption::Preference(255));
    }
    if with_addr {
        // The client's IA_NA (its IAID), else one of ours: always exactly the Port's /128.
        let id = match req.opts().get(OptionCode::IANA) {
            Some(DhcpOption::IANA(ia)) => ia.id,
            _ => 1,
        };
        let mut ia = IANA {
            id,
            t1: g.lease_secs / 2,
            t2: g.lease_secs / 5 * 4,
            opts: Default::default(),
        };
        ia.opts.insert(DhcpOption::IAAddr(IAAddr {
            addr: ip,
            preferred_life: g.lease_secs,
            valid_life: g.lease_secs,
            opts: Default::default(),
        }));
        o.insert(DhcpOption::IANA(ia));
    }
    if matches!(req.msg_type(), MessageType::Release | MessageType::Decline) {
        o.insert(DhcpOption::StatusCode(StatusCode {
            status: Status::Success,
            msg: String::new(),
        }));
    }
    if !g.dns6.is_empty() {
        o.insert(DhcpOption::DomainNameServers(g.dns6.clone()));
    }
    let names: Vec<Name> = g.search.iter().filter_map(|d| Name::from_ascii(d).ok()).collect();
    if !names.is_empty() {
        o.insert(DhcpOption::DomainSearchList(names));
    }
    let Ok(payload) = m.to_vec() else {
        return Outcome::Drop(Drop::Malformed);
    };
    let ends = Ends {
        src_mac: s.gw_mac,
        dst_mac: g.mac,
        src: GATEWAY6,
        dst: p.src,
    };
    Outcome::Answer(kind, frame::build_udp6(ends, SERVER, CLIENT, &payload))
}
