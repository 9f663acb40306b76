//! The reconcilers of our own kinds: VPCPeering and VPCGateway status, VPCBinding reaping.
//!
//! Each works like a client-go controller: typed [`Mirror`]s of the kinds it reads are fed by
//! the watch caches, a change enqueues exactly the objects whose derived state it can affect
//! (a VPC change: the peerings and gateways naming that VPC; a peering: itself and its
//! reciprocal half; a gateway: the gateways of its VPC), and one worker reconciles one queued
//! object at a time, writing only when the derived state differs from the stored one. Status
//! derivation itself lives with each kind (`registry::vpc_peering::status`, …); what every
//! object of a kind gets (the binding's finalizer, the VPC's status) is set inside its write by
//! the kind's strategy, so no controller writes after a create.

use std::sync::Arc;
use std::time::Duration;

use cozyplane_apis::v1alpha1::{VPC, VPCBinding, VPCGateway, VPCPeering};
use serde_json::{Value, json};
use tokio::sync::watch;

use super::informer::{Changed, Key, Mirror};
use super::queue::Queue;
use crate::errors::{ApiError, Result};
use crate::registry::cache::WatchCache;
use crate::registry::store::{DeleteOptions, ListParams, WriteOptions};
use crate::registry::{Resource, vpc_binding, vpc_gateway, vpc_peering};

pub use crate::registry::vpc_binding::REAP_PORTS;

/// How often every object is reconciled again without a change (client-go's resync).
const RESYNC: Duration = Duration::from_secs(300);
/// How long a failed reconcile waits before it is tried again.
const RETRY: Duration = Duration::from_secs(1);

pub(crate) fn find<'a>(kinds: &'a [Arc<dyn Resource>], plural: &str) -> Option<&'a Arc<dyn Resource>> {
    kinds.iter().find(|k| k.info().plural == plural)
}

pub(crate) fn s<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or_default()
}

/// One object to reconcile.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Work {
    Peering(Key),
    Gateway(Key),
    Binding(Key),
}

fn key<K: kube_core::Resource>(o: &K) -> Key {
    let m = o.meta();
    (
        m.namespace.clone().unwrap_or_default(),
        m.name.clone().unwrap_or_default(),
    )
}

/// The mirrors and the queue the reconcilers share.
struct Shared {
    vpcs: Arc<Mirror<VPC>>,
    peerings: Arc<Mirror<VPCPeering>>,
    gateways: Arc<Mirror<VPCGateway>>,
    bindings: Arc<Mirror<VPCBinding>>,
    queue: Arc<Queue<Work>>,
}

impl Shared {
    fn enqueue_for_vpc(&self, (ns, name): &Key) {
        for g in self.gateways.in_namespace(ns) {
            if g.spec.vpc_ref.name == *name {
                self.queue.add(Work::Gateway(key(&*g)));
            }
        }
        for p in self.peerings.in_namespace(ns) {
            if p.spec.vpc_ref.name == *name {
                self.queue.add(Work::Peering(key(&*p)));
            }
        }
        // Peerings of other namespaces naming this VPC as their peer. VPCs change rarely (create,
        // delete, a CIDR edit), so a look at every peering here is off the hot path.
        for p in self.peerings.all() {
            if p.spec.peer_ref.namespace == *ns && p.spec.peer_ref.name == *name {
                self.queue.add(Work::Peering(key(&*p)));
            }
        }
    }

    fn on_vpc(&self, c: &Changed<'_, VPC>) {
        let vni = |v: &VPC| v.status.as_ref().map_or(0, |s| s.vni);
        if let (Some(o), Some(n)) = (c.old, c.new)
            && o.spec.cidrs == n.spec.cidrs
            && vni(o) == vni(n)
        {
            return;
        }
        if let Some(v) = c.new.or(c.old) {
            self.enqueue_for_vpc(&key(v));
        }
    }

    fn on_peering(&self, c: &Changed<'_, VPCPeering>) {
        // A status write of our own changes nothing another object derives from.
        if let (Some(o), Some(n)) = (c.old, c.new)
            && o.spec == n.spec
            && o.metadata.deletion_timestamp == n.metadata.deletion_timestamp
        {
            return;
        }
        let Some(p) = c.new.or(c.old) else { return };
        self.queue.add(Work::Peering(key(p)));
        for q in self.peerings.in_namespace(&p.spec.peer_ref.namespace) {
            if q.spec.vpc_ref.name == p.spec.peer_ref.name {
                self.queue.add(Work::Peering(key(&*q)));
            }
        }
    }

    fn on_gateway(&self, c: &Changed<'_, VPCGateway>) {
        let Some(g) = c.new.or(c.old) else { return };
        if let (Some(o), Some(n)) = (c.old, c.new)
            && o.spec == n.spec
            && o.metadata.deletion_timestamp == n.metadata.deletion_timestamp
        {
            // Only the status changed (a NAT address arrived): only this gateway's NATReady moves.
            self.queue.add(Work::Gateway(key(g)));
            return;
        }
        let (ns, _) = key(g);
        for other in self.gateways.in_namespace(&ns) {
            if other.spec.vpc_ref.name == g.spec.vpc_ref.name {
                self.queue.add(Work::Gateway(key(&*other)));
            }
        }
        if c.new.is_some() {
            self.queue.add(Work::Gateway(key(g)));
        }
    }

    fn on_binding(&self, c: &Changed<'_, VPCBinding>) {
        let Some(b) = c.new else { return };
        let has = b
            .metadata
            .finalizers
            .as_ref()
            .is_some_and(|f| f.iter().any(|f| f == REAP_PORTS));
        if b.metadata.deletion_timestamp.is_some() || !has {
            self.queue.add(Work::Binding(key(b)));
        }
    }

    fn resync(&self) {
        for p in self.peerings.all() {
            self.queue.add(Work::Peering(key(&*p)));
        }
        for g in self.gateways.all() {
            self.queue.add(Work::Gateway(key(&*g)));
        }
        for b in self.bindings.all() {
            self.on_binding(&Changed {
                old: None,
                new: Some(&b),
            });
        }
    }
}

/// The reconcilers.
struct Reconciler {
    shared: Arc<Shared>,
    kinds: Vec<Arc<dyn Resource>>,
    /// With a kube connection the gateway loop of [`super::kube_loops`] owns VPCGateway status
    /// (it also knows the NAT Services); this one leaves gateways alone.
    gateways_elsewhere: bool,
}

#[async_trait::async_trait]
impl super::queue::Reconcile<Work> for Reconciler {
    async fn reconcile(&self, w: &Work) -> Result<()> {
        match w {
            Work::Peering((ns, name)) => self.peering(ns, name).await,
            Work::Gateway((ns, name)) => self.gateway(ns, name).await,
            Work::Binding((ns, name)) => self.binding(ns, name).await,
        }
    }
}

impl Reconciler {
    fn kind(&self, plural: &str) -> Result<&Arc<dyn Resource>> {
        find(&self.kinds, plural).ok_or_else(|| ApiError::internal(format!("no kind {plural}")))
    }

    async fn peering(&self, ns: &str, name: &str) -> Result<()> {
        let sh = &self.shared;
        let Some(p) = sh.peerings.get(ns, name) else {
            return Ok(());
        };
        let peer = &p.spec.peer_ref;
        let local = sh.vpcs.get(ns, &p.spec.vpc_ref.name);
        let remote = sh.vpcs.get(&peer.namespace, &peer.name);
        let matched = sh
            .peerings
            .in_namespace(&peer.namespace)
            .iter()
            .any(|q| vpc_peering::reciprocates(&p, q));
        let st = vpc_peering::status(&p, local.as_deref(), remote.as_deref(), matched);
        if p.status.as_ref() == Some(&st) {
            return Ok(());
        }
        write_status(self.kind("vpcpeerings")?, &*p, json!(st)).await
    }

    async fn gateway(&self, ns: &str, name: &str) -> Result<()> {
        let sh = &self.shared;
        if self.gateways_elsewhere {
            return Ok(());
        }
        let Some(g) = sh.gateways.get(ns, name) else {
            return Ok(());
        };
        let same_vpc: Vec<Arc<VPCGateway>> = sh
            .gateways
            .in_namespace(ns)
            .into_iter()
            .filter(|o| o.spec.vpc_ref.name == g.spec.vpc_ref.name)
            .collect();
        let effective = vpc_gateway::effective(same_vpc.iter().map(|o| &**o));
        let resolved = sh.vpcs.get(ns, &g.spec.vpc_ref.name).is_some();
        let st = vpc_gateway::status(&g, resolved, effective, None);
        if g.status.as_ref() == Some(&st) {
            return Ok(());
        }
        write_status(self.kind("vpcgateways")?, &*g, json!(st)).await
    }

    async fn binding(&self, ns: &str, name: &str) -> Result<()> {
        let sh = &self.shared;
        let Some(b) = sh.bindings.get(ns, name) else {
            return Ok(());
        };
        let has = b
            .metadata
            .finalizers
            .as_ref()
            .is_some_and(|f| f.iter().any(|f| f == REAP_PORTS));
        let deleting = b.metadata.deletion_timestamp.is_some();
        let bindings = self.kind("vpcbindings")?;
        if !deleting && !has {
            // A binding stored before creates set the finalizer.
            return edit_finalizers(bindings, ns, name, |f| f.push(REAP_PORTS.into())).await;
        }
        if !deleting || !has {
            return Ok(());
        }
        let grant = vpc_binding::granted(&b);
        let other = sh.bindings.in_namespace(ns).iter().any(|o| {
            o.metadata.name != b.metadata.name
                && o.metadata.deletion_timestamp.is_none()
                && vpc_binding::granted(o) == grant
        });
        if !other {
            self.reap_ports(ns, &grant).await?;
        }
        edit_finalizers(bindings, ns, name, |f| f.retain(|x| x != REAP_PORTS)).await
    }

    /// Deletes the Ports of pod namespace `ns` attached to VPC `grant`.
    async fn reap_ports(&self, ns: &str, grant: &Key) -> Result<()> {
        let ports = self.kind("ports")?;
        let sel = format!(
            "sdn.cozystack.io/vpc-namespace={},sdn.cozystack.io/vpc={},sdn.cozystack.io/pod-namespace={ns}",
            grant.0, grant.1
        );
        let params = ListParams {
            labels: crate::registry::selector::LabelSelector::parse(&sel).map_err(ApiError::internal)?,
            ..Default::default()
        };
        for p in ports.list(None, &params).await?.items {
            match ports
                .delete(None, s(&p, "/metadata/name"), &DeleteOptions::default())
                .await
            {
                Ok(_) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// Writes `status`, derived from `from` (the mirror's copy of the object), as a `PUT
/// …/status` carrying `from`'s resourceVersion (a vanished object has nothing to write). The
/// whole status is replaced, so the write must not land on a newer object: a status field
/// written by someone else since (a NAT address set by hand on a standalone server) would be
/// lost. The store refuses it as a stale conflict, and the reconcile runs again from the mirror
/// once it has caught up.
pub(crate) async fn write_status<K>(r: &Arc<dyn Resource>, from: &K, status: Value) -> Result<()>
where
    K: kube_core::Resource + serde::Serialize,
{
    let m = from.meta();
    let ns = m.namespace.clone();
    let name = m.name.clone().unwrap_or_default();
    let mut body = serde_json::to_value(from).map_err(ApiError::internal)?;
    body["status"] = status;
    match r
        .update(ns.as_deref(), &name, body, true, &WriteOptions::server())
        .await
    {
        Err(e) if e.is_not_found() => Ok(()),
        other => other.map(|_| ()),
    }
}

/// Edits the stored finalizers of `ns`/`name` (not a copy read earlier).
pub(crate) async fn edit_finalizers(
    r: &Arc<dyn Resource>,
    ns: &str,
    name: &str,
    edit: impl Fn(&mut Vec<String>) + Send + Sync,
) -> Result<()> {
    let apply = move |mut cur: Value| -> Result<Value> {
        let mut f: Vec<String> = cur
            .pointer("/metadata/finalizers")
            .cloned()
            .and_then(|v| serde_json::from_value(v).ok())
            .unwrap_or_default();
        edit(&mut f);
        cur["metadata"]["finalizers"] = json!(f);
        Ok(cur)
    };
    match r
        .patch(Some(ns), name, &apply, false, &WriteOptions::server())
        .await
    {
        Err(e) if e.is_not_found() => Ok(()),
        other => other.map(|_| ()),
    }
}

pub(crate) struct AbortOnDrop(pub(crate) tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Runs the reconcilers of `kinds` fed by their `caches` while `leader` says this replica leads;
/// returns only if a cache is missing. `gateways_elsewhere`: the kube-backed gateway loop owns
/// VPCGateway status.
pub async fn run(
    kinds: Vec<Arc<dyn Resource>>,
    caches: Vec<Arc<WatchCache>>,
    leader: watch::Receiver<bool>,
    gateways_elsewhere: bool,
) {
    let cache = |plural: &str| {
        caches
            .iter()
            .find(|c| c.resource().info().plural == plural)
            .cloned()
    };
    let (Some(vpcs_c), Some(peerings_c), Some(gateways_c), Some(bindings_c)) = (
        cache("vpcs"),
        cache("vpcpeerings"),
        cache("vpcgateways"),
        cache("vpcbindings"),
    ) else {
        tracing::error!(
            "controllers need the watch caches of vpcs, vpcpeerings, vpcgateways and vpcbindings"
        );
        return;
    };
    let (queue, rx) = Queue::new();
    let shared = Arc::new(Shared {
        vpcs: Arc::default(),
        peerings: Arc::default(),
        gateways: Arc::default(),
        bindings: Arc::default(),
        queue: Arc::new(queue),
    });
    let follow = |h| AbortOnDrop(h);
    let sh = shared.clone();
    let _vpcs = follow(shared.vpcs.follow(vpcs_c, move |c| sh.on_vpc(&c)));
    let sh = shared.clone();
    let _peerings = follow(shared.peerings.follow(peerings_c, move |c| sh.on_peering(&c)));
    let sh = shared.clone();
    let _gateways = follow(shared.gateways.follow(gateways_c, move |c| sh.on_gateway(&c)));
    let sh = shared.clone();
    let _bindings = follow(shared.bindings.follow(bindings_c, move |c| sh.on_binding(&c)));
    let sh = shared.clone();
    let _resync = AbortOnDrop(tokio::spawn(async move {
        loop {
            tokio::time::sleep(RESYNC).await;
            sh.resync();
        }
    }));
    let queue = shared.queue.clone();
    let r = Reconciler {
        shared,
        kinds,
        gateways_elsewhere,
    };
    super::queue::work(&queue, rx, leader, &r, RETRY).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::store::WriteOptions;

    fn gateway() -> Value {
        json!({
            "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "VPCGateway",
            "metadata": { "name": "gw" }, "spec": { "vpcRef": { "name": "v" }, "nat": { "enabled": true } },
        })
    }

    /// The race the lab's IPv6 gateway test lost once: the controller derives a status from its
    /// mirror's copy while a client sets `status.natAddress6`; the controller's write must not
    /// replace the newer status with one derived from the older copy.
    #[tokio::test]
    async fn a_status_derived_from_an_older_copy_is_not_written() {
        let (_dir, storage) = cozyplane_storage::testing::embedded().await;
        let kinds = crate::registry::kinds(&storage);
        let gws = find(&kinds, "vpcgateways").unwrap().clone();
        let w = WriteOptions::server();
        let created = gws.create(Some("t"), gateway(), &w).await.unwrap();
        let mirror: VPCGateway = serde_json::from_value(created).unwrap();
        let set_by_client = move |mut cur: Value| -> Result<Value> {
            cur["status"]["natAddress6"] = json!("2001:db8::6");
            Ok(cur)
        };
        gws.patch(Some("t"), "gw", &set_by_client, true, &w)
            .await
            .unwrap();

        let derived = vpc_gateway::status(&mirror, true, None, None);
        let e = write_status(&gws, &mirror, json!(derived)).await.unwrap_err();
        assert!(e.is_stale(), "{e:?}");
        let stored = gws.get(Some("t"), "gw").await.unwrap();
        assert_eq!(stored["status"]["natAddress6"], "2001:db8::6");

        // From the current copy the write goes through and keeps the address.
        let current: VPCGateway = serde_json::from_value(stored).unwrap();
        let derived = vpc_gateway::status(&current, true, None, None);
        write_status(&gws, &current, json!(derived)).await.unwrap();
        let stored = gws.get(Some("t"), "gw").await.unwrap();
        assert_eq!(stored["status"]["natAddress6"], "2001:db8::6");
        assert_eq!(stored["status"]["phase"], "Ready");
    }
}
