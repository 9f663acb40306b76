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

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use cozyplane_apis::v1alpha1::{Port, ServiceVIP, VPC, VPCBinding};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::reflector;
use kube::runtime::watcher;
use tokio::sync::watch;

use super::super::informer::{Changed, Mirror};
use super::super::loops::{AbortOnDrop, find};
use super::super::queue::Queue;
use super::{Index, index_get, index_set, spawn_cache};
use crate::informer::KubeConnection;
use crate::rbac::server as rbac;
use crate::registry::Resource;
use crate::registry::cache::WatchCache;

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
mod reconcile;
use reconcile::Reconciler;

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
