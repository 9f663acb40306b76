//! The verdict over compiled entries, computed the way the datapath computes it: the same
//! lookups (peer token, then CIDR class, then any), the same longest-prefix matches over
//! ports and classes, on [`Tables`] — never on the policy text. The trace API answers with
//! it, and the datapath tests compare the kernel's decisions with it.
//!
//! Exemptions that are not policy (the node to its local pods, ND and link-local IPv6, the
//! tunnel port, ICMP errors of a known flow, replies of an established flow) are the
//! datapath's and are not modelled here: a verdict is for the first packet of a flow.

use std::collections::BTreeSet;
use std::net::IpAddr;

use crate::cidr::{Prefix, addr128};
use crate::model::{
    ACTION_ALLOW, ACTION_PASS, ALL, CidrKey, Dir, Layer, MARK_ANP, MARK_BANP, MARK_NO_NP, PEER_ANY,
    PEER_CLASS, PEER_ISOLATED, POL_F_HF_EGRESS, POL_F_HF_INGRESS, RuleKey, RuleVal, Tables,
};
use crate::ports::{self, PortBlock};

/// The outcome of one direction's check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    /// The layer does not apply (not isolated, ungrouped, not armed).
    Open,
    /// Admitted by the rule with this id.
    Rule(u32),
    /// Refused: no rule admits it (the default deny).
    Denied,
}

impl Check {
    /// Open or admitted.
    pub fn allows(self) -> bool {
        self != Self::Denied
    }
}

/// A flow's verdict in one layer: the source's egress and the destination's ingress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// The source's egress check.
    pub egress: Check,
    /// The destination's ingress check.
    pub ingress: Check,
}

impl Verdict {
    /// Both directions allow.
    pub fn allowed(self) -> bool {
        self.egress.allows() && self.ingress.allows()
    }
}

/// `sdn_pol_rules`' longest-prefix lookup.
#[expect(
    clippy::too_many_arguments,
    reason = "the key's fields, as the datapath fills them"
)]
pub fn lookup(
    t: &Tables,
    layer: Layer,
    dir: Dir,
    net: u32,
    subject: u32,
    peer: u32,
    proto: u8,
    port: u16,
) -> Option<RuleVal> {
    let key = |b: PortBlock| RuleKey {
        layer,
        dir,
        net,
        subject,
        peer,
        proto,
        port: b,
    };
    ports::longest(|b| t.rules.get(&key(b)).copied(), port)
}

/// `sdn_pol_cidrs`' longest-prefix lookup: the class of `ip` in a scope.
pub fn class_of(t: &Tables, scope: u32, layer: Layer, ip: IpAddr) -> Option<u32> {
    let v6 = ip.is_ipv6();
    let lo = if v6 { 0 } else { 96 };
    (lo..=128u8).rev().find_map(|len| {
        let prefix = Prefix {
            v6,
            len,
            bits: addr128(ip)
                & if len == 0 {
                    0
                } else {
                    u128::MAX << (128 - u32::from(len))
                },
        };
        t.cidrs.get(&CidrKey { scope, layer, prefix }).copied()
    })
}

/// Which of the three peer lookups admitted: the peer's own token, its CIDR class, any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerMatch {
    /// The peer's own token (SG: its net and groups; NP: its identity).
    Token,
    /// The peer's CIDR class in the subject's scope.
    Class(u32),
    /// The "any peer" entry.
    Any,
}

/// The three peer lookups of an identity-less or identity-carrying peer: its own token (if
/// any), its CIDR class (if any), any. Returns the admitting rule and the lookup that found it.
#[expect(
    clippy::too_many_arguments,
    reason = "the key's fields, as the datapath fills them"
)]
fn admit_by(
    t: &Tables,
    layer: Layer,
    dir: Dir,
    net: u32,
    subject: u32,
    token: Option<(u32, u64)>,
    peer_ip: IpAddr,
    proto: u8,
    port: u16,
) -> Option<(u32, PeerMatch)> {
    let class = class_of(t, net, layer, peer_ip).map(|c| (PEER_CLASS | c, ALL, PeerMatch::Class(c)));
    token
        .map(|(p, w)| (p, w, PeerMatch::Token))
        .into_iter()
        .chain(class)
        .chain([(PEER_ANY, ALL, PeerMatch::Any)])
        .find_map(|(peer, want, how)| {
            lookup(t, layer, dir, net, subject, peer, proto, port)
                .filter(|v| v.peers & want != 0)
                .map(|v| (v.rule, how))
        })
}

#[expect(
    clippy::too_many_arguments,
    reason = "the key's fields, as the datapath fills them"
)]
fn admit(
    t: &Tables,
    layer: Layer,
    dir: Dir,
    net: u32,
    subject: u32,
    token: Option<(u32, u64)>,
    peer_ip: IpAddr,
    proto: u8,
    port: u16,
) -> Check {
    admit_by(t, layer, dir, net, subject, token, peer_ip, proto, port)
        .map_or(Check::Denied, |(r, _)| Check::Rule(r))
}

/// The default network's tier that decided one direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tier {
    /// No tier applies: the subject is not a pod with an identity, or nothing selects it.
    None,
    /// An AdminNetworkPolicy rule (its ordinal in the [`Check`]).
    Anp,
    /// NetworkPolicy (the subject is isolated in the direction).
    Np,
    /// The BaselineAdminNetworkPolicy.
    Banp,
    /// Selected by an admin tier whose rules all missed (or passed), no NetworkPolicy
    /// isolating it: admitted by default.
    Default,
}

/// One direction of the default network, with the deciding tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NpCheck {
    /// The outcome (admin rules' ordinals in `Rule`).
    pub check: Check,
    /// Who decided.
    pub tier: Tier,
}

/// The first matching admin rule of a tier: the lowest ordinal over the three peer lookups
/// (the peer's identity, its CIDR class, any), as the datapath takes it.
#[expect(
    clippy::too_many_arguments,
    reason = "the key's fields, as the datapath fills them"
)]
fn first_admin(
    t: &Tables,
    layer: Layer,
    dir: Dir,
    subject: u32,
    token: Option<u32>,
    class: Option<u32>,
    proto: u8,
    port: u16,
) -> Option<RuleVal> {
    token
        .into_iter()
        .chain(class.map(|c| PEER_CLASS | c))
        .chain([PEER_ANY])
        .filter_map(|peer| lookup(t, layer, dir, 0, subject, peer, proto, port))
        .min_by_key(|v| v.rule)
}

/// [`first_admin`] for a peer given by its address (its identity and class looked up as the
/// datapath does): the first matching rule of admin tier `layer` for subject identity
/// `subject` in `dir`, whatever its action. The trace names a `Deny` or `Pass` rule with it.
pub fn first_admin_rule(
    t: &Tables,
    layer: Layer,
    dir: Dir,
    subject: u32,
    peer: IpAddr,
    proto: u8,
    port: u16,
) -> Option<RuleVal> {
    let token = t.np_idents.get(&peer).copied();
    let class = class_of(t, 0, Layer::Np, peer);
    first_admin(t, layer, dir, subject, token, class, proto, port)
}

fn admin_check(v: RuleVal, tier: Tier) -> Option<NpCheck> {
    let check = match v.flags {
        ACTION_ALLOW => Check::Rule(v.rule),
        ACTION_PASS => return None,
        // Deny, and any action this code does not know (fail closed).
        _ => Check::Denied,
    };
    Some(NpCheck { check, tier })
}

fn np_dir(t: &Tables, dir: Dir, me: IpAddr, peer: IpAddr, proto: u8, port: u16) -> NpCheck {
    let open = |tier| NpCheck {
        check: Check::Open,
        tier,
    };
    let Some(id) = t.np_idents.get(&me).copied() else {
        return open(Tier::None);
    };
    let Some(marker) = lookup(t, Layer::Np, dir, 0, id, PEER_ISOLATED, 0, 0) else {
        return open(Tier::None);
    };
    let token = t.np_idents.get(&peer).copied();
    let class = class_of(t, 0, Layer::Np, peer);
    if marker.flags & MARK_ANP != 0
        && let Some(c) = first_admin(t, Layer::Anp, dir, id, token, class, proto, port)
            .and_then(|v| admin_check(v, Tier::Anp))
    {
        return c;
    }
    if marker.flags & MARK_NO_NP == 0 {
        return NpCheck {
            check: admit(
                t,
                Layer::Np,
                dir,
                0,
                id,
                token.map(|p| (p, ALL)),
                peer,
                proto,
                port,
            ),
            tier: Tier::Np,
        };
    }
    if marker.flags & MARK_BANP != 0
        && let Some(c) = first_admin(t, Layer::Banp, dir, id, token, class, proto, port)
            .and_then(|v| admin_check(v, Tier::Banp))
    {
        return c;
    }
    open(Tier::Default)
}

/// [`np`] with the deciding tier of each direction: `(egress, ingress)`.
pub fn np_detail(t: &Tables, src: IpAddr, dst: IpAddr, proto: u8, port: u16) -> (NpCheck, NpCheck) {
    (
        np_dir(t, Dir::Egress, src, dst, proto, port),
        np_dir(t, Dir::Ingress, dst, src, proto, port),
    )
}

/// The default network's policy (AdminNetworkPolicy, NetworkPolicy, the
/// BaselineAdminNetworkPolicy): may `src` open a flow to `dst` on `proto`/`port` (ICMP:
/// `type << 8 | code`)? For each direction the subject's ANP rules first (the first match
/// decides; `Pass` ends the tier), then NetworkPolicy if one isolates it, else the BANP's
/// first match, else open. Addresses without an identity (nodes, hostNetwork pods, the
/// outside) are checked by CIDR class only and are never subjects.
pub fn np(t: &Tables, src: IpAddr, dst: IpAddr, proto: u8, port: u16) -> Verdict {
    let (e, i) = np_detail(t, src, dst, proto, port);
    Verdict {
        egress: e.check,
        ingress: i.check,
    }
}

/// An endpoint of a VPC net.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// The net (VNI).
    pub net: u32,
    /// The address in it.
    pub ip: IpAddr,
}

/// One direction of a SecurityGroup verdict, with what decided it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SgCheck {
    /// The outcome, as [`sg`] gives it.
    pub check: Check,
    /// The subject's groups (`sdn_sg_members`; 0: ungrouped, open).
    pub groups: u64,
    /// The admitting group of the subject (the first, in id order, as the datapath's loop)
    /// and the lookup that found its rule; `None` unless admitted.
    pub by: Option<(u32, PeerMatch)>,
}

/// A SecurityGroup verdict with its deciding groups: the trace API's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SgDetail {
    /// The source's egress.
    pub egress: SgCheck,
    /// The destination's ingress.
    pub ingress: SgCheck,
}

impl SgDetail {
    /// The plain verdict.
    pub fn verdict(&self) -> Verdict {
        Verdict {
            egress: self.egress.check,
            ingress: self.ingress.check,
        }
    }
}

/// SecurityGroups: may `src` open a flow to `dst`? Groups come from `sdn_sg_members`
/// (across nodes, the tunnel option carries the source's, with the same value). A side
/// with no groups is open in its direction; an address outside every VPC (north-south) is
/// given with the net of the side it talks to and no groups.
pub fn sg(t: &Tables, src: Endpoint, dst: Endpoint, proto: u8, port: u16) -> Verdict {
    sg_detail(t, src, dst, proto, port).verdict()
}

/// [`sg`] with what decided each direction: the subject's groups, and for an admitted
/// direction the group whose rule admitted it and which peer lookup matched.
pub fn sg_detail(t: &Tables, src: Endpoint, dst: Endpoint, proto: u8, port: u16) -> SgDetail {
    let groups = |e: Endpoint| t.sg_members.get(&(e.net, e.ip)).copied().unwrap_or(0);
    let check = |dir: Dir, me: Endpoint, peer: Endpoint| {
        let mine = groups(me);
        if mine == 0 {
            return SgCheck {
                check: Check::Open,
                groups: 0,
                by: None,
            };
        }
        let theirs = groups(peer);
        let token = (theirs != 0).then_some((peer.net, theirs));
        (1..63u32)
            .filter(|g| mine & (1 << g) != 0)
            .find_map(|g| {
                admit_by(t, Layer::Sg, dir, me.net, g, token, peer.ip, proto, port).map(|(r, how)| SgCheck {
                    check: Check::Rule(r),
                    groups: mine,
                    by: Some((g, how)),
                })
            })
            .unwrap_or(SgCheck {
                check: Check::Denied,
                groups: mine,
                by: None,
            })
    };
    SgDetail {
        egress: check(Dir::Egress, src, dst),
        ingress: check(Dir::Ingress, dst, src),
    }
}

/// HostFirewall on a node whose addresses are `t.hf_self`: may `src` open a flow to `dst`?
/// Only the node's side is checked (ingress when `dst` is the node, egress when `src`
/// is), and only when that direction is armed.
pub fn hf(t: &Tables, src: IpAddr, dst: IpAddr, proto: u8, port: u16) -> Verdict {
    let me = |ip: &IpAddr| t.hf_self.contains(ip);
    let check = |dir: Dir, flag: u32, node: IpAddr, peer: IpAddr| {
        if !me(&node) || t.state_flags & flag == 0 {
            return Check::Open;
        }
        admit(t, Layer::Hf, dir, 0, 0, None, peer, proto, port)
    };
    Verdict {
        egress: check(Dir::Egress, POL_F_HF_EGRESS, src, dst),
        ingress: check(Dir::Ingress, POL_F_HF_INGRESS, dst, src),
    }
}

/// Every address of `t` that names a pod of the default network (for tests and tools).
pub fn np_addresses(t: &Tables) -> BTreeSet<IpAddr> {
    t.np_idents.keys().copied().collect()
}
