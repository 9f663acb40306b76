//! `metadata.managedFields`: who owns which fields.

use serde_json::{Map, Value, json};

use super::fieldset::{FieldSet, FieldsV1Error};

/// `operation` of a managedFields entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Operation {
    /// Server-side apply (`application/apply-patch+yaml`).
    Apply,
    /// Any other write: POST, PUT, non-apply PATCH.
    Update,
}

impl Operation {
    /// The wire value, `Apply` or `Update`.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// One entry of `metadata.managedFields`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManagedFieldsEntry {
    /// The field manager (`fieldManager` query parameter or User-Agent prefix).
    pub manager: String,
    /// How the fields were written.
    pub operation: Operation,
    /// `group/version` the fields were written in.
    pub api_version: String,
    /// RFC 3339 time of the manager's last change (`None` if absent).
    pub time: Option<String>,
    /// The owned fields (`fieldsType: FieldsV1`).
    pub fields: FieldSet,
    /// `status` for writes through the status subresource; `None` for the main resource.
    pub subresource: Option<String>,
}

impl ManagedFieldsEntry {
    /// `true` if this entry belongs to the writer identified by the arguments. Update entries
    /// are also per API version, as in Kubernetes; Apply entries are not.
    pub fn is(
        &self,
        manager: &str,
        operation: Operation,
        subresource: Option<&str>,
        api_version: &str,
    ) -> bool {
        self.manager == manager
            && self.operation == operation
            && self.subresource.as_deref() == subresource
            && (operation == Operation::Apply || self.api_version == api_version)
    }

    /// How conflict messages name this manager: `"name"` for appliers, `"name" using
    /// group/version` for updaters, with ` with subresource "status"` after the name when set.
    pub fn display_name(&self) -> String {
        let mut out = format!("{:?}", self.manager);
        if let Some(sub) = &self.subresource {
            out.push_str(&format!(" with subresource {sub:?}"));
        }
        if self.operation == Operation::Update {
            out.push_str(&format!(" using {}", self.api_version));
        }
        out
    }

    fn to_json(&self) -> Value {
        let mut out = Map::new();
        out.insert("manager".into(), json!(self.manager));
        out.insert("operation".into(), json!(self.operation.as_str()));
        out.insert("apiVersion".into(), json!(self.api_version));
        if let Some(time) = &self.time {
            out.insert("time".into(), json!(time));
        }
        out.insert("fieldsType".into(), json!("FieldsV1"));
        out.insert("fieldsV1".into(), self.fields.to_fields_v1());
        if let Some(sub) = &self.subresource {
            out.insert("subresource".into(), json!(sub));
        }
        Value::Object(out)
    }

    fn from_json(value: &Value) -> Result<ManagedFieldsEntry, FieldsV1Error> {
        let bad = |what: &str| FieldsV1Error(format!("managedFields entry: {what}"));
        let obj = value.as_object().ok_or_else(|| bad("must be an object"))?;
        let text = |key: &str| obj.get(key).and_then(Value::as_str).map(str::to_owned);
        let operation = match text("operation").as_deref() {
            Some("Apply") => Operation::Apply,
            Some("Update") => Operation::Update,
            _ => return Err(bad("operation must be Apply or Update")),
        };
        let fields = match (text("fieldsType").as_deref(), obj.get("fieldsV1")) {
            (Some("FieldsV1"), Some(fields)) => FieldSet::from_fields_v1(fields)?,
            (Some("FieldsV1") | None, None) => FieldSet::new(),
            _ => return Err(bad("fieldsType must be FieldsV1")),
        };
        Ok(ManagedFieldsEntry {
            manager: text("manager").unwrap_or_default(),
            operation,
            api_version: text("apiVersion").unwrap_or_default(),
            time: text("time"),
            fields,
            subresource: text("subresource").filter(|s| !s.is_empty()),
        })
    }
}

/// The decoded `metadata.managedFields` of an object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ManagedFields(pub Vec<ManagedFieldsEntry>);

impl ManagedFields {
    /// Decodes a `metadata.managedFields` array (`null` or absent → empty).
    pub fn from_json(value: &Value) -> Result<ManagedFields, FieldsV1Error> {
        match value {
            Value::Null => Ok(ManagedFields::default()),
            Value::Array(items) => items
                .iter()
                .map(ManagedFieldsEntry::from_json)
                .collect::<Result<_, _>>()
                .map(ManagedFields),
            _ => Err(FieldsV1Error("managedFields must be a list".into())),
        }
    }

    /// Decodes the `metadata.managedFields` of an object.
    pub fn from_object(object: &Value) -> Result<ManagedFields, FieldsV1Error> {
        object
            .pointer("/metadata/managedFields")
            .map_or(Ok(ManagedFields::default()), ManagedFields::from_json)
    }

    /// The JSON array, sorted as Kubernetes sorts it: Apply before Update, then by time,
    /// manager, apiVersion and subresource.
    pub fn to_json(&self) -> Value {
        let mut entries: Vec<&ManagedFieldsEntry> = self.0.iter().collect();
        entries.sort_by(|a, b| {
            (a.operation, &a.time, &a.manager, &a.api_version, &a.subresource).cmp(&(
                b.operation,
                &b.time,
                &b.manager,
                &b.api_version,
                &b.subresource,
            ))
        });
        Value::Array(entries.into_iter().map(ManagedFieldsEntry::to_json).collect())
    }

    /// Writes these entries into `object`'s `metadata.managedFields` (removing the key when
    /// there are none).
    pub fn write_into(&self, object: &mut Value) {
        let Some(obj) = object.as_object_mut() else {
            return;
        };
        let meta = obj.entry("metadata").or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(meta) = meta {
            if self.0.is_empty() {
                meta.remove("managedFields");
            } else {
                meta.insert("managedFields".into(), self.to_json());
            }
        }
    }
}

/// What a write request's body says about managedFields, for the Update flow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ManagedFieldsInput {
    /// Track ownership starting from these entries.
    Track(ManagedFields),
    /// The client asked to strip managedFields (`[{}]`): store the object without them.
    Reset,
}

/// Chooses the managedFields a non-apply write starts from, as Kubernetes does: a body without
/// `metadata.managedFields`, with an empty list, or with an undecodable one keeps the live
/// entries (clients unaware of the field cannot wipe it); a list of only empty entries (`[{}]`)
/// resets them; any other list replaces them.
pub fn managed_fields_for_write(live: Option<&Value>, new: &Value) -> ManagedFieldsInput {
    let live_fields = || {
        ManagedFieldsInput::Track(
            live.and_then(|l| ManagedFields::from_object(l).ok())
                .unwrap_or_default(),
        )
    };
    match new.pointer("/metadata/managedFields") {
        None | Some(Value::Null) => live_fields(),
        Some(Value::Array(items)) if items.is_empty() => live_fields(),
        Some(Value::Array(items)) if items.iter().all(|i| i.as_object().is_some_and(Map::is_empty)) => {
            ManagedFieldsInput::Reset
        }
        Some(value) => match ManagedFields::from_json(value) {
            Ok(fields) => ManagedFieldsInput::Track(fields),
            Err(_) => live_fields(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_sort() {
        let doc = json!([
            { "manager": "b", "operation": "Update", "apiVersion": "g/v1", "time": "2026-01-01T00:00:00Z",
              "fieldsType": "FieldsV1", "fieldsV1": { "f:spec": { "f:mtu": {} } }, "subresource": "status" },
            { "manager": "a", "operation": "Apply", "apiVersion": "g/v1", "time": "2026-01-02T00:00:00Z",
              "fieldsType": "FieldsV1", "fieldsV1": { "f:spec": { "f:cidrs": {} } } },
        ]);
        let fields = ManagedFields::from_json(&doc).unwrap();
        assert_eq!(fields.0[0].subresource.as_deref(), Some("status"));
        let out = fields.to_json();
        assert_eq!(out[0]["manager"], "a");
        assert_eq!(out[1], doc[0]);
        assert_eq!(
            fields.0[0].display_name(),
            "\"b\" with subresource \"status\" using g/v1"
        );
        assert_eq!(fields.0[1].display_name(), "\"a\"");
        assert!(ManagedFields::from_json(&json!([{ "operation": "Delete" }])).is_err());
    }

    #[test]
    fn write_input_rules() {
        let live = json!({ "metadata": { "managedFields": [
            { "manager": "a", "operation": "Update", "apiVersion": "g/v1",
              "fieldsType": "FieldsV1", "fieldsV1": { "f:spec": {} } } ] } });
        let kept = managed_fields_for_write(Some(&live), &json!({ "metadata": {} }));
        assert!(matches!(kept, ManagedFieldsInput::Track(f) if f.0.len() == 1));
        let kept = managed_fields_for_write(Some(&live), &json!({ "metadata": { "managedFields": [] } }));
        assert!(matches!(kept, ManagedFieldsInput::Track(f) if f.0.len() == 1));
        let reset = managed_fields_for_write(Some(&live), &json!({ "metadata": { "managedFields": [{}] } }));
        assert_eq!(reset, ManagedFieldsInput::Reset);
    }
}
