//! Sets of field paths: what a manager owns, and the `fieldsV1` encoding of that.
//!
//! A path is a sequence of [`PathElement`]s: struct/map fields, keyed list items (`k:{…}`), set
//! items (`v:…`) and, for lists without a list type, indices (`i:…`). A [`FieldSet`] is a trie of
//! paths; a node that is both a member and has children is written as `".": {}` in fieldsV1.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::{Map, Value};

use super::schema::{ListType, Schema};

/// One step of a field path.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PathElement {
    /// A struct field or map key (`f:<name>`).
    Field(String),
    /// An item of a `map` list, identified by its key fields, as canonical JSON of an object
    /// (`k:{"type":"Ready"}`).
    Key(String),
    /// An item of a `set` list, as canonical JSON (`v:"10.0.0.0/8"`).
    Value(String),
    /// An item by position (`i:0`).
    Index(usize),
}

impl PathElement {
    /// The fieldsV1 object key of this element.
    pub fn to_fields_v1_key(&self) -> String {
        match self {
            PathElement::Field(name) => format!("f:{name}"),
            PathElement::Key(key) => format!("k:{key}"),
            PathElement::Value(value) => format!("v:{value}"),
            PathElement::Index(index) => format!("i:{index}"),
        }
    }

    /// Parses a fieldsV1 object key (other than `.`).
    pub fn from_fields_v1_key(key: &str) -> Result<PathElement, FieldsV1Error> {
        let bad = || FieldsV1Error(format!("invalid fieldsV1 key {key:?}"));
        let (prefix, rest) = key.split_once(':').ok_or_else(bad)?;
        match prefix {
            "f" => Ok(PathElement::Field(rest.to_owned())),
            "k" => {
                let value: Value = serde_json::from_str(rest).map_err(|_| bad())?;
                if !value.is_object() {
                    return Err(bad());
                }
                Ok(PathElement::Key(canonical_json(&value)))
            }
            "v" => {
                let value: Value = serde_json::from_str(rest).map_err(|_| bad())?;
                Ok(PathElement::Value(canonical_json(&value)))
            }
            "i" => rest.parse().map(PathElement::Index).map_err(|_| bad()),
            _ => Err(bad()),
        }
    }

    /// The key element of a `map` list item, or `None` if the item lacks a key field or is not
    /// an object.
    pub fn key_of(item: &Value, keys: &[String]) -> Option<PathElement> {
        let obj = item.as_object()?;
        let mut key = Map::new();
        for name in keys {
            key.insert(name.clone(), obj.get(name)?.clone());
        }
        Some(PathElement::Key(canonical_json(&Value::Object(key))))
    }

    /// The element of a `set` list item.
    pub fn value_of(item: &Value) -> PathElement {
        PathElement::Value(canonical_json(item))
    }
}

impl fmt::Display for PathElement {
    /// The form Kubernetes uses in conflict messages: `.name`, `[type="Ready"]`, `[="x"]`, `[0]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathElement::Field(name) => write!(f, ".{name}"),
            PathElement::Key(key) => {
                let parsed: Value = serde_json::from_str(key).unwrap_or(Value::Null);
                let parts: Vec<String> = parsed
                    .as_object()
                    .map(|o| {
                        o.iter()
                            .map(|(k, v)| format!("{k}={}", canonical_json(v)))
                            .collect()
                    })
                    .unwrap_or_default();
                write!(f, "[{}]", parts.join(","))
            }
            PathElement::Value(value) => write!(f, "[={value}]"),
            PathElement::Index(index) => write!(f, "[{index}]"),
        }
    }
}

/// A full path from the object root.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Path(pub Vec<PathElement>);

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for element in &self.0 {
            write!(f, "{element}")?;
        }
        Ok(())
    }
}

/// A malformed `fieldsV1` document.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FieldsV1Error(pub String);

/// A set of field paths, stored as a trie.
///
/// Invariant: no child trie is empty.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSet {
    members: BTreeSet<PathElement>,
    children: BTreeMap<PathElement, FieldSet>,
}

impl FieldSet {
    /// The empty set.
    pub fn new() -> FieldSet {
        FieldSet::default()
    }

    /// `true` if the set has no paths.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.children.is_empty()
    }

    /// Adds a path; the empty path is ignored.
    pub fn insert(&mut self, path: &[PathElement]) {
        match path {
            [] => {}
            [last] => {
                self.members.insert(last.clone());
            }
            [first, rest @ ..] => self.children.entry(first.clone()).or_default().insert(rest),
        }
    }

    /// `true` if `path` is a member.
    pub fn has(&self, path: &[PathElement]) -> bool {
        match path {
            [] => false,
            [last] => self.members.contains(last),
            [first, rest @ ..] => self.children.get(first).is_some_and(|c| c.has(rest)),
        }
    }

    /// `true` if some member has `prefix` as a strict prefix.
    pub fn has_descendants(&self, prefix: &[PathElement]) -> bool {
        self.descend(prefix).is_some_and(|c| !c.is_empty())
    }

    /// The subset of paths below `prefix`, relative to it.
    pub fn descend(&self, prefix: &[PathElement]) -> Option<&FieldSet> {
        match prefix {
            [] => Some(self),
            [first, rest @ ..] => self.children.get(first)?.descend(rest),
        }
    }

    /// `self ∪ other`.
    pub fn union(&self, other: &FieldSet) -> FieldSet {
        let mut out = self.clone();
        out.members.extend(other.members.iter().cloned());
        for (element, child) in &other.children {
            let merged = match out.children.get(element) {
                Some(mine) => mine.union(child),
                None => child.clone(),
            };
            out.children.insert(element.clone(), merged);
        }
        out
    }

    /// `self ∖ other` (exact paths; owning a node does not cover its descendants).
    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            members: self.members.difference(&other.members).cloned().collect(),
            children: BTreeMap::new(),
        };
        for (element, child) in &self.children {
            let rest = match other.children.get(element) {
                Some(theirs) => child.difference(theirs),
                None => child.clone(),
            };
            if !rest.is_empty() {
                out.children.insert(element.clone(), rest);
            }
        }
        out
    }

    /// `self ∩ other`.
    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            members: self.members.intersection(&other.members).cloned().collect(),
            children: BTreeMap::new(),
        };
        for (element, child) in &self.children {
            if let Some(theirs) = other.children.get(element) {
                let both = child.intersection(theirs);
                if !both.is_empty() {
                    out.children.insert(element.clone(), both);
                }
            }
        }
        out
    }

    /// Removes every path that equals or lies below a member of `prefixes`.
    pub fn without_prefixes(&self, prefixes: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            members: self.members.difference(&prefixes.members).cloned().collect(),
            children: BTreeMap::new(),
        };
        for (element, child) in &self.children {
            if prefixes.members.contains(element) {
                continue;
            }
            let rest = match prefixes.children.get(element) {
                Some(theirs) => child.without_prefixes(theirs),
                None => child.clone(),
            };
            if !rest.is_empty() {
                out.children.insert(element.clone(), rest);
            }
        }
        out
    }

    /// Every member path, in order (parents before their descendants).
    pub fn paths(&self) -> Vec<Path> {
        let mut out = Vec::new();
        self.collect(&mut Vec::new(), &mut out);
        out
    }

    fn collect(&self, prefix: &mut Vec<PathElement>, out: &mut Vec<Path>) {
        let mut elements: BTreeSet<&PathElement> = self.members.iter().collect();
        elements.extend(self.children.keys());
        for element in elements {
            prefix.push(element.clone());
            if self.members.contains(element) {
                out.push(Path(prefix.clone()));
            }
            if let Some(child) = self.children.get(element) {
                child.collect(prefix, out);
            }
            prefix.pop();
        }
    }

    /// The `fieldsV1` JSON encoding (keys sorted, `.` marks a member that also has children).
    pub fn to_fields_v1(&self) -> Value {
        let mut entries: BTreeMap<String, Value> = BTreeMap::new();
        for element in &self.members {
            if !self.children.contains_key(element) {
                entries.insert(element.to_fields_v1_key(), Value::Object(Map::new()));
            }
        }
        for (element, child) in &self.children {
            let mut encoded = child.to_fields_v1();
            if self.members.contains(element)
                && let Value::Object(map) = &mut encoded
            {
                map.insert(".".into(), Value::Object(Map::new()));
                let sorted: BTreeMap<String, Value> = std::mem::take(map).into_iter().collect();
                map.extend(sorted);
            }
            entries.insert(element.to_fields_v1_key(), encoded);
        }
        Value::Object(entries.into_iter().collect())
    }

    /// Decodes a `fieldsV1` JSON document.
    pub fn from_fields_v1(fields: &Value) -> Result<FieldSet, FieldsV1Error> {
        let Value::Object(map) = fields else {
            return Err(FieldsV1Error("fieldsV1 must be a JSON object".into()));
        };
        let mut out = FieldSet::new();
        for (key, child) in map {
            if key == "." {
                continue;
            }
            let element = PathElement::from_fields_v1_key(key)?;
            let Value::Object(grandchildren) = child else {
                return Err(FieldsV1Error(format!(
                    "value of fieldsV1 key {key:?} must be an object"
                )));
            };
            if grandchildren.is_empty() || grandchildren.contains_key(".") {
                out.members.insert(element.clone());
            }
            let sub = FieldSet::from_fields_v1(child)?;
            if !sub.is_empty() {
                out.children.insert(element, sub);
            }
        }
        Ok(out)
    }

    /// The fields `value` sets, as server-side apply records them for an applied configuration:
    /// scalars, `null`s, empty objects, atomic lists/maps and map elements are members; struct
    /// fields holding non-empty objects are not (only their contents are); every item of a
    /// `set`/`map` list is a member, plus its contents.
    ///
    /// Fails if a `map` list item lacks a key field or two items share a key.
    pub fn from_value(value: &Value, schema: &Schema) -> Result<FieldSet, MergeError> {
        let mut out = FieldSet::new();
        walk_value(value, schema, &mut Vec::new(), &mut out)?;
        Ok(out)
    }
}

/// A value that cannot be merged (a `map` list item without its key, duplicate items).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct MergeError {
    /// Where the problem is, e.g. `.status.conditions`.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl MergeError {
    pub(crate) fn at(path: &[PathElement], message: impl Into<String>) -> MergeError {
        MergeError {
            path: Path(path.to_vec()).to_string(),
            message: message.into(),
        }
    }
}

fn walk_value(
    value: &Value,
    schema: &Schema,
    path: &mut Vec<PathElement>,
    out: &mut FieldSet,
) -> Result<(), MergeError> {
    match value {
        Value::Object(map) if !schema.is_atomic_map() && !matches!(schema, Schema::Scalar) => {
            if map.is_empty() {
                out.insert(path);
            }
            for (key, child) in map {
                path.push(PathElement::Field(key.clone()));
                walk_value(child, schema.field(key), path, out)?;
                if !schema.is_declared_field(key) || child.as_object().is_some_and(Map::is_empty) {
                    out.insert(path);
                }
                path.pop();
            }
        }
        Value::Array(items) => match schema.list_type() {
            ListType::Atomic => out.insert(path),
            list_type => {
                let elements = list_elements(items, &list_type, path)?;
                let mut seen = BTreeSet::new();
                for (item, element) in items.iter().zip(elements) {
                    if !seen.insert(element.clone()) {
                        return Err(MergeError::at(
                            path,
                            format!("duplicate entries for key {element}"),
                        ));
                    }
                    path.push(element);
                    out.insert(path);
                    if matches!(list_type, ListType::Map(_)) {
                        walk_value(item, schema.items(), path, out)?;
                    }
                    path.pop();
                }
            }
        },
        _ => out.insert(path),
    }
    Ok(())
}

/// The path element of each item of a `set`/`map` list.
pub(crate) fn list_elements(
    items: &[Value],
    list_type: &ListType,
    path: &[PathElement],
) -> Result<Vec<PathElement>, MergeError> {
    items
        .iter()
        .enumerate()
        .map(|(index, item)| match list_type {
            ListType::Map(keys) => PathElement::key_of(item, keys).ok_or_else(|| {
                MergeError::at(
                    path,
                    format!(
                        "associative list with keys {keys:?} has an element that omits a key field or is not an object"
                    ),
                )
            }),
            ListType::Set if item.is_object() || item.is_array() => Err(MergeError::at(
                path,
                "set list items must be scalars",
            )),
            ListType::Set => Ok(PathElement::value_of(item)),
            ListType::Atomic => Ok(PathElement::Index(index)),
        })
        .collect()
}

/// JSON with object keys sorted at every level, whatever map type serde_json was built with.
pub fn canonical_json(value: &Value) -> String {
    fn sorted(value: &Value) -> Value {
        match value {
            Value::Object(map) => {
                let entries: BTreeMap<&String, Value> = map.iter().map(|(k, v)| (k, sorted(v))).collect();
                Value::Object(entries.into_iter().map(|(k, v)| (k.clone(), v)).collect())
            }
            Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    sorted(value).to_string()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn f(name: &str) -> PathElement {
        PathElement::Field(name.into())
    }

    #[test]
    fn fields_v1_round_trip_with_dot_members() {
        let doc = json!({
            "f:metadata": { "f:labels": { ".": {}, "f:app": {} } },
            "f:spec": { "f:cidrs": { "v:\"10.0.0.0/8\"": {} } },
            "f:status": { "f:conditions": {
                "k:{\"type\":\"Ready\"}": { ".": {}, "f:status": {}, "f:type": {} },
            }},
            "f:x": { "i:0": {} },
        });
        let set = FieldSet::from_fields_v1(&doc).unwrap();
        assert!(set.has(&[f("metadata"), f("labels")]));
        assert!(!set.has(&[f("metadata")]));
        assert!(set.has(&[f("spec"), f("cidrs"), PathElement::Value("\"10.0.0.0/8\"".into())]));
        assert_eq!(set.to_fields_v1(), doc);
        let paths: Vec<String> = set.paths().iter().map(ToString::to_string).collect();
        assert_eq!(
            paths,
            [
                ".metadata.labels",
                ".metadata.labels.app",
                ".spec.cidrs[=\"10.0.0.0/8\"]",
                ".status.conditions[type=\"Ready\"]",
                ".status.conditions[type=\"Ready\"].status",
                ".status.conditions[type=\"Ready\"].type",
                ".x[0]",
            ]
        );
    }

    #[test]
    fn rejects_malformed_fields_v1() {
        assert!(FieldSet::from_fields_v1(&json!({ "x:y": {} })).is_err());
        assert!(FieldSet::from_fields_v1(&json!({ "k:notjson": {} })).is_err());
        assert!(FieldSet::from_fields_v1(&json!({ "f:a": 1 })).is_err());
        assert!(FieldSet::from_fields_v1(&json!([])).is_err());
    }

    #[test]
    fn set_algebra() {
        let mut a = FieldSet::new();
        a.insert(&[f("a"), f("b")]);
        a.insert(&[f("a")]);
        a.insert(&[f("c")]);
        let mut b = FieldSet::new();
        b.insert(&[f("a"), f("b")]);
        b.insert(&[f("d")]);
        let d = a.difference(&b);
        assert!(d.has(&[f("a")]) && d.has(&[f("c")]) && !d.has(&[f("a"), f("b")]));
        let i = a.intersection(&b);
        assert_eq!(i.paths(), vec![Path(vec![f("a"), f("b")])]);
        let u = a.union(&b);
        assert_eq!(u.paths().len(), 4);
        let mut prefixes = FieldSet::new();
        prefixes.insert(&[f("a")]);
        assert_eq!(a.without_prefixes(&prefixes).paths(), vec![Path(vec![f("c")])]);
    }

    #[test]
    fn keys_are_canonical_whatever_the_input_order() {
        let k1 = PathElement::from_fields_v1_key("k:{\"b\":1,\"a\":\"x\"}").unwrap();
        let k2 = PathElement::key_of(&json!({"a": "x", "b": 1, "c": 2}), &["b".into(), "a".into()]);
        assert_eq!(Some(k1.clone()), k2);
        assert_eq!(k1.to_string(), "[a=\"x\",b=1]");
    }
}
