//! Schema adjustments the derive cannot express, applied with `#[schemars(transform = …)]`.

use schemars::Schema;
use serde_json::{Value, json};

use crate::ApiKind;

/// Marks a property as required (Go's "no `omitempty`"); [`hoist_required`] on the containing
/// struct then moves the mark into the struct's `required` list.
///
/// Such fields still carry `#[serde(default)]`, so a missing one decodes to its zero value, as in
/// Go, and the validator rather than the decoder reports it. schemars therefore treats them as
/// optional and records their zero value as a `default`; both are wrong for this API, which has
/// no defaulting, and the two transforms undo that.
pub(crate) fn mark_required(schema: &mut Schema) {
    schema.insert(REQUIRED_MARK.into(), Value::Bool(true));
}

/// Container half of [`mark_required`].
pub(crate) fn hoist_required(schema: &mut Schema) {
    let mut names = Vec::new();
    if let Some(Value::Object(props)) = schema.get_mut("properties") {
        for (name, prop) in props.iter_mut() {
            if let Value::Object(prop) = prop
                && prop.remove(REQUIRED_MARK).is_some()
            {
                prop.remove("default");
                names.push(name.clone());
            }
        }
    }
    if names.is_empty() {
        return;
    }
    let required = schema
        .ensure_object()
        .entry("required")
        .or_insert_with(|| json!([]));
    if let Value::Array(list) = required {
        for name in names {
            if !list.iter().any(|v| *v == name) {
                list.push(Value::String(name));
            }
        }
    }
}

/// Private key carrying [`mark_required`]'s mark from a field's schema to its container's.
const REQUIRED_MARK: &str = "x-cozyplane-required";

/// Finishes the schema of a top-level object: adds `apiVersion` and `kind`, the
/// `x-kubernetes-group-version-kind` tag clients use to find the schema of a kind, and makes every
/// top-level property optional, as for built-in kinds.
pub(crate) fn object_root<K: ApiKind>(schema: &mut Schema) {
    schema.remove("required");
    add_type_meta(schema, K::KIND, K::VERSION);
}

/// Adds the `apiVersion`/`kind` properties and the group-version-kind tag for `kind`.
pub(crate) fn add_type_meta(schema: &mut Schema, kind: &str, version: &str) {
    if let Some(Value::Object(props)) = schema.get_mut("properties") {
        props.insert(
            "apiVersion".into(),
            json!({
                "type": "string",
                "description": format!(
                    "The versioned schema of this representation of an object; always `{}/{version}`.",
                    crate::GROUP
                ),
            }),
        );
        props.insert(
            "kind".into(),
            json!({
                "type": "string",
                "description": format!("The kind of this object; always `{kind}`."),
            }),
        );
    }
    schema.insert(
        "x-kubernetes-group-version-kind".into(),
        json!([{ "group": crate::GROUP, "version": version, "kind": kind }]),
    );
}
