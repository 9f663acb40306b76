//! Server-side apply (`application/apply-patch+yaml`), strategic merge patch and the field
//! manager of every write, on top of the pure functions of [`crate::merge`].

use std::collections::HashMap;

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use serde_json::Value;

use super::{Target, dedup_owner_references, field_validation, flag, json_response, validation_mode};
use crate::errors::{ApiError, Result};
use crate::merge::{ApplyError, Conflicts, ManagedFields, Schema, WriteContext};
use crate::registry::store::{WriteOptions, merge_schema};
use crate::registry::validate::{FieldError, FieldErrors, FieldPath};

/// Longest `fieldManager` Kubernetes accepts, in bytes.
const MAX_FIELD_MANAGER: usize = 128;

/// The field manager of a write (PATCH-09): the `fieldManager` query parameter (validated: at
/// most 128 bytes, printable; else 422 on `options`), else the User-Agent up to its first `/`.
pub(super) fn field_manager(
    q: &HashMap<String, String>,
    headers: &HeaderMap,
    options: &str,
) -> Result<Option<String>> {
    if let Some(m) = explicit_field_manager(q, options)? {
        return Ok(Some(m));
    }
    let ua = headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let mut prefix = String::new();
    for c in ua.split('/').next().unwrap_or_default().chars() {
        if prefix.len() >= MAX_FIELD_MANAGER {
            break;
        }
        if !c.is_control() {
            prefix.push(c);
        }
    }
    Ok((!prefix.is_empty()).then_some(prefix))
}

/// The `fieldManager` query parameter, if set and valid.
fn explicit_field_manager(q: &HashMap<String, String>, options: &str) -> Result<Option<String>> {
    let Some(m) = q.get("fieldManager").filter(|m| !m.is_empty()) else {
        return Ok(None);
    };
    let path = FieldPath::new("fieldManager");
    let mut errs = FieldErrors::new();
    if m.len() > MAX_FIELD_MANAGER {
        errs.push(FieldError::too_long(path.clone(), MAX_FIELD_MANAGER, "bytes"));
    }
    if let Some(i) = m.chars().position(char::is_control) {
        errs.push(FieldError::invalid(
            path,
            m,
            format!("invalid characters, position {i}"),
        ));
    }
    if errs.is_empty() {
        Ok(Some(m.clone()))
    } else {
        Err(ApiError::invalid(options, "meta.k8s.io", "", &errs))
    }
}

/// PATCH-06: `force` is only for apply.
pub(super) fn check_force(q: &HashMap<String, String>) -> Result<()> {
    if q.contains_key("force") {
        let errs = FieldErrors::from(FieldError::forbidden(
            FieldPath::new("force"),
            "may not be specified for non-apply patch",
        ));
        return Err(ApiError::invalid("PatchOptions", "meta.k8s.io", "", &errs));
    }
    Ok(())
}

/// PATCH-07: one `FieldManagerConflict` cause per conflicting field and manager.
fn conflict_error(c: &Conflicts) -> ApiError {
    let status = c.to_status();
    let details = status
        .get("details")
        .cloned()
        .and_then(|d| serde_json::from_value(d).ok());
    ApiError::conflict_of(crate::errors::ConflictKind::FieldManager, c.message(), details)
}

/// Current time as RFC 3339 with seconds precision.
fn now() -> String {
    use k8s_openapi::jiff::Timestamp;
    Timestamp::from_second(Timestamp::now().as_second())
        .unwrap_or(Timestamp::UNIX_EPOCH)
        .to_string()
}

/// Drops the fields of `v` its schema does not declare (after `fieldValidation` reported them),
/// so the applier never owns a field the object cannot hold.
fn prune_unknown(v: &mut Value, s: &Schema) {
    match (v, s) {
        (Value::Object(m), Schema::Map(ms)) => {
            if ms.elements.is_none() && !ms.fields.is_empty() {
                m.retain(|k, _| ms.fields.contains_key(k));
            }
            for (k, c) in m.iter_mut() {
                prune_unknown(c, s.field(k));
            }
        }
        (Value::Array(items), Schema::List(l)) => {
            for c in items {
                prune_unknown(c, &l.items);
            }
        }
        _ => {}
    }
}

/// Checks the identity of an apply configuration against the endpoint and the URL.
fn check_identity(t: &Target, config: &mut Value) -> Result<()> {
    let i = t.resource.info();
    let want = crate::registry::api_version(i);
    let Value::Object(obj) = config else {
        return Err(ApiError::bad_request(
            "error decoding patch: the apply configuration must be a YAML or JSON object",
        ));
    };
    let av = obj.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
    if av != want {
        return Err(ApiError::bad_request(format!(
            "Incorrect version specified in apply patch. Specified patch version: {av}, expected: {want}"
        )));
    }
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or_default();
    if kind != i.kind {
        return Err(ApiError::bad_request(format!(
            "Incorrect kind specified in apply patch. Specified patch kind: {kind}, expected: {}",
            i.kind
        )));
    }
    let url_name = t.name.as_deref().unwrap_or_default();
    let meta = obj
        .entry("metadata")
        .or_insert_with(|| Value::Object(serde_json::Map::new()));
    let Value::Object(meta) = meta else {
        return Err(ApiError::bad_request(
            "error decoding patch: metadata must be an object",
        ));
    };
    match meta.get("name") {
        None | Some(Value::Null) => {
            meta.insert("name".into(), Value::String(url_name.to_string()));
        }
        Some(Value::String(n)) if n == url_name => {}
        Some(n) => {
            let n = n.as_str().map_or_else(|| n.to_string(), str::to_string);
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({url_name})"
            )));
        }
    }
    if i.namespaced
        && let Some(ns) = meta.get("namespace").and_then(Value::as_str)
        && !ns.is_empty()
        && Some(ns) != t.namespace.as_deref()
    {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    Ok(())
}

/// `PATCH` with `application/apply-patch+yaml` (PATCH-05..08): merges the configuration into
/// the live object (or creates it, 201), records the applier's fields, reports conflicts.
pub(super) async fn apply_patch(
    t: Target,
    q: HashMap<String, String>,
    body: Bytes,
    mut o: WriteOptions,
) -> Result<Response> {
    let Some(manager) = explicit_field_manager(&q, "PatchOptions")? else {
        let errs = FieldErrors::from(FieldError::required(
            FieldPath::new("fieldManager"),
            "is required for apply patch",
        ));
        return Err(ApiError::invalid("PatchOptions", "meta.k8s.io", "", &errs));
    };
    let force = flag(&q, "force");
    let mode = validation_mode(&q)?;
    let mut config: Value = serde_norway::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
    check_identity(&t, &mut config)?;
    let r = &*t.resource;
    let mut warnings = field_validation(r, mode, None, &config)?;
    warnings.extend(dedup_owner_references(&mut config));
    let schema = merge_schema(r);
    prune_unknown(&mut config, &schema);
    let time = now();
    let api_version = format!("{}/{}", r.info().group, r.info().version);
    let name = t.name.clone().unwrap_or_default();
    let ns = t.namespace.as_deref();
    let run = |live: Option<&Value>| -> Result<Value> {
        let managed = live
            .and_then(|l| ManagedFields::from_object(l).ok())
            .unwrap_or_default();
        let ctx = WriteContext {
            manager: &manager,
            subresource: t.status.then_some("status"),
            api_version: &api_version,
            time: &time,
        };
        match crate::merge::apply(live, &config, &managed, &ctx, force, &schema) {
            Ok((obj, _)) => Ok(obj),
            Err(ApplyError::Conflicts(c)) => Err(conflict_error(&c)),
            Err(ApplyError::Invalid(m)) => Err(ApiError::bad_request(m)),
        }
    };
    o.manager = Some(manager.clone());
    o.applied = true;
    // A lost create race (or a delete between read and write) goes around again.
    for _ in 0..3 {
        match r.patch(ns, &name, &|cur| run(Some(&cur)), t.status, &o).await {
            Ok(v) => return Ok(json_response(StatusCode::OK, &v, &warnings)),
            Err(e) if e.is_not_found() && !t.status => {}
            Err(e) => return Err(e),
        }
        match r.create(ns, run(None)?, &o).await {
            Ok(v) => return Ok(json_response(StatusCode::CREATED, &v, &warnings)),
            Err(e) if e.reason == crate::errors::Reason::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    Err(ApiError::conflict(
        r.info(),
        &name,
        crate::errors::ConflictKind::Stale,
        "the object was created and deleted concurrently; try again",
    ))
}

/// The transformation of a strategic merge patch (PATCH-04), driven by the kind's
/// `x-kubernetes-patch-strategy`/`x-kubernetes-patch-merge-key`.
pub(super) fn strategic(t: &Target, doc: Value) -> Box<dyn Fn(Value) -> Result<Value> + Send + Sync> {
    let schema = merge_schema(&*t.resource);
    Box::new(move |cur: Value| {
        crate::merge::strategic_merge(&cur, &doc, &schema)
            .map_err(|e| ApiError::bad_request(format!("invalid strategic merge patch: {e}")))
    })
}
