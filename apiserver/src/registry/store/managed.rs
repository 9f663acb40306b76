//! `metadata.managedFields` bookkeeping of a write, and the merge schema it is judged by.

use std::sync::Arc;

use kube_core::Resource as _;
use serde_json::Value;

use super::{DEFAULT_MANAGER, Resource, Store, WriteOptions, now};
use crate::errors::{ApiError, Result};
use crate::registry::strategy::Strategy;

/// The kind's schema reduced for server-side apply and strategic merge patch, built once per
/// group and kind.
pub fn merge_schema(r: &dyn Resource) -> Arc<crate::merge::Schema> {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock, PoisonError};
    type Cache = Mutex<HashMap<(&'static str, &'static str), Arc<crate::merge::Schema>>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let key = (r.info().group, r.info().kind);
    let cache = CACHE.get_or_init(Default::default);
    if let Some(s) = cache.lock().unwrap_or_else(PoisonError::into_inner).get(&key) {
        return s.clone();
    }
    let mut generator = schemars::SchemaGenerator::default();
    let mut doc = r.schema(&mut generator).to_value();
    let defs: serde_json::Map<String, Value> = generator.take_definitions(true);
    if let Value::Object(m) = &mut doc {
        m.insert("$defs".into(), Value::Object(defs));
    }
    let s = Arc::new(crate::merge::Schema::for_object(&doc));
    cache
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(key, s.clone());
    s
}

/// `metadata.managedFields` as the typed object carries it (`None` when empty).
fn typed_managed_fields(
    m: &crate::merge::ManagedFields,
) -> Result<Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry>>> {
    let entries: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry> =
        serde_json::from_value(m.to_json()).map_err(ApiError::internal)?;
    Ok((!entries.is_empty()).then_some(entries))
}

impl<S: Strategy> Store<S> {
    /// Where a write's `managedFields` bookkeeping starts: `None` for an apply (the body
    /// carries the result), else what the body asks for (`merge::managed_fields_for_write`).
    pub(super) fn managed_input(
        &self,
        old: Option<&S::Object>,
        new: &S::Object,
        o: &WriteOptions,
    ) -> Result<Option<crate::merge::ManagedFieldsInput>> {
        if o.applied {
            return Ok(None);
        }
        let old = old
            .map(serde_json::to_value)
            .transpose()
            .map_err(ApiError::internal)?;
        let new = serde_json::to_value(new).map_err(ApiError::internal)?;
        Ok(Some(crate::merge::managed_fields_for_write(old.as_ref(), &new)))
    }

    /// Sets `new`'s `managedFields` for a write by `o.manager` (PATCH-09): an apply keeps
    /// `applied` (what the body carried), any other write records an Update entry.
    pub(super) fn record_managed_fields(
        &self,
        old: Option<&S::Object>,
        new: &mut S::Object,
        input: Option<crate::merge::ManagedFieldsInput>,
        applied: Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry>>,
        status: bool,
        o: &WriteOptions,
    ) -> Result<()> {
        use crate::merge::ManagedFieldsInput;
        let entries = match input {
            None => applied,
            Some(ManagedFieldsInput::Reset) => None,
            Some(ManagedFieldsInput::Track(managed)) => {
                new.meta_mut().managed_fields = None;
                let old = old
                    .map(serde_json::to_value)
                    .transpose()
                    .map_err(ApiError::internal)?;
                let new_v = serde_json::to_value(&*new).map_err(ApiError::internal)?;
                let time = now().0.to_string();
                let ctx = crate::merge::WriteContext {
                    manager: o.manager.as_deref().unwrap_or(DEFAULT_MANAGER),
                    subresource: status.then_some("status"),
                    api_version: <S::Object as cozyplane_apis::ApiKind>::API_VERSION,
                    time: &time,
                };
                let schema = merge_schema(self);
                let m = crate::merge::update_managed_fields(old.as_ref(), &new_v, &managed, &ctx, &schema);
                typed_managed_fields(&m)?
            }
        };
        new.meta_mut().managed_fields = entries;
        Ok(())
    }
}
