//! Strategic merge patch (`application/strategic-merge-patch+json`), driven by the schema's
//! `x-kubernetes-patch-strategy` and `x-kubernetes-patch-merge-key`.

use serde_json::{Map, Value};

use super::fieldset::canonical_json;
use super::schema::Schema;

/// A patch that cannot be applied; the handler answers 400 `BadRequest` with the message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SmpError {
    /// The patch (or a nested value that must be an object) is not a JSON object.
    #[error("{0}: strategic merge patch must be a JSON object")]
    NotAnObject(String),
    /// A `$patch`, `$retainKeys`, `$setElementOrder` or `$deleteFromPrimitiveList` directive
    /// with a wrong value or in a wrong place.
    #[error("{path}: {message}")]
    InvalidDirective {
        /// Where, e.g. `.metadata.ownerReferences`.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// An item of a list merged by key lacks the merge key.
    #[error("{path}: map: {item} does not contain declared merge key: {key}")]
    MissingMergeKey {
        /// The list.
        path: String,
        /// The item, as JSON.
        item: String,
        /// The merge key.
        key: String,
    },
}

const PATCH: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ELEMENT_ORDER: &str = "$setElementOrder/";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList/";

/// Applies a strategic merge patch to `original`.
///
/// Objects merge key by key and `null` deletes a key. Lists whose schema says
/// `x-kubernetes-patch-strategy: merge` merge by `x-kubernetes-patch-merge-key` (objects) or by
/// value (scalars); all other lists, and every value without schema, are replaced. Directives:
/// `$patch: replace|delete|merge` in an object or list item, `$retainKeys`,
/// `$setElementOrder/<list>` and `$deleteFromPrimitiveList/<list>`.
pub fn strategic_merge(original: &Value, patch: &Value, schema: &Schema) -> Result<Value, SmpError> {
    let Value::Object(patch) = patch else {
        return Err(SmpError::NotAnObject(String::new()));
    };
    let original = original.as_object().cloned().unwrap_or_default();
    match merge_map(original, patch, schema, "")? {
        Some(merged) => Ok(Value::Object(merged)),
        None => Ok(Value::Object(Map::new())),
    }
}

fn invalid(path: &str, message: impl Into<String>) -> SmpError {
    SmpError::InvalidDirective {
        path: path.to_owned(),
        message: message.into(),
    }
}

/// Merges `patch` into `original`; `None` means the object is deleted (`$patch: delete`).
fn merge_map(
    mut original: Map<String, Value>,
    patch: &Map<String, Value>,
    schema: &Schema,
    path: &str,
) -> Result<Option<Map<String, Value>>, SmpError> {
    match patch.get(PATCH) {
        None => {}
        Some(Value::String(d)) if d == "merge" => {}
        Some(Value::String(d)) if d == "delete" => return Ok(None),
        Some(Value::String(d)) if d == "replace" => {
            let mut out = Map::new();
            for (k, v) in patch {
                if k != PATCH {
                    out.insert(k.clone(), clean(v, schema.field(k), &format!("{path}.{k}"))?);
                }
            }
            return Ok(Some(out));
        }
        Some(other) => return Err(invalid(path, format!("unknown patch type: {other}"))),
    }
    let retain = match patch.get(RETAIN_KEYS) {
        None => None,
        Some(Value::Array(keys)) => Some(
            keys.iter()
                .map(|k| k.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| invalid(path, "$retainKeys must be a list of strings"))?,
        ),
        Some(_) => return Err(invalid(path, "$retainKeys must be a list of strings")),
    };
    // Deletions from primitive lists happen before the lists are merged.
    for (key, value) in patch {
        if let Some(field) = key.strip_prefix(DELETE_FROM_PRIMITIVE_LIST) {
            let Value::Array(remove) = value else {
                return Err(invalid(
                    &format!("{path}.{key}"),
                    "$deleteFromPrimitiveList must be a list",
                ));
            };
            if let Some(Value::Array(items)) = original.get_mut(field) {
                items.retain(|item| !remove.contains(item));
            }
        }
    }
    let mut orders = Vec::new();
    for (key, value) in patch {
        if key == PATCH || key == RETAIN_KEYS || key.starts_with(DELETE_FROM_PRIMITIVE_LIST) {
            continue;
        }
        let child_path = format!("{path}.{key}");
        if let Some(field) = key.strip_prefix(SET_ELEMENT_ORDER) {
            let Value::Array(order) = value else {
                return Err(invalid(&child_path, "$setElementOrder must be a list"));
            };
            orders.push((field.to_owned(), order.clone()));
            continue;
        }
        if key.starts_with('$') {
            return Err(invalid(&child_path, format!("unknown directive {key}")));
        }
        let child_schema = schema.field(key);
        if value.is_null() {
            original.remove(key);
            continue;
        }
        let merged = merge_value(original.remove(key), value, child_schema, &child_path)?;
        if let Some(merged) = merged {
            original.insert(key.clone(), merged);
        }
    }
    for (field, order) in orders {
        let child_schema = schema.field(&field);
        if let Some(Value::Array(items)) = original.get_mut(&field) {
            let key = child_schema.patch_meta().merge_key;
            apply_order(items, &order, key.as_deref());
        }
    }
    if let Some(retain) = retain {
        original.retain(|k, _| retain.iter().any(|r| r == k));
    }
    Ok(Some(original))
}

/// Merges one value; `None` deletes it.
fn merge_value(
    original: Option<Value>,
    patch: &Value,
    schema: &Schema,
    path: &str,
) -> Result<Option<Value>, SmpError> {
    let replace = schema.patch_meta().has("replace");
    match (original, patch) {
        (Some(Value::Object(o)), Value::Object(p)) if !replace => {
            Ok(merge_map(o, p, schema, path)?.map(Value::Object))
        }
        (None | Some(Value::Null), Value::Object(p)) if !replace => {
            Ok(merge_map(Map::new(), p, schema, path)?.map(Value::Object))
        }
        (original, Value::Array(p)) if schema.patch_meta().has("merge") && !replace => {
            let original = match original {
                Some(Value::Array(o)) => o,
                _ => Vec::new(),
            };
            merge_list(original, p, schema, path).map(|l| Some(Value::Array(l)))
        }
        (_, patch) => clean(patch, schema, path).map(Some),
    }
}

/// A patch value taken as is, with directives processed against nothing and nulls dropped.
fn clean(patch: &Value, schema: &Schema, path: &str) -> Result<Value, SmpError> {
    match patch {
        Value::Object(p) => Ok(Value::Object(
            merge_map(Map::new(), p, schema, path)?.unwrap_or_default(),
        )),
        Value::Array(items) => {
            let mut out = Vec::with_capacity(items.len());
            for item in items {
                if let Value::Object(o) = item
                    && o.contains_key(PATCH)
                {
                    if schema.patch_meta().has("merge") {
                        // A list-item directive in a list that did not exist.
                        continue;
                    }
                    return Err(invalid(
                        path,
                        "$patch in an item of a list without merge strategy",
                    ));
                }
                out.push(clean(item, schema.items(), path)?);
            }
            Ok(Value::Array(out))
        }
        other => Ok(other.clone()),
    }
}

fn merge_list(
    mut original: Vec<Value>,
    patch: &[Value],
    schema: &Schema,
    path: &str,
) -> Result<Vec<Value>, SmpError> {
    let meta = schema.patch_meta();
    // `{"$patch": "replace"}` as an item replaces the whole list with the other items.
    let mut replace_all = false;
    for item in patch {
        if let Some(Value::Object(o)) = Some(item)
            && let Some(directive) = o.get(PATCH)
            && meta.merge_key.as_ref().is_none_or(|k| !o.contains_key(k))
        {
            match directive.as_str() {
                Some("replace") => replace_all = true,
                Some("delete") if meta.merge_key.is_none() => {
                    // `[{"$patch": "delete"}]` on a primitive list clears it.
                    original.clear();
                }
                _ => return Err(invalid(path, format!("invalid list directive {directive}"))),
            }
        }
    }
    let patch_items: Vec<&Value> = patch
        .iter()
        .filter(|item| {
            !item.as_object().is_some_and(|o| {
                o.contains_key(PATCH) && meta.merge_key.as_ref().is_none_or(|k| !o.contains_key(k))
            })
        })
        .collect();
    if replace_all {
        return patch_items
            .into_iter()
            .map(|i| clean(i, schema.items(), path))
            .collect();
    }
    let Some(key) = meta.merge_key else {
        // Primitive list: union, original order first, without duplicates.
        for item in patch_items {
            if item.is_object() {
                return Err(invalid(
                    path,
                    "merge strategy without merge key needs a list of scalars",
                ));
            }
            if !original.contains(item) {
                original.push(item.clone());
            }
        }
        return Ok(original);
    };
    for item in patch_items {
        let Value::Object(p) = item else {
            return Err(SmpError::NotAnObject(path.to_owned()));
        };
        let Some(id) = p.get(&key) else {
            return Err(SmpError::MissingMergeKey {
                path: path.to_owned(),
                item: canonical_json(item),
                key: key.clone(),
            });
        };
        let position = original.iter().position(|o| o.get(&key) == Some(id));
        let item_path = format!("{path}[{key}={}]", canonical_json(id));
        match p.get(PATCH).and_then(Value::as_str) {
            Some("delete") => {
                original.retain(|o| o.get(&key) != Some(id));
                continue;
            }
            Some("replace") => {
                let mut replacement = p.clone();
                replacement.remove(PATCH);
                let replacement = clean(&Value::Object(replacement), schema.items(), &item_path)?;
                match position {
                    Some(i) => original[i] = replacement,
                    None => original.push(replacement),
                }
                continue;
            }
            _ => {}
        }
        match position {
            Some(i) => {
                let existing = std::mem::take(&mut original[i]);
                let existing = existing.as_object().cloned().unwrap_or_default();
                match merge_map(existing, p, schema.items(), &item_path)? {
                    Some(merged) => original[i] = Value::Object(merged),
                    None => {
                        original.remove(i);
                    }
                }
            }
            None => {
                if let Some(merged) = merge_map(Map::new(), p, schema.items(), &item_path)? {
                    original.push(Value::Object(merged));
                }
            }
        }
    }
    Ok(original)
}

/// `$setElementOrder`: the listed items take the slots the listed items occupy, in the listed
/// order; other items keep their slots. Order entries not in the list are ignored.
fn apply_order(items: &mut [Value], order: &[Value], key: Option<&str>) {
    let identity = |v: &Value| -> Option<Value> {
        match key {
            Some(k) => v.get(k).cloned(),
            None => Some(v.clone()),
        }
    };
    let wanted: Vec<Value> = order.iter().filter_map(&identity).collect();
    let rank = |v: &Value| identity(v).and_then(|id| wanted.iter().position(|w| *w == id));
    let slots: Vec<usize> = (0..items.len()).filter(|&i| rank(&items[i]).is_some()).collect();
    let mut listed: Vec<Value> = slots.iter().map(|&i| items[i].clone()).collect();
    listed.sort_by_key(|v| rank(v).unwrap_or(usize::MAX));
    for (slot, value) in slots.into_iter().zip(listed) {
        items[slot] = value;
    }
}
