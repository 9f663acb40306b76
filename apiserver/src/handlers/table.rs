//! Content negotiation and the alternate representations kubectl and controllers ask for:
//! `Table` (kubectl get) and `PartialObjectMetadata[List]` (metadata informers).

use axum::http::HeaderMap;
use serde_json::{Value, json};

use crate::errors::{ApiError, Result};
use crate::registry::Resource;

/// What the client wants back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Repr {
    /// The object (or list) itself.
    Object,
    /// `meta.k8s.io/v1` Table.
    Table,
    /// `PartialObjectMetadata` (item) / `PartialObjectMetadataList` (list).
    Metadata,
}

/// Picks the first acceptable media type of `Accept`, in the client's order.
pub fn negotiate(headers: &HeaderMap) -> Result<Repr> {
    let Some(accept) = headers
        .get(axum::http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
    else {
        return Ok(Repr::Object);
    };
    if accept.trim().is_empty() {
        return Ok(Repr::Object);
    }
    for mt in accept.split(',') {
        let mut parts = mt.split(';').map(str::trim);
        let base = parts.next().unwrap_or_default().to_ascii_lowercase();
        let (mut as_, mut g, mut v) = (None, None, None);
        for p in parts {
            if let Some((k, val)) = p.split_once('=') {
                match k.trim() {
                    "as" => as_ = Some(val.trim().to_string()),
                    "g" => g = Some(val.trim().to_string()),
                    "v" => v = Some(val.trim().to_string()),
                    _ => {}
                }
            }
        }
        if !matches!(base.as_str(), "application/json" | "*/*" | "application/*") {
            continue;
        }
        match as_.as_deref() {
            None => return Ok(Repr::Object),
            Some(a)
                if g.as_deref() == Some("meta.k8s.io") && matches!(v.as_deref(), Some("v1" | "v1beta1")) =>
            {
                match a {
                    "Table" => return Ok(Repr::Table),
                    "PartialObjectMetadata" | "PartialObjectMetadataList" => return Ok(Repr::Metadata),
                    _ => continue,
                }
            }
            _ => continue,
        }
    }
    Err(ApiError::not_acceptable(format!(
        "only the following media types are accepted: application/json, application/json;as=Table;v=v1;g=meta.k8s.io, application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io (requested {accept})"
    )))
}

/// `includeObject` of a Table request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Include {
    /// No object in rows.
    None,
    /// PartialObjectMetadata (default).
    Metadata,
    /// The full object.
    Object,
}

/// Parses `includeObject`.
pub fn include(v: Option<&str>) -> Result<Include> {
    match v {
        None | Some("") | Some("Metadata") => Ok(Include::Metadata),
        Some("None") => Ok(Include::None),
        Some("Object") => Ok(Include::Object),
        Some(o) => Err(ApiError::bad_request(format!(
            "unrecognized includeObject value: {o:?}"
        ))),
    }
}

/// `PartialObjectMetadata` of an object.
pub fn partial(obj: &Value) -> Value {
    json!({ "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj.get("metadata").cloned().unwrap_or(json!({})) })
}

/// The column definitions: Name, the kind's columns, Age.
pub fn column_definitions(r: &dyn Resource) -> Vec<Value> {
    let mut cols = vec![
        json!({"name":"Name","type":"string","format":"name","description":"Name must be unique within a namespace.","priority":0}),
    ];
    for c in r.columns() {
        cols.push(json!({"name":c.name,"type":c.kind,"format":"","description":c.description,"priority":c.priority}));
    }
    // kubectl prints cells verbatim, so the age is rendered here, as Go's printers do.
    cols.push(json!({"name":"Age","type":"string","format":"","description":"Time since the object was created.","priority":0}));
    cols
}

fn cell(v: Option<&Value>, kind: &str) -> Value {
    match v {
        None | Some(Value::Null) => match kind {
            "integer" | "number" => json!(0),
            "boolean" => json!(false),
            _ => json!(""),
        },
        Some(Value::Array(a)) => json!(
            a.iter()
                .map(|x| x.as_str().map(str::to_string).unwrap_or_else(|| x.to_string()))
                .collect::<Vec<_>>()
                .join(",")
        ),
        Some(x) => x.clone(),
    }
}

/// One Table row.
pub fn row(r: &dyn Resource, obj: &Value, inc: Include) -> Value {
    let mut cells = vec![obj.pointer("/metadata/name").cloned().unwrap_or(json!(""))];
    for c in r.columns() {
        cells.push(cell(obj.pointer(c.pointer), c.kind));
    }
    cells.push(json!(age(obj
        .pointer("/metadata/creationTimestamp")
        .and_then(Value::as_str))));
    let object = match inc {
        Include::None => Value::Null,
        Include::Metadata => partial(obj),
        Include::Object => obj.clone(),
    };
    json!({ "cells": cells, "object": object })
}

/// A Table of `items`; `with_columns` is false for watch events after the first.
pub fn table(
    r: &dyn Resource,
    items: &[Value],
    list_meta: &Value,
    inc: Include,
    with_columns: bool,
) -> Value {
    let rows: Vec<Value> = items.iter().map(|o| row(r, o, inc)).collect();
    table_of_rows(r, rows, list_meta, with_columns)
}

/// A Table of rows made by [`row`].
pub fn table_of_rows(r: &dyn Resource, rows: Vec<Value>, list_meta: &Value, with_columns: bool) -> Value {
    let mut t = json!({ "kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta });
    // Moved in, not serialized into a copy.
    t["rows"] = Value::Array(rows);
    t["columnDefinitions"] = if with_columns {
        Value::Array(column_definitions(r))
    } else {
        json!([])
    };
    t
}

/// Kubernetes' short human duration since `ts` (`45s`, `3m2s`, `5h`, `2d`, …); `<unknown>` if unset.
pub fn age(ts: Option<&str>) -> String {
    let Some(t) = ts.and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok()) else {
        return "<unknown>".into();
    };
    let s = (k8s_openapi::jiff::Timestamp::now().as_second() - t.as_second()).max(0);
    let (m, h, d) = (s / 60, s / 3600, s / 86400);
    match s {
        _ if s < 120 => format!("{s}s"),
        _ if m < 10 => format!("{m}m{}s", s % 60),
        _ if h < 3 => format!("{m}m"),
        _ if h < 8 => format!("{h}h{}m", m % 60),
        _ if h < 48 => format!("{h}h"),
        _ if d < 8 => format!("{d}d{}h", h % 24),
        _ if d < 365 * 2 => format!("{d}d"),
        _ => format!("{}y", d / 365),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubectl_table_accept_picks_table_and_plain_json_picks_object() {
        let mut h = HeaderMap::new();
        h.insert("accept", "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json".parse().unwrap());
        assert_eq!(negotiate(&h).unwrap(), Repr::Table);
        h.insert("accept", "application/json".parse().unwrap());
        assert_eq!(negotiate(&h).unwrap(), Repr::Object);
        h.insert("accept", "application/vnd.kubernetes.protobuf".parse().unwrap());
        assert_eq!(negotiate(&h).unwrap_err().code, 406);
    }

    #[test]
    fn age_is_short_and_human() {
        assert_eq!(age(None), "<unknown>");
        let t = k8s_openapi::jiff::Timestamp::from_second(
            k8s_openapi::jiff::Timestamp::now().as_second() - 3 * 86400,
        )
        .unwrap();
        assert_eq!(age(Some(&t.to_string())), "3d0h");
    }
}
