//! Server-side apply, field ownership (`metadata.managedFields`) and strategic merge patch, as
//! pure functions of JSON values and a [`Schema`].
//!
//! # Model
//!
//! A kind's JSON Schema is reduced to a [`Schema`] tree that says how each node merges:
//! objects merge field by field unless `x-kubernetes-map-type: atomic`; lists are `atomic`
//! (replaced whole, the default), `set` (unique scalars, merged by value) or `map` (objects
//! merged by `x-kubernetes-list-map-keys`); anything unknown merges like untyped apply (objects
//! granular, lists atomic). Ownership is a [`FieldSet`] of paths per manager, encoded in
//! `fieldsV1` (`f:<field>`, `k:{"type":"Ready"}`, `v:"10.0.0.0/8"`, `i:<index>`, `.` for a node
//! that is owned itself and has owned children). Only `metadata.labels`, `annotations`,
//! `finalizers` and `ownerReferences` take part; `apiVersion`, `kind` and the rest of `metadata`
//! are never owned ([`apply::managed_view`]). Each entry of `metadata.managedFields` is one
//! (manager, operation, subresource[, apiVersion for Update]) with its fields and time.
//!
//! * [`apply()`](apply::apply) merges a configuration into the live object, gives the applier
//!   exactly the fields of its configuration, removes fields it applied before, stopped applying
//!   and nobody else owns, and fails with [`Conflicts`] when another manager owns a field whose
//!   value would change (with `force`, ownership moves instead).
//! * [`update_managed_fields`] records ownership for every other write: the writer gains what it
//!   added or changed, others lose it.
//! * [`strategic_merge`] applies `application/strategic-merge-patch+json` using the schema's
//!   `x-kubernetes-patch-strategy`/`x-kubernetes-patch-merge-key`.
//!
//! Main-resource writes neither own nor change `status`; status-subresource writes neither own
//! nor change anything but `status` (and the four metadata fields) — see
//! [`apply::reset_fields`]. This only applies when the schema declares `status`.
//!
//! # How the PATCH/PUT/POST handlers use it
//!
//! Build the schema once per kind: `Schema::for_object(&serde_json::to_value(schemars::schema_for!(K))?)`.
//!
//! **Apply** (`PATCH`, `Content-Type: application/apply-patch+yaml`):
//! 1. Require `fieldManager` (422 otherwise, PATCH-06). Decode the body: this module takes JSON
//!    values only; the handler decodes YAML (a YAML 1.2 decoder such as `serde_norway`/
//!    `serde_yaml_ng` into `serde_json::Value`; JSON is valid YAML). A body that is not an
//!    object → 400.
//! 2. Check `apiVersion`/`kind` equal the endpoint's and `metadata.name` (and namespace, if set)
//!    equal the URL's; mismatch → 400 (Kubernetes: `the name of the object (x) does not match the
//!    name on the URL (y)`).
//! 3. Read live (`None` if missing: apply creates it, answer 201). Decode live managedFields
//!    with [`ManagedFields::from_object`] (on error start from empty, as Kubernetes resets
//!    undecodable managedFields).
//! 4. `apply(live, &config, &managed, &WriteContext { manager, subresource, api_version, time },
//!    force, &schema)`:
//!    `Err(ApplyError::Conflicts(c))` → 409 with body `c.to_status()`;
//!    `Err(ApplyError::Invalid(m))` → 400 with message `m`.
//! 5. `Ok((object, _))`: `object` already carries the new `metadata.managedFields`. If
//!    `live` exists and [`equal_ignoring_managed_fields_time`]`(&object, live)` → no write, 200
//!    with the live object (same resourceVersion, OBJ-11). Otherwise run the normal update/create
//!    path (strategy, validation, admission, storage) with `object`, and do **not** run the
//!    Update flow below for it.
//!
//! **Update** (POST, PUT, JSON/merge/strategic PATCH, and their `/status` variants), after the
//! strategy has produced the object to store:
//! 1. `match managed_fields_for_write(live, &new)`: `Reset` → store `new` without
//!    managedFields; `Track(managed)` → continue.
//! 2. `let m = update_managed_fields(live, &new, &managed, &ctx, &schema); m.write_into(&mut new);`
//!    with `ctx.manager` = `fieldManager` or the User-Agent prefix (PATCH-09).
//! 3. Store; the storage no-op check should compare with [`equal_ignoring_managed_fields_time`].
//!
//! **Strategic merge patch**: `strategic_merge(&live, &patch, &schema)`; `Err` → 400; the result
//! then goes through the Update flow like any other patch.
//!
//! # Differences from Kubernetes (structured-merge-diff) worth knowing
//!
//! * `null` in an apply configuration removes the field from the result (the applier owns it),
//!   as Kubernetes ends up doing after decoding into typed objects / pruning CRD nulls.
//! * Containers emptied by pruning are removed unless the configuration mentions them.
//! * New struct-typed nodes are not owned themselves in Update entries (`f:spec` has no `.`);
//!   Go owns pointer-typed structs, which we cannot tell apart in JSON.
//! * `$setElementOrder` orders only the listed items, others keep their slots.

pub mod apply;
pub mod fieldset;
pub mod managed;
pub mod schema;
pub mod strategic;

pub use apply::{
    ApplyError, Conflict, Conflicts, WriteContext, apply, equal_ignoring_managed_fields_time,
    update_managed_fields,
};
pub use fieldset::{FieldSet, FieldsV1Error, MergeError, Path, PathElement};
pub use managed::{
    ManagedFields, ManagedFieldsEntry, ManagedFieldsInput, Operation, managed_fields_for_write,
};
pub use schema::{ListType, Schema};
pub use strategic::{SmpError, strategic_merge};

#[cfg(test)]
mod tests;
