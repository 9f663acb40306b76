//! The compilers and what feeds them: one listing per watched kind, turned into compiler
//! calls, each returning the [`Diff`] of the entries it touches.
//!
//! Until every watch has listed once, nothing is compiled: the listings fill, and then the
//! compilers are built in one go ([`Feed::build`]; NetworkPolicy with
//! [`NpCompiler::build`], which is much cheaper than adding pods one by one). After that
//! every change is compiled as it comes ([`Feed::step`]). A relist of one kind (after a
//! watch expired) turns into the changes between what was listed before and now. A kind the
//! API does not serve (the AdminNetworkPolicy CRDs not installed) counts as listed and empty
//! ([`Listing::absent`]) until a list succeeds. The kube-apiserver's EndpointSlices are one
//! listing like the others (an empty list is a complete one): their ready addresses are
//! what the `policy.cozystack.io/kube-apiserver` extension of the admin tiers matches
//! ([`NpCompiler::set_kube_apiserver`]).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::Instant;

use cozyplane_apis::admin_policy::{AdminNetworkPolicy, BaselineAdminNetworkPolicy};
use cozyplane_apis::v1alpha1::{HostFirewall, Port, SecurityGroup};
use cozyplane_policy::Warning;
use cozyplane_policy::hf::{HfCompiler, NodeInfo};
use cozyplane_policy::model::{Diff, Tables};
use cozyplane_policy::np::{self, NamespaceInfo, NpCompiler, PodInfo};
use cozyplane_policy::sg::SgCompiler;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::runtime::watcher::Event;

/// `(namespace, name)`; the namespace is empty for cluster-scoped kinds.
pub type Key = (String, String);

/// What a watch event means for the compilers.
#[derive(Clone, Debug)]
pub enum Step<T> {
    /// The object is (now) this.
    Set(Key, T),
    /// The object is gone.
    Gone(Key),
}

/// One kind's list+watch state: `live` is what the compilers were given.
#[derive(Debug)]
pub struct Listing<T> {
    /// The objects, by key.
    pub live: BTreeMap<Key, T>,
    pending: Option<BTreeMap<Key, T>>,
    /// Listed completely at least once.
    pub synced: bool,
    /// The API does not serve the kind (its last list answered 404).
    pub absent: bool,
}

impl<T> Default for Listing<T> {
    fn default() -> Self {
        Self {
            live: BTreeMap::new(),
            pending: None,
            synced: false,
            absent: false,
        }
    }
}

impl<T> Listing<T> {
    /// The API does not serve the kind (no CRD): as listed and empty, every live object gone.
    /// Whether that is news (it was served, or never answered, before).
    pub fn absent(&mut self) -> (Vec<Step<T>>, bool) {
        let news = !self.absent;
        self.absent = true;
        self.synced = true;
        self.pending = None;
        let gone = std::mem::take(&mut self.live)
            .into_keys()
            .map(Step::Gone)
            .collect();
        (gone, news)
    }
}

impl<T: Clone + PartialEq> Listing<T> {
    /// Take one watch event; the steps it means for the compilers (a list's items only at
    /// its end, and only those that differ from what was live). `row` reads an object
    /// (`None`: as good as absent, e.g. a VPC without a VNI yet).
    pub fn event<O>(
        &mut self,
        ev: Event<O>,
        key: impl Fn(&O) -> Key,
        row: impl Fn(&O) -> Option<T>,
    ) -> Vec<Step<T>> {
        match ev {
            Event::Init => {
                self.pending = Some(BTreeMap::new());
                Vec::new()
            }
            Event::InitApply(o) => {
                if let (Some(p), Some(v)) = (self.pending.as_mut(), row(&o)) {
                    p.insert(key(&o), v);
                }
                Vec::new()
            }
            Event::InitDone => {
                self.synced = true;
                self.absent = false;
                let Some(new) = self.pending.take() else {
                    return Vec::new();
                };
                let old = std::mem::replace(&mut self.live, new);
                let mut steps: Vec<Step<T>> = self
                    .live
                    .iter()
                    .filter(|(k, v)| old.get(*k) != Some(*v))
                    .map(|(k, v)| Step::Set(k.clone(), v.clone()))
                    .collect();
                steps.extend(
                    old.into_keys()
                        .filter(|k| !self.live.contains_key(k))
                        .map(Step::Gone),
                );
                steps
            }
            Event::Apply(o) => {
                let k = key(&o);
                match row(&o) {
                    Some(v) if self.live.get(&k) == Some(&v) => Vec::new(),
                    Some(v) => {
                        self.live.insert(k.clone(), v.clone());
                        vec![Step::Set(k, v)]
                    }
                    None => self.gone(k),
                }
            }
            Event::Delete(o) => self.gone(key(&o)),
        }
    }

    fn gone(&mut self, k: Key) -> Vec<Step<T>> {
        match self.live.remove(&k) {
            Some(_) => vec![Step::Gone(k)],
            None => Vec::new(),
        }
    }
}

/// Every watched kind.
#[derive(Debug, Default)]
pub struct Listings {
    /// NetworkPolicies.
    pub policies: Listing<NetworkPolicy>,
    /// Pods of every node (not finished ones).
    pub pods: Listing<PodInfo>,
    /// Namespaces' labels.
    pub namespaces: Listing<NamespaceInfo>,
    /// This node (labels, addresses), for the HostFirewall.
    pub node: Listing<NodeInfo>,
    /// Every node (labels, addresses), for AdminNetworkPolicy `nodes` peers.
    pub nodes: Listing<np::NodeInfo>,
    /// AdminNetworkPolicies (spec and name only).
    pub anps: Listing<AdminNetworkPolicy>,
    /// The BaselineAdminNetworkPolicy (spec and name only).
    pub banps: Listing<BaselineAdminNetworkPolicy>,
    /// The `default/kubernetes` Service's EndpointSlices: their ready addresses.
    pub apiserver: Listing<Vec<IpAddr>>,
    /// VPCs with a VNI: the net.
    pub vpcs: Listing<u32>,
    /// SecurityGroups.
    pub groups: Listing<SecurityGroup>,
    /// Ports (every node's: remote members are looked up too).
    pub ports: Listing<Port>,
    /// HostFirewalls.
    pub firewalls: Listing<HostFirewall>,
}

impl Listings {
    /// The kube-apiserver's addresses: every ready address of its EndpointSlices, sorted.
    pub fn kube_apiserver(&self) -> Vec<IpAddr> {
        let mut ips: Vec<IpAddr> = self.apiserver.live.values().flatten().copied().collect();
        ips.sort_unstable();
        ips.dedup();
        ips
    }

    /// Has every kind listed once?
    pub fn synced(&self) -> bool {
        self.policies.synced
            && self.pods.synced
            && self.namespaces.synced
            && self.node.synced
            && self.nodes.synced
            && self.anps.synced
            && self.banps.synced
            && self.apiserver.synced
            && self.vpcs.synced
            && self.groups.synced
            && self.ports.synced
            && self.firewalls.synced
    }
}

/// A change for the compilers, of any kind.
#[derive(Clone, Debug)]
pub enum Change {
    /// A NetworkPolicy.
    Policy(Step<NetworkPolicy>),
    /// A Pod.
    Pod(Step<PodInfo>),
    /// A Namespace.
    Namespace(Step<NamespaceInfo>),
    /// This node.
    Node(Step<NodeInfo>),
    /// Any node (this one too), for `nodes` peers.
    ClusterNode(Step<np::NodeInfo>),
    /// An AdminNetworkPolicy.
    Anp(Step<AdminNetworkPolicy>),
    /// The BaselineAdminNetworkPolicy.
    Banp(Step<BaselineAdminNetworkPolicy>),
    /// The kube-apiserver's addresses now (all of them, after any of its EndpointSlices
    /// changed).
    KubeApiserver(Vec<IpAddr>),
    /// A VPC's net.
    Vpc(Step<u32>),
    /// A SecurityGroup.
    Group(Step<SecurityGroup>),
    /// A Port.
    Port(Step<Port>),
    /// A HostFirewall.
    Firewall(Step<HostFirewall>),
}

/// The three compilers of this node.
#[derive(Debug)]
pub struct Feed {
    /// NetworkPolicy.
    pub np: NpCompiler,
    /// SecurityGroups.
    pub sg: SgCompiler,
    /// This node's HostFirewall.
    pub hf: HfCompiler,
    /// What the node is when its Node object is unknown: its name and `--node-ip`.
    bare_node: NodeInfo,
}

/// The Service whose endpoints are the kube-apiserver: `kubernetes` in `default`, the one
/// the API server maintains for itself.
pub const APISERVER_NAMESPACE: &str = "default";

/// The label selector of the kube-apiserver's EndpointSlices.
pub const APISERVER_SLICES: &str = "kubernetes.io/service-name=kubernetes";

/// The ready addresses (both families) of an EndpointSlice of the kube-apiserver; `None`
/// for a slice of another Service (should the API ignore the selector). An endpoint
/// without the `ready` condition is ready, as the API documents; FQDN slices hold no
/// address.
pub fn apiserver_addresses(s: &EndpointSlice) -> Option<Vec<IpAddr>> {
    let labels = s.metadata.labels.as_ref();
    if labels
        .and_then(|l| l.get("kubernetes.io/service-name"))
        .map(String::as_str)
        != Some("kubernetes")
        || s.metadata.namespace.as_deref() != Some(APISERVER_NAMESPACE)
    {
        return None;
    }
    if !matches!(s.address_type.as_str(), "IPv4" | "IPv6") {
        return Some(Vec::new());
    }
    let mut ips: Vec<IpAddr> = s
        .endpoints
        .iter()
        .flatten()
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) != Some(false))
        .flat_map(|e| &e.addresses)
        .filter_map(|a| a.parse().ok())
        .collect();
    ips.sort_unstable();
    ips.dedup();
    Some(ips)
}

/// The node's addresses in its Node object, and the agent's own: its underlay address and the
/// uplink's (`own`).
pub fn node_info(n: &k8s_openapi::api::core::v1::Node, own: &[IpAddr]) -> NodeInfo {
    let mut addresses: Vec<IpAddr> = n
        .status
        .iter()
        .flat_map(|s| s.addresses.iter().flatten())
        .filter_map(|a| a.address.parse().ok())
        .collect();
    addresses.extend_from_slice(own);
    addresses.sort_unstable();
    addresses.dedup();
    NodeInfo {
        name: n.metadata.name.clone().unwrap_or_default(),
        labels: n.metadata.labels.clone().unwrap_or_default(),
        addresses,
    }
}

impl Feed {
    /// Build the compilers from complete listings.
    pub fn build(l: &Listings, bare_node: NodeInfo) -> Self {
        let mut np = NpCompiler::build(
            l.namespaces.live.values().cloned(),
            l.pods.live.values().cloned(),
            l.policies.live.values(),
        );
        // The nodes before the policies whose `nodes` peers select them; the diffs are
        // dropped, the maps take the full output.
        for n in l.nodes.live.values() {
            np.set_node(n.clone());
        }
        np.set_kube_apiserver(l.kube_apiserver());
        for p in l.anps.live.values() {
            np.set_anp(p);
        }
        for p in l.banps.live.values() {
            np.set_banp(p);
        }
        let mut sg = SgCompiler::new();
        for ((ns, name), net) in &l.vpcs.live {
            sg.set_vpc(ns, name, *net);
        }
        for g in l.groups.live.values() {
            sg.set_group(g);
        }
        for p in l.ports.live.values() {
            sg.set_port(p);
        }
        let node = l
            .node
            .live
            .values()
            .next()
            .cloned()
            .unwrap_or_else(|| bare_node.clone());
        let mut hf = HfCompiler::new(node);
        for f in l.firewalls.live.values() {
            hf.set_firewall(f);
        }
        Self {
            np,
            sg,
            hf,
            bare_node,
        }
    }

    /// Every entry the three compilers own: what the maps must hold.
    pub fn tables(&self) -> Tables {
        let np = self.np.tables();
        let mut t = self.sg.tables();
        t.rules.extend(np.rules);
        t.cidrs.extend(np.cidrs);
        t.np_idents = np.np_idents;
        let hf = self.hf.tables();
        t.rules.extend(hf.rules.iter().map(|(k, v)| (*k, *v)));
        t.cidrs.extend(hf.cidrs.iter().map(|(k, v)| (*k, *v)));
        t.hf_self.clone_from(&hf.hf_self);
        t.state_flags = hf.state_flags;
        t
    }

    /// Every construct currently refused.
    pub fn warnings(&self) -> BTreeSet<WarningKey> {
        self.np
            .warnings()
            .chain(self.sg.warnings())
            .chain(self.hf.warnings())
            .map(|w| WarningKey(w.clone()))
            .collect()
    }

    /// Compile one change; the layer it concerned and its diff.
    pub fn step(&mut self, c: Change) -> (&'static str, Diff) {
        match c {
            Change::Policy(Step::Set(_, np)) => ("np", self.np.set_policy(&np)),
            Change::Policy(Step::Gone((ns, name))) => ("np", self.np.remove_policy(&ns, &name)),
            Change::Pod(Step::Set(_, p)) => ("np", self.np.set_pod(p)),
            Change::Pod(Step::Gone((ns, name))) => ("np", self.np.remove_pod(&ns, &name)),
            Change::Namespace(Step::Set(_, n)) => ("np", self.np.set_namespace(&n)),
            Change::Namespace(Step::Gone((_, name))) => ("np", self.np.remove_namespace(&name)),
            Change::Node(Step::Set(_, n)) => ("hf", self.hf.set_node(n)),
            Change::Node(Step::Gone(_)) => ("hf", self.hf.set_node(self.bare_node.clone())),
            Change::ClusterNode(Step::Set(_, n)) => ("np", self.np.set_node(n)),
            Change::ClusterNode(Step::Gone((_, name))) => ("np", self.np.remove_node(&name)),
            Change::Anp(Step::Set(_, p)) => ("anp", self.np.set_anp(&p)),
            Change::Anp(Step::Gone((_, name))) => ("anp", self.np.remove_anp(&name)),
            Change::Banp(Step::Set(_, p)) => ("banp", self.np.set_banp(&p)),
            Change::Banp(Step::Gone((_, name))) => ("banp", self.np.remove_banp(&name)),
            Change::KubeApiserver(ips) => ("anp", self.np.set_kube_apiserver(ips)),
            Change::Vpc(Step::Set((ns, name), net)) => ("sg", self.sg.set_vpc(&ns, &name, net)),
            Change::Vpc(Step::Gone((ns, name))) => ("sg", self.sg.remove_vpc(&ns, &name)),
            Change::Group(Step::Set(_, g)) => ("sg", self.sg.set_group(&g)),
            Change::Group(Step::Gone((ns, name))) => ("sg", self.sg.remove_group(&ns, &name)),
            Change::Port(Step::Set(_, p)) => ("sg", self.sg.set_port(&p)),
            Change::Port(Step::Gone((_, name))) => ("sg", self.sg.remove_port(&name)),
            Change::Firewall(Step::Set(_, f)) => ("hf", self.hf.set_firewall(&f)),
            Change::Firewall(Step::Gone((_, name))) => ("hf", self.hf.remove_firewall(&name)),
        }
    }

    /// [`Feed::step`], timed.
    pub fn timed_step(&mut self, c: Change) -> (&'static str, Diff, f64) {
        let started = Instant::now();
        let (layer, d) = self.step(c);
        (layer, d, started.elapsed().as_secs_f64())
    }
}

/// A [`Warning`], ordered (for the set of what was already reported).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WarningKey(pub Warning);

impl WarningKey {
    fn sort_key(&self) -> (&str, &str, String) {
        (&self.0.object, &self.0.field, self.0.reason.to_string())
    }
}

impl PartialOrd for WarningKey {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

impl Ord for WarningKey {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.sort_key().cmp(&o.sort_key())
    }
}
