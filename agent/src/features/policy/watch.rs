//! The policy writer's watches: one stream of every kind it compiles, and what one event
//! means for the listings and the compilers ([`changes`]).
//!
//! * Nodes: one watch of every Node, read light ([`lite::LiteNode`]), feeds both this node's
//!   HostFirewall view (the entry named as this node) and AdminNetworkPolicy `nodes` peers
//!   (every node's labels and addresses).
//! * AdminNetworkPolicy and BaselineAdminNetworkPolicy come from CRDs the chart installs, which
//!   a cluster may not have. A list answered 404 counts as listed and empty
//!   ([`feed::Listing::absent`]): the policy layers are not held back, and what was live goes
//!   (the CRD was deleted with its objects). It is logged once per disappearance, and the
//!   watch keeps asking every [`LOOKOUT_MAX`] at most, so installing the CRDs later is picked
//!   up without a restart.
//! * The kube-apiserver: the EndpointSlices of the `default/kubernetes` Service (label
//!   `kubernetes.io/service-name=kubernetes`), whose ready addresses the
//!   `policy.cozystack.io/kube-apiserver` extension of the admin tiers matches. Listed once
//!   before the first compile like every kind; an empty list (a cluster whose API server
//!   keeps no endpoints) is complete, and the extension then matches no address.

use std::net::IpAddr;
use std::time::Duration;

use cozyplane_apis::admin_policy::{AdminNetworkPolicy, BaselineAdminNetworkPolicy};
use cozyplane_apis::v1alpha1::{HostFirewall, Port, SecurityGroup, VPC};
use cozyplane_policy::np::admin::KUBE_APISERVER_ANNOTATION;
use futures::{StreamExt as _, stream::BoxStream};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};

use super::feed::{self, Change, Key, Listing, Listings, Step};
use super::lite;
use crate::core::api::ApiClients;

/// How often a failed write is retried as a full reconcile.
pub const RETRY: Duration = Duration::from_secs(10);

/// The longest wait between two lists of a kind the API does not serve (yet).
pub const LOOKOUT_MAX: Duration = Duration::from_secs(10);

/// One event of any watch, or the retry tick.
pub enum Ev {
    /// A NetworkPolicy.
    Policy(Result<Event<NetworkPolicy>, watcher::Error>),
    /// A Pod.
    Pod(Result<Event<lite::LitePod>, watcher::Error>),
    /// A Namespace's metadata.
    Namespace(Result<Event<kube::core::PartialObjectMeta<Namespace>>, watcher::Error>),
    /// A Node (any).
    Node(Box<Result<Event<lite::LiteNode>, watcher::Error>>),
    /// An AdminNetworkPolicy.
    Anp(Box<Result<Event<AdminNetworkPolicy>, watcher::Error>>),
    /// The BaselineAdminNetworkPolicy.
    Banp(Box<Result<Event<BaselineAdminNetworkPolicy>, watcher::Error>>),
    /// An EndpointSlice of the kube-apiserver (`default/kubernetes`).
    Apiserver(Box<Result<Event<EndpointSlice>, watcher::Error>>),
    /// A VPC.
    Vpc(Result<Event<VPC>, watcher::Error>),
    /// A SecurityGroup.
    Group(Result<Event<SecurityGroup>, watcher::Error>),
    /// A Port.
    Port(Box<Result<Event<Port>, watcher::Error>>),
    /// A HostFirewall.
    Firewall(Result<Event<HostFirewall>, watcher::Error>),
    /// Time to retry a failed write.
    Tick,
}

fn key_of(m: &ObjectMeta) -> Key {
    crate::core::watch::name_of(m)
}

/// The backoff of the admin kinds' watches: 1 s, doubling to [`LOOKOUT_MAX`] (kube-rs'
/// default goes to 30 s, which is long to wait for CRDs just installed).
#[derive(Clone, Debug)]
pub struct Lookout(Duration);

impl Default for Lookout {
    fn default() -> Self {
        Self(Duration::from_secs(1))
    }
}

impl Iterator for Lookout {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let now = self.0;
        self.0 = (self.0 * 2).min(LOOKOUT_MAX);
        Some(now)
    }
}

impl kube::runtime::utils::Backoff for Lookout {
    fn reset(&mut self) {
        *self = Self::default();
    }
}

/// Every watch of the writer, merged, and the retry tick.
pub fn streams(api: &ApiClients) -> BoxStream<'static, Ev> {
    let cfg = watcher::Config::default();
    let kube = api.kube.clone();
    let sdn = api.sdn.clone();
    // Finished pods hold no address (the kubelet may hand theirs to a new pod); the field
    // selector turns a pod finishing into a delete.
    let pods_cfg = cfg.clone().fields("status.phase!=Succeeded,status.phase!=Failed");
    let all: Vec<BoxStream<'static, Ev>> = vec![
        watcher::watcher(Api::<NetworkPolicy>::all(kube.clone()), cfg.clone())
            .default_backoff()
            .map(Ev::Policy)
            .boxed(),
        watcher::watcher(Api::<lite::LitePod>::all(kube.clone()), pods_cfg)
            .default_backoff()
            .map(Ev::Pod)
            .boxed(),
        // Metadata only: a namespace is its labels here.
        watcher::watcher(
            Api::<kube::core::PartialObjectMeta<Namespace>>::all(kube.clone()),
            cfg.clone(),
        )
        .default_backoff()
        .map(Ev::Namespace)
        .boxed(),
        watcher::watcher(Api::<lite::LiteNode>::all(kube.clone()), cfg.clone())
            .default_backoff()
            .map(|e| Ev::Node(Box::new(e)))
            .boxed(),
        watcher::watcher(Api::<AdminNetworkPolicy>::all(kube.clone()), cfg.clone())
            .backoff(Lookout::default())
            .map(|e| Ev::Anp(Box::new(e)))
            .boxed(),
        watcher::watcher(Api::<BaselineAdminNetworkPolicy>::all(kube.clone()), cfg.clone())
            .backoff(Lookout::default())
            .map(|e| Ev::Banp(Box::new(e)))
            .boxed(),
        watcher::watcher(
            Api::<EndpointSlice>::namespaced(kube, feed::APISERVER_NAMESPACE),
            cfg.clone().labels(feed::APISERVER_SLICES),
        )
        .default_backoff()
        .map(|e| Ev::Apiserver(Box::new(e)))
        .boxed(),
        watcher::watcher(Api::<VPC>::all(sdn.clone()), cfg.clone())
            .default_backoff()
            .map(Ev::Vpc)
            .boxed(),
        watcher::watcher(Api::<SecurityGroup>::all(sdn.clone()), cfg.clone())
            .default_backoff()
            .map(Ev::Group)
            .boxed(),
        watcher::watcher(Api::<Port>::all(sdn.clone()), cfg.clone())
            .default_backoff()
            .map(|e| Ev::Port(Box::new(e)))
            .boxed(),
        watcher::watcher(Api::<HostFirewall>::all(sdn), cfg)
            .default_backoff()
            .map(Ev::Firewall)
            .boxed(),
        futures::stream::unfold((), |()| async {
            tokio::time::sleep(RETRY).await;
            Some((Ev::Tick, ()))
        })
        .boxed(),
    ];
    futures::stream::select_all(all).boxed()
}

/// Does a watch error say the API does not serve the kind (404: no CRD)?
pub fn not_served(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s.code == 404,
        watcher::Error::WatchError(s) => s.code == 404,
        _ => false,
    }
}

/// An admin kind's event: a 404 makes the listing absent (listed, empty).
fn admin_event<O, T: Clone + PartialEq>(
    l: &mut Listing<T>,
    kind: &str,
    r: Result<Event<O>, watcher::Error>,
    row: impl Fn(&O) -> T,
) -> Result<Vec<Step<T>>, watcher::Error>
where
    O: kube::Resource,
{
    match r {
        Err(e) if not_served(&e) => {
            let (gone, news) = l.absent();
            if news {
                tracing::warn!(
                    "{kind}: the API does not serve the kind (are the network-policy-api CRDs installed? the chart's crds/); \
                     no {kind} is enforced, looking again every {}s at most",
                    LOOKOUT_MAX.as_secs()
                );
            }
            Ok(gone)
        }
        r => {
            let was_absent = l.absent;
            let steps = l.event(r?, |o| key_of(o.meta()), |o| Some(row(o)));
            if was_absent && !l.absent {
                tracing::info!("{kind}: served now, {} listed", l.live.len());
            }
            Ok(steps)
        }
    }
}

/// What an admin policy's metadata is to the compiler: its name and the kube-apiserver
/// annotation (status and the rest of the metadata change without changing what it
/// enforces).
fn admin_meta(m: &ObjectMeta) -> ObjectMeta {
    let annotations = m
        .annotations
        .iter()
        .flatten()
        .filter(|(k, _)| k.as_str() == KUBE_APISERVER_ANNOTATION)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect::<std::collections::BTreeMap<_, _>>();
    ObjectMeta {
        name: m.name.clone(),
        annotations: (!annotations.is_empty()).then_some(annotations),
        ..ObjectMeta::default()
    }
}

/// What an admin policy is to the compiler: its name, spec and [`admin_meta`].
fn anp_row(o: &AdminNetworkPolicy) -> AdminNetworkPolicy {
    AdminNetworkPolicy {
        metadata: admin_meta(&o.metadata),
        spec: o.spec.clone(),
        status: None,
    }
}

fn banp_row(o: &BaselineAdminNetworkPolicy) -> BaselineAdminNetworkPolicy {
    BaselineAdminNetworkPolicy {
        metadata: admin_meta(&o.metadata),
        spec: o.spec.clone(),
        status: None,
    }
}

/// Turn one event into the compilers' changes (and update the listings). `node` is this
/// node's name, `own` its addresses beyond its Node object's.
pub fn changes(l: &mut Listings, ev: Ev, node: &str, own: &[IpAddr]) -> Result<Vec<Change>, watcher::Error> {
    Ok(match ev {
        Ev::Policy(r) => l
            .policies
            .event(r?, |o| key_of(&o.metadata), |o| Some(o.clone()))
            .into_iter()
            .map(Change::Policy)
            .collect(),
        Ev::Pod(r) => l
            .pods
            .event(r?, |o| key_of(&o.metadata), |o| Some(o.info()))
            .into_iter()
            .map(Change::Pod)
            .collect(),
        Ev::Namespace(r) => l
            .namespaces
            .event(
                r?,
                |o| key_of(&o.metadata),
                |o| {
                    Some(cozyplane_policy::np::NamespaceInfo {
                        name: o.metadata.name.clone().unwrap_or_default(),
                        labels: o.metadata.labels.clone().unwrap_or_default(),
                    })
                },
            )
            .into_iter()
            .map(Change::Namespace)
            .collect(),
        Ev::Node(r) => {
            let ev = (*r)?;
            // This node's entry for the HostFirewall (other nodes read as absent there).
            let own_steps = l.node.event(
                ev.clone(),
                |o| key_of(&o.metadata),
                |o| (o.metadata.name.as_deref() == Some(node)).then(|| feed::node_info(&o.node(), own)),
            );
            let all = l.nodes.event(
                ev,
                |o| key_of(&o.metadata),
                |o| Some(cozyplane_policy::np::NodeInfo::from_k8s(&o.node())),
            );
            own_steps
                .into_iter()
                .map(Change::Node)
                .chain(all.into_iter().map(Change::ClusterNode))
                .collect()
        }
        Ev::Anp(r) => admin_event(&mut l.anps, "AdminNetworkPolicy", *r, anp_row)?
            .into_iter()
            .map(Change::Anp)
            .collect(),
        Ev::Banp(r) => admin_event(&mut l.banps, "BaselineAdminNetworkPolicy", *r, banp_row)?
            .into_iter()
            .map(Change::Banp)
            .collect(),
        Ev::Apiserver(r) => {
            let steps = l
                .apiserver
                .event((*r)?, |o| key_of(&o.metadata), feed::apiserver_addresses);
            if steps.is_empty() {
                Vec::new()
            } else {
                vec![Change::KubeApiserver(l.kube_apiserver())]
            }
        }
        Ev::Vpc(r) => l
            .vpcs
            .event(
                r?,
                |o| key_of(&o.metadata),
                |o| {
                    o.status
                        .as_ref()
                        .and_then(|s| u32::try_from(s.vni).ok())
                        .filter(|v| *v != 0)
                },
            )
            .into_iter()
            .map(Change::Vpc)
            .collect(),
        Ev::Group(r) => l
            .groups
            .event(r?, |o| key_of(&o.metadata), |o| Some(o.clone()))
            .into_iter()
            .map(Change::Group)
            .collect(),
        Ev::Port(r) => l
            .ports
            .event((*r)?, |o| key_of(&o.metadata), |o| Some(o.clone()))
            .into_iter()
            .map(Change::Port)
            .collect(),
        Ev::Firewall(r) => l
            .firewalls
            .event(r?, |o| key_of(&o.metadata), |o| Some(o.clone()))
            .into_iter()
            .map(Change::Firewall)
            .collect(),
        Ev::Tick => Vec::new(),
    })
}

#[cfg(test)]
#[path = "watch_tests.rs"]
mod tests;
