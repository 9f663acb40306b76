//! The authorization layer: may this user do this?
//!
//! Decisions come from an [`Authorizer`]. The production one, [`SubjectAccessReviewAuthorizer`],
//! asks the kube-apiserver with a SubjectAccessReview and caches the answer;
//! [`DelegatingAuthorizer`] puts Kubernetes' shortcuts in front of it (always-allow paths,
//! `system:masters`).
//!
//! The layer fails closed: a denial is `403 Forbidden` worded exactly like Kubernetes; an
//! authorizer that cannot answer (kube-apiserver unreachable, timeout, contradictory review)
//! yields `503 ServiceUnavailable` with `retryAfterSeconds: 1`. Kubernetes answers `500
//! InternalError` there; we choose 503 because the condition is transient and clients retry it,
//! and because the real error belongs in our log, not in the response. Neither is ever a 2xx.

use std::{
    fmt,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use async_trait::async_trait;
use bytes::Bytes;
use futures::future::BoxFuture;
use http::{Request, Response};
use k8s_openapi::api::authorization::v1 as authorization;
use kube::{Api, Client, api::PostParams};
use tower::{Layer, Service};

use crate::{
    attributes::{Attributes, RequestInfo, ResourceAttributes},
    cache::TtlCache,
    error::{Error, Result},
    paths::AlwaysAllowPaths,
    status,
    user::{MASTERS_GROUP, UserInfo},
};

/// Kubernetes' default for `--authorization-webhook-cache-authorized-ttl` (delegated servers).
pub const DEFAULT_AUTHORIZED_TTL: Duration = Duration::from_secs(10);
/// Kubernetes' default for `--authorization-webhook-cache-unauthorized-ttl` (delegated servers).
pub const DEFAULT_UNAUTHORIZED_TTL: Duration = Duration::from_secs(10);
/// How long one SubjectAccessReview may take.
pub(crate) const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);

/// An authorization decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The action is allowed.
    Allow,
    /// The action is not allowed (denied, or nobody had an opinion).
    Deny {
        /// Why, as the authorizer put it; may be empty. Appended to the Forbidden message.
        reason: String,
    },
}

impl Decision {
    /// Whether this is [`Decision::Allow`].
    pub fn is_allowed(&self) -> bool {
        matches!(self, Decision::Allow)
    }
}

/// Decides whether a user may perform an action.
///
/// An `Err` means no decision could be made; callers must treat it as "not allowed".
#[async_trait]
pub trait Authorizer: Send + Sync + 'static {
    /// Decides about `attributes` done by `user`.
    async fn authorize(&self, user: &UserInfo, attributes: &Attributes) -> Result<Decision>;
}

/// Convenience calls on any [`Authorizer`], e.g. for virtual verbs a handler checks itself.
#[async_trait]
pub trait AuthorizerExt: Authorizer {
    /// Whether `user` may `verb` the `resource` of `group`, in `namespace` (empty for cluster
    /// scope), named `name` (empty for collections).
    async fn check(
        &self,
        user: &UserInfo,
        verb: &str,
        group: &str,
        resource: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Decision> {
        let attributes = Attributes::Resource(ResourceAttributes {
            verb: verb.to_owned(),
            group: group.to_owned(),
            version: String::new(),
            resource: resource.to_owned(),
            subresource: String::new(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        });
        self.authorize(user, &attributes).await
    }
}

impl<A: Authorizer + ?Sized> AuthorizerExt for A {}

/// Allows everything. For tests and local development only.
#[derive(Clone, Copy, Debug, Default)]
pub struct AlwaysAllow;

#[async_trait]
impl Authorizer for AlwaysAllow {
    async fn authorize(&self, _: &UserInfo, _: &Attributes) -> Result<Decision> {
        Ok(Decision::Allow)
    }
}

/// Kubernetes' shortcuts in front of another authorizer: always-allow paths (non-resource
/// requests only) and always-allow groups (`system:masters`) are allowed without asking it.
pub struct DelegatingAuthorizer {
    paths: AlwaysAllowPaths,
    groups: Vec<String>,
    inner: Arc<dyn Authorizer>,
}

impl fmt::Debug for DelegatingAuthorizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DelegatingAuthorizer")
            .field("paths", &self.paths)
            .field("groups", &self.groups)
            .finish()
    }
}

impl DelegatingAuthorizer {
    /// Allows `paths` and members of `system:masters`, asks `inner` about the rest.
    pub fn new(paths: AlwaysAllowPaths, inner: Arc<dyn Authorizer>) -> Self {
        Self {
            paths,
            groups: vec![MASTERS_GROUP.to_owned()],
            inner,
        }
    }

    /// Replaces the always-allowed groups.
    pub fn always_allow_groups(mut self, groups: Vec<String>) -> Self {
        self.groups = groups;
        self
    }
}

#[async_trait]
impl Authorizer for DelegatingAuthorizer {
    async fn authorize(&self, user: &UserInfo, attributes: &Attributes) -> Result<Decision> {
        if let Attributes::NonResource(n) = attributes
            && self.paths.matches(&n.path)
        {
            return Ok(Decision::Allow);
        }
        if self.groups.iter().any(|g| user.in_group(g)) {
            return Ok(Decision::Allow);
        }
        self.inner.authorize(user, attributes).await
    }
}

/// Asks the kube-apiserver with a SubjectAccessReview, caching decisions (errors are not cached).
pub struct SubjectAccessReviewAuthorizer {
    client: Client,
    authorized_ttl: Duration,
    unauthorized_ttl: Duration,
    cache: TtlCache<String, Decision>,
}

impl fmt::Debug for SubjectAccessReviewAuthorizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SubjectAccessReviewAuthorizer")
            .field("authorized_ttl", &self.authorized_ttl)
            .field("unauthorized_ttl", &self.unauthorized_ttl)
            .finish_non_exhaustive()
    }
}

impl SubjectAccessReviewAuthorizer {
    /// Reviews through `client` with the default cache TTLs.
    pub fn new(client: Client) -> Self {
        Self {
            client,
            authorized_ttl: DEFAULT_AUTHORIZED_TTL,
            unauthorized_ttl: DEFAULT_UNAUTHORIZED_TTL,
            cache: TtlCache::new(),
        }
    }

    /// How long an allow is remembered.
    pub fn authorized_ttl(mut self, ttl: Duration) -> Self {
        self.authorized_ttl = ttl;
        self
    }

    /// How long a deny is remembered.
    pub fn unauthorized_ttl(mut self, ttl: Duration) -> Self {
        self.unauthorized_ttl = ttl;
        self
    }

    async fn review(&self, spec: authorization::SubjectAccessReviewSpec) -> Result<Decision> {
        let review = authorization::SubjectAccessReview {
            spec,
            ..Default::default()
        };
        let api: Api<authorization::SubjectAccessReview> = Api::all(self.client.clone());
        let response = tokio::time::timeout(REVIEW_TIMEOUT, api.create(&PostParams::default(), &review))
            .await
            .map_err(|_| Error::ReviewTimeout {
                review: "SubjectAccessReview",
                seconds: REVIEW_TIMEOUT.as_secs(),
            })?
            .map_err(Error::SubjectAccessReview)?;
        let status = response.status.unwrap_or_default();
        let reason = status.reason.unwrap_or_default();
        match (status.allowed, status.denied.unwrap_or(false)) {
            (true, true) => Err(Error::ContradictoryReview),
            (true, false) => Ok(Decision::Allow),
            (false, _) => Ok(Decision::Deny { reason }),
        }
    }
}

/// The SubjectAccessReview spec asking whether `user` may do `attributes`.
pub fn subject_access_review_spec(
    user: &UserInfo,
    attributes: &Attributes,
) -> authorization::SubjectAccessReviewSpec {
    let opt = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    let (resource_attributes, non_resource_attributes) = match attributes {
        Attributes::Resource(r) => (
            Some(authorization::ResourceAttributes {
                verb: opt(&r.verb),
                group: opt(&r.group),
                version: opt(&r.version),
                resource: opt(&r.resource),
                subresource: opt(&r.subresource),
                namespace: opt(&r.namespace),
                name: opt(&r.name),
                ..Default::default()
            }),
            None,
        ),
        Attributes::NonResource(n) => (
            None,
            Some(authorization::NonResourceAttributes {
                verb: opt(&n.verb),
                path: opt(&n.path),
            }),
        ),
    };
    authorization::SubjectAccessReviewSpec {
        user: opt(&user.name),
        uid: opt(&user.uid),
        groups: (!user.groups.is_empty()).then(|| user.groups.clone()),
        extra: (!user.extra.is_empty()).then(|| user.extra.clone()),
        resource_attributes,
        non_resource_attributes,
    }
}

#[async_trait]
impl Authorizer for SubjectAccessReviewAuthorizer {
    async fn authorize(&self, user: &UserInfo, attributes: &Attributes) -> Result<Decision> {
        let spec = subject_access_review_spec(user, attributes);
        // The JSON of the spec is a complete, canonical key (maps are ordered).
        let key = serde_json::to_string(&spec).unwrap_or_default();
        if let Some(decision) = self.cache.get(&key) {
            return Ok(decision);
        }
        let decision = self.review(spec).await?;
        let ttl = if decision.is_allowed() {
            self.authorized_ttl
        } else {
            self.unauthorized_ttl
        };
        self.cache.insert(key, decision.clone(), ttl);
        Ok(decision)
    }
}

/// Layer that authorizes every request; see the [module docs](self).
///
/// Reads [`UserInfo`] (anonymous when absent) and [`RequestInfo`] (parsed when absent) from the
/// request extensions, so it belongs after [`AuthenticationLayer`](crate::AuthenticationLayer).
#[derive(Clone)]
pub struct AuthorizationLayer {
    authorizer: Arc<dyn Authorizer>,
}

impl fmt::Debug for AuthorizationLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthorizationLayer").finish_non_exhaustive()
    }
}

impl AuthorizationLayer {
    /// Wraps services with `authorizer`.
    pub fn new(authorizer: Arc<dyn Authorizer>) -> Self {
        Self { authorizer }
    }

    /// The authorizer, for handlers that check virtual verbs themselves (see [`AuthorizerExt`]).
    pub fn authorizer(&self) -> Arc<dyn Authorizer> {
        self.authorizer.clone()
    }
}

impl<S> Layer<S> for AuthorizationLayer {
    type Service = Authorization<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Authorization {
            inner,
            authorizer: self.authorizer.clone(),
        }
    }
}

/// Service produced by [`AuthorizationLayer`].
#[derive(Clone)]
pub struct Authorization<S> {
    inner: S,
    authorizer: Arc<dyn Authorizer>,
}

impl<S: fmt::Debug> fmt::Debug for Authorization<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Authorization")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, B, ResBody> Service<Request<B>> for Authorization<S>
where
    S: Service<Request<B>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
    ResBody: From<Bytes>,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let authorizer = self.authorizer.clone();
        Box::pin(async move {
            let user = req
                .extensions()
                .get::<UserInfo>()
                .cloned()
                .unwrap_or_else(UserInfo::anonymous);
            let attributes = match req.extensions().get::<RequestInfo>() {
                Some(info) => info.attributes(),
                None => RequestInfo::from_request(&req).attributes(),
            };
            match authorizer.authorize(&user, &attributes).await {
                Ok(Decision::Allow) => inner.call(req).await,
                Ok(Decision::Deny { reason }) => {
                    tracing::debug!(user = %user.name, ?attributes, %reason, "forbidden");
                    Ok(status::status_response(&status::forbidden(
                        &user,
                        &attributes,
                        &reason,
                    )))
                }
                Err(error) => {
                    tracing::warn!(error = &error as &dyn std::error::Error, user = %user.name, "authorization failed");
                    Ok(status::status_response(&status::authorizer_unavailable()))
                }
            }
        })
    }
}
