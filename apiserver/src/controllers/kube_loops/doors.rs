//! The doors of VPCs on the kube-apiserver: the LoadBalancer Services (and their EndpointSlices)
//! the VPCGateway loop ([`super::nat_gateway`]) and the FloatingIP loop ([`super::floating_ip`])
//! own. This module holds what both share: the informers of those Services and slices, the
//! shapes of the objects, and how an owned object is created, aligned or deleted.
//!
//! The Service is how cozyplane asks the cluster's LoadBalancer implementation (MetalLB, a cloud
//! controller) for a public address without cozyplane attracting anything itself: label
//! `service.kubernetes.io/service-proxy-name: cozyplane` makes every proxy skip it, there are no
//! node ports and one placeholder port, and the address arrives in `status.loadBalancer.ingress`.
//! The EndpointSlice of the same name tells an announcing implementation (MetalLB) where the
//! address lives.
//!
//! The informers watch only these objects (label selectors). Their events are kept in
//! [`Owned`] maps indexed by the door named in the labels, so a change queues exactly one door,
//! and a create puts its answer in the map at once: a second pass before the watch delivers the
//! new Service must not create another (`generateName` never collides).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use cozyplane_apis::v1alpha1::{FloatingIP, Port, VPC, VPCGateway};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::watcher;

use super::super::informer::{Changed, Key, Mirror};
use super::super::loops::{AbortOnDrop, find};
use super::super::queue::Queue;
use super::owned::Owned;
use crate::errors::Result;
use crate::rbac::server as rbac;
use crate::registry::Resource;

/// Makes every service proxy (kube-proxy, Cilium, …) skip the owned Services.
pub(super) const PROXY_NAME: &str = "service.kubernetes.io/service-proxy-name";
/// Our value of [`PROXY_NAME`].
pub(super) const PROXY: &str = "cozyplane";
/// Names the gateway of an owned Service or slice.
pub(super) const GATEWAY_LABEL: &str = "sdn.cozystack.io/vpc-gateway";
/// Names the FloatingIP of an owned Service or slice.
pub(super) const FIP_LABEL: &str = "sdn.cozystack.io/floating-ip";
/// The address family of a gateway's Service (`IPv4`, `IPv6`).
pub(super) const FAMILY_LABEL: &str = "sdn.cozystack.io/address-family";
/// Carries `addressClaimName(6)` to an external address controller.
pub(super) const CLAIM: &str = "local.sdn.cozystack.io/ip-address-claim";
/// An EndpointSlice's Service.
pub(super) const SERVICE_NAME: &str = "kubernetes.io/service-name";
/// Who manages an EndpointSlice (the endpointslice controller leaves ours alone).
pub(super) const MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";

/// One owner of Services: the work item of the loops.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Door {
    /// A VPCGateway (`namespace`, `name`).
    Gateway(Key),
    /// A FloatingIP.
    Fip(Key),
}

impl Door {
    pub(super) fn of(meta: &ObjectMeta) -> Option<Self> {
        let labels = meta.labels.as_ref()?;
        let ns = meta.namespace.clone().unwrap_or_default();
        if let Some(g) = labels.get(GATEWAY_LABEL) {
            return Some(Self::Gateway((ns, g.clone())));
        }
        labels.get(FIP_LABEL).map(|f| Self::Fip((ns, f.clone())))
    }
}

/// An address family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Family {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

impl Family {
    /// `IPv4`/`IPv6`, as Services and EndpointSlices spell it.
    pub(super) fn name(self) -> &'static str {
        match self {
            Self::V4 => "IPv4",
            Self::V6 => "IPv6",
        }
    }

    /// `v4`/`v6`, for generated names.
    pub(super) fn short(self) -> &'static str {
        match self {
            Self::V4 => "v4",
            Self::V6 => "v6",
        }
    }

    /// The family of `ip`.
    pub(super) fn of(ip: IpAddr) -> Self {
        if ip.is_ipv4() { Self::V4 } else { Self::V6 }
    }

    pub(super) fn parse(s: &str) -> Option<Self> {
        [Self::V4, Self::V6].into_iter().find(|f| f.name() == s)
    }
}

/// The families of a VPC's CIDRs, IPv4 first.
pub(super) fn vpc_families(vpc: &VPC) -> Vec<Family> {
    let mut f: Vec<Family> = vpc
        .spec
        .cidrs
        .iter()
        .filter_map(|c| c.parse::<cozyplane_apis::net::IpNet>().ok())
        .map(|n| Family::of(n.addr()))
        .collect();
    f.sort();
    f.dedup();
    f
}

/// The family of a Service (`spec.ipFamilies[0]`).
pub(super) fn service_family(s: &Service) -> Option<Family> {
    let spec = s.spec.as_ref()?;
    Family::parse(spec.ip_families.as_ref()?.first()?)
}

/// The first ingress address of `family` the LoadBalancer implementation assigned to `s`.
pub(super) fn ingress(s: &Service, family: Family) -> Option<String> {
    s.status
        .as_ref()?
        .load_balancer
        .as_ref()?
        .ingress
        .as_ref()?
        .iter()
        .filter_map(|i| i.ip.as_deref()?.parse::<IpAddr>().ok())
        .find(|ip| Family::of(*ip) == family)
        .map(cozyplane_apis::net::canonical_ip)
}

/// Objects of one kind the loops own: by namespace and name, and by door.
pub(super) fn key_of(m: &ObjectMeta) -> Key {
    (
        m.namespace.clone().unwrap_or_default(),
        m.name.clone().unwrap_or_default(),
    )
}

pub(super) struct Doors {
    pub(super) client: kube::Client,
    pub(super) vpcs: Arc<Mirror<VPC>>,
    pub(super) gateways: Arc<Mirror<VPCGateway>>,
    pub(super) fips: Arc<Mirror<FloatingIP>>,
    pub(super) ports: Arc<Mirror<Port>>,
    pub(super) services: Owned<Service>,
    pub(super) slices: Owned<EndpointSlice>,
    /// Families a Service create was refused for (422 Invalid: the cluster does not serve that
    /// family), with the owner's generation then and the message: not tried again until the
    /// owner's spec changes.
    pub(super) refused: Mutex<HashMap<(Door, Family), (i64, String)>>,
    pub(super) queue: Arc<Queue<Door>>,
    pub(super) gateways_kind: Arc<dyn Resource>,
    pub(super) fips_kind: Arc<dyn Resource>,
}

impl Doors {
    pub(super) fn new(
        client: kube::Client,
        kinds: &[Arc<dyn Resource>],
        ports: Arc<Mirror<Port>>,
        queue: Arc<Queue<Door>>,
    ) -> Option<Self> {
        Some(Self {
            client,
            vpcs: Arc::default(),
            gateways: Arc::default(),
            fips: Arc::default(),
            ports,
            services: Owned::default(),
            slices: Owned::default(),
            refused: Mutex::default(),
            queue,
            gateways_kind: find(kinds, "vpcgateways")?.clone(),
            fips_kind: find(kinds, "floatingips")?.clone(),
        })
    }

    fn queue_all(&self) {
        for g in self.gateways.all() {
            self.queue.add(Door::Gateway(key_of(&g.metadata)));
        }
        for f in self.fips.all() {
            self.queue.add(Door::Fip(key_of(&f.metadata)));
        }
    }

    /// A Service or slice event.
    pub(super) fn on_owned(&self, (doors, all): (Vec<Door>, bool)) {
        for d in doors {
            self.queue.add(d);
        }
        if all {
            self.queue_all();
        }
    }

    /// A VPC changed: its gateways (families, existence) and FloatingIPs (VNI, existence).
    pub(super) fn on_vpc(&self, c: &Changed<'_, VPC>) {
        let vni = |v: &VPC| v.status.as_ref().map_or(0, |s| s.vni);
        if let (Some(o), Some(n)) = (c.old, c.new)
            && o.spec.cidrs == n.spec.cidrs
            && vni(o) == vni(n)
        {
            return;
        }
        let Some(v) = c.new.or(c.old) else { return };
        let (ns, name) = key_of(&v.metadata);
        for g in self.gateways.in_namespace(&ns) {
            if g.spec.vpc_ref.name == name {
                self.queue.add(Door::Gateway(key_of(&g.metadata)));
            }
        }
        for f in self.fips.in_namespace(&ns) {
            if f.spec.vpc_ref.name == name {
                self.queue.add(Door::Fip(key_of(&f.metadata)));
            }
        }
    }

    /// A gateway changed: every gateway of its VPC (old and new) may win or lose.
    pub(super) fn on_gateway(&self, c: &Changed<'_, VPCGateway>) {
        let Some(g) = c.new.or(c.old) else { return };
        let key = key_of(&g.metadata);
        self.queue.add(Door::Gateway(key.clone()));
        if let (Some(o), Some(n)) = (c.old, c.new)
            && o.spec == n.spec
            && o.metadata.deletion_timestamp == n.metadata.deletion_timestamp
        {
            return; // our status write
        }
        for vpc in [c.old, c.new].into_iter().flatten().map(|g| &g.spec.vpc_ref.name) {
            for other in self.gateways.in_namespace(&key.0) {
                if other.spec.vpc_ref.name == *vpc {
                    self.queue.add(Door::Gateway(key_of(&other.metadata)));
                }
            }
        }
    }

    /// A FloatingIP changed: every FloatingIP of its `{vpc, target}` (old and new).
    pub(super) fn on_fip(&self, c: &Changed<'_, FloatingIP>) {
        let Some(f) = c.new.or(c.old) else { return };
        let key = key_of(&f.metadata);
        self.queue.add(Door::Fip(key.clone()));
        if let (Some(o), Some(n)) = (c.old, c.new)
            && o.spec == n.spec
            && o.metadata.deletion_timestamp == n.metadata.deletion_timestamp
        {
            return;
        }
        for f in [c.old, c.new].into_iter().flatten() {
            self.queue_fips_of(&key.0, &f.spec.vpc_ref.name, &f.spec.target);
        }
    }

    /// A Port changed: the FloatingIPs targeting its address (old and new).
    pub(super) fn on_port(&self, c: &Changed<'_, Port>) {
        if let (Some(o), Some(n)) = (c.old, c.new)
            && o.spec == n.spec
            && o.metadata.deletion_timestamp == n.metadata.deletion_timestamp
        {
            return; // membership (status) only
        }
        for p in [c.old, c.new].into_iter().flatten() {
            self.queue_fips_of(&p.spec.vpc_ref.namespace, &p.spec.vpc_ref.name, &p.spec.ip);
        }
    }

    fn queue_fips_of(&self, ns: &str, vpc: &str, target: &str) {
        let canon = |t: &str| t.parse::<IpAddr>().map(cozyplane_apis::net::canonical_ip).ok();
        let want = canon(target);
        for f in self.fips.in_namespace(ns) {
            if f.spec.vpc_ref.name == vpc && (canon(&f.spec.target) == want || f.spec.target == target) {
                self.queue.add(Door::Fip(key_of(&f.metadata)));
            }
        }
    }
}

#[async_trait::async_trait]
impl super::super::queue::Reconcile<Door> for Doors {
    async fn reconcile(&self, d: &Door) -> Result<()> {
        // Before both informers have listed, a missing Service may exist: wait (their first
        // list queues every door).
        if !self.services.synced() || !self.slices.synced() {
            return Ok(());
        }
        match d {
            Door::Gateway((ns, name)) => self.gateway(ns, name).await,
            Door::Fip((ns, name)) => self.floating_ip(ns, name).await,
        }
    }
}

/// Starts the mirrors of VPCs, gateways and FloatingIPs, the Service and EndpointSlice
/// informers and the worker of `doors` (whose Port mirror the caller feeds, calling
/// [`Doors::on_port`]).
pub(super) fn start(
    doors: &Arc<Doors>,
    kube: &crate::informer::KubeConnection,
    caches: &[Arc<crate::registry::cache::WatchCache>],
    rx: tokio::sync::mpsc::UnboundedReceiver<Door>,
    leader: tokio::sync::watch::Receiver<bool>,
) -> Vec<AbortOnDrop> {
    let cache = |plural: &str| {
        caches
            .iter()
            .find(|c| c.resource().info().plural == plural)
            .cloned()
    };
    let (Some(vpcs_c), Some(gateways_c), Some(fips_c)) =
        (cache("vpcs"), cache("vpcgateways"), cache("floatingips"))
    else {
        tracing::error!(
            "the VPCGateway and FloatingIP loops need the vpcs, vpcgateways and floatingips caches"
        );
        return Vec::new();
    };
    let mut tasks = Vec::new();
    let d = doors.clone();
    tasks.push(AbortOnDrop(doors.vpcs.follow(vpcs_c, move |c| d.on_vpc(&c))));
    let d = doors.clone();
    tasks.push(AbortOnDrop(
        doors.gateways.follow(gateways_c, move |c| d.on_gateway(&c)),
    ));
    let d = doors.clone();
    tasks.push(AbortOnDrop(doors.fips.follow(fips_c, move |c| d.on_fip(&c))));
    let d = doors.clone();
    let services = kube.watch_all::<Service>(
        &rbac::SERVICES,
        watcher::Config::default().labels(&format!("{PROXY_NAME}={PROXY}")),
    );
    tasks.push(AbortOnDrop(tokio::spawn(async move {
        let mut services = services;
        while let Some(ev) = futures::StreamExt::next(&mut services).await {
            d.on_owned(d.services.on_event(&ev));
        }
    })));
    let d = doors.clone();
    let slices = kube.watch_all::<EndpointSlice>(
        &rbac::ENDPOINTSLICES,
        watcher::Config::default().labels(&format!("{MANAGED_BY}={PROXY}")),
    );
    tasks.push(AbortOnDrop(tokio::spawn(async move {
        let mut slices = slices;
        while let Some(ev) = futures::StreamExt::next(&mut slices).await {
            d.on_owned(d.slices.on_event(&ev));
        }
    })));
    let d = doors.clone();
    tasks.push(AbortOnDrop(tokio::spawn(async move {
        let queue = d.queue.clone();
        super::super::queue::work(&queue, rx, leader, &*d, RETRY).await;
    })));
    tasks
}

/// How long a failed reconcile waits before it is tried again.
const RETRY: std::time::Duration = std::time::Duration::from_secs(1);
