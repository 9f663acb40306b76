//! The body of a write: decoding (JSON, or kubectl's protobuf for core kinds), and
//! `fieldValidation` (unknown and duplicate fields) and owner-reference clean-up on it.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::http::{HeaderMap, header};
use serde_json::Value;

use super::{fields, protobuf};
use crate::errors::{ApiError, Result};
use crate::registry::Resource;

/// Whether the body is protobuf (kubectl's typed commands; see [`protobuf`]).
pub(super) fn is_protobuf(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.split(';').next().unwrap_or_default().trim() == protobuf::MEDIA)
}

/// The request body for `r` as JSON; `fieldValidation` decides what unknown fields do. Protobuf
/// is decoded for core kinds only (kubectl sends it for those alone; our group's kinds, like
/// custom resources, have no protobuf form).
pub(super) fn body_json(r: &dyn Resource, headers: &HeaderMap, body: &Bytes) -> Result<Value> {
    if is_protobuf(headers) && r.info().group.is_empty() {
        return protobuf::decode(body);
    }
    if let Some(ct) = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()) {
        let base = ct.split(';').next().unwrap_or_default().trim();
        if !base.is_empty() && base != "application/json" && base != "*/*" {
            return Err(ApiError::unsupported_media_type(format!(
                "the body of the request was in an unknown format - accepted media types include: application/json (got {base})"
            )));
        }
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}")))
}

/// Paths of keys that appear twice in one JSON object of `body` (serde_json keeps the last).
fn duplicate_fields(body: &[u8]) -> Vec<String> {
    use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
    struct Seek<'a> {
        path: String,
        out: &'a mut Vec<String>,
    }
    impl<'de> DeserializeSeed<'de> for Seek<'_> {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }
    impl<'de> Visitor<'de> for Seek<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("JSON")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> std::result::Result<(), A::Error> {
            let mut seen = std::collections::HashSet::new();
            while let Some(k) = m.next_key::<String>()? {
                let p = if self.path.is_empty() {
                    k.clone()
                } else {
                    format!("{}.{k}", self.path)
                };
                if !seen.insert(k) {
                    self.out.push(p.clone());
                }
                m.next_value_seed(Seek {
                    path: p,
                    out: self.out,
                })?;
            }
            Ok(())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> std::result::Result<(), A::Error> {
            let mut i = 0;
            while s
                .next_element_seed(Seek {
                    path: format!("{}[{i}]", self.path),
                    out: self.out,
                })?
                .is_some()
            {
                i += 1;
            }
            Ok(())
        }
        fn visit_bool<E>(self, _: bool) -> std::result::Result<(), E> {
            Ok(())
        }
        fn visit_i64<E>(self, _: i64) -> std::result::Result<(), E> {
            Ok(())
        }
        fn visit_u64<E>(self, _: u64) -> std::result::Result<(), E> {
            Ok(())
        }
        fn visit_f64<E>(self, _: f64) -> std::result::Result<(), E> {
            Ok(())
        }
        fn visit_str<E>(self, _: &str) -> std::result::Result<(), E> {
            Ok(())
        }
        fn visit_unit<E>(self) -> std::result::Result<(), E> {
            Ok(())
        }
    }
    let mut out = Vec::new();
    let mut d = serde_json::Deserializer::from_slice(body);
    let _ = Seek {
        path: String::new(),
        out: &mut out,
    }
    .deserialize(&mut d);
    out
}

/// OBJ-18: removes exact duplicates from `metadata.ownerReferences` and warns about them, and
/// about distinct entries sharing a UID.
pub(super) fn dedup_owner_references(v: &mut Value) -> Vec<String> {
    let Some(Value::Array(owners)) = v.pointer_mut("/metadata/ownerReferences") else {
        return vec![];
    };
    let mut kept: Vec<Value> = Vec::with_capacity(owners.len());
    let mut dropped = false;
    for o in owners.drain(..) {
        if kept.contains(&o) {
            dropped = true;
        } else {
            kept.push(o);
        }
    }
    let mut warnings = Vec::new();
    if dropped {
        warnings.push(
            "metadata.ownerReferences contains duplicate entries; the server removed the duplicates"
                .to_string(),
        );
    }
    let mut uids = std::collections::HashSet::new();
    for o in &kept {
        if let Some(u) = o.get("uid").and_then(Value::as_str)
            && !uids.insert(u)
        {
            warnings.push(format!(
                "metadata.ownerReferences: more than one entry has UID {u:?}"
            ));
        }
    }
    *owners = kept;
    warnings
}

/// The `fieldValidation` mode of a write: `Strict`, `Warn` (the default) or `Ignore`.
pub(super) fn validation_mode(q: &HashMap<String, String>) -> Result<&str> {
    match q.get("fieldValidation").map(String::as_str) {
        None | Some("") => Ok("Warn"),
        Some(m @ ("Strict" | "Warn" | "Ignore")) => Ok(m),
        Some(m) => Err(ApiError::bad_request(format!(
            "fieldValidation: invalid value {m:?}; supported values: \"Ignore\", \"Warn\", \"Strict\""
        ))),
    }
}

/// Applies `fieldValidation` to the unknown fields of `sent` (judged by the kind's schema) and to
/// the duplicate fields of `raw` (if given): Strict fails with 400, Warn returns warnings, Ignore
/// drops them.
pub(super) fn field_validation(
    r: &dyn Resource,
    mode: &str,
    raw: Option<&[u8]>,
    sent: &Value,
) -> Result<Vec<String>> {
    if mode == "Ignore" {
        return Ok(vec![]);
    }
    let mut msgs: Vec<String> = raw
        .map(duplicate_fields)
        .unwrap_or_default()
        .iter()
        .map(|f| format!("duplicate field \"{f}\""))
        .collect();
    msgs.extend(
        fields::schema_of(r)
            .unknown_fields(sent)
            .iter()
            .map(|f| format!("unknown field \"{f}\"")),
    );
    if mode == "Strict" && !msgs.is_empty() {
        return Err(ApiError::bad_request(format!(
            "strict decoding error: {}",
            msgs.join(", ")
        )));
    }
    Ok(msgs)
}
