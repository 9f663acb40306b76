//! The incremental NetworkPolicy compiler.
//!
//! Entries are kept per subject identity. A change marks the subjects whose entries it can
//! touch and recompiles only those, and the [`Diff`] it returns holds only the entries that
//! differ:
//!
//! * a policy: the subjects it selects before and after; and when the set of CIDR classes
//!   changed, the subjects of every policy with a block overlapping a changed prefix;
//! * a pod: its addresses' identity entries; only when its label set is new (or was its
//!   last holder), the new (old) identity as a subject and the subjects of every policy
//!   whose peers select it — so relabelling a replica of an existing label set costs O(1);
//! * a namespace's labels: the subjects of policies whose namespaceSelector flips on it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;

use k8s_openapi::api::networking::v1::NetworkPolicy;

use super::admin::AdminPolicy;
use super::ir::{NsSel, Peer, Policy, PortSpec, translate};
use super::{NamespaceInfo, NodeInfo, PodInfo};
use crate::cidr::Prefix;
use crate::error::Warning;
use crate::identity::{self, Identities, IdentityKey};
use crate::model::{
    ALL, CidrKey, Diff, Dir, Layer, MARK_NO_NP, MapDiff, PEER_ANY, PEER_CLASS, PEER_ISOLATED, RuleKey,
    RuleVal, Tables, proto,
};
use crate::ports::{self, PortBlock};
use crate::selector::Labels;

type ObjKey = (String, String);

/// NetworkPolicies, Pods and Namespaces in; `sdn_pol_rules` (layer NP), `sdn_pol_cidrs`
/// (scope 0) and `sdn_np_idents` out.
#[derive(Clone, Debug, Default)]
pub struct NpCompiler {
    pub(super) namespaces: BTreeMap<String, Labels>,
    pods: BTreeMap<ObjKey, (PodInfo, Option<u32>)>,
    policies: BTreeMap<ObjKey, Policy>,
    /// Refusals per object: `(namespace, name)` of a NetworkPolicy, `("", kind/name)` of
    /// an admin policy.
    pub(super) warnings: BTreeMap<ObjKey, Vec<Warning>>,
    pub(super) ids: Identities,
    /// CIDR class prefixes: prefix → (class id, references). One class space for the
    /// three tiers (NetworkPolicy, ANP, BANP): one `sdn_pol_cidrs` lookup serves them all.
    pub(super) classes: BTreeMap<Prefix, (u32, usize)>,
    /// AdminNetworkPolicies and the BaselineAdminNetworkPolicy, by (layer, name), with the
    /// class prefixes each holds a reference to (its `networks`, its nodes' addresses, the
    /// kube-apiserver's).
    pub(super) admins: BTreeMap<(Layer, String), (AdminPolicy, Vec<Prefix>)>,
    /// Nodes, for `nodes` peers.
    pub(super) nodes: BTreeMap<String, NodeInfo>,
    /// The kube-apiserver's addresses (sorted, no repeats), for the
    /// `policy.cozystack.io/kube-apiserver` extension.
    pub(super) kube_apiserver: Vec<IpAddr>,
    /// Output: entries per subject identity.
    rules: BTreeMap<u32, BTreeMap<RuleKey, RuleVal>>,
    /// Output: pod address → identity (and the pod that holds it).
    idents: BTreeMap<IpAddr, (u32, ObjKey)>,
}

/// A rule's id: stable, nonzero, from the policy and the rule's place in it.
pub fn rule_id(ns: &str, name: &str, dir: Dir, index: usize) -> u32 {
    let h = identity::fnv(&[ns.as_bytes(), name.as_bytes(), &[dir as u8], &index.to_be_bytes()]);
    ((h ^ (h >> 32)) as u32).max(1)
}

pub(super) fn marker(dir: Dir, subject: u32) -> RuleKey {
    RuleKey {
        layer: Layer::Np,
        dir,
        net: 0,
        subject,
        peer: PEER_ISOLATED,
        proto: 0,
        port: PortBlock::ANY,
    }
}

pub(super) const ALL_PROTOS: [u8; 3] = [proto::TCP, proto::UDP, proto::SCTP];

impl NpCompiler {
    /// An empty compiler.
    pub fn new() -> Self {
        Self::default()
    }

    /// Compile everything at once (what a restarted agent does).
    pub fn build<'a>(
        namespaces: impl IntoIterator<Item = NamespaceInfo>,
        pods: impl IntoIterator<Item = PodInfo>,
        policies: impl IntoIterator<Item = &'a NetworkPolicy>,
    ) -> Self {
        let mut c = Self::new();
        for n in namespaces {
            c.namespaces.insert(n.name, n.labels);
        }
        for p in pods {
            c.attach_pod(p);
        }
        for np in policies {
            c.store_policy(np);
        }
        let all: BTreeSet<u32> = c.ids.by_id.keys().copied().collect();
        c.recompile(&all);
        c
    }

    /// Every map entry this compiler owns.
    pub fn tables(&self) -> Tables {
        Tables {
            rules: self
                .rules
                .values()
                .flat_map(|m| m.iter().map(|(k, v)| (*k, *v)))
                .collect(),
            cidrs: self
                .classes
                .iter()
                .map(|(p, (c, _))| (cidr_key(*p), *c))
                .collect(),
            np_idents: self.idents.iter().map(|(ip, (id, _))| (*ip, *id)).collect(),
            ..Tables::default()
        }
    }

    /// What was refused, per policy.
    pub fn warnings(&self) -> impl Iterator<Item = &Warning> {
        self.warnings.values().flatten()
    }

    /// How many label-set identities exist.
    pub fn identity_count(&self) -> usize {
        self.ids.by_id.len()
    }

    /// The identity of a pod address, if it has one.
    pub fn identity_of(&self, ip: IpAddr) -> Option<u32> {
        self.idents.get(&ip).map(|(id, _)| *id)
    }

    /// Where rule `id` is (`NetworkPolicy ns/name spec.ingress[i]`), for the trace.
    pub fn rule_name(&self, id: u32) -> Option<String> {
        self.policies.values().find_map(|p| {
            [
                (Dir::Ingress, &p.ingress, "ingress"),
                (Dir::Egress, &p.egress, "egress"),
            ]
            .into_iter()
            .flat_map(|(dir, rules, field)| {
                (0..rules.as_ref().map_or(0, Vec::len)).map(move |i| (dir, field, i))
            })
            .find(|(dir, _, i)| rule_id(&p.ns, &p.name, *dir, *i) == id)
            .map(|(_, field, i)| format!("NetworkPolicy {}/{} spec.{field}[{i}]", p.ns, p.name))
        })
    }

    /// Create or replace a policy.
    pub fn set_policy(&mut self, np: &NetworkPolicy) -> Diff {
        let (dirty, cidrs) = self.store_policy(np);
        self.finish(&dirty, cidrs, MapDiff::default())
    }

    /// Delete a policy; absent is not an error.
    pub fn remove_policy(&mut self, ns: &str, name: &str) -> Diff {
        let key = (ns.to_string(), name.to_string());
        let Some(old) = self.policies.remove(&key) else {
            return Diff::default();
        };
        self.warnings.remove(&key);
        let mut dirty = self.subjects(&old);
        let (changed, cidrs) = self.update_classes(&old, None);
        dirty.extend(self.overlapping_subjects(&changed));
        self.finish(&dirty, cidrs, MapDiff::default())
    }

    /// Create or replace a pod (labels, addresses, ports, hostNetwork).
    pub fn set_pod(&mut self, pod: PodInfo) -> Diff {
        let key = (pod.ns.clone(), pod.name.clone());
        let before = self.pod_idents(&key);
        let mut dirty = self.detach_pod(&key);
        dirty.extend(self.attach_pod(pod));
        let idents = MapDiff::between(&before, &self.pod_idents(&key));
        self.finish(&dirty, MapDiff::default(), idents)
    }

    /// Delete a pod; absent is not an error.
    pub fn remove_pod(&mut self, ns: &str, name: &str) -> Diff {
        let key = (ns.to_string(), name.to_string());
        let before = self.pod_idents(&key);
        let dirty = self.detach_pod(&key);
        let idents = MapDiff::between(&before, &BTreeMap::new());
        self.finish(&dirty, MapDiff::default(), idents)
    }

    /// Create or relabel a namespace.
    pub fn set_namespace(&mut self, ns: &NamespaceInfo) -> Diff {
        let old = self
            .namespaces
            .insert(ns.name.clone(), ns.labels.clone())
            .unwrap_or_default();
        let dirty = self.ns_flips(&ns.name, &old, &ns.labels);
        self.finish(&dirty, MapDiff::default(), MapDiff::default())
    }

    /// Delete a namespace (its pods and policies go by their own events).
    pub fn remove_namespace(&mut self, name: &str) -> Diff {
        let old = self.namespaces.remove(name).unwrap_or_default();
        let dirty = self.ns_flips(name, &old, &Labels::new());
        self.finish(&dirty, MapDiff::default(), MapDiff::default())
    }

    pub(super) fn finish(
        &mut self,
        dirty: &BTreeSet<u32>,
        cidrs: MapDiff<CidrKey, u32>,
        idents: MapDiff<IpAddr, u32>,
    ) -> Diff {
        Diff {
            rules: self.recompile(dirty),
            cidrs,
            np_idents: idents,
            ..Diff::default()
        }
    }

    fn pod_idents(&self, key: &ObjKey) -> BTreeMap<IpAddr, u32> {
        let Some((pod, _)) = self.pods.get(key) else {
            return BTreeMap::new();
        };
        pod.ips
            .iter()
            .filter_map(|ip| {
                self.idents
                    .get(ip)
                    .filter(|(_, owner)| owner == key)
                    .map(|(id, _)| (*ip, *id))
            })
            .collect()
    }

    fn store_policy(&mut self, np: &NetworkPolicy) -> (BTreeSet<u32>, MapDiff<CidrKey, u32>) {
        let (pol, warns) = translate(np);
        let key = (pol.ns.clone(), pol.name.clone());
        if warns.is_empty() {
            self.warnings.remove(&key);
        } else {
            self.warnings.insert(key.clone(), warns);
        }
        let old = self.policies.insert(key, pol.clone());
        let mut dirty = self.subjects(&pol);
        if let Some(o) = &old {
            dirty.extend(self.subjects(o));
        }
        let (changed, cidrs) = self.update_classes(old.as_ref().unwrap_or(&EMPTY), Some(&pol));
        dirty.extend(self.overlapping_subjects(&changed));
        (dirty, cidrs)
    }

    /// Move class references from `old`'s blocks to `new`'s; the prefixes that appeared or
    /// went, and the cidr map's change.
    fn update_classes(&mut self, old: &Policy, new: Option<&Policy>) -> (Vec<Prefix>, MapDiff<CidrKey, u32>) {
        let prefixes = |p: &Policy| p.blocks().flat_map(|b| b.prefixes().copied()).collect::<Vec<_>>();
        self.move_class_refs(&prefixes(old), &new.map(prefixes).unwrap_or_default())
    }

    /// Move class references from the prefixes `old` to `new`; the prefixes that appeared
    /// or went, and the cidr map's change.
    pub(super) fn move_class_refs(
        &mut self,
        old: &[Prefix],
        new: &[Prefix],
    ) -> (Vec<Prefix>, MapDiff<CidrKey, u32>) {
        let mut changed = Vec::new();
        let mut diff = MapDiff::default();
        {
            for p in new {
                if let Some((_, n)) = self.classes.get_mut(p) {
                    *n += 1;
                    continue;
                }
                let taken: BTreeSet<u32> = self.classes.values().map(|(c, _)| *c).collect();
                let seed = identity::fnv(&[&p.bits.to_be_bytes(), &[p.len, u8::from(p.v6)]]);
                let c = identity::allocate(seed, &|c| taken.contains(&c));
                self.classes.insert(*p, (c, 1));
                changed.push(*p);
                diff.upsert.push((cidr_key(*p), c));
            }
        }
        {
            for p in old {
                let Some((c, n)) = self.classes.get_mut(p) else {
                    continue;
                };
                *n -= 1;
                if *n == 0 {
                    let c = *c;
                    self.classes.remove(p);
                    changed.push(*p);
                    // Re-added within this change: the upsert above stands, no remove.
                    if !diff.upsert.iter().any(|(k, v)| k.prefix == *p && *v == c) {
                        diff.remove.push(cidr_key(*p));
                    } else {
                        diff.upsert.retain(|(k, _)| k.prefix != *p);
                    }
                }
            }
        }
        (changed, diff)
    }

    /// Subjects of every policy (of any tier) with a block overlapping one of `changed`.
    pub(super) fn overlapping_subjects(&self, changed: &[Prefix]) -> BTreeSet<u32> {
        if changed.is_empty() {
            return BTreeSet::new();
        }
        let np = self
            .policies
            .values()
            .filter(|p| p.blocks().any(|b| changed.iter().any(|c| b.cidr.overlaps(c))))
            .flat_map(|p| self.subjects(p));
        let admin = self
            .admins
            .values()
            .filter(|(_, held)| held.iter().any(|h| changed.iter().any(|c| h.overlaps(c))))
            .flat_map(|(a, _)| self.admin_subjects(a));
        np.chain(admin).collect()
    }

    fn attach_pod(&mut self, pod: PodInfo) -> BTreeSet<u32> {
        let key = (pod.ns.clone(), pod.name.clone());
        let mut dirty = BTreeSet::new();
        let id = (!pod.host_network).then(|| {
            let ik = IdentityKey::new(&pod.ns, &pod.labels, pod.named_ports.clone());
            let (id, created) = self.ids.acquire(&ik);
            if created {
                dirty.insert(id);
                dirty.extend(self.peer_subjects(&ik));
            }
            id
        });
        if let Some(id) = id {
            for ip in &pod.ips {
                self.idents.insert(*ip, (id, key.clone()));
            }
        }
        self.pods.insert(key, (pod, id));
        dirty
    }

    fn detach_pod(&mut self, key: &ObjKey) -> BTreeSet<u32> {
        let Some((pod, id)) = self.pods.remove(key) else {
            return BTreeSet::new();
        };
        for ip in &pod.ips {
            if self.idents.get(ip).is_some_and(|(_, owner)| owner == key) {
                self.idents.remove(ip);
            }
        }
        let mut dirty = BTreeSet::new();
        if let Some(id) = id {
            let ik = self.ids.key(id).cloned();
            if self.ids.release(id) {
                dirty.insert(id);
                dirty.extend(ik.iter().flat_map(|k| self.peer_subjects(k)));
            }
        }
        dirty
    }

    /// Subjects whose entries name identity `ik` as a peer.
    fn peer_subjects(&self, ik: &IdentityKey) -> BTreeSet<u32> {
        let ns_labels = self.namespaces.get(&ik.ns).cloned().unwrap_or_default();
        self.policies
            .values()
            .filter(|p| {
                let ingress = p.ingress.iter().flatten().map(|r| (r, Dir::Ingress));
                let egress = p.egress.iter().flatten().map(|r| (r, Dir::Egress));
                ingress.chain(egress).any(|(r, dir)| match &r.peers {
                    None => {
                        dir == Dir::Egress
                            && r.ports.iter().flatten().any(|s| matches!(s, PortSpec::Named(..)))
                    }
                    Some(peers) => peers.iter().any(|peer| selects(peer, ik, &ns_labels)),
                })
            })
            .flat_map(|p| self.subjects(p))
            .chain(self.admin_peer_subjects(ik, &ns_labels))
            .collect()
    }

    fn ns_flips(&self, name: &str, old: &Labels, new: &Labels) -> BTreeSet<u32> {
        self.policies
            .values()
            .filter(|p| p.has_ns_selector())
            .filter(|p| {
                p.ingress.iter().chain(&p.egress).flatten().flat_map(|r| r.peers.iter().flatten()).any(|peer| {
                    matches!(peer, Peer::Pods { ns: NsSel::Labels(s), .. } if s.matches(old) != s.matches(new))
                })
            })
            .flat_map(|p| self.subjects(p))
            .chain(self.admin_ns_flips(name, old, new))
            .collect()
    }

    /// Identities a policy applies to.
    fn subjects(&self, p: &Policy) -> BTreeSet<u32> {
        self.ids
            .by_id
            .iter()
            .filter(|(_, (k, _))| k.ns == p.ns && p.subjects.as_ref().is_none_or(|s| s.matches(&k.labels)))
            .map(|(id, _)| *id)
            .collect()
    }

    fn recompile(&mut self, dirty: &BTreeSet<u32>) -> MapDiff<RuleKey, RuleVal> {
        let mut diff = MapDiff::default();
        let mut memo = HashMap::new();
        for id in dirty {
            let new = self.compile_subject(*id, &mut memo);
            let old = self.rules.remove(id).unwrap_or_default();
            diff.add_between(&old, &new);
            if !new.is_empty() {
                self.rules.insert(*id, new);
            }
        }
        diff
    }

    /// The peer tokens a rule peer stands for.
    pub(super) fn tokens(&self, peer: &Peer) -> Vec<u32> {
        match peer {
            Peer::Pods { .. } => self
                .ids
                .by_id
                .iter()
                .filter(|(_, (k, _))| {
                    let nl = self.namespaces.get(&k.ns).cloned().unwrap_or_default();
                    selects(peer, k, &nl)
                })
                .map(|(id, _)| *id)
                .collect(),
            Peer::Block(b) => self
                .classes
                .iter()
                .filter(|(p, _)| b.holds_class(p))
                .map(|(_, (c, _))| PEER_CLASS | c)
                .collect(),
        }
    }

    /// Where one `ports` entry of a rule lands for subject `me` and the rule's peer
    /// `tokens`: `out(token, proto, lo, hi)` per entry. A named port is the subject's own
    /// container port on ingress; on egress it is the destination pod's, so it is compiled
    /// per destination identity (towards a CIDR class it resolves to nothing: refused when
    /// the policy was read).
    pub(super) fn port_entries(
        &self,
        me: &IdentityKey,
        dir: Dir,
        tokens: &[u32],
        spec: &PortSpec,
        mut out: impl FnMut(u32, u8, u16, u16),
    ) {
        match (spec, dir) {
            (PortSpec::Range(pr, lo, hi), _) => {
                for t in tokens {
                    out(*t, *pr, *lo, *hi);
                }
            }
            (PortSpec::Named(pr, name), Dir::Ingress) => {
                if let Some(port) = me.resolve(name, *pr) {
                    for t in tokens {
                        out(*t, *pr, port, port);
                    }
                }
            }
            (PortSpec::Named(pr, name), Dir::Egress) => {
                for t in tokens {
                    if *t == PEER_ANY {
                        for (pid, (pk, _)) in &self.ids.by_id {
                            if let Some(port) = pk.resolve(name, *pr) {
                                out(*pid, *pr, port, port);
                            }
                        }
                    } else if t & PEER_CLASS == 0
                        && let Some(port) = self.ids.key(*t).and_then(|k| k.resolve(name, *pr))
                    {
                        out(*t, *pr, port, port);
                    }
                }
            }
        }
    }

    fn compile_subject(&self, id: u32, memo: &mut HashMap<Peer, Vec<u32>>) -> BTreeMap<RuleKey, RuleVal> {
        let mut out = BTreeMap::new();
        let Some(me) = self.ids.key(id) else {
            return out;
        };
        for dir in [Dir::Ingress, Dir::Egress] {
            let mut isolated = false;
            let mut contrib: BTreeMap<(u32, u8), BTreeMap<PortBlock, u32>> = BTreeMap::new();
            let mut add = |peer: u32, pr: u8, lo: u16, hi: u16, rid: u32| {
                let m = contrib.entry((peer, pr)).or_default();
                for b in ports::blocks(lo, hi) {
                    let e = m.entry(b).or_insert(rid);
                    *e = (*e).min(rid);
                }
            };
            let mine = self
                .policies
                .range((me.ns.clone(), String::new())..)
                .take_while(|((ns, _), _)| *ns == me.ns)
                .map(|(_, p)| p)
                .filter(|p| p.subjects.as_ref().is_none_or(|s| s.matches(&me.labels)));
            for pol in mine {
                let rules = match dir {
                    Dir::Ingress => &pol.ingress,
                    Dir::Egress => &pol.egress,
                };
                let Some(rules) = rules else { continue };
                isolated = true;
                for (i, rule) in rules.iter().enumerate() {
                    let rid = rule_id(&pol.ns, &pol.name, dir, i);
                    let tokens: Vec<u32> = match &rule.peers {
                        None => vec![PEER_ANY],
                        Some(ps) => ps
                            .iter()
                            .flat_map(|p| memo.entry(p.clone()).or_insert_with(|| self.tokens(p)).clone())
                            .collect(),
                    };
                    let default_ports: Vec<PortSpec> = ALL_PROTOS
                        .iter()
                        .map(|p| PortSpec::Range(*p, 0, u16::MAX))
                        .collect();
                    for spec in rule.ports.as_ref().unwrap_or(&default_ports) {
                        self.port_entries(me, dir, &tokens, spec, |t, pr, lo, hi| add(t, pr, lo, hi, rid));
                    }
                }
            }
            let (tiers, admin) = self.compile_admin(id, me, dir);
            if !isolated && tiers == 0 {
                continue;
            }
            let flags = tiers | if isolated { 0 } else { MARK_NO_NP };
            out.insert(
                marker(dir, id),
                RuleVal {
                    peers: ALL,
                    rule: 0,
                    flags,
                },
            );
            out.extend(admin);
            for ((peer, pr), blocks) in contrib {
                for (b, rid) in ports::union_down(&blocks, |a, o| *a = (*a).min(*o)) {
                    out.insert(
                        RuleKey {
                            layer: Layer::Np,
                            dir,
                            net: 0,
                            subject: id,
                            peer,
                            proto: pr,
                            port: b,
                        },
                        RuleVal {
                            peers: ALL,
                            rule: rid,
                            flags: 0,
                        },
                    );
                }
            }
        }
        out
    }
}

static EMPTY: Policy = Policy {
    ns: String::new(),
    name: String::new(),
    subjects: None,
    ingress: None,
    egress: None,
};

fn cidr_key(prefix: Prefix) -> CidrKey {
    CidrKey {
        scope: 0,
        layer: Layer::Np,
        prefix,
    }
}

/// Does a pod peer select identity `ik` (whose namespace has labels `ns_labels`)?
pub(super) fn selects(peer: &Peer, ik: &IdentityKey, ns_labels: &Labels) -> bool {
    match peer {
        Peer::Pods { ns, pods } => {
            let ns_ok = match ns {
                NsSel::Same(n) => *n == ik.ns,
                NsSel::Labels(s) => s.matches(ns_labels),
            };
            ns_ok && pods.matches(&ik.labels)
        }
        Peer::Block(_) => false,
    }
}
