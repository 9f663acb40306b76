//! OpenAPI v2 and v3 documents, built from each kind's `JsonSchema` and the table of kinds.
//!
//! PATCH advertises exactly the patch types the server accepts (JSON patch, merge patch,
//! strategic merge patch and server-side apply), so kubectl's client-side apply sends strategic
//! merge patches; POST/PUT/PATCH advertise `fieldValidation`, so kubectl validates server-side.

use std::sync::Arc;

use cozyplane_apis::{GROUP, v1alpha1::VERSION};
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha512};

use crate::registry::Resource;

/// Prefix of our definition names, so they never collide in an aggregated document.
const DEF_PREFIX: &str = "io.cozystack.sdn.v1alpha1.";

/// The documents, computed once at start.
pub struct Docs {
    /// Swagger 2.0.
    pub v2: Vec<u8>,
    /// ETag of `v2`.
    pub v2_etag: String,
    /// OpenAPI 3.0 of the group-version.
    pub v3_gv: Vec<u8>,
    /// Uppercase hex SHA-512 of `v3_gv`.
    pub v3_hash: String,
}

fn rewrite_refs(v: &mut Value, from: &str, to: &str, kinds: &[String]) {
    match v {
        Value::Object(m) => {
            if let Some(Value::String(r)) = m.get_mut("$ref")
                && let Some(name) = r.strip_prefix(from)
            {
                *r = format!("{to}{}", def_name(name, kinds));
            }
            // Swagger 2.0 has no `nullable`/`oneOf`; drop what old parsers choke on.
            for (_, c) in m.iter_mut() {
                rewrite_refs(c, from, to, kinds);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|c| rewrite_refs(c, from, to, kinds)),
        _ => {}
    }
}

fn def_name(name: &str, _kinds: &[String]) -> String {
    if name.starts_with("io.k8s.") {
        name.to_string()
    } else {
        format!("{DEF_PREFIX}{name}")
    }
}

fn definitions(kinds: &[Arc<dyn Resource>], v3: bool) -> (Map<String, Value>, Vec<String>) {
    let settings = if v3 {
        SchemaSettings::openapi3()
    } else {
        SchemaSettings::draft07().with(|s| s.definitions_path = "/definitions".into())
    };
    let mut generator = settings.into_generator();
    let mut roots = Vec::new();
    for k in kinds {
        let root = k.schema(&mut generator);
        let name = root
            .get("$ref")
            .and_then(Value::as_str)
            .and_then(|r| r.rsplit('/').next())
            .unwrap_or(k.info().kind)
            .to_string();
        roots.push(name);
    }
    let defs: Map<String, Value> = generator.take_definitions(true).into_iter().collect();
    let (from, to) = if v3 {
        ("#/components/schemas/", "#/components/schemas/")
    } else {
        ("#/definitions/", "#/definitions/")
    };
    let mut out = Map::new();
    for (name, mut schema) in defs {
        rewrite_refs(&mut schema, from, to, &roots);
        tidy_descriptions(&mut schema);
        out.insert(def_name(&name, &roots), schema);
    }
    (out, roots)
}

/// Turns the Rust doc comments schemars copies into descriptions the way `kubectl explain`
/// and API docs want them: source line wraps joined (paragraph breaks and list items kept) and
/// rustdoc link syntax (`` [`VPCBinding`](super::VPCBinding) ``, `` [`VPC`] ``) reduced to the
/// name.
fn tidy_descriptions(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                match x {
                    Value::String(s) if k == "description" => *s = prose(s),
                    _ => tidy_descriptions(x),
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(tidy_descriptions),
        _ => {}
    }
}

fn prose(doc: &str) -> String {
    let mut out = String::with_capacity(doc.len());
    for (i, para) in doc.split("\n\n").enumerate() {
        if i > 0 {
            out.push_str("\n\n");
        }
        for (j, line) in para.lines().map(str::trim).enumerate() {
            if j > 0 {
                let item = line.starts_with("- ")
                    || line.starts_with("* ")
                    || line
                        .split_once(". ")
                        .is_some_and(|(n, _)| n.parse::<u32>().is_ok());
                out.push(if item { '\n' } else { ' ' });
            }
            out.push_str(line);
        }
    }
    unlink(&out)
}

/// `[`X`](target)` and `[`X`]` → `` `X` ``.
fn unlink(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(at) = rest.find("[`") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        match after.find("`]") {
            Some(end) if !after[1..end].contains('`') => {
                out.push_str(&after[..=end]);
                rest = &after[end + 2..];
                // A link target, if any: `(path)` right after the brackets.
                if rest.starts_with('(')
                    && let Some(close) = rest.find(')')
                {
                    rest = &rest[close + 1..];
                }
            }
            _ => {
                out.push('[');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

fn gvk(kind: &str) -> Value {
    json!({ "group": GROUP, "version": VERSION, "kind": kind })
}

fn param(name: &str, loc: &str, desc: &str, v3: bool) -> Value {
    if v3 {
        json!({ "name": name, "in": loc, "description": desc, "required": loc == "path", "schema": { "type": "string", "uniqueItems": true } })
    } else {
        json!({ "name": name, "in": loc, "description": desc, "required": loc == "path", "type": "string", "uniqueItems": true })
    }
}

fn op(id: &str, kind: &str, action: &str, schema_ref: &str, v3: bool, body: Option<&[&str]>) -> Value {
    let resp = if v3 {
        json!({ "200": { "description": "OK", "content": { "application/json": { "schema": { "$ref": schema_ref } } } } })
    } else {
        json!({ "200": { "description": "OK", "schema": { "$ref": schema_ref } } })
    };
    let mut o = json!({
        "operationId": id, "tags": [format!("sdnCozystackIo_{VERSION}")], "responses": resp, "parameters": [],
        "x-kubernetes-action": action, "x-kubernetes-group-version-kind": gvk(kind),
    });
    if let Some(types) = body {
        if v3 {
            let content: Map<String, Value> = types
                .iter()
                .map(|t| (t.to_string(), json!({ "schema": { "$ref": schema_ref } })))
                .collect();
            o["requestBody"] = json!({ "required": true, "content": content });
        } else {
            o["consumes"] = json!(types);
            if let Some(p) = o["parameters"].as_array_mut() {
                p.push(json!({ "name": "body", "in": "body", "required": true, "schema": { "$ref": schema_ref } }));
            }
        }
        let p = o["parameters"].as_array_mut().expect("parameters is an array");
        p.push(param(
            "dryRun",
            "query",
            "When present, indicates that modifications should not be persisted.",
            v3,
        ));
        p.push(param(
            "fieldManager",
            "query",
            "A name associated with the actor or entity that is making these changes.",
            v3,
        ));
        p.push(param(
            "fieldValidation",
            "query",
            "Ignore, Warn or Strict: how to handle unknown or duplicate fields.",
            v3,
        ));
    }
    if !v3 {
        o["produces"] = json!(["application/json"]);
        o["schemes"] = json!(["https"]);
    }
    o
}

fn paths(kinds: &[Arc<dyn Resource>], roots: &[String], v3: bool) -> Map<String, Value> {
    let base = format!("/apis/{GROUP}/{VERSION}");
    let prefix = if v3 {
        "#/components/schemas/"
    } else {
        "#/definitions/"
    };
    let mut paths = Map::new();
    for (k, root) in kinds.iter().zip(roots) {
        let i = k.info();
        let obj_ref = format!("{prefix}{DEF_PREFIX}{root}");
        let list_ref = format!("{prefix}{DEF_PREFIX}{}", i.list_kind);
        let (coll, nsp) = if i.namespaced {
            (
                format!("{base}/namespaces/{{namespace}}/{}", i.plural),
                vec![param("namespace", "path", "object name and auth scope", v3)],
            )
        } else {
            (format!("{base}/{}", i.plural), vec![])
        };
        let name = param("name", "path", format!("name of the {}", i.kind).as_str(), v3);
        let kind = i.kind;
        let mut item_params = nsp.clone();
        item_params.push(name);
        paths.insert(coll.clone(), json!({
            "get": op(&format!("list{kind}"), kind, "list", &list_ref, v3, None),
            "post": op(&format!("create{kind}"), kind, "post", &obj_ref, v3, Some(&["application/json"])),
            "delete": op(&format!("deleteCollection{kind}"), kind, "deletecollection", &obj_ref, v3, None),
            "parameters": nsp,
        }));
        let item = json!({
            "get": op(&format!("read{kind}"), kind, "get", &obj_ref, v3, None),
            "put": op(&format!("replace{kind}"), kind, "put", &obj_ref, v3, Some(&["application/json"])),
            "patch": op(&format!("patch{kind}"), kind, "patch", &obj_ref, v3, Some(crate::handlers::PATCH_TYPES)),
            "delete": op(&format!("delete{kind}"), kind, "delete", &obj_ref, v3, None),
            "parameters": item_params.clone(),
        });
        paths.insert(format!("{coll}/{{name}}"), item);
        if i.has_status {
            paths.insert(format!("{coll}/{{name}}/status"), json!({
                "get": op(&format!("read{kind}Status"), kind, "get", &obj_ref, v3, None),
                "put": op(&format!("replace{kind}Status"), kind, "put", &obj_ref, v3, Some(&["application/json"])),
                "patch": op(&format!("patch{kind}Status"), kind, "patch", &obj_ref, v3, Some(crate::handlers::PATCH_TYPES)),
                "parameters": item_params,
            }));
        }
        if i.namespaced {
            paths.insert(
                format!("{base}/{}", i.plural),
                json!({
                    "get": op(&format!("list{kind}ForAllNamespaces"), kind, "list", &list_ref, v3, None),
                }),
            );
        }
    }
    paths
}

fn list_schema(kind: &str, obj_ref: &str, meta_ref: &str) -> Value {
    json!({
        "type": "object", "description": format!("A list of {kind} objects."), "required": ["items"],
        "properties": {
            "apiVersion": { "type": "string" }, "kind": { "type": "string" },
            "metadata": { "$ref": meta_ref },
            "items": { "type": "array", "items": { "$ref": obj_ref } },
        },
        "x-kubernetes-group-version-kind": [gvk(&format!("{kind}List"))],
    })
}

fn add_lists(defs: &mut Map<String, Value>, kinds: &[Arc<dyn Resource>], roots: &[String], prefix: &str) {
    for (k, root) in kinds.iter().zip(roots) {
        let i = k.info();
        defs.insert(
            format!("{DEF_PREFIX}{}", i.list_kind),
            list_schema(
                i.kind,
                &format!("{prefix}{DEF_PREFIX}{root}"),
                &format!("{prefix}io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"),
            ),
        );
    }
    // ListMeta is referenced by the lists but not by any kind.
    defs.entry("io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta".to_string()).or_insert_with(|| {
        json!({ "type": "object", "description": "ListMeta describes metadata that synthetic resources must have.",
                "properties": { "continue": { "type": "string" }, "remainingItemCount": { "type": "integer", "format": "int64" },
                                "resourceVersion": { "type": "string" }, "selfLink": { "type": "string" } } })
    });
}

fn hex_upper(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02X}")).collect()
}

impl Docs {
    /// Builds both documents from the table.
    pub fn build(kinds: &[Arc<dyn Resource>]) -> Self {
        let (mut d3, roots) = definitions(kinds, true);
        add_lists(&mut d3, kinds, &roots, "#/components/schemas/");
        let v3 = json!({
            "openapi": "3.0.0",
            "info": { "title": "cozyplane", "version": VERSION },
            "paths": paths(kinds, &roots, true),
            "components": { "schemas": d3 },
        });
        let (mut d2, roots2) = definitions(kinds, false);
        add_lists(&mut d2, kinds, &roots2, "#/definitions/");
        let v2 = json!({
            "swagger": "2.0",
            "info": { "title": "cozyplane", "version": VERSION },
            "paths": paths(kinds, &roots2, false),
            "definitions": d2,
        });
        let v3_gv = serde_json::to_vec(&v3).expect("a JSON value serializes");
        let v2 = serde_json::to_vec(&v2).expect("a JSON value serializes");
        let v3_hash = hex_upper(&Sha512::digest(&v3_gv));
        let v2_etag = hex_upper(&Sha512::digest(&v2));
        Self {
            v2,
            v2_etag,
            v3_gv,
            v3_hash,
        }
    }

    /// The `/openapi/v3` root.
    pub fn v3_root(&self) -> Value {
        json!({ "paths": { format!("apis/{GROUP}/{VERSION}"): { "serverRelativeURL": format!("/openapi/v3/apis/{GROUP}/{VERSION}?hash={}", self.v3_hash) } } })
    }
}

#[cfg(test)]
mod tests {
    use super::prose;

    #[test]
    fn descriptions_join_wrapped_lines_and_drop_rustdoc_links() {
        assert_eq!(
            prose("whose address\nranges overlap; attach through a [`VPCBinding`](super::VPCBinding)."),
            "whose address ranges overlap; attach through a `VPCBinding`."
        );
        assert_eq!(
            prose("Desired state of a [`VPC`].\n\nSecond\nparagraph."),
            "Desired state of a `VPC`.\n\nSecond paragraph."
        );
        assert_eq!(
            prose("Kinds:\n- `a`\n- `b`\n1. one\nwrapped"),
            "Kinds:\n- `a`\n- `b`\n1. one wrapped"
        );
        assert_eq!(prose("a list [`x`, `y`] stays"), "a list [`x`, `y`] stays");
        assert_eq!(prose("unclosed [`x and ] ["), "unclosed [`x and ] [");
    }
}
