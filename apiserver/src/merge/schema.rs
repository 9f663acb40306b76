//! The merge-relevant shape of a kind, read from its JSON Schema.
//!
//! Only what server-side apply and strategic merge patch need survives: which nodes are
//! structs/maps, lists or scalars, how lists merge (`x-kubernetes-list-type`,
//! `x-kubernetes-list-map-keys`), whether a map is atomic (`x-kubernetes-map-type`), and the
//! strategic-merge-patch hints (`x-kubernetes-patch-strategy`, `x-kubernetes-patch-merge-key`).
//! Anything the schema does not describe is [`Schema::Untyped`], which merges like untyped
//! server-side apply: objects field by field, lists as a whole, everything else replaced.

use std::collections::{BTreeMap, HashSet};
use std::sync::LazyLock;

use serde_json::Value;

/// The merge-relevant shape of one node of an object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Schema {
    /// Nothing is known: objects merge field by field, lists and scalars are replaced whole.
    #[default]
    Untyped,
    /// A string, number or boolean: replaced whole.
    Scalar,
    /// A JSON object: a struct (declared `fields`), a map (`elements`), or both.
    Map(MapSchema),
    /// A JSON array.
    List(ListSchema),
}

/// A JSON object node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MapSchema {
    /// Declared properties (a struct's fields).
    pub fields: BTreeMap<String, Schema>,
    /// Schema of undeclared keys (`additionalProperties`); `None` means undeclared keys are
    /// untyped.
    pub elements: Option<Box<Schema>>,
    /// `x-kubernetes-map-type: atomic`: the object is owned and replaced as a whole.
    pub atomic: bool,
    /// Strategic-merge-patch hints of this node.
    pub patch: PatchMeta,
}

/// A JSON array node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListSchema {
    /// Schema of every item.
    pub items: Box<Schema>,
    /// How apply merges the list.
    pub list_type: ListType,
    /// Strategic-merge-patch hints of this node.
    pub patch: PatchMeta,
}

/// `x-kubernetes-list-type`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ListType {
    /// Replaced and owned as a whole (the default for lists without a list type).
    #[default]
    Atomic,
    /// Unique scalars, each owned separately (`v:<value>` in fieldsV1).
    Set,
    /// Objects identified by the values of the key fields (`k:{…}` in fieldsV1).
    Map(Vec<String>),
}

/// Strategic-merge-patch hints of a node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PatchMeta {
    /// `x-kubernetes-patch-strategy`, split on commas (`merge`, `replace`, `retainKeys`).
    pub strategies: Vec<String>,
    /// `x-kubernetes-patch-merge-key`.
    pub merge_key: Option<String>,
}

impl PatchMeta {
    /// `true` if the strategy list contains `strategy`.
    pub fn has(&self, strategy: &str) -> bool {
        self.strategies.iter().any(|s| s == strategy)
    }
}

static UNTYPED: Schema = Schema::Untyped;

/// The schema of `metadata` when a kind's schema does not carry list types for it (the
/// `ObjectMeta` schema emitted by k8s-openapi has none): finalizers are a set and
/// ownerReferences a list keyed by `uid`, as declared in Go's `ObjectMeta`.
static OBJECT_META_LISTS: LazyLock<[(&str, ListType, PatchMeta); 2]> = LazyLock::new(|| {
    [
        (
            "finalizers",
            ListType::Set,
            PatchMeta {
                strategies: vec!["merge".into()],
                merge_key: None,
            },
        ),
        (
            "ownerReferences",
            ListType::Map(vec!["uid".into()]),
            PatchMeta {
                strategies: vec!["merge".into()],
                merge_key: Some("uid".into()),
            },
        ),
    ]
});

impl Schema {
    /// Builds the schema of a kind's top-level object from its JSON Schema (as emitted by
    /// schemars 1.x: `properties`, `items`, `additionalProperties`, `$ref` into `$defs`,
    /// `anyOf`/`oneOf` with a `null` branch for `Option`).
    ///
    /// `metadata.finalizers` and `metadata.ownerReferences` get the list types of Go's
    /// `ObjectMeta` unless the schema declares others.
    pub fn for_object(json_schema: &Value) -> Schema {
        let mut schema = Schema::from_json_schema(json_schema);
        if let Schema::Map(root) = &mut schema {
            let meta = root
                .fields
                .entry("metadata".into())
                .or_insert_with(|| Schema::Map(MapSchema::default()));
            if let Schema::Map(meta) = meta {
                for (name, list_type, patch) in OBJECT_META_LISTS.iter() {
                    let field = meta.fields.entry((*name).into()).or_insert(Schema::Untyped);
                    match field {
                        Schema::List(list) if list.list_type == ListType::Atomic => {
                            list.list_type = list_type.clone();
                            if list.patch == PatchMeta::default() {
                                list.patch = patch.clone();
                            }
                        }
                        Schema::List(_) => {}
                        other => {
                            *other = Schema::List(ListSchema {
                                items: Box::new(if *name == "finalizers" {
                                    Schema::Scalar
                                } else {
                                    Schema::Untyped
                                }),
                                list_type: list_type.clone(),
                                patch: patch.clone(),
                            });
                        }
                    }
                }
            }
        }
        schema
    }

    /// Builds a schema from any JSON Schema node; `$ref`s resolve against the same document.
    pub fn from_json_schema(json_schema: &Value) -> Schema {
        Builder {
            root: json_schema,
            resolving: HashSet::new(),
        }
        .build(json_schema, 0)
    }

    /// The schema of field `name` of an object node; [`Schema::Untyped`] if unknown.
    pub fn field(&self, name: &str) -> &Schema {
        match self {
            Schema::Map(map) => map
                .fields
                .get(name)
                .or(map.elements.as_deref())
                .unwrap_or(&UNTYPED),
            _ => &UNTYPED,
        }
    }

    /// `true` if `name` is a declared property (a struct field) rather than a map element.
    pub fn is_declared_field(&self, name: &str) -> bool {
        matches!(self, Schema::Map(map) if map.fields.contains_key(name))
    }

    /// The schema of the items of a list node; [`Schema::Untyped`] if unknown.
    pub fn items(&self) -> &Schema {
        match self {
            Schema::List(list) => &list.items,
            _ => &UNTYPED,
        }
    }

    /// How apply merges this node if it is a list (untyped lists are atomic).
    pub fn list_type(&self) -> ListType {
        match self {
            Schema::List(list) => list.list_type.clone(),
            _ => ListType::Atomic,
        }
    }

    /// `true` for an `x-kubernetes-map-type: atomic` object.
    pub fn is_atomic_map(&self) -> bool {
        matches!(self, Schema::Map(map) if map.atomic)
    }

    /// The strategic-merge-patch hints of this node.
    pub fn patch_meta(&self) -> PatchMeta {
        match self {
            Schema::Map(map) => map.patch.clone(),
            Schema::List(list) => list.patch.clone(),
            _ => PatchMeta::default(),
        }
    }
}

/// Nesting deeper than this is treated as untyped (guards against pathological documents).
const MAX_DEPTH: usize = 64;

struct Builder<'a> {
    root: &'a Value,
    /// `$ref`s being expanded on the current path; a repeat (a recursive type) becomes untyped.
    resolving: HashSet<String>,
}

impl Builder<'_> {
    fn build(&mut self, node: &Value, depth: usize) -> Schema {
        let Some(obj) = node.as_object() else {
            return Schema::Untyped;
        };
        if depth > MAX_DEPTH {
            return Schema::Untyped;
        }
        let mut schema = if let Some(Value::String(reference)) = obj.get("$ref") {
            self.build_ref(reference, depth)
        } else if let Some(branch) = single_branch(obj) {
            self.build(branch, depth + 1)
        } else {
            self.build_plain(obj, depth)
        };
        apply_extensions(&mut schema, obj);
        schema
    }

    fn build_ref(&mut self, reference: &str, depth: usize) -> Schema {
        if self.resolving.contains(reference) {
            return Schema::Untyped;
        }
        let Some(target) = resolve_pointer(self.root, reference) else {
            return Schema::Untyped;
        };
        self.resolving.insert(reference.to_owned());
        let schema = self.build(target, depth + 1);
        self.resolving.remove(reference);
        schema
    }

    fn build_plain(&mut self, obj: &serde_json::Map<String, Value>, depth: usize) -> Schema {
        if obj.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
            && !obj.contains_key("properties")
        {
            return Schema::Untyped;
        }
        let kind = match obj.get("type") {
            Some(Value::String(t)) => Some(t.as_str()),
            Some(Value::Array(types)) => {
                let mut non_null = types.iter().filter_map(Value::as_str).filter(|t| *t != "null");
                match (non_null.next(), non_null.next()) {
                    (Some(t), None) => Some(t),
                    _ => None,
                }
            }
            _ => None,
        };
        let kind = kind.or_else(|| {
            if obj.contains_key("properties") || obj.contains_key("additionalProperties") {
                Some("object")
            } else if obj.contains_key("items") {
                Some("array")
            } else {
                None
            }
        });
        match kind {
            Some("object") => {
                let mut map = MapSchema::default();
                if let Some(Value::Object(props)) = obj.get("properties") {
                    for (name, prop) in props {
                        map.fields.insert(name.clone(), self.build(prop, depth + 1));
                    }
                }
                match obj.get("additionalProperties") {
                    Some(Value::Bool(true)) => map.elements = Some(Box::new(Schema::Untyped)),
                    Some(additional @ Value::Object(_)) => {
                        map.elements = Some(Box::new(self.build(additional, depth + 1)));
                    }
                    _ => {}
                }
                Schema::Map(map)
            }
            Some("array") => {
                let items = obj
                    .get("items")
                    .map_or(Schema::Untyped, |i| self.build(i, depth + 1));
                Schema::List(ListSchema {
                    items: Box::new(items),
                    list_type: ListType::Atomic,
                    patch: PatchMeta::default(),
                })
            }
            Some(_) => Schema::Scalar,
            None => Schema::Untyped,
        }
    }
}

/// The one non-null branch of `anyOf`/`oneOf`/`allOf`, if the node is such a wrapper.
fn single_branch(obj: &serde_json::Map<String, Value>) -> Option<&Value> {
    for keyword in ["anyOf", "oneOf", "allOf"] {
        if let Some(Value::Array(branches)) = obj.get(keyword) {
            let mut non_null = branches.iter().filter(|b| !is_null_schema(b));
            if let (Some(branch), None) = (non_null.next(), non_null.next()) {
                return Some(branch);
            }
        }
    }
    None
}

fn is_null_schema(node: &Value) -> bool {
    node.get("type") == Some(&Value::String("null".into())) || node.get("const") == Some(&Value::Null)
}

/// Resolves a local JSON pointer reference (`#/$defs/X`, `#/definitions/X`,
/// `#/components/schemas/X`).
fn resolve_pointer<'a>(root: &'a Value, reference: &str) -> Option<&'a Value> {
    let pointer = reference.strip_prefix('#')?;
    root.pointer(pointer)
}

/// Reads the `x-kubernetes-*` merge extensions of `obj` into `schema`.
fn apply_extensions(schema: &mut Schema, obj: &serde_json::Map<String, Value>) {
    let strategies: Option<Vec<String>> = obj
        .get("x-kubernetes-patch-strategy")
        .and_then(Value::as_str)
        .map(|s| {
            s.split(',')
                .map(|p| p.trim().to_owned())
                .filter(|p| !p.is_empty())
                .collect()
        });
    let merge_key = obj
        .get("x-kubernetes-patch-merge-key")
        .and_then(Value::as_str)
        .map(str::to_owned);
    match schema {
        Schema::Map(map) => {
            if let Some(map_type) = obj.get("x-kubernetes-map-type").and_then(Value::as_str) {
                map.atomic = map_type == "atomic";
            }
            if let Some(strategies) = strategies {
                map.patch.strategies = strategies;
            }
            if merge_key.is_some() {
                map.patch.merge_key = merge_key;
            }
        }
        Schema::List(list) => {
            if let Some(strategies) = strategies {
                list.patch.strategies = strategies;
            }
            if merge_key.is_some() {
                list.patch.merge_key = merge_key;
            }
            let keys: Option<Vec<String>> = obj
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|keys| keys.iter().filter_map(Value::as_str).map(str::to_owned).collect());
            match obj.get("x-kubernetes-list-type").and_then(Value::as_str) {
                Some("atomic") => list.list_type = ListType::Atomic,
                Some("set") => list.list_type = ListType::Set,
                Some("map") => {
                    list.list_type = ListType::Map(keys.unwrap_or_default());
                }
                // No list type: Go types with a strategic merge strategy are associative lists
                // (that is how Kubernetes derives apply schemas from patch metadata).
                _ if obj.contains_key("x-kubernetes-patch-strategy") && list.patch.has("merge") => {
                    list.list_type = match &list.patch.merge_key {
                        Some(key) => ListType::Map(vec![key.clone()]),
                        None => ListType::Set,
                    };
                }
                _ => {}
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn reads_schemars_shapes_and_extensions() {
        let doc = json!({
            "type": "object",
            "properties": {
                "metadata": { "$ref": "#/$defs/Meta" },
                "spec": { "$ref": "#/$defs/Spec" },
                "status": { "anyOf": [{ "$ref": "#/$defs/Status" }, { "type": "null" }] },
            },
            "$defs": {
                "Meta": { "type": "object", "properties": {
                    "labels": { "type": "object", "additionalProperties": { "type": "string" } },
                    "finalizers": { "type": "array", "items": { "type": "string" } },
                }},
                "Spec": { "type": "object", "properties": {
                    "cidrs": { "type": ["array", "null"], "items": { "type": "string" },
                               "x-kubernetes-list-type": "set" },
                    "rules": { "type": "array", "items": { "type": "object" } },
                    "selector": { "type": "object", "x-kubernetes-map-type": "atomic",
                                  "properties": { "a": { "type": "string" } } },
                    "ports": { "type": "array", "items": { "type": "object" },
                               "x-kubernetes-patch-strategy": "merge",
                               "x-kubernetes-patch-merge-key": "port" },
                    "self": { "$ref": "#/$defs/Spec" },
                }},
                "Status": { "type": "object", "properties": {
                    "conditions": { "type": "array", "items": { "$ref": "#/$defs/Cond" },
                                    "x-kubernetes-list-type": "map",
                                    "x-kubernetes-list-map-keys": ["type"] },
                }},
                "Cond": { "type": "object", "properties": { "type": { "type": "string" } } },
            }
        });
        let s = Schema::for_object(&doc);
        let spec = s.field("spec");
        assert_eq!(spec.field("cidrs").list_type(), ListType::Set);
        assert_eq!(spec.field("rules").list_type(), ListType::Atomic);
        assert!(spec.field("selector").is_atomic_map());
        assert_eq!(
            spec.field("ports").list_type(),
            ListType::Map(vec!["port".into()])
        );
        assert_eq!(
            spec.field("ports").patch_meta().merge_key.as_deref(),
            Some("port")
        );
        // A recursive reference stops at the cycle.
        assert_eq!(spec.field("self"), &Schema::Untyped);
        let conditions = s.field("status").field("conditions");
        assert_eq!(conditions.list_type(), ListType::Map(vec!["type".into()]));
        assert_eq!(conditions.items().field("type"), &Schema::Scalar);
        let meta = s.field("metadata");
        assert_eq!(meta.field("labels").field("anything"), &Schema::Scalar);
        assert!(!meta.is_declared_field("anything"));
        assert_eq!(meta.field("finalizers").list_type(), ListType::Set);
        assert_eq!(
            meta.field("ownerReferences").list_type(),
            ListType::Map(vec!["uid".into()])
        );
        assert_eq!(s.field("unknown"), &Schema::Untyped);
    }
}
