//! Delegated authentication and authorization for the cozyplane API server.
//!
//! An aggregated API server trusts the kube-apiserver for identity and policy: client
//! certificates, front-proxy request headers, TokenReview and SubjectAccessReview. This crate
//! holds that machinery as tower layers; the server stacks them in front of its routes:
//!
//! ```text
//! TLS (client_cert_verifier: request, don't require, a client certificate)
//!   → server inserts PeerCertificates into each request's extensions
//!   → AuthenticationLayer  (inserts UserInfo + RequestInfo, strips X-Remote-*, 401s)
//!   → AuthorizationLayer   (SubjectAccessReview, 403 / 503)
//!   → routes
//! ```
//!
//! Start with [`AuthOptions`] (flags, [`AuthOptions::build`]); [`Authenticator`] and
//! [`Authorizer`] are the underlying pieces for tests and custom wiring. It knows nothing about
//! the `sdn.cozystack.io` kinds.

mod attributes;
mod authn;
mod authz;
mod cache;
mod configmap;
mod error;
mod options;
mod paths;
mod request_header;
mod status;
mod token;
mod user;
mod x509;

pub use attributes::{Attributes, NonResourceAttributes, RequestInfo, ResourceAttributes};
pub use authn::{Authentication, AuthenticationLayer, Authenticator, AuthnError};
pub use authz::{
    AlwaysAllow, Authorization, AuthorizationLayer, Authorizer, AuthorizerExt, DEFAULT_AUTHORIZED_TTL,
    DEFAULT_UNAUTHORIZED_TTL, Decision, DelegatingAuthorizer, SubjectAccessReviewAuthorizer,
    subject_access_review_spec,
};
pub use configmap::{
    CONFIGMAP_NAME, CONFIGMAP_NAMESPACE, CertConfig, DynamicCertConfig, WATCHED_RESOURCE, WatchHealth,
};
pub use error::{Error, Result};
pub use options::{AuthOptions, parse_duration};
pub use paths::{AlwaysAllowPaths, DEFAULT_ALWAYS_ALLOW_PATHS};
pub use request_header::{
    DEFAULT_EXTRA_HEADERS_PREFIX, DEFAULT_GROUP_HEADER, DEFAULT_USERNAME_HEADER, REMOTE_UID_HEADER,
    RequestHeaderConfig,
};
pub use status::{authorizer_unavailable, forbidden, status_response, unauthorized};
pub use token::{DEFAULT_TOKEN_CACHE_TTL, TokenReviewAuthenticator};
pub use user::{ANONYMOUS_USER, AUTHENTICATED_GROUP, MASTERS_GROUP, UNAUTHENTICATED_GROUP, UserInfo};
pub use x509::{
    CaBundle, CertError, CertIdentity, PeerCertificates, chain_verifications_total, client_cert_verifier,
};
