//! Delete: preconditions, then removal (with what the object holds) or a mark for deletion
//! while finalizers remain.

use cozyplane_storage::Revision;
use kube_core::Resource as _;
use serde_json::Value;

use super::{Store, now};
use crate::errors::{ApiError, ConflictKind, Result};
use crate::registry::strategy::Strategy;

/// Options of a delete.
#[derive(Clone, Debug, Default)]
pub struct DeleteOptions {
    /// `dryRun=All`.
    pub dry_run: bool,
    /// `preconditions.uid`.
    pub uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub resource_version: Option<String>,
    /// `propagationPolicy`: `Orphan` and `Foreground` add the GC finalizers.
    pub propagation: Option<String>,
}

/// What a delete did.
#[derive(Clone, Debug)]
pub enum Deleted {
    /// The object is gone; this was its last state.
    Gone(Value),
    /// The object has finalizers and is now marked for deletion.
    Marked(Value),
}

impl<S: Strategy> Store<S> {
    /// One attempt of a delete: read, check preconditions, then remove or mark at the read
    /// revision.
    pub(super) async fn delete_once(
        &self,
        ns: Option<&str>,
        name: &str,
        o: &DeleteOptions,
    ) -> Result<Deleted> {
        let (mut obj, rev) = self.read(ns, name).await?;
        if let Some(why) = self.strategy.delete_forbidden(&obj) {
            return Err(ApiError::forbidden(&self.info, name, why));
        }
        let uid = obj.meta().uid.clone().unwrap_or_default();
        if let Some(want) = &o.uid
            && *want != uid
        {
            return Err(ApiError::conflict(
                &self.info,
                name,
                ConflictKind::Precondition,
                &format!(
                    "the UID in the precondition ({want}) does not match the UID in record ({uid}). The object might have been deleted and then recreated"
                ),
            ));
        }
        if let Some(want) = &o.resource_version
            && *want != rev.to_string()
        {
            return Err(ApiError::conflict(
                &self.info,
                name,
                ConflictKind::Precondition,
                &format!(
                    "the ResourceVersion in the precondition ({want}) does not match the ResourceVersion in record ({rev}). The object might have been modified"
                ),
            ));
        }
        let gc_finalizer = match o.propagation.as_deref() {
            Some("Orphan") => Some("orphan"),
            Some("Foreground") => Some("foregroundDeletion"),
            _ => None,
        };
        let mut finalizers = obj.meta().finalizers.clone().unwrap_or_default();
        if let Some(f) = gc_finalizer
            && !finalizers.iter().any(|x| x == f)
        {
            finalizers.push(f.to_string());
        }
        if finalizers.is_empty() && !self.strategy.deletion_held(&obj) {
            let key = self.key(ns, name);
            if o.dry_run {
                return Ok(Deleted::Gone(self.with_rv(&obj, rev)?));
            }
            let revision = self.remove(&key, name, &obj, rev).await?;
            return Ok(Deleted::Gone(self.with_rv(&obj, revision)?));
        }
        if obj.meta().deletion_timestamp.is_some() {
            return Ok(Deleted::Marked(self.with_rv(&obj, rev)?));
        }
        {
            let m = obj.meta_mut();
            m.finalizers = (!finalizers.is_empty()).then_some(finalizers);
            m.deletion_timestamp = Some(now());
            m.deletion_grace_period_seconds = Some(0);
            m.generation = Some(m.generation.unwrap_or(1) + 1);
        }
        self.strategy.prepare_for_delete(&mut obj);
        if o.dry_run {
            return Ok(Deleted::Marked(self.with_rv(&obj, rev)?));
        }
        let (bytes, _) = self.encode(&obj)?;
        let kv = self
            .storage
            .update(&self.key(ns, name), bytes, rev)
            .await
            .map_err(|e| ApiError::from_storage(&self.info, name, e))?;
        Ok(Deleted::Marked(self.with_rv(&obj, kv.mod_revision)?))
    }

    /// Deletes `key` at `rev`, releasing in the same transaction whatever `obj` holds.
    pub(super) async fn remove(
        &self,
        key: &str,
        name: &str,
        obj: &S::Object,
        rev: Revision,
    ) -> Result<Revision> {
        let release = self
            .strategy
            .allocator()
            .map(|a| a.release(obj))
            .unwrap_or_default();
        let mut t = cozyplane_storage::Txn::new()
            .when(cozyplane_storage::Compare::ModRevision(key.into(), rev))
            .delete(key);
        t.ops.extend(release.into_iter().filter(|op| op.key() != key));
        let r = self
            .storage
            .txn(t.clone())
            .await
            .map_err(|e| ApiError::from_storage(&self.info, name, e))?;
        if r.succeeded {
            // Released values are free for this process's next create at once.
            self.claims.committed(&t.ops, r.revision);
            return Ok(r.revision);
        }
        let e = match r.current.into_iter().next().and_then(|(_, kv)| kv) {
            None => cozyplane_storage::Error::NotFound { key: key.into() },
            Some(kv) => cozyplane_storage::Error::Conflict {
                key: key.into(),
                expected: rev,
                actual: kv.mod_revision,
            },
        };
        Err(ApiError::from_storage(&self.info, name, e))
    }

    /// Whether `obj`, marked for deletion, has nothing left holding it.
    pub(super) fn deletion_finished(&self, obj: &S::Object) -> bool {
        obj.meta().deletion_timestamp.is_some()
            && obj.meta().finalizers.as_ref().is_none_or(Vec::is_empty)
            && !self.strategy.deletion_held(obj)
    }

    /// A server-side change outside the strategy's update policy, as Kubernetes' `/finalize`
    /// subresource makes one: `change` edits the stored object (e.g. drops a finalizer of the
    /// kind's own) and the result is written, or removed when its deletion is then finished.
    /// Returns `false` when the object is gone. A concurrent write is retried.
    pub async fn finalize(
        &self,
        ns: Option<&str>,
        name: &str,
        change: impl Fn(&mut S::Object),
    ) -> Result<bool> {
        for _ in 0..8 {
            let (old, rev) = match self.read(ns, name).await {
                Ok(found) => found,
                Err(e) if e.is_not_found() => return Ok(false),
                Err(e) => return Err(e),
            };
            let mut new = old.clone();
            change(&mut new);
            if new == old {
                return Ok(true);
            }
            let key = self.key(ns, name);
            let written = if self.deletion_finished(&new) {
                self.remove(&key, name, &old, rev).await.map(|_| false)
            } else {
                let (bytes, _) = self.encode(&new)?;
                self.storage
                    .update(&key, bytes, rev)
                    .await
                    .map(|_| true)
                    .map_err(|e| ApiError::from_storage(&self.info, name, e))
            };
            match written {
                Err(e) if e.is_stale() => continue,
                other => return other,
            }
        }
        Err(ApiError::conflict(
            &self.info,
            name,
            ConflictKind::Stale,
            "the object kept changing; try again",
        ))
    }
}
