//! The policy tests' side of the agent: the `policy` crate's compiled entries written into
//! the datapath's maps through the `cozyplane_bpf::maps` wrappers, in the order the design
//! gives (docs/policy.md, "Incremental compilation"), and the packets those tests send.

use std::net::IpAddr;

use cozyplane_apis::v1alpha1::{
    LocalVPCRef, SecurityGroup, SecurityGroupEgressRule, SecurityGroupIngressRule, SecurityGroupSpec,
    SecurityGroupStatus,
};
use cozyplane_bpf::abi::{
    Addr, EpKey, HfSelf, NpIdent, Pcidr, PcidrKey, PolState, Prule, PruleKey, SgMember,
};
use cozyplane_bpf::maps::{
    hf_self::{self, HfSelfMap},
    np_idents::{self, NpIdentsMap},
    pol_cidrs::{self, PolCidrsMap},
    pol_ct::{self, PolCtMap},
    pol_rules::{self, PolRulesMap},
    pol_state::{self, PolStateMap},
    sg_members::{self, SgMembersMap},
};
use cozyplane_policy::model::{CidrKey, Diff, RuleKey, RuleVal, Tables};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::fixtures::{cfg, port};
use super::pkt::{self, TCP};
use super::{Datapath, LO, TC_ACT_OK, TC_ACT_SHOT};
use cozyplane_bpf::maps::endpoints::{self, EndpointsMap};

/// `RuleKey` → the ABI key: `prefixlen` is the fixed 128 bits plus the port block's, the
/// port in network order.
pub fn rule_key(k: &RuleKey) -> PruleKey {
    PruleKey {
        prefixlen: 128 + u32::from(k.port.len),
        net: k.net,
        subject: k.subject,
        peer: k.peer,
        layer: k.layer as u8,
        dir: k.dir as u8,
        proto: k.proto,
        pad: 0,
        port: k.port.value.to_be(),
        pad2: [0; 2],
    }
}

fn rule_val(v: &RuleVal) -> Prule {
    Prule {
        peers: v.peers,
        rule: v.rule,
        flags: v.flags,
    }
}

/// `CidrKey` → the ABI key (`prefixlen` 64 + the prefix's bits of the 128-bit form).
pub fn cidr_key(k: &CidrKey) -> PcidrKey {
    PcidrKey {
        prefixlen: 64 + u32::from(k.prefix.len),
        scope: k.scope,
        layer: k.layer as u8,
        v6: u8::from(k.prefix.v6),
        pad: [0; 2],
        ip: Addr {
            b: k.prefix.bits.to_be_bytes(),
        },
    }
}

fn ep_key(net: u32, ip: IpAddr) -> EpKey {
    EpKey {
        net,
        ip: Addr::from(ip),
    }
}

/// Write `d` as the agent does: rules and classes added before anything is removed, so a
/// packet in between never meets a wider set than before or after.
pub fn apply(dp: &mut Datapath, d: &Diff) {
    let mut rules = PolRulesMap::try_from(dp.map_mut(pol_rules::NAME)).unwrap();
    for (k, v) in &d.rules.upsert {
        rules.upsert(&rule_key(k), rule_val(v)).unwrap();
    }
    let mut cidrs = PolCidrsMap::try_from(dp.map_mut(pol_cidrs::NAME)).unwrap();
    for (k, class) in &d.cidrs.upsert {
        cidrs
            .upsert(
                &cidr_key(k),
                Pcidr {
                    class: *class,
                    flags: 0,
                },
            )
            .unwrap();
    }
    for k in &d.cidrs.remove {
        cidrs.remove(&cidr_key(k)).unwrap();
    }
    let mut rules = PolRulesMap::try_from(dp.map_mut(pol_rules::NAME)).unwrap();
    for k in &d.rules.remove {
        rules.remove(&rule_key(k)).unwrap();
    }
    let mut members = SgMembersMap::try_from(dp.map_mut(sg_members::NAME)).unwrap();
    for ((net, ip), groups) in &d.sg_members.upsert {
        members
            .upsert(ep_key(*net, *ip), SgMember { groups: *groups })
            .unwrap();
    }
    for (net, ip) in &d.sg_members.remove {
        members.remove(&ep_key(*net, *ip)).unwrap();
    }
    let mut idents = NpIdentsMap::try_from(dp.map_mut(np_idents::NAME)).unwrap();
    for (ip, id) in &d.np_idents.upsert {
        idents
            .upsert(Addr::from(*ip), NpIdent { id: *id, flags: 0 })
            .unwrap();
    }
    for ip in &d.np_idents.remove {
        idents.remove(&Addr::from(*ip)).unwrap();
    }
    let mut me = HfSelfMap::try_from(dp.map_mut(hf_self::NAME)).unwrap();
    for (ip, ()) in &d.hf_self.upsert {
        me.upsert(Addr::from(*ip), HfSelf { flags: 0 }).unwrap();
    }
    for ip in &d.hf_self.remove {
        me.remove(&Addr::from(*ip)).unwrap();
    }
}

/// Load `t` into empty maps.
pub fn load(dp: &mut Datapath, t: &Tables) {
    apply(dp, &Diff::between(&Tables::default(), t));
}

/// Bump `sdn_pol_state.generation`, as the agent does after a narrowing diff.
pub fn bump(dp: &mut Datapath) -> u32 {
    PolStateMap::try_from(dp.map_mut(pol_state::NAME))
        .unwrap()
        .bump()
        .unwrap()
}

pub fn state(dp: &Datapath) -> PolState {
    PolStateMap::try_from(dp.map(pol_state::NAME))
        .unwrap()
        .get()
        .unwrap()
}

/// Empty the connection table (between independent rounds of a test).
pub fn clear_ct(dp: &mut Datapath) -> usize {
    let mut ct = PolCtMap::try_from(dp.map_mut(pol_ct::NAME)).unwrap();
    let keys: Vec<_> = ct.entries().unwrap().into_iter().map(|(k, _)| k).collect();
    for k in &keys {
        ct.remove(k).unwrap();
    }
    keys.len()
}

pub fn ct_entries(dp: &Datapath) -> Vec<(cozyplane_bpf::abi::PctKey, cozyplane_bpf::abi::Pct)> {
    PolCtMap::try_from(dp.map(pol_ct::NAME))
        .unwrap()
        .entries()
        .unwrap()
}

/// TCP header flag bits.
pub const SYN: u8 = 0x02;
pub const ACK: u8 = 0x10;
pub const FIN: u8 = 0x01;
pub const RST: u8 = 0x04;

/// An IPv4 TCP segment with `flags` (checksums are not what these tests look at).
pub fn tcp4(
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src: IpAddr,
    dst: IpAddr,
    sport: u16,
    dport: u16,
    flags: u8,
) -> Vec<u8> {
    let (IpAddr::V4(s), IpAddr::V4(d)) = (src, dst) else {
        panic!("tcp4 of {src} -> {dst}")
    };
    let mut p = pkt::ipv4(src_mac, dst_mac, s, d, TCP, sport, dport, 0);
    p[14 + 20 + 13] = flags;
    p
}

/// An IPv6 TCP segment with `flags`.
pub fn tcp6(
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src: IpAddr,
    dst: IpAddr,
    sport: u16,
    dport: u16,
    flags: u8,
) -> Vec<u8> {
    let (IpAddr::V6(s), IpAddr::V6(d)) = (src, dst) else {
        panic!("tcp6 of {src} -> {dst}")
    };
    let mut p = Vec::new();
    p.extend_from_slice(&dst_mac);
    p.extend_from_slice(&src_mac);
    p.extend_from_slice(&pkt::ETH_IPV6.to_be_bytes());
    p.extend_from_slice(&[0x60, 0, 0, 0, 0, 20, TCP, 64]);
    p.extend_from_slice(&s.octets());
    p.extend_from_slice(&d.octets());
    p.extend_from_slice(&sport.to_be_bytes());
    p.extend_from_slice(&dport.to_be_bytes());
    p.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
    p
}

/// Any TCP segment with `flags`, of the family of its addresses.
pub fn tcp(
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src: IpAddr,
    dst: IpAddr,
    sport: u16,
    dport: u16,
    flags: u8,
) -> Vec<u8> {
    if src.is_ipv4() {
        tcp4(src_mac, dst_mac, src, dst, sport, dport, flags)
    } else {
        tcp6(src_mac, dst_mac, src, dst, sport, dport, flags)
    }
}

/// The door and bridge tests' one SecurityGroup: `t1/web` of VPC `va`, id 1, with these rules.
pub fn web_group(
    ingress: Vec<SecurityGroupIngressRule>,
    egress: Vec<SecurityGroupEgressRule>,
) -> SecurityGroup {
    SecurityGroup {
        metadata: ObjectMeta {
            namespace: Some("t1".into()),
            name: Some("web".into()),
            ..Default::default()
        },
        spec: SecurityGroupSpec {
            vpc_ref: LocalVPCRef { name: "va".into() },
            ingress,
            egress,
            ..Default::default()
        },
        status: Some(SecurityGroupStatus {
            id: 1,
            ..Default::default()
        }),
    }
}

// ---- default-network pods on one node, as the NetworkPolicy suites use them ----------

/// A MAC for a pod address.
pub fn mac_of(a: IpAddr) -> [u8; 6] {
    let o = match a {
        IpAddr::V4(v) => v.octets(),
        IpAddr::V6(v) => v.octets()[12..].try_into().unwrap(),
    };
    [0x0a, 0x50, o[0], o[1], o[2], o[3]]
}

/// A net-0 datapath on which every pod of `pods` is a local pod (its veth is `lo`).
pub fn node(pods: &[IpAddr]) -> Datapath {
    let mut dp = Datapath::load(&cfg());
    port(&mut dp, LO, 0);
    let mut eps = EndpointsMap::try_from(dp.map_mut(endpoints::NAME)).unwrap();
    for a in pods {
        eps.upsert(0, *a, LO, mac_of(*a)).unwrap();
    }
    dp
}

/// One probe's first packet from `s` to `d`.
pub fn probe(s: IpAddr, d: IpAddr, proto: u8, sport: u16, dport: u16) -> Vec<u8> {
    let (IpAddr::V4(s4), IpAddr::V4(d4)) = (s, d) else {
        unreachable!()
    };
    pkt::ipv4(mac_of(s), cfg().gw_mac, s4, d4, proto, sport, dport, 0)
}

/// Verdict of one hook: allowed (`TC_ACT_OK`) or dropped.
pub fn passes(dp: &Datapath, hook: &str, packet: &[u8]) -> bool {
    let v = dp.run(hook, packet, LO, 0).verdict;
    assert!(v == TC_ACT_OK || v == TC_ACT_SHOT, "{hook}: verdict {v}");
    v == TC_ACT_OK
}
