//! DNS64 (RFC 6147) for the VPCs that ask for it (`spec.dns64`): an IPv6-only VPC reaches
//! the IPv4 internet through its gateway's NAT64, which translates the well-known prefix
//! `64:ff9b::/96` (RFC 6052, the form every IPv4 address already takes in the datapath's
//! maps). For its pods to find those addresses, the resolver synthesizes AAAA records
//! `64:ff9b::a.b.c.d` for names that have only A records.
//!
//! Applies to an AAAA question of class IN, from a pod of a VPC with DNS64 on, for a name the
//! resolver forwards (outside the cluster domain: the VPC's own Services answer their
//! ServiceVIPs, which in an IPv6-only VPC are IPv6, and are never synthesized). The path
//! ([`crate::server::Resolver::respond`]), each step pure here:
//!
//! 1. the AAAA question goes upstream as the client sent it;
//! 2. [`wants_a`]: the answer is relayed as it is when it holds an AAAA record, is NXDOMAIN
//!    (RFC 6147 §5.1.2: the name does not exist, no A either) or is truncated (the client
//!    retries over TCP); NOERROR without AAAA (NODATA, or a CNAME chain ending in a name
//!    without AAAA) and any other error code (§5.1.2: treated as an empty answer) go on;
//! 3. [`a_query`]: the same question for A (the client's id, flags and EDNS) goes upstream;
//! 4. [`synthesize`]: each A record of the answer becomes an AAAA record under
//!    `64:ff9b::/96` with the same owner, the CNAME chain is kept in order, the rest of the
//!    answer (signatures: the synthesized records cannot be validated; a DNAME, whose
//!    synthesized CNAME stays) is dropped, and so are the authority and additional sections.
//!    The TTL is the A record's, lowered to the negative TTL of the AAAA answer's SOA when it
//!    has one (§5.1.7: min of the SOA's TTL and minimum). A records in ranges that mean
//!    nothing beyond the host or the link are not synthesized (`0.0.0.0/8`, `127.0.0.0/8`,
//!    `169.254.0.0/16`, multicast `224.0.0.0/4`, `240.0.0.0/4` with the broadcast address;
//!    §5.1.4 leaves the list to the operator). Private ranges (RFC 1918, `100.64.0.0/10`) are
//!    synthesized: behind the gateway they may well be reachable. When nothing is left (the
//!    A answer is an error, empty, or all excluded), the AAAA answer of step 1 goes back.
//!
//! Not done: a client that sets both CD and DO validates DNSSEC itself and would reject
//! synthesized records (§5.5): it gets the upstream's answer unsynthesized. No PTR is
//! synthesized for `ip6.arpa` names under `64:ff9b::/96` (§5.3.1): those go upstream as any
//! other name. AAAA records of the upstream are used as they are (no exclusion of
//! `::ffff:0:0/96` answers, §5.1.4). ANY questions are not synthesized.

use std::net::{Ipv4Addr, Ipv6Addr};

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::rdata::AAAA;
use hickory_proto::rr::{DNSClass, RData, Record, RecordType};

use crate::answer::{Action, Outcome, Transport, encode, response_to};
use crate::view::{View, VpcKey};

/// The well-known NAT64 prefix `64:ff9b::/96` (RFC 6052 §2.1), its first 96 bits.
pub const PREFIX: [u16; 6] = [0x64, 0xff9b, 0, 0, 0, 0];

/// `a.b.c.d` → `64:ff9b::a.b.c.d`, or `None` for an address that is not synthesized (it means
/// nothing beyond the host or its link, or is multicast or reserved).
pub fn synthesized(v4: Ipv4Addr) -> Option<Ipv6Addr> {
    let o = v4.octets();
    let excluded = o[0] == 0 || v4.is_loopback() || v4.is_link_local() || v4.is_multicast() || o[0] >= 240;
    if excluded {
        return None;
    }
    let [p0, p1, p2, p3, p4, p5] = PREFIX;
    Some(Ipv6Addr::new(
        p0,
        p1,
        p2,
        p3,
        p4,
        p5,
        u16::from_be_bytes([o[0], o[1]]),
        u16::from_be_bytes([o[2], o[3]]),
    ))
}

/// Whether `req`, a forwarded question from a pod of `vpc`, takes the DNS64 path: the VPC has
/// DNS64 on, the question is AAAA of class IN, and the client does not validate DNSSEC itself
/// (CD and DO both set, RFC 6147 §5.5).
pub(crate) fn applies(view: &View, vpc: &VpcKey, req: &Message) -> bool {
    let Some(q) = req.queries.first() else {
        return false;
    };
    let validating = req.metadata.checking_disabled && req.edns.as_ref().is_some_and(|e| e.flags().dnssec_ok);
    q.query_type() == RecordType::AAAA && q.query_class() == DNSClass::IN && !validating && view.dns64(vpc)
}

/// Whether the upstream's answer to the AAAA question leaves DNS64 something to do (step 2 of
/// the [module](self) text): not truncated, not NXDOMAIN, and no AAAA record in its answer
/// section. An answer that does not parse is relayed as it is.
pub fn wants_a(aaaa: &[u8]) -> bool {
    let Ok(m) = Message::from_vec(aaaa) else {
        return false;
    };
    if m.metadata.truncation || m.metadata.response_code == ResponseCode::NXDomain {
        return false;
    }
    m.metadata.response_code != ResponseCode::NoError
        || !m.answers.iter().any(|r| r.record_type() == RecordType::AAAA)
}

/// The client's AAAA question `query` asked for A instead: same id, flags, name and EDNS.
pub fn a_query(query: &[u8]) -> Option<Vec<u8>> {
    let mut m = Message::from_vec(query).ok()?;
    m.queries.first_mut()?.set_query_type(RecordType::A);
    m.to_vec().ok()
}

/// The synthesized answer to the client's AAAA question `query` (received over `transport`)
/// from the upstream's answers to it (`aaaa`) and to its A form (`a`); `None` when there is
/// nothing to synthesize and the AAAA answer is to be relayed instead. Fits the transport as
/// any local answer does (TC past the client's limit); a truncated A answer gives a truncated
/// answer, so the client retries over TCP.
pub fn synthesize(query: &[u8], aaaa: &[u8], a: &[u8], transport: Transport) -> Option<Vec<u8>> {
    let req = Message::from_vec(query).ok()?;
    let a_resp = Message::from_vec(a).ok()?;
    if a_resp.metadata.response_code != ResponseCode::NoError {
        return None;
    }
    let mut resp = response_to(&req);
    if a_resp.metadata.truncation {
        resp.metadata.truncation = true;
        return reply(&resp, &req, transport);
    }
    let ttl_cap = Message::from_vec(aaaa).ok().and_then(|m| negative_ttl(&m));
    let mut synthesized_any = false;
    for r in &a_resp.answers {
        match &r.data {
            RData::A(v4) => {
                let Some(v6) = synthesized(v4.0) else { continue };
                let ttl = ttl_cap.map_or(r.ttl, |cap| r.ttl.min(cap));
                resp.add_answer(Record::from_rdata(r.name.clone(), ttl, RData::AAAA(AAAA(v6))));
                synthesized_any = true;
            }
            RData::CNAME(_) => {
                resp.add_answer(r.clone());
            }
            _ => {}
        }
    }
    if !synthesized_any {
        return None;
    }
    reply(&resp, &req, transport)
}

/// The negative-caching TTL of a NODATA answer: its SOA's TTL, at most the SOA minimum.
fn negative_ttl(m: &Message) -> Option<u32> {
    m.authorities.iter().find_map(|r| match &r.data {
        RData::SOA(soa) => Some(r.ttl.min(soa.minimum)),
        _ => None,
    })
}

fn reply(resp: &Message, req: &Message, transport: Transport) -> Option<Vec<u8>> {
    match encode(resp, req, transport, Outcome::Answer) {
        Action::Reply { bytes, .. } => Some(bytes),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use hickory_proto::op::{Edns, Query};
    use hickory_proto::rr::Name;
    use hickory_proto::rr::rdata::{A, CNAME, SOA};

    use super::*;

    fn name(s: &str) -> Name {
        Name::from_ascii(s).unwrap()
    }

    fn query(t: RecordType) -> Message {
        let mut m = Message::query();
        m.metadata.id = 7;
        m.metadata.recursion_desired = true;
        m.add_query(Query::query(name("www.example.test."), t));
        m
    }

    fn answer_to(q: &Message, records: Vec<Record>, authority: Vec<Record>) -> Vec<u8> {
        let mut r = Message::response(q.metadata.id, q.metadata.op_code);
        r.add_queries(q.queries.iter().cloned());
        r.add_answers(records);
        r.add_authorities(authority);
        r.to_vec().unwrap()
    }

    fn soa(ttl: u32, minimum: u32) -> Record {
        let s = SOA::new(
            name("ns.example.test."),
            name("h.example.test."),
            1,
            1,
            1,
            1,
            minimum,
        );
        Record::from_rdata(name("example.test."), ttl, RData::SOA(s))
    }

    #[test]
    fn addresses_under_the_well_known_prefix_and_exclusions() {
        assert_eq!(
            synthesized(Ipv4Addr::new(203, 0, 113, 7)),
            Some("64:ff9b::cb00:7107".parse().unwrap())
        );
        assert_eq!(
            synthesized(Ipv4Addr::new(10, 1, 2, 3)),
            Some("64:ff9b::10.1.2.3".parse().unwrap())
        );
        for bad in [
            "0.1.2.3",
            "127.0.0.1",
            "169.254.1.1",
            "224.0.0.1",
            "240.0.0.1",
            "255.255.255.255",
        ] {
            assert_eq!(synthesized(bad.parse().unwrap()), None, "{bad}");
        }
    }

    #[test]
    fn which_aaaa_answers_go_on_to_a() {
        let q = query(RecordType::AAAA);
        let aaaa = Record::from_rdata(
            name("www.example.test."),
            60,
            RData::AAAA(AAAA("2001:db8::1".parse().unwrap())),
        );
        let cname = Record::from_rdata(
            name("www.example.test."),
            60,
            RData::CNAME(CNAME(name("v4.example.test."))),
        );
        assert!(!wants_a(&answer_to(&q, vec![aaaa], vec![])));
        assert!(wants_a(&answer_to(&q, vec![], vec![soa(60, 30)])));
        assert!(wants_a(&answer_to(&q, vec![cname], vec![])));
        let mut m = Message::from_vec(&answer_to(&q, vec![], vec![])).unwrap();
        m.metadata.response_code = ResponseCode::NXDomain;
        assert!(!wants_a(&m.to_vec().unwrap()));
        m.metadata.response_code = ResponseCode::ServFail;
        assert!(wants_a(&m.to_vec().unwrap()));
        m.metadata.response_code = ResponseCode::NoError;
        m.metadata.truncation = true;
        assert!(!wants_a(&m.to_vec().unwrap()));
        assert!(!wants_a(&[1, 2, 3]));
    }

    #[test]
    fn a_records_become_aaaa_with_the_chain_and_the_lower_ttl() {
        let mut q = query(RecordType::AAAA);
        q.set_edns(Edns::new());
        let wire = q.to_vec().unwrap();
        let a = Message::from_vec(&a_query(&wire).unwrap()).unwrap();
        assert_eq!(a.queries[0].query_type(), RecordType::A);
        assert_eq!(a.metadata.id, 7);
        assert!(a.edns.is_some());

        let aaaa_nodata = answer_to(&q, vec![], vec![soa(300, 30)]);
        let a_answer = answer_to(
            &a,
            vec![
                Record::from_rdata(
                    name("www.example.test."),
                    600,
                    RData::CNAME(CNAME(name("v4.example.test."))),
                ),
                Record::from_rdata(name("v4.example.test."), 120, RData::A(A::new(203, 0, 113, 7))),
                Record::from_rdata(name("v4.example.test."), 10, RData::A(A::new(127, 0, 0, 1))),
                Record::from_rdata(name("v4.example.test."), 10, RData::A(A::new(198, 51, 100, 1))),
            ],
            vec![],
        );
        let out = synthesize(&wire, &aaaa_nodata, &a_answer, Transport::Udp).unwrap();
        let m = Message::from_vec(&out).unwrap();
        assert_eq!(m.metadata.id, 7);
        assert_eq!(m.metadata.response_code, ResponseCode::NoError);
        assert_eq!(m.queries[0].query_type(), RecordType::AAAA);
        assert!(!m.metadata.authoritative && !m.metadata.authentic_data);
        let got: Vec<(String, RecordType, u32, Option<std::net::IpAddr>)> = m
            .answers
            .iter()
            .map(|r| (r.name.to_string(), r.record_type(), r.ttl, r.data.ip_addr()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("www.example.test.".into(), RecordType::CNAME, 600, None),
                (
                    "v4.example.test.".into(),
                    RecordType::AAAA,
                    30,
                    Some("64:ff9b::cb00:7107".parse().unwrap())
                ),
                (
                    "v4.example.test.".into(),
                    RecordType::AAAA,
                    10,
                    Some("64:ff9b::c633:6401".parse().unwrap())
                ),
            ]
        );

        // Without an SOA the A's TTL stands.
        let plain = synthesize(&wire, &answer_to(&q, vec![], vec![]), &a_answer, Transport::Tcp).unwrap();
        let m = Message::from_vec(&plain).unwrap();
        assert_eq!(m.answers[1].ttl, 120);
    }

    #[test]
    fn nothing_to_synthesize_relays_the_aaaa_answer() {
        let q = query(RecordType::AAAA);
        let wire = q.to_vec().unwrap();
        let a = query(RecordType::A);
        let nodata = answer_to(&q, vec![], vec![]);
        // No A either, only excluded ones, an error, junk.
        assert_eq!(
            synthesize(&wire, &nodata, &answer_to(&a, vec![], vec![]), Transport::Udp),
            None
        );
        let lo = Record::from_rdata(name("www.example.test."), 5, RData::A(A::new(127, 0, 0, 1)));
        assert_eq!(
            synthesize(&wire, &nodata, &answer_to(&a, vec![lo], vec![]), Transport::Udp),
            None
        );
        let mut err = Message::from_vec(&answer_to(&a, vec![], vec![])).unwrap();
        err.metadata.response_code = ResponseCode::ServFail;
        assert_eq!(
            synthesize(&wire, &nodata, &err.to_vec().unwrap(), Transport::Udp),
            None
        );
        assert_eq!(synthesize(&wire, &nodata, &[0xff; 5], Transport::Udp), None);
        // A truncated A answer: a truncated answer, for the retry over TCP.
        let mut tc = Message::from_vec(&answer_to(&a, vec![], vec![])).unwrap();
        tc.metadata.truncation = true;
        let out = synthesize(&wire, &nodata, &tc.to_vec().unwrap(), Transport::Udp).unwrap();
        let m = Message::from_vec(&out).unwrap();
        assert!(m.metadata.truncation && m.answers.is_empty());
    }

    #[test]
    fn only_aaaa_in_dns64_vpcs_and_not_for_validating_clients() {
        let blue: VpcKey = ("t1".into(), "blue".into());
        let red: VpcKey = ("t2".into(), "red".into());
        let mut v = View::new();
        v.add_dns64(blue.clone());
        assert!(applies(&v, &blue, &query(RecordType::AAAA)));
        assert!(!applies(&v, &red, &query(RecordType::AAAA)));
        assert!(!applies(&v, &blue, &query(RecordType::A)));
        assert!(!applies(&v, &blue, &query(RecordType::ANY)));
        let mut validating = query(RecordType::AAAA);
        validating.metadata.checking_disabled = true;
        let mut e = Edns::new();
        e.set_dnssec_ok(true);
        validating.set_edns(e);
        assert!(!applies(&v, &blue, &validating));
        // DO alone (a client that wants signatures but leaves validation to us) is served.
        validating.metadata.checking_disabled = false;
        assert!(applies(&v, &blue, &validating));
    }
}
