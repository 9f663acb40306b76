//! The generic REST verbs over any [`Resource`](crate::registry::Resource) of the table.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use self::table::Repr;
use self::watch::WatchRequest;
use crate::errors::{ApiError, Result};
use crate::registry::Resource;
use crate::registry::cache::WatchCache;
use crate::registry::hooks::Requester;
use crate::registry::selector::{FieldSelector, LabelSelector};
use crate::registry::store::{DeleteOptions, Deleted, ListParams, WriteOptions};
use crate::registry::validate::{ErrorType, FieldError, FieldErrors, FieldPath};

mod apply;
mod body;
mod fields;
pub mod list_body;
mod protobuf;
pub mod table;
pub mod watch;

/// Patch types accepted by the server.
pub const PATCH_TYPES: &[&str] = &[
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
];

use list_body::ListBody;

use body::{body_json, dedup_owner_references, field_validation, is_protobuf, validation_mode};

/// Where a request points inside the group-version.
pub struct Target {
    /// The kind.
    pub resource: Arc<dyn Resource>,
    /// Its watch cache.
    pub cache: Arc<WatchCache>,
    /// Namespace from the URL.
    pub namespace: Option<String>,
    /// Object name, for item requests.
    pub name: Option<String>,
    /// `/status`.
    pub status: bool,
    /// Who asks (set by the HTTP layer after authentication); a write without one is refused.
    pub requester: Option<Requester>,
}

fn json_response(code: StatusCode, v: &Value, warnings: &[String]) -> Response {
    let mut r = (code, v.to_string()).into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    for w in warnings {
        let text = format!("299 - \"{}\"", w.replace('"', "'"));
        if let Ok(h) = HeaderValue::from_str(&text) {
            r.headers_mut().append("warning", h);
        }
    }
    r
}

fn flag(q: &HashMap<String, String>, k: &str) -> bool {
    q.get(k).is_some_and(|v| v == "true" || v == "1")
}

fn dry_run(q: &HashMap<String, String>, kind: &str) -> Result<bool> {
    match q.get("dryRun").map(String::as_str) {
        None | Some("") => Ok(false),
        Some("All") => Ok(true),
        Some(v) => Err(options_invalid(kind, "dryRun", v, "supported values: \"All\"")),
    }
}

fn options_invalid(kind: &str, field: &str, value: &str, detail: &str) -> ApiError {
    let mut e = FieldError::invalid(FieldPath::new(field), value, detail);
    e.kind = ErrorType::NotSupported;
    let errs = FieldErrors::from(e);
    ApiError::invalid(kind, "meta.k8s.io", "", &errs)
}

fn options_forbidden(kind: &str, field: &str, detail: &str) -> ApiError {
    let errs = FieldErrors::from(FieldError::forbidden(FieldPath::new(field), detail));
    ApiError::invalid(kind, "meta.k8s.io", "", &errs)
}

fn list_params(r: &dyn Resource, q: &HashMap<String, String>, watch: bool) -> Result<ListParams> {
    let labels = LabelSelector::parse(q.get("labelSelector").map(String::as_str).unwrap_or(""))
        .map_err(ApiError::bad_request)?;
    let fields = FieldSelector::parse(
        q.get("fieldSelector").map(String::as_str).unwrap_or(""),
        r.selectable_fields(),
    )
    .map_err(ApiError::bad_request)?;
    let rv = q
        .get("resourceVersion")
        .map(String::as_str)
        .filter(|s| !s.is_empty());
    let rv_num = match rv {
        Some(v) => Some(v.parse::<u64>().map_err(|_| {
            ApiError::bad_request(format!(
                "resourceVersion: Invalid value: {v:?}: must be an integer"
            ))
        })?),
        None => None,
    };
    let m = q
        .get("resourceVersionMatch")
        .map(String::as_str)
        .filter(|s| !s.is_empty());
    let cont = q.get("continue").filter(|s| !s.is_empty()).cloned();
    let sie = q.contains_key("sendInitialEvents");
    if sie && !watch {
        return Err(options_forbidden(
            "ListOptions",
            "sendInitialEvents",
            "sendInitialEvents is forbidden for list",
        ));
    }
    let mut p = ListParams {
        labels,
        fields,
        continue_token: cont.clone(),
        ..Default::default()
    };
    p.limit = match q.get("limit").filter(|s| !s.is_empty()) {
        Some(l) => Some(
            l.parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("invalid limit {l:?}")))?,
        ),
        None => None,
    };
    if let Some(m) = m {
        // A streaming list may start "now" (resourceVersion unset) with NotOlderThan.
        if rv.is_none() && !(watch && sie) {
            return Err(options_forbidden(
                "ListOptions",
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden unless resourceVersion is provided",
            ));
        }
        if cont.is_some() {
            return Err(options_forbidden(
                "ListOptions",
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden when continue is provided",
            ));
        }
        match m {
            "NotOlderThan" => {
                p.min_revision = rv_num.filter(|r| *r > 0);
                p.any_revision = rv_num == Some(0);
            }
            "Exact" if !watch => {
                if rv_num == Some(0) {
                    return Err(options_forbidden(
                        "ListOptions",
                        "resourceVersionMatch",
                        "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                    ));
                }
                p.revision = rv_num;
            }
            other => {
                return Err(options_invalid(
                    "ListOptions",
                    "resourceVersionMatch",
                    other,
                    "supported values: \"Exact\", \"NotOlderThan\"",
                ));
            }
        }
    } else if !watch {
        match rv_num {
            // A paged list at X reads exactly X; otherwise X means "not older than X".
            Some(x) if x > 0 && p.limit.is_some_and(|l| l > 0) && cont.is_none() => p.revision = Some(x),
            Some(x) if x > 0 => p.min_revision = Some(x),
            Some(_) => p.any_revision = true,
            None => {}
        }
    }
    Ok(p)
}

/// GET of a collection (list or watch).
pub async fn list(t: Target, q: HashMap<String, String>, headers: &HeaderMap) -> Result<Response> {
    let repr = table::negotiate(headers)?;
    let include = table::include(q.get("includeObject").map(String::as_str))?;
    let r = &*t.resource;
    let watch = flag(&q, "watch");
    let p = list_params(r, &q, watch)?;
    if watch {
        return start_watch(&t, &q, p, repr, include);
    }
    let page = t.cache.list(t.namespace.as_deref(), &p).await?;
    let meta = list_body::list_meta(&page);
    let i = r.info();
    // Each item is parsed only for the representations that need its fields; no tree of the
    // whole list is built.
    let parsed = |b: &Bytes| serde_json::from_slice::<Value>(b).map_err(ApiError::internal);
    let body = match repr {
        Repr::Object => {
            ListBody::new(i.list_kind, &crate::registry::api_version(i), &meta, page.items).into_body()
        }
        Repr::Metadata => {
            let items = page
                .items
                .iter()
                .map(|b| {
                    let partial = table::partial(&parsed(b)?);
                    Ok(Bytes::from(
                        serde_json::to_vec(&partial).map_err(ApiError::internal)?,
                    ))
                })
                .collect::<Result<Vec<_>>>()?;
            ListBody::new("PartialObjectMetadataList", "meta.k8s.io/v1", &meta, items).into_body()
        }
        Repr::Table => {
            let rows = page
                .items
                .iter()
                .map(|b| Ok(table::row(r, &parsed(b)?, include)))
                .collect::<Result<Vec<_>>>()?;
            Body::from(table::table_of_rows(r, rows, &meta, true).to_string())
        }
    };
    let mut resp = Response::new(body);
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Ok(resp)
}

fn start_watch(
    t: &Target,
    q: &HashMap<String, String>,
    mut p: ListParams,
    repr: Repr,
    include: table::Include,
) -> Result<Response> {
    let rv = q
        .get("resourceVersion")
        .map(String::as_str)
        .filter(|s| !s.is_empty());
    let sie = q.get("sendInitialEvents").map(|v| v == "true" || v == "1");
    let m = q
        .get("resourceVersionMatch")
        .map(String::as_str)
        .filter(|s| !s.is_empty());
    if sie.is_some() && m != Some("NotOlderThan") {
        return Err(options_forbidden(
            "ListOptions",
            "sendInitialEvents",
            "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
        ));
    }
    if sie.is_none() && m.is_some() {
        return Err(options_forbidden(
            "ListOptions",
            "resourceVersionMatch",
            "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
        ));
    }
    if let Some(n) = &t.name {
        if let Some(f) = p.fields.name()
            && f != n
        {
            return Err(ApiError::bad_request(
                "fieldSelector metadata.name doesn't match requested name",
            ));
        }
        p.fields = FieldSelector::parse(&format!("metadata.name={n}"), &[]).map_err(ApiError::bad_request)?;
    }
    let start = rv.and_then(|v| v.parse::<u64>().ok());
    let legacy_initial = sie.is_none() && start.unwrap_or(0) == 0;
    let initial = sie == Some(true) || legacy_initial;
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|s| s.parse::<u64>().ok())
        .filter(|s| *s > 0)
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(1800 + rand::random::<u64>() % 1800));
    let w = WatchRequest {
        namespace: t.namespace.clone(),
        start: start.filter(|s| *s > 0),
        initial,
        initial_end_bookmark: sie == Some(true) && flag(q, "allowWatchBookmarks"),
        bookmarks: flag(q, "allowWatchBookmarks"),
        params: p,
        timeout,
        repr,
        include,
    };
    let body = Body::from_stream(watch::stream(t.cache.clone(), w));
    let mut r = Response::new(body);
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    Ok(r)
}

/// GET of one object.
pub async fn get(t: Target, q: HashMap<String, String>, headers: &HeaderMap) -> Result<Response> {
    if flag(&q, "watch") {
        return list(t, q, headers).await;
    }
    let repr = table::negotiate(headers)?;
    let include = table::include(q.get("includeObject").map(String::as_str))?;
    let name = t.name.as_deref().unwrap_or_default();
    let obj = t.resource.get(t.namespace.as_deref(), name).await?;
    let body = match repr {
        Repr::Object => obj,
        Repr::Metadata => table::partial(&obj),
        Repr::Table => {
            let rv = obj
                .pointer("/metadata/resourceVersion")
                .cloned()
                .unwrap_or(json!(""));
            table::table(
                &*t.resource,
                std::slice::from_ref(&obj),
                &json!({ "resourceVersion": rv }),
                include,
                true,
            )
        }
    };
    Ok(json_response(StatusCode::OK, &body, &[]))
}

/// POST of a new object.
pub async fn create(
    t: Target,
    q: HashMap<String, String>,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Response> {
    let o = write_options(&t, &q, headers, "CreateOptions")?;
    let mut sent = body_json(&*t.resource, headers, &body)?;
    let mode = validation_mode(&q)?;
    // Decoding comes first, as in Go: Strict refuses before anything is validated or written.
    let raw = (!is_protobuf(headers)).then_some(&body[..]);
    let mut warnings = field_validation(&*t.resource, mode, raw, &sent)?;
    warnings.extend(dedup_owner_references(&mut sent));
    let created = t.resource.create(t.namespace.as_deref(), sent, &o).await?;
    Ok(json_response(StatusCode::CREATED, &created, &warnings))
}

/// The options every write takes from its query and headers; `kind` names the Kubernetes
/// options type in error messages (`CreateOptions`, `UpdateOptions`, `PatchOptions`).
fn write_options(
    t: &Target,
    q: &HashMap<String, String>,
    headers: &HeaderMap,
    kind: &str,
) -> Result<WriteOptions> {
    // Fail closed: a write that reached a handler without a requester is a wiring bug, and
    // admitting it as the server would skip every admission check.
    let requester = t
        .requester
        .clone()
        .ok_or_else(|| ApiError::internal("a write request carries no requester"))?;
    Ok(WriteOptions {
        requester,
        dry_run: dry_run(q, kind)?,
        manager: apply::field_manager(q, headers, kind)?,
        applied: false,
    })
}

/// PUT of an object or its status.
pub async fn update(
    t: Target,
    q: HashMap<String, String>,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Response> {
    let o = write_options(&t, &q, headers, "UpdateOptions")?;
    let mut sent = body_json(&*t.resource, headers, &body)?;
    let name = t.name.as_deref().unwrap_or_default();
    let mode = validation_mode(&q)?;
    let raw = (!is_protobuf(headers)).then_some(&body[..]);
    let mut warnings = field_validation(&*t.resource, mode, raw, &sent)?;
    warnings.extend(dedup_owner_references(&mut sent));
    let updated = t
        .resource
        .update(t.namespace.as_deref(), name, sent, t.status, &o)
        .await?;
    Ok(json_response(StatusCode::OK, &updated, &warnings))
}

/// PATCH of an object or its status.
pub async fn patch(
    t: Target,
    q: HashMap<String, String>,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Response> {
    let o = write_options(&t, &q, headers, "PatchOptions")?;
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let ct = ct.split(';').next().unwrap_or_default().trim().to_string();
    if ct == "application/apply-patch+yaml" {
        return apply::apply_patch(t, q, body, o).await;
    }
    if !PATCH_TYPES.contains(&ct.as_str()) {
        return Err(ApiError::unsupported_media_type(format!(
            "the body of the request was in an unknown format - accepted media types include: {} (got {ct:?})",
            PATCH_TYPES.join(", ")
        )));
    }
    apply::check_force(&q)?;
    let name = t.name.clone().unwrap_or_default();
    let doc: Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("the patch is not valid JSON: {e}")))?;
    let apply: Box<dyn Fn(Value) -> Result<Value> + Send + Sync> = match ct.as_str() {
        "application/json-patch+json" => {
            let p: json_patch::Patch = serde_json::from_value(doc)
                .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))?;
            let kind = t.resource.info().kind;
            let group = t.resource.info().group;
            let n = name.clone();
            Box::new(move |mut cur: Value| {
                json_patch::patch(&mut cur, &p).map_err(|e| {
                    let errs =
                        FieldErrors::from(FieldError::invalid(FieldPath::new("patch"), "", e.to_string()));
                    ApiError::invalid(kind, group, &n, &errs)
                })?;
                Ok(cur)
            })
        }
        "application/merge-patch+json" => Box::new(move |mut cur: Value| {
            json_patch::merge(&mut cur, &doc);
            Ok(cur)
        }),
        "application/strategic-merge-patch+json" => apply::strategic(&t, doc),
        other => {
            return Err(ApiError::unsupported_media_type(format!(
                "the body of the request was in an unknown format - accepted media types include: {} (got {other:?})",
                PATCH_TYPES.join(", ")
            )));
        }
    };
    // fieldValidation judges the patched object: the stored one has no unknown fields, so any
    // found came from the patch. Strict fails inside the write, before anything is stored.
    let mode = validation_mode(&q)?;
    let dups = matches!(
        ct.as_str(),
        "application/merge-patch+json" | "application/strategic-merge-patch+json"
    )
    .then_some(&body[..]);
    let warnings = std::sync::Mutex::new(Vec::new());
    let checked = |cur: Value| -> Result<Value> {
        let mut out = apply(cur)?;
        let mut w = field_validation(&*t.resource, mode, dups, &out)?;
        w.extend(dedup_owner_references(&mut out));
        *warnings.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = w;
        Ok(out)
    };
    let patched = t
        .resource
        .patch(t.namespace.as_deref(), &name, &checked, t.status, &o)
        .await?;
    let warnings = warnings
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    Ok(json_response(StatusCode::OK, &patched, &warnings))
}

fn delete_options(q: &HashMap<String, String>, body: &Bytes) -> Result<DeleteOptions> {
    let b: Value = if body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("invalid DeleteOptions: {e}")))?
    };
    let mut o = DeleteOptions {
        dry_run: dry_run(q, "DeleteOptions")?,
        uid: b
            .pointer("/preconditions/uid")
            .and_then(Value::as_str)
            .map(str::to_string),
        resource_version: b
            .pointer("/preconditions/resourceVersion")
            .and_then(Value::as_str)
            .map(str::to_string),
        propagation: b
            .get("propagationPolicy")
            .and_then(Value::as_str)
            .map(str::to_string),
    };
    if let Some(d) = b.get("dryRun").and_then(Value::as_array) {
        for v in d {
            match v.as_str() {
                Some("All") => o.dry_run = true,
                other => {
                    return Err(options_invalid(
                        "DeleteOptions",
                        "dryRun",
                        other.unwrap_or_default(),
                        "supported values: \"All\"",
                    ));
                }
            }
        }
    }
    if let Some(p) = q.get("propagationPolicy") {
        o.propagation = Some(p.clone());
    }
    if let Some(p) = &o.propagation
        && !matches!(p.as_str(), "Orphan" | "Background" | "Foreground")
    {
        return Err(options_invalid(
            "DeleteOptions",
            "propagationPolicy",
            p,
            "supported values: \"Foreground\", \"Background\", \"Orphan\"",
        ));
    }
    if o.propagation.is_some() && b.get("orphanDependents").is_some_and(|v| !v.is_null()) {
        return Err(options_forbidden(
            "DeleteOptions",
            "propagationPolicy",
            "orphanDependents and deletionPropagation cannot be both set",
        ));
    }
    Ok(o)
}

/// DELETE of one object.
pub async fn delete(t: Target, q: HashMap<String, String>, body: Bytes) -> Result<Response> {
    let o = delete_options(&q, &body)?;
    let name = t.name.as_deref().unwrap_or_default();
    let i = t.resource.info();
    match t.resource.delete(t.namespace.as_deref(), name, &o).await? {
        Deleted::Marked(obj) => Ok(json_response(StatusCode::OK, &obj, &[])),
        Deleted::Gone(obj) => {
            let uid = obj.pointer("/metadata/uid").cloned().unwrap_or(json!(""));
            let s = json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "details": { "name": name, "group": i.group, "kind": i.plural, "uid": uid },
            });
            Ok(json_response(StatusCode::OK, &s, &[]))
        }
    }
}

/// DELETE of a collection: every matching object is deleted (or marked).
pub async fn delete_collection(t: Target, q: HashMap<String, String>, body: Bytes) -> Result<Response> {
    let o = delete_options(&q, &body)?;
    let r = &*t.resource;
    let p = list_params(r, &q, false)?;
    let page = r
        .list(
            t.namespace.as_deref(),
            &ListParams {
                limit: None,
                continue_token: None,
                ..p
            },
        )
        .await?;
    let mut items = Vec::new();
    for obj in &page.items {
        let name = obj
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let ns = obj.pointer("/metadata/namespace").and_then(Value::as_str);
        match r.delete(ns, name, &o).await {
            Ok(Deleted::Gone(v) | Deleted::Marked(v)) => items.push(v),
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e),
        }
    }
    let i = r.info();
    let body = json!({ "kind": i.list_kind, "apiVersion": crate::registry::api_version(i), "metadata": { "resourceVersion": page.revision.to_string() }, "items": items });
    Ok(json_response(StatusCode::OK, &body, &[]))
}

/// Dispatches a verb on a target.
pub async fn dispatch(
    t: Target,
    method: &Method,
    q: HashMap<String, String>,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Response> {
    if t.resource.info().namespaced && t.namespace.is_none() && method != Method::GET {
        return Err(ApiError::method_not_allowed(method.as_str()));
    }
    match (method.as_str(), t.name.is_some()) {
        ("GET", false) => list(t, q, headers).await,
        ("GET", true) => get(t, q, headers).await,
        ("POST", false) if !t.status => create(t, q, headers, body).await,
        ("PUT", true) => update(t, q, headers, body).await,
        ("PATCH", true) => patch(t, q, headers, body).await,
        ("DELETE", true) if !t.status => delete(t, q, body).await,
        ("DELETE", false) => delete_collection(t, q, body).await,
        (m, _) => Err(ApiError::method_not_allowed(m)),
    }
}
