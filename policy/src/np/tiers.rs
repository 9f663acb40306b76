//! The admin tiers in the NetworkPolicy compiler: AdminNetworkPolicy above, the
//! BaselineAdminNetworkPolicy below (issue 29).
//!
//! They share the NetworkPolicy compiler's identities (an ANP subject or pod peer is a
//! label-set identity, as for NetworkPolicy) and its CIDR classes (one class space, one
//! `sdn_pol_cidrs` lookup for the three tiers). Per subject identity and direction the
//! compiler writes, next to the NetworkPolicy entries:
//!
//! * the isolation marker, now also when only an admin tier applies, its `flags` saying
//!   which tiers do (`MARK_*`);
//! * per tier (`Layer::Anp`, `Layer::Banp`), per peer token and protocol, the port blocks
//!   with the **first** matching rule: its ordinal ([`ordinal`]) in `rule` and its action in
//!   `flags`. A block holds the lowest ordinal of every rule enclosing it
//!   (`ports::union_down`), and the datapath takes the lowest of its three lookups (the
//!   peer's identity, its class, any), which is the first rule matching the flow.
//!
//! Peers that stand for addresses known from elsewhere — `nodes` (the selected nodes'
//! addresses) and the kube-apiserver extension (the `default/kubernetes` endpoints,
//! [`NpCompiler::set_kube_apiserver`]) — hold one host class per address while their policy
//! lives, re-resolved when those addresses change.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use cozyplane_apis::admin_policy::{AdminNetworkPolicy, BaselineAdminNetworkPolicy};

use super::NodeInfo;
use super::admin::{AdminPeer, AdminPolicy, PodSel, ordinal, translate_anp, translate_banp};
use super::compiler::NpCompiler;
use super::ir::PortSpec;
use crate::cidr::Prefix;
use crate::error::Warning;
use crate::identity::IdentityKey;
use crate::model::{
    ALL, Diff, Dir, Layer, MARK_ANP, MARK_BANP, MapDiff, PEER_ANY, PEER_CLASS, RuleKey, RuleVal, proto,
};
use crate::ports::{self, PortBlock};
use crate::selector::Labels;

/// Every protocol an admin rule without `ports` matches.
const EVERY_PROTO: [u8; 5] = [proto::TCP, proto::UDP, proto::SCTP, proto::ICMP, proto::ICMPV6];

fn warn_key(layer: Layer, name: &str) -> (String, String) {
    let kind = match layer {
        Layer::Anp => "AdminNetworkPolicy",
        _ => "BaselineAdminNetworkPolicy",
    };
    (String::new(), format!("{kind}/{name}"))
}

impl PodSel {
    fn selects(&self, ik: &IdentityKey, ns_labels: &Labels) -> bool {
        self.ns.matches(ns_labels) && self.pods.matches(&ik.labels)
    }
}

impl NpCompiler {
    /// Create or replace an AdminNetworkPolicy.
    pub fn set_anp(&mut self, p: &AdminNetworkPolicy) -> Diff {
        let (pol, warns) = translate_anp(p);
        self.store_admin(pol, warns)
    }

    /// Delete an AdminNetworkPolicy; absent is not an error.
    pub fn remove_anp(&mut self, name: &str) -> Diff {
        self.drop_admin(Layer::Anp, name)
    }

    /// Create or replace the BaselineAdminNetworkPolicy.
    pub fn set_banp(&mut self, p: &BaselineAdminNetworkPolicy) -> Diff {
        let (pol, warns) = translate_banp(p);
        self.store_admin(pol, warns)
    }

    /// Delete the BaselineAdminNetworkPolicy; absent is not an error.
    pub fn remove_banp(&mut self, name: &str) -> Diff {
        self.drop_admin(Layer::Banp, name)
    }

    /// Create or change a node (its labels and addresses are what `nodes` peers select).
    pub fn set_node(&mut self, node: NodeInfo) -> Diff {
        let name = node.name.clone();
        if self.nodes.get(&name) == Some(&node) {
            return Diff::default();
        }
        self.nodes.insert(name, node);
        self.refresh_address_peers(AdminPolicy::has_nodes)
    }

    /// Delete a node; absent is not an error.
    pub fn remove_node(&mut self, name: &str) -> Diff {
        if self.nodes.remove(name).is_none() {
            return Diff::default();
        }
        self.refresh_address_peers(AdminPolicy::has_nodes)
    }

    /// The kube-apiserver's addresses now (the ready endpoints of the `default/kubernetes`
    /// Service's EndpointSlices, both families): what the egress rules named by the
    /// `policy.cozystack.io/kube-apiserver` annotation match besides their own peers. Order
    /// and repeats do not matter.
    pub fn set_kube_apiserver(&mut self, mut ips: Vec<IpAddr>) -> Diff {
        ips.sort_unstable();
        ips.dedup();
        if ips == self.kube_apiserver {
            return Diff::default();
        }
        self.kube_apiserver = ips;
        self.refresh_address_peers(AdminPolicy::has_kube_apiserver)
    }

    /// The kube-apiserver's addresses as last given ([`Self::set_kube_apiserver`]).
    pub fn kube_apiserver(&self) -> &[IpAddr] {
        &self.kube_apiserver
    }

    /// The admin policies' refusals.
    pub fn admin_warnings(&self) -> impl Iterator<Item = &Warning> {
        self.warnings
            .iter()
            .filter(|((ns, _), _)| ns.is_empty())
            .flat_map(|(_, w)| w)
    }

    /// Where admin rule `ordinal` of `layer` and `dir` is, for the trace.
    pub fn admin_rule_name(&self, layer: Layer, dir: Dir, ord: u32) -> Option<String> {
        self.admins
            .values()
            .map(|(p, _)| p)
            .filter(|p| p.layer == layer)
            .find_map(|p| {
                (0..p.rules(dir).len())
                    .find(|i| ordinal(layer, p.priority, &p.name, *i) == ord)
                    .map(|i| p.rule_name(dir, i))
            })
    }

    fn store_admin(&mut self, pol: AdminPolicy, warns: Vec<Warning>) -> Diff {
        let key = (pol.layer, pol.name.clone());
        let wk = warn_key(pol.layer, &pol.name);
        if warns.is_empty() {
            self.warnings.remove(&wk);
        } else {
            self.warnings.insert(wk, warns);
        }
        let held = self.held_prefixes(&pol);
        let mut dirty = self.admin_subjects(&pol);
        let old_held = match self.admins.remove(&key) {
            Some((old, h)) => {
                dirty.extend(self.admin_subjects(&old));
                h
            }
            None => Vec::new(),
        };
        let (changed, cidrs) = self.move_class_refs(&old_held, &held);
        self.admins.insert(key, (pol, held));
        dirty.extend(self.overlapping_subjects(&changed));
        self.finish(&dirty, cidrs, MapDiff::default())
    }

    fn drop_admin(&mut self, layer: Layer, name: &str) -> Diff {
        let Some((old, held)) = self.admins.remove(&(layer, name.to_string())) else {
            return Diff::default();
        };
        self.warnings.remove(&warn_key(layer, name));
        let mut dirty = self.admin_subjects(&old);
        let (changed, cidrs) = self.move_class_refs(&held, &[]);
        dirty.extend(self.overlapping_subjects(&changed));
        self.finish(&dirty, cidrs, MapDiff::default())
    }

    /// Re-resolve the address peers of the policies `uses` picks (those with `nodes` peers
    /// after a node changed, those with the kube-apiserver after its addresses did).
    fn refresh_address_peers(&mut self, uses: fn(&AdminPolicy) -> bool) -> Diff {
        let keys: Vec<(Layer, String)> = self
            .admins
            .iter()
            .filter(|(_, (p, _))| uses(p))
            .map(|(k, _)| k.clone())
            .collect();
        let mut dirty = BTreeSet::new();
        let mut cidrs = MapDiff::default();
        let mut changed = Vec::new();
        for k in keys {
            let (pol, old) = self.admins.remove(&k).expect("listed above");
            let held = self.held_prefixes(&pol);
            if held != old {
                let (c, d) = self.move_class_refs(&old, &held);
                changed.extend(c);
                cidrs.upsert.extend(d.upsert);
                cidrs.remove.extend(d.remove);
                dirty.extend(self.admin_subjects(&pol));
            }
            self.admins.insert(k, (pol, held));
        }
        // A class that went in one policy's move and came back in another's is written
        // again and not removed.
        let upserted: BTreeSet<_> = cidrs.upsert.iter().map(|(k, _)| *k).collect();
        cidrs.remove.retain(|k| !upserted.contains(k));
        dirty.extend(self.overlapping_subjects(&changed));
        self.finish(&dirty, cidrs, MapDiff::default())
    }

    /// The class prefixes a policy names: its `networks`, the addresses of the nodes its
    /// `nodes` peers select now, and the kube-apiserver's if a rule matches it.
    fn held_prefixes(&self, pol: &AdminPolicy) -> Vec<Prefix> {
        let mut out: Vec<Prefix> = pol.blocks().flat_map(|b| b.prefixes().copied()).collect();
        for p in pol.peers() {
            if let AdminPeer::Nodes(sel) = p {
                for n in self.nodes.values().filter(|n| sel.matches(&n.labels)) {
                    out.extend(n.ips.iter().map(|ip| Prefix::host(*ip)));
                }
            }
        }
        if pol.has_kube_apiserver() {
            out.extend(self.kube_apiserver.iter().map(|ip| Prefix::host(*ip)));
        }
        out
    }

    /// Identities a policy applies to.
    pub(super) fn admin_subjects(&self, p: &AdminPolicy) -> BTreeSet<u32> {
        let Some(sel) = &p.subject else {
            return BTreeSet::new();
        };
        self.ids
            .by_id
            .iter()
            .filter(|(_, (k, _))| sel.selects(k, &self.ns_labels(&k.ns)))
            .map(|(id, _)| *id)
            .collect()
    }

    fn ns_labels(&self, ns: &str) -> Labels {
        self.namespaces.get(ns).cloned().unwrap_or_default()
    }

    /// Subjects of the admin policies whose pod peers select identity `ik` (or that resolve
    /// a named port on every destination).
    pub(super) fn admin_peer_subjects(&self, ik: &IdentityKey, ns_labels: &Labels) -> BTreeSet<u32> {
        self.admins
            .values()
            .map(|(p, _)| p)
            .filter(|p| {
                let named_to_any = p.egress.iter().any(|r| {
                    r.peers.iter().any(|x| matches!(x, AdminPeer::All))
                        && r.ports.iter().flatten().any(|s| matches!(s, PortSpec::Named(..)))
                });
                named_to_any
                    || p.peers()
                        .any(|x| matches!(x, AdminPeer::Pods(s) if s.selects(ik, ns_labels)))
            })
            .flat_map(|p| self.admin_subjects(p))
            .collect()
    }

    /// Identities whose admin entries a namespace's relabel from `old` to `new` changes:
    /// every identity of the namespace when a subject selector flips on it, the subjects of
    /// a policy whose pod peer's namespace selector does.
    pub(super) fn admin_ns_flips(&self, ns: &str, old: &Labels, new: &Labels) -> BTreeSet<u32> {
        let mut out = BTreeSet::new();
        let flips = |s: &PodSel| s.ns.matches(old) != s.ns.matches(new);
        for (p, _) in self.admins.values() {
            if p.subject.as_ref().is_some_and(flips) {
                out.extend(
                    self.ids
                        .by_id
                        .iter()
                        .filter(|(_, (k, _))| k.ns == ns)
                        .map(|(id, _)| *id),
                );
            }
            if p.peers().any(|x| matches!(x, AdminPeer::Pods(s) if flips(s))) {
                out.extend(self.admin_subjects(p));
            }
        }
        out
    }

    /// The peer tokens an admin peer stands for.
    fn admin_tokens(&self, peer: &AdminPeer) -> Vec<u32> {
        let class = |p: &Prefix| self.classes.get(p).map(|(c, _)| PEER_CLASS | c);
        match peer {
            AdminPeer::Pods(sel) => self
                .ids
                .by_id
                .iter()
                .filter(|(_, (k, _))| sel.selects(k, &self.ns_labels(&k.ns)))
                .map(|(id, _)| *id)
                .collect(),
            AdminPeer::Nodes(sel) => self
                .nodes
                .values()
                .filter(|n| sel.matches(&n.labels))
                .flat_map(|n| n.ips.iter().filter_map(|ip| class(&Prefix::host(*ip))))
                .collect(),
            AdminPeer::KubeApiserver => self
                .kube_apiserver
                .iter()
                .filter_map(|ip| class(&Prefix::host(*ip)))
                .collect(),
            AdminPeer::Block(b) => self
                .classes
                .iter()
                .filter(|(p, _)| b.holds_class(p))
                .map(|(_, (c, _))| PEER_CLASS | c)
                .collect(),
            AdminPeer::All => vec![PEER_ANY],
        }
    }

    /// The admin entries of subject `me` in `dir`, and the `MARK_*` bits of the tiers that
    /// have rules for it.
    pub(super) fn compile_admin(
        &self,
        id: u32,
        me: &IdentityKey,
        dir: Dir,
    ) -> (u32, BTreeMap<RuleKey, RuleVal>) {
        let mut out = BTreeMap::new();
        let mut flags = 0;
        let my_ns = self.ns_labels(&me.ns);
        for (layer, mark) in [(Layer::Anp, MARK_ANP), (Layer::Banp, MARK_BANP)] {
            // (peer, proto) → port block → (ordinal, action): the first rule.
            let mut contrib: BTreeMap<(u32, u8), BTreeMap<PortBlock, (u32, u32)>> = BTreeMap::new();
            let mut add = |peer: u32, pr: u8, lo: u16, hi: u16, v: (u32, u32)| {
                let m = contrib.entry((peer, pr)).or_default();
                for b in ports::blocks(lo, hi) {
                    let e = m.entry(b).or_insert(v);
                    if v.0 < e.0 {
                        *e = v;
                    }
                }
            };
            let mine = self
                .admins
                .values()
                .map(|(p, _)| p)
                .filter(|p| p.layer == layer)
                .filter(|p| p.subject.as_ref().is_some_and(|s| s.selects(me, &my_ns)));
            for pol in mine {
                for (i, rule) in pol.rules(dir).iter().enumerate() {
                    flags |= mark;
                    let v = (ordinal(layer, pol.priority, &pol.name, i), rule.action.code());
                    let tokens: Vec<u32> = rule.peers.iter().flat_map(|p| self.admin_tokens(p)).collect();
                    let Some(specs) = &rule.ports else {
                        for t in &tokens {
                            for pr in EVERY_PROTO {
                                add(*t, pr, 0, u16::MAX, v);
                            }
                        }
                        continue;
                    };
                    for spec in specs {
                        self.port_entries(me, dir, &tokens, spec, |t, pr, lo, hi| add(t, pr, lo, hi, v));
                    }
                }
            }
            for ((peer, pr), blocks) in contrib {
                let merged = ports::union_down(&blocks, |a, o| {
                    if o.0 < a.0 {
                        *a = *o;
                    }
                });
                for (b, (ord, action)) in merged {
                    out.insert(
                        RuleKey {
                            layer,
                            dir,
                            net: 0,
                            subject: id,
                            peer,
                            proto: pr,
                            port: b,
                        },
                        RuleVal {
                            peers: ALL,
                            rule: ord,
                            flags: action,
                        },
                    );
                }
            }
        }
        (flags, out)
    }
}
