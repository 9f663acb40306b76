//! Discovery documents, built from the table of kinds: legacy (`/apis`, `/apis/<g>`,
//! `/apis/<g>/<v>`) and aggregated v2 (`/apis` with `as=APIGroupDiscoveryList`); and for the
//! core group (`/api`, `/api/v1`), the core kinds a standalone server serves (namespaces).

use std::sync::Arc;

use cozyplane_apis::{GROUP, v1alpha1::VERSION};
use serde_json::{Value, json};

use crate::registry::Resource;

/// Verbs of a main resource.
pub const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];
/// Verbs of `/status`.
pub const STATUS_VERBS: &[&str] = &["get", "patch", "update"];

fn gv() -> String {
    format!("{GROUP}/{VERSION}")
}

/// `APIGroupList` for `/apis`.
pub fn group_list() -> Value {
    json!({ "kind": "APIGroupList", "apiVersion": "v1", "groups": [group_body()] })
}

fn group_body() -> Value {
    let v = json!({ "groupVersion": gv(), "version": VERSION });
    json!({ "name": GROUP, "versions": [v.clone()], "preferredVersion": v })
}

/// `APIGroup` for `/apis/<g>`.
pub fn group() -> Value {
    let mut g = group_body();
    g["kind"] = json!("APIGroup");
    g["apiVersion"] = json!("v1");
    g
}

/// `APIResourceList` for `/apis/<g>/<v>`.
pub fn resource_list(kinds: &[Arc<dyn Resource>]) -> Value {
    resource_list_of(&gv(), kinds)
}

/// `APIResourceList` of `kinds` in `group_version` (`v1` for the core group).
fn resource_list_of(group_version: &str, kinds: &[Arc<dyn Resource>]) -> Value {
    let mut resources = Vec::new();
    for k in kinds {
        let i = k.info();
        resources.push(json!({
            "name": i.plural, "singularName": i.singular, "namespaced": i.namespaced, "kind": i.kind,
            "verbs": VERBS, "shortNames": i.short_names, "categories": i.categories,
        }));
        if i.has_status {
            resources.push(json!({
                "name": format!("{}/status", i.plural), "singularName": "", "namespaced": i.namespaced,
                "kind": i.kind, "verbs": STATUS_VERBS,
            }));
        }
    }
    json!({ "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources })
}

/// `APIResourceList` for `/api/v1`: the core kinds this server serves (namespaces, standalone).
pub fn core_resource_list(core: &[Arc<dyn Resource>]) -> Value {
    resource_list_of("v1", core)
}

/// The media type of aggregated discovery v2.
pub const V2_MEDIA: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// The aggregated discovery entries (`APIResourceDiscovery`) of `kinds`.
fn discovery_resources(kinds: &[Arc<dyn Resource>]) -> Vec<Value> {
    kinds
        .iter()
        .map(|k| {
            let i = k.info();
            let kind = json!({ "group": "", "version": "", "kind": i.kind });
            let mut r = json!({
                "resource": i.plural, "responseKind": kind, "scope": if i.namespaced { "Namespaced" } else { "Cluster" },
                "singularResource": i.singular, "verbs": VERBS, "shortNames": i.short_names, "categories": i.categories,
            });
            if i.has_status {
                r["subresources"] = json!([{ "subresource": "status", "responseKind": kind, "verbs": STATUS_VERBS }]);
            }
            r
        })
        .collect()
}

/// `APIGroupDiscoveryList` (aggregated discovery v2) for `/apis`.
pub fn aggregated(kinds: &[Arc<dyn Resource>]) -> Value {
    json!({
        "kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {},
        "items": [{ "metadata": { "name": GROUP }, "versions": [{ "version": VERSION, "resources": discovery_resources(kinds), "freshness": "Current" }] }],
    })
}

/// `APIGroupDiscoveryList` for `/api`: the core group (no name) with the core kinds this server
/// serves, or no group at all when it serves none.
pub fn core_aggregated(core: &[Arc<dyn Resource>]) -> Value {
    let items = if core.is_empty() {
        json!([])
    } else {
        json!([{ "metadata": {}, "versions": [{ "version": "v1", "resources": discovery_resources(core), "freshness": "Current" }] }])
    };
    json!({ "kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items })
}

/// `APIVersions` for `/api`: `v1` when the server serves core kinds (namespaces, standalone),
/// else none.
pub fn core_versions(core: &[Arc<dyn Resource>]) -> Value {
    let versions: &[&str] = if core.is_empty() { &[] } else { &["v1"] };
    json!({ "kind": "APIVersions", "versions": versions, "serverAddressByClientCIDRs": [] })
}

/// Whether `Accept` asks for aggregated discovery v2.
pub fn wants_v2(accept: &str) -> bool {
    accept.split(',').any(|m| {
        let m = m.replace(' ', "");
        m.contains("g=apidiscovery.k8s.io") && m.contains("v=v2;") && m.contains("as=APIGroupDiscoveryList")
            || m.contains("g=apidiscovery.k8s.io")
                && m.ends_with("v=v2")
                && m.contains("as=APIGroupDiscoveryList")
    })
}
