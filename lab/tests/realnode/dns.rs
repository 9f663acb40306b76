//! The real-node lab's cluster DNS: what CoreDNS' `kubernetes` plugin answers for the names
//! the upstream Services and Networking tests resolve, served by Debian's dnsmasq
//! ([`Dnsmasq`]) on each node's own address in its netns, port 53. Each kubelet names its
//! node's (`clusterDNS`), so a pod asks its own node, through the host stack.
//!
//! | name | answer |
//! |---|---|
//! | `<svc>.<ns>.svc.cluster.local`, a Service with ClusterIPs | A (AAAA) of each of `spec.clusterIPs` |
//! | the same, a headless Service | A (AAAA) of each ready address of its EndpointSlices (all of them with `publishNotReadyAddresses`, which the EndpointSlice controller marks ready) |
//! | `<hostname>.<svc>.<ns>.svc.cluster.local`, a headless Service's endpoint | its addresses; `<hostname>` is the endpoint's `hostname`, else its address with dashes (`10-244-1-5`), as CoreDNS names it |
//! | the same, an ExternalName Service | CNAME to `spec.externalName` (dnsmasq follows it when it knows the target) |
//! | PTR of any address above | the names it has (dnsmasq's own, from the same records) |
//! | any other name in `cluster.local` | NXDOMAIN (`--local=/cluster.local/`) |
//! | any other name | REFUSED: nothing is forwarded, nothing leaves the machine |
//!
//! Not served: SRV records of named ports, pod records (`a-b-c-d.<ns>.pod.cluster.local`),
//! the `dns-version` TXT record and the like, which only the upstream DNS tests ask for.
//!
//! [`ClusterDns::start`] watches Services and EndpointSlices (kube-rs, the admin's
//! kubeconfig) on a task of its own. On every change it computes the records; a change of
//! the A records rewrites each dnsmasq's records file and SIGHUPs it by PID (dnsmasq re-reads
//! it), a change of the CNAMEs restarts each dnsmasq (it reads `--cname` only when it
//! starts; a query in the few milliseconds between gets no answer and is retried). Dropping a
//! [`ClusterDns`] stops the task and SIGKILLs every dnsmasq by PID.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cozyplane_conformance::realkube::ControlPlane;
use cozyplane_lab::Node;
use cozyplane_lab::outside::Dnsmasq;
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::core::{ApiResource, DynamicObject};
use kube::runtime::reflector::{Store, store::Writer};
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt as _, reflector};
use serde_json::Value;

/// The cluster domain (the kubelets' `clusterDomain`).
pub(crate) const DOMAIN: &str = "cluster.local";

/// The TTL of every answer: CoreDNS' default for its `kubernetes` plugin.
const TTL: u32 = 5;

/// What the dnsmasqs serve: hosts(5) text and the `--cname` options.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Records {
    hosts: String,
    cnames: Vec<String>,
}

impl Records {
    /// The records of `services` and the EndpointSlices of the headless ones among them.
    fn of(services: &[Arc<DynamicObject>], slices: &[Arc<DynamicObject>]) -> Self {
        let mut hosts = BTreeSet::new();
        let mut cnames = BTreeSet::new();
        for s in services {
            let (Some(ns), Some(name)) = (s.metadata.namespace.as_deref(), s.metadata.name.as_deref()) else {
                continue;
            };
            let spec = &s.data["spec"];
            let fqdn = format!("{name}.{ns}.svc.{DOMAIN}");
            if spec["type"] == "ExternalName" {
                let target = spec["externalName"].as_str().unwrap_or_default();
                let target = target.trim_end_matches('.');
                if !target.is_empty() && target != fqdn {
                    cnames.insert(format!("--cname={fqdn},{target}"));
                }
                continue;
            }
            if spec["clusterIP"] != "None" {
                let ips = strings(&spec["clusterIPs"]).chain(spec["clusterIP"].as_str());
                for ip in ips.filter_map(|ip| ip.parse::<IpAddr>().ok()) {
                    hosts.insert(format!("{ip} {fqdn}"));
                }
                continue;
            }
            // Headless: the ready endpoints of its slices.
            for slice in slices {
                let of_service = slice
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("kubernetes.io/service-name"))
                    .is_some_and(|n| n == name);
                if slice.metadata.namespace.as_deref() != Some(ns) || !of_service {
                    continue;
                }
                for ep in slice.data["endpoints"].as_array().into_iter().flatten() {
                    if ep["conditions"]["ready"] == false {
                        continue;
                    }
                    for ip in strings(&ep["addresses"]).filter_map(|a| a.parse::<IpAddr>().ok()) {
                        let label = ep["hostname"].as_str().map_or_else(|| dashed(ip), str::to_string);
                        hosts.insert(format!("{ip} {fqdn} {label}.{fqdn}"));
                    }
                }
            }
        }
        Self {
            hosts: hosts.into_iter().map(|l| l + "\n").collect(),
            cnames: cnames.into_iter().collect(),
        }
    }

    /// dnsmasq's options besides its fixed ones: the cluster domain answered locally only
    /// (NXDOMAIN for what it does not know), the TTL, the CNAMEs.
    fn options(&self) -> Vec<String> {
        let mut o = vec![format!("--local=/{DOMAIN}/"), format!("--local-ttl={TTL}")];
        o.extend(self.cnames.iter().cloned());
        o
    }
}

/// The strings of a JSON array (none if it is not one).
fn strings(v: &Value) -> impl Iterator<Item = &str> {
    v.as_array().into_iter().flatten().filter_map(Value::as_str)
}

/// An address with dashes for dots and colons, as CoreDNS names an endpoint without a
/// hostname.
fn dashed(ip: IpAddr) -> String {
    ip.to_string().replace(['.', ':'], "-")
}

/// The dnsmasqs and what they serve now.
#[derive(Debug)]
struct Servers {
    dnsmasq: Vec<Dnsmasq>,
    now: Records,
}

impl Servers {
    /// Makes every dnsmasq serve `want`. Nothing once they are gone ([`ClusterDns`] dropped).
    fn serve(&mut self, want: Records) {
        if want == self.now {
            return;
        }
        if want.cnames != self.now.cnames {
            for d in &mut self.dnsmasq {
                // The records file first, so the restarted one reads the new records.
                d.reload(&want.hosts);
                d.restart(&want.options());
            }
        } else {
            for d in &self.dnsmasq {
                d.reload(&want.hosts);
            }
        }
        self.now = want;
    }
}

/// One dnsmasq per node and the task keeping their records (module doc).
pub(crate) struct ClusterDns {
    servers: Arc<Mutex<Servers>>,
    watch: tokio::task::JoinHandle<()>,
}

impl ClusterDns {
    /// Starts a dnsmasq on each of `nodes` (its address, port 53) and the watch; returns once
    /// they serve what the API held when the watch's first lists were read. Panics after 30 s.
    pub(crate) async fn start(cp: &ControlPlane, nodes: &[Node]) -> Self {
        let now = Records::default();
        let dnsmasq = nodes
            .iter()
            .map(|n| Dnsmasq::serve(&n.ns, &[n.ip.into()], &now.hosts, &now.options()))
            .collect();
        let servers = Arc::new(Mutex::new(Servers { dnsmasq, now }));
        let (synced, first) = tokio::sync::oneshot::channel();
        let watch = tokio::spawn(watch(cp.client(&cp.admin).await, servers.clone(), synced));
        let dns = Self { servers, watch };
        tokio::time::timeout(Duration::from_secs(30), first)
            .await
            .expect("the cluster DNS's first Service and EndpointSlice lists within 30 s")
            .expect("the cluster DNS's watch runs");
        dns
    }

    /// The ends of the dnsmasqs' logs (their last 20 lines each).
    pub(crate) fn logs(&self) -> String {
        let servers = self
            .servers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        servers
            .dnsmasq
            .iter()
            .map(|d| {
                let log = d.log();
                let lines: Vec<&str> = log.lines().collect();
                let tail = lines[lines.len().saturating_sub(20)..].join("\n");
                format!("--- dnsmasq on {:?} ---\n{tail}\n", d.addrs)
            })
            .collect()
    }
}

impl Drop for ClusterDns {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("---- cluster DNS ----\n{}", self.logs());
        }
        self.watch.abort();
        // SIGKILLed by PID here, whether or not the task has seen its abort yet; it finds
        // none left to restart.
        let dnsmasq = std::mem::take(
            &mut self
                .servers
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .dnsmasq,
        );
        drop(dnsmasq);
    }
}

/// Which watch an event came from.
#[derive(Clone, Copy, Debug)]
enum Source {
    Services = 0,
    Slices = 1,
}

/// Watches Services and EndpointSlices into stores; once both have been listed, serves the
/// records of what they hold after every event, and says so on `synced` the first time.
///
/// Both as plain JSON (`DynamicObject`): an object k8s-openapi's types cannot read must not
/// stall the watch. One did: the upstream "service status lifecycle" test writes a Service
/// condition whose `lastTransitionTime` kube-apiserver sends as `null`, which k8s-openapi's
/// `Condition` refuses; the watch reported an error for each of its events and backed off,
/// seconds in which new Services went unanswered.
async fn watch(client: kube::Client, servers: Arc<Mutex<Servers>>, synced: tokio::sync::oneshot::Sender<()>) {
    let (services, service_events) = reflect(
        &client,
        ApiResource::erase::<Service>(&()),
        watcher::Config::default(),
    );
    let (slices, slice_events) = reflect(
        &client,
        ApiResource::erase::<EndpointSlice>(&()),
        watcher::Config::default().labels("kubernetes.io/service-name"),
    );
    let service_events = service_events.map(|e| (Source::Services, e));
    let slice_events = slice_events.map(|e| (Source::Slices, e));
    let mut events = std::pin::pin!(futures::stream::select(service_events, slice_events));
    let mut listed = [false, false];
    let mut synced = Some(synced);
    while let Some((from, ev)) = events.next().await {
        match ev.map(|e| matches!(e, Event::InitDone)) {
            Ok(true) => listed[from as usize] = true,
            Ok(false) => {}
            Err(e) => {
                eprintln!("cluster DNS, {from:?} watch: {e}");
                continue;
            }
        }
        if !listed.iter().all(|l| *l) {
            continue;
        }
        let want = Records::of(&services.state(), &slices.state());
        servers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .serve(want);
        if let Some(s) = synced.take() {
            let _ = s.send(());
        }
    }
}

/// A store of the objects of kind `ar` in every namespace and the stream of watch events
/// that fills it (backing off after errors).
fn reflect(
    client: &kube::Client,
    ar: ApiResource,
    cfg: watcher::Config,
) -> (
    Store<DynamicObject>,
    impl futures::Stream<Item = Result<Event<DynamicObject>, watcher::Error>>,
) {
    let api = Api::all_with(client.clone(), &ar);
    let writer = Writer::new(ar);
    let reader = writer.as_reader();
    (
        reader,
        reflector(writer, watcher::watcher(api, cfg)).default_backoff(),
    )
}
