//! Case tables for apply, Update tracking and strategic merge patch, written from the
//! Kubernetes documentation (Server-Side Apply, "Update an API object in place using kubectl
//! patch") and the structured-merge-diff semantics; each case says what Kubernetes does and why.
//! Then property tests over random objects of a small schema.

use proptest::prelude::*;
use serde_json::{Value, json};

use super::apply::{lenient_elements, managed_view};
use super::*;

const GV: &str = "sdn.cozystack.io/v1alpha1";
const T0: &str = "2026-01-01T00:00:00Z";
const T1: &str = "2026-01-01T00:01:00Z";
const T2: &str = "2026-01-01T00:02:00Z";

/// A schema with every merge shape: a set list, an atomic list, a map list, an atomic map, a
/// string map, nested structs and scalars.
fn schema() -> Schema {
    Schema::for_object(&json!({
        "type": "object",
        "properties": {
            "apiVersion": { "type": "string" }, "kind": { "type": "string" },
            "metadata": { "$ref": "#/$defs/Meta" },
            "spec": { "$ref": "#/$defs/Spec" },
            "status": { "anyOf": [{ "$ref": "#/$defs/Status" }, { "type": "null" }] },
        },
        "$defs": {
            "Meta": { "type": "object", "properties": {
                "name": { "type": "string" },
                "labels": { "type": "object", "additionalProperties": { "type": "string" } },
                "annotations": { "type": "object", "additionalProperties": { "type": "string" } },
                "finalizers": { "type": "array", "items": { "type": "string" } },
                "ownerReferences": { "type": "array", "items": { "type": "object" } },
            }},
            "Spec": { "type": "object", "properties": {
                "cidrs": { "type": "array", "items": { "type": "string" },
                           "x-kubernetes-list-type": "set",
                           "x-kubernetes-patch-strategy": "merge" },
                "rules": { "type": "array", "items": { "type": "object" },
                           "x-kubernetes-list-type": "atomic" },
                "ports": { "type": "array", "items": { "$ref": "#/$defs/Port" },
                           "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                           "x-kubernetes-patch-strategy": "merge",
                           "x-kubernetes-patch-merge-key": "name" },
                "selector": { "type": "object", "x-kubernetes-map-type": "atomic",
                              "additionalProperties": { "type": "string" } },
                "config": { "type": "object", "properties": {
                    "a": { "type": "string" }, "b": { "type": "integer" },
                    "inner": { "type": "object", "properties": { "c": { "type": "string" } } },
                }},
                "mtu": { "type": "integer" },
            }},
            "Port": { "type": "object", "properties": {
                "name": { "type": "string" }, "port": { "type": "integer" },
                "protocol": { "type": "string" },
            }},
            "Status": { "type": "object", "properties": {
                "phase": { "type": "string" },
                "conditions": { "type": "array", "items": { "type": "object" },
                                "x-kubernetes-list-type": "map",
                                "x-kubernetes-list-map-keys": ["type"] },
            }},
        }
    }))
}

fn ctx<'a>(manager: &'a str, time: &'a str) -> WriteContext<'a> {
    WriteContext {
        manager,
        subresource: None,
        api_version: GV,
        time,
    }
}

fn obj(spec: Value) -> Value {
    let mut out = json!({ "apiVersion": GV, "kind": "VPC", "metadata": { "name": "v" } });
    out["spec"] = spec;
    out
}

/// Applies and returns the object and managed fields, panicking on error.
fn ok(
    live: Option<&Value>,
    config: &Value,
    manager: &str,
    force: bool,
    time: &str,
) -> (Value, ManagedFields) {
    let managed = live
        .map(|l| ManagedFields::from_object(l).unwrap())
        .unwrap_or_default();
    apply(live, config, &managed, &ctx(manager, time), force, &schema()).unwrap()
}

fn conflicts(live: &Value, config: &Value, manager: &str) -> Conflicts {
    let managed = ManagedFields::from_object(live).unwrap();
    match apply(Some(live), config, &managed, &ctx(manager, T1), false, &schema()) {
        Err(ApplyError::Conflicts(c)) => c,
        other => panic!("expected conflicts, got {other:?}"),
    }
}

fn entry<'a>(m: &'a ManagedFields, manager: &str) -> &'a ManagedFieldsEntry {
    m.0.iter()
        .find(|e| e.manager == manager)
        .unwrap_or_else(|| panic!("no entry for {manager}"))
}

// ---------------------------------------------------------------------------------------------
// Server-side apply
// ---------------------------------------------------------------------------------------------

/// Apply-create: the object is the configuration; the manager gets one `Apply` entry with the
/// fields it set. Struct fields holding objects (`spec`, `metadata`) are not owned themselves,
/// map elements and list items are, `.` marks an owned node with owned children, and
/// name/apiVersion/kind are never owned (Kubernetes strips them from managed sets).
#[test]
fn apply_create_records_the_configured_fields() {
    let config = json!({
        "apiVersion": GV, "kind": "VPC",
        "metadata": { "name": "v", "labels": { "app": "x" } },
        "spec": { "cidrs": ["10.0.0.0/8"], "ports": [{ "name": "dns", "port": 53 }], "mtu": 1400 },
    });
    let (object, managed) = ok(None, &config, "ops", false, T0);
    assert_eq!(object["spec"], config["spec"]);
    assert_eq!(object["metadata"]["name"], "v");
    assert_eq!(
        object["metadata"]["managedFields"],
        json!([{
            "manager": "ops", "operation": "Apply", "apiVersion": GV, "time": T0,
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:metadata": { "f:labels": { "f:app": {} } },
                "f:spec": {
                    "f:cidrs": { "v:\"10.0.0.0/8\"": {} },
                    "f:mtu": {},
                    "f:ports": { "k:{\"name\":\"dns\"}": { ".": {}, "f:name": {}, "f:port": {} } },
                },
            },
        }])
    );
    assert_eq!(managed.0.len(), 1);
}

/// Re-applying the same configuration changes nothing, not even the entry's time, so the
/// handler sees an equal object and skips the write (no resourceVersion bump).
#[test]
fn reapply_is_a_no_op() {
    let config = obj(json!({ "mtu": 1400, "cidrs": ["a"] }));
    let (first, _) = ok(None, &config, "ops", false, T0);
    let (second, _) = ok(Some(&first), &config, "ops", false, T1);
    assert_eq!(first, second);
}

/// Another applier setting an owned field to a different value conflicts: 409 with one cause
/// per field and manager; Apply managers are named without "using".
#[test]
fn conflicting_value_is_a_409() {
    let (live, _) = ok(None, &obj(json!({ "mtu": 1400 })), "a", false, T0);
    let c = conflicts(&live, &obj(json!({ "mtu": 9000 })), "b");
    assert_eq!(
        c.message(),
        "Apply failed with 1 conflict: conflict with \"a\": .spec.mtu"
    );
    let status = c.to_status();
    assert_eq!(status["code"], 409);
    assert_eq!(status["reason"], "Conflict");
    assert_eq!(
        status["details"]["causes"],
        json!([{ "reason": "FieldManagerConflict", "message": "conflict with \"a\"", "field": ".spec.mtu" }])
    );
}

/// Applying the same value as another manager is not a conflict: both own the field (shared
/// ownership, "Managers can share ownership by applying the same value").
#[test]
fn same_value_is_shared() {
    let (live, _) = ok(None, &obj(json!({ "mtu": 1400 })), "a", false, T0);
    let (_, managed) = ok(Some(&live), &obj(json!({ "mtu": 1400 })), "b", false, T1);
    for m in ["a", "b"] {
        assert!(entry(&managed, m).fields.has(&[
            PathElement::Field("spec".into()),
            PathElement::Field("mtu".into())
        ]));
    }
}

/// `force=true` overwrites the value and moves ownership to the applier; the old owner loses
/// the field (and its entry, once empty).
#[test]
fn force_moves_ownership() {
    let (live, _) = ok(None, &obj(json!({ "mtu": 1400 })), "a", false, T0);
    let (object, managed) = ok(Some(&live), &obj(json!({ "mtu": 9000 })), "b", true, T1);
    assert_eq!(object["spec"]["mtu"], 9000);
    assert_eq!(managed.0.len(), 1);
    assert_eq!(managed.0[0].manager, "b");
}

/// Conflicts with an Update manager name it `"m" using <apiVersion>` (the contract's PATCH-07
/// example); several conflicts are listed per manager.
#[test]
fn update_manager_conflict_message() {
    let created = obj(json!({ "mtu": 1400, "cidrs": ["a"], "rules": [{ "x": 1 }] }));
    let managed = update_managed_fields(
        None,
        &created,
        &ManagedFields::default(),
        &ctx("kubectl-client-side-apply", T0),
        &schema(),
    );
    let mut live = created.clone();
    managed.write_into(&mut live);
    let c = conflicts(&live, &obj(json!({ "mtu": 9000 })), "ops");
    assert_eq!(
        c.message(),
        format!(
            "Apply failed with 1 conflict: conflict with \"kubectl-client-side-apply\" using {GV}: .spec.mtu"
        )
    );
    let c = conflicts(&live, &obj(json!({ "mtu": 9000, "rules": [] })), "ops");
    assert_eq!(
        c.message(),
        format!(
            "Apply failed with 2 conflicts: conflicts with \"kubectl-client-side-apply\" using {GV}:\n- .spec.mtu\n- .spec.rules"
        )
    );
    assert_eq!(c.0.len(), 2);
}

/// A field the manager applied before and now omits is removed, unless another manager owns
/// it too ("fields removed from the config are removed from the object if no other manager
/// owns them").
#[test]
fn omitted_fields_are_removed_unless_co_owned() {
    let config = json!({ "metadata": { "name": "v", "labels": { "x": "1", "y": "2" } },
                          "spec": { "mtu": 1, "config": { "a": "s", "inner": { "c": "q" } } } });
    let (live, _) = ok(None, &config, "a", false, T0);
    let (live, _) = ok(
        Some(&live),
        &json!({ "metadata": { "name": "v", "labels": { "y": "2" } } }),
        "b",
        false,
        T1,
    );
    let (after, managed) = ok(
        Some(&live),
        &json!({ "metadata": { "name": "v", "labels": { "x": "1" } } }),
        "a",
        false,
        T2,
    );
    assert_eq!(after["metadata"]["labels"], json!({ "x": "1", "y": "2" }));
    // spec.mtu and the nested config were only a's: gone, emptied parents too.
    assert_eq!(after.get("spec"), None);
    assert_eq!(
        crate::merge::apply::field_paths(&entry(&managed, "a").fields),
        [".metadata.labels.x"]
    );
}

/// Set lists merge by value: each applier owns its own items (`v:`); dropping an item removes
/// only that item.
#[test]
fn set_list_items_are_owned_separately() {
    let (live, _) = ok(None, &obj(json!({ "cidrs": ["a", "b"] })), "x", false, T0);
    let (live, _) = ok(Some(&live), &obj(json!({ "cidrs": ["c"] })), "y", false, T1);
    assert_eq!(live["spec"]["cidrs"], json!(["a", "b", "c"]));
    let (live, _) = ok(Some(&live), &obj(json!({ "cidrs": ["b"] })), "x", false, T2);
    assert_eq!(live["spec"]["cidrs"], json!(["b", "c"]));
}

/// Map lists merge items by key; each manager owns the fields it set inside an item; an item
/// stays while anyone owns something in it; key fields are never stripped from a kept item.
#[test]
fn map_list_items_merge_by_key() {
    let p = |v| obj(json!({ "ports": v }));
    let (live, _) = ok(None, &p(json!([{ "name": "dns", "port": 53 }])), "x", false, T0);
    let (live, _) = ok(
        Some(&live),
        &p(json!([{ "name": "dns", "protocol": "UDP" }, { "name": "web", "port": 80 }])),
        "y",
        false,
        T1,
    );
    assert_eq!(
        live["spec"]["ports"],
        json!([{ "name": "dns", "port": 53, "protocol": "UDP" }, { "name": "web", "port": 80 }])
    );
    // x stops applying dns: port goes, the item stays for y.
    let (live, _) = ok(Some(&live), &obj(json!({ "mtu": 1 })), "x", false, T2);
    assert_eq!(
        live["spec"]["ports"],
        json!([{ "name": "dns", "protocol": "UDP" }, { "name": "web", "port": 80 }])
    );
    // Changing y's field inside the item conflicts and names the item by key.
    let c = conflicts(&live, &p(json!([{ "name": "dns", "protocol": "TCP" }])), "x");
    assert_eq!(c.0[0].field, ".spec.ports[name=\"dns\"].protocol");
}

/// Atomic lists and atomic maps are owned and replaced as a whole.
#[test]
fn atomic_list_and_map() {
    let (live, _) = ok(
        None,
        &obj(json!({ "rules": [{ "a": 1 }], "selector": { "k": "v" } })),
        "x",
        false,
        T0,
    );
    let c = conflicts(&live, &obj(json!({ "rules": [{ "a": 1 }, { "b": 2 }] })), "y");
    assert_eq!(c.0[0].field, ".spec.rules");
    let (after, _) = ok(
        Some(&live),
        &obj(json!({ "selector": { "z": "w" } })),
        "y",
        true,
        T1,
    );
    assert_eq!(after["spec"]["selector"], json!({ "z": "w" }));
}

/// `metadata.managedFields` in an apply body is rejected (400 `metadata.managedFields must be
/// nil`, PATCH-08); duplicate keys in a map list are rejected too.
#[test]
fn invalid_configurations() {
    let mut config = obj(json!({}));
    config["metadata"]["managedFields"] = json!([]);
    let err = apply(
        None,
        &config,
        &ManagedFields::default(),
        &ctx("a", T0),
        false,
        &schema(),
    );
    assert_eq!(
        err.unwrap_err(),
        ApplyError::Invalid("metadata.managedFields must be nil".into())
    );
    let config = obj(json!({ "ports": [{ "name": "a" }, { "name": "a" }] }));
    let err = apply(
        None,
        &config,
        &ManagedFields::default(),
        &ctx("a", T0),
        false,
        &schema(),
    );
    assert!(matches!(err, Err(ApplyError::Invalid(m)) if m.contains("duplicate")));
    let config = obj(json!({ "ports": [{ "port": 1 }] }));
    assert!(
        apply(
            None,
            &config,
            &ManagedFields::default(),
            &ctx("a", T0),
            false,
            &schema()
        )
        .is_err()
    );
}

/// Main-resource applies neither change nor own `status` (it is reset by the status
/// strategy); a status-subresource apply owns only status and its entry says
/// `subresource: status`.
#[test]
fn status_and_subresource_managers() {
    let config = json!({ "metadata": { "name": "v" }, "spec": { "mtu": 1 }, "status": { "phase": "X" } });
    let (live, managed) = ok(None, &config, "a", false, T0);
    assert_eq!(live.get("status"), None);
    assert_eq!(
        crate::merge::apply::field_paths(&managed.0[0].fields),
        [".spec.mtu"]
    );
    let status_ctx = WriteContext {
        subresource: Some("status"),
        ..ctx("ctrl", T1)
    };
    let status_config = json!({ "metadata": { "name": "v" }, "spec": { "mtu": 5 },
        "status": { "conditions": [{ "type": "Ready", "status": "True" }] } });
    let (live, managed) = apply(
        Some(&live),
        &status_config,
        &managed,
        &status_ctx,
        false,
        &schema(),
    )
    .unwrap();
    assert_eq!(live["spec"]["mtu"], 1);
    assert_eq!(live["status"]["conditions"][0]["type"], "Ready");
    let e = entry(&managed, "ctrl");
    assert_eq!(e.subresource.as_deref(), Some("status"));
    assert_eq!(live["metadata"]["managedFields"][1]["subresource"], "status");
    assert_eq!(
        e.fields.to_fields_v1(),
        json!({ "f:status": { "f:conditions": { "k:{\"type\":\"Ready\"}": { ".": {}, "f:status": {}, "f:type": {} } } } })
    );
}

/// Update operations (PUT/PATCH/POST) take ownership of what they change, and other managers
/// lose it: that is how `kubectl edit` takes a field from an applier, who then conflicts.
#[test]
fn update_takes_ownership_from_appliers() {
    let (live, managed) = ok(None, &obj(json!({ "mtu": 1, "cidrs": ["a"] })), "a", false, T0);
    let mut edited = live.clone();
    edited["spec"]["mtu"] = json!(2);
    edited["metadata"]["labels"] = json!({ "k": "v" });
    let managed = update_managed_fields(
        Some(&live),
        &edited,
        &managed,
        &ctx("kubectl-edit", T1),
        &schema(),
    );
    assert_eq!(
        crate::merge::apply::field_paths(&entry(&managed, "kubectl-edit").fields),
        [".metadata.labels", ".metadata.labels.k", ".spec.mtu"]
    );
    assert_eq!(
        crate::merge::apply::field_paths(&entry(&managed, "a").fields),
        [".spec.cidrs[=\"a\"]"]
    );
    managed.write_into(&mut edited);
    let c = conflicts(&edited, &obj(json!({ "mtu": 1, "cidrs": ["a"] })), "a");
    assert_eq!(c.0[0].manager, format!("\"kubectl-edit\" using {GV}"));
    // An unchanged write records nothing new.
    let same = update_managed_fields(Some(&edited), &edited, &managed, &ctx("other", T2), &schema());
    assert_eq!(same, managed);
}

/// `null` in an apply configuration removes the field; the applier owns the path.
#[test]
fn null_removes_field() {
    let (live, _) = ok(
        None,
        &obj(json!({ "mtu": 1, "config": { "a": "x" } })),
        "a",
        false,
        T0,
    );
    let (after, _) = ok(
        Some(&live),
        &obj(json!({ "mtu": null, "config": { "a": "x" } })),
        "a",
        false,
        T1,
    );
    assert_eq!(after["spec"], json!({ "config": { "a": "x" } }));
}

// ---------------------------------------------------------------------------------------------
// Strategic merge patch
// ---------------------------------------------------------------------------------------------

/// (original, patch, expected) rows; each comment says what Kubernetes does.
#[test]
fn strategic_merge_cases() {
    let cases: Vec<(&str, Value, Value, Value)> = vec![
        // Objects merge key by key; null deletes a key.
        (
            "map merge and null delete",
            json!({ "spec": { "mtu": 1, "config": { "a": "x", "b": 2 } } }),
            json!({ "spec": { "config": { "a": null, "inner": { "c": "y" } } } }),
            json!({ "spec": { "mtu": 1, "config": { "b": 2, "inner": { "c": "y" } } } }),
        ),
        // A list with patchStrategy merge + patchMergeKey merges items by key, appending new ones.
        (
            "merge by key",
            json!({ "spec": { "ports": [{ "name": "a", "port": 1 }, { "name": "b", "port": 2 }] } }),
            json!({ "spec": { "ports": [{ "name": "b", "protocol": "UDP" }, { "name": "c" }] } }),
            json!({ "spec": { "ports": [{ "name": "a", "port": 1 }, { "name": "b", "port": 2, "protocol": "UDP" }, { "name": "c" }] } }),
        ),
        // The garbage collector's patch: `$patch: delete` removes the item with that merge key.
        (
            "gc ownerReferences delete",
            json!({ "metadata": { "uid": "self", "ownerReferences": [{ "uid": "o1", "name": "x" }, { "uid": "o2" }] } }),
            json!({ "metadata": { "ownerReferences": [{ "$patch": "delete", "uid": "o1" }], "uid": "self" } }),
            json!({ "metadata": { "uid": "self", "ownerReferences": [{ "uid": "o2" }] } }),
        ),
        // `$patch: replace` on an object replaces it instead of merging.
        (
            "replace map",
            json!({ "spec": { "config": { "a": "x", "b": 2 } } }),
            json!({ "spec": { "config": { "$patch": "replace", "b": 3 } } }),
            json!({ "spec": { "config": { "b": 3 } } }),
        ),
        // `$patch: delete` on an object deletes it.
        (
            "delete map",
            json!({ "spec": { "config": { "a": "x" }, "mtu": 1 } }),
            json!({ "spec": { "config": { "$patch": "delete" } } }),
            json!({ "spec": { "mtu": 1 } }),
        ),
        // `{"$patch": "replace"}` as a list item replaces the whole list with the other items.
        (
            "replace list",
            json!({ "spec": { "ports": [{ "name": "a" }, { "name": "b" }] } }),
            json!({ "spec": { "ports": [{ "name": "c" }, { "$patch": "replace" }] } }),
            json!({ "spec": { "ports": [{ "name": "c" }] } }),
        ),
        // Lists without merge strategy are replaced.
        (
            "atomic list replaced",
            json!({ "spec": { "rules": [{ "a": 1 }, { "b": 1 }] } }),
            json!({ "spec": { "rules": [{ "c": 1 }] } }),
            json!({ "spec": { "rules": [{ "c": 1 }] } }),
        ),
        // Primitive merge lists union by value; `$deleteFromPrimitiveList` removes values
        // (finalizers are `patchStrategy: merge` in ObjectMeta).
        (
            "primitive list union and delete",
            json!({ "metadata": { "finalizers": ["a", "b"] } }),
            json!({ "metadata": { "finalizers": ["c", "a"], "$deleteFromPrimitiveList/finalizers": ["b"] } }),
            json!({ "metadata": { "finalizers": ["a", "c"] } }),
        ),
        // `$setElementOrder/<list>` orders the merged list (kubectl sends it with every list).
        (
            "set element order",
            json!({ "spec": { "ports": [{ "name": "a" }, { "name": "b" }] } }),
            json!({ "spec": { "$setElementOrder/ports": [{ "name": "c" }, { "name": "b" }, { "name": "a" }],
                           "ports": [{ "name": "c" }] } }),
            json!({ "spec": { "ports": [{ "name": "c" }, { "name": "b" }, { "name": "a" }] } }),
        ),
        // `$retainKeys` drops keys not listed (retainKeys strategy, e.g. Deployment strategy).
        (
            "retain keys",
            json!({ "spec": { "config": { "a": "x", "b": 2 } } }),
            json!({ "spec": { "config": { "$retainKeys": ["b"], "b": 3 } } }),
            json!({ "spec": { "config": { "b": 3 } } }),
        ),
        // Unknown fields merge like JSON merge patch.
        (
            "untyped",
            json!({ "x": { "y": [1, 2], "z": 1 } }),
            json!({ "x": { "y": [3] } }),
            json!({ "x": { "y": [3], "z": 1 } }),
        ),
        // Directives in values that did not exist are processed, not stored.
        (
            "new subtree",
            json!({}),
            json!({ "spec": { "ports": [{ "name": "a", "$patch": "delete" }, { "name": "b", "port": null }] } }),
            json!({ "spec": { "ports": [{ "name": "b" }] } }),
        ),
    ];
    for (name, original, patch, expected) in cases {
        assert_eq!(
            strategic_merge(&original, &patch, &schema()).unwrap(),
            expected,
            "case {name}"
        );
    }
}

/// Malformed directives are errors (the handler answers 400), never silently ignored.
#[test]
fn strategic_merge_errors() {
    let s = schema();
    let orig = json!({ "spec": { "ports": [] } });
    for patch in [
        json!([]),
        json!({ "spec": { "$patch": "bogus" } }),
        json!({ "spec": { "ports": [{ "port": 1 }] } }),
        json!({ "spec": { "$retainKeys": "x" } }),
        json!({ "spec": { "$setElementOrder/ports": 1 } }),
        json!({ "spec": { "$unknown": 1 } }),
    ] {
        assert!(strategic_merge(&orig, &patch, &s).is_err(), "{patch}");
    }
    let err = strategic_merge(&orig, &json!({ "spec": { "ports": [{ "port": 1 }] } }), &s).unwrap_err();
    assert_eq!(
        err.to_string(),
        ".spec.ports: map: {\"port\":1} does not contain declared merge key: name"
    );
}

// ---------------------------------------------------------------------------------------------
// Property tests
// ---------------------------------------------------------------------------------------------

fn arb_config() -> impl Strategy<Value = Value> {
    let labels = prop::collection::btree_map(prop::sample::select(vec!["a", "b", "c"]), "[xy]", 0..3);
    let cidrs = prop::collection::btree_set(prop::sample::select(vec!["1", "2", "3", "4"]), 0..3);
    let rules = prop::option::of(prop::collection::vec(0..3i64, 0..3));
    let ports = prop::collection::btree_map(
        prop::sample::select(vec!["p", "q", "r"]),
        (
            prop::option::of(0..3i64),
            prop::option::of(prop::sample::select(vec!["TCP", "UDP"])),
        ),
        0..3,
    );
    let config = (
        prop::option::of("[uv]"),
        prop::option::of(0..3i64),
        prop::option::of("[uv]"),
    );
    let mtu = prop::option::of(0..3i64);
    (labels, cidrs, rules, ports, config, mtu).prop_map(|(labels, cidrs, rules, ports, config, mtu)| {
        let mut spec = serde_json::Map::new();
        if !cidrs.is_empty() {
            spec.insert("cidrs".into(), json!(cidrs.into_iter().collect::<Vec<_>>()));
        }
        if let Some(rules) = rules {
            spec.insert(
                "rules".into(),
                json!(rules.into_iter().map(|r| json!({ "r": r })).collect::<Vec<_>>()),
            );
        }
        if !ports.is_empty() {
            let items: Vec<Value> = ports
                .into_iter()
                .map(|(name, (port, proto))| {
                    let mut item = json!({ "name": name });
                    if let Some(p) = port {
                        item["port"] = json!(p);
                    }
                    if let Some(p) = proto {
                        item["protocol"] = json!(p);
                    }
                    item
                })
                .collect();
            spec.insert("ports".into(), Value::Array(items));
        }
        let mut cfg = serde_json::Map::new();
        if let Some(a) = config.0 {
            cfg.insert("a".into(), json!(a));
        }
        if let Some(b) = config.1 {
            cfg.insert("b".into(), json!(b));
        }
        if let Some(c) = config.2 {
            cfg.insert("inner".into(), json!({ "c": c }));
        }
        if !cfg.is_empty() {
            spec.insert("config".into(), Value::Object(cfg));
        }
        if let Some(m) = mtu {
            spec.insert("mtu".into(), json!(m));
        }
        let mut meta = json!({ "name": "v" });
        if !labels.is_empty() {
            meta["labels"] = json!(labels);
        }
        json!({ "apiVersion": GV, "kind": "VPC", "metadata": meta, "spec": spec })
    })
}

/// The value at `path` in a managed view, if present.
fn value_at<'a>(value: &'a Value, path: &Path, schema: &Schema) -> Option<&'a Value> {
    let mut current = value;
    let mut schema = schema;
    for element in &path.0 {
        match element {
            PathElement::Field(name) => {
                current = current.get(name)?;
                schema = schema.field(name);
            }
            other => {
                let items = current.as_array()?;
                let elements = lenient_elements(items, &schema.list_type());
                current = &items[elements.iter().position(|e| e == other)?];
                schema = schema.items();
            }
        }
    }
    Some(current)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Applying a configuration twice gives exactly the same object and managedFields (no
    /// resourceVersion bump), whatever another manager applied first.
    #[test]
    fn apply_is_idempotent(first in arb_config(), config in arb_config(), force in any::<bool>()) {
        let s = schema();
        let (live, managed) = apply(None, &first, &ManagedFields::default(), &ctx("other", T0), false, &s).unwrap();
        if let Ok((once, managed)) = apply(Some(&live), &config, &managed, &ctx("me", T1), force, &s) {
            let (twice, _) = apply(Some(&once), &config, &managed, &ctx("me", T2), false, &s).unwrap();
            prop_assert_eq!(&once, &twice);
            // And every configured value is in the result.
            let config_set = FieldSet::from_value(&managed_view(&config), &s).unwrap();
            let (config_view, once_view) = (managed_view(&config), managed_view(&once));
            for path in config_set.paths().into_iter().filter(|p| !config_set.has_descendants(&p.0)) {
                let wanted = value_at(&config_view, &path, &s);
                // An empty object owns the node but merges into live contents.
                if wanted.is_some_and(|w| w.as_object().is_some_and(serde_json::Map::is_empty)) {
                    continue;
                }
                prop_assert_eq!(wanted, value_at(&once_view, &path, &s));
            }
        }
    }

    /// Without force, an applier never changes or takes a field another manager owns: either
    /// the apply fails with conflicts, or every field of the other manager keeps its value and
    /// its owner.
    #[test]
    fn no_clobbering_without_force(a in arb_config(), b in arb_config(), a2 in arb_config()) {
        let s = schema();
        let (live, managed) = apply(None, &a, &ManagedFields::default(), &ctx("a", T0), false, &s).unwrap();
        let before = entry(&managed, "a").fields.clone();
        match apply(Some(&live), &b, &managed, &ctx("b", T1), false, &s) {
            Err(ApplyError::Conflicts(c)) => prop_assert!(!c.0.is_empty()),
            Err(e) => prop_assert!(false, "unexpected {e}"),
            Ok((after, managed_after)) => {
                prop_assert_eq!(&entry(&managed_after, "a").fields, &before);
                let (live_view, after_view) = (managed_view(&live), managed_view(&after));
                for path in before.paths().into_iter().filter(|p| !before.has_descendants(&p.0)) {
                    let owned = value_at(&live_view, &path, &s);
                    if owned.is_some_and(|w| w.as_object().is_some_and(serde_json::Map::is_empty)) {
                        continue;
                    }
                    prop_assert_eq!(owned, value_at(&after_view, &path, &s));
                }
                // With force, a takes everything back and b keeps only what a does not set
                // to a different value.
                let (forced, m3) = apply(Some(&after), &a2, &managed_after, &ctx("a", T2), true, &s).unwrap();
                let a_view = managed_view(&a2);
                let forced_view = managed_view(&forced);
                let a_fields = &entry(&m3, "a").fields;
                for path in a_fields.paths().into_iter().filter(|p| !a_fields.has_descendants(&p.0)) {
                    let wanted = value_at(&a_view, &path, &s);
                    if wanted.is_some_and(|w| w.as_object().is_some_and(serde_json::Map::is_empty)) {
                        continue;
                    }
                    prop_assert_eq!(wanted, value_at(&forced_view, &path, &s));
                }
            }
        }
    }

    /// fieldsV1 encoding round-trips.
    #[test]
    fn fields_v1_round_trip(config in arb_config()) {
        let set = FieldSet::from_value(&managed_view(&config), &schema()).unwrap();
        prop_assert_eq!(FieldSet::from_fields_v1(&set.to_fields_v1()).unwrap(), set);
    }
}
