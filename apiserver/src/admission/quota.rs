//! ResourceQuota for our kinds: `count/<plural>.sdn.cozystack.io`.
//!
//! Admission ([`Quota::charge`]) follows Kubernetes' ResourceQuota plugin: every quota of the
//! namespace that names the resource in `spec.hard` must have usage (`status.hard` and
//! `status.used`) for it (else `status unknown for quota: …`), and `used + 1 ≤ hard` (else
//! `exceeded quota: …`). Then each such quota's `status.used` is incremented with an
//! optimistic `PUT …/status` on its `resourceVersion` before the object is stored; a conflict
//! re-reads and retries (3 attempts). `dryRun` checks but charges nothing.
//!
//! [`Reconciler`] keeps `status.used` true for our resources, as kube-controller-manager's
//! quota controller does for built-in ones: it recounts a namespace when one of our objects is
//! deleted, every `period` for all namespaces, and fills in `status.hard`/`status.used` of a
//! quota that names our resources but has no usage for them yet.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use cozyplane_apis::{GROUP, KindInfo};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ResourceQuota, ResourceQuotaStatus};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{ListParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client};
use tokio::sync::mpsc;

use crate::errors::{ApiError, Result};
use crate::informer::KubeConnection;
use crate::rbac::server as rbac;
use crate::registry::Resource;

/// Plurals of the kinds counted by quota (the namespaced kinds of the table).
pub const COUNTED: [&str; 6] = [
    "vpcs",
    "vpcbindings",
    "vpcpeerings",
    "vpcgateways",
    "securitygroups",
    "floatingips",
];

/// `count/<plural>.sdn.cozystack.io`.
pub fn resource_name(plural: &str) -> String {
    format!("count/{plural}.{GROUP}")
}

/// Parses an integer quantity (`2`, `10k`, `1Ki`); `None` for fractions or garbage.
pub fn parse_count(q: &str) -> Option<i64> {
    let q = q.trim();
    let split = q
        .find(|c: char| !c.is_ascii_digit() && c != '-' && c != '+')
        .unwrap_or(q.len());
    let (num, suffix) = q.split_at(split);
    let n: i64 = num.parse().ok()?;
    let mul: i64 = match suffix {
        "" => 1,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mul)
}

fn get(map: Option<&BTreeMap<String, Quantity>>, key: &str) -> Option<i64> {
    map?.get(key).and_then(|q| parse_count(&q.0))
}

/// Why quota refuses a create.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A covering quota has no usage for the resource yet.
    StatusUnknown {
        /// The quota.
        quota: String,
    },
    /// The create would exceed a quota.
    Exceeded {
        /// The quota.
        quota: String,
        /// `status.used`.
        used: i64,
        /// `status.hard`.
        hard: i64,
    },
}

impl Refusal {
    /// Kubernetes' message for `resource`.
    pub fn message(&self, resource: &str) -> String {
        match self {
            Refusal::StatusUnknown { quota } => {
                format!("status unknown for quota: {quota}, resources: {resource}")
            }
            Refusal::Exceeded { quota, used, hard } => format!(
                "exceeded quota: {quota}, requested: {resource}=1, used: {resource}={used}, limited: {resource}={hard}"
            ),
        }
    }
}

/// Decides a create of one `resource` against the namespace's `quotas`: the indexes of the
/// covering quotas and their new `used`, or the first refusal (quotas in name order).
pub fn evaluate(quotas: &[ResourceQuota], resource: &str) -> Result<Vec<(usize, i64)>, Refusal> {
    let mut order: Vec<usize> = (0..quotas.len()).collect();
    order.sort_by_key(|i| quotas[*i].metadata.name.clone());
    let mut charges = Vec::new();
    for i in order {
        let q = &quotas[i];
        let name = q.metadata.name.clone().unwrap_or_default();
        let names_it = q
            .spec
            .as_ref()
            .and_then(|s| s.hard.as_ref())
            .is_some_and(|h| h.contains_key(resource));
        if !names_it {
            continue;
        }
        let status = q.status.as_ref();
        let hard = get(status.and_then(|s| s.hard.as_ref()), resource);
        let used = get(status.and_then(|s| s.used.as_ref()), resource);
        let (Some(hard), Some(used)) = (hard, used) else {
            return Err(Refusal::StatusUnknown { quota: name });
        };
        if used + 1 > hard {
            return Err(Refusal::Exceeded {
                quota: name,
                used,
                hard,
            });
        }
        charges.push((i, used + 1));
    }
    Ok(charges)
}

/// Quota admission against the kube-apiserver of a client.
pub struct Quota {
    client: Client,
}

const ATTEMPTS: usize = 3;

impl Quota {
    /// Quota admission through `client`.
    pub fn new(client: Client) -> Self {
        Self { client }
    }

    /// Checks and (unless `dry_run`) charges one object of `info` in `ns`.
    pub async fn charge(&self, info: &KindInfo, ns: &str, name: &str, dry_run: bool) -> Result<()> {
        if !COUNTED.contains(&info.plural) {
            return Ok(());
        }
        let resource = resource_name(info.plural);
        let api: Api<ResourceQuota> = rbac::RESOURCEQUOTAS
            .uses("list")
            .api_namespaced(self.client.clone(), ns);
        for _ in 0..ATTEMPTS {
            let quotas = api
                .list(&ListParams::default())
                .await
                .map_err(|e| ApiError::internal(format!("listing resourcequotas in {ns}: {e}")))?
                .items;
            let charges = evaluate(&quotas, &resource)
                .map_err(|r| super::forbidden(info, name, &r.message(&resource)))?;
            if dry_run || charges.is_empty() {
                return Ok(());
            }
            let mut conflict = false;
            for (i, used) in charges {
                let mut q = quotas[i].clone();
                let status = q.status.get_or_insert_with(ResourceQuotaStatus::default);
                status
                    .used
                    .get_or_insert_with(BTreeMap::new)
                    .insert(resource.clone(), Quantity(used.to_string()));
                match replace_status(&self.client, ns, &q).await {
                    Ok(()) => {}
                    Err(kube::Error::Api(s)) if s.code == 409 => {
                        conflict = true;
                        break;
                    }
                    Err(e) => {
                        return Err(ApiError::internal(format!("updating resourcequota status: {e}")));
                    }
                }
            }
            if !conflict {
                return Ok(());
            }
            // A quota we already charged in this attempt stays charged; the reconciler trues it up.
        }
        Err(super::forbidden(
            info,
            name,
            "status unknown for quota: too many conflicts updating quota usage, please retry",
        ))
    }
}

async fn replace_status(client: &Client, ns: &str, q: &ResourceQuota) -> kube::Result<()> {
    let name = q.metadata.name.clone().unwrap_or_default();
    let api: Api<ResourceQuota> = rbac::RESOURCEQUOTAS_STATUS
        .uses("update")
        .api_namespaced(client.clone(), ns);
    api.replace_status(&name, &PostParams::default(), q).await?;
    Ok(())
}

/// Recomputes `status.used` of quotas for our resources.
pub struct Reconciler {
    kube: KubeConnection,
    kinds: Vec<Arc<dyn Resource>>,
}

/// How to reach a running [`Reconciler`].
#[derive(Clone, Debug)]
pub struct ReconcileHandle {
    tx: mpsc::UnboundedSender<Trigger>,
}

#[derive(Debug)]
enum Trigger {
    /// Recount one namespace.
    Namespace(String),
    /// Recount every namespace with a quota naming our resources.
    All,
    /// Fill in missing usage of quotas naming our resources, leave present usage alone.
    Initialize(String),
}

impl ReconcileHandle {
    /// Asks for a recount of `ns`.
    pub fn recount(&self, ns: &str) {
        let _ = self.tx.send(Trigger::Namespace(ns.to_string()));
    }
}

impl Reconciler {
    /// A reconciler counting the objects of `kinds`.
    pub fn new(kube: KubeConnection, kinds: Vec<Arc<dyn Resource>>) -> Self {
        let kinds = kinds
            .into_iter()
            .filter(|k| k.info().namespaced && COUNTED.contains(&k.info().plural))
            .collect();
        Self { kube, kinds }
    }

    /// Spawns the reconciler: storage watches for deletes, a ResourceQuota watch for new quotas
    /// and a timer every `period`.
    pub fn start(self, period: Duration) -> ReconcileHandle {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let handle = ReconcileHandle { tx: tx.clone() };
        for k in &self.kinds {
            tokio::spawn(watch_deletes(k.clone(), tx.clone()));
        }
        tokio::spawn(watch_quotas(self.kube.clone(), tx.clone()));
        let timer = tx.clone();
        tokio::spawn(async move {
            let mut t = tokio::time::interval(period);
            t.tick().await;
            loop {
                t.tick().await;
                if timer.send(Trigger::All).is_err() {
                    return;
                }
            }
        });
        tokio::spawn(async move {
            while let Some(first) = rx.recv().await {
                // Coalesce a burst (a namespace deletion deletes many objects at once).
                tokio::time::sleep(Duration::from_millis(100)).await;
                let mut recount = BTreeSet::new();
                let mut init = BTreeSet::new();
                let mut all = false;
                let mut next = Some(first);
                while let Some(t) = next {
                    match t {
                        Trigger::Namespace(ns) => {
                            recount.insert(ns);
                        }
                        Trigger::Initialize(ns) => {
                            init.insert(ns);
                        }
                        Trigger::All => all = true,
                    }
                    next = rx.try_recv().ok();
                }
                if all {
                    if let Err(e) = self.recount_all().await {
                        tracing::warn!(error = %e, "quota resync");
                    }
                    continue;
                }
                for ns in &recount {
                    if let Err(e) = self.sync_namespace(ns, true).await {
                        tracing::warn!(error = %e, namespace = %ns, "quota recount");
                    }
                }
                for ns in init.difference(&recount) {
                    if let Err(e) = self.sync_namespace(ns, false).await {
                        tracing::warn!(error = %e, namespace = %ns, "quota initialization");
                    }
                }
            }
        });
        handle
    }

    async fn recount_all(&self) -> kube::Result<()> {
        let api: Api<ResourceQuota> = rbac::RESOURCEQUOTAS
            .uses("list")
            .api_all(self.kube.client.clone());
        let mut namespaces = BTreeSet::new();
        for q in api.list(&ListParams::default()).await?.items {
            if names_ours(&q)
                && let Some(ns) = q.metadata.namespace
            {
                namespaces.insert(ns);
            }
        }
        for ns in namespaces {
            self.sync_namespace(&ns, true).await?;
        }
        Ok(())
    }

    async fn count(&self, ns: &str, plural: &str) -> Option<i64> {
        let k = self.kinds.iter().find(|k| k.info().plural == plural)?;
        match k
            .list(Some(ns), &crate::registry::store::ListParams::default())
            .await
        {
            Ok(page) => i64::try_from(page.items.len()).ok(),
            Err(e) => {
                tracing::warn!(error = %e, "counting {plural} in {ns}");
                None
            }
        }
    }

    /// Writes `status.hard`/`status.used` of our resources for the quotas of `ns`; with
    /// `overwrite` false only missing usage is filled in.
    async fn sync_namespace(&self, ns: &str, overwrite: bool) -> kube::Result<()> {
        let api: Api<ResourceQuota> = rbac::RESOURCEQUOTAS
            .uses("list")
            .api_namespaced(self.kube.client.clone(), ns);
        let mut counts: BTreeMap<&str, Option<i64>> = BTreeMap::new();
        for mut q in api.list(&ListParams::default()).await?.items {
            let hard: BTreeMap<String, Quantity> =
                q.spec.as_ref().and_then(|s| s.hard.clone()).unwrap_or_default();
            let before = q.status.clone();
            let status = q.status.get_or_insert_with(ResourceQuotaStatus::default);
            for plural in COUNTED {
                let r = resource_name(plural);
                let Some(limit) = hard.get(&r) else {
                    continue;
                };
                status
                    .hard
                    .get_or_insert_with(BTreeMap::new)
                    .insert(r.clone(), limit.clone());
                let used = status.used.get_or_insert_with(BTreeMap::new);
                if !overwrite && used.contains_key(&r) {
                    continue;
                }
                let n = match counts.get(plural) {
                    Some(n) => *n,
                    None => {
                        let n = self.count(ns, plural).await;
                        counts.insert(plural, n);
                        n
                    }
                };
                if let Some(n) = n {
                    used.insert(r, Quantity(n.to_string()));
                }
            }
            if q.status != before {
                match replace_status(&self.kube.client, ns, &q).await {
                    Ok(()) => {}
                    // Someone else wrote it meanwhile (admission, the controller manager): the
                    // next trigger recounts.
                    Err(kube::Error::Api(s)) if s.code == 409 => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }
}

fn names_ours(q: &ResourceQuota) -> bool {
    q.spec
        .as_ref()
        .and_then(|s| s.hard.as_ref())
        .is_some_and(|h| COUNTED.iter().any(|p| h.contains_key(&resource_name(p))))
}

/// Whether a quota names our resources without usage for all of them.
fn needs_initialization(q: &ResourceQuota) -> bool {
    let Some(hard) = q.spec.as_ref().and_then(|s| s.hard.as_ref()) else {
        return false;
    };
    let status = q.status.as_ref();
    COUNTED.iter().map(|p| resource_name(p)).any(|r| {
        hard.contains_key(&r)
            && (status.and_then(|s| s.hard.as_ref()).and_then(|h| h.get(&r)) != hard.get(&r)
                || status
                    .and_then(|s| s.used.as_ref())
                    .is_none_or(|u| !u.contains_key(&r)))
    })
}

async fn watch_deletes(kind: Arc<dyn Resource>, tx: mpsc::UnboundedSender<Trigger>) {
    loop {
        let mut stream = match kind.watch(None, None).await {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(error = %e, "quota delete watch");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(cozyplane_storage::Event::Delete { key, .. }) => {
                    // …/<plural>/<namespace>/<name>
                    let mut parts = key.rsplit('/');
                    let _name = parts.next();
                    if let Some(ns) = parts.next()
                        && tx.send(Trigger::Namespace(ns.to_string())).is_err()
                    {
                        return;
                    }
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn watch_quotas(kube: KubeConnection, tx: mpsc::UnboundedSender<Trigger>) {
    let mut events = kube.watch_all::<ResourceQuota>(&rbac::RESOURCEQUOTAS, watcher::Config::default());
    while let Some(ev) = events.next().await {
        if let watcher::Event::Apply(q) | watcher::Event::InitApply(q) = ev
            && needs_initialization(&q)
            && let Some(ns) = q.metadata.namespace
            && tx.send(Trigger::Initialize(ns)).is_err()
        {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ResourceQuotaSpec;

    use super::*;

    type Pairs<'a> = &'a [(&'a str, &'a str)];

    fn quota(name: &str, hard: Pairs<'_>, status: Option<(Pairs<'_>, Pairs<'_>)>) -> ResourceQuota {
        let m = |kv: &[(&str, &str)]| -> BTreeMap<String, Quantity> {
            kv.iter()
                .map(|(k, v)| ((*k).to_string(), Quantity((*v).to_string())))
                .collect()
        };
        ResourceQuota {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(ResourceQuotaSpec {
                hard: Some(m(hard)),
                ..Default::default()
            }),
            status: status.map(|(h, u)| ResourceQuotaStatus {
                hard: Some(m(h)),
                used: Some(m(u)),
            }),
        }
    }

    const R: &str = "count/vpcs.sdn.cozystack.io";

    #[test]
    fn under_the_limit_charges_every_covering_quota() {
        let qs = [
            quota("a", &[(R, "2")], Some((&[(R, "2")], &[(R, "1")]))),
            quota("b", &[("pods", "2")], Some((&[("pods", "2")], &[("pods", "1")]))),
            quota("c", &[(R, "5")], Some((&[(R, "5")], &[(R, "0")]))),
        ];
        assert_eq!(evaluate(&qs, R), Ok(vec![(0, 2), (2, 1)]));
    }

    #[test]
    fn over_the_limit_is_refused_with_kubernetes_message() {
        let qs = [quota("q1", &[(R, "2")], Some((&[(R, "2")], &[(R, "2")])))];
        let r = evaluate(&qs, R).unwrap_err();
        assert_eq!(
            r.message(R),
            "exceeded quota: q1, requested: count/vpcs.sdn.cozystack.io=1, used: count/vpcs.sdn.cozystack.io=2, limited: count/vpcs.sdn.cozystack.io=2"
        );
    }

    #[test]
    fn a_quota_without_usage_is_status_unknown() {
        let qs = [quota("q1", &[(R, "2")], None)];
        assert_eq!(
            evaluate(&qs, R).unwrap_err().message(R),
            "status unknown for quota: q1, resources: count/vpcs.sdn.cozystack.io"
        );
        assert!(needs_initialization(&qs[0]));
        assert!(!needs_initialization(&quota(
            "q",
            &[(R, "2")],
            Some((&[(R, "2")], &[(R, "0")]))
        )));
    }

    #[test]
    fn counts_parse() {
        assert_eq!(parse_count("2"), Some(2));
        assert_eq!(parse_count("1k"), Some(1000));
        assert_eq!(parse_count("1Ki"), Some(1024));
        assert_eq!(parse_count("1.5"), None);
        assert_eq!(parse_count("x"), None);
    }
}
