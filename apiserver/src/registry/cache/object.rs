//! One object as the watch cache keeps it: its JSON as served (with `resourceVersion`), encoded
//! once, and the compact form selectors read — namespace, name, labels and the values of the
//! kind's selectable fields. No `serde_json::Value` tree is kept: a list or a watch event copies
//! the bytes (or shares them), and filtering never parses them.

use std::borrow::Borrow;
use std::sync::Arc;

use bytes::Bytes;
use cozyplane_storage::Revision;
use serde_json::Value;

use crate::errors::{ApiError, Result};
use crate::registry::Resource;
use crate::registry::selector::field_text;
use crate::registry::store::ListParams;

/// One cached object.
#[derive(Debug, PartialEq, Eq)]
pub struct Cached {
    /// The storage key relative to the kind's prefix (`<ns>/<name>` or `<name>`): the cache's
    /// order is storage's order, so continue tokens mean the same to both.
    key: Box<str>,
    json: Bytes,
    rv: Revision,
    namespace: Box<str>,
    name: Box<str>,
    /// Sorted by key.
    labels: Box<[(Box<str>, Box<str>)]>,
    /// The values of the kind's selectable fields, in the order the kind declares them, as a
    /// field selector compares them.
    fields: Box<[Box<str>]>,
}

fn text(v: &Value, pointer: &str) -> Box<str> {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .into()
}

impl Cached {
    /// The cached form of `v` (an object with `metadata.resourceVersion` set), stored at `key`
    /// relative to the kind's prefix; `selectable` is the kind's field-selector table.
    pub fn from_value(key: &str, v: &Value, selectable: &[(&str, &str)]) -> Result<Self> {
        let json = serde_json::to_vec(v).map_err(ApiError::internal)?;
        let rv = v
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let mut labels: Vec<(Box<str>, Box<str>)> = v
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.as_str().into(), v.as_str()?.into())))
                    .collect()
            })
            .unwrap_or_default();
        labels.sort_unstable();
        let fields = selectable
            .iter()
            .map(|(_, p)| field_text(v.pointer(p)).into_boxed_str())
            .collect();
        Ok(Self {
            key: key.into(),
            // Exactly sized: the bytes live as long as the object stays cached.
            json: json.into_boxed_slice().into(),
            rv,
            namespace: text(v, "/metadata/namespace"),
            name: text(v, "/metadata/name"),
            labels: labels.into_boxed_slice(),
            fields,
        })
    }

    /// Decodes the stored `value` of `key` (an absolute storage key) at revision `rev`.
    pub fn decode(r: &dyn Resource, key: &str, value: &[u8], rev: Revision) -> Result<Self> {
        let v = r.decode(value, rev)?;
        let prefix = r.prefix(None);
        Self::from_value(
            key.strip_prefix(&prefix).unwrap_or(key),
            &v,
            r.selectable_fields(),
        )
    }

    /// The object's JSON, `metadata.resourceVersion` included.
    pub fn json(&self) -> &Bytes {
        &self.json
    }

    /// The object as a JSON tree (parsed anew: for the representations built per request).
    pub fn value(&self) -> Result<Value> {
        serde_json::from_slice(&self.json).map_err(ApiError::internal)
    }

    /// `metadata.resourceVersion`.
    pub fn rv(&self) -> Revision {
        self.rv
    }

    /// The storage key relative to the kind's prefix.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// `metadata.namespace` (`""` for cluster-scoped objects).
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn label(&self, k: &str) -> Option<&str> {
        self.labels
            .binary_search_by(|(l, _)| (**l).cmp(k))
            .ok()
            .map(|i| &*self.labels[i].1)
    }

    fn field(&self, pointer: &str, selectable: &[(&str, &str)]) -> &str {
        match pointer {
            "/metadata/name" => &self.name,
            "/metadata/namespace" => &self.namespace,
            p => selectable
                .iter()
                .position(|(_, sp)| *sp == p)
                .and_then(|i| self.fields.get(i))
                .map_or("", |f| f),
        }
    }

    /// Whether the object passes the label and field selectors of `p` (`selectable`: the
    /// kind's table the cached form was built with).
    pub fn matches(&self, p: &ListParams, selectable: &[(&str, &str)]) -> bool {
        p.labels.matches_with(|k| self.label(k)) && p.fields.matches_with(|f| self.field(f, selectable))
    }
}

/// A cached object ordered by its key, so the cache's set can be ranged over by key.
#[derive(Clone, Debug)]
pub(super) struct Entry(pub(super) Arc<Cached>);

impl Borrow<str> for Entry {
    fn borrow(&self) -> &str {
        &self.0.key
    }
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.0.key == other.0.key
    }
}

impl Eq for Entry {}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Entry {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.key.cmp(&other.0.key)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::registry::selector::{FieldSelector, LabelSelector};

    const FIELDS: &[(&str, &str)] = &[("spec.node", "/spec/node"), ("spec.count", "/spec/count")];

    fn params(labels: &str, fields: &str) -> ListParams {
        ListParams {
            labels: LabelSelector::parse(labels).unwrap(),
            fields: FieldSelector::parse(fields, FIELDS).unwrap(),
            ..Default::default()
        }
    }

    #[test]
    fn the_bytes_are_the_objects_json_and_the_compact_form_reads_like_the_tree() {
        let v = json!({"metadata": {"name": "a", "namespace": "t", "resourceVersion": "7",
            "labels": {"x": "1", "y": "2"}}, "spec": {"node": "n1", "count": 3}});
        let c = Cached::from_value("t/a", &v, FIELDS).unwrap();
        assert_eq!(c.value().unwrap(), v);
        assert_eq!((c.rv(), c.name(), c.namespace(), c.key()), (7, "a", "t", "t/a"));
        for (l, f, want) in [
            ("x=1", "", true),
            ("x=1,y!=2", "", false),
            ("z", "", false),
            ("!z,y in (2,3)", "spec.node=n1", true),
            ("", "spec.count=3,metadata.namespace=t", true),
            ("", "spec.node!=n1", false),
            ("", "metadata.name=b", false),
        ] {
            assert_eq!(c.matches(&params(l, f), FIELDS), want, "{l} {f}");
        }
    }

    proptest! {
        /// The compact form decides every selector exactly as the JSON tree does.
        #[test]
        fn compact_filtering_equals_tree_filtering(
            labels in proptest::collection::btree_map("[a-c]", "[0-2]", 0..3),
            node in proptest::option::of("n[0-2]"),
            count in proptest::option::of(0u8..3),
            sel_label in "[a-c]",
            sel_value in "[0-2]",
            op in 0usize..6,
            field in proptest::sample::select(vec!["spec.node", "spec.count", "metadata.name"]),
            fvalue in proptest::sample::select(vec!["n1", "2", "", "a"]),
            neq in any::<bool>(),
        ) {
            let mut v = json!({"metadata": {"name": "a", "resourceVersion": "1", "labels": labels}, "spec": {}});
            if let Some(n) = node { v["spec"]["node"] = json!(n); }
            if let Some(c) = count { v["spec"]["count"] = json!(c); }
            let l = match op {
                0 => format!("{sel_label}={sel_value}"),
                1 => format!("{sel_label}!={sel_value}"),
                2 => format!("{sel_label} in ({sel_value},1)"),
                3 => format!("{sel_label} notin ({sel_value})"),
                4 => sel_label.clone(),
                _ => format!("!{sel_label}"),
            };
            let f = format!("{field}{}{fvalue}", if neq { "!=" } else { "=" });
            let p = params(&l, &f);
            let c = Cached::from_value("a", &v, FIELDS).unwrap();
            prop_assert_eq!(
                c.matches(&p, FIELDS),
                p.labels.matches_object(&v) && p.fields.matches_object(&v)
            );
        }
    }
}
