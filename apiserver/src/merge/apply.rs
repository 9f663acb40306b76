//! Server-side apply and field ownership tracking for non-apply writes.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use super::fieldset::{FieldSet, MergeError, Path, PathElement, list_elements};
use super::managed::{ManagedFields, ManagedFieldsEntry, Operation};
use super::schema::{ListType, Schema};

/// Who is writing, through which endpoint, and when.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteContext<'a> {
    /// The field manager (`fieldManager`, else the User-Agent prefix).
    pub manager: &'a str,
    /// `Some("status")` for writes to the status subresource.
    pub subresource: Option<&'a str>,
    /// `group/version` of the request, e.g. `sdn.cozystack.io/v1alpha1`.
    pub api_version: &'a str,
    /// Current time as RFC 3339 with seconds precision (`2026-11-29T10:00:00Z`).
    pub time: &'a str,
}

/// One field another manager owns with a different value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    /// How the message names the manager, e.g. `"kubectl"` or `"ops" using g/v1`.
    pub manager: String,
    /// The field, e.g. `.spec.cidrs`.
    pub field: String,
}

/// The conflicts that made an apply fail; reported as 409 with one cause per entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflicts(pub Vec<Conflict>);

impl Conflicts {
    /// The Status message, e.g. `Apply failed with 1 conflict: conflict with "mgr" using
    /// sdn.cozystack.io/v1alpha1: .spec.cidrs`.
    pub fn message(&self) -> String {
        if let [only] = self.0.as_slice() {
            return format!(
                "Apply failed with 1 conflict: conflict with {}: {}",
                only.manager, only.field
            );
        }
        let mut by_manager: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for c in &self.0 {
            by_manager.entry(&c.manager).or_default().push(&c.field);
        }
        let mut lines = Vec::new();
        for (manager, fields) in by_manager {
            lines.push(format!("conflicts with {manager}:"));
            lines.extend(fields.into_iter().map(|f| format!("- {f}")));
        }
        format!(
            "Apply failed with {} conflicts: {}",
            self.0.len(),
            lines.join("\n")
        )
    }

    /// The full 409 `Status` object (`reason: Conflict`, one `FieldManagerConflict` cause per
    /// field and manager).
    pub fn to_status(&self) -> Value {
        let causes: Vec<Value> = self
            .0
            .iter()
            .map(|c| {
                json!({
                    "reason": "FieldManagerConflict",
                    "message": format!("conflict with {}", c.manager),
                    "field": c.field,
                })
            })
            .collect();
        json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message(),
            "reason": "Conflict",
            "details": { "causes": causes },
            "code": 409,
        })
    }
}

/// Why an apply failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    /// Other managers own fields the apply would change (409 `Conflict`).
    #[error("{}", .0.message())]
    Conflicts(Conflicts),
    /// The configuration itself is unusable (400 `BadRequest`), e.g. it sets
    /// `metadata.managedFields` (message `metadata.managedFields must be nil`), is not an
    /// object, or has a keyed-list item without its key or with a duplicate key.
    #[error("{0}")]
    Invalid(String),
}

impl From<MergeError> for ApplyError {
    fn from(e: MergeError) -> Self {
        ApplyError::Invalid(e.to_string())
    }
}

/// Metadata fields that take part in merging and ownership; the rest of `metadata` (name,
/// namespace, uid, resourceVersion, …) and `apiVersion`/`kind` are never owned.
pub const MANAGED_METADATA_FIELDS: [&str; 4] = ["labels", "annotations", "finalizers", "ownerReferences"];

/// Server-side apply of `config` by `ctx.manager` onto `live` (`None` = create).
///
/// Returns the new object, with `metadata.managedFields` already written into it, and the
/// entries themselves. Fields of the status (main resource) or of everything but the status
/// (`ctx.subresource == Some("status")`) keep their live values and are not owned, if the
/// schema declares a `status` property.
///
/// Errors: [`ApplyError::Conflicts`] unless `force`; [`ApplyError::Invalid`] for malformed
/// configurations.
pub fn apply(
    live: Option<&Value>,
    config: &Value,
    managed: &ManagedFields,
    ctx: &WriteContext<'_>,
    force: bool,
    schema: &Schema,
) -> Result<(Value, ManagedFields), ApplyError> {
    if !config.is_object() {
        return Err(ApplyError::Invalid(
            "apply configuration must be a JSON object".into(),
        ));
    }
    if config
        .pointer("/metadata/managedFields")
        .is_some_and(|m| !m.is_null())
    {
        return Err(ApplyError::Invalid("metadata.managedFields must be nil".into()));
    }
    let reset = reset_fields(schema, ctx.subresource);
    let live_view = managed_view(live.unwrap_or(&Value::Object(Map::new())));
    let mut config_view = managed_view(config);
    drop_reset(&mut config_view, &reset);
    let config_set = FieldSet::from_value(&config_view, schema)?;

    let mut merged = merge_values(Some(&live_view), &config_view, schema, &mut Vec::new())?;

    let mut entries = managed.0.clone();
    let mine = entries
        .iter()
        .position(|e| e.is(ctx.manager, Operation::Apply, ctx.subresource, ctx.api_version));
    let last_set = mine.map(|i| entries[i].fields.clone()).unwrap_or_default();
    let previous_time = mine.and_then(|i| entries[i].time.clone());
    if let Some(i) = mine {
        entries.remove(i);
    }

    // Fields this manager stops applying and nobody else owns are removed.
    let owned = entries
        .iter()
        .fold(config_set.clone(), |acc, e| acc.union(&e.fields));
    let to_remove = last_set.difference(&owned);
    prune(&mut merged, &to_remove, &owned, &config_view, schema);

    let comparison = compare(&live_view, &merged, schema).without_prefixes(&reset);
    let changed = comparison.modified.union(&comparison.added);
    let mut conflicts = Vec::new();
    for entry in &mut entries {
        let clash = entry.fields.intersection(&changed);
        if !clash.is_empty() {
            let name = entry.display_name();
            conflicts.extend(clash.paths().into_iter().map(|p| Conflict {
                manager: name.clone(),
                field: p.to_string(),
            }));
            entry.fields = entry.fields.difference(&clash);
        }
        entry.fields = entry.fields.difference(&comparison.removed);
    }
    if !force && !conflicts.is_empty() {
        conflicts.sort_by(|a, b| (&a.manager, &a.field).cmp(&(&b.manager, &b.field)));
        return Err(ApplyError::Conflicts(Conflicts(conflicts)));
    }
    strip_nulls(&mut merged);

    let object_changed = merged != live_view || live.is_none();
    let time = if object_changed || last_set != config_set || previous_time.is_none() {
        Some(ctx.time.to_owned())
    } else {
        previous_time
    };
    entries.push(ManagedFieldsEntry {
        manager: ctx.manager.to_owned(),
        operation: Operation::Apply,
        api_version: ctx.api_version.to_owned(),
        time,
        fields: config_set,
        subresource: ctx.subresource.map(str::to_owned),
    });
    entries.retain(|e| !e.fields.is_empty());
    let managed = ManagedFields(entries);

    let base = match live {
        Some(live) => live.clone(),
        None => config.clone(),
    };
    let mut object = splice(base, merged);
    managed.write_into(&mut object);
    Ok((object, managed))
}

/// Ownership after a non-apply write (POST, PUT, JSON/merge/strategic PATCH) by
/// `ctx.manager`: it gains the fields whose values it added or changed between `old` (`None`
/// for create) and `new`; other managers lose those; everybody loses removed fields; empty
/// entries are dropped. `new` is the object as it will be stored (after the strategy reset the
/// status or spec).
pub fn update_managed_fields(
    old: Option<&Value>,
    new: &Value,
    managed: &ManagedFields,
    ctx: &WriteContext<'_>,
    schema: &Schema,
) -> ManagedFields {
    let reset = reset_fields(schema, ctx.subresource);
    let old_view = managed_view(old.unwrap_or(&Value::Object(Map::new())));
    let comparison = compare(&old_view, &managed_view(new), schema).without_prefixes(&reset);
    let changed = comparison.modified.union(&comparison.added);
    let mut entries = managed.0.clone();
    let mine = entries
        .iter()
        .position(|e| e.is(ctx.manager, Operation::Update, ctx.subresource, ctx.api_version));
    let mut own = match mine {
        Some(i) => entries.remove(i),
        None => ManagedFieldsEntry {
            manager: ctx.manager.to_owned(),
            operation: Operation::Update,
            api_version: ctx.api_version.to_owned(),
            time: None,
            fields: FieldSet::new(),
            subresource: ctx.subresource.map(str::to_owned),
        },
    };
    for entry in &mut entries {
        entry.fields = entry.fields.difference(&changed).difference(&comparison.removed);
    }
    let fields = own.fields.difference(&comparison.removed).union(&changed);
    if fields != own.fields || own.time.is_none() {
        own.time = Some(ctx.time.to_owned());
    }
    own.fields = fields;
    entries.push(own);
    entries.retain(|e| !e.fields.is_empty());
    ManagedFields(entries)
}

/// `true` if the objects are equal once `metadata.managedFields[*].time` is ignored: the
/// handler's no-op test after apply (a no-op must not bump resourceVersion).
pub fn equal_ignoring_managed_fields_time(a: &Value, b: &Value) -> bool {
    fn without_times(v: &Value) -> Value {
        let mut v = v.clone();
        if let Some(Value::Array(entries)) = v.pointer_mut("/metadata/managedFields") {
            for e in entries {
                if let Some(e) = e.as_object_mut() {
                    e.remove("time");
                }
            }
        }
        v
    }
    without_times(a) == without_times(b)
}

/// Top-level fields a write through this endpoint may not change: `status` for the main
/// resource, everything but `status` and `metadata` for the status subresource. Empty when the
/// schema has no `status` property.
pub fn reset_fields(schema: &Schema, subresource: Option<&str>) -> FieldSet {
    let mut out = FieldSet::new();
    let Schema::Map(root) = schema else {
        return out;
    };
    if !root.fields.contains_key("status") {
        return out;
    }
    match subresource {
        None => out.insert(&[PathElement::Field("status".into())]),
        Some(_) => {
            for name in root.fields.keys() {
                if !matches!(name.as_str(), "status" | "metadata" | "apiVersion" | "kind") {
                    out.insert(&[PathElement::Field(name.clone())]);
                }
            }
        }
    }
    out
}

/// The part of an object that takes part in ownership: everything but `apiVersion`, `kind`
/// and the metadata fields outside [`MANAGED_METADATA_FIELDS`].
pub fn managed_view(object: &Value) -> Value {
    let mut out = Map::new();
    if let Value::Object(obj) = object {
        for (key, value) in obj {
            match key.as_str() {
                "apiVersion" | "kind" => {}
                "metadata" => {
                    let meta: Map<String, Value> = value
                        .as_object()
                        .map(|m| {
                            m.iter()
                                .filter(|(k, _)| MANAGED_METADATA_FIELDS.contains(&k.as_str()))
                                .map(|(k, v)| (k.clone(), v.clone()))
                                .collect()
                        })
                        .unwrap_or_default();
                    if !meta.is_empty() {
                        out.insert(key.clone(), Value::Object(meta));
                    }
                }
                _ => {
                    out.insert(key.clone(), value.clone());
                }
            }
        }
    }
    Value::Object(out)
}

/// Writes a managed view back into the full object `base`.
fn splice(base: Value, view: Value) -> Value {
    let Value::Object(mut out) = base else {
        return base;
    };
    let Value::Object(mut view) = view else {
        return Value::Object(out);
    };
    out.retain(|k, _| matches!(k.as_str(), "apiVersion" | "kind" | "metadata") || view.contains_key(k));
    let view_meta = view.remove("metadata");
    for (k, v) in view {
        out.insert(k, v);
    }
    let meta = out.entry("metadata").or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(meta) = meta {
        for name in MANAGED_METADATA_FIELDS {
            match view_meta.as_ref().and_then(|m| m.get(name)) {
                Some(v) => meta.insert(name.into(), v.clone()),
                None => meta.remove(name),
            };
        }
    }
    Value::Object(out)
}

/// Drops the top-level fields this endpoint may not change; merging then keeps their live values.
fn drop_reset(view: &mut Value, reset: &FieldSet) {
    let Value::Object(obj) = view else {
        return;
    };
    for path in reset.paths() {
        if let [PathElement::Field(name)] = path.0.as_slice() {
            obj.remove(name);
        }
    }
}

/// Merges `rhs` (the configuration) into `lhs` (live) per schema.
fn merge_values(
    lhs: Option<&Value>,
    rhs: &Value,
    schema: &Schema,
    path: &mut Vec<PathElement>,
) -> Result<Value, MergeError> {
    match (lhs, rhs) {
        (Some(Value::Object(l)), Value::Object(r))
            if !schema.is_atomic_map() && !matches!(schema, Schema::Scalar) =>
        {
            let mut out = l.clone();
            for (key, rv) in r {
                path.push(PathElement::Field(key.clone()));
                let merged = merge_values(l.get(key), rv, schema.field(key), path)?;
                path.pop();
                out.insert(key.clone(), merged);
            }
            Ok(Value::Object(out))
        }
        (Some(Value::Array(l)), Value::Array(r)) if schema.list_type() != ListType::Atomic => {
            merge_lists(l, r, schema, path)
        }
        (None, Value::Object(r)) if !schema.is_atomic_map() => {
            // Validate nested lists of a new subtree the same way.
            let mut out = Map::new();
            for (key, rv) in r {
                path.push(PathElement::Field(key.clone()));
                out.insert(key.clone(), merge_values(None, rv, schema.field(key), path)?);
                path.pop();
            }
            Ok(Value::Object(out))
        }
        (None | Some(_), Value::Array(r)) if schema.list_type() != ListType::Atomic => {
            merge_lists(&[], r, schema, path)
        }
        _ => Ok(rhs.clone()),
    }
}

/// Elements of live list items; items without keys or with repeated keys get unique index
/// elements so they are kept untouched.
pub(crate) fn lenient_elements(items: &[Value], list_type: &ListType) -> Vec<PathElement> {
    let mut seen = BTreeSet::new();
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let element = match list_type {
                ListType::Map(keys) => PathElement::key_of(item, keys),
                ListType::Set => Some(PathElement::value_of(item)),
                ListType::Atomic => None,
            };
            match element {
                Some(e) if seen.insert(e.clone()) => e,
                _ => PathElement::Index(i),
            }
        })
        .collect()
}

/// Merges two associative lists: configuration items keep their relative order, live-only items
/// stay where they were relative to the shared ones.
fn merge_lists(
    l: &[Value],
    r: &[Value],
    schema: &Schema,
    path: &mut Vec<PathElement>,
) -> Result<Value, MergeError> {
    let list_type = schema.list_type();
    let lel = lenient_elements(l, &list_type);
    let rel = list_elements(r, &list_type, path)?;
    let mut r_index = BTreeMap::new();
    for (i, e) in rel.iter().enumerate() {
        if r_index.insert(e.clone(), i).is_some() {
            return Err(MergeError::at(path, format!("duplicate entries for key {e}")));
        }
    }
    let l_index: BTreeMap<&PathElement, usize> = lel.iter().enumerate().map(|(i, e)| (e, i)).collect();
    let shared: Vec<&PathElement> = rel.iter().filter(|e| l_index.contains_key(e)).collect();
    let mut next_shared = 0;
    let (mut li, mut ri) = (0, 0);
    let mut l_done = vec![false; l.len()];
    let mut r_done = vec![false; r.len()];
    let mut out = Vec::with_capacity(l.len() + r.len());
    let item_schema = schema.items();
    let merge_item = |lv: Option<&Value>, rv: &Value, e: &PathElement, path: &mut Vec<PathElement>| {
        path.push(e.clone());
        let merged = merge_values(lv, rv, item_schema, path);
        path.pop();
        merged
    };
    loop {
        while li < l.len() && l_done[li] {
            li += 1;
        }
        while ri < r.len() && r_done[ri] {
            ri += 1;
        }
        if li >= l.len() && ri >= r.len() {
            break;
        }
        if li < l.len() && ri < r.len() && lel[li] == rel[ri] {
            out.push(merge_item(Some(&l[li]), &r[ri], &rel[ri], path)?);
            l_done[li] = true;
            r_done[ri] = true;
            next_shared += 1;
            continue;
        }
        if li < l.len() {
            if !r_index.contains_key(&lel[li]) {
                out.push(l[li].clone());
                l_done[li] = true;
                continue;
            }
            if shared.get(next_shared) != Some(&&lel[li]) {
                // Shared, but the configuration puts it later: emit it at its place there.
                li += 1;
                continue;
            }
        }
        if ri < r.len() {
            match l_index.get(&rel[ri]) {
                Some(&lj) => {
                    out.push(merge_item(Some(&l[lj]), &r[ri], &rel[ri], path)?);
                    l_done[lj] = true;
                    next_shared += 1;
                }
                None => out.push(merge_item(None, &r[ri], &rel[ri], path)?),
            }
            r_done[ri] = true;
        }
    }
    Ok(Value::Array(out))
}

/// Added, changed and removed paths between two managed views.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Comparison {
    pub(crate) added: FieldSet,
    pub(crate) modified: FieldSet,
    pub(crate) removed: FieldSet,
}

impl Comparison {
    fn without_prefixes(&self, prefixes: &FieldSet) -> Comparison {
        Comparison {
            added: self.added.without_prefixes(prefixes),
            modified: self.modified.without_prefixes(prefixes),
            removed: self.removed.without_prefixes(prefixes),
        }
    }
}

pub(crate) fn compare(old: &Value, new: &Value, schema: &Schema) -> Comparison {
    let mut out = Comparison::default();
    compare_at(old, new, schema, &mut Vec::new(), &mut out);
    out
}

fn is_granular_object(v: &Value, schema: &Schema) -> bool {
    v.is_object() && !schema.is_atomic_map() && !matches!(schema, Schema::Scalar)
}

fn compare_at(old: &Value, new: &Value, schema: &Schema, path: &mut Vec<PathElement>, out: &mut Comparison) {
    match (old, new) {
        (Value::Object(o), Value::Object(n)) if is_granular_object(new, schema) => {
            let keys: BTreeSet<&String> = o.keys().chain(n.keys()).collect();
            for key in keys {
                path.push(PathElement::Field(key.clone()));
                let child = schema.field(key);
                match (o.get(key), n.get(key)) {
                    (Some(ov), Some(nv)) => compare_at(ov, nv, child, path, out),
                    (None, Some(nv)) => {
                        if owned_when_added(schema, key, nv) {
                            out.added.insert(path);
                        }
                        collect(nv, child, path, &mut out.added, false);
                    }
                    (Some(ov), None) => {
                        out.removed.insert(path);
                        collect(ov, child, path, &mut out.removed, true);
                    }
                    (None, None) => {}
                }
                path.pop();
            }
        }
        (Value::Array(o), Value::Array(n)) if schema.list_type() != ListType::Atomic => {
            let list_type = schema.list_type();
            let oe = lenient_elements(o, &list_type);
            let ne = lenient_elements(n, &list_type);
            let old_items: BTreeMap<&PathElement, &Value> = oe.iter().zip(o).collect();
            let new_items: BTreeMap<&PathElement, &Value> = ne.iter().zip(n).collect();
            let elements: BTreeSet<&PathElement> = oe.iter().chain(ne.iter()).collect();
            for e in elements {
                path.push(e.clone());
                match (old_items.get(e), new_items.get(e)) {
                    (Some(ov), Some(nv)) => compare_at(ov, nv, schema.items(), path, out),
                    (None, Some(nv)) => {
                        out.added.insert(path);
                        collect(nv, schema.items(), path, &mut out.added, false);
                    }
                    (Some(ov), None) => {
                        out.removed.insert(path);
                        collect(ov, schema.items(), path, &mut out.removed, true);
                    }
                    (None, None) => {}
                }
                path.pop();
            }
        }
        _ => {
            if old != new {
                out.modified.insert(path);
            }
        }
    }
}

/// Whether a field that appears in an Update is owned itself (not only its contents): always,
/// except a declared field holding a non-empty struct (Go's non-pointer structs exist in the
/// empty object, so Kubernetes never records them as added; maps such as labels are).
fn owned_when_added(parent: &Schema, key: &str, value: &Value) -> bool {
    let is_struct = matches!(parent.field(key), Schema::Map(m) if !m.fields.is_empty());
    !parent.is_declared_field(key) || value.as_object().is_none_or(Map::is_empty) || !is_struct
}

/// Inserts the descendants of `value` at `path`: all nodes if `all`, else as
/// [`FieldSet::from_value`] would (leaves, map elements, list items).
fn collect(value: &Value, schema: &Schema, path: &mut Vec<PathElement>, out: &mut FieldSet, all: bool) {
    match value {
        Value::Object(map) if is_granular_object(value, schema) => {
            for (key, child) in map {
                path.push(PathElement::Field(key.clone()));
                if all || owned_when_added(schema, key, child) {
                    out.insert(path);
                }
                collect(child, schema.field(key), path, out, all);
                path.pop();
            }
        }
        Value::Array(items) if schema.list_type() != ListType::Atomic => {
            let list_type = schema.list_type();
            for (item, e) in items.iter().zip(lenient_elements(items, &list_type)) {
                path.push(e);
                out.insert(path);
                if matches!(list_type, ListType::Map(_)) {
                    collect(item, schema.items(), path, out, all);
                }
                path.pop();
            }
        }
        _ => {}
    }
}

/// Removes the paths of `to_remove` from `value`, except nodes that still have owned
/// descendants and the key fields of kept list items; containers emptied by the removal are
/// removed too unless the configuration mentions them.
fn prune(value: &mut Value, to_remove: &FieldSet, owned: &FieldSet, config: &Value, schema: &Schema) {
    for path in to_remove.paths() {
        if owned.has_descendants(&path.0) {
            continue;
        }
        remove_path(value, &path.0, schema, config);
    }
}

/// Removes one path; returns `true` if `value` itself became an empty container because of the
/// removal and the configuration does not mention it, so the caller should drop it too.
fn remove_path(value: &mut Value, path: &[PathElement], schema: &Schema, config: &Value) -> bool {
    let Some((first, rest)) = path.split_first() else {
        return false;
    };
    match (value, first) {
        (Value::Object(map), PathElement::Field(name)) => {
            let child_config = config.get(name).unwrap_or(&Value::Null);
            let remove = if rest.is_empty() {
                map.contains_key(name)
            } else if let Some(child) = map.get_mut(name) {
                remove_path(child, rest, schema.field(name), child_config)
            } else {
                false
            };
            if remove {
                map.remove(name);
            }
            remove && map.is_empty() && config.is_null()
        }
        (Value::Array(items), element) => {
            let list_type = schema.list_type();
            let elements = lenient_elements(items, &list_type);
            let Some(index) = elements.iter().position(|e| e == element) else {
                return false;
            };
            if rest.is_empty() {
                items.remove(index);
                return items.is_empty() && config.is_null();
            } else {
                // Never strip a key field from an item that stays.
                if let (ListType::Map(keys), [PathElement::Field(name)]) = (&list_type, rest)
                    && keys.contains(name)
                {
                    return false;
                }
                let item_config = config
                    .as_array()
                    .and_then(|c| {
                        let ce = lenient_elements(c, &list_type);
                        ce.iter().position(|e| e == element).map(|i| &c[i])
                    })
                    .unwrap_or(&Value::Null);
                if remove_path(&mut items[index], rest, schema.items(), item_config) {
                    items.remove(index);
                    return items.is_empty() && config.is_null();
                }
            }
            false
        }
        _ => false,
    }
}

fn strip_nulls(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(strip_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}

/// Paths of a field set rendered as in conflict messages (for tests and logs).
pub fn field_paths(set: &FieldSet) -> Vec<String> {
    set.paths().iter().map(Path::to_string).collect()
}
