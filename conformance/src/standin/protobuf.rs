//! Just enough of Kubernetes' protobuf request encoding for kubectl's typed commands
//! (`create namespace|configmap|rolebinding|clusterrolebinding`, `auth can-i`): the `k8s\0`
//! envelope and a small schema table, decoded to the JSON the stores speak. Responses are
//! always JSON (kubectl accepts both).

use serde_json::{Map, Value, json};

#[derive(Clone, Copy)]
enum Ty {
    Str,
    Bool,
    StrMap,
    Msg(&'static [Field]),
}

#[derive(Clone, Copy)]
struct Field(u64, &'static str, Ty, bool);

const OBJECT_META: &[Field] = &[
    Field(1, "name", Ty::Str, false),
    Field(2, "generateName", Ty::Str, false),
    Field(3, "namespace", Ty::Str, false),
    Field(5, "uid", Ty::Str, false),
    Field(6, "resourceVersion", Ty::Str, false),
    Field(11, "labels", Ty::StrMap, false),
    Field(12, "annotations", Ty::StrMap, false),
    Field(14, "finalizers", Ty::Str, true),
];
const NAMESPACE_SPEC: &[Field] = &[Field(1, "finalizers", Ty::Str, true)];
const NAMESPACE: &[Field] = &[
    Field(1, "metadata", Ty::Msg(OBJECT_META), false),
    Field(2, "spec", Ty::Msg(NAMESPACE_SPEC), false),
];
const CONFIG_MAP: &[Field] = &[
    Field(1, "metadata", Ty::Msg(OBJECT_META), false),
    Field(2, "data", Ty::StrMap, false),
    Field(4, "immutable", Ty::Bool, false),
];
const SUBJECT: &[Field] = &[
    Field(1, "kind", Ty::Str, false),
    Field(2, "apiGroup", Ty::Str, false),
    Field(3, "name", Ty::Str, false),
    Field(4, "namespace", Ty::Str, false),
];
const ROLE_REF: &[Field] = &[
    Field(1, "apiGroup", Ty::Str, false),
    Field(2, "kind", Ty::Str, false),
    Field(3, "name", Ty::Str, false),
];
const BINDING: &[Field] = &[
    Field(1, "metadata", Ty::Msg(OBJECT_META), false),
    Field(2, "subjects", Ty::Msg(SUBJECT), true),
    Field(3, "roleRef", Ty::Msg(ROLE_REF), false),
];
const POLICY_RULE: &[Field] = &[
    Field(1, "verbs", Ty::Str, true),
    Field(2, "apiGroups", Ty::Str, true),
    Field(3, "resources", Ty::Str, true),
    Field(4, "resourceNames", Ty::Str, true),
    Field(5, "nonResourceURLs", Ty::Str, true),
];
const ROLE: &[Field] = &[
    Field(1, "metadata", Ty::Msg(OBJECT_META), false),
    Field(2, "rules", Ty::Msg(POLICY_RULE), true),
];
const RESOURCE_ATTRS: &[Field] = &[
    Field(1, "namespace", Ty::Str, false),
    Field(2, "verb", Ty::Str, false),
    Field(3, "group", Ty::Str, false),
    Field(4, "version", Ty::Str, false),
    Field(5, "resource", Ty::Str, false),
    Field(6, "subresource", Ty::Str, false),
    Field(7, "name", Ty::Str, false),
];
const NON_RESOURCE_ATTRS: &[Field] = &[Field(1, "path", Ty::Str, false), Field(2, "verb", Ty::Str, false)];
const SSAR_SPEC: &[Field] = &[
    Field(1, "resourceAttributes", Ty::Msg(RESOURCE_ATTRS), false),
    Field(2, "nonResourceAttributes", Ty::Msg(NON_RESOURCE_ATTRS), false),
];
const SSAR: &[Field] = &[
    Field(1, "metadata", Ty::Msg(OBJECT_META), false),
    Field(2, "spec", Ty::Msg(SSAR_SPEC), false),
];
const SAR_SPEC: &[Field] = &[
    Field(1, "resourceAttributes", Ty::Msg(RESOURCE_ATTRS), false),
    Field(2, "nonResourceAttributes", Ty::Msg(NON_RESOURCE_ATTRS), false),
    Field(3, "user", Ty::Str, false),
    Field(4, "groups", Ty::Str, true),
    Field(6, "uid", Ty::Str, false),
];
const SAR: &[Field] = &[
    Field(1, "metadata", Ty::Msg(OBJECT_META), false),
    Field(2, "spec", Ty::Msg(SAR_SPEC), false),
];

fn schema(kind: &str) -> Option<&'static [Field]> {
    Some(match kind {
        "Namespace" => NAMESPACE,
        "ConfigMap" => CONFIG_MAP,
        "RoleBinding" | "ClusterRoleBinding" => BINDING,
        "Role" | "ClusterRole" => ROLE,
        "SelfSubjectAccessReview" => SSAR,
        "SubjectAccessReview" | "LocalSubjectAccessReview" => SAR,
        _ => return None,
    })
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for i in 0..10 {
            let (&b, rest) = self.0.split_first()?;
            self.0 = rest;
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }

    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = usize::try_from(self.varint()?).ok()?;
        if n > self.0.len() {
            return None;
        }
        let (b, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(b)
    }

    fn skip(&mut self, wire: u64) -> Option<()> {
        match wire {
            0 => self.varint().map(|_| ()),
            1 => self.take(8),
            2 => self.bytes().map(|_| ()),
            5 => self.take(4),
            _ => None,
        }
    }

    fn take(&mut self, n: usize) -> Option<()> {
        if n > self.0.len() {
            return None;
        }
        self.0 = &self.0[n..];
        Some(())
    }
}

fn message(buf: &[u8], fields: &[Field]) -> Option<Value> {
    let mut r = Reader(buf);
    let mut out = Map::new();
    while !r.0.is_empty() {
        let tag = r.varint()?;
        let (num, wire) = (tag >> 3, tag & 7);
        let Some(f) = fields.iter().find(|f| f.0 == num) else {
            r.skip(wire)?;
            continue;
        };
        let v = match f.2 {
            Ty::Bool if wire == 0 => json!(r.varint()? != 0),
            Ty::Str if wire == 2 => json!(String::from_utf8_lossy(r.bytes()?)),
            Ty::Msg(sub) if wire == 2 => message(r.bytes()?, sub)?,
            Ty::StrMap if wire == 2 => {
                let entry = message(
                    r.bytes()?,
                    &[Field(1, "k", Ty::Str, false), Field(2, "v", Ty::Str, false)],
                )?;
                let m = out.entry(f.1).or_insert_with(|| json!({}));
                m[entry["k"].as_str().unwrap_or_default()] = entry.get("v").cloned().unwrap_or(json!(""));
                continue;
            }
            _ => {
                r.skip(wire)?;
                continue;
            }
        };
        if f.3 {
            out.entry(f.1)
                .or_insert_with(|| json!([]))
                .as_array_mut()?
                .push(v);
        } else {
            out.insert(f.1.to_string(), v);
        }
    }
    Some(Value::Object(out))
}

/// Decodes a `application/vnd.kubernetes.protobuf` body of a kind in the table; `Err` names
/// what is not supported.
pub fn decode(body: &[u8]) -> Result<Value, String> {
    let unknown = body
        .strip_prefix(b"k8s\0")
        .ok_or("the protobuf body lacks the k8s envelope")?;
    let env = message(
        unknown,
        &[
            Field(
                1,
                "typeMeta",
                Ty::Msg(&[
                    Field(1, "apiVersion", Ty::Str, false),
                    Field(2, "kind", Ty::Str, false),
                ]),
                false,
            ),
            Field(2, "raw", Ty::Str, false),
        ],
    )
    .ok_or("malformed protobuf envelope")?;
    let kind = env
        .pointer("/typeMeta/kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let schema = schema(kind)
        .ok_or_else(|| format!("the stand-in does not decode protobuf for kind {kind:?}; send JSON"))?;
    // `raw` is bytes; re-read it without the lossy UTF-8 step.
    let mut r = Reader(unknown);
    let mut raw: &[u8] = &[];
    while !r.0.is_empty() {
        let tag = r.varint().ok_or("malformed protobuf envelope")?;
        if tag == (2 << 3) | 2 {
            raw = r.bytes().ok_or("malformed protobuf envelope")?;
        } else {
            r.skip(tag & 7).ok_or("malformed protobuf envelope")?;
        }
    }
    let mut v = message(raw, schema).ok_or("malformed protobuf object")?;
    v["apiVersion"] = env["typeMeta"]["apiVersion"].clone();
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
        let tm = field(1, &[field(1, b"v1"), field(2, b"Namespace")].concat());
        let body = [b"k8s\0".to_vec(), tm, field(2, &meta)].concat();
        let v = super::decode(&body).unwrap();
        assert_eq!(
            v,
            serde_json::json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": "t1", "labels": { "a": "b" } } })
        );
    }
}
