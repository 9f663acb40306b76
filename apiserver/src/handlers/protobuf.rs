//! The protobuf request bodies kubectl's typed commands send for core kinds: `kubectl create
//! namespace` posts an `application/vnd.kubernetes.protobuf` `Namespace`. Only that is decoded
//! (to the JSON the stores speak); anything else in protobuf, or a field this decoder does not
//! know, gets `415 Unsupported Media Type` so the client sends JSON. Responses are always JSON,
//! which kubectl accepts.
//!
//! Wire form: `k8s\0`, then a `runtime.Unknown` {1: typeMeta {1: apiVersion, 2: kind}, 2: raw}
//! whose `raw` is the object's message.

use bytes::Buf;
use prost::encoding::{WireType, decode_key, decode_varint};
use serde_json::{Map, Value, json};

use crate::errors::{ApiError, Result};

/// The media type.
pub(super) const MEDIA: &str = "application/vnd.kubernetes.protobuf";

fn unsupported(why: &str) -> ApiError {
    ApiError::unsupported_media_type(format!(
        "{why}: this server decodes protobuf only for core v1 Namespace; send application/json"
    ))
}

fn malformed() -> ApiError {
    ApiError::bad_request("the protobuf request body is malformed")
}

/// The payload of one field: length-delimited bytes, or a varint (no field decoded here is one).
enum Payload<'a> {
    Bytes(&'a [u8]),
    Varint,
}

/// The fields of a message, in order.
fn fields(mut buf: &[u8]) -> Result<Vec<(u32, Payload<'_>)>> {
    let mut out = Vec::new();
    while buf.has_remaining() {
        let (tag, wire) = decode_key(&mut buf).map_err(|_| malformed())?;
        let p = match wire {
            WireType::LengthDelimited => {
                let len = usize::try_from(decode_varint(&mut buf).map_err(|_| malformed())?)
                    .map_err(|_| malformed())?;
                if len > buf.len() {
                    return Err(malformed());
                }
                let (b, rest) = buf.split_at(len);
                buf = rest;
                Payload::Bytes(b)
            }
            WireType::Varint => {
                decode_varint(&mut buf).map_err(|_| malformed())?;
                Payload::Varint
            }
            _ => return Err(unsupported("an unexpected protobuf wire type")),
        };
        out.push((tag, p));
    }
    Ok(out)
}

fn text(p: &Payload<'_>) -> Result<String> {
    match p {
        Payload::Bytes(b) => String::from_utf8(b.to_vec()).map_err(|_| malformed()),
        Payload::Varint => Err(malformed()),
    }
}

fn bytes<'a>(p: &Payload<'a>) -> Result<&'a [u8]> {
    match p {
        Payload::Bytes(b) => Ok(b),
        Payload::Varint => Err(malformed()),
    }
}

/// A `map<string, string>` entry.
fn entry(p: &Payload<'_>) -> Result<(String, Value)> {
    let (mut k, mut v) = (String::new(), String::new());
    for (tag, f) in fields(bytes(p)?)? {
        match tag {
            1 => k = text(&f)?,
            2 => v = text(&f)?,
            _ => return Err(malformed()),
        }
    }
    Ok((k, json!(v)))
}

fn push(m: &mut Map<String, Value>, key: &str, v: Value) {
    if let Some(Value::Array(a)) = m.get_mut(key) {
        a.push(v);
    } else {
        m.insert(key.into(), json!([v]));
    }
}

/// `ObjectMeta`: the fields a client sets. Go's encoder writes every scalar field, empty or
/// not: empty strings are dropped, and the fields the server owns on create (selfLink,
/// generation, the timestamps, the grace period) are ignored.
fn object_meta(b: &[u8]) -> Result<Value> {
    let mut m = Map::new();
    for (tag, f) in fields(b)? {
        let key = match tag {
            1 => "name",
            2 => "generateName",
            3 => "namespace",
            5 => "uid",
            6 => "resourceVersion",
            4 | 7..=10 => continue,
            11 | 12 => {
                let (k, v) = entry(&f)?;
                let map = if tag == 11 { "labels" } else { "annotations" };
                if let Some(o) = m.entry(map).or_insert_with(|| json!({})).as_object_mut() {
                    o.insert(k, v);
                }
                continue;
            }
            14 => {
                push(&mut m, "finalizers", json!(text(&f)?));
                continue;
            }
            n => return Err(unsupported(&format!("ObjectMeta field {n} in protobuf"))),
        };
        let v = text(&f)?;
        if !v.is_empty() {
            m.insert(key.into(), json!(v));
        }
    }
    Ok(Value::Object(m))
}

fn namespace(b: &[u8]) -> Result<Value> {
    let mut ns = Map::new();
    for (tag, f) in fields(b)? {
        match tag {
            1 => {
                ns.insert("metadata".into(), object_meta(bytes(&f)?)?);
            }
            2 => {
                let mut spec = Map::new();
                for (t, g) in fields(bytes(&f)?)? {
                    if t != 1 {
                        return Err(unsupported(&format!("NamespaceSpec field {t} in protobuf")));
                    }
                    push(&mut spec, "finalizers", json!(text(&g)?));
                }
                ns.insert("spec".into(), Value::Object(spec));
            }
            // Status is the server's: dropped on create, as from JSON.
            3 => {}
            n => return Err(unsupported(&format!("Namespace field {n} in protobuf"))),
        }
    }
    Ok(Value::Object(ns))
}

/// Decodes a protobuf request body into JSON.
pub(super) fn decode(body: &[u8]) -> Result<Value> {
    let unknown = body
        .strip_prefix(b"k8s\0")
        .ok_or_else(|| ApiError::bad_request("the protobuf request body lacks the k8s envelope"))?;
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), &[][..]);
    for (tag, f) in fields(unknown)? {
        match tag {
            1 => {
                for (t, g) in fields(bytes(&f)?)? {
                    match t {
                        1 => api_version = text(&g)?,
                        2 => kind = text(&g)?,
                        _ => {}
                    }
                }
            }
            2 => raw = bytes(&f)?,
            // contentEncoding, contentType: empty for a plain object.
            _ => {}
        }
    }
    if (api_version.as_str(), kind.as_str()) != ("v1", "Namespace") {
        return Err(unsupported(&format!("a protobuf {kind:?} of {api_version:?}")));
    }
    let mut v = namespace(raw)?;
    v["apiVersion"] = json!(api_version);
    v["kind"] = json!(kind);
    Ok(v)
}

#[cfg(test)]
mod tests {
    fn field(num: u8, payload: &[u8]) -> Vec<u8> {
        let mut v = vec![(num << 3) | 2, u8::try_from(payload.len()).unwrap()];
        v.extend_from_slice(payload);
        v
    }

    fn envelope(kind: &[u8], raw: &[u8]) -> Vec<u8> {
        let tm = field(1, &[field(1, b"v1"), field(2, kind)].concat());
        [b"k8s\0".to_vec(), tm, field(2, raw)].concat()
    }

    #[test]
    fn decodes_a_namespace() {
        let meta = field(
            1,
            &[
                field(1, b"t1"),
                field(11, &[field(1, b"a"), field(2, b"b")].concat()),
            ]
            .concat(),
        );
        let spec = field(2, &field(1, b"kubernetes"));
        let v = super::decode(&envelope(b"Namespace", &[meta, spec].concat())).unwrap();
        assert_eq!(
            v,
            serde_json::json!({ "apiVersion": "v1", "kind": "Namespace",
                "metadata": { "name": "t1", "labels": { "a": "b" } }, "spec": { "finalizers": ["kubernetes"] } })
        );
    }

    #[test]
    fn empty_and_server_owned_fields_are_dropped() {
        // As kubectl sends them: selfLink "", creationTimestamp {}, namespace "".
        let meta = field(
            1,
            &[field(1, b"t1"), field(4, b""), field(8, &[]), field(3, b"")].concat(),
        );
        let v = super::decode(&envelope(b"Namespace", &meta)).unwrap();
        assert_eq!(v["metadata"], serde_json::json!({ "name": "t1" }));
    }

    #[test]
    fn other_kinds_and_unknown_fields_are_unsupported() {
        let e = super::decode(&envelope(b"ConfigMap", &[])).unwrap_err();
        assert_eq!(e.code, 415);
        let e = super::decode(&envelope(b"Namespace", &field(1, &field(13, b"x")))).unwrap_err();
        assert_eq!(e.code, 415);
        assert_eq!(super::decode(b"k8s\0\x0a\xff").unwrap_err().code, 400);
    }
}
