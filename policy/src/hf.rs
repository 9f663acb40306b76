//! HostFirewalls for one node: the objects selecting the node in; `sdn_hf_self`,
//! `sdn_pol_rules` (layer HF), `sdn_pol_cidrs` (scope 0) and the armed flags out.
//!
//! Stateful: only a flow's first packet meets these rules, replies pass by the connection
//! table.
//!
//! Lockout protection: a restricted direction always admits TCP to the API server's port
//! ([`API_SERVER_PORT`]: into the node on ingress, out of it on egress), the way host
//! firewalls keep failsafe ports, unless a firewall selecting the node carries
//! [`ALLOW_LOCKOUT_ANNOTATION`]` = "true"`. The agents learn of a firewall and of its removal
//! through the API server, so a rule set that cut a node off from it could not be lifted
//! there; rule sets that would are therefore not refused but cannot take that port without the
//! explicit override. Exempt by the datapath before any rule (docs/policy.md): the tunnel port from
//! known nodes, ICMP errors of known flows, IPv6 neighbour discovery and link-local
//! traffic, the node to its own pods.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use cozyplane_apis::v1alpha1::{
    ALLOW_LOCKOUT_ANNOTATION, API_SERVER_PORT, HostFirewall, HostFirewallPeer, HostFirewallPort,
};

use crate::cidr::{Block, Prefix};
use crate::classes::{self, Contrib, WHOLE};
use crate::error::{Reason, Warning};
use crate::identity;
use crate::model::{Diff, Dir, Layer, PEER_ANY, POL_F_HF_EGRESS, POL_F_HF_INGRESS, Tables, proto};
use crate::ports::{self, PortBlock, ProtoBlocks};

/// A rule as read: (firewall name, direction, index, peers, ports).
type RawRule<'a> = (
    String,
    Dir,
    usize,
    Vec<&'a HostFirewallPeer>,
    &'a [HostFirewallPort],
);
/// A rule as compiled: (rule id, direction, blocks (None = any peer), ports).
type ParsedRule = (u32, Dir, Option<Vec<Block>>, Vec<ProtoBlocks>);
use crate::selector::{Labels, Selector};

/// The node the firewall is compiled for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeInfo {
    /// Name.
    pub name: String,
    /// Labels (for `nodeSelector`).
    pub labels: Labels,
    /// Its addresses (InternalIP, ExternalIP, and any other the node answers on).
    pub addresses: Vec<IpAddr>,
}

/// The HostFirewall compiler of one node.
#[derive(Clone, Debug, Default)]
pub struct HfCompiler {
    node: NodeInfo,
    firewalls: BTreeMap<String, HostFirewall>,
    out: Tables,
    warnings: Vec<Warning>,
}

/// The name the failsafe rules' ids are made from (no HostFirewall has an empty name).
const FAILSAFE: &str = "";

fn allows_lockout(hf: &HostFirewall) -> bool {
    hf.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ALLOW_LOCKOUT_ANNOTATION))
        .is_some_and(|v| v == "true")
}

/// A rule's id: stable, nonzero.
pub fn rule_id(name: &str, dir: Dir, index: usize) -> u32 {
    let h = identity::fnv(&[b"hf", name.as_bytes(), &[dir as u8], &index.to_be_bytes()]);
    ((h ^ (h >> 32)) as u32).max(1)
}

impl HfCompiler {
    /// A compiler for `node`.
    pub fn new(node: NodeInfo) -> Self {
        let mut c = Self {
            node,
            ..Self::default()
        };
        c.out = c.compile();
        c
    }

    /// Every entry this compiler owns.
    pub fn tables(&self) -> &Tables {
        &self.out
    }

    /// What was refused.
    pub fn warnings(&self) -> &[Warning] {
        &self.warnings
    }

    /// The node's labels or addresses changed.
    pub fn set_node(&mut self, node: NodeInfo) -> Diff {
        self.node = node;
        self.refresh()
    }

    /// Create or replace a HostFirewall.
    pub fn set_firewall(&mut self, hf: &HostFirewall) -> Diff {
        self.firewalls
            .insert(hf.metadata.name.clone().unwrap_or_default(), hf.clone());
        self.refresh()
    }

    /// Delete a HostFirewall.
    pub fn remove_firewall(&mut self, name: &str) -> Diff {
        self.firewalls.remove(name);
        self.refresh()
    }

    /// The rule a verdict's id names: `(firewall, direction, index)` of a HostFirewall that
    /// selects the node, or `("", direction, 0)` for the lockout failsafe. `None` for an id no
    /// rule of this compile has (the trace API's explanation of [`crate::verdict::hf`]).
    pub fn rule_of(&self, rid: u32) -> Option<(String, Dir, usize)> {
        for dir in [Dir::Ingress, Dir::Egress] {
            if rule_id(FAILSAFE, dir, 0) == rid {
                return Some((String::new(), dir, 0));
            }
        }
        self.firewalls.iter().find_map(|(name, hf)| {
            let selected =
                Selector::parse(&hf.spec.node_selector).is_ok_and(|s| s.matches(&self.node.labels));
            let lists = [
                (Dir::Ingress, hf.spec.ingress.len()),
                (Dir::Egress, hf.spec.egress.len()),
            ];
            selected
                .then(|| {
                    lists.into_iter().find_map(|(dir, n)| {
                        (0..n)
                            .find(|i| rule_id(name, dir, *i) == rid)
                            .map(|i| (name.clone(), dir, i))
                    })
                })
                .flatten()
        })
    }

    fn refresh(&mut self) -> Diff {
        let new = self.compile();
        let d = Diff::between(&self.out, &new);
        self.out = new;
        d
    }

    fn compile(&mut self) -> Tables {
        self.warnings.clear();
        let mut warnings = Vec::new();
        let mut flags = 0;
        let mut lockout_allowed = false;
        let mut rules: Vec<RawRule> = Vec::new();
        for (name, hf) in &self.firewalls {
            let object = format!("HostFirewall {name}");
            match Selector::parse(&hf.spec.node_selector) {
                Ok(s) if s.matches(&self.node.labels) => {}
                Ok(_) => continue,
                Err(e) => {
                    // Unreadable selector: it may select this node; arm both directions, no rules.
                    warnings.push(Warning {
                        object,
                        field: "spec.nodeSelector".into(),
                        reason: Reason::Selector(e),
                    });
                    flags |= POL_F_HF_INGRESS | POL_F_HF_EGRESS;
                    continue;
                }
            }
            lockout_allowed |= allows_lockout(hf);
            let types: Vec<&str> = if hf.spec.policy_types.is_empty() {
                let mut t = vec!["Ingress"];
                if !hf.spec.egress.is_empty() {
                    t.push("Egress");
                }
                t
            } else {
                hf.spec.policy_types.iter().map(String::as_str).collect()
            };
            if types.contains(&"Ingress") {
                flags |= POL_F_HF_INGRESS;
                for (i, r) in hf.spec.ingress.iter().enumerate() {
                    rules.push((name.clone(), Dir::Ingress, i, r.from.iter().collect(), &r.ports));
                }
            }
            if types.contains(&"Egress") {
                flags |= POL_F_HF_EGRESS;
                for (i, r) in hf.spec.egress.iter().enumerate() {
                    rules.push((name.clone(), Dir::Egress, i, r.to.iter().collect(), &r.ports));
                }
            }
        }
        // Parse peers once; refused ones are dropped (and the rule allows nothing if all
        // were).
        let mut parsed: Vec<ParsedRule> = Vec::new();
        for (name, dir, i, peers, port_list) in &rules {
            let here = format!(
                "spec.{}[{i}]",
                if *dir == Dir::Ingress { "ingress" } else { "egress" }
            );
            let object = format!("HostFirewall {name}");
            let blocks = (!peers.is_empty()).then(|| {
                peers
                    .iter()
                    .enumerate()
                    .filter_map(|(j, p)| match block(p) {
                        Ok(b) => Some(b),
                        Err(r) => {
                            warnings.push(Warning {
                                object: object.clone(),
                                field: format!("{here}.peers[{j}]"),
                                reason: r,
                            });
                            None
                        }
                    })
                    .collect()
            });
            let specs = if port_list.is_empty() {
                [proto::TCP, proto::UDP, proto::SCTP, proto::ICMP, proto::ICMPV6]
                    .into_iter()
                    .map(|p| (p, vec![PortBlock::ANY]))
                    .collect()
            } else {
                port_list
                    .iter()
                    .enumerate()
                    .filter_map(|(j, p)| match port(p) {
                        Ok(s) => Some(s),
                        Err(r) => {
                            warnings.push(Warning {
                                object: object.clone(),
                                field: format!("{here}.ports[{j}]"),
                                reason: r,
                            });
                            None
                        }
                    })
                    .collect()
            };
            parsed.push((rule_id(name, *dir, *i), *dir, blocks, specs));
        }
        if !lockout_allowed {
            let api = ports::blocks(API_SERVER_PORT, API_SERVER_PORT);
            for (flag, dir) in [(POL_F_HF_INGRESS, Dir::Ingress), (POL_F_HF_EGRESS, Dir::Egress)] {
                if flags & flag != 0 {
                    parsed.push((
                        rule_id(FAILSAFE, dir, 0),
                        dir,
                        None,
                        vec![(proto::TCP, api.clone())],
                    ));
                }
            }
        }
        let all_blocks: Vec<&Block> = parsed
            .iter()
            .flat_map(|(_, _, b, _)| b.iter().flatten())
            .collect();
        let class_map = classes::assign(0, Layer::Hf, &all_blocks);
        let mut contrib = Contrib::default();
        for (rid, dir, blocks, specs) in &parsed {
            let tokens: Vec<u32> = match blocks {
                None => vec![PEER_ANY],
                Some(bs) => bs
                    .iter()
                    .flat_map(|b| classes::tokens(b, &class_map))
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .collect(),
            };
            for (pr, pbs) in specs {
                for t in &tokens {
                    contrib.add(*dir, 0, *t, *pr, pbs, WHOLE, *rid);
                }
            }
        }
        self.warnings = warnings;
        Tables {
            rules: contrib.entries(Layer::Hf, 0),
            cidrs: classes::cidr_entries(0, Layer::Hf, &class_map),
            hf_self: self.node.addresses.iter().copied().collect(),
            state_flags: flags,
            ..Tables::default()
        }
    }
}

fn block(p: &HostFirewallPeer) -> Result<Block, Reason> {
    let cidr: Prefix = p.cidr.parse().map_err(|_| Reason::Cidr(p.cidr.clone()))?;
    let except = p
        .except
        .iter()
        .map(|e| e.parse().map_err(|_| Reason::Cidr(e.clone())))
        .collect::<Result<Vec<Prefix>, _>>()?;
    Ok(Block { cidr, except })
}

/// A rule's port entry: TCP, UDP and SCTP by port or range; ICMP and ICMPv6 by message type
/// (`port`, any code; 0 every type), as a SecurityGroup's.
fn port(p: &HostFirewallPort) -> Result<ProtoBlocks, Reason> {
    let pr = match p.protocol.as_str() {
        "TCP" | "" => proto::TCP,
        "UDP" => proto::UDP,
        "SCTP" => proto::SCTP,
        "ICMP" => proto::ICMP,
        "ICMPv6" => proto::ICMPV6,
        other => return Err(Reason::Protocol(other.to_string())),
    };
    if pr == proto::ICMP || pr == proto::ICMPV6 {
        return match (p.port, p.end_port) {
            (0, 0) => Ok((pr, vec![PortBlock::ANY])),
            (t @ 1..=255, 0) => Ok((pr, vec![PortBlock::containing((t as u16) << 8, 8)])),
            (_, e) if e != 0 => Err(Reason::EndPort(e)),
            (n, _) => Err(Reason::Port(n.to_string())),
        };
    }
    match (p.port, p.end_port) {
        (0, 0) => Ok((pr, vec![PortBlock::ANY])),
        (0, e) => Err(Reason::EndPort(e)),
        (n @ 1..=65535, 0) => Ok((pr, ports::blocks(n as u16, n as u16))),
        (n @ 1..=65535, e) if (n..=65535).contains(&e) => Ok((pr, ports::blocks(n as u16, e as u16))),
        (n, e) => Err(Reason::Port(format!("{n}-{e}"))),
    }
}
