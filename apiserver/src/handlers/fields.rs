//! Unknown-field detection for `fieldValidation`: the request JSON is walked against the kind's
//! JSON schema (the one OpenAPI publishes), so a field the schema does not declare is reported
//! whatever its value — including zero values that a typed round trip would not reveal.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use schemars::generate::SchemaSettings;
use serde_json::{Map, Value};

use crate::registry::Resource;

/// A kind's root schema with the definitions its `$ref`s point into.
pub(crate) struct KindSchema {
    root: Value,
    defs: Map<String, Value>,
}

/// Deepest nesting the walk follows; deeper input is not judged (the decoder limits depth too).
const MAX_DEPTH: usize = 64;

/// The schema of `r`'s kind, built once per kind.
pub(crate) fn schema_of(r: &dyn Resource) -> Arc<KindSchema> {
    static CACHE: OnceLock<Mutex<HashMap<&'static str, Arc<KindSchema>>>> = OnceLock::new();
    let kind = r.info().kind;
    let cache = CACHE.get_or_init(Default::default);
    if let Some(s) = cache
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(kind)
    {
        return s.clone();
    }
    let mut generator = SchemaSettings::draft07()
        .with(|s| s.definitions_path = "/definitions".into())
        .into_generator();
    let root = r.schema(&mut generator).to_value();
    let defs = generator.take_definitions(true);
    let s = Arc::new(KindSchema { root, defs });
    cache
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(kind, s.clone());
    s
}

impl KindSchema {
    /// Paths (`spec.foo`, `spec.rules[0].bar`) of the fields of `v` the schema does not declare.
    pub(crate) fn unknown_fields(&self, v: &Value) -> Vec<String> {
        let mut out = Vec::new();
        self.walk(v, &self.root, "", 0, &mut out);
        out
    }

    fn resolve<'a>(&'a self, mut s: &'a Value) -> &'a Value {
        for _ in 0..32 {
            let Some(r) = s.get("$ref").and_then(Value::as_str) else {
                return s;
            };
            let name = r.strip_prefix("#/definitions/").unwrap_or(r);
            let name = name.replace("~1", "/").replace("~0", "~");
            match self.defs.get(&name) {
                Some(d) => s = d,
                None => return &Value::Bool(true),
            }
        }
        s
    }

    /// `s` and the branches of its `allOf`/`anyOf`/`oneOf`, resolved and flattened.
    fn branches<'a>(&'a self, s: &'a Value, out: &mut Vec<&'a Value>, depth: usize) {
        let s = self.resolve(s);
        out.push(s);
        if depth > 8 {
            return;
        }
        for k in ["allOf", "anyOf", "oneOf"] {
            if let Some(Value::Array(bs)) = s.get(k) {
                for b in bs {
                    self.branches(b, out, depth + 1);
                }
            }
        }
    }

    fn walk(&self, v: &Value, s: &Value, path: &str, depth: usize, out: &mut Vec<String>) {
        if depth > MAX_DEPTH {
            return;
        }
        let mut bs = Vec::new();
        self.branches(s, &mut bs, 0);
        if bs.iter().any(|b| {
            b.as_bool() == Some(true)
                || b.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
        }) {
            return;
        }
        match v {
            Value::Object(m) => {
                let props: Vec<&Map<String, Value>> = bs
                    .iter()
                    .filter_map(|b| b.get("properties").and_then(Value::as_object))
                    .collect();
                // A map schema, or `additionalProperties: true`.
                let extra = bs
                    .iter()
                    .filter_map(|b| b.get("additionalProperties"))
                    .find(|a| a.as_bool() != Some(false));
                if props.is_empty() && extra.is_none() {
                    // Free-form object (e.g. `fieldsV1`): nothing to judge.
                    return;
                }
                for (k, child) in m {
                    let p = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    if let Some(cs) = props.iter().find_map(|ps| ps.get(k)) {
                        self.walk(child, cs, &p, depth + 1, out);
                    } else if let Some(a) = extra {
                        self.walk(child, a, &p, depth + 1, out);
                    } else {
                        out.push(p);
                    }
                }
            }
            Value::Array(items) => {
                let Some(is) = bs.iter().find_map(|b| b.get("items")) else {
                    return;
                };
                for (i, child) in items.iter().enumerate() {
                    self.walk(child, is, &format!("{path}[{i}]"), depth + 1, out);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    fn kinds() -> Vec<Arc<dyn crate::registry::Resource>> {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let (dir, storage) = rt.block_on(cozyplane_storage::testing::embedded());
        std::mem::forget(dir);
        crate::registry::kinds(&storage)
    }

    #[test]
    fn unknown_fields_are_found_whatever_their_value() {
        let ks = kinds();
        let vpc = ks.iter().find(|k| k.info().kind == "VPC").unwrap();
        let s = super::schema_of(&**vpc);
        let body = json!({
            "apiVersion": "sdn.cozystack.io/v1alpha1",
            "kind": "VPC",
            "metadata": {
                "name": "a",
                "labels": { "x": "y" },
                "annotations": { "a": "b" },
                "ownerReferences": [{ "apiVersion": "v1", "kind": "K", "name": "n", "uid": "u", "bogus": 0 }],
                "managedFields": [{ "manager": "m", "fieldsV1": { "f:spec": {} } }],
                "zero": "",
            },
            "spec": { "cidrs": ["10.0.0.0/24"], "foo": 0, "bar": false, "baz": null },
            "status": { "nope": {} },
            "top": [],
        });
        let mut got = s.unknown_fields(&body);
        got.sort();
        assert_eq!(
            got,
            [
                "metadata.ownerReferences[0].bogus",
                "metadata.zero",
                "spec.bar",
                "spec.baz",
                "spec.foo",
                "status.nope",
                "top",
            ]
        );
    }

    #[test]
    fn every_kind_accepts_its_own_empty_object() {
        for k in kinds() {
            let s = super::schema_of(&*k);
            let i = k.info();
            let body = json!({
                "apiVersion": crate::registry::api_version(i),
                "kind": i.kind,
                "metadata": { "name": "a", "namespace": "n", "resourceVersion": "1", "uid": "u",
                              "creationTimestamp": "2026-01-01T00:00:00Z", "generation": 1,
                              "finalizers": ["x"], "generateName": "g" },
                "spec": {},
            });
            assert_eq!(s.unknown_fields(&body), Vec::<String>::new(), "{}", i.kind);
        }
    }
}
