//! What the generic store asks of the rest of the server, as hooks it defines and others
//! implement: who is writing ([`Requester`]) and the admission every client write passes
//! ([`Admit`], implemented by `crate::admission` and injected at start-up through the request).
//!
//! The store never calls admission by name and never looks for a request in ambient state: a
//! write carries its [`Requester`] in its options, and a client write cannot be made without
//! the admission that comes with it.

use std::sync::Arc;

use async_trait::async_trait;
use cozyplane_apis::KindInfo;
use cozyplane_authz::UserInfo;

use crate::errors::Result;

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

/// Validating admission of client writes.
#[async_trait]
pub trait Admit: Send + Sync {
    /// Namespace lifecycle: may `user` create `name` of `info` in namespace `ns`?
    async fn namespace(&self, user: &UserInfo, info: &KindInfo, ns: &str, name: &str) -> Result<()>;

    /// A create of `name` (the generateName prefix for generated names) of `info` in `ns`:
    /// the strategy's `checks`, then quota (charged unless `dry_run`).
    async fn create(
        &self,
        user: &UserInfo,
        info: &KindInfo,
        ns: Option<&str>,
        name: &str,
        checks: &[VerbCheck],
        dry_run: bool,
    ) -> Result<()>;

    /// An update of `name` of `info`: the strategy's `checks`.
    async fn update(&self, user: &UserInfo, info: &KindInfo, name: &str, checks: &[VerbCheck]) -> Result<()>;
}

/// Who makes a write.
#[derive(Clone)]
pub enum Requester {
    /// A client request, authenticated as `user`, admitted by `admission`.
    Client {
        /// The authenticated user.
        user: UserInfo,
        /// The server's admission.
        admission: Arc<dyn Admit>,
    },
    /// The server itself (its controllers, start-up): acts with the server's own authority.
    Server,
}

impl std::fmt::Debug for Requester {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Client { user, .. } => f.debug_struct("Client").field("user", &user.name).finish(),
            Self::Server => f.write_str("Server"),
        }
    }
}

impl Requester {
    /// Admission of a create in `ns` (namespace lifecycle for namespaced kinds first).
    pub(crate) async fn admit_create(
        &self,
        info: &KindInfo,
        ns: Option<&str>,
        name: &str,
        checks: &[VerbCheck],
        dry_run: bool,
    ) -> Result<()> {
        let Self::Client { user, admission } = self else {
            return Ok(());
        };
        admission.create(user, info, ns, name, checks, dry_run).await
    }

    /// Namespace lifecycle of a create in `ns`.
    pub(crate) async fn admit_namespace(&self, info: &KindInfo, ns: Option<&str>, name: &str) -> Result<()> {
        let (Self::Client { user, admission }, Some(ns)) = (self, ns) else {
            return Ok(());
        };
        if !info.namespaced || ns.is_empty() {
            return Ok(());
        }
        admission.namespace(user, info, ns, name).await
    }

    /// Admission of an update.
    pub(crate) async fn admit_update(&self, info: &KindInfo, name: &str, checks: &[VerbCheck]) -> Result<()> {
        let Self::Client { user, admission } = self else {
            return Ok(());
        };
        admission.update(user, info, name, checks).await
    }
}
