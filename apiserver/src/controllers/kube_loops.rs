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
//! Nodes and Pods are watched into caches by [informers](crate::informer) (see there for
//! backoff, `/readyz` and metrics); every change wakes the controllers. What they read is
//! declared in the RBAC table ([`crate::rbac::server`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::watcher;
use serde_json::{Value, json};
use tokio::sync::Notify;

use super::loops::{all, find, s};
use crate::errors::Result;
use crate::informer::KubeConnection;
use crate::rbac::server as rbac;
use crate::registry::Resource;
use crate::registry::store::{DeleteOptions, Deleted, WriteOptions};

/// The agent's finalizer on Ports.
pub const SEVER: &str = "sdn.cozystack.io/sever";
/// The default grace before a Port on a never-seen node is collected.
pub const DEFAULT_PORT_GC_GRACE: Duration = Duration::from_secs(30);

/// What the kube-backed loops need.
#[derive(Clone)]
pub struct KubeConfig {
    /// The kube-apiserver connection.
    pub kube: KubeConnection,
    /// See the module docs.
    pub port_gc_grace: Duration,
}

/// The running caches of the kube-backed loops; the watches stop when this is dropped.
pub struct KubeLoops {
    nodes_api: Api<Node>,
    nodes: reflector::Store<Node>,
    pods: reflector::Store<Pod>,
    nodes_ready: Arc<AtomicBool>,
    pods_ready: Arc<AtomicBool>,
    seen_nodes: Arc<Mutex<HashSet<String>>>,
    grace: Duration,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for KubeLoops {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Feeds an informer's events into `writer`, waking the loops on changes once synced.
fn spawn_cache<K>(
    mut events: BoxStream<'static, watcher::Event<K>>,
    mut writer: reflector::store::Writer<K>,
    ready: Arc<AtomicBool>,
    dirty: Arc<Notify>,
    seen: Option<Arc<Mutex<HashSet<String>>>>,
) -> tokio::task::JoinHandle<()>
where
    K: kube::Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    tokio::spawn(async move {
        while let Some(ev) = events.next().await {
            writer.apply_watcher_event(&ev);
            match ev {
                watcher::Event::InitDone => {
                    ready.store(true, Ordering::SeqCst);
                    dirty.notify_one();
                }
                watcher::Event::Init => {}
                watcher::Event::InitApply(o) | watcher::Event::Apply(o) => {
                    if let (Some(seen), Some(name)) = (&seen, o.meta().name.clone()) {
                        seen.lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .insert(name);
                    }
                    if ready.load(Ordering::SeqCst) {
                        dirty.notify_one();
                    }
                }
                watcher::Event::Delete(_) => dirty.notify_one(),
            }
        }
    })
}

impl KubeLoops {
    /// Starts the Node and Pod informers; their changes notify `dirty`.
    pub fn start(cfg: &KubeConfig, dirty: Arc<Notify>) -> Self {
        let nodes_api: Api<Node> = rbac::NODES.uses("get").api_all(cfg.kube.client.clone());
        let (nodes, nw) = reflector::store();
        let (pods, pw) = reflector::store();
        let nodes_ready = Arc::new(AtomicBool::new(false));
        let pods_ready = Arc::new(AtomicBool::new(false));
        let seen_nodes = Arc::new(Mutex::new(HashSet::new()));
        let tasks = vec![
            spawn_cache(
                cfg.kube
                    .watch_all::<Node>(&rbac::NODES, watcher::Config::default()),
                nw,
                nodes_ready.clone(),
                dirty.clone(),
                Some(seen_nodes.clone()),
            ),
            spawn_cache(
                cfg.kube.watch_all::<Pod>(&rbac::PODS, watcher::Config::default()),
                pw,
                pods_ready.clone(),
                dirty,
                None,
            ),
        ];
        Self {
            nodes_api,
            nodes,
            pods,
            nodes_ready,
            pods_ready,
            seen_nodes,
            grace: cfg.port_gc_grace,
            tasks,
        }
    }

    /// One pass of both loops; returns when the next pass is due at the latest (a Port waiting
    /// out its grace).
    pub async fn pass(&self, kinds: &[Arc<dyn Resource>]) -> Result<Option<Duration>> {
        let mut wake = None;
        if self.nodes_ready.load(Ordering::SeqCst) {
            wake = self.port_gc(kinds).await?;
        }
        if self.pods_ready.load(Ordering::SeqCst) {
            self.membership(kinds).await?;
        }
        Ok(wake)
    }

    async fn port_gc(&self, kinds: &[Arc<dyn Resource>]) -> Result<Option<Duration>> {
        let Some(pr) = find(kinds, "ports") else {
            return Ok(None);
        };
        let nodes: HashSet<String> = self
            .nodes
            .state()
            .iter()
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        let now_ms = k8s_openapi::jiff::Timestamp::now().as_millisecond();
        let grace_ms = i64::try_from(self.grace.as_millis()).unwrap_or(i64::MAX);
        let mut wake: Option<Duration> = None;
        for p in all(kinds, "ports").await? {
            let node = s(&p, "/spec/node");
            if node.is_empty() || nodes.contains(node) {
                continue;
            }
            let deleting = p.pointer("/metadata/deletionTimestamp").is_some();
            if !deleting {
                let seen = self
                    .seen_nodes
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .contains(node);
                let age_ms = s(&p, "/metadata/creationTimestamp")
                    .parse::<k8s_openapi::jiff::Timestamp>()
                    .map_or(i64::MAX, |t| now_ms - t.as_millisecond());
                if !seen && age_ms < grace_ms {
                    let left = Duration::from_millis(u64::try_from(grace_ms - age_ms).unwrap_or(0))
                        + Duration::from_millis(100);
                    wake = Some(wake.map_or(left, |w: Duration| w.min(left)));
                    continue;
                }
            }
            match self.nodes_api.get_opt(node).await {
                Ok(None) => {}
                Ok(Some(_)) => continue,
                Err(e) => {
                    tracing::warn!(error = %e, node, "port GC: looking up the node");
                    continue;
                }
            }
            let name = s(&p, "/metadata/name").to_string();
            let current = if deleting {
                p.clone()
            } else {
                tracing::info!(port = %name, node, "deleting a Port whose node does not exist");
                match pr.delete(None, &name, &DeleteOptions::default()).await {
                    Ok(Deleted::Gone(_)) => continue,
                    Ok(Deleted::Marked(v)) => v,
                    Err(e) if e.is_not_found() => continue,
                    Err(e) => return Err(e),
                }
            };
            if finalizers(&current).iter().any(|f| f == SEVER) {
                let strip = |mut cur: Value| -> Result<Value> {
                    let kept: Vec<String> = finalizers(&cur).into_iter().filter(|f| f != SEVER).collect();
                    cur["metadata"]["finalizers"] = json!(kept);
                    Ok(cur)
                };
                match pr
                    .patch(None, &name, &strip, false, &WriteOptions::server())
                    .await
                {
                    Ok(_) => {}
                    Err(e) if e.is_not_found() => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(wake)
    }

    /// The labels of the Port's pod: the watched pod, else the `pod-labels` annotation.
    fn pod_labels(&self, port: &Value) -> Option<BTreeMap<String, String>> {
        let (ns, name) = (s(port, "/spec/podNamespace"), s(port, "/spec/podName"));
        let uid = s(port, "/metadata/labels/sdn.cozystack.io~1pod-uid");
        if let Some(pod) = self.pods.get(&ObjectRef::new(name).within(ns))
            && (uid.is_empty() || pod.metadata.uid.as_deref() == Some(uid))
        {
            return Some(pod.metadata.labels.clone().unwrap_or_default());
        }
        let ann = s(port, "/metadata/annotations/sdn.cozystack.io~1pod-labels");
        serde_json::from_str(ann).ok()
    }

    async fn membership(&self, kinds: &[Arc<dyn Resource>]) -> Result<()> {
        let Some(pr) = find(kinds, "ports") else {
            return Ok(());
        };
        let mut groups: HashMap<(String, String), Vec<(i64, Value)>> = HashMap::new();
        for g in all(kinds, "securitygroups").await? {
            let id = g.pointer("/status/id").and_then(Value::as_i64).unwrap_or(0);
            if id == 0 || g.pointer("/metadata/deletionTimestamp").is_some() {
                continue;
            }
            let key = (
                s(&g, "/metadata/namespace").to_string(),
                s(&g, "/spec/vpcRef/name").to_string(),
            );
            let sel = g.pointer("/spec/podSelector").cloned().unwrap_or(Value::Null);
            groups.entry(key).or_default().push((id, sel));
        }
        for p in all(kinds, "ports").await? {
            if s(&p, "/spec/podNamespace").is_empty()
                || s(&p, "/spec/podName").is_empty()
                || p.pointer("/metadata/deletionTimestamp").is_some()
            {
                continue;
            }
            let Some(labels) = self.pod_labels(&p) else {
                continue;
            };
            let key = (
                s(&p, "/spec/vpcRef/namespace").to_string(),
                s(&p, "/spec/vpcRef/name").to_string(),
            );
            let want = member_ids(groups.get(&key).map_or(&[][..], Vec::as_slice), &labels);
            let have: Vec<i64> = p
                .pointer("/status/groups")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_i64).collect())
                .unwrap_or_default();
            if have == want {
                continue;
            }
            let name = s(&p, "/metadata/name").to_string();
            let set = |mut cur: Value| -> Result<Value> {
                if !cur.get("status").is_some_and(Value::is_object) {
                    cur["status"] = json!({});
                }
                cur["status"]["groups"] = json!(want.clone());
                Ok(cur)
            };
            match pr.patch(None, &name, &set, true, &WriteOptions::server()).await {
                Ok(_) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

fn finalizers(v: &Value) -> Vec<String> {
    v.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|f| f.as_str().map(String::from)).collect())
        .unwrap_or_default()
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

impl std::fmt::Debug for KubeLoops {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeLoops")
            .field("grace", &self.grace)
            .finish_non_exhaustive()
    }
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
