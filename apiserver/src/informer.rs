//! The server's watches of the kube-apiserver ("informers": Nodes, Pods, Namespaces,
//! ResourceQuotas, and `cozyplane-authz`'s watch of the `extension-apiserver-authentication`
//! ConfigMap), with the failure handling of Kubernetes' reflectors and a visible state.
//!
//! * **Access**: an informer is started from a row of the RBAC table ([`crate::rbac::server`]),
//!   so what it lists and watches is what the chart's ClusterRole grants.
//! * **Backoff**: a failed list or watch (403 Forbidden, a connection refused, an error event)
//!   is retried after an exponentially growing, jittered delay: 800 ms doubling to a cap of
//!   30 s, as client-go's reflector does. The delay is not reset by the retry's own first steps
//!   (kube-runtime's `StreamBackoff` resets on every `Ok`, and its watcher emits one before each
//!   re-list, so a 403 would be retried every 800 ms for ever); it starts over only when no
//!   failure happened for 2 minutes (kube-runtime's `DefaultBackoff` reset timer).
//! * **No read timeout**: the watches carry `timeoutSeconds` (290, closed by the kube-apiserver)
//!   and kube-runtime's idle timeout, so they run on a client without a read timeout
//!   ([`crate::options::KubeClients::watches`]); plain requests keep theirs.
//! * **State**: each informer is `syncing` until its first list completes, then `synced`, and
//!   `failing` with the last error while its list or watch fails. `/readyz` has one check per
//!   informer, `informer-<resource>`, that passes only while it is synced: every informer is
//!   required (namespace lifecycle and quota admission answer from these caches, Port GC and
//!   SecurityGroup membership stop without theirs), so a server that cannot read what it needs —
//!   a missing RBAC grant most often — is not ready and says why in `/readyz?verbose`.
//! * **Metrics**: `cozyplane_kube_watch_failures_total{resource}` counts failed lists and
//!   watches; `cozyplane_kube_informer_healthy{resource}` is 1 while synced, else 0.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use kube::runtime::watcher::{self, DefaultBackoff};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::rbac::Access;

/// The server's connection to the kube-apiserver: one client per kind of use, and the
/// informers' states.
#[derive(Clone)]
pub struct KubeConnection {
    /// For plain requests (GET, LIST, PUT, PATCH, reviews): it has a read timeout.
    pub client: kube::Client,
    /// For watches: no read timeout (a watch is quiet for minutes; it carries
    /// `timeoutSeconds` instead, and kube-runtime's watcher an idle timeout).
    pub watch_client: kube::Client,
    /// Where the informers record their state.
    pub informers: Arc<Informers>,
}

impl std::fmt::Debug for KubeConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeConnection").finish_non_exhaustive()
    }
}

impl KubeConnection {
    /// Starts an informer of `access` on the watch client; see [`Informers::watch_all`].
    pub fn watch_all<K>(
        &self,
        access: &'static Access,
        config: watcher::Config,
    ) -> BoxStream<'static, watcher::Event<K>>
    where
        K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + Send + 'static,
        K: k8s_openapi::serde::de::DeserializeOwned,
    {
        self.informers
            .watch_all(access, self.watch_client.clone(), config)
    }
}

/// `cozyplane-authz` reports its `extension-apiserver-authentication` ConfigMap watch here
/// (check `informer-configmaps`).
impl cozyplane_authz::WatchHealth for Informers {
    fn started(&self, resource: &'static str) {
        self.set(resource, State::Syncing);
    }

    fn synced(&self, resource: &'static str) {
        self.set(resource, State::Synced);
    }

    fn failed(&self, resource: &'static str, error: String) {
        self.failures.get_or_create(&label(resource)).inc();
        self.set(resource, State::Failing(error));
    }
}

/// `timeoutSeconds` of the informers' watches (client-go picks 5–10 min; kube-runtime's idle
/// timeout assumes at most 290).
pub const WATCH_TIMEOUT_SECS: u32 = 290;

/// Where one informer stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    /// Its first list has not completed yet.
    Syncing,
    /// Listed and watching.
    Synced,
    /// Its last list or watch failed with this error; it is retrying with backoff.
    Failing(String),
}

/// Labels of the informer metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabel {
    /// The watched resource (plural).
    pub resource: String,
}

/// Every informer of the server: their states and metrics.
#[derive(Debug, Default)]
pub struct Informers {
    states: Mutex<BTreeMap<&'static str, State>>,
    failures: Family<ResourceLabel, Counter>,
    healthy: Family<ResourceLabel, Gauge>,
}

fn label(resource: &str) -> ResourceLabel {
    ResourceLabel {
        resource: resource.to_string(),
    }
}

/// The kube-apiserver's message for an API error, else the error with its sources.
fn describe(e: &watcher::Error) -> String {
    use watcher::Error as W;
    match e {
        W::InitialListFailed(kube::Error::Api(s))
        | W::WatchStartFailed(kube::Error::Api(s))
        | W::WatchFailed(kube::Error::Api(s))
        | W::WatchError(s) => format!("{} ({} {})", s.message, s.code, s.reason),
        other => {
            let mut text = other.to_string();
            let mut source = std::error::Error::source(other);
            while let Some(s) = source {
                let more = s.to_string();
                if !text.contains(&more) {
                    text = format!("{text}: {more}");
                }
                source = s.source();
            }
            text
        }
    }
}

impl Informers {
    /// Registers the metrics in `registry`.
    pub fn register_metrics(&self, registry: &mut Registry) {
        registry.register(
            "cozyplane_kube_watch_failures",
            "Failed lists and watches of the kube-apiserver, by resource",
            self.failures.clone(),
        );
        registry.register(
            "cozyplane_kube_informer_healthy",
            "1 while the informer of a kube resource is listed and watching, else 0",
            self.healthy.clone(),
        );
    }

    fn set(&self, resource: &'static str, state: State) {
        self.healthy
            .get_or_create(&label(resource))
            .set(i64::from(state == State::Synced));
        self.states
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(resource, state);
    }

    /// The state of the informer of `resource`, if one was started.
    pub fn state(&self, resource: &str) -> Option<State> {
        self.states
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(resource)
            .cloned()
    }

    /// The `/readyz` checks: `informer-<resource>` and, when it does not pass, why.
    pub fn checks(&self) -> Vec<(String, Result<(), String>)> {
        self.states
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|(r, s)| {
                let verdict = match s {
                    State::Synced => Ok(()),
                    State::Syncing => Err("not synced yet".to_string()),
                    State::Failing(e) => Err(e.clone()),
                };
                (format!("informer-{r}"), verdict)
            })
            .collect()
    }

    /// Lists and watches every object of `access`'s resource through `client` (which should
    /// have no read timeout), for ever: failures are recorded and retried with backoff (see
    /// the module docs), so the stream yields only events. `config` is the watcher's (selectors);
    /// its watch timeout is set here.
    pub fn watch_all<K>(
        self: &Arc<Self>,
        access: &'static Access,
        client: kube::Client,
        config: watcher::Config,
    ) -> BoxStream<'static, watcher::Event<K>>
    where
        K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + Send + 'static,
        K: k8s_openapi::serde::de::DeserializeOwned,
    {
        let api = access.uses("list").uses("watch").api_all::<K>(client);
        let resource = access.resource;
        self.set(resource, State::Syncing);
        let inner = watcher::watcher(api, config.timeout(WATCH_TIMEOUT_SECS)).boxed();
        let me = self.clone();
        futures::stream::unfold(
            (inner, DefaultBackoff::default(), me),
            move |(mut inner, mut backoff, me)| async move {
                loop {
                    match inner.next().await? {
                        Ok(ev) => {
                            if matches!(ev, watcher::Event::InitDone) {
                                if me.state(resource) != Some(State::Synced) {
                                    tracing::info!(resource, "informer synced");
                                }
                                me.set(resource, State::Synced);
                            }
                            return Some((ev, (inner, backoff, me)));
                        }
                        Err(e) => {
                            let why = describe(&e);
                            cozyplane_authz::WatchHealth::failed(&*me, resource, why.clone());
                            let delay = backoff.next().unwrap_or(Duration::from_secs(30));
                            tracing::warn!(resource, error = %why, retry_in = ?delay, "listing/watching the kube-apiserver failed");
                            tokio::time::sleep(delay).await;
                        }
                    }
                }
            },
        )
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_pass_only_when_synced() {
        let i = Informers::default();
        i.set("nodes", State::Syncing);
        i.set("pods", State::Synced);
        i.set(
            "namespaces",
            State::Failing("namespaces is forbidden (403 Forbidden)".into()),
        );
        let checks = i.checks();
        assert_eq!(
            checks,
            vec![
                (
                    "informer-namespaces".to_string(),
                    Err("namespaces is forbidden (403 Forbidden)".to_string())
                ),
                ("informer-nodes".to_string(), Err("not synced yet".to_string())),
                ("informer-pods".to_string(), Ok(())),
            ]
        );
        let mut r = Registry::default();
        i.register_metrics(&mut r);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &r).expect("encode");
        assert!(
            text.contains("cozyplane_kube_informer_healthy{resource=\"pods\"} 1"),
            "{text}"
        );
        assert!(text.contains("cozyplane_kube_informer_healthy{resource=\"nodes\"} 0"));
    }

    #[tokio::test]
    async fn the_backoff_grows_to_its_cap_without_a_reset() {
        let mut b = DefaultBackoff::default();
        let delays: Vec<Duration> = (0..10).map(|_| b.next().expect("never gives up")).collect();
        assert!(delays[0] < Duration::from_secs(2), "{delays:?}");
        assert!(delays[4] > delays[0] * 4, "{delays:?}");
        assert!(delays.iter().all(|d| *d <= Duration::from_secs(60)), "{delays:?}");
    }
}
