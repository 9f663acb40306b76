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
//! The store calls [`admit_namespace`], [`admit_create`] and [`admit_update`]. They find the
//! request's user and the server's [`Admission`] in a task-local [`RequestContext`] that the
//! HTTP layer sets around each request ([`scope`], installed by the server as a middleware after
//! authentication). Writes without a context — the server's own controllers writing through the
//! store — are not admitted: they act as the server itself.
//!
//! Without a kube connection (standalone mode without `--kubeconfig`) the server serves its own
//! namespaces and namespace lifecycle checks those; quota is off; the virtual verbs are still decided by the configured authorizer (AlwaysAllow
//! in plain standalone mode).

use std::future::Future;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use cozyplane_apis::KindInfo;
use cozyplane_authz::{Authorizer, AuthorizerExt, Decision, UserInfo};

use crate::errors::{ApiError, Reason, Result};

pub mod namespace;
pub mod quota;

/// A virtual-verb check a strategy asks for: may the requesting user `verb` the `resource` of
/// `sdn.cozystack.io` named `name` in `namespace`?
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerbCheck {
    /// The verb, e.g. `export`.
    pub verb: &'static str,
    /// The resource, e.g. `vpcs`.
    pub resource: &'static str,
    /// Namespace of the checked object.
    pub namespace: String,
    /// Name of the checked object.
    pub name: String,
}

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
    /// (standalone without a kube-apiserver).
    pub fn with_local_namespaces(mut self, namespaces: Arc<dyn crate::registry::Resource>) -> Self {
        self.namespaces = Some(namespace::Lifecycle::local(namespaces));
        self
    }

    /// Whether namespace lifecycle and quota admission are on.
    pub fn has_kube(&self) -> bool {
        self.quota.is_some()
    }
}

/// What admission knows about the request being served.
#[derive(Clone)]
pub struct RequestContext {
    /// The authenticated user.
    pub user: UserInfo,
    /// The server's admission.
    pub admission: Arc<Admission>,
}

tokio::task_local! {
    static REQUEST: RequestContext;
}

/// Runs `f` with `user` as the requesting user of every store write it makes.
pub async fn with_user<F: Future>(admission: Arc<Admission>, user: UserInfo, f: F) -> F::Output {
    REQUEST.scope(RequestContext { user, admission }, f).await
}

/// Axum middleware: scopes each request that carries a [`UserInfo`] (inserted by the
/// authentication layer) so that the store's admission hooks see its user.
pub async fn scope(State(admission): State<Arc<Admission>>, req: Request, next: Next) -> Response {
    match req.extensions().get::<UserInfo>().cloned() {
        Some(user) => with_user(admission, user, next.run(req)).await,
        None => next.run(req).await,
    }
}

fn current() -> Option<RequestContext> {
    REQUEST.try_with(Clone::clone).ok()
}

fn group_resource(info: &KindInfo) -> String {
    if info.group.is_empty() {
        info.plural.to_string()
    } else {
        format!("{}.{}", info.plural, info.group)
    }
}

/// A Kubernetes `Forbidden` for an object of `info` named `name` (empty: the collection).
pub fn forbidden(info: &KindInfo, name: &str, why: &str) -> ApiError {
    let message = if name.is_empty() {
        format!("{} is forbidden: {why}", group_resource(info))
    } else {
        format!("{} \"{name}\" is forbidden: {why}", group_resource(info))
    };
    ApiError::new(403, Reason::Forbidden, message).with_details(crate::errors::details(info, name))
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

async fn run_checks(ctx: &RequestContext, info: &KindInfo, name: &str, checks: &[VerbCheck]) -> Result<()> {
    for c in checks {
        let decision = ctx
            .admission
            .authorizer
            .check(
                &ctx.user,
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
                let mut why = cannot(&ctx.user.name, c);
                if !reason.is_empty() {
                    why = format!("{why}: {reason}");
                }
                return Err(forbidden(info, name, &why));
            }
            Err(e) => {
                // Fail closed: no decision is a refusal.
                tracing::warn!(error = %e, verb = c.verb, "virtual verb check failed");
                let why = format!(
                    "{}: the authorizer could not be reached",
                    cannot(&ctx.user.name, c)
                );
                return Err(forbidden(info, name, &why));
            }
        }
    }
    Ok(())
}

/// Namespace lifecycle for a create in `ns` (namespaced kinds only): refuses a missing or
/// terminating namespace as Kubernetes' NamespaceLifecycle plugin does.
pub async fn admit_namespace(info: &KindInfo, ns: Option<&str>, name: &str) -> Result<()> {
    let (Some(ctx), Some(ns)) = (current(), ns) else {
        return Ok(());
    };
    if !info.namespaced || ns.is_empty() {
        return Ok(());
    }
    match &ctx.admission.namespaces {
        Some(l) => l.check(info, ns, name).await,
        None => Ok(()),
    }
}

/// Validating admission of a create: the strategy's virtual verbs, then quota (charged unless
/// `dry_run`). `name` is the object's name (the generateName prefix for generated names).
pub async fn admit_create(
    info: &KindInfo,
    ns: Option<&str>,
    name: &str,
    checks: &[VerbCheck],
    dry_run: bool,
) -> Result<()> {
    let Some(ctx) = current() else {
        return Ok(());
    };
    run_checks(&ctx, info, name, checks).await?;
    if let (Some(q), Some(ns)) = (&ctx.admission.quota, ns)
        && info.namespaced
    {
        q.charge(info, ns, name, dry_run).await?;
    }
    Ok(())
}

/// Validating admission of an update: the strategy's virtual verbs.
pub async fn admit_update(info: &KindInfo, name: &str, checks: &[VerbCheck]) -> Result<()> {
    let Some(ctx) = current() else {
        return Ok(());
    };
    run_checks(&ctx, info, name, checks).await
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
    async fn writes_without_a_request_context_are_not_admitted() {
        let info = <cozyplane_apis::v1alpha1::VPCBinding as cozyplane_apis::ApiKind>::INFO;
        let c = VerbCheck {
            verb: "export",
            resource: "vpcs",
            namespace: "t2".into(),
            name: "v".into(),
        };
        assert!(admit_create(&info, Some("t1"), "b", &[c], false).await.is_ok());
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
        let adm = Arc::new(Admission::new(Arc::new(Deny)));
        let r = with_user(adm, UserInfo::new("bob", ["g"]), async {
            admit_create(&info, Some("t1"), "p", &[c], false).await
        })
        .await;
        let e = r.unwrap_err();
        assert_eq!(
            e.message,
            "vpcpeerings.sdn.cozystack.io \"p\" is forbidden: User \"bob\" cannot peer resource \"vpcs\" in API group \"sdn.cozystack.io\" in the namespace \"t1\""
        );
    }
}
