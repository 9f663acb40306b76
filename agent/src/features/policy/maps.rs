//! The policy maps as the writer sees them: one small trait ([`PolicyMaps`]) in the
//! compiler's own types, implemented over the pinned maps ([`Pinned`]) and, for tests, over
//! an in-memory copy ([`Memory`]). Conversions to and from `cozyplane-bpf`'s ABI structs
//! live here and nowhere else.

use std::net::IpAddr;
use std::path::Path;

use aya::maps::{MapData, MapError};
use cozyplane_bpf::abi::{
    Addr, EpKey, HfSelf, NpIdent, Pcidr, PcidrKey, PolState, Prule, PruleKey, SgMember,
};
use cozyplane_bpf::maps::{
    hf_self::HfSelfMap, np_idents::NpIdentsMap, pol_cidrs::PolCidrsMap, pol_rules::PolRulesMap,
    pol_state::PolStateMap, sg_members::SgMembersMap,
};
use cozyplane_policy::cidr::Prefix;
use cozyplane_policy::model::{CidrKey, Dir, Layer, RuleKey, RuleVal, Tables};
use cozyplane_policy::ports::PortBlock;

use super::PolicyError;

/// One write or delete of one entry, or a state change: what [`super::apply`] does, in
/// order. Tests replay these to look at every intermediate state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Write a rule.
    Rule(RuleKey, RuleVal),
    /// Delete a rule.
    Unrule(RuleKey),
    /// Write a CIDR class.
    Cidr(CidrKey, u32),
    /// Delete a CIDR class.
    Uncidr(CidrKey),
    /// Write an endpoint's groups.
    Member((u32, IpAddr), u64),
    /// Delete an endpoint's groups.
    Unmember((u32, IpAddr)),
    /// Write an address's identity.
    Ident(IpAddr, u32),
    /// Delete an address's identity.
    Unident(IpAddr),
    /// Add one of this node's addresses.
    SelfAddr(IpAddr),
    /// Remove one of this node's addresses.
    Unself(IpAddr),
    /// Set the armed layers (`sdn_pol_state.flags`), keeping the generation.
    Flags(u32),
    /// Bump `sdn_pol_state.generation`.
    Bump,
}

/// Where the policy entries are written.
pub trait PolicyMaps {
    /// Perform one operation.
    fn op(&mut self, op: &Op) -> Result<(), PolicyError>;
    /// Everything the maps hold now, in the compiler's types, and how many entries could not
    /// be read as any (an unknown layer, a malformed prefix length): those are removed by
    /// [`PolicyMaps::purge_unreadable`].
    fn read(&self) -> Result<(Tables, usize), PolicyError>;
    /// Remove the entries [`PolicyMaps::read`] could not read.
    fn purge_unreadable(&mut self) -> Result<usize, PolicyError>;
    /// The current generation.
    fn generation(&self) -> Result<u32, PolicyError>;
}

/// The model's rule key as the datapath's: `prefixlen` = 128 fixed bits + the port block's
/// length, the port in network order.
pub fn rule_key(k: &RuleKey) -> PruleKey {
    PruleKey {
        prefixlen: cozyplane_bpf::abi::PRULE_FIXED_BITS + u32::from(k.port.len),
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

fn layer_of(b: u8) -> Option<Layer> {
    match b {
        1 => Some(Layer::Sg),
        2 => Some(Layer::Np),
        3 => Some(Layer::Hf),
        4 => Some(Layer::Anp),
        5 => Some(Layer::Banp),
        _ => None,
    }
}

/// The model's rule value as the datapath's, `flags` included (an admin entry's action, an
/// isolation marker's tiers).
pub fn prule(v: &RuleVal) -> Prule {
    Prule {
        peers: v.peers,
        rule: v.rule,
        flags: v.flags,
    }
}

/// The inverse of [`prule`].
pub fn rule_val(p: &Prule) -> RuleVal {
    RuleVal {
        peers: p.peers,
        rule: p.rule,
        flags: p.flags,
    }
}

/// The inverse of [`rule_key`]; `None` for a key this agent would never write.
pub fn rule_of(k: &PruleKey) -> Option<RuleKey> {
    let len = k
        .prefixlen
        .checked_sub(cozyplane_bpf::abi::PRULE_FIXED_BITS)
        .filter(|l| *l <= 16)?;
    let dir = match k.dir {
        0 => Dir::Ingress,
        1 => Dir::Egress,
        _ => return None,
    };
    let port = PortBlock::containing(u16::from_be(k.port), len as u8);
    (port.value == u16::from_be(k.port) && k.pad == 0 && k.pad2 == [0; 2]).then_some(RuleKey {
        layer: layer_of(k.layer)?,
        dir,
        net: k.net,
        subject: k.subject,
        peer: k.peer,
        proto: k.proto,
        port,
    })
}

/// The model's class key as the datapath's: `prefixlen` = 64 key bits + the prefix length
/// of the 128-bit address.
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

/// The inverse of [`cidr_key`]; `None` for a key this agent would never write.
pub fn cidr_of(k: &PcidrKey) -> Option<CidrKey> {
    let len = u8::try_from(k.prefixlen.checked_sub(64)?)
        .ok()
        .filter(|l| *l <= 128)?;
    let bits = u128::from_be_bytes(k.ip.b);
    let masked = if len == 0 {
        0
    } else {
        bits & (u128::MAX << (128 - u32::from(len)))
    };
    (masked == bits && k.v6 <= 1 && k.pad == [0; 2]).then_some(CidrKey {
        scope: k.scope,
        layer: layer_of(k.layer)?,
        prefix: Prefix {
            v6: k.v6 == 1,
            len,
            bits,
        },
    })
}

/// The six maps the agent writes (the connection table is the datapath's own), opened from
/// the pins.
pub struct Pinned {
    rules: PolRulesMap<MapData>,
    cidrs: PolCidrsMap<MapData>,
    members: SgMembersMap<MapData>,
    idents: NpIdentsMap<MapData>,
    hf_self: HfSelfMap<MapData>,
    state: PolStateMap<MapData>,
}

fn open<T>(name: &'static str, r: Result<T, MapError>) -> Result<T, PolicyError> {
    r.map_err(|source| PolicyError::NotPinned { map: name, source })
}

fn io(map: &'static str) -> impl Fn(MapError) -> PolicyError {
    move |source| PolicyError::Map { map, source }
}

impl Pinned {
    /// Open the maps pinned in `dir`. Fails with [`PolicyError::NotPinned`] when the datapath
    /// creates no policy maps (an object without `policy_maps.h`).
    pub fn open(dir: &Path) -> Result<Self, PolicyError> {
        use cozyplane_bpf::maps::{hf_self, np_idents, pol_cidrs, pol_rules, pol_state, sg_members};
        Ok(Self {
            rules: open(pol_rules::NAME, PolRulesMap::from_pin(dir))?,
            cidrs: open(pol_cidrs::NAME, PolCidrsMap::from_pin(dir))?,
            members: open(sg_members::NAME, SgMembersMap::from_pin(dir))?,
            idents: open(np_idents::NAME, NpIdentsMap::from_pin(dir))?,
            hf_self: open(hf_self::NAME, HfSelfMap::from_pin(dir))?,
            state: open(pol_state::NAME, PolStateMap::from_pin(dir))?,
        })
    }
}

impl PolicyMaps for Pinned {
    fn op(&mut self, op: &Op) -> Result<(), PolicyError> {
        use cozyplane_bpf::maps::{hf_self, np_idents, pol_cidrs, pol_rules, pol_state, sg_members};
        match op {
            Op::Rule(k, v) => self
                .rules
                .upsert(&rule_key(k), prule(v))
                .map_err(io(pol_rules::NAME)),
            Op::Unrule(k) => self.rules.remove(&rule_key(k)).map_err(io(pol_rules::NAME)),
            Op::Cidr(k, class) => self
                .cidrs
                .upsert(
                    &cidr_key(k),
                    Pcidr {
                        class: *class,
                        flags: 0,
                    },
                )
                .map_err(io(pol_cidrs::NAME)),
            Op::Uncidr(k) => self.cidrs.remove(&cidr_key(k)).map_err(io(pol_cidrs::NAME)),
            Op::Member((net, ip), groups) => self
                .members
                .upsert(
                    EpKey {
                        net: *net,
                        ip: (*ip).into(),
                    },
                    SgMember { groups: *groups },
                )
                .map_err(io(sg_members::NAME)),
            Op::Unmember((net, ip)) => self
                .members
                .remove(&EpKey {
                    net: *net,
                    ip: (*ip).into(),
                })
                .map_err(io(sg_members::NAME)),
            Op::Ident(ip, id) => self
                .idents
                .upsert((*ip).into(), NpIdent { id: *id, flags: 0 })
                .map_err(io(np_idents::NAME)),
            Op::Unident(ip) => self.idents.remove(&(*ip).into()).map_err(io(np_idents::NAME)),
            Op::SelfAddr(ip) => self
                .hf_self
                .upsert((*ip).into(), HfSelf { flags: 0 })
                .map_err(io(hf_self::NAME)),
            Op::Unself(ip) => self.hf_self.remove(&(*ip).into()).map_err(io(hf_self::NAME)),
            Op::Flags(flags) => {
                let s = self.state.get().map_err(io(pol_state::NAME))?;
                self.state
                    .set(PolState {
                        generation: s.generation,
                        flags: *flags,
                    })
                    .map_err(io(pol_state::NAME))
            }
            Op::Bump => self.state.bump().map(drop).map_err(io(pol_state::NAME)),
        }
    }

    fn read(&self) -> Result<(Tables, usize), PolicyError> {
        use cozyplane_bpf::maps::{hf_self, np_idents, pol_cidrs, pol_rules, pol_state, sg_members};
        let mut t = Tables::default();
        let mut bad = 0;
        for (k, v) in self.rules.entries().map_err(io(pol_rules::NAME))? {
            match rule_of(&k) {
                Some(k) => {
                    t.rules.insert(k, rule_val(&v));
                }
                None => bad += 1,
            }
        }
        for (k, v) in self.cidrs.entries().map_err(io(pol_cidrs::NAME))? {
            match cidr_of(&k) {
                Some(k) => {
                    t.cidrs.insert(k, v.class);
                }
                None => bad += 1,
            }
        }
        for (k, v) in self.members.entries().map_err(io(sg_members::NAME))? {
            t.sg_members.insert((k.net, IpAddr::from(k.ip)), v.groups);
        }
        for (k, v) in self.idents.entries().map_err(io(np_idents::NAME))? {
            t.np_idents.insert(IpAddr::from(k), v.id);
        }
        for (k, _) in self.hf_self.entries().map_err(io(hf_self::NAME))? {
            t.hf_self.insert(IpAddr::from(k));
        }
        t.state_flags = self.state.get().map_err(io(pol_state::NAME))?.flags;
        Ok((t, bad))
    }

    fn purge_unreadable(&mut self) -> Result<usize, PolicyError> {
        use cozyplane_bpf::maps::{pol_cidrs, pol_rules};
        let mut n = 0;
        let rules: Vec<PruleKey> = self
            .rules
            .entries()
            .map_err(io(pol_rules::NAME))?
            .into_iter()
            .filter(|(k, _)| rule_of(k).is_none())
            .map(|(k, _)| k)
            .collect();
        for k in rules {
            self.rules.remove(&k).map_err(io(pol_rules::NAME))?;
            n += 1;
        }
        let cidrs: Vec<PcidrKey> = self
            .cidrs
            .entries()
            .map_err(io(pol_cidrs::NAME))?
            .into_iter()
            .filter(|(k, _)| cidr_of(k).is_none())
            .map(|(k, _)| k)
            .collect();
        for k in cidrs {
            self.cidrs.remove(&k).map_err(io(pol_cidrs::NAME))?;
            n += 1;
        }
        Ok(n)
    }

    fn generation(&self) -> Result<u32, PolicyError> {
        Ok(self
            .state
            .get()
            .map_err(io(cozyplane_bpf::maps::pol_state::NAME))?
            .generation)
    }
}

/// The maps in memory: what the tests check the writer against, operation by operation.
#[derive(Clone, Debug, Default)]
pub struct Memory {
    /// The entries.
    pub tables: Tables,
    /// `sdn_pol_state.generation`.
    pub generation: u32,
    /// Every operation performed, in order.
    pub log: Vec<Op>,
}

impl Memory {
    /// Apply `op` to `t` (and the generation).
    pub fn step(t: &mut Tables, generation: &mut u32, op: &Op) {
        match op {
            Op::Rule(k, v) => {
                t.rules.insert(*k, *v);
            }
            Op::Unrule(k) => {
                t.rules.remove(k);
            }
            Op::Cidr(k, c) => {
                t.cidrs.insert(*k, *c);
            }
            Op::Uncidr(k) => {
                t.cidrs.remove(k);
            }
            Op::Member(k, g) => {
                t.sg_members.insert(*k, *g);
            }
            Op::Unmember(k) => {
                t.sg_members.remove(k);
            }
            Op::Ident(ip, id) => {
                t.np_idents.insert(*ip, *id);
            }
            Op::Unident(ip) => {
                t.np_idents.remove(ip);
            }
            Op::SelfAddr(ip) => {
                t.hf_self.insert(*ip);
            }
            Op::Unself(ip) => {
                t.hf_self.remove(ip);
            }
            Op::Flags(f) => t.state_flags = *f,
            Op::Bump => *generation = generation.wrapping_add(1),
        }
    }
}

impl PolicyMaps for Memory {
    fn op(&mut self, op: &Op) -> Result<(), PolicyError> {
        Self::step(&mut self.tables, &mut self.generation, op);
        self.log.push(op.clone());
        Ok(())
    }

    fn read(&self) -> Result<(Tables, usize), PolicyError> {
        Ok((self.tables.clone(), 0))
    }

    fn purge_unreadable(&mut self) -> Result<usize, PolicyError> {
        Ok(0)
    }

    fn generation(&self) -> Result<u32, PolicyError> {
        Ok(self.generation)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_through_the_abi() {
        let r = RuleKey {
            layer: Layer::Np,
            dir: Dir::Egress,
            net: 0,
            subject: 77,
            peer: cozyplane_policy::model::PEER_CLASS | 9,
            proto: 6,
            port: PortBlock::containing(8080, 12),
        };
        let abi = rule_key(&r);
        assert_eq!(abi.prefixlen, 128 + 12);
        // The admin tiers' layers, and the value's flags both ways.
        for layer in [Layer::Anp, Layer::Banp] {
            let k = RuleKey { layer, ..r };
            assert_eq!(rule_of(&rule_key(&k)), Some(k), "{layer:?}");
        }
        let v = RuleVal {
            peers: cozyplane_policy::model::ALL,
            rule: 7 << 20,
            flags: cozyplane_policy::model::ACTION_PASS,
        };
        assert_eq!(prule(&v).flags, cozyplane_bpf::abi::ACTION_PASS);
        assert_eq!(rule_val(&prule(&v)), v);
        assert_eq!(abi.port, 8080u16.to_be(), "the port is in network order");
        assert_eq!(rule_of(&abi), Some(r));
        let c = CidrKey {
            scope: 5,
            layer: Layer::Sg,
            prefix: Prefix::new("10.1.0.0".parse().unwrap(), 24),
        };
        let abi = cidr_key(&c);
        assert_eq!(abi.prefixlen, 64 + 96 + 24, "docs: an IPv4 /24 is 64 + 96 + 24");
        assert_eq!(abi.ip, Addr::from("10.1.0.0".parse::<IpAddr>().unwrap()));
        assert_eq!(cidr_of(&abi), Some(c));
        // What this agent never writes does not read back as anything.
        assert_eq!(
            rule_of(&PruleKey {
                layer: 9,
                ..rule_key(&r)
            }),
            None
        );
        assert_eq!(
            rule_of(&PruleKey {
                prefixlen: 100,
                ..rule_key(&r)
            }),
            None
        );
        assert_eq!(
            cidr_of(&PcidrKey {
                prefixlen: 10,
                ..cidr_key(&c)
            }),
            None
        );
    }
}
