//! The loops that read the kube-apiserver (only with a kube connection, i.e. `--kubeconfig`,
//! `--authentication-kubeconfig` or in-cluster; plain `--standalone` has neither and runs
//! without them):
//!
//! * **Port GC**: a Port whose `spec.node` names a Node that does not exist is deleted, and the
//!   agent's `sdn.cozystack.io/sever` finalizer of such a terminating Port is removed (no agent is
//!   left to sever it), so the store's normal delete path releases its claims. To avoid racing a
//!   node's registration, a missing node counts only if this process saw it exist (and go) or
//!   the Port is older than the grace period (`--port-gc-grace`, 30 s). The cache's verdict is
//!   confirmed by a live `GET` of the Node before anything is deleted.
//! * **SecurityGroup membership**: for each live Port with `spec.podNamespace`/`spec.podName`,
//!   `status.groups` is the sorted ids of the SecurityGroups in the Port's VPC (namespace
//!   `spec.vpcRef.namespace`, `spec.vpcRef.name` equal, `status.id` allocated, not being
//!   deleted) whose `spec.podSelector` matches the pod's labels. Labels come from the Pod watch
//!   (a pod whose uid differs from the Port's `sdn.cozystack.io/pod-uid` label does not count);
//!   without the pod they come from the Port's `sdn.cozystack.io/pod-labels` annotation; with
//!   neither the Port is left as it is.
//!
//! * **Port claimants** ([`claimant`]): a live Port naming a pod (`spec.podNamespace`/
//!   `spec.podName`) whose pod does not exist, or exists with another uid than the Port's
//!   `sdn.cozystack.io/pod-uid` label, is deleted. That closes the leak of a pod deleted while
//!   its node's agent was down (its DEL never deleted the Port). The Port is then terminating:
//!   the agent, back, severs and releases it; a node that never comes back is Port GC's. A
//!   persistent Port (`sdn.cozystack.io/vm-name`, issue 27) is its workload's: deleted once no
//!   pod of the workload, VirtualMachineInstance or VirtualMachine has existed for the grace
//!   period; Port GC leaves it alone while it is live (its node may die with the VM moving).
//!
//! * **Doors** ([`nat_gateway`], [`floating_ip`]; shared parts in [`doors`] and [`owned`]): the
//!   LoadBalancer Services and EndpointSlices a VPC's effective NAT gateway and its exclusive
//!   FloatingIPs own, and their status from the addresses the cluster's LoadBalancer
//!   implementation assigns. They have their own queue and worker, fed by mirrors of VPCs,
//!   gateways and FloatingIPs, this loop's Port mirror, and Service/EndpointSlice informers
//!   limited by label to the objects they own.
//! * **ServiceVIPs** ([`service_vip`]): Services annotated for a VPC get their ServiceVIPs.
//! * **Live migration** ([`migration`]): a VM's Ports move to the migration's target when
//!   KubeVirt reports the domain there, or stay with the source when it fails.
//!
//! All are work-queue controllers like [`super::loops`]: Ports and SecurityGroups come from
//! typed mirrors of the watch caches, Nodes and Pods from [informers](crate::informer) (see
//! there for backoff, `/readyz` and metrics). Indexes by node, by pod and by VPC turn each
//! change into the few Ports it affects: a Node going away queues the GC of its Ports, a Pod's
//! labels changing queues its Ports' membership, a SecurityGroup changing queues the Ports of
//! its VPC. What the loops read is declared in the RBAC table ([`crate::rbac::server`]).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cozyplane_apis::v1alpha1::{Port, SecurityGroup};
use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::watcher;
use serde_json::{Value, json};
use tokio::sync::watch;

use super::informer::{Changed, Mirror};
use super::loops::{AbortOnDrop, edit_finalizers, find};
use super::queue::Queue;
use crate::errors::{ApiError, Result};
use crate::informer::KubeConnection;
use crate::rbac::server as rbac;
use crate::registry::Resource;
use crate::registry::cache::WatchCache;
use crate::registry::store::{DeleteOptions, Deleted, WriteOptions};

/// The agent's finalizer on Ports.
pub use crate::registry::port::SEVER;
/// The default grace before a Port on a never-seen node is collected.
pub const DEFAULT_PORT_GC_GRACE: Duration = Duration::from_secs(30);
/// How long a failed reconcile waits before it is tried again.
const RETRY: Duration = Duration::from_secs(1);
/// The label naming the uid of a Port's pod.
const POD_UID: &str = "sdn.cozystack.io/pod-uid";
/// The annotation carrying a Port's pod labels (when the pod is not watched).
const POD_LABELS: &str = "sdn.cozystack.io/pod-labels";

/// What the kube-backed loops need.
#[derive(Clone)]
pub struct KubeConfig {
    /// The kube-apiserver connection.
    pub kube: KubeConnection,
    /// See the module docs.
    pub port_gc_grace: Duration,
}

/// One Port to look at.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Work {
    /// Port GC of the named Port.
    Gc(String),
    /// SecurityGroup membership of the named Port.
    Groups(String),
    /// Whether the named Port's pod still exists ([`claimant`]).
    Claimant(String),
}

mod claimant;
mod doors;
mod events;
mod floating_ip;
pub mod migration;
mod nat_gateway;
mod owned;
pub mod service_vip;

type Index<K> = Mutex<HashMap<K, BTreeSet<String>>>;

fn index_set<K: std::hash::Hash + Eq>(ix: &Index<K>, key: K, port: &str, present: bool) {
    let mut m = ix.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if present {
        m.entry(key).or_default().insert(port.to_string());
    } else if let Some(set) = m.get_mut(&key) {
        set.remove(port);
        if set.is_empty() {
            m.remove(&key);
        }
    }
}

fn index_get<K: std::hash::Hash + Eq>(ix: &Index<K>, key: &K) -> Vec<String> {
    ix.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(key)
        .map(|s| s.iter().cloned().collect())
        .unwrap_or_default()
}

/// What the handlers and the worker share.
struct Shared {
    nodes_api: Api<Node>,
    /// For the live GET of a Port's pod ([`claimant`]).
    kube: kube::Client,
    nodes: reflector::Store<Node>,
    pods: reflector::Store<Pod>,
    nodes_ready: AtomicBool,
    pods_ready: AtomicBool,
    seen_nodes: Mutex<HashSet<String>>,
    /// Persistent Ports whose workload was found gone, and since when ([`claimant`]).
    orphaned: Mutex<HashMap<String, std::time::Instant>>,
    grace: Duration,
    ports: Arc<Mirror<Port>>,
    groups: Arc<Mirror<SecurityGroup>>,
    by_node: Index<String>,
    by_pod: Index<(String, String)>,
    by_vpc: Index<(String, String)>,
    queue: Arc<Queue<Work>>,
}

fn pod_of(p: &Port) -> Option<(String, String)> {
    (!p.spec.pod_namespace.is_empty() && !p.spec.pod_name.is_empty())
        .then(|| (p.spec.pod_namespace.clone(), p.spec.pod_name.clone()))
}

fn vpc_of(p: &Port) -> (String, String) {
    (p.spec.vpc_ref.namespace.clone(), p.spec.vpc_ref.name.clone())
}

impl Shared {
    fn index(&self, p: &Port, present: bool) {
        let name = p.metadata.name.as_deref().unwrap_or_default();
        if !p.spec.node.is_empty() {
            index_set(&self.by_node, p.spec.node.clone(), name, present);
        }
        if let Some(pod) = pod_of(p) {
            index_set(&self.by_pod, pod, name, present);
        }
        index_set(&self.by_vpc, vpc_of(p), name, present);
    }

    fn on_port(&self, c: &Changed<'_, Port>) {
        if let Some(o) = c.old {
            self.index(o, false);
        }
        let Some(p) = c.new else { return };
        self.index(p, true);
        let name = p.metadata.name.clone().unwrap_or_default();
        // Our own status write (groups) changes nothing either loop looks at.
        if let Some(o) = c.old
            && o.spec == p.spec
            && o.metadata.labels == p.metadata.labels
            && o.metadata.annotations == p.metadata.annotations
            && o.metadata.deletion_timestamp == p.metadata.deletion_timestamp
            && o.metadata.finalizers == p.metadata.finalizers
        {
            return;
        }
        if !p.spec.node.is_empty() {
            self.queue.add(Work::Gc(name.clone()));
        }
        if pod_of(p).is_some() {
            self.queue.add(Work::Groups(name.clone()));
            self.queue.add(Work::Claimant(name));
        }
    }

    fn on_group(&self, c: &Changed<'_, SecurityGroup>) {
        let id = |g: &SecurityGroup| g.status.as_ref().map_or(0, |s| s.id);
        if let (Some(o), Some(n)) = (c.old, c.new)
            && o.spec == n.spec
            && id(o) == id(n)
            && o.metadata.deletion_timestamp == n.metadata.deletion_timestamp
        {
            return;
        }
        for g in [c.old, c.new].into_iter().flatten() {
            let vpc = (
                g.metadata.namespace.clone().unwrap_or_default(),
                g.spec.vpc_ref.name.clone(),
            );
            for port in index_get(&self.by_vpc, &vpc) {
                self.queue.add(Work::Groups(port));
            }
        }
    }

    fn on_node(&self, ev: &watcher::Event<Node>) {
        match ev {
            watcher::Event::InitApply(n) | watcher::Event::Apply(n) => {
                if let Some(name) = n.metadata.name.clone() {
                    self.seen_nodes
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .insert(name);
                }
            }
            watcher::Event::Delete(n) => {
                let name = n.metadata.name.clone().unwrap_or_default();
                for port in index_get(&self.by_node, &name) {
                    self.queue.add(Work::Gc(port));
                }
            }
            watcher::Event::InitDone => {
                self.nodes_ready.store(true, Ordering::SeqCst);
                for p in self.ports.all() {
                    if !p.spec.node.is_empty() {
                        self.queue
                            .add(Work::Gc(p.metadata.name.clone().unwrap_or_default()));
                    }
                }
            }
            watcher::Event::Init => {}
        }
    }

    fn on_pod(&self, ev: &watcher::Event<Pod>) {
        match ev {
            watcher::Event::InitApply(_) | watcher::Event::Init => {}
            watcher::Event::Apply(pod) | watcher::Event::Delete(pod) => {
                let key = (
                    pod.metadata.namespace.clone().unwrap_or_default(),
                    pod.metadata.name.clone().unwrap_or_default(),
                );
                let gone = matches!(ev, watcher::Event::Delete(_));
                for port in index_get(&self.by_pod, &key) {
                    if gone {
                        self.queue.add(Work::Claimant(port.clone()));
                    }
                    self.queue.add(Work::Groups(port));
                }
            }
            watcher::Event::InitDone => {
                self.pods_ready.store(true, Ordering::SeqCst);
                for p in self.ports.all() {
                    if pod_of(&p).is_some() {
                        let name = p.metadata.name.clone().unwrap_or_default();
                        self.queue.add(Work::Groups(name.clone()));
                        self.queue.add(Work::Claimant(name));
                    }
                }
            }
        }
    }

    /// The labels of the Port's pod: the watched pod, else the `pod-labels` annotation.
    fn pod_labels(&self, p: &Port) -> Option<BTreeMap<String, String>> {
        let (ns, name) = pod_of(p)?;
        let uid = p
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(POD_UID))
            .map(String::as_str)
            .unwrap_or_default();
        if let Some(pod) = self.pods.get(&ObjectRef::new(&name).within(&ns))
            && (uid.is_empty() || pod.metadata.uid.as_deref() == Some(uid))
        {
            return Some(pod.metadata.labels.clone().unwrap_or_default());
        }
        let ann = p.metadata.annotations.as_ref()?.get(POD_LABELS)?;
        serde_json::from_str(ann).ok()
    }
}

/// The reconcilers.
struct Reconciler {
    shared: Arc<Shared>,
    ports: Arc<dyn Resource>,
}

#[async_trait::async_trait]
impl super::queue::Reconcile<Work> for Reconciler {
    async fn reconcile(&self, w: &Work) -> Result<()> {
        match w {
            Work::Gc(name) => self.port_gc(name).await,
            Work::Groups(name) => self.membership(name).await,
            Work::Claimant(name) => self.claimant(name).await,
        }
    }
}

impl Reconciler {
    async fn port_gc(&self, name: &str) -> Result<()> {
        let sh = &self.shared;
        if !sh.nodes_ready.load(Ordering::SeqCst) {
            return Ok(());
        }
        let Some(p) = sh.ports.get("", name) else {
            return Ok(());
        };
        let node = p.spec.node.as_str();
        if node.is_empty() || sh.nodes.get(&ObjectRef::new(node)).is_some() {
            return Ok(());
        }
        let deleting = p.metadata.deletion_timestamp.is_some();
        // A workload's Port outlives its node: the workload's next pod takes it elsewhere
        // (its release is the claimant's, by the workload). Terminating, it is released here
        // like any Port whose agent is gone.
        if !deleting && p.workload().is_some() {
            return Ok(());
        }
        if !deleting {
            let seen = sh
                .seen_nodes
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .contains(node);
            let age = p.metadata.creation_timestamp.as_ref().map_or(Duration::MAX, |t| {
                let ms = k8s_openapi::jiff::Timestamp::now().as_millisecond() - t.0.as_millisecond();
                Duration::from_millis(u64::try_from(ms).unwrap_or(0))
            });
            if !seen && age < sh.grace {
                // Not yet: the node may still be registering. Look again when the grace is over.
                let left = sh.grace - age + Duration::from_millis(100);
                sh.queue.add_after(Work::Gc(name.to_string()), left);
                return Ok(());
            }
        }
        match sh.nodes_api.get_opt(node).await {
            Ok(None) => {}
            Ok(Some(_)) => return Ok(()),
            Err(e) => {
                return Err(ApiError::unavailable(format!(
                    "port GC: looking up node {node}: {e}"
                )));
            }
        }
        let finalizers = if deleting {
            p.metadata.finalizers.clone().unwrap_or_default()
        } else {
            tracing::info!(port = %name, node, "deleting a Port whose node does not exist");
            match self.ports.delete(None, name, &DeleteOptions::default()).await {
                Ok(Deleted::Gone(_)) => return Ok(()),
                Ok(Deleted::Marked(v)) => {
                    serde_json::from_value(v["metadata"]["finalizers"].clone()).unwrap_or_default()
                }
                Err(e) if e.is_not_found() => return Ok(()),
                Err(e) => return Err(e),
            }
        };
        if finalizers.iter().any(|f: &String| f == SEVER) {
            edit_finalizers(&self.ports, "", name, |f| f.retain(|x| x != SEVER)).await?;
        }
        Ok(())
    }

    async fn membership(&self, name: &str) -> Result<()> {
        let sh = &self.shared;
        if !sh.pods_ready.load(Ordering::SeqCst) {
            return Ok(());
        }
        let Some(p) = sh.ports.get("", name) else {
            return Ok(());
        };
        if p.metadata.deletion_timestamp.is_some() {
            return Ok(());
        }
        let Some(labels) = sh.pod_labels(&p) else {
            return Ok(());
        };
        let (vpc_ns, vpc) = vpc_of(&p);
        let groups: Vec<(i64, Value)> = sh
            .groups
            .in_namespace(&vpc_ns)
            .iter()
            .filter(|g| g.spec.vpc_ref.name == vpc && g.metadata.deletion_timestamp.is_none())
            .filter_map(|g| {
                let id = g.status.as_ref().map_or(0, |s| s.id);
                (id != 0).then(|| (i64::from(id), json!(g.spec.pod_selector)))
            })
            .collect();
        let want = member_ids(&groups, &labels);
        let have: Vec<i64> = p
            .status
            .as_ref()
            .map(|s| s.groups.iter().map(|g| i64::from(*g)).collect())
            .unwrap_or_default();
        if have == want {
            return Ok(());
        }
        let set = move |mut cur: Value| -> Result<Value> {
            if !cur.get("status").is_some_and(Value::is_object) {
                cur["status"] = json!({});
            }
            cur["status"]["groups"] = json!(want.clone());
            Ok(cur)
        };
        match self
            .ports
            .patch(None, name, &set, true, &WriteOptions::server())
            .await
        {
            Err(e) if e.is_not_found() => Ok(()),
            other => other.map(|_| ()),
        }
    }
}

/// Feeds an informer's events into `writer`, then to `on_event`.
fn spawn_cache<K, F>(
    mut events: BoxStream<'static, watcher::Event<K>>,
    mut writer: reflector::store::Writer<K>,
    on_event: F,
) -> AbortOnDrop
where
    K: kube::Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
    F: Fn(&watcher::Event<K>) + Send + 'static,
{
    AbortOnDrop(tokio::spawn(async move {
        while let Some(ev) = events.next().await {
            writer.apply_watcher_event(&ev);
            on_event(&ev);
        }
    }))
}

/// The running kube-backed loops; everything stops when this is dropped.
pub struct KubeLoops {
    _tasks: Vec<AbortOnDrop>,
}

impl std::fmt::Debug for KubeLoops {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeLoops").finish_non_exhaustive()
    }
}

impl KubeLoops {
    /// Starts the Node and Pod informers, the Port and SecurityGroup mirrors and the worker,
    /// which works while `leader` says this replica leads.
    pub fn start(
        cfg: &KubeConfig,
        kinds: &[Arc<dyn Resource>],
        caches: &[Arc<WatchCache>],
        leader: watch::Receiver<bool>,
    ) -> Self {
        let cache = |plural: &str| {
            caches
                .iter()
                .find(|c| c.resource().info().plural == plural)
                .cloned()
        };
        let (Some(ports_c), Some(groups_c), Some(ports)) =
            (cache("ports"), cache("securitygroups"), find(kinds, "ports"))
        else {
            tracing::error!("the kube-backed loops need the ports and securitygroups kinds");
            return Self { _tasks: Vec::new() };
        };
        let (nodes, nw) = reflector::store();
        let (pods, pw) = reflector::store();
        let (queue, rx) = Queue::new();
        let shared = Arc::new(Shared {
            nodes_api: rbac::NODES.uses("get").api_all(cfg.kube.client.clone()),
            kube: cfg.kube.client.clone(),
            nodes,
            pods,
            nodes_ready: AtomicBool::new(false),
            pods_ready: AtomicBool::new(false),
            seen_nodes: Mutex::default(),
            orphaned: Mutex::default(),
            grace: cfg.port_gc_grace,
            ports: Arc::default(),
            groups: Arc::default(),
            by_node: Mutex::default(),
            by_pod: Mutex::default(),
            by_vpc: Mutex::default(),
            queue: Arc::new(queue),
        });
        let mut tasks = Vec::new();
        let (doors_queue, doors_rx) = Queue::new();
        let doors = doors::Doors::new(
            cfg.kube.client.clone(),
            kinds,
            shared.ports.clone(),
            Arc::new(doors_queue),
        )
        .map(Arc::new);
        let sh = shared.clone();
        let d = doors.clone();
        tasks.push(AbortOnDrop(shared.ports.follow(ports_c, move |c| {
            sh.on_port(&c);
            if let Some(d) = &d {
                d.on_port(&c);
            }
        })));
        if let Some(d) = &doors {
            tasks.extend(doors::start(d, &cfg.kube, caches, doors_rx, leader.clone()));
        }
        let sh = shared.clone();
        tasks.push(AbortOnDrop(
            shared.groups.follow(groups_c, move |c| sh.on_group(&c)),
        ));
        let sh = shared.clone();
        tasks.push(spawn_cache(
            cfg.kube
                .watch_all::<Node>(&rbac::NODES, watcher::Config::default()),
            nw,
            move |ev| sh.on_node(ev),
        ));
        let sh = shared.clone();
        tasks.push(spawn_cache(
            cfg.kube.watch_all::<Pod>(&rbac::PODS, watcher::Config::default()),
            pw,
            move |ev| sh.on_pod(ev),
        ));
        tasks.extend(service_vip::start(&cfg.kube, kinds, caches, leader.clone()));
        tasks.push(migration::start(
            cfg.kube.client.clone(),
            cfg.kube.watch_client.clone(),
            ports.clone(),
            shared.ports.clone(),
            leader.clone(),
        ));
        let r = Reconciler {
            shared,
            ports: ports.clone(),
        };
        tasks.push(AbortOnDrop(tokio::spawn(async move {
            let queue = r.shared.queue.clone();
            super::queue::work(&queue, rx, leader, &r, RETRY).await;
        })));
        Self { _tasks: tasks }
    }
}

/// The sorted, distinct ids of `groups` (`(id, podSelector)`) whose selector matches `labels`.
pub fn member_ids(groups: &[(i64, Value)], labels: &BTreeMap<String, String>) -> Vec<i64> {
    let mut ids: Vec<i64> = groups
        .iter()
        .filter(|(_, sel)| selector_matches(sel, labels))
        .map(|(id, _)| *id)
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// `metav1.LabelSelector` semantics: every `matchLabels` pair and every `matchExpressions`
/// requirement must hold; an empty (or absent) selector matches everything; an invalid
/// requirement (unknown operator, `In`/`NotIn` without values, `Exists`/`DoesNotExist` with
/// values) matches nothing.
pub fn selector_matches(sel: &Value, labels: &BTreeMap<String, String>) -> bool {
    if sel.is_null() {
        return true;
    }
    if let Some(m) = sel.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in m {
            if labels.get(k).map(String::as_str) != v.as_str() {
                return false;
            }
        }
    }
    let exprs = sel
        .get("matchExpressions")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    exprs.iter().all(|e| {
        let key = e.get("key").and_then(Value::as_str).unwrap_or_default();
        let values: Vec<&str> = e
            .get("values")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let have = labels.get(key).map(String::as_str);
        match e.get("operator").and_then(Value::as_str).unwrap_or_default() {
            "In" => !values.is_empty() && have.is_some_and(|h| values.contains(&h)),
            "NotIn" => !values.is_empty() && have.is_none_or(|h| !values.contains(&h)),
            "Exists" => values.is_empty() && have.is_some(),
            "DoesNotExist" => values.is_empty() && have.is_none(),
            _ => false,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect()
    }

    #[test]
    fn label_selectors_follow_kubernetes() {
        let web = labels(&[("app", "web"), ("tier", "fe")]);
        assert!(selector_matches(&Value::Null, &web));
        assert!(selector_matches(&json!({}), &web));
        assert!(selector_matches(&json!({"matchLabels": {"app": "web"}}), &web));
        assert!(!selector_matches(&json!({"matchLabels": {"app": "db"}}), &web));
        let ex = |op: &str, vals: &[&str]| json!({"matchExpressions": [{"key": "tier", "operator": op, "values": vals}]});
        assert!(selector_matches(&ex("In", &["fe", "be"]), &web));
        assert!(!selector_matches(&ex("In", &["be"]), &web));
        assert!(!selector_matches(&ex("In", &[]), &web));
        assert!(selector_matches(&ex("NotIn", &["be"]), &web));
        assert!(
            selector_matches(&ex("NotIn", &["be"]), &labels(&[])),
            "NotIn holds without the key"
        );
        assert!(selector_matches(&ex("Exists", &[]), &web));
        assert!(!selector_matches(&ex("Exists", &["x"]), &web));
        assert!(selector_matches(&ex("DoesNotExist", &[]), &labels(&[])));
        assert!(!selector_matches(&ex("Bogus", &[]), &web));
        let groups = vec![
            (7, json!({"matchLabels": {"app": "web"}})),
            (2, json!({})),
            (5, json!({"matchLabels": {"app": "db"}})),
            (2, json!({})),
        ];
        assert_eq!(member_ids(&groups, &web), vec![2, 7]);
    }
}
