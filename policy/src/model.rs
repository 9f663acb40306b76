//! The compiler's output: the entries of the datapath's policy maps, in plain Rust.
//!
//! Each type mirrors one key or value of `bpf/include/sdn/policy_maps.h` field for field
//! (the agent converts them to `cozyplane-bpf`'s ABI structs; this crate links no aya).
//! [`Tables`] is the content of every policy map; [`Diff`] is what one change does to it.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use crate::cidr::Prefix;
use crate::ports::PortBlock;

/// `SDN_LAYER_*`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Layer {
    /// SecurityGroups, VPC nets.
    Sg = 1,
    /// NetworkPolicy, the default network.
    Np = 2,
    /// HostFirewall, the node's own addresses.
    Hf = 3,
    /// AdminNetworkPolicy, the default network, above NetworkPolicy.
    Anp = 4,
    /// BaselineAdminNetworkPolicy, the default network, below NetworkPolicy.
    Banp = 5,
}

/// `SDN_DIR_*`, from the subject's point of view.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Dir {
    /// Traffic to the subject.
    Ingress = 0,
    /// Traffic from the subject.
    Egress = 1,
}

/// `SDN_PEER_CLASS`.
pub const PEER_CLASS: u32 = 1 << 31;
/// `SDN_PEER_ANY`.
pub const PEER_ANY: u32 = 0;
/// `SDN_PEER_ISOLATED`.
pub const PEER_ISOLATED: u32 = 0x7fff_ffff;
/// `1 << SDN_PEER_ALL_BIT`: the value bit for "the peer token as a whole".
pub const ALL: u64 = 1 << 63;

/// IP protocol numbers the layers know.
pub mod proto {
    /// ICMP.
    pub const ICMP: u8 = 1;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// SCTP.
    pub const SCTP: u8 = 132;
    /// ICMPv6.
    pub const ICMPV6: u8 = 58;
}

/// `struct sdn_prule_key` without the byte-level padding; `port` is the LPM suffix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RuleKey {
    /// `SDN_LAYER_*`.
    pub layer: Layer,
    /// `SDN_DIR_*`.
    pub dir: Dir,
    /// SG: the subject's net; NP, HF: 0.
    pub net: u32,
    /// SG: subject group id; NP: subject identity; HF: 0.
    pub subject: u32,
    /// Peer token: an SG net, an NP identity, `PEER_CLASS | class`, `PEER_ANY`,
    /// `PEER_ISOLATED`.
    pub peer: u32,
    /// IP protocol number; 0 for the isolation marker.
    pub proto: u8,
    /// The port block (prefix of the 16-bit port, or ICMP `type << 8 | code`).
    pub port: PortBlock,
}

/// `struct sdn_prule`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RuleVal {
    /// SG net peers: allowed group bitmap; every other token: [`ALL`].
    pub peers: u64,
    /// SG, NP, HF: one admitting rule's id (the lowest), for metrics and trace. ANP, BANP:
    /// the first matching rule's ordinal ([`crate::np::admin::ordinal`]; lower is checked
    /// first). An NP isolation marker: 0.
    pub rule: u32,
    /// ANP, BANP: that rule's action (`ACTION_*`). An isolation marker: the tiers that
    /// apply to its subject in its direction (`MARK_*`). Else 0.
    pub flags: u32,
}

/// `SDN_ACTION_ALLOW`: an admin rule admits the flow, no later tier is asked.
pub const ACTION_ALLOW: u32 = 1;
/// `SDN_ACTION_DENY`: an admin rule refuses the flow.
pub const ACTION_DENY: u32 = 2;
/// `SDN_ACTION_PASS`: the ANP tier ends without a verdict; NetworkPolicy (or, if none
/// isolates the subject, BANP) decides.
pub const ACTION_PASS: u32 = 3;

/// `SDN_MARK_NO_NP`: on an isolation marker, no NetworkPolicy isolates the subject in the
/// direction (the marker is there for the admin tiers). Set rather than "NP isolates" so a
/// marker written before the admin tiers existed (flags 0) still means what it meant.
pub const MARK_NO_NP: u32 = 1 << 0;
/// `SDN_MARK_ANP`: some AdminNetworkPolicy rule applies to the subject in the direction.
pub const MARK_ANP: u32 = 1 << 1;
/// `SDN_MARK_BANP`: some BaselineAdminNetworkPolicy rule applies.
pub const MARK_BANP: u32 = 1 << 2;

/// `struct sdn_pcidr_key`: a CIDR class prefix of one scope.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CidrKey {
    /// SG: the subject's net; NP, HF: 0.
    pub scope: u32,
    /// The layer whose rules name the prefix.
    pub layer: Layer,
    /// The prefix (its family is the key's `v6`).
    pub prefix: Prefix,
}

/// The content of every policy map, as one compiler sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tables {
    /// `sdn_pol_rules`.
    pub rules: BTreeMap<RuleKey, RuleVal>,
    /// `sdn_pol_cidrs`: prefix → class.
    pub cidrs: BTreeMap<CidrKey, u32>,
    /// `sdn_sg_members`: `(net, address)` → group bitmap.
    pub sg_members: BTreeMap<(u32, IpAddr), u64>,
    /// `sdn_np_idents`: pod address → identity.
    pub np_idents: BTreeMap<IpAddr, u32>,
    /// `sdn_hf_self`: this node's addresses.
    pub hf_self: BTreeSet<IpAddr>,
    /// `sdn_pol_state.flags` (`POL_F_HF_*`; the generation is the agent's).
    pub state_flags: u32,
}

/// `SDN_POL_F_HF_INGRESS`.
pub const POL_F_HF_INGRESS: u32 = 1 << 0;
/// `SDN_POL_F_HF_EGRESS`.
pub const POL_F_HF_EGRESS: u32 = 1 << 1;

/// One map's change: entries to write and keys to delete.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapDiff<K, V> {
    /// Entries to insert or overwrite.
    pub upsert: Vec<(K, V)>,
    /// Keys to delete.
    pub remove: Vec<K>,
    /// Some upsert overwrote an entry with a different value (which may narrow it).
    pub overwrote: bool,
}

impl<K, V> Default for MapDiff<K, V> {
    fn default() -> Self {
        Self {
            upsert: Vec::new(),
            remove: Vec::new(),
            overwrote: false,
        }
    }
}

impl<K: Ord + Clone, V: PartialEq + Clone> MapDiff<K, V> {
    /// The change that turns `old` into `new`.
    pub fn between(old: &BTreeMap<K, V>, new: &BTreeMap<K, V>) -> Self {
        let mut d = Self::default();
        d.add_between(old, new);
        d
    }

    /// Append the change that turns `old` into `new`.
    pub fn add_between(&mut self, old: &BTreeMap<K, V>, new: &BTreeMap<K, V>) {
        for (k, v) in new {
            match old.get(k) {
                Some(o) if o == v => {}
                o => {
                    self.overwrote |= o.is_some();
                    self.upsert.push((k.clone(), v.clone()));
                }
            }
        }
        for k in old.keys() {
            if !new.contains_key(k) {
                self.remove.push(k.clone());
            }
        }
    }

    /// Apply to a map.
    pub fn apply(&self, m: &mut BTreeMap<K, V>) {
        for (k, v) in &self.upsert {
            m.insert(k.clone(), v.clone());
        }
        for k in &self.remove {
            m.remove(k);
        }
    }

    /// Nothing to do.
    pub fn is_empty(&self) -> bool {
        self.upsert.is_empty() && self.remove.is_empty()
    }

    /// Entries written plus keys deleted.
    pub fn len(&self) -> usize {
        self.upsert.len() + self.remove.len()
    }
}

/// What one change does to the maps. The agent writes `upsert`s before `remove`s (a
/// packet never meets a half-written rule set that is narrower than both ends), then bumps
/// `sdn_pol_state.generation` if [`Diff::narrows`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Diff {
    /// `sdn_pol_rules`.
    pub rules: MapDiff<RuleKey, RuleVal>,
    /// `sdn_pol_cidrs`.
    pub cidrs: MapDiff<CidrKey, u32>,
    /// `sdn_sg_members`.
    pub sg_members: MapDiff<(u32, IpAddr), u64>,
    /// `sdn_np_idents`.
    pub np_idents: MapDiff<IpAddr, u32>,
    /// `sdn_hf_self`.
    pub hf_self: MapDiff<IpAddr, ()>,
    /// The new `sdn_pol_state.flags`, when they changed.
    pub state_flags: Option<u32>,
}

impl Diff {
    /// The change that turns `old` into `new`.
    pub fn between(old: &Tables, new: &Tables) -> Self {
        let set = |s: &BTreeSet<IpAddr>| s.iter().map(|a| (*a, ())).collect::<BTreeMap<_, _>>();
        Self {
            rules: MapDiff::between(&old.rules, &new.rules),
            cidrs: MapDiff::between(&old.cidrs, &new.cidrs),
            sg_members: MapDiff::between(&old.sg_members, &new.sg_members),
            np_idents: MapDiff::between(&old.np_idents, &new.np_idents),
            hf_self: MapDiff::between(&set(&old.hf_self), &set(&new.hf_self)),
            state_flags: (old.state_flags != new.state_flags).then_some(new.state_flags),
        }
    }

    /// Apply to a copy of the maps (what the agent does to the kernel's).
    pub fn apply(&self, t: &mut Tables) {
        self.rules.apply(&mut t.rules);
        self.cidrs.apply(&mut t.cidrs);
        self.sg_members.apply(&mut t.sg_members);
        self.np_idents.apply(&mut t.np_idents);
        for (a, ()) in &self.hf_self.upsert {
            t.hf_self.insert(*a);
        }
        for a in &self.hf_self.remove {
            t.hf_self.remove(a);
        }
        if let Some(f) = self.state_flags {
            t.state_flags = f;
        }
    }

    /// Could a flow admitted before this change be refused after it? Then established
    /// flows must be re-checked: the agent bumps the generation. Conservative: any removed
    /// or overwritten entry counts, and any change of the armed layers; so do the two
    /// additions that close what was open: an isolation marker (a NetworkPolicy now selects
    /// an identity for a direction), a member entry (an ungrouped endpoint joins a
    /// SecurityGroup, which is default-deny) and any admin-tier entry (a `Deny` or `Pass`
    /// rule, or an `Allow` that shadows another tier's, may refuse what was admitted).
    pub fn narrows(&self) -> bool {
        let m = |r: bool, o: bool| r || o;
        m(!self.rules.remove.is_empty(), self.rules.overwrote)
            || self
                .rules
                .upsert
                .iter()
                .any(|(k, _)| k.peer == PEER_ISOLATED || matches!(k.layer, Layer::Anp | Layer::Banp))
            || !self.cidrs.is_empty()
            || !self.sg_members.is_empty()
            || m(!self.np_idents.remove.is_empty(), self.np_idents.overwrote)
            || !self.hf_self.is_empty()
            || self.state_flags.is_some()
    }

    /// Entries written plus keys deleted, over every map.
    pub fn len(&self) -> usize {
        self.rules.len()
            + self.cidrs.len()
            + self.sg_members.len()
            + self.np_idents.len()
            + self.hf_self.len()
            + usize::from(self.state_flags.is_some())
    }

    /// Nothing to do.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
