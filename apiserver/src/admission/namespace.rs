//! Namespace lifecycle, as Kubernetes' `NamespaceLifecycle` admission plugin does it for creates:
//!
//! - namespace missing → `404 NotFound`, `namespaces "x" not found`;
//! - namespace terminating (phase `Terminating` or a deletion timestamp) → `403 Forbidden`,
//!   `… is forbidden: unable to create new content in namespace x because it is being terminated`,
//!   with a `NamespaceTerminating` cause.
//!
//! Namespaces are read from a watch-fed cache; a name the cache does not know (created a moment
//! ago, or the watch is behind) is looked up live.

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::watcher;
use serde_json::json;

use crate::errors::{ApiError, Result};
use crate::rbac::server as rbac;
use cozyplane_apis::KindInfo;

/// The namespace cache and its live fallback.
pub struct Lifecycle {
    api: Api<Namespace>,
    cache: reflector::Store<Namespace>,
}

/// `namespaces "<ns>" not found`.
pub fn not_found(ns: &str) -> ApiError {
    ApiError {
        code: 404,
        reason: "NotFound",
        message: format!("namespaces \"{ns}\" not found"),
        details: Some(json!({ "name": ns, "kind": "namespaces" })),
    }
}

/// The Forbidden a create in a terminating namespace gets.
pub fn terminating(info: &KindInfo, ns: &str, name: &str) -> ApiError {
    let mut e = super::forbidden(
        info,
        name,
        &format!("unable to create new content in namespace {ns} because it is being terminated"),
    );
    if let Some(d) = e.details.as_mut() {
        d["causes"] = json!([{
            "reason": "NamespaceTerminating",
            "message": format!("namespace {ns} is being terminated"),
            "field": "metadata.namespace",
        }]);
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
        Self { api, cache }
    }

    /// Admits a create of `info` named `name` in `ns`.
    pub async fn check(&self, info: &KindInfo, ns: &str, name: &str) -> Result<()> {
        let found = match self.cache.get(&ObjectRef::new(ns)) {
            Some(n) => Some((*n).clone()),
            None => match self.api.get_opt(ns).await {
                Ok(n) => n,
                Err(e) => {
                    return Err(ApiError::internal(format!("looking up namespace {ns}: {e}")));
                }
            },
        };
        match found {
            None => Err(not_found(ns)),
            Some(n) if is_terminating(&n) => Err(terminating(info, ns, name)),
            Some(_) => Ok(()),
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
        assert_eq!(e.details.unwrap()["causes"][0]["reason"], "NamespaceTerminating");
    }
}
