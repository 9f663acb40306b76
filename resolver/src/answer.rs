//! The request path, transport aside: one datagram (or one TCP message without its length
//! prefix) in, one decision out. Pure: no sockets, no clock, so every rule is testable and
//! the whole path can be fuzzed ([`handle`] must never panic, whatever the bytes).
//!
//! Order of decisions: too short to carry a header or a response → dropped (never answer
//! an answer: two resolvers would loop); unknown source → REFUSED; unparsable → FORMERR;
//! not a plain one-question QUERY → FORMERR/NOTIMP; EDNS version above 0 → BADVERS; a
//! name in the cluster domain → answered here, authoritatively, from the querier's view;
//! anything else → forwarded upstream as received, through DNS64 for an AAAA question from
//! a VPC that asked for it ([`crate::dns64`]).

use std::net::IpAddr;

use hickory_proto::op::{Edns, Header, Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA, SOA, SRV};
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType};
use hickory_proto::serialize::binary::BinDecodable as _;

use crate::view::{Service, View, VpcKey};

/// The payload the resolver offers in its own OPT record, and the ceiling on any UDP
/// answer whatever the client offers (the DNS flag day's figure: no IP fragmentation).
pub const OUR_UDP_PAYLOAD: u16 = 1232;
/// A UDP answer is never cut below this (RFC 1035's limit, the floor EDNS raises).
pub const MIN_UDP_PAYLOAD: usize = 512;

/// How the query arrived (decides the size limit of the answer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// UDP: answers larger than the client's limit are truncated (TC).
    Udp,
    /// TCP: up to 65535 bytes.
    Tcp,
}

impl Transport {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Udp => "udp",
            Self::Tcp => "tcp",
        }
    }
}

/// What an answer said (the metric label of a local answer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// NOERROR with records.
    Answer,
    /// NOERROR, no records of the type (SOA in authority).
    NoData,
    /// The name does not exist for this querier (SOA in authority).
    NxDomain,
    /// Unknown source.
    Refused,
    /// Unparsable or malformed query.
    FormErr,
    /// An opcode or class the resolver does not serve.
    NotImp,
    /// EDNS version above 0.
    BadVers,
    /// The upstreams failed (only from the forwarding path).
    ServFail,
}

impl Outcome {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Answer => "answer",
            Self::NoData => "nodata",
            Self::NxDomain => "nxdomain",
            Self::Refused => "refused",
            Self::FormErr => "formerr",
            Self::NotImp => "notimp",
            Self::BadVers => "badvers",
            Self::ServFail => "servfail",
        }
    }
}

/// Why a query got no answer at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropReason {
    /// Shorter than a DNS header.
    Short,
    /// A response (QR set): answering it could start a loop.
    NotAQuery,
}

impl DropReason {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Short => "short",
            Self::NotAQuery => "not_a_query",
        }
    }
}

/// What to do with one query.
#[derive(Debug, PartialEq, Eq)]
pub enum Action {
    /// Send these bytes back.
    Reply {
        /// The encoded answer (within the transport's limit).
        bytes: Vec<u8>,
        /// What it says.
        outcome: Outcome,
    },
    /// Not a cluster name: relay the query as received to the upstreams, over the same
    /// transport (the client's EDNS size travels with it, so upstream truncates for it).
    Forward,
    /// As [`Action::Forward`], and the querier's VPC has DNS64 on: an AAAA question whose
    /// answer has no AAAA record is asked again for A and answered with synthesized AAAA
    /// records ([`crate::dns64`]).
    ForwardDns64,
    /// Say nothing.
    Drop(DropReason),
}

/// The cluster domain and the records synthesized for it.
#[derive(Clone, Debug)]
pub struct Zone {
    /// The domain, lowercase, fully qualified (`cluster.local.`).
    domain: Name,
    /// The same without the trailing dot, for building names.
    domain_str: String,
    /// Labels of `domain`.
    labels: usize,
    /// TTL of positive answers; also the SOA minimum (negative caching).
    ttl: u32,
}

/// A cluster domain that is no valid DNS name.
#[derive(Debug, thiserror::Error)]
#[error("invalid cluster domain {domain:?}: {reason}")]
pub struct ZoneError {
    /// What was given.
    pub domain: String,
    /// Why it is refused.
    pub reason: String,
}

impl Zone {
    /// The zone for `domain` (e.g. `cluster.local`, `cozy.local`), answers living `ttl` s.
    pub fn new(domain: &str, ttl: u32) -> Result<Self, ZoneError> {
        let err = |reason: String| ZoneError {
            domain: domain.to_string(),
            reason,
        };
        let trimmed = domain.trim_end_matches('.').to_ascii_lowercase();
        if trimmed.is_empty() {
            return Err(err("empty".into()));
        }
        let name = Name::from_ascii(format!("{trimmed}.")).map_err(|e| err(e.to_string()))?;
        Ok(Self {
            labels: usize::from(name.num_labels()),
            domain: name,
            domain_str: trimmed,
            ttl,
        })
    }

    /// The domain as configured, without the trailing dot.
    pub fn domain(&self) -> &str {
        &self.domain_str
    }

    fn soa(&self, serial: u32) -> Record {
        let mname =
            Name::from_ascii(format!("ns.dns.{}.", self.domain_str)).unwrap_or_else(|_| self.domain.clone());
        let rname = Name::from_ascii(format!("hostmaster.{}.", self.domain_str))
            .unwrap_or_else(|_| self.domain.clone());
        let soa = SOA::new(mname, rname, serial, 7200, 1800, 86400, self.ttl);
        Record::from_rdata(self.domain.clone(), self.ttl, RData::SOA(soa))
    }

    fn name(&self, rel: &str) -> Option<Name> {
        Name::from_ascii(format!("{rel}.{}.", self.domain_str)).ok()
    }
}

/// Decide what to do with `wire`, a query from `src` (the steered source address).
pub fn handle(view: &View, zone: &Zone, src: IpAddr, wire: &[u8], transport: Transport) -> Action {
    let Ok(header) = Header::from_bytes(wire) else {
        return Action::Drop(DropReason::Short);
    };
    if header.metadata.message_type == MessageType::Response {
        return Action::Drop(DropReason::NotAQuery);
    }
    let parsed = Message::from_vec(wire).ok();
    let Some(vpc) = view.querier(src) else {
        return error_reply(
            &header,
            parsed.as_ref(),
            ResponseCode::Refused,
            Outcome::Refused,
            transport,
        );
    };
    let Some(req) = parsed else {
        return error_reply(&header, None, ResponseCode::FormErr, Outcome::FormErr, transport);
    };
    if req.metadata.op_code != OpCode::Query {
        return error_reply(
            &header,
            Some(&req),
            ResponseCode::NotImp,
            Outcome::NotImp,
            transport,
        );
    }
    if req.queries.len() != 1 {
        return error_reply(
            &header,
            Some(&req),
            ResponseCode::FormErr,
            Outcome::FormErr,
            transport,
        );
    }
    if req.edns.as_ref().is_some_and(|e| e.version() > 0) {
        return error_reply(
            &header,
            Some(&req),
            ResponseCode::BADVERS,
            Outcome::BadVers,
            transport,
        );
    }
    let q = &req.queries[0];
    if !zone.domain.zone_of(q.name()) {
        if crate::dns64::applies(view, vpc, &req) {
            return Action::ForwardDns64;
        }
        return Action::Forward;
    }
    if q.query_class() != DNSClass::IN {
        return error_reply(
            &header,
            Some(&req),
            ResponseCode::NotImp,
            Outcome::NotImp,
            transport,
        );
    }
    let mut resp = response_to(&req);
    resp.metadata.authoritative = true;
    let outcome = answer_in_zone(view, zone, vpc, &req, &mut resp);
    match outcome {
        Outcome::NxDomain | Outcome::NoData => {
            if outcome == Outcome::NxDomain {
                resp.metadata.response_code = ResponseCode::NXDomain;
            }
            resp.add_authority(zone.soa(view.generation()));
        }
        _ => {}
    }
    encode(&resp, &req, transport, outcome)
}

/// The cluster-domain part: fills `resp` and says what it is.
fn answer_in_zone(view: &View, zone: &Zone, vpc: &VpcKey, req: &Message, resp: &mut Message) -> Outcome {
    let q = &req.queries[0];
    let qname = q.name().clone();
    let qtype = q.query_type();
    // Labels below the domain, leftmost first, compared lowercase.
    let all: Vec<String> = qname
        .iter()
        .map(|l| String::from_utf8_lossy(l).to_ascii_lowercase())
        .collect();
    let rel = &all[..all.len().saturating_sub(zone.labels)];
    match rel {
        [] => {
            if qtype == RecordType::SOA {
                resp.add_answer(zone.soa(view.generation()));
                Outcome::Answer
            } else {
                Outcome::NoData
            }
        }
        [s] if s == "svc" => Outcome::NoData,
        [ns, s] if s == "svc" => {
            if view.sees_namespace(vpc, ns) {
                Outcome::NoData
            } else {
                Outcome::NxDomain
            }
        }
        [name, ns, s] if s == "svc" => match view.visible(vpc, ns, name) {
            None => Outcome::NxDomain,
            Some(svc) => {
                let addrs: Vec<IpAddr> = if svc.headless {
                    svc.endpoints
                        .iter()
                        .flat_map(|e| e.addrs.iter().copied())
                        .collect()
                } else {
                    svc.vips.clone()
                };
                address_answer(resp, &qname, qtype, &addrs, zone.ttl)
            }
        },
        [host, name, ns, s] if s == "svc" && !host.starts_with('_') => match view.visible(vpc, ns, name) {
            Some(svc) if svc.headless => {
                let addrs: Vec<IpAddr> = svc
                    .endpoints
                    .iter()
                    .flat_map(|e| e.addrs.iter().filter(|a| e.label_for(**a) == *host).copied())
                    .collect();
                if addrs.is_empty() {
                    Outcome::NxDomain
                } else {
                    address_answer(resp, &qname, qtype, &addrs, zone.ttl)
                }
            }
            _ => Outcome::NxDomain,
        },
        [port, proto, name, ns, s] if s == "svc" && port.starts_with('_') && proto.starts_with('_') => {
            match view.visible(vpc, ns, name) {
                None => Outcome::NxDomain,
                Some(svc) => srv_answer(
                    resp,
                    zone,
                    &qname,
                    qtype,
                    (ns, name),
                    svc,
                    (&port[1..], &proto[1..]),
                ),
            }
        }
        _ => Outcome::NxDomain,
    }
}

/// A/AAAA (or ANY) for a name that exists with `addrs`.
fn address_answer(resp: &mut Message, name: &Name, qtype: RecordType, addrs: &[IpAddr], ttl: u32) -> Outcome {
    for a in addrs {
        let rdata = match (qtype, a) {
            (RecordType::A | RecordType::ANY, IpAddr::V4(v4)) => RData::A(A(*v4)),
            (RecordType::AAAA | RecordType::ANY, IpAddr::V6(v6)) => RData::AAAA(AAAA(*v6)),
            _ => continue,
        };
        resp.add_answer(Record::from_rdata(name.clone(), ttl, rdata));
    }
    if resp.answers.is_empty() {
        Outcome::NoData
    } else {
        Outcome::Answer
    }
}

/// `_<port>._<proto>.<svc>.<ns>.svc.<domain>`: one SRV per target, their addresses as
/// additional records.
fn srv_answer(
    resp: &mut Message,
    zone: &Zone,
    qname: &Name,
    qtype: RecordType,
    (ns, name): (&str, &str),
    svc: &Service,
    (port_name, proto): (&str, &str),
) -> Outcome {
    let Some(port) = svc
        .ports
        .iter()
        .find(|p| p.name == port_name && p.protocol.label() == proto)
    else {
        return Outcome::NxDomain;
    };
    if !matches!(qtype, RecordType::SRV | RecordType::ANY) {
        return Outcome::NoData;
    }
    // (target, its addresses)
    let mut targets: Vec<(Name, Vec<IpAddr>)> = Vec::new();
    if svc.headless {
        for e in &svc.endpoints {
            for a in &e.addrs {
                let Some(t) = zone.name(&format!("{}.{name}.{ns}.svc", e.label_for(*a))) else {
                    continue;
                };
                match targets.iter_mut().find(|(n, _)| *n == t) {
                    Some((_, v)) => v.push(*a),
                    None => targets.push((t, vec![*a])),
                }
            }
        }
    } else if let Some(t) = zone.name(&format!("{name}.{ns}.svc")) {
        targets.push((t, svc.vips.clone()));
    }
    if targets.is_empty() {
        return Outcome::NoData;
    }
    let weight = u16::try_from(100 / targets.len()).unwrap_or(1).max(1);
    for (t, addrs) in targets {
        let srv = SRV::new(0, weight, port.port, t.clone());
        resp.add_answer(Record::from_rdata(qname.clone(), zone.ttl, RData::SRV(srv)));
        for a in addrs {
            let rdata = match a {
                IpAddr::V4(v4) => RData::A(A(v4)),
                IpAddr::V6(v6) => RData::AAAA(AAAA(v6)),
            };
            resp.add_additional(Record::from_rdata(t.clone(), zone.ttl, rdata));
        }
    }
    Outcome::Answer
}

/// A response skeleton: id, question, RD echoed, RA set (the resolver recurses through
/// its upstreams), our OPT if the client sent one.
pub(crate) fn response_to(req: &Message) -> Message {
    let mut resp = Message::response(req.metadata.id, req.metadata.op_code);
    resp.metadata.recursion_desired = req.metadata.recursion_desired;
    resp.metadata.recursion_available = true;
    resp.metadata.checking_disabled = req.metadata.checking_disabled;
    resp.add_queries(req.queries.iter().cloned());
    if req.edns.is_some() {
        let mut e = Edns::new();
        e.set_max_payload(OUR_UDP_PAYLOAD);
        resp.set_edns(e);
    }
    resp
}

/// The error answer to a query, with its question when it parsed.
fn error_reply(
    header: &Header,
    req: Option<&Message>,
    code: ResponseCode,
    outcome: Outcome,
    transport: Transport,
) -> Action {
    let mut resp = match req {
        Some(r) => response_to(r),
        None => {
            let mut m = Message::response(header.metadata.id, header.metadata.op_code);
            m.metadata.recursion_desired = header.metadata.recursion_desired;
            m.metadata.recursion_available = true;
            m
        }
    };
    // BADVERS is an extended code: it needs the OPT record to carry its high bits.
    if code == ResponseCode::BADVERS && resp.edns.is_none() {
        resp.set_edns(Edns::new());
    }
    resp.metadata.response_code = code;
    match req {
        Some(r) => encode(&resp, r, transport, outcome),
        None => match resp.to_vec() {
            Ok(bytes) => Action::Reply { bytes, outcome },
            Err(_) => Action::Drop(DropReason::Short),
        },
    }
}

/// The most a client can take over `transport`: over UDP its EDNS payload (512 without
/// one), never below 512 nor above what the resolver offers; over TCP a whole message.
pub fn answer_limit(req: Option<&Message>, transport: Transport) -> usize {
    match transport {
        Transport::Tcp => usize::from(u16::MAX),
        Transport::Udp => {
            let offered = req
                .and_then(|r| r.edns.as_ref())
                .map_or(MIN_UDP_PAYLOAD, |e| usize::from(e.max_payload()));
            offered.clamp(MIN_UDP_PAYLOAD, usize::from(OUR_UDP_PAYLOAD))
        }
    }
}

/// Encode within the transport's limit: an answer that does not fit goes out as its
/// header and question with TC set, so the client retries over TCP.
pub(crate) fn encode(resp: &Message, req: &Message, transport: Transport, outcome: Outcome) -> Action {
    let limit = answer_limit(Some(req), transport);
    let full = resp.to_vec();
    let bytes = match full {
        Ok(b) if b.len() <= limit => b,
        _ => {
            let mut cut = resp.truncate();
            cut.answers.clear();
            cut.authorities.clear();
            cut.additionals.clear();
            match cut.to_vec() {
                Ok(b) if b.len() <= limit => b,
                // Even the question does not fit (or will not encode): the header alone.
                _ => {
                    let mut bare = Message::response(resp.metadata.id, resp.metadata.op_code);
                    bare.metadata = resp.metadata;
                    bare.metadata.truncation = true;
                    match bare.to_vec() {
                        Ok(b) => b,
                        Err(_) => return Action::Drop(DropReason::Short),
                    }
                }
            }
        }
    };
    Action::Reply { bytes, outcome }
}

/// A SERVFAIL for a query the upstreams could not answer (the forwarding path's error).
pub fn servfail(wire: &[u8], transport: Transport) -> Option<Vec<u8>> {
    let header = Header::from_bytes(wire).ok()?;
    let req = Message::from_vec(wire).ok();
    match error_reply(
        &header,
        req.as_ref(),
        ResponseCode::ServFail,
        Outcome::ServFail,
        transport,
    ) {
        Action::Reply { bytes, .. } => Some(bytes),
        _ => None,
    }
}
