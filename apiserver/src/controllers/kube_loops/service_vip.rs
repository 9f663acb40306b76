//! ServiceVIPs: a Service annotated `sdn.cozystack.io/vpc: [<owner-ns>/]<vpc>` in a namespace
//! that holds a VPCBinding for that VPC gets one ServiceVIP per family of the VPC: an address
//! from the VPC's own range (allocated top-down inside the create, never colliding with a Port:
//! [`crate::alloc::kinds::ServiceVipAllocator`]), the Service's TCP/UDP ports and its
//! `sessionAffinity`, and in `status.backends` the ready endpoints of its EndpointSlices mapped
//! to the VPC addresses of the endpoint pods (their Ports in that VPC, same family).
//!
//! Headless Services, Services being deleted and Services without the binding get none: an
//! existing ServiceVIP is deleted. A Service annotated for a VPC its namespace has no binding
//! for gets a Warning Event and the annotation `sdn.cozystack.io/vpc-attachment` saying why
//! (set to `Attached` once it is).
//!
//! Ownership: a ServiceVIP is cluster-scoped and its owner namespaced, which Kubernetes' garbage
//! collector refuses (a cluster-scoped dependent cannot name a namespaced owner), so the loop
//! deletes them itself. Each ServiceVIP names its Service in `spec.serviceRef` (and labels);
//! when the ServiceVIP mirror is filled (start-up, a new snapshot) every Service some ServiceVIP
//! names is queued, so a Service deleted while no replica led is cleaned up too. No finalizer
//! is put on the Service: a Service must stay deletable while this server is down.
//!
//! One work item per Service, from indexes kept by the event handlers: a Service's annotation
//! (by namespace and by VPC), the EndpointSlices' pods (a Port change re-queues the Services
//! that pod serves), the ServiceVIPs by Service. No change re-lists a collection.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use cozyplane_apis::v1alpha1::{
    Port, ServiceVIP, ServiceVIPBackend, ServiceVIPBackendPort, ServiceVIPPort, VPC, VPCBinding,
};
use k8s_openapi::api::core::v1::{Event, ObjectReference, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::PostParams;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::watcher;
use serde_json::{Value, json};
use tokio::sync::watch;

use super::super::informer::{Changed, Mirror};
use super::super::loops::{AbortOnDrop, find};
use super::super::queue::Queue;
use super::{Index, index_get, index_set, spawn_cache};
use crate::errors::{ApiError, Result};
use crate::informer::KubeConnection;
use crate::rbac::server as rbac;
use crate::registry::Resource;
use crate::registry::cache::WatchCache;
use crate::registry::store::{DeleteOptions, WriteOptions};

/// The annotation that attaches a Service (and a Pod) to a VPC.
pub const VPC_ANNOTATION: &str = "sdn.cozystack.io/vpc";
/// Written on an annotated Service: `Attached`, or why it is not.
pub const ATTACHMENT_ANNOTATION: &str = "sdn.cozystack.io/vpc-attachment";
/// The value of [`ATTACHMENT_ANNOTATION`] on an attached Service.
pub const ATTACHED: &str = "Attached";
/// The Event reason of a Service annotated for a VPC without a binding.
pub const NO_BINDING_REASON: &str = "VPCBindingMissing";
const LABEL_VPC: &str = "sdn.cozystack.io/vpc";
const LABEL_VPC_NS: &str = "sdn.cozystack.io/vpc-namespace";
const LABEL_SVC_NS: &str = "sdn.cozystack.io/service-namespace";
const LABEL_SVC: &str = "sdn.cozystack.io/service-name";
const SLICE_SERVICE: &str = "kubernetes.io/service-name";
const RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// `(namespace, name)`.
type Key = (String, String);

/// The VPC a Service's annotation names: `(owner namespace, name)`.
pub fn annotated_vpc(svc: &Service) -> Option<Key> {
    let ns = svc.metadata.namespace.as_deref().unwrap_or_default();
    let v = svc.metadata.annotations.as_ref()?.get(VPC_ANNOTATION)?.trim();
    let (owner, name) = match v.split_once('/') {
        Some((o, n)) => (o, n),
        None => (ns, v),
    };
    (!owner.is_empty() && !name.is_empty()).then(|| (owner.to_string(), name.to_string()))
}

fn key_of(m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Key {
    (
        m.namespace.clone().unwrap_or_default(),
        m.name.clone().unwrap_or_default(),
    )
}

/// The pods an EndpointSlice lists, `(namespace, name)`.
fn slice_pods(s: &EndpointSlice) -> Vec<Key> {
    let ns = s.metadata.namespace.clone().unwrap_or_default();
    s.endpoints
        .iter()
        .flatten()
        .filter_map(|e| e.target_ref.as_ref())
        .filter(|r| r.kind.as_deref() == Some("Pod"))
        .filter_map(|r| Some((r.namespace.clone().unwrap_or_else(|| ns.clone()), r.name.clone()?)))
        .collect()
}

fn slice_service(s: &EndpointSlice) -> Option<Key> {
    let svc = s.metadata.labels.as_ref()?.get(SLICE_SERVICE)?;
    Some((s.metadata.namespace.clone().unwrap_or_default(), svc.clone()))
}

/// What the handlers and the worker share.
struct Shared {
    services: reflector::Store<Service>,
    slices: reflector::Store<EndpointSlice>,
    services_ready: AtomicBool,
    slices_ready: AtomicBool,
    ports: Arc<Mirror<Port>>,
    vips: Arc<Mirror<ServiceVIP>>,
    vpcs: Arc<Mirror<VPC>>,
    bindings: Arc<Mirror<VPCBinding>>,
    /// Annotated Services by their namespace (a binding there changes them).
    by_ns: Index<String>,
    /// Annotated Services by the VPC they name (its ranges change them).
    by_vpc: Index<Key>,
    /// Services by the pods their slices list (a Port of the pod changes them).
    by_pod: Index<Key>,
    /// EndpointSlices by their Service.
    slices_of: Index<Key>,
    /// ServiceVIPs by their Service.
    vips_of: Index<Key>,
    /// Port names by their pod.
    port_names: Index<Key>,
    /// ServiceVIPs this loop created that the mirror has not shown yet: without them a
    /// second round before the mirror catches up would create a second one.
    fresh: Mutex<BTreeMap<String, Arc<ServiceVIP>>>,
    queue: Arc<Queue<Key>>,
}

fn svc_str(k: &Key) -> String {
    format!("{}\u{0}{}", k.0, k.1)
}

fn str_svc(s: &str) -> Key {
    let (a, b) = s.split_once('\u{0}').unwrap_or_default();
    (a.to_string(), b.to_string())
}

impl Shared {
    fn on_service(&self, ev: &watcher::Event<Service>) {
        match ev {
            watcher::Event::Init => {}
            watcher::Event::InitApply(s) | watcher::Event::Apply(s) => {
                let k = key_of(&s.metadata);
                let vpc = annotated_vpc(s);
                index_set(&self.by_ns, k.0.clone(), &k.1, vpc.is_some());
                if let Some(v) = vpc {
                    index_set(&self.by_vpc, v, &svc_str(&k), true);
                }
                if matches!(ev, watcher::Event::Apply(_)) {
                    self.queue.add(k);
                }
            }
            watcher::Event::Delete(s) => {
                let k = key_of(&s.metadata);
                index_set(&self.by_ns, k.0.clone(), &k.1, false);
                if let Some(v) = annotated_vpc(s) {
                    index_set(&self.by_vpc, v, &svc_str(&k), false);
                }
                self.queue.add(k);
            }
            watcher::Event::InitDone => {
                self.services_ready.store(true, Ordering::SeqCst);
                self.resync();
            }
        }
    }

    fn on_slice(&self, ev: &watcher::Event<EndpointSlice>) {
        let (s, present) = match ev {
            watcher::Event::InitApply(s) | watcher::Event::Apply(s) => (s, true),
            watcher::Event::Delete(s) => (s, false),
            watcher::Event::InitDone => {
                self.slices_ready.store(true, Ordering::SeqCst);
                self.resync();
                return;
            }
            watcher::Event::Init => return,
        };
        let Some(svc) = slice_service(s) else { return };
        let slice = s.metadata.name.clone().unwrap_or_default();
        index_set(&self.slices_of, svc.clone(), &slice, present);
        // Pods are indexed only while listed; a pod dropped from one slice may stay indexed
        // until the Service's slices change again, which costs a spurious reconcile only.
        for pod in slice_pods(s) {
            index_set(&self.by_pod, pod, &svc_str(&svc), present);
        }
        if !matches!(ev, watcher::Event::InitApply(_)) {
            self.queue.add(svc);
        }
    }

    fn on_port(&self, c: &Changed<'_, Port>) {
        if let (Some(o), Some(n)) = (c.old, c.new)
            && o.spec == n.spec
            && o.metadata.deletion_timestamp == n.metadata.deletion_timestamp
        {
            return;
        }
        for (p, present) in [(c.old, false), (c.new, true)] {
            let Some(p) = p else { continue };
            let pod = (p.spec.pod_namespace.clone(), p.spec.pod_name.clone());
            let name = p.metadata.name.clone().unwrap_or_default();
            index_set(&self.port_names, pod.clone(), &name, present);
            for s in index_get(&self.by_pod, &pod) {
                self.queue.add(str_svc(&s));
            }
        }
    }

    fn on_vip(&self, c: &Changed<'_, ServiceVIP>) {
        for (v, present) in [(c.old, false), (c.new, true)] {
            let Some(v) = v else { continue };
            let svc = (
                v.spec.service_ref.namespace.clone(),
                v.spec.service_ref.name.clone(),
            );
            let name = v.metadata.name.clone().unwrap_or_default();
            index_set(&self.vips_of, svc.clone(), &name, present);
            self.fresh
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .remove(&name);
            // Our own status writes change nothing to decide.
            if present
                && c.old.is_some_and(|o| {
                    o.spec == v.spec && o.metadata.deletion_timestamp == v.metadata.deletion_timestamp
                })
            {
                continue;
            }
            self.queue.add(svc);
        }
    }

    fn on_vpc(&self, c: &Changed<'_, VPC>) {
        let vni = |v: &VPC| v.status.as_ref().map_or(0, |s| s.vni);
        if let (Some(o), Some(n)) = (c.old, c.new)
            && o.spec == n.spec
            && vni(o) == vni(n)
        {
            return;
        }
        for v in [c.old, c.new].into_iter().flatten() {
            for s in index_get(&self.by_vpc, &key_of(&v.metadata)) {
                self.queue.add(str_svc(&s));
            }
        }
    }

    fn on_binding(&self, c: &Changed<'_, VPCBinding>) {
        if let (Some(o), Some(n)) = (c.old, c.new)
            && o.spec == n.spec
            && o.metadata.deletion_timestamp == n.metadata.deletion_timestamp
        {
            return;
        }
        for b in [c.old, c.new].into_iter().flatten() {
            let ns = b.metadata.namespace.clone().unwrap_or_default();
            for s in index_get(&self.by_ns, &ns) {
                self.queue.add((ns.clone(), s));
            }
        }
    }

    /// Every annotated Service and every Service a ServiceVIP names: once both kube caches are
    /// filled (the first decision needs them), and whenever the ServiceVIP mirror refills.
    fn resync(&self) {
        if !self.ready() {
            return;
        }
        let annotated: Vec<Key> = self
            .by_ns
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .flat_map(|(ns, names)| names.iter().map(move |n| (ns.clone(), n.clone())))
            .collect();
        for k in annotated {
            self.queue.add(k);
        }
        for v in self.vips.all() {
            self.queue.add((
                v.spec.service_ref.namespace.clone(),
                v.spec.service_ref.name.clone(),
            ));
        }
    }

    fn ready(&self) -> bool {
        self.services_ready.load(Ordering::SeqCst) && self.slices_ready.load(Ordering::SeqCst)
    }

    /// Whether a live VPCBinding in `ns` grants `vpc`.
    fn bound(&self, ns: &str, vpc: &Key) -> bool {
        self.bindings.in_namespace(ns).iter().any(|b| {
            let owner = if b.spec.vpc_ref.namespace.is_empty() {
                ns
            } else {
                b.spec.vpc_ref.namespace.as_str()
            };
            b.metadata.deletion_timestamp.is_none() && owner == vpc.0 && b.spec.vpc_ref.name == vpc.1
        })
    }

    /// The VPC address of `pod` in `vpc`, of the family of `v4`.
    fn pod_address(&self, pod: &Key, vpc: &Key, v4: bool) -> Option<String> {
        self.ports_of_pod(pod).into_iter().find_map(|p| {
            let ip: std::net::IpAddr = p.spec.ip.parse().ok()?;
            (p.metadata.deletion_timestamp.is_none()
                && p.spec.vpc_ref.namespace == vpc.0
                && p.spec.vpc_ref.name == vpc.1
                && ip.is_ipv4() == v4)
                .then(|| p.spec.ip.clone())
        })
    }

    fn ports_of_pod(&self, pod: &Key) -> Vec<Arc<Port>> {
        index_get(&self.port_names, pod)
            .iter()
            .filter_map(|n| self.ports.get("", n))
            .collect()
    }
}

/// What a Service should have, decided from the caches.
#[derive(Debug, PartialEq)]
enum Decision {
    /// No ServiceVIP; the attachment annotation (if annotated) and whether to emit the Event.
    None(Option<String>, bool),
    /// One ServiceVIP per family of the VPC.
    Attached { vpc: Key, v4: bool, v6: bool },
}

fn family_ip(v4: bool) -> &'static str {
    if v4 { "0.0.0.0" } else { "::" }
}

fn is_v4(ip: &str) -> Option<bool> {
    ip.parse::<std::net::IpAddr>().ok().map(|a| a.is_ipv4())
}

/// The Service's TCP and UDP ports as a ServiceVIP lists them.
fn vip_ports(svc: &Service) -> Vec<ServiceVIPPort> {
    svc.spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .map(|ps| {
            ps.iter()
                .filter_map(|p| {
                    let proto = p.protocol.clone().unwrap_or_else(|| "TCP".into());
                    (proto == "TCP" || proto == "UDP").then(|| ServiceVIPPort {
                        name: p.name.clone().unwrap_or_default(),
                        protocol: proto,
                        port: p.port,
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

fn affinity(svc: &Service) -> String {
    match svc.spec.as_ref().and_then(|s| s.session_affinity.as_deref()) {
        Some("ClientIP") => "ClientIP".into(),
        _ => String::new(),
    }
}

/// The reconciler of ServiceVIPs.
struct Reconciler {
    shared: Arc<Shared>,
    vips: Arc<dyn Resource>,
    kube: kube::Client,
}

#[async_trait::async_trait]
impl super::super::queue::Reconcile<Key> for Reconciler {
    async fn reconcile(&self, k: &Key) -> Result<()> {
        self.service(k).await
    }
}

impl Reconciler {
    fn decide(&self, svc: Option<&Service>) -> Decision {
        let sh = &self.shared;
        let Some(svc) = svc.filter(|s| s.metadata.deletion_timestamp.is_none()) else {
            return Decision::None(None, false);
        };
        let Some(vpc) = annotated_vpc(svc) else {
            return Decision::None(None, false);
        };
        let ns = svc.metadata.namespace.clone().unwrap_or_default();
        if svc.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()) == Some("None") {
            return Decision::None(
                Some("Headless: a headless Service gets no ServiceVIP".into()),
                false,
            );
        }
        if !sh.bound(&ns, &vpc) {
            let why = format!(
                "{NO_BINDING_REASON}: namespace {ns} has no VPCBinding for VPC {}/{}",
                vpc.0, vpc.1
            );
            return Decision::None(Some(why), true);
        }
        let Some(v) = sh.vpcs.get(&vpc.0, &vpc.1) else {
            return Decision::None(
                Some(format!("VPCNotFound: VPC {}/{} does not exist", vpc.0, vpc.1)),
                false,
            );
        };
        let fams: Vec<bool> = v
            .spec
            .cidrs
            .iter()
            .filter_map(|c| is_v4(c.split('/').next()?))
            .collect();
        Decision::Attached {
            vpc,
            v4: fams.contains(&true),
            v6: fams.contains(&false),
        }
    }

    async fn service(&self, k: &Key) -> Result<()> {
        let sh = &self.shared;
        if !sh.ready() {
            return Ok(());
        }
        let svc = sh.services.get(&ObjectRef::new(&k.1).within(&k.0));
        let existing: Vec<Arc<ServiceVIP>> = index_get(&sh.vips_of, k)
            .iter()
            .filter_map(|n| {
                sh.vips.get("", n).or_else(|| {
                    sh.fresh
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .get(n)
                        .cloned()
                })
            })
            .filter(|v| v.metadata.deletion_timestamp.is_none())
            .collect();
        let decision = self.decide(svc.as_deref());
        let mut keep: BTreeMap<bool, Arc<ServiceVIP>> = BTreeMap::new();
        if let Decision::Attached { vpc, v4, v6 } = &decision {
            for v in &existing {
                let Some(fam) = is_v4(&v.spec.ip) else { continue };
                let wanted = if fam { *v4 } else { *v6 };
                let same_vpc = v.spec.vpc_ref.namespace == vpc.0 && v.spec.vpc_ref.name == vpc.1;
                if wanted && same_vpc && !keep.contains_key(&fam) {
                    keep.insert(fam, v.clone());
                }
            }
        }
        for v in &existing {
            if !keep.values().any(|k| k.metadata.name == v.metadata.name) {
                let name = v.metadata.name.clone().unwrap_or_default();
                tracing::info!(servicevip = %name, service = %format!("{}/{}", k.0, k.1), "deleting a ServiceVIP");
                match self.vips.delete(None, &name, &DeleteOptions::default()).await {
                    Err(e) if !e.is_not_found() => return Err(e),
                    _ => {}
                }
            }
        }
        let attachment = match &decision {
            Decision::None(why, _) => why.clone(),
            Decision::Attached { .. } => Some(ATTACHED.to_string()),
        };
        if let Some(svc) = &svc {
            let event = matches!(decision, Decision::None(_, true));
            self.annotate(svc, attachment, event).await?;
        }
        let (Decision::Attached { vpc, v4, v6 }, Some(svc)) = (&decision, &svc) else {
            return Ok(());
        };
        for fam in [true, false] {
            if !(if fam { *v4 } else { *v6 }) {
                continue;
            }
            match keep.get(&fam) {
                None => self.create(svc, vpc, fam).await?,
                Some(v) => self.update(svc, vpc, v).await?,
            }
        }
        Ok(())
    }

    async fn create(&self, svc: &Service, vpc: &Key, v4: bool) -> Result<()> {
        let (ns, name) = key_of(&svc.metadata);
        let body = json!({
            "apiVersion": "sdn.cozystack.io/v1alpha1",
            "kind": "ServiceVIP",
            "metadata": {
                "generateName": "sv",
                "labels": {
                    LABEL_VPC: vpc.1, LABEL_VPC_NS: vpc.0, LABEL_SVC_NS: ns, LABEL_SVC: name,
                },
            },
            "spec": {
                "vpcRef": { "namespace": vpc.0, "name": vpc.1 },
                "ip": family_ip(v4),
                "serviceRef": { "namespace": ns, "name": name },
                "ports": vip_ports(svc),
                "sessionAffinity": affinity(svc),
            },
        });
        let created = self.vips.create(None, body, &WriteOptions::server()).await?;
        if let Ok(v) = serde_json::from_value::<ServiceVIP>(created.clone())
            && let Some(n) = v.metadata.name.clone()
        {
            let sh = &self.shared;
            let seen = sh.vips.get("", &n).is_some();
            if !seen {
                sh.fresh
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .insert(n.clone(), Arc::new(v));
                index_set(&sh.vips_of, (ns.clone(), name.clone()), &n, true);
            }
        }
        tracing::info!(
            servicevip = %created["metadata"]["name"].as_str().unwrap_or_default(),
            ip = %created["spec"]["ip"].as_str().unwrap_or_default(),
            service = %format!("{ns}/{name}"),
            "ServiceVIP created"
        );
        Ok(())
    }

    async fn update(&self, svc: &Service, vpc: &Key, v: &ServiceVIP) -> Result<()> {
        let name = v.metadata.name.clone().unwrap_or_default();
        let (ports, aff) = (vip_ports(svc), affinity(svc));
        if v.spec.ports != ports || v.spec.session_affinity != aff {
            let (p, a) = (json!(ports), aff.clone());
            let set = move |mut cur: Value| -> Result<Value> {
                cur["spec"]["ports"] = p.clone();
                cur["spec"]["sessionAffinity"] = json!(a.clone());
                Ok(cur)
            };
            self.vips
                .patch(None, &name, &set, false, &WriteOptions::server())
                .await?;
        }
        let v4 = is_v4(&v.spec.ip).unwrap_or(true);
        let backends = self.backends(svc, vpc, v4, &ports);
        let phase = if backends.is_empty() { "Pending" } else { "Ready" };
        let have = v.status.as_ref();
        if have.is_some_and(|s| s.backends == backends && s.phase == phase) {
            return Ok(());
        }
        let (b, ph) = (json!(backends), phase.to_string());
        let set = move |mut cur: Value| -> Result<Value> {
            if !cur.get("status").is_some_and(Value::is_object) {
                cur["status"] = json!({});
            }
            cur["status"]["backends"] = b.clone();
            cur["status"]["phase"] = json!(ph.clone());
            Ok(cur)
        };
        match self
            .vips
            .patch(None, &name, &set, true, &WriteOptions::server())
            .await
        {
            Err(e) if e.is_not_found() => Ok(()),
            other => other.map(|_| ()),
        }
    }

    /// The ready endpoints of the Service's slices whose pods hold an address of `vpc` in the
    /// family, each with the target port of every Service port it serves.
    fn backends(
        &self,
        svc: &Service,
        vpc: &Key,
        v4: bool,
        ports: &[ServiceVIPPort],
    ) -> Vec<ServiceVIPBackend> {
        let sh = &self.shared;
        let key = key_of(&svc.metadata);
        let not_ready_too = svc
            .spec
            .as_ref()
            .and_then(|s| s.publish_not_ready_addresses)
            .unwrap_or(false);
        let mut out: BTreeMap<String, BTreeSet<(String, i32, i32)>> = BTreeMap::new();
        for slice in index_get(&sh.slices_of, &key) {
            let Some(s) = sh.slices.get(&ObjectRef::new(&slice).within(&key.0)) else {
                continue;
            };
            let slice_ports = s.ports.as_deref().unwrap_or_default();
            for e in s.endpoints.iter().flatten() {
                let ready = e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true);
                if !(ready || not_ready_too) {
                    continue;
                }
                let Some(r) = e.target_ref.as_ref().filter(|r| r.kind.as_deref() == Some("Pod")) else {
                    continue;
                };
                let pod = (
                    r.namespace.clone().unwrap_or_else(|| key.0.clone()),
                    r.name.clone().unwrap_or_default(),
                );
                let Some(ip) = sh.pod_address(&pod, vpc, v4) else {
                    continue;
                };
                for p in ports {
                    let target = slice_ports.iter().find(|sp| {
                        sp.name.clone().unwrap_or_default() == p.name
                            && sp.protocol.clone().unwrap_or_else(|| "TCP".into()) == p.protocol
                    });
                    if let Some(t) = target.and_then(|t| t.port) {
                        out.entry(ip.clone())
                            .or_default()
                            .insert((p.protocol.clone(), p.port, t));
                    }
                }
            }
        }
        out.into_iter()
            .map(|(ip, ps)| ServiceVIPBackend {
                ip,
                ports: ps
                    .into_iter()
                    .map(|(protocol, port, target_port)| ServiceVIPBackendPort {
                        protocol,
                        port,
                        target_port,
                    })
                    .collect(),
            })
            .collect()
    }

    /// Writes the attachment annotation when it changes (removes it from a Service no longer
    /// annotated for a VPC), with a Warning Event when `event` and the reason is new.
    async fn annotate(&self, svc: &Service, want: Option<String>, event: bool) -> Result<()> {
        let (ns, name) = key_of(&svc.metadata);
        let have = svc
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ATTACHMENT_ANNOTATION))
            .cloned();
        if have == want {
            return Ok(());
        }
        let api = rbac::SERVICES
            .uses("patch")
            .api_namespaced::<Service>(self.kube.clone(), &ns);
        let patch = json!({ "metadata": { "annotations": { ATTACHMENT_ANNOTATION: want } } });
        api.patch(
            &name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .map_err(|e| ApiError::unavailable(format!("annotating Service {ns}/{name}: {e}")))?;
        if event && let Some(why) = &want {
            let (reason, message) = why.split_once(": ").unwrap_or((NO_BINDING_REASON, why));
            let now =
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
            let ev = Event {
                metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                    generate_name: Some(format!("{name}.")),
                    namespace: Some(ns.clone()),
                    ..Default::default()
                },
                involved_object: ObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Service".into()),
                    namespace: Some(ns.clone()),
                    name: Some(name.clone()),
                    uid: svc.metadata.uid.clone(),
                    ..Default::default()
                },
                reason: Some(reason.into()),
                message: Some(message.into()),
                type_: Some("Warning".into()),
                count: Some(1),
                first_timestamp: Some(now.clone()),
                last_timestamp: Some(now),
                source: Some(k8s_openapi::api::core::v1::EventSource {
                    component: Some("cozyplane-apiserver".into()),
                    host: None,
                }),
                ..Default::default()
            };
            let events = rbac::EVENTS
                .uses("create")
                .api_namespaced::<Event>(self.kube.clone(), &ns);
            if let Err(e) = events.create(&PostParams::default(), &ev).await {
                tracing::warn!(service = %format!("{ns}/{name}"), "recording an Event: {e}");
            }
        }
        Ok(())
    }
}

/// Starts the ServiceVIP loop: the Service and EndpointSlice informers, the mirrors it reads
/// and its worker (working while `leader` says this replica leads).
pub(super) fn start(
    kube: &KubeConnection,
    kinds: &[Arc<dyn Resource>],
    caches: &[Arc<WatchCache>],
    leader: watch::Receiver<bool>,
) -> Vec<AbortOnDrop> {
    let cache = |plural: &str| {
        caches
            .iter()
            .find(|c| c.resource().info().plural == plural)
            .cloned()
    };
    let (Some(ports_c), Some(vips_c), Some(vpcs_c), Some(bindings_c), Some(vips)) = (
        cache("ports"),
        cache("servicevips"),
        cache("vpcs"),
        cache("vpcbindings"),
        find(kinds, "servicevips"),
    ) else {
        tracing::error!("the ServiceVIP loop needs the ports, servicevips, vpcs and vpcbindings kinds");
        return Vec::new();
    };
    let (services, sw) = reflector::store();
    let (slices, lw) = reflector::store();
    let (queue, rx) = Queue::new();
    let shared = Arc::new(Shared {
        services,
        slices,
        services_ready: AtomicBool::new(false),
        slices_ready: AtomicBool::new(false),
        ports: Arc::default(),
        vips: Arc::default(),
        vpcs: Arc::default(),
        bindings: Arc::default(),
        by_ns: Mutex::default(),
        by_vpc: Mutex::default(),
        by_pod: Mutex::default(),
        slices_of: Mutex::default(),
        vips_of: Mutex::default(),
        port_names: Mutex::default(),
        fresh: Mutex::default(),
        queue: Arc::new(queue),
    });
    let mut tasks = Vec::new();
    let sh = shared.clone();
    tasks.push(AbortOnDrop(shared.ports.follow(ports_c, move |c| sh.on_port(&c))));
    let sh = shared.clone();
    tasks.push(AbortOnDrop(shared.vips.follow(vips_c, move |c| {
        sh.on_vip(&c);
    })));
    let sh = shared.clone();
    tasks.push(AbortOnDrop(shared.vpcs.follow(vpcs_c, move |c| sh.on_vpc(&c))));
    let sh = shared.clone();
    tasks.push(AbortOnDrop(
        shared.bindings.follow(bindings_c, move |c| sh.on_binding(&c)),
    ));
    let sh = shared.clone();
    tasks.push(spawn_cache(
        kube.watch_all::<Service>(&rbac::SERVICES, watcher::Config::default()),
        sw,
        move |ev| sh.on_service(ev),
    ));
    let sh = shared.clone();
    tasks.push(spawn_cache(
        kube.watch_all::<EndpointSlice>(&rbac::ENDPOINTSLICES, watcher::Config::default()),
        lw,
        move |ev| sh.on_slice(ev),
    ));
    let r = Reconciler {
        shared,
        vips: vips.clone(),
        kube: kube.client.clone(),
    };
    tasks.push(AbortOnDrop(tokio::spawn(async move {
        let queue = r.shared.queue.clone();
        super::super::queue::work(&queue, rx, leader, &r, RETRY).await;
    })));
    tasks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svc(ns: &str, ann: Option<&str>) -> Service {
        let mut s = Service::default();
        s.metadata.namespace = Some(ns.into());
        s.metadata.name = Some("web".into());
        if let Some(a) = ann {
            s.metadata.annotations = Some([(VPC_ANNOTATION.to_string(), a.to_string())].into());
        }
        s
    }

    #[test]
    fn the_annotation_names_a_vpc_with_an_optional_owner() {
        assert_eq!(
            annotated_vpc(&svc("t2", Some("v1"))),
            Some(("t2".into(), "v1".into()))
        );
        assert_eq!(
            annotated_vpc(&svc("t2", Some("t1/v1"))),
            Some(("t1".into(), "v1".into()))
        );
        assert_eq!(annotated_vpc(&svc("t2", Some("t1/"))), None);
        assert_eq!(annotated_vpc(&svc("t2", Some(""))), None);
        assert_eq!(annotated_vpc(&svc("t2", None)), None);
    }
}
