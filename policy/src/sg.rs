//! SecurityGroups in VPC nets: groups and Ports in; `sdn_pol_rules` (layer SG, one
//! partition per VPC net), `sdn_pol_cidrs` (scope = net) and `sdn_sg_members` out.
//!
//! A grouped endpoint is default-deny both ways; each rule of each of its groups reopens
//! traffic from/to a group of this VPC (token = this net, value = the group's bit), a group
//! of a peered VPC (token = that net) or a CIDR (a class of this net's scope). A change to
//! a group recompiles its VPC's partition (and those of VPCs whose rules name it); a
//! change to a Port's groups rewrites only its member entries.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use cozyplane_apis::v1alpha1::{Port, SecurityGroup, SecurityGroupPeer, SecurityGroupPort};

use crate::cidr::{Block, Prefix};
use crate::classes::{self, Contrib, WHOLE};
use crate::error::{Reason, Warning};
use crate::identity;
use crate::model::{CidrKey, Diff, Dir, Layer, MapDiff, RuleKey, RuleVal, Tables, proto};
use crate::ports::{self, PortBlock, ProtoBlocks};
use crate::verdict::PeerMatch;

type ObjKey = (String, String);

/// A rule of a SecurityGroup: `namespace/name spec.<dir>[index]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleRef {
    /// The group's namespace.
    pub namespace: String,
    /// The group's name.
    pub name: String,
    /// The group's VPC (in the same namespace).
    pub vpc: String,
    /// `spec.ingress` or `spec.egress`.
    pub dir: Dir,
    /// The index in that list.
    pub index: usize,
}
/// `sdn_sg_members` entries: `(net, address)` → groups.
type Members = BTreeMap<(u32, IpAddr), u64>;

/// Group ids a VPC may use; 63 is reserved.
const GROUP_IDS: std::ops::RangeInclusive<i32> = 1..=62;

#[derive(Clone, Debug, Default)]
struct Partition {
    rules: BTreeMap<RuleKey, RuleVal>,
    cidrs: BTreeMap<CidrKey, u32>,
    /// Rule id → where the rule is, for the trace.
    names: BTreeMap<u32, String>,
}

/// The SecurityGroup compiler.
#[derive(Clone, Debug, Default)]
pub struct SgCompiler {
    vpcs: BTreeMap<ObjKey, u32>,
    groups: BTreeMap<ObjKey, SecurityGroup>,
    /// Port name → the Port and its member entries.
    ports: BTreeMap<String, (Port, Members)>,
    members: BTreeMap<(u32, IpAddr), u64>,
    parts: BTreeMap<u32, Partition>,
    warnings: BTreeMap<ObjKey, Vec<Warning>>,
}

/// A rule's id: stable, nonzero.
pub fn rule_id(ns: &str, name: &str, dir: Dir, index: usize) -> u32 {
    let h = identity::fnv(&[
        b"sg",
        ns.as_bytes(),
        name.as_bytes(),
        &[dir as u8],
        &index.to_be_bytes(),
    ]);
    ((h ^ (h >> 32)) as u32).max(1)
}

impl SgCompiler {
    /// An empty compiler.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every entry this compiler owns.
    pub fn tables(&self) -> Tables {
        Tables {
            rules: self
                .parts
                .values()
                .flat_map(|p| p.rules.iter().map(|(k, v)| (*k, *v)))
                .collect(),
            cidrs: self
                .parts
                .values()
                .flat_map(|p| p.cidrs.iter().map(|(k, v)| (*k, *v)))
                .collect(),
            sg_members: self.members.clone(),
            ..Tables::default()
        }
    }

    /// What was refused.
    pub fn warnings(&self) -> impl Iterator<Item = &Warning> {
        self.warnings.values().flatten()
    }

    /// A VPC and its net (VNI); every partition and member entry is recompiled (VPCs
    /// change rarely).
    pub fn set_vpc(&mut self, ns: &str, name: &str, net: u32) -> Diff {
        self.vpcs.insert((ns.into(), name.into()), net);
        self.refresh_vpcs()
    }

    /// A VPC is gone.
    pub fn remove_vpc(&mut self, ns: &str, name: &str) -> Diff {
        self.vpcs.remove(&(ns.to_string(), name.to_string()));
        self.refresh_vpcs()
    }

    /// A compiler holding `vpcs` (`(namespace, name, net)`), `groups` and `ports`, compiled
    /// once: the same tables as feeding them one by one (in any order), without recompiling
    /// a partition per group.
    pub fn build<'a>(
        vpcs: impl IntoIterator<Item = (String, String, u32)>,
        groups: impl IntoIterator<Item = &'a SecurityGroup>,
        ports: impl IntoIterator<Item = &'a Port>,
    ) -> Self {
        let mut c = Self::new();
        c.vpcs = vpcs
            .into_iter()
            .map(|(ns, name, net)| ((ns, name), net))
            .collect();
        c.groups = groups.into_iter().map(|g| (obj_key(g), g.clone())).collect();
        c.recompile_all();
        for p in ports {
            c.set_port(p);
        }
        c
    }

    /// The rule of group `group` of net `net` that admits `peer` (in `peer_groups`) in
    /// direction `dir` on `proto`/`port`, found the way [`verdict::sg_detail`] found the
    /// group (`how`: by the peer's groups or by its CIDR class): the first such rule of the
    /// group in the order of its spec. The compiled entry records only the lowest id of the
    /// rules merged into it, which need not be one that names this peer; this names one
    /// that does.
    ///
    /// [`verdict::sg_detail`]: crate::verdict::sg_detail
    #[expect(clippy::too_many_arguments, reason = "a verdict's fields")]
    pub fn explain(
        &self,
        net: u32,
        dir: Dir,
        group: u32,
        how: PeerMatch,
        peer: (u32, IpAddr, u64),
        proto: u8,
        port: u16,
    ) -> Option<RuleRef> {
        let (peer_net, peer_ip, peer_groups) = peer;
        self.groups
            .iter()
            .filter(|(_, g)| {
                self.net_of_group(g) == Some(net) && g.status.as_ref().map_or(0, |s| s.id) == group as i32
            })
            .find_map(|(key, g)| {
                let rules: Vec<(&SecurityGroupPeer, &Vec<SecurityGroupPort>)> = match dir {
                    Dir::Ingress => g.spec.ingress.iter().map(|r| (&r.from, &r.ports)).collect(),
                    Dir::Egress => g.spec.egress.iter().map(|r| (&r.to, &r.ports)).collect(),
                };
                rules.into_iter().enumerate().find_map(|(index, (p, list))| {
                    let peer_ok = match how {
                        PeerMatch::Token => {
                            !p.group.is_empty()
                                && self.resolve_group(p, &key.0).is_some_and(|(pn, pid)| {
                                    pn == peer_net && peer_groups & (1u64 << pid) != 0
                                })
                        }
                        PeerMatch::Class(_) => {
                            p.group.is_empty() && p.cidr.parse::<Prefix>().is_ok_and(|c| c.contains(peer_ip))
                        }
                        PeerMatch::Any => false,
                    };
                    let specs = port_specs(list).unwrap_or_else(|_| port_specs_ok(list));
                    let port_ok = specs
                        .iter()
                        .any(|(pr, blocks)| *pr == proto && blocks.iter().any(|b| b.contains(port)));
                    (peer_ok && port_ok).then(|| RuleRef {
                        namespace: key.0.clone(),
                        name: key.1.clone(),
                        vpc: g.spec.vpc_ref.name.clone(),
                        dir,
                        index,
                    })
                })
            })
    }

    /// Where rule `id` is (`SecurityGroup ns/name spec.ingress[i]`), for the trace.
    pub fn rule_name(&self, id: u32) -> Option<&str> {
        self.parts
            .values()
            .find_map(|p| p.names.get(&id))
            .map(String::as_str)
    }

    fn refresh_vpcs(&mut self) -> Diff {
        let mut d = self.recompile_all();
        let ports: Vec<Port> = self.ports.values().map(|(p, _)| p.clone()).collect();
        for p in &ports {
            let m = self.set_port(p).sg_members;
            d.sg_members.upsert.extend(m.upsert);
            d.sg_members.remove.extend(m.remove);
            d.sg_members.overwrote |= m.overwrote;
        }
        d
    }

    /// Create or replace a group.
    pub fn set_group(&mut self, sg: &SecurityGroup) -> Diff {
        let key = obj_key(sg);
        let old = self.groups.insert(key.clone(), sg.clone());
        let mut nets = self.nets_touched_by(&key);
        nets.extend(old.as_ref().and_then(|o| self.net_of_group(o)));
        self.recompile(&nets)
    }

    /// Delete a group.
    pub fn remove_group(&mut self, ns: &str, name: &str) -> Diff {
        let key = (ns.to_string(), name.to_string());
        let mut nets = self.nets_touched_by(&key);
        if let Some(old) = self.groups.remove(&key) {
            nets.extend(self.net_of_group(&old));
        }
        self.recompile(&nets)
    }

    /// Create or replace a Port: its address's groups (`status.groups`).
    pub fn set_port(&mut self, p: &Port) -> Diff {
        let name = p.metadata.name.clone().unwrap_or_default();
        self.ports
            .entry(name.clone())
            .or_insert_with(|| (p.clone(), BTreeMap::new()))
            .0 = p.clone();
        let vpc = (p.spec.vpc_ref.namespace.clone(), p.spec.vpc_ref.name.clone());
        let mut entries = BTreeMap::new();
        if let (Some(net), Ok(ip)) = (self.vpcs.get(&vpc), p.spec.ip.parse::<IpAddr>()) {
            let groups = p
                .status
                .iter()
                .flat_map(|s| &s.groups)
                .filter(|g| GROUP_IDS.contains(g))
                .fold(0u64, |m, g| m | 1 << g);
            if groups != 0 {
                entries.insert((*net, ip), groups);
            }
        }
        self.port_entries(&name, entries)
    }

    /// Delete a Port.
    pub fn remove_port(&mut self, name: &str) -> Diff {
        let d = self.port_entries(name, BTreeMap::new());
        self.ports.remove(name);
        d
    }

    fn port_entries(&mut self, name: &str, new: Members) -> Diff {
        let Some((_, slot)) = self.ports.get_mut(name) else {
            return Diff::default();
        };
        let old = std::mem::replace(slot, new);
        let d = MapDiff::between(&old, slot);
        for k in old.keys() {
            self.members.remove(k);
        }
        self.members.extend(slot.iter().map(|(k, v)| (*k, *v)));
        Diff {
            sg_members: d,
            ..Diff::default()
        }
    }

    fn net_of_group(&self, sg: &SecurityGroup) -> Option<u32> {
        let ns = sg.metadata.namespace.clone().unwrap_or_default();
        self.vpcs.get(&(ns, sg.spec.vpc_ref.name.clone())).copied()
    }

    /// The nets whose partitions name group `key`: its own and those of groups whose rules
    /// refer to it.
    fn nets_touched_by(&self, key: &ObjKey) -> BTreeSet<u32> {
        let mut nets: BTreeSet<u32> = self
            .groups
            .get(key)
            .and_then(|g| self.net_of_group(g))
            .into_iter()
            .collect();
        for g in self.groups.values() {
            let gns = g.metadata.namespace.clone().unwrap_or_default();
            let names_it = g
                .spec
                .ingress
                .iter()
                .map(|r| &r.from)
                .chain(g.spec.egress.iter().map(|r| &r.to))
                .any(|p| !p.group.is_empty() && peer_group_key(p, &gns) == *key);
            if names_it {
                nets.extend(self.net_of_group(g));
            }
        }
        nets
    }

    fn recompile_all(&mut self) -> Diff {
        let mut nets: BTreeSet<u32> = self.parts.keys().copied().collect();
        nets.extend(self.vpcs.values().copied());
        self.recompile(&nets)
    }

    fn recompile(&mut self, nets: &BTreeSet<u32>) -> Diff {
        let mut d = Diff::default();
        for net in nets {
            let new = self.compile_net(*net);
            let old = self.parts.remove(net).unwrap_or_default();
            d.rules.add_between(&old.rules, &new.rules);
            d.cidrs.add_between(&old.cidrs, &new.cidrs);
            if !new.rules.is_empty() || !new.cidrs.is_empty() {
                self.parts.insert(*net, new);
            }
        }
        d
    }

    fn compile_net(&mut self, net: u32) -> Partition {
        let mine: Vec<(ObjKey, SecurityGroup)> = self
            .groups
            .iter()
            .filter(|(_, g)| self.net_of_group(g) == Some(net))
            .map(|(k, g)| (k.clone(), g.clone()))
            .collect();
        let mut blocks = Vec::new();
        for (_, g) in &mine {
            for p in g
                .spec
                .ingress
                .iter()
                .map(|r| &r.from)
                .chain(g.spec.egress.iter().map(|r| &r.to))
            {
                if p.group.is_empty()
                    && let Ok(cidr) = p.cidr.parse::<Prefix>()
                {
                    blocks.push(Block { cidr, except: vec![] });
                }
            }
        }
        let class_map = classes::assign(net, Layer::Sg, &blocks.iter().collect::<Vec<_>>());
        let mut contrib = Contrib::default();
        let mut names = BTreeMap::new();
        for (key, g) in &mine {
            let object = format!("SecurityGroup {}/{}", key.0, key.1);
            let mut warns = Vec::new();
            let id = g.status.as_ref().map_or(0, |s| s.id);
            if !GROUP_IDS.contains(&id) {
                self.warnings.remove(key);
                continue;
            }
            let rules = g
                .spec
                .ingress
                .iter()
                .map(|r| (Dir::Ingress, &r.from, &r.ports))
                .chain(g.spec.egress.iter().map(|r| (Dir::Egress, &r.to, &r.ports)));
            let (mut i_in, mut i_eg) = (0, 0);
            for (dir, peer, port_list) in rules {
                let idx = match dir {
                    Dir::Ingress => &mut i_in,
                    Dir::Egress => &mut i_eg,
                };
                let here = format!(
                    "spec.{}[{idx}]",
                    if dir == Dir::Ingress { "ingress" } else { "egress" }
                );
                *idx += 1;
                let rid = rule_id(&key.0, &key.1, dir, *idx - 1);
                names.insert(rid, format!("{object} {here}"));
                let tokens: Vec<(u32, u64)> = if !peer.group.is_empty() {
                    match self.resolve_group(peer, &key.0) {
                        Some((pnet, pid)) => vec![(pnet, 1u64 << pid)],
                        None => {
                            let gk = peer_group_key(peer, &key.0);
                            warns.push(Warning {
                                object: object.clone(),
                                field: format!("{here}.group"),
                                reason: Reason::UnknownGroup(format!("{}/{}", gk.0, gk.1)),
                            });
                            vec![]
                        }
                    }
                } else {
                    match peer.cidr.parse::<Prefix>() {
                        Ok(cidr) => classes::tokens(&Block { cidr, except: vec![] }, &class_map)
                            .into_iter()
                            .map(|t| (t, WHOLE))
                            .collect(),
                        Err(_) => {
                            warns.push(Warning {
                                object: object.clone(),
                                field: format!("{here}.cidr"),
                                reason: Reason::Cidr(peer.cidr.clone()),
                            });
                            vec![]
                        }
                    }
                };
                let specs = match port_specs(port_list) {
                    Ok(s) => s,
                    Err(errs) => {
                        for (j, r) in &errs {
                            warns.push(Warning {
                                object: object.clone(),
                                field: format!("{here}.ports[{j}]"),
                                reason: r.clone(),
                            });
                        }
                        port_specs_ok(port_list)
                    }
                };
                for (pr, blocks) in &specs {
                    for (t, bits) in &tokens {
                        contrib.add(dir, id as u32, *t, *pr, blocks, *bits, rid);
                    }
                }
            }
            if warns.is_empty() {
                self.warnings.remove(key);
            } else {
                self.warnings.insert(key.clone(), warns);
            }
        }
        Partition {
            rules: contrib.entries(Layer::Sg, net),
            cidrs: classes::cidr_entries(net, Layer::Sg, &class_map),
            names,
        }
    }

    /// `(net, id)` of the group a peer names.
    fn resolve_group(&self, peer: &SecurityGroupPeer, ns: &str) -> Option<(u32, i32)> {
        let key = peer_group_key(peer, ns);
        let g = self.groups.get(&key)?;
        let id = g.status.as_ref().map_or(0, |s| s.id);
        let net = self.net_of_group(g)?;
        if let Some(v) = &peer.vpc
            && self.vpcs.get(&(v.namespace.clone(), v.name.clone())) != Some(&net)
        {
            return None;
        }
        GROUP_IDS.contains(&id).then_some((net, id))
    }
}

fn obj_key(sg: &SecurityGroup) -> ObjKey {
    (
        sg.metadata.namespace.clone().unwrap_or_default(),
        sg.metadata.name.clone().unwrap_or_default(),
    )
}

fn peer_group_key(p: &SecurityGroupPeer, ns: &str) -> ObjKey {
    match &p.vpc {
        Some(v) => (v.namespace.clone(), p.group.clone()),
        None => (ns.to_string(), p.group.clone()),
    }
}

/// `(proto, port blocks)` of a rule's ports; empty allows every port of TCP, UDP, SCTP and
/// every ICMP/ICMPv6 type. ICMP: `port` is the type (any code), 0 any type.
fn port_specs(list: &[SecurityGroupPort]) -> Result<Vec<ProtoBlocks>, Vec<(usize, Reason)>> {
    if list.is_empty() {
        return Ok([proto::TCP, proto::UDP, proto::SCTP, proto::ICMP, proto::ICMPV6]
            .into_iter()
            .map(|p| (p, vec![PortBlock::ANY]))
            .collect());
    }
    let mut out = Vec::new();
    let mut errs = Vec::new();
    for (j, p) in list.iter().enumerate() {
        match one_port(p) {
            Ok(s) => out.push(s),
            Err(r) => errs.push((j, r)),
        }
    }
    if errs.is_empty() { Ok(out) } else { Err(errs) }
}

/// The accepted entries only (a refused entry allows nothing; if all are refused, the rule
/// allows nothing).
fn port_specs_ok(list: &[SecurityGroupPort]) -> Vec<ProtoBlocks> {
    list.iter().filter_map(|p| one_port(p).ok()).collect()
}

fn one_port(p: &SecurityGroupPort) -> Result<ProtoBlocks, Reason> {
    let pr = match p.protocol.as_str() {
        "TCP" => proto::TCP,
        "UDP" => proto::UDP,
        "SCTP" => proto::SCTP,
        "ICMP" => proto::ICMP,
        "ICMPv6" => proto::ICMPV6,
        other => return Err(Reason::Protocol(other.to_string())),
    };
    let icmp = pr == proto::ICMP || pr == proto::ICMPV6;
    match (p.port, icmp) {
        (0, _) => Ok((pr, vec![PortBlock::ANY])),
        (t @ 1..=255, true) => Ok((pr, vec![PortBlock::containing((t as u16) << 8, 8)])),
        (n @ 1..=65535, false) => Ok((pr, ports::blocks(n as u16, n as u16))),
        (n, _) => Err(Reason::Port(n.to_string())),
    }
}
