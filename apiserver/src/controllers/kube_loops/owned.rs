//! The objects the door loops own on the kube-apiserver: the cache of them the informers keep
//! ([`Owned`], indexed by door), and how one is created, aligned with what the loop wants, or
//! deleted. Only the fields the loop sets are compared, so what the cluster adds (a cluster IP,
//! defaults, the LoadBalancer implementation's status) never looks like drift.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::{Value, json};

use super::super::informer::Key;
use super::doors::{CLAIM, Door, Doors, Family, MANAGED_BY, PROXY, SERVICE_NAME, key_of, service_family};
use crate::errors::{ApiError, Result};
use crate::rbac::server as rbac;

pub(super) struct Owned<K> {
    inner: Mutex<Inner<K>>,
}

struct Inner<K> {
    objects: BTreeMap<Key, Arc<K>>,
    by_door: HashMap<Door, BTreeSet<String>>,
    /// A (re)list in progress.
    relist: Option<BTreeMap<Key, Arc<K>>>,
    synced: bool,
}

impl<K> Default for Owned<K> {
    fn default() -> Self {
        Self {
            inner: Mutex::new(Inner {
                objects: BTreeMap::new(),
                by_door: HashMap::new(),
                relist: None,
                synced: false,
            }),
        }
    }
}

impl<K> Inner<K>
where
    K: kube::Resource,
{
    fn index(&mut self, o: &K, present: bool) {
        let Some(door) = Door::of(o.meta()) else { return };
        let name = o.meta().name.clone().unwrap_or_default();
        if present {
            self.by_door.entry(door).or_default().insert(name);
        } else if let Some(s) = self.by_door.get_mut(&door) {
            s.remove(&name);
            if s.is_empty() {
                self.by_door.remove(&door);
            }
        }
    }

    fn put(&mut self, o: &Arc<K>) {
        let key = key_of(o.meta());
        if let Some(old) = self.objects.insert(key, o.clone()) {
            self.index(&old, false);
        }
        self.index(o, true);
    }

    fn remove(&mut self, key: &Key) -> Option<Arc<K>> {
        let old = self.objects.remove(key)?;
        self.index(&old, false);
        Some(old)
    }
}

impl<K> Owned<K>
where
    K: kube::Resource + Clone,
{
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner<K>> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether the first list completed.
    pub(super) fn synced(&self) -> bool {
        self.lock().synced
    }

    /// The objects of `door`.
    pub(super) fn of(&self, door: &Door) -> Vec<Arc<K>> {
        let g = self.lock();
        let ns = match door {
            Door::Gateway((ns, _)) | Door::Fip((ns, _)) => ns,
        };
        g.by_door
            .get(door)
            .into_iter()
            .flatten()
            .filter_map(|n| g.objects.get(&(ns.clone(), n.clone())).cloned())
            .collect()
    }

    /// The object `ns`/`name`.
    pub(super) fn get(&self, ns: &str, name: &str) -> Option<Arc<K>> {
        self.lock()
            .objects
            .get(&(ns.to_string(), name.to_string()))
            .cloned()
    }

    /// Records what a write of ours returned: replaces the cached object, or (`only_new`, after
    /// a create) adds it unless the watch already delivered it (maybe newer).
    pub(super) fn record(&self, o: K, only_new: bool) {
        let mut g = self.lock();
        if only_new && g.objects.contains_key(&key_of(o.meta())) {
            return;
        }
        g.put(&Arc::new(o));
    }

    /// Forgets `ns`/`name` (deleted by us).
    pub(super) fn forget(&self, ns: &str, name: &str) {
        self.lock().remove(&(ns.to_string(), name.to_string()));
    }

    /// Applies an informer event; returns the doors to look at again (after the first list:
    /// all, which the caller learns from `true`).
    pub(super) fn on_event(&self, ev: &watcher::Event<K>) -> (Vec<Door>, bool) {
        let mut g = self.lock();
        match ev {
            watcher::Event::Init => {
                g.relist = Some(BTreeMap::new());
                (Vec::new(), false)
            }
            watcher::Event::InitApply(o) => {
                if let Some(r) = g.relist.as_mut() {
                    r.insert(key_of(o.meta()), Arc::new(o.clone()));
                }
                (Vec::new(), false)
            }
            watcher::Event::InitDone => {
                let fresh = g.relist.take().unwrap_or_default();
                let mut doors: BTreeSet<Door> = g.by_door.keys().cloned().collect();
                g.objects.clear();
                g.by_door.clear();
                for o in fresh.into_values() {
                    if let Some(d) = Door::of(o.meta()) {
                        doors.insert(d);
                    }
                    g.put(&o);
                }
                g.synced = true;
                (doors.into_iter().collect(), true)
            }
            watcher::Event::Apply(o) => {
                g.put(&Arc::new(o.clone()));
                (Door::of(o.meta()).into_iter().collect(), false)
            }
            watcher::Event::Delete(o) => {
                g.remove(&key_of(o.meta()));
                (Door::of(o.meta()).into_iter().collect(), false)
            }
        }
    }
}

/// What both loops share: the mirrors of our kinds, the owned objects, the queue.
fn kube_err(what: &str, e: &kube::Error) -> ApiError {
    ApiError::unavailable(format!("{what}: {e}"))
}

fn code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// What [`Doors::ensure_service`] ended with.
pub(super) enum Ensured {
    /// The Service, as stored.
    Service(Arc<Service>),
    /// The kube-apiserver refused to create it (422): why.
    Refused(String),
}

/// A door's Service as it should be (before `generateName` picks its name).
pub(super) struct WantService {
    pub(super) namespace: String,
    pub(super) generate_name: String,
    pub(super) labels: BTreeMap<String, String>,
    pub(super) claim: String,
    pub(super) class: String,
    pub(super) family: Family,
    /// `(apiVersion, kind, name, uid)` of the owner.
    pub(super) owner: (&'static str, &'static str, String, String),
}

impl WantService {
    fn object(&self) -> Value {
        let (api_version, kind, name, uid) = &self.owner;
        let mut meta = json!({
            "generateName": self.generate_name,
            "namespace": self.namespace,
            "labels": self.labels,
            "ownerReferences": [{
                "apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "controller": true,
            }],
        });
        if !self.claim.is_empty() {
            meta["annotations"] = json!({ CLAIM: self.claim });
        }
        let mut spec = self.mutable_spec();
        spec["ipFamilyPolicy"] = json!("SingleStack");
        spec["ipFamilies"] = json!([self.family.name()]);
        if !self.class.is_empty() {
            spec["loadBalancerClass"] = json!(self.class);
        }
        json!({ "apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": spec })
    }

    fn mutable_spec(&self) -> Value {
        json!({
            "type": "LoadBalancer",
            "externalTrafficPolicy": "Cluster",
            "allocateLoadBalancerNodePorts": false,
            "ports": [{ "name": "placeholder", "protocol": "TCP", "port": 1 }],
        })
    }

    /// Whether `s` can be kept: same owner, family and class (the kube-apiserver does not let
    /// the last two change).
    fn keeps(&self, s: &Service) -> bool {
        let spec = s.spec.clone().unwrap_or_default();
        controller_uid(&s.metadata) == Some(self.owner.3.as_str())
            && service_family(s) == Some(self.family)
            && spec.load_balancer_class.unwrap_or_default() == self.class
    }

    /// Whether `s` has every field this loop sets.
    fn aligned(&self, s: &Service) -> bool {
        let labels = s.metadata.labels.clone().unwrap_or_default();
        let claim = s
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(CLAIM))
            .cloned()
            .unwrap_or_default();
        let spec = s.spec.clone().unwrap_or_default();
        let ports: Vec<(i32, String)> = spec
            .ports
            .unwrap_or_default()
            .into_iter()
            .map(|p| (p.port, p.protocol.unwrap_or_else(|| "TCP".into())))
            .collect();
        self.labels.iter().all(|(k, v)| labels.get(k) == Some(v))
            && claim == self.claim
            && spec.type_.as_deref() == Some("LoadBalancer")
            && spec.external_traffic_policy.as_deref() == Some("Cluster")
            && spec.allocate_load_balancer_node_ports == Some(false)
            && ports == [(1, "TCP".to_string())]
    }
}

/// The uid of the controller owner of `m`.
pub(super) fn controller_uid(m: &ObjectMeta) -> Option<&str> {
    m.owner_references
        .as_ref()?
        .iter()
        .find(|r| r.controller == Some(true))
        .map(|r| r.uid.as_str())
}

/// The one endpoint of an owned slice.
pub(super) struct WantEndpoint {
    pub(super) address: String,
    pub(super) ready: bool,
    pub(super) node: String,
}

impl Doors {
    /// Makes `have` (an owned Service already chosen for `want`, or none) what `want` says:
    /// creates it, patches the fields that drifted, or replaces it when an immutable one did.
    pub(super) async fn ensure_service(
        &self,
        have: Option<Arc<Service>>,
        want: &WantService,
    ) -> Result<Ensured> {
        let ns = &want.namespace;
        let api = rbac::SERVICES
            .uses("create")
            .api_namespaced::<Service>(self.client.clone(), ns);
        if let Some(s) = have {
            let name = s.metadata.name.clone().unwrap_or_default();
            if want.keeps(&s) {
                if want.aligned(&s) {
                    return Ok(Ensured::Service(s));
                }
                let claim = (!want.claim.is_empty()).then(|| want.claim.clone());
                let patch = json!({
                    "metadata": { "labels": want.labels, "annotations": { CLAIM: claim } },
                    "spec": want.mutable_spec(),
                });
                let pp = PatchParams::default();
                return match api.patch(&name, &pp, &Patch::Merge(&patch)).await {
                    Ok(s) => {
                        self.services.record(s.clone(), false);
                        Ok(Ensured::Service(Arc::new(s)))
                    }
                    Err(e) if code(&e) == Some(404) => {
                        self.services.forget(ns, &name);
                        Err(ApiError::unavailable(format!("service {ns}/{name} vanished")))
                    }
                    Err(e) => Err(kube_err(&format!("aligning service {ns}/{name}"), &e)),
                };
            }
            self.delete_service(ns, &name).await?;
        }
        let obj: Service = serde_json::from_value(want.object()).map_err(ApiError::internal)?;
        match api.create(&PostParams::default(), &obj).await {
            Ok(s) => {
                tracing::info!(service = ?s.metadata.name, namespace = %ns, "created a door's LoadBalancer Service");
                self.services.record(s.clone(), true);
                Ok(Ensured::Service(Arc::new(s)))
            }
            Err(kube::Error::Api(st)) if st.code == 422 => Ok(Ensured::Refused(st.message.clone())),
            Err(e) => Err(kube_err(&format!("creating a service in {ns}"), &e)),
        }
    }

    /// Deletes Service `ns`/`name` and its slice (the garbage collector would take the slice,
    /// but not every cluster runs one in time, and the stand-in runs none).
    pub(super) async fn delete_service(&self, ns: &str, name: &str) -> Result<()> {
        let api = rbac::SERVICES
            .uses("delete")
            .api_namespaced::<Service>(self.client.clone(), ns);
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(e) if code(&e) == Some(404) => {}
            Err(e) => return Err(kube_err(&format!("deleting service {ns}/{name}"), &e)),
        }
        tracing::info!(service = %name, namespace = %ns, "deleted a door's LoadBalancer Service");
        self.services.forget(ns, name);
        self.delete_slice(ns, name).await
    }

    /// Deletes EndpointSlice `ns`/`name`.
    pub(super) async fn delete_slice(&self, ns: &str, name: &str) -> Result<()> {
        let api = rbac::ENDPOINTSLICES
            .uses("delete")
            .api_namespaced::<EndpointSlice>(self.client.clone(), ns);
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(e) if code(&e) == Some(404) => {}
            Err(e) => return Err(kube_err(&format!("deleting endpointslice {ns}/{name}"), &e)),
        }
        self.slices.forget(ns, name);
        Ok(())
    }

    /// Makes the slice of Service `svc` (same name) hold `endpoint` (none: no endpoint yet).
    pub(super) async fn ensure_slice(
        &self,
        svc: &Service,
        family: Family,
        owner_label: (&str, &str),
        endpoint: Option<WantEndpoint>,
    ) -> Result<()> {
        let ns = svc.metadata.namespace.clone().unwrap_or_default();
        let name = svc.metadata.name.clone().unwrap_or_default();
        let uid = svc.metadata.uid.clone().unwrap_or_default();
        let labels = json!({ SERVICE_NAME: name, MANAGED_BY: PROXY, owner_label.0: owner_label.1 });
        let owners =
            json!([{ "apiVersion": "v1", "kind": "Service", "name": name, "uid": uid, "controller": true }]);
        let endpoints = match &endpoint {
            None => json!([]),
            Some(e) => {
                let mut ep = json!({ "addresses": [e.address], "conditions": { "ready": e.ready } });
                if !e.node.is_empty() {
                    ep["nodeName"] = json!(e.node);
                }
                json!([ep])
            }
        };
        let ports = json!([{ "name": "placeholder", "protocol": "TCP", "port": 1 }]);
        let api = rbac::ENDPOINTSLICES
            .uses("create")
            .api_namespaced::<EndpointSlice>(self.client.clone(), &ns);
        if let Some(have) = self.slices.get(&ns, &name) {
            if have.address_type == family.name() {
                let cur = json!({
                    "labels": have.metadata.labels, "owner": controller_uid(&have.metadata),
                    "endpoints": slim_endpoints(&have), "ports": have.ports,
                });
                let labels_ok = labels
                    .as_object()
                    .into_iter()
                    .flatten()
                    .all(|(k, v)| cur["labels"].get(k) == Some(v));
                if labels_ok
                    && cur["owner"] == json!(uid)
                    && cur["endpoints"] == endpoints
                    && cur["ports"] == ports
                {
                    return Ok(());
                }
                let patch = json!({
                    "metadata": { "labels": labels, "ownerReferences": owners },
                    "endpoints": endpoints, "ports": ports,
                });
                return match api
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(s) => {
                        self.slices.record(s, false);
                        Ok(())
                    }
                    Err(e) if code(&e) == Some(404) => {
                        self.slices.forget(&ns, &name);
                        Err(ApiError::unavailable(format!(
                            "endpointslice {ns}/{name} vanished"
                        )))
                    }
                    Err(e) => Err(kube_err(&format!("aligning endpointslice {ns}/{name}"), &e)),
                };
            }
            // addressType is immutable.
            self.delete_slice(&ns, &name).await?;
        }
        let obj = json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": { "name": name, "namespace": ns, "labels": labels, "ownerReferences": owners },
            "addressType": family.name(), "endpoints": endpoints, "ports": ports,
        });
        let obj: EndpointSlice = serde_json::from_value(obj).map_err(ApiError::internal)?;
        match api.create(&PostParams::default(), &obj).await {
            Ok(s) => {
                self.slices.record(s, true);
                Ok(())
            }
            Err(e) => Err(kube_err(&format!("creating endpointslice {ns}/{name}"), &e)),
        }
    }
}

/// The endpoints of `s` with only the fields this loop sets.
fn slim_endpoints(s: &EndpointSlice) -> Value {
    let eps: Vec<Value> = s
        .endpoints
        .iter()
        .flatten()
        .map(|e| {
            let mut ep = json!({
                "addresses": e.addresses,
                "conditions": { "ready": e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(false) },
            });
            if let Some(n) = &e.node_name {
                ep["nodeName"] = json!(n);
            }
            ep
        })
        .collect();
    json!(eps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::kube_loops::doors::{PROXY_NAME, ingress};

    fn want(family: Family, class: &str, claim: &str) -> WantService {
        WantService {
            namespace: "t".into(),
            generate_name: "gw-v4-".into(),
            labels: [(PROXY_NAME.to_string(), PROXY.to_string())].into(),
            claim: claim.into(),
            class: class.into(),
            family,
            owner: (
                "sdn.cozystack.io/v1alpha1",
                "VPCGateway",
                "gw".into(),
                "u1".into(),
            ),
        }
    }

    fn stored(w: &WantService) -> Service {
        let mut s: Service = serde_json::from_value(w.object()).unwrap();
        s.metadata.name = Some("gw-v4-abcde".into());
        s
    }

    #[test]
    fn a_service_is_kept_while_owner_family_and_class_hold() {
        let w = want(Family::V4, "", "");
        let s = stored(&w);
        assert!(w.keeps(&s) && w.aligned(&s));
        assert!(!want(Family::V6, "", "").keeps(&s), "the family cannot change");
        assert!(!want(Family::V4, "metallb", "").keeps(&s), "nor the class");
        let mut other = w;
        other.owner.3 = "u2".into();
        assert!(
            !other.keeps(&s),
            "a Service of a gateway of the same name, deleted"
        );
        let w = want(Family::V4, "", "claim-a");
        assert!(
            w.keeps(&s) && !w.aligned(&s),
            "the claim annotation is patched in"
        );
    }

    #[test]
    fn ingress_is_read_per_family() {
        let mut s = stored(&want(Family::V4, "", ""));
        s.status = Some(
            serde_json::from_value(json!({ "loadBalancer": { "ingress": [
                { "ip": "2001:db8::0:5" }, { "hostname": "lb.example" }, { "ip": "203.0.113.7" },
            ] } }))
            .unwrap(),
        );
        assert_eq!(ingress(&s, Family::V4).as_deref(), Some("203.0.113.7"));
        assert_eq!(ingress(&s, Family::V6).as_deref(), Some("2001:db8::5"));
    }
}
