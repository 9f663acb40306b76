//! The authentication layer: who is making this request?
//!
//! Authenticators run in Kubernetes' order; the first that recognises the request wins:
//!
//! 1. front proxy: `X-Remote-*` headers over a connection whose client certificate chains to the
//!    request-header CA and carries an allowed CN;
//! 2. client certificate chaining to the client CA: CN = user, O = groups;
//! 3. `Authorization: Bearer …`, checked by a (cached) TokenReview.
//!
//! A request that an authenticator rejects (a certificate that does not verify, a CN that is
//! not allowed, a token the kube-apiserver refuses) gets `401 Unauthorized`, it never falls back
//! to anonymous. A request with no credentials at all is `system:anonymous`, which this layer lets
//! through only to the always-allow paths; everything else gets `401`.
//!
//! Every `X-Remote-*` header is removed before the inner service runs, and so is the
//! `Authorization` header of a request authenticated by its token.

use std::{
    fmt,
    sync::Arc,
    task::{Context, Poll},
};

use bytes::Bytes;
use futures::future::BoxFuture;
use http::{HeaderMap, Request, Response, header};
use rustls_pki_types::UnixTime;
use tower::{Layer, Service};

use crate::{
    attributes::RequestInfo,
    configmap::DynamicCertConfig,
    paths::AlwaysAllowPaths,
    request_header::strip_remote_headers,
    status,
    token::TokenReviewAuthenticator,
    user::UserInfo,
    x509::{CertError, PeerCertificates},
};

/// Decides who a request comes from. Shared by every clone of the layer.
pub struct Authenticator {
    certs: DynamicCertConfig,
    tokens: Option<TokenReviewAuthenticator>,
    anonymous_paths: AlwaysAllowPaths,
}

impl fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Authenticator")
            .field("certs", &self.certs.current())
            .field("tokens", &self.tokens.is_some())
            .field("anonymous_paths", &self.anonymous_paths)
            .finish()
    }
}

/// Why a request is not authenticated.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuthnError {
    /// The front-proxy certificate or the client certificate did not verify.
    #[error("client certificate rejected")]
    Certificate(#[source] CertError),
    /// The kube-apiserver rejected the bearer token.
    #[error("invalid bearer token")]
    InvalidToken,
    /// The TokenReview could not be completed.
    #[error("token lookup failed")]
    TokenLookup(#[source] crate::Error),
    /// No credentials, on a path anonymous users may not reach.
    #[error("anonymous requests are only allowed on always-allow paths")]
    Anonymous,
}

/// What authentication established, besides the user.
struct Authenticated {
    user: UserInfo,
    by_token: bool,
}

impl Authenticator {
    /// Authenticates with the certificate settings in `certs` (read per request, so reloads apply
    /// at once) and, when given, bearer tokens. Anonymous requests may reach `anonymous_paths`.
    pub fn new(
        certs: DynamicCertConfig,
        tokens: Option<TokenReviewAuthenticator>,
        anonymous_paths: AlwaysAllowPaths,
    ) -> Self {
        Self {
            certs,
            tokens,
            anonymous_paths,
        }
    }

    /// The certificate settings this authenticator reads.
    pub fn cert_config(&self) -> &DynamicCertConfig {
        &self.certs
    }

    /// Establishes the user of a request from its headers and TLS peer certificates.
    pub async fn authenticate(
        &self,
        path: &str,
        headers: &HeaderMap,
        peer: Option<&PeerCertificates>,
    ) -> Result<UserInfo, AuthnError> {
        self.authenticate_inner(path, headers, peer).await.map(|a| a.user)
    }

    async fn authenticate_inner(
        &self,
        path: &str,
        headers: &HeaderMap,
        peer: Option<&PeerCertificates>,
    ) -> Result<Authenticated, AuthnError> {
        let chain = peer.map(PeerCertificates::chain).unwrap_or_default();
        let now = UnixTime::now();
        let certs = self.certs.current();
        let mut failure = None;

        if let Some(front_proxy) = &certs.request_header {
            match front_proxy.authenticate(headers, peer, now) {
                Ok(Some(user)) => {
                    return Ok(Authenticated {
                        user: user.with_authenticated_group(),
                        by_token: false,
                    });
                }
                Ok(None) => {}
                Err(error) => failure = Some(AuthnError::Certificate(error)),
            }
        }

        if let (Some(client_ca), Some(peer), false) = (&certs.client_ca, peer, chain.is_empty()) {
            match client_ca.verify_peer(peer, now) {
                Ok(identity) if identity.common_name.is_empty() => {
                    failure.get_or_insert(AuthnError::Certificate(CertError::EmptyCommonName));
                }
                Ok(identity) => {
                    let user = UserInfo::new(identity.common_name, identity.organizations);
                    return Ok(Authenticated {
                        user: user.with_authenticated_group(),
                        by_token: false,
                    });
                }
                Err(error) => {
                    failure.get_or_insert(AuthnError::Certificate(error));
                }
            }
        }

        if let (Some(tokens), Some(token)) = (&self.tokens, bearer_token(headers)) {
            match tokens.authenticate(token).await {
                Ok(Some(user)) => {
                    return Ok(Authenticated {
                        user: user.with_authenticated_group(),
                        by_token: true,
                    });
                }
                Ok(None) => failure = Some(AuthnError::InvalidToken),
                Err(error) => failure = Some(AuthnError::TokenLookup(error)),
            }
        }

        if let Some(failure) = failure {
            return Err(failure);
        }
        if self.anonymous_paths.matches(path) {
            return Ok(Authenticated {
                user: UserInfo::anonymous(),
                by_token: false,
            });
        }
        Err(AuthnError::Anonymous)
    }
}

/// The token of an `Authorization: Bearer <token>` header, if there is one.
fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Layer that authenticates every request; see the [module docs](self).
///
/// On success the inner service sees a [`UserInfo`] and a [`RequestInfo`] (parsed here unless an
/// earlier layer inserted one) in the request extensions. Reads [`PeerCertificates`] from the
/// extensions.
#[derive(Clone, Debug)]
pub struct AuthenticationLayer {
    authenticator: Arc<Authenticator>,
}

impl AuthenticationLayer {
    /// Wraps services with `authenticator`.
    pub fn new(authenticator: Authenticator) -> Self {
        Self {
            authenticator: Arc::new(authenticator),
        }
    }

    /// The shared authenticator, e.g. to watch its certificate settings.
    pub fn authenticator(&self) -> &Arc<Authenticator> {
        &self.authenticator
    }
}

impl<S> Layer<S> for AuthenticationLayer {
    type Service = Authentication<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Authentication {
            inner,
            authenticator: self.authenticator.clone(),
        }
    }
}

/// Service produced by [`AuthenticationLayer`].
#[derive(Clone, Debug)]
pub struct Authentication<S> {
    inner: S,
    authenticator: Arc<Authenticator>,
}

impl<S, B, ResBody> Service<Request<B>> for Authentication<S>
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

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        // Use the service that was driven to readiness; leave a fresh clone in its place.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let authenticator = self.authenticator.clone();
        Box::pin(async move {
            let outcome = authenticator
                .authenticate_inner(
                    req.uri().path(),
                    req.headers(),
                    req.extensions().get::<PeerCertificates>(),
                )
                .await;
            let authenticated = match outcome {
                Ok(authenticated) => authenticated,
                Err(error) => {
                    tracing::debug!(
                        error = &error as &dyn std::error::Error,
                        path = req.uri().path(),
                        "unauthenticated"
                    );
                    return Ok(status::status_response(&status::unauthorized()));
                }
            };
            let headers = req.headers_mut();
            if let Some(front_proxy) = &authenticator.certs.current().request_header {
                front_proxy.strip_headers(headers);
            }
            strip_remote_headers(headers);
            if authenticated.by_token {
                headers.remove(header::AUTHORIZATION);
            }
            if req.extensions().get::<RequestInfo>().is_none() {
                let info = RequestInfo::from_request(&req);
                req.extensions_mut().insert(info);
            }
            req.extensions_mut().insert(authenticated.user);
            inner.call(req).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_token_parsing() {
        let mut headers = HeaderMap::new();
        assert_eq!(bearer_token(&headers), None);
        headers.insert(header::AUTHORIZATION, "Bearer abc".parse().expect("header"));
        assert_eq!(bearer_token(&headers), Some("abc"));
        headers.insert(header::AUTHORIZATION, "bearer  abc ".parse().expect("header"));
        assert_eq!(bearer_token(&headers), Some("abc"));
        headers.insert(header::AUTHORIZATION, "Basic abc".parse().expect("header"));
        assert_eq!(bearer_token(&headers), None);
        headers.insert(header::AUTHORIZATION, "Bearer ".parse().expect("header"));
        assert_eq!(bearer_token(&headers), None);
    }
}
