//! Admission: the checks a write passes after authorization and before it is stored.
//!
//! Kubernetes runs admission plugins between the REST handler and the registry; requests to an
//! aggregated server never pass kube-apiserver's admission, so this server runs its own:
//!
//! | check | when | needs |
//! |---|---|---|
//! | virtual verbs ([`VerbCheck`]: `export`, `peer` on `vpcs`) | create / update, from the kind's strategy | the request's authorizer |
//! | namespace lifecycle ([`namespace`]) | create of a namespaced kind | a kube connection, or the server's own namespaces (standalone) |
//! | ResourceQuota `count/<plural>.sdn.cozystack.io` ([`quota`]) | create of a counted kind | a kube connection |
//!
//! [`Admission`] implements the store's [`Admit`] hook. The HTTP layer attaches it to each
//! authenticated request as a [`Requester::Client`] ([`scope`], a middleware after
//! authentication); the handlers pass that requester explicitly with every write, and a write
//! request without one is refused (500), never admitted by default. The server's own writes
//! (controllers, start-up) say [`Requester::Server`] in their options.
//!
//! Without a kube connection (standalone mode without `--kubeconfig`) the server serves its own
//! namespaces and namespace lifecycle checks those; quota is off; the virtual verbs are still decided by the configured authorizer (AlwaysAllow
//! in plain standalone mode).

use std::sync::Arc;

use async_trait::async_trait;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use cozyplane_apis::KindInfo;
use cozyplane_authz::{Authorizer, AuthorizerExt, Decision, UserInfo};

use crate::errors::{ApiError, Result};
use crate::registry::hooks::{Admit, Requester};

pub mod namespace;
pub mod quota;

pub use crate::registry::hooks::VerbCheck;

/// The server-wide admission configuration.
pub struct Admission {
    authorizer: Arc<dyn Authorizer>,
    namespaces: Option<namespace::Lifecycle>,
    quota: Option<quota::Quota>,
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admission")
            .field("namespaces", &self.namespaces.is_some())
            .field("quota", &self.quota.is_some())
            .finish_non_exhaustive()
    }
}

impl Admission {
    /// Virtual verbs decided by `authorizer`; namespace lifecycle and quota off.
    pub fn new(authorizer: Arc<dyn Authorizer>) -> Self {
        Self {
            authorizer,
            namespaces: None,
            quota: None,
        }
    }

    /// Turns on namespace lifecycle and ResourceQuota admission against the kube-apiserver of
    /// `kube` (starts the namespace informer, so this needs a Tokio runtime).
    pub fn with_kube(mut self, kube: &crate::informer::KubeConnection) -> Self {
        self.namespaces = Some(namespace::Lifecycle::start(kube));
        self.quota = Some(quota::Quota::new(kube.client.clone()));
        self
    }

    /// Turns on namespace lifecycle admission against this server's own `namespaces`
    /// (standalone without a kube-apiserver), read through their watch `cache` when given.
    pub fn with_local_namespaces(
        mut self,
        namespaces: Arc<dyn crate::registry::Resource>,
        cache: Option<Arc<crate::registry::cache::WatchCache>>,
    ) -> Self {
        self.namespaces = Some(namespace::Lifecycle::local(namespaces, cache));
        self
    }

    /// Whether namespace lifecycle and quota admission are on.
    pub fn has_kube(&self) -> bool {
        self.quota.is_some()
    }
}

/// Axum middleware: gives each request that carries a [`UserInfo`] (inserted by the
/// authentication layer) its [`Requester`], which the handlers pass to the store.
pub async fn scope(State(admission): State<Arc<Admission>>, mut req: Request, next: Next) -> Response {
    if let Some(user) = req.extensions().get::<UserInfo>().cloned() {
        let requester = Requester::Client { user, admission };
        req.extensions_mut().insert(requester);
    }
    next.run(req).await
}

/// A Kubernetes `Forbidden` for an object of `info` named `name` (empty: the collection).
pub fn forbidden(info: &KindInfo, name: &str, why: &str) -> ApiError {
    ApiError::forbidden(info, name, why)
}

/// `User "alice" cannot export resource "vpcs" in API group "sdn.cozystack.io" in the namespace "t2"`.
pub fn cannot(user: &str, check: &VerbCheck) -> String {
    let scope = if check.namespace.is_empty() {
        "at the cluster scope".to_string()
    } else {
        format!("in the namespace \"{}\"", check.namespace)
    };
    format!(
        "User \"{user}\" cannot {} resource \"{}\" in API group \"{}\" {scope}",
        check.verb,
        check.resource,
        cozyplane_apis::GROUP
    )
}

async fn run_checks(
    adm: &Admission,
    user: &UserInfo,
    info: &KindInfo,
    name: &str,
    checks: &[VerbCheck],
) -> Result<()> {
    for c in checks {
        let decision = adm
            .authorizer
            .check(
                user,
                c.verb,
                cozyplane_apis::GROUP,
                c.resource,
                &c.namespace,
                &c.name,
            )
            .await;
        match decision {
            Ok(Decision::Allow) => {}
            Ok(Decision::Deny { reason }) => {
                let mut why = cannot(&user.name, c);
                if !reason.is_empty() {
                    why = format!("{why}: {reason}");
                }
                return Err(forbidden(info, name, &why));
            }
            Err(e) => {
                // Fail closed: no decision is a refusal.
                tracing::warn!(error = %e, verb = c.verb, "virtual verb check failed");
                let why = format!("{}: the authorizer could not be reached", cannot(&user.name, c));
                return Err(forbidden(info, name, &why));
            }
        }
    }
    Ok(())
}

#[async_trait]
impl Admit for Admission {
    /// Refuses a missing or terminating namespace as Kubernetes' NamespaceLifecycle plugin does.
    async fn namespace(&self, _user: &UserInfo, info: &KindInfo, ns: &str, name: &str) -> Result<()> {
        match &self.namespaces {
            Some(l) => l.check(info, ns, name).await,
            None => Ok(()),
        }
    }

    async fn create(
        &self,
        user: &UserInfo,
        info: &KindInfo,
        ns: Option<&str>,
        name: &str,
        checks: &[VerbCheck],
        dry_run: bool,
    ) -> Result<()> {
        run_checks(self, user, info, name, checks).await?;
        if let (Some(q), Some(ns)) = (&self.quota, ns)
            && info.namespaced
        {
            q.charge(info, ns, name, dry_run).await?;
        }
        Ok(())
    }

    async fn update(&self, user: &UserInfo, info: &KindInfo, name: &str, checks: &[VerbCheck]) -> Result<()> {
        run_checks(self, user, info, name, checks).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forbidden_messages_match_kubernetes() {
        let info = <cozyplane_apis::v1alpha1::VPCBinding as cozyplane_apis::ApiKind>::INFO;
        let c = VerbCheck {
            verb: "export",
            resource: "vpcs",
            namespace: "t2".into(),
            name: "v".into(),
        };
        let e = forbidden(&info, "b1", &cannot("alice", &c));
        assert_eq!(
            e.message,
            "vpcbindings.sdn.cozystack.io \"b1\" is forbidden: User \"alice\" cannot export resource \"vpcs\" in API group \"sdn.cozystack.io\" in the namespace \"t2\""
        );
        assert_eq!(e.code, 403);
        assert_eq!(e.details.unwrap().kind.as_deref(), Some("vpcbindings"));
    }

    #[tokio::test]
    async fn the_servers_own_writes_are_not_admitted_and_clients_are() {
        let info = <cozyplane_apis::v1alpha1::VPCBinding as cozyplane_apis::ApiKind>::INFO;
        let c = VerbCheck {
            verb: "export",
            resource: "vpcs",
            namespace: "t2".into(),
            name: "v".into(),
        };
        let server = Requester::Server;
        assert!(
            server
                .admit_create(&info, Some("t1"), "b", std::slice::from_ref(&c), false)
                .await
                .is_ok()
        );
        let client = Requester::Client {
            user: UserInfo::new("bob", ["g"]),
            admission: Arc::new(Admission::new(Arc::new(Deny))),
        };
        assert_eq!(
            client
                .admit_create(&info, Some("t1"), "b", &[c], false)
                .await
                .unwrap_err()
                .code,
            403
        );
    }

    #[derive(Debug)]
    struct Deny;
    #[async_trait::async_trait]
    impl Authorizer for Deny {
        async fn authorize(
            &self,
            _: &UserInfo,
            _: &cozyplane_authz::Attributes,
        ) -> cozyplane_authz::Result<Decision> {
            Ok(Decision::Deny {
                reason: String::new(),
            })
        }
    }

    #[tokio::test]
    async fn a_denied_virtual_verb_is_forbidden() {
        let info = <cozyplane_apis::v1alpha1::VPCPeering as cozyplane_apis::ApiKind>::INFO;
        let c = VerbCheck {
            verb: "peer",
            resource: "vpcs",
            namespace: "t1".into(),
            name: "v".into(),
        };
        let adm = Admission::new(Arc::new(Deny));
        let e = adm
            .create(&UserInfo::new("bob", ["g"]), &info, Some("t1"), "p", &[c], false)
            .await
            .unwrap_err();
        assert_eq!(
            e.message,
            "vpcpeerings.sdn.cozystack.io \"p\" is forbidden: User \"bob\" cannot peer resource \"vpcs\" in API group \"sdn.cozystack.io\" in the namespace \"t1\""
        );
    }
}
