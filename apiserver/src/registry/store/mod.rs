//! The generic store: one create/update/patch/delete/list flow for every kind.
//!
//! [`Store<S>`] is typed by its [`Strategy`]; the HTTP layer sees it as `dyn` [`Resource`], which
//! speaks JSON, so one router serves every kind of the table.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use cozyplane_apis::{HasSpecStatus, KindInfo};
use cozyplane_storage::{Revision, Storage, WatchOptions, WatchStream};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube_core::Resource as _;
use rand::Rng;
use serde_json::{Value, json};

use super::hooks::Requester;
use super::strategy::{Column, StatusStrategy, Strategy};
use super::validate;
use crate::errors::{ApiError, ConflictKind, Result};

mod delete;
mod list;
mod managed;

pub use delete::{DeleteOptions, Deleted};
pub use list::{ListPage, ListParams, list_from_storage, list_from_storage_as};
pub use managed::merge_schema;

/// The storage root of every key this server writes ([`super::keys`] owns the layout).
pub const KEY_PREFIX: &str = super::keys::ROOT;

/// Options of a write: who makes it, `dryRun`, the field manager. There is no default: a write
/// names its [`Requester`] ([`WriteOptions::server`] for the server's own writes).
#[derive(Clone, Debug)]
pub struct WriteOptions {
    /// Who writes; a client's write passes its admission.
    pub requester: Requester,
    /// `dryRun=All`: run the whole flow, persist nothing.
    pub dry_run: bool,
    /// The field manager recorded in `metadata.managedFields` (`fieldManager`, else the
    /// User-Agent prefix); `None` records the write as [`DEFAULT_MANAGER`].
    pub manager: Option<String>,
    /// The body is the result of server-side apply and already carries its `managedFields`;
    /// the Update bookkeeping is skipped.
    pub applied: bool,
}

impl WriteOptions {
    /// A write by the server itself (controllers, start-up), recorded as [`DEFAULT_MANAGER`].
    pub fn server() -> Self {
        Self::by(Requester::Server)
    }

    /// A write by `requester`, not a dry run, recorded as [`DEFAULT_MANAGER`].
    pub fn by(requester: Requester) -> Self {
        Self {
            requester,
            dry_run: false,
            manager: None,
            applied: false,
        }
    }
}

/// The manager of writes that name none (in-process controllers).
pub const DEFAULT_MANAGER: &str = "cozyplane-apiserver";

/// A kind as the HTTP layer sees it: JSON in, JSON out.
#[async_trait]
pub trait Resource: Send + Sync + 'static {
    /// Names and scope.
    fn info(&self) -> &KindInfo;
    /// Extra printer columns.
    fn columns(&self) -> &'static [Column];
    /// Extra field selectors.
    fn selectable_fields(&self) -> &'static [(&'static str, &'static str)];
    /// OpenAPI schema of the object (schemars), and its definitions.
    fn schema(&self, generator: &mut schemars::SchemaGenerator) -> schemars::Schema;
    /// Storage key prefix for a namespace (or all).
    fn prefix(&self, ns: Option<&str>) -> String;
    /// The underlying store.
    fn storage(&self) -> &Arc<dyn Storage>;
    /// Reads one object.
    async fn get(&self, ns: Option<&str>, name: &str) -> Result<Value>;
    /// Lists objects.
    async fn list(&self, ns: Option<&str>, p: &ListParams) -> Result<ListPage>;
    /// Creates an object from a request body.
    async fn create(&self, ns: Option<&str>, body: Value, o: &WriteOptions) -> Result<Value>;
    /// Replaces an object (or its status).
    async fn update(
        &self,
        ns: Option<&str>,
        name: &str,
        body: Value,
        status: bool,
        o: &WriteOptions,
    ) -> Result<Value>;
    /// Patches an object (or its status): `apply` turns the current JSON into the new body.
    async fn patch(
        &self,
        ns: Option<&str>,
        name: &str,
        apply: &(dyn Fn(Value) -> Result<Value> + Send + Sync),
        status: bool,
        o: &WriteOptions,
    ) -> Result<Value>;
    /// Deletes (or marks) an object.
    async fn delete(&self, ns: Option<&str>, name: &str, o: &DeleteOptions) -> Result<Deleted>;
    /// Decodes a stored value into JSON with `metadata.resourceVersion` set.
    fn decode(&self, value: &[u8], rev: Revision) -> Result<Value>;
    /// Starts a storage watch of a namespace (or all).
    async fn watch(&self, ns: Option<&str>, after: Option<Revision>) -> Result<WatchStream>;
}

/// The generic store of kind `S::Object`.
pub struct Store<S: Strategy> {
    strategy: S,
    info: KindInfo,
    storage: Arc<dyn Storage>,
    /// The allocators' view of the claims, shared by every store on `storage`.
    claims: Arc<crate::alloc::cache::ClaimCache>,
}

impl<S: Strategy> Store<S> {
    /// A store for `strategy`'s kind on `storage`.
    pub fn new(strategy: S, storage: Arc<dyn Storage>) -> Self {
        Self {
            strategy,
            info: <S::Object as cozyplane_apis::ApiKind>::INFO,
            claims: crate::alloc::cache::ClaimCache::for_storage(&storage),
            storage,
        }
    }

    fn key(&self, ns: Option<&str>, name: &str) -> String {
        super::keys::object(&self.info, ns, name)
    }

    fn invalid(&self, name: &str, errs: &validate::field::FieldErrors) -> ApiError {
        ApiError::invalid(self.info.kind, self.info.group, name, errs)
    }

    /// Checks `apiVersion`/`kind` of a body and decodes it.
    fn decode_body(&self, body: Value) -> Result<S::Object> {
        if let Some(av) = body.get("apiVersion").and_then(Value::as_str)
            && av != <S::Object as cozyplane_apis::ApiKind>::API_VERSION
        {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({av}) does not match the expected API version ({})",
                <S::Object as cozyplane_apis::ApiKind>::API_VERSION
            )));
        }
        if let Some(k) = body.get("kind").and_then(Value::as_str)
            && k != self.info.kind
        {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                self.info.kind
            )));
        }
        serde_json::from_value(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding the request body: {e}")))
    }

    fn encode(&self, obj: &S::Object) -> Result<(Bytes, Value)> {
        let mut stored = obj.clone();
        stored.meta_mut().resource_version = None;
        let bytes = serde_json::to_vec(&stored).map_err(ApiError::internal)?;
        let v = serde_json::to_value(obj).map_err(ApiError::internal)?;
        Ok((bytes.into(), v))
    }

    fn typed(&self, value: &[u8], rev: Revision) -> Result<S::Object> {
        let mut o: S::Object = serde_json::from_slice(value).map_err(ApiError::internal)?;
        o.meta_mut().resource_version = Some(rev.to_string());
        Ok(o)
    }

    fn with_rv(&self, obj: &S::Object, rev: Revision) -> Result<Value> {
        let mut v = serde_json::to_value(obj).map_err(ApiError::internal)?;
        v["metadata"]["resourceVersion"] = json!(rev.to_string());
        Ok(v)
    }

    fn fix_namespace(&self, obj: &mut S::Object, ns: Option<&str>) -> Result<()> {
        let meta = obj.meta_mut();
        if self.info.namespaced {
            let url = ns.unwrap_or_default();
            match meta.namespace.as_deref() {
                None | Some("") => meta.namespace = Some(url.to_string()),
                Some(b) if b != url => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                _ => {}
            }
        } else {
            meta.namespace = None;
        }
        Ok(())
    }

    async fn read(&self, ns: Option<&str>, name: &str) -> Result<(S::Object, Revision)> {
        let kv = self
            .storage
            .get(&self.key(ns, name))
            .await
            .map_err(|e| ApiError::from_storage(&self.info, name, e))?;
        Ok((self.typed(&kv.value, kv.mod_revision)?, kv.mod_revision))
    }

    /// The shared tail of PUT and PATCH: `new` replaces `old` (read at `rev`).
    async fn update_from(
        &self,
        ns: Option<&str>,
        name: &str,
        mut new: S::Object,
        (old, rev): (S::Object, Revision),
        status: bool,
        o: &WriteOptions,
    ) -> Result<Value> {
        self.fix_namespace(&mut new, ns)?;
        match new.meta().name.as_deref() {
            Some(n) if n == name => {}
            None | Some("") => new.meta_mut().name = Some(name.to_string()),
            Some(n) => {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({n}) does not match the name on the URL ({name})"
                )));
            }
        }
        match new.meta().resource_version.as_deref() {
            None | Some("") => {
                let errs = validate::FieldErrors::from(validate::FieldError::invalid(
                    validate::FieldPath::new("metadata").child("resourceVersion"),
                    "0x0",
                    "must be specified for an update",
                ));
                return Err(self.invalid(name, &errs));
            }
            Some(v) if v != rev.to_string() => return Err(ApiError::modified(&self.info, name)),
            _ => {}
        }
        let old_meta = old.meta().clone();
        let sent_managed = new.meta().managed_fields.clone();
        let managed_input = self.managed_input(Some(&old), &new, o)?;
        if let Some(uid) = new.meta().uid.as_deref()
            && !uid.is_empty()
            && Some(uid) != old_meta.uid.as_deref()
        {
            return Err(ApiError::conflict(
                &self.info,
                name,
                ConflictKind::Precondition,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    old_meta.uid.as_deref().unwrap_or_default()
                ),
            ));
        }
        let errs = if status {
            let st = StatusStrategy(&self.strategy);
            st.prepare_for_update(&mut new, &old);
            st.validate_update(&new, &old)
        } else {
            {
                let m = new.meta_mut();
                m.uid = old_meta.uid.clone();
                m.creation_timestamp = old_meta.creation_timestamp.clone();
                m.deletion_timestamp = old_meta.deletion_timestamp.clone();
                m.deletion_grace_period_seconds = old_meta.deletion_grace_period_seconds;
                m.generation = old_meta.generation;
                m.managed_fields = None;
            }
            self.strategy.prepare_for_update(&mut new, &old);
            self.strategy.default(&mut new);
            if !new.spec_eq(&old) {
                new.meta_mut().generation = Some(old_meta.generation.unwrap_or(1) + 1);
            }
            // The kind validators include the metadata update rules (finalizers of an object
            // being deleted, immutable uid/name/namespace).
            self.strategy.validate_update(&new, &old)
        };
        if !errs.is_empty() {
            return Err(self.invalid(name, &errs));
        }
        if !status && let Some(alloc) = self.strategy.allocator() {
            alloc.check_update(&new, &old, &self.storage).await?;
        }
        if !status {
            let checks = self.strategy.update_checks(&new, &old);
            o.requester.admit_update(&self.info, name, &checks).await?;
        }
        self.strategy.canonicalize(&mut new);
        if !status {
            self.strategy.derive_status(&mut new);
        }
        self.record_managed_fields(Some(&old), &mut new, managed_input, sent_managed, status, o)?;
        let (bytes, _) = self.encode(&new)?;
        let (old_bytes, _) = self.encode(&old)?;
        let same = bytes == old_bytes || {
            let a: Value = serde_json::from_slice(&bytes).map_err(ApiError::internal)?;
            let b: Value = serde_json::from_slice(&old_bytes).map_err(ApiError::internal)?;
            crate::merge::equal_ignoring_managed_fields_time(&a, &b)
        };
        if same {
            // A no-op write keeps the resourceVersion and emits no event.
            return self.with_rv(&old, rev);
        }
        let key = self.key(ns, name);
        let finished = self.deletion_finished(&new);
        if o.dry_run {
            return self.with_rv(&new, rev);
        }
        if finished {
            // The last finalizer is gone: the object goes away now (with what it holds).
            let revision = self.remove(&key, name, &old, rev).await?;
            return self.with_rv(&new, revision);
        }
        let kv = self
            .storage
            .update(&key, bytes, rev)
            .await
            .map_err(|e| ApiError::from_storage(&self.info, name, e))?;
        self.with_rv(&new, kv.mod_revision)
    }
}

impl<S: Strategy> Store<S> {
    /// The one create flow, for every kind: allocate (kinds with an allocator) → validate →
    /// admit → one transaction storing the object (absent before) with its claims. A lost race
    /// re-allocates (bounded), avoiding what was lost; a generated name that is taken is
    /// generated again.
    async fn create_stored(
        &self,
        ns: Option<&str>,
        mut obj: S::Object,
        generated: Option<&str>,
        admitted_name: &str,
        o: &WriteOptions,
    ) -> Result<Value> {
        use crate::alloc::{Allocation, Cx, MAX_ATTEMPTS, Outcome, failed_compares};
        /// How many generated names are tried before giving up (Kubernetes' number).
        const NAME_TRIES: u32 = 8;
        let mut avoid = std::collections::HashSet::new();
        let name_generated = generated.is_some() || obj.meta().name.as_deref().unwrap_or_default().is_empty();
        let mut names_taken = 0;
        for attempt in 0..MAX_ATTEMPTS {
            let mut cand = obj.clone();
            let cx = Cx {
                storage: &self.storage,
                cache: &self.claims,
                attempt,
                avoid: &avoid,
                name_generated,
            };
            let mut a = match self.strategy.allocator() {
                Some(alloc) => alloc.allocate(&mut cand, &cx).await?,
                None => Allocation::default(),
            };
            let name = cand.meta().name.clone().unwrap_or_default();
            let errs = self.strategy.validate(&cand);
            if !errs.is_empty() {
                a.finish();
                return Err(self.invalid(&name, &errs));
            }
            self.strategy.canonicalize(&mut cand);
            self.strategy.derive_status(&mut cand);
            let checks = self.strategy.create_checks(&cand);
            if let Err(e) = o
                .requester
                .admit_create(&self.info, ns, admitted_name, &checks, o.dry_run)
                .await
            {
                a.finish();
                return Err(e);
            }
            let (bytes, v) = self.encode(&cand)?;
            if o.dry_run {
                a.finish();
                return Ok(v);
            }
            let key = self.key(ns, &name);
            let txn = a.txn(&key, bytes);
            let r = match self.storage.txn(txn.clone()).await {
                Ok(r) => r,
                Err(e) => {
                    a.finish();
                    return Err(ApiError::from_storage(&self.info, &name, e));
                }
            };
            if r.succeeded {
                // Known taken before the picks stop being in flight.
                self.claims.committed(&txn.ops, r.revision);
                a.finish();
                return self.with_rv(&cand, r.revision);
            }
            let failed = failed_compares(&txn, &r.current);
            let lost: Vec<String> = failed.iter().map(|(k, _)| k.clone()).collect();
            self.claims.observed(&failed);
            a.finish();
            match a.resolve(&key, &failed) {
                Outcome::Retry => avoid.extend(lost.into_iter().filter(|k| *k != key)),
                Outcome::Fail(e) => return Err(e),
                Outcome::NameTaken if generated.is_some() && names_taken + 1 < NAME_TRIES => {
                    names_taken += 1;
                    let n = generate_name(generated.unwrap_or_default());
                    obj.meta_mut().name = Some(n);
                }
                Outcome::NameTaken if generated.is_some() => {
                    let mut e = ApiError::already_exists(&self.info, &name);
                    e.message
                        .push_str(", the server was not able to generate a unique name for the object");
                    return Err(e);
                }
                Outcome::NameTaken => return Err(ApiError::already_exists(&self.info, &name)),
            }
        }
        Err(ApiError::conflict(
            &self.info,
            obj.meta().name.as_deref().unwrap_or_default(),
            ConflictKind::AllocationRaces,
            &format!("allocation lost {MAX_ATTEMPTS} races in a row; try again"),
        ))
    }
}

/// Five characters Kubernetes uses for generated names (no vowels, no look-alikes).
const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

fn generate_name(prefix: &str) -> String {
    let mut rng = rand::rng();
    let mut s: String = prefix.chars().take(58).collect();
    for _ in 0..5 {
        s.push(NAME_ALPHABET[rng.random_range(0..NAME_ALPHABET.len())] as char);
    }
    s
}

fn now() -> Time {
    // Kubernetes timestamps have second precision.
    Time(Timestamp::from_second(Timestamp::now().as_second()).unwrap_or(Timestamp::UNIX_EPOCH))
}

#[async_trait]
impl<S: Strategy> Resource for Store<S> {
    fn info(&self) -> &KindInfo {
        &self.info
    }

    fn columns(&self) -> &'static [Column] {
        S::COLUMNS
    }

    fn selectable_fields(&self) -> &'static [(&'static str, &'static str)] {
        S::SELECTABLE_FIELDS
    }

    fn schema(&self, generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        generator.subschema_for::<S::Object>()
    }

    fn prefix(&self, ns: Option<&str>) -> String {
        super::keys::prefix(&self.info, ns)
    }

    fn storage(&self) -> &Arc<dyn Storage> {
        &self.storage
    }

    fn decode(&self, value: &[u8], rev: Revision) -> Result<Value> {
        let mut v: Value = serde_json::from_slice(value).map_err(ApiError::internal)?;
        v["metadata"]["resourceVersion"] = json!(rev.to_string());
        Ok(v)
    }

    async fn get(&self, ns: Option<&str>, name: &str) -> Result<Value> {
        let kv = self
            .storage
            .get(&self.key(ns, name))
            .await
            .map_err(|e| ApiError::from_storage(&self.info, name, e))?;
        self.decode(&kv.value, kv.mod_revision)
    }

    async fn list(&self, ns: Option<&str>, p: &ListParams) -> Result<ListPage> {
        list_from_storage(self, ns, p).await
    }

    async fn create(&self, ns: Option<&str>, body: Value, o: &WriteOptions) -> Result<Value> {
        let mut obj = self.decode_body(body)?;
        self.fix_namespace(&mut obj, ns)?;
        let sent_managed = obj.meta().managed_fields.clone();
        let managed_input = self.managed_input(None, &obj, o)?;
        let generated = {
            let m = obj.meta_mut();
            let empty = m.name.as_deref().unwrap_or_default().is_empty();
            let prefix = m.generate_name.clone().filter(|g| !g.is_empty());
            match (empty, prefix) {
                (true, Some(p)) => {
                    m.name = Some(generate_name(&p));
                    Some(p)
                }
                _ => None,
            }
        };
        {
            let m = obj.meta_mut();
            m.uid = Some(uuid::Uuid::new_v4().to_string());
            m.creation_timestamp = Some(now());
            m.generation = Some(1);
            m.resource_version = None;
            m.deletion_timestamp = None;
            m.deletion_grace_period_seconds = None;
            m.managed_fields = None;
            m.self_link = None;
        }
        self.strategy.prepare_for_create(&mut obj);
        self.strategy.default(&mut obj);
        self.record_managed_fields(None, &mut obj, managed_input, sent_managed, false, o)?;
        let name = obj.meta().name.clone().unwrap_or_default();
        // Admission names a generated object by its prefix, as Kubernetes does.
        let admitted_name = generated.clone().unwrap_or_else(|| name.clone());
        o.requester
            .admit_namespace(&self.info, ns, &admitted_name)
            .await?;
        self.create_stored(ns, obj, generated.as_deref(), &admitted_name, o)
            .await
    }

    async fn update(
        &self,
        ns: Option<&str>,
        name: &str,
        body: Value,
        status: bool,
        o: &WriteOptions,
    ) -> Result<Value> {
        let new = self.decode_body(body)?;
        let (old, rev) = self.read(ns, name).await?;
        self.update_from(ns, name, new, (old, rev), status, o).await
    }

    async fn patch(
        &self,
        ns: Option<&str>,
        name: &str,
        apply: &(dyn Fn(Value) -> Result<Value> + Send + Sync),
        status: bool,
        o: &WriteOptions,
    ) -> Result<Value> {
        // Without a resourceVersion in the patch, a concurrent write is retried transparently,
        // as Go's GuaranteedUpdate does.
        let mut tries = 0;
        loop {
            let (old, rev) = self.read(ns, name).await?;
            let current = self.with_rv(&old, rev)?;
            let patched = apply(current)?;
            let new = self.decode_body(patched)?;
            match self.update_from(ns, name, new, (old, rev), status, o).await {
                Err(e) if e.is_stale() && tries < 5 => tries += 1,
                other => return other,
            }
        }
    }

    async fn delete(&self, ns: Option<&str>, name: &str, o: &DeleteOptions) -> Result<Deleted> {
        // Without a resourceVersion precondition the caller asked to delete whatever is there,
        // so a write that slipped in between our read and our delete (a status update) is
        // retried rather than reported, as Kubernetes' store does.
        let mut attempts = 0;
        loop {
            match self.delete_once(ns, name, o).await {
                // Only a stale read is retried: a failed uid precondition is permanent.
                Err(e) if e.is_stale() && o.resource_version.is_none() && attempts < 8 => attempts += 1,
                other => return other,
            }
        }
    }

    async fn watch(&self, ns: Option<&str>, after: Option<Revision>) -> Result<WatchStream> {
        let opts = WatchOptions {
            revision: after,
            prefix: true,
            progress_interval: Some(super::cache::progress_interval(&*self.storage)),
        };
        self.storage
            .watch(&self.prefix(ns), opts)
            .await
            .map_err(|e| ApiError::from_storage(&self.info, "", e))
    }
}
