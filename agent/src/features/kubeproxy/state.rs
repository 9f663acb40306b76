//! The Service proxy's state: the watches' objects (Services, EndpointSlices, this node's
//! pods with hostPorts), their index, and what each made ([`Proxy`]), and how one watch event
//! becomes writes ([`Proxy::commit`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Instant;

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::watcher::Event;

use super::metrics::ServiceMetrics;
use super::model::{self, Me, NodeAddrs, NodePortAddresses, SERVICE_NAME_LABEL};
use crate::core::lb::{Frontend, Lb, Owner, Synced, Want};

/// A Service (or slice) by `(namespace, name)`.
pub type Key = (String, String);

/// What a watch event changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// Nothing the maps depend on yet (a list in progress).
    None,
    /// These Services' frontends may differ.
    Services(Vec<Key>),
    /// These pods' hostPorts may differ.
    Pods(Vec<Key>),
    /// A list completed: every Service again.
    All,
}

/// The watched Services and slices and the frontends each Service made.
#[derive(Debug)]
pub struct Proxy {
    me: Me,
    services: HashMap<Key, Service>,
    slices: HashMap<Key, EndpointSlice>,
    /// Slice names of each Service.
    by_service: HashMap<Key, BTreeSet<String>>,
    desired: HashMap<Key, BTreeMap<Frontend, Want>>,
    pending_services: Option<HashMap<Key, Service>>,
    pending_slices: Option<HashMap<Key, EndpointSlice>>,
    services_listed: bool,
    slices_listed: bool,
    /// The nodes' addresses (NodePort frontends).
    nodes: NodeAddrs,
    /// Which of them serve NodePorts (`--nodeport-addresses`).
    node_ports: NodePortAddresses,
    /// Health-check node ports: port → (Service, local ready endpoints).
    health: BTreeMap<u16, (Key, usize)>,
    /// This node's pods' hostPorts, and what they made.
    pods: HashMap<Key, Vec<model::HostPort>>,
    pending_pods: Option<HashMap<Key, Vec<model::HostPort>>>,
    pods_listed: bool,
    host_ports: HashMap<Key, BTreeMap<Frontend, Want>>,
}

fn key_of(m: &ObjectMeta) -> Key {
    (
        m.namespace.clone().unwrap_or_default(),
        m.name.clone().unwrap_or_default(),
    )
}

fn service_of(s: &EndpointSlice) -> Option<Key> {
    let name = s.metadata.labels.as_ref()?.get(SERVICE_NAME_LABEL)?;
    Some((s.metadata.namespace.clone().unwrap_or_default(), name.clone()))
}

/// What the maps need of an object, the rest dropped at once (the watch holds every
/// Service and slice of the cluster).
fn trim(m: &mut ObjectMeta) {
    m.managed_fields = None;
    m.annotations = None;
    m.owner_references = None;
}

impl Proxy {
    /// Nothing watched yet, for node `me`.
    pub fn new(me: Me) -> Self {
        Self {
            me,
            services: HashMap::new(),
            slices: HashMap::new(),
            by_service: HashMap::new(),
            desired: HashMap::new(),
            pending_services: None,
            pending_slices: None,
            services_listed: false,
            slices_listed: false,
            nodes: NodeAddrs::default(),
            node_ports: NodePortAddresses::All,
            health: BTreeMap::new(),
            pods: HashMap::new(),
            pending_pods: None,
            pods_listed: false,
            host_ports: HashMap::new(),
        }
    }

    /// NodePorts served only on the node addresses `node_ports` admits (the default: all).
    #[must_use]
    pub fn with_node_ports(mut self, node_ports: NodePortAddresses) -> Self {
        self.node_ports = node_ports;
        self
    }

    /// The nodes' addresses are now `nodes`: every NodePort Service's frontends change when
    /// they do.
    pub fn set_nodes(&mut self, nodes: NodeAddrs) -> Change {
        if nodes == self.nodes {
            return Change::None;
        }
        self.nodes = nodes;
        // NodePorts and hostPorts on other addresses: rare enough to redo all.
        Change::All
    }

    /// Every watch has listed: the maps may be written.
    pub fn listed(&self) -> bool {
        self.services_listed && self.slices_listed && self.pods_listed
    }

    /// One event of the watch of this node's pods (their hostPorts).
    pub fn pod_event(&mut self, e: Event<Pod>) -> Change {
        match e {
            Event::Init => {
                self.pending_pods = Some(HashMap::new());
                Change::None
            }
            Event::InitApply(p) => {
                if let Some(pending) = self.pending_pods.as_mut() {
                    pending.insert(key_of(&p.metadata), model::host_ports(&p));
                }
                Change::None
            }
            Event::InitDone => {
                if let Some(p) = self.pending_pods.take() {
                    self.pods = p;
                }
                self.pods_listed = true;
                Change::All
            }
            Event::Apply(p) => {
                let k = key_of(&p.metadata);
                self.pods.insert(k.clone(), model::host_ports(&p));
                Change::Pods(vec![k])
            }
            Event::Delete(p) => {
                let k = key_of(&p.metadata);
                self.pods.remove(&k);
                Change::Pods(vec![k])
            }
        }
    }

    fn compute_pod(&self, key: &Key) -> BTreeMap<Frontend, Want> {
        self.pods
            .get(key)
            .map(|hps| model::host_port_frontends(hps, &self.nodes.mine))
            .unwrap_or_default()
    }

    /// One event of the Service watch.
    pub fn service_event(&mut self, e: Event<Service>) -> Change {
        match e {
            Event::Init => {
                self.pending_services = Some(HashMap::new());
                Change::None
            }
            Event::InitApply(mut s) => {
                trim(&mut s.metadata);
                if let Some(p) = self.pending_services.as_mut() {
                    p.insert(key_of(&s.metadata), s);
                }
                Change::None
            }
            Event::InitDone => {
                if let Some(p) = self.pending_services.take() {
                    self.services = p;
                }
                self.services_listed = true;
                Change::All
            }
            Event::Apply(mut s) => {
                trim(&mut s.metadata);
                let k = key_of(&s.metadata);
                self.services.insert(k.clone(), s);
                Change::Services(vec![k])
            }
            Event::Delete(s) => {
                let k = key_of(&s.metadata);
                self.services.remove(&k);
                Change::Services(vec![k])
            }
        }
    }

    /// One event of the EndpointSlice watch.
    pub fn slice_event(&mut self, e: Event<EndpointSlice>) -> Change {
        match e {
            Event::Init => {
                self.pending_slices = Some(HashMap::new());
                Change::None
            }
            Event::InitApply(mut s) => {
                trim(&mut s.metadata);
                if let Some(p) = self.pending_slices.as_mut() {
                    p.insert(key_of(&s.metadata), s);
                }
                Change::None
            }
            Event::InitDone => {
                if let Some(p) = self.pending_slices.take() {
                    self.slices = p;
                }
                self.by_service.clear();
                for (k, s) in &self.slices {
                    if let Some(svc) = service_of(s) {
                        self.by_service.entry(svc).or_default().insert(k.1.clone());
                    }
                }
                self.slices_listed = true;
                Change::All
            }
            Event::Apply(mut s) => {
                trim(&mut s.metadata);
                let k = key_of(&s.metadata);
                let was = self.slices.get(&k).and_then(service_of);
                let is = service_of(&s);
                if let Some(o) = was.as_ref().filter(|o| Some(*o) != is.as_ref())
                    && let Some(set) = self.by_service.get_mut(o)
                {
                    set.remove(&k.1);
                }
                if let Some(n) = &is {
                    self.by_service.entry(n.clone()).or_default().insert(k.1.clone());
                }
                self.slices.insert(k, s);
                let mut touched: Vec<Key> = was.into_iter().chain(is).collect();
                touched.dedup();
                Change::Services(touched)
            }
            Event::Delete(s) => {
                let k = key_of(&s.metadata);
                let touched: Vec<Key> = self
                    .slices
                    .remove(&k)
                    .as_ref()
                    .and_then(service_of)
                    .into_iter()
                    .collect();
                for svc in &touched {
                    if let Some(set) = self.by_service.get_mut(svc) {
                        set.remove(&k.1);
                    }
                }
                Change::Services(touched)
            }
        }
    }

    /// The health-check node ports this node answers: port → (Service, local endpoints).
    pub fn health(&self) -> &BTreeMap<u16, (Key, usize)> {
        &self.health
    }

    /// The frontends `key` should have now (and its health-check port's answer); refusals
    /// are logged with the Service named.
    fn compute(&mut self, key: &Key) -> BTreeMap<Frontend, Want> {
        self.health.retain(|_, (k, _)| k != key);
        let Some(svc) = self.services.get(key) else {
            return BTreeMap::new();
        };
        let slices: Vec<&EndpointSlice> = self
            .by_service
            .get(key)
            .into_iter()
            .flatten()
            .filter_map(|n| self.slices.get(&(key.0.clone(), n.clone())))
            .collect();
        let (fronts, refused) = model::frontends_with(svc, &slices, &self.me, &self.nodes, &self.node_ports);
        if let Some((port, n)) = model::health_check(svc, &slices, &self.me) {
            self.health.insert(port, (key.clone(), n));
        }
        for r in refused {
            tracing::warn!(service = %format!("{}/{}", key.0, key.1), "Service refused in part: {r}");
        }
        fronts
    }

    /// Write what `change` changed (nothing before both watches listed): after a list,
    /// every Service and this owner's stale frontends removed; after an event, the frontends
    /// of the Services it touched only. `t0`: when the event arrived.
    pub fn commit(&mut self, change: Change, lb: &Lb, metrics: &ServiceMetrics, t0: Instant) -> Synced {
        if !self.listed() {
            return Synced::default();
        }
        match change {
            Change::None => Synced::default(),
            Change::All => {
                let mut all = BTreeMap::new();
                for gone in self.desired.keys().filter(|k| !self.services.contains_key(*k)) {
                    metrics.forget(gone);
                }
                self.desired.clear();
                self.health.clear();
                let keys: Vec<Key> = self.services.keys().cloned().collect();
                for k in keys {
                    let fronts = self.compute(&k);
                    all.extend(fronts.iter().map(|(f, w)| (*f, w.clone())));
                    metrics.set(&k, &fronts);
                    self.desired.insert(k, fronts);
                }
                self.host_ports.clear();
                let pods: Vec<Key> = self.pods.keys().cloned().collect();
                for k in pods {
                    let fronts = self.compute_pod(&k);
                    if !fronts.is_empty() {
                        all.extend(fronts.iter().map(|(f, w)| (*f, w.clone())));
                        self.host_ports.insert(k, fronts);
                    }
                }
                let done = lb.sync(Owner::KubeService, &all, true);
                tracing::info!(services = self.desired.len(), host_port_pods = self.host_ports.len(), written = done.written,
                    removed = done.removed, held = done.held, took = ?t0.elapsed(),
                    "Service frontends listed");
                done
            }
            Change::Services(keys) => {
                let mut changes: Vec<(Frontend, Option<Want>)> = Vec::new();
                for k in keys {
                    let now = self.compute(&k);
                    let before = self.desired.remove(&k).unwrap_or_default();
                    for (f, w) in &now {
                        if before.get(f) != Some(w) {
                            changes.push((*f, Some(w.clone())));
                        }
                    }
                    changes.extend(before.keys().filter(|f| !now.contains_key(f)).map(|f| (*f, None)));
                    if now.is_empty() {
                        metrics.forget(&k);
                    } else {
                        metrics.set(&k, &now);
                        self.desired.insert(k, now);
                    }
                }
                if changes.is_empty() {
                    return Synced::default();
                }
                let done = lb.update(Owner::KubeService, &changes);
                metrics.observe_sync(t0.elapsed());
                tracing::debug!(written = done.written, removed = done.removed,
                    took = ?t0.elapsed(), "Service frontends updated");
                done
            }
            Change::Pods(keys) => {
                let mut changes: Vec<(Frontend, Option<Want>)> = Vec::new();
                for k in keys {
                    let now = self.compute_pod(&k);
                    let before = self.host_ports.remove(&k).unwrap_or_default();
                    changes.extend(
                        now.iter()
                            .filter(|(f, w)| before.get(f) != Some(*w))
                            .map(|(f, w)| (*f, Some(w.clone()))),
                    );
                    changes.extend(before.keys().filter(|f| !now.contains_key(f)).map(|f| (*f, None)));
                    if !now.is_empty() {
                        self.host_ports.insert(k, now);
                    }
                }
                if changes.is_empty() {
                    return Synced::default();
                }
                let done = lb.update(Owner::KubeService, &changes);
                tracing::info!(
                    written = done.written,
                    removed = done.removed,
                    "hostPort frontends updated"
                );
                done
            }
        }
    }
}
