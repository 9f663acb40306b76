//! Bearer tokens, checked by a delegated TokenReview and cached.

use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use kube::{Api, Client, api::PostParams};

use crate::{
    cache::TtlCache,
    error::{Error, Result},
    user::UserInfo,
};

/// Kubernetes' default for `--authentication-token-webhook-cache-ttl`.
pub const DEFAULT_TOKEN_CACHE_TTL: Duration = Duration::from_secs(10);
/// How long one TokenReview may take.
pub(crate) const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);

/// Authenticates bearer tokens by posting TokenReviews to the kube-apiserver.
///
/// Both outcomes are cached (keyed by a SHA-256 of the token, never the token itself); failures to
/// reach the kube-apiserver are not.
pub struct TokenReviewAuthenticator {
    client: Client,
    audiences: Vec<String>,
    authenticated_ttl: Duration,
    unauthenticated_ttl: Duration,
    cache: TtlCache<[u8; 32], Option<UserInfo>>,
}

impl std::fmt::Debug for TokenReviewAuthenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenReviewAuthenticator")
            .field("audiences", &self.audiences)
            .field("authenticated_ttl", &self.authenticated_ttl)
            .field("unauthenticated_ttl", &self.unauthenticated_ttl)
            .finish_non_exhaustive()
    }
}

impl TokenReviewAuthenticator {
    /// Reviews tokens through `client`, caching both outcomes for [`DEFAULT_TOKEN_CACHE_TTL`].
    pub fn new(client: Client) -> Self {
        Self {
            client,
            audiences: Vec::new(),
            authenticated_ttl: DEFAULT_TOKEN_CACHE_TTL,
            unauthenticated_ttl: DEFAULT_TOKEN_CACHE_TTL,
            cache: TtlCache::new(),
        }
    }

    /// How long a token that authenticated is remembered.
    pub fn authenticated_ttl(mut self, ttl: Duration) -> Self {
        self.authenticated_ttl = ttl;
        self
    }

    /// How long a rejected token is remembered.
    pub fn unauthenticated_ttl(mut self, ttl: Duration) -> Self {
        self.unauthenticated_ttl = ttl;
        self
    }

    /// Audiences the token must be valid for; empty means the kube-apiserver's own.
    pub fn audiences(mut self, audiences: Vec<String>) -> Self {
        self.audiences = audiences;
        self
    }

    /// The user `token` belongs to, or `None` if the kube-apiserver rejects it.
    pub async fn authenticate(&self, token: &str) -> Result<Option<UserInfo>> {
        let key = self.cache_key(token);
        if let Some(cached) = self.cache.get(&key) {
            return Ok(cached);
        }
        let user = self.review(token).await?;
        let ttl = if user.is_some() {
            self.authenticated_ttl
        } else {
            self.unauthenticated_ttl
        };
        self.cache.insert(key, user.clone(), ttl);
        Ok(user)
    }

    fn cache_key(&self, token: &str) -> [u8; 32] {
        let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
        ctx.update(token.as_bytes());
        for audience in &self.audiences {
            ctx.update(b"\0");
            ctx.update(audience.as_bytes());
        }
        let mut key = [0; 32];
        key.copy_from_slice(ctx.finish().as_ref());
        key
    }

    async fn review(&self, token: &str) -> Result<Option<UserInfo>> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_owned(),
                audiences: (!self.audiences.is_empty()).then(|| self.audiences.clone()),
            },
            ..TokenReview::default()
        };
        let api: Api<TokenReview> = Api::all(self.client.clone());
        let response = tokio::time::timeout(REVIEW_TIMEOUT, api.create(&PostParams::default(), &review))
            .await
            .map_err(|_| Error::ReviewTimeout {
                review: "TokenReview",
                seconds: REVIEW_TIMEOUT.as_secs(),
            })?
            .map_err(Error::TokenReview)?;
        let Some(status) = response.status else {
            return Ok(None);
        };
        if status.authenticated != Some(true) {
            if let Some(error) = status.error.filter(|e| !e.is_empty()) {
                tracing::debug!(%error, "TokenReview rejected a token");
            }
            return Ok(None);
        }
        if !self.audiences.is_empty() {
            let granted = status.audiences.unwrap_or_default();
            if !granted.iter().any(|a| self.audiences.contains(a)) {
                tracing::debug!("TokenReview authenticated a token for other audiences");
                return Ok(None);
            }
        }
        let Some(user) = status.user else { return Ok(None) };
        let Some(name) = user.username.filter(|n| !n.is_empty()) else {
            return Ok(None);
        };
        Ok(Some(UserInfo {
            name,
            uid: user.uid.unwrap_or_default(),
            groups: user.groups.unwrap_or_default(),
            extra: user.extra.unwrap_or_default(),
        }))
    }
}
