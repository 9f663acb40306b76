//! Namespace lifecycle, as Kubernetes' `NamespaceLifecycle` admission plugin does it for creates:
//!
//! - namespace missing → `404 NotFound`, `namespaces "x" not found`;
//! - namespace terminating (phase `Terminating` or a deletion timestamp) → `403 Forbidden`,
//!   `… is forbidden: unable to create new content in namespace x because it is being terminated`,
//!   with a `NamespaceTerminating` cause.
//!
//! One check, two sources of namespaces: the kube-apiserver's (read from a watch-fed cache; a
//! name the cache does not know, created a moment ago or the watch is behind, is looked up
//! live), or, on a standalone server, its own (`crate::registry::namespace`: read from its watch
//! cache the same way, with its store as the fallback). The cache may be a moment behind a
//! namespace that just began terminating, as Kubernetes' informer-fed plugin is; the namespace
//! controller deletes what such a create slips in. Reading the store on every create cost one
//! etcd range per create, a second etcd request beside the create's own transaction.

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::watcher;

use std::sync::Arc;

use crate::errors::{ApiError, Reason, Result, StatusDetails, cause};
use crate::rbac::server as rbac;
use crate::registry::Resource;
use crate::registry::cache::WatchCache;
use cozyplane_apis::KindInfo;

/// Where namespaces are looked up.
enum Source {
    /// The kube-apiserver: a watch-fed cache and its live fallback.
    Kube {
        api: Box<Api<Namespace>>,
        cache: reflector::Store<Namespace>,
    },
    /// This server's own `namespaces` (standalone): its watch cache, when the server has one,
    /// and the store.
    Local(Arc<dyn Resource>, Option<Arc<WatchCache>>),
}

/// The namespace lifecycle check and its source of namespaces.
pub struct Lifecycle {
    source: Source,
}

/// `namespaces "<ns>" not found`.
pub fn not_found(ns: &str) -> ApiError {
    ApiError::new(404, Reason::NotFound, format!("namespaces \"{ns}\" not found")).with_details(
        StatusDetails {
            name: Some(ns.to_string()),
            kind: Some("namespaces".into()),
            ..StatusDetails::default()
        },
    )
}

/// The Forbidden a create in a terminating namespace gets.
pub fn terminating(info: &KindInfo, ns: &str, name: &str) -> ApiError {
    let mut e = super::forbidden(
        info,
        name,
        &format!("unable to create new content in namespace {ns} because it is being terminated"),
    );
    if let Some(d) = e.details.as_mut() {
        d.causes = Some(vec![cause(
            "NamespaceTerminating",
            format!("namespace {ns} is being terminated"),
            Some("metadata.namespace"),
        )]);
    }
    e
}

fn is_terminating(ns: &Namespace) -> bool {
    ns.metadata.deletion_timestamp.is_some()
        || ns
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|p| p == "Terminating")
}

impl Lifecycle {
    /// Starts the namespace informer of `kube`.
    pub fn start(kube: &crate::informer::KubeConnection) -> Self {
        let api: Api<Namespace> = rbac::NAMESPACES.uses("get").api_all(kube.client.clone());
        let (cache, mut writer) = reflector::store();
        let mut events = kube.watch_all::<Namespace>(&rbac::NAMESPACES, watcher::Config::default());
        tokio::spawn(async move {
            while let Some(ev) = events.next().await {
                writer.apply_watcher_event(&ev);
            }
        });
        Self {
            source: Source::Kube {
                api: Box::new(api),
                cache,
            },
        }
    }

    /// Checks against this server's own `namespaces` resource (standalone), through `cache`
    /// (the resource's watch cache) when given.
    pub fn local(namespaces: Arc<dyn Resource>, cache: Option<Arc<WatchCache>>) -> Self {
        Self {
            source: Source::Local(namespaces, cache),
        }
    }

    /// `None` if `ns` does not exist, else whether it is terminating.
    async fn lookup(&self, ns: &str) -> Result<Option<bool>> {
        match &self.source {
            Source::Kube { api, cache } => {
                let found = match cache.get(&ObjectRef::new(ns)) {
                    Some(n) => Some((*n).clone()),
                    None => api
                        .get_opt(ns)
                        .await
                        .map_err(|e| ApiError::internal(format!("looking up namespace {ns}: {e}")))?,
                };
                Ok(found.as_ref().map(is_terminating))
            }
            Source::Local(r, cache) => {
                if let Some(v) = cache.as_ref().and_then(|c| c.object(None, ns)) {
                    return Ok(Some(crate::registry::namespace::is_terminating(&v.value()?)));
                }
                // Unknown to the cache: a namespace created a moment ago is seen in the store.
                Self::local_stored(&**r, ns).await
            }
        }
    }

    async fn local_stored(r: &dyn Resource, ns: &str) -> Result<Option<bool>> {
        match r.get(None, ns).await {
            Ok(v) => Ok(Some(crate::registry::namespace::is_terminating(&v))),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Admits a create of `info` named `name` in `ns`.
    pub async fn check(&self, info: &KindInfo, ns: &str, name: &str) -> Result<()> {
        match self.lookup(ns).await? {
            None => Err(not_found(ns)),
            Some(true) => Err(terminating(info, ns, name)),
            Some(false) => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages() {
        assert_eq!(not_found("x").message, "namespaces \"x\" not found");
        let info = <cozyplane_apis::v1alpha1::VPC as cozyplane_apis::ApiKind>::INFO;
        let e = terminating(&info, "t1", "v1");
        assert_eq!(
            e.message,
            "vpcs.sdn.cozystack.io \"v1\" is forbidden: unable to create new content in namespace t1 because it is being terminated"
        );
        assert_eq!(e.causes()[0].reason.as_deref(), Some("NamespaceTerminating"));
    }
}
