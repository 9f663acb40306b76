//! Core `v1` `Namespace`, served by a standalone server (one without a kube-apiserver, which
//! otherwise owns namespaces): the same generic [`Store`](super::Store) and watch cache as our
//! kinds, with the Kubernetes namespace policy.
//!
//! - create: `status.phase` is `Active` and `spec.finalizers` holds `kubernetes`;
//! - update: `spec` and `status` are the server's (Kubernetes changes them only through
//!   `/finalize` and `/status`), so an update changes metadata only;
//! - delete: while `spec.finalizers` is not empty the namespace is marked (`deletionTimestamp`,
//!   phase `Terminating`) and the namespace controller ([`controller`]) deletes
//!   its content, then [`finalize`](super::Store::finalize)s it away.
//!
//! The kind is not in [`super::kinds`] (the table of `sdn.cozystack.io`): it is routed under
//! `/api/v1` and listed by the core discovery documents.

pub mod controller;

use cozyplane_apis::{ApiKind, HasSpecStatus, KindInfo};
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::strategy::{self, Column};
use super::validate::field::{FieldError, FieldErrors, FieldPath};
use super::validate::meta::{NameRule, validate_object_meta_named, validate_object_meta_update};

/// The finalizer the namespace controller owns (`spec.finalizers`).
pub const FINALIZER: &str = "kubernetes";
/// `status.phase` of a live namespace.
pub const ACTIVE: &str = "Active";
/// `status.phase` of a namespace being deleted.
pub const TERMINATING: &str = "Terminating";
/// The namespaces a standalone server creates at start, as a Kubernetes cluster has them; like
/// Kubernetes' NamespaceLifecycle, the server refuses to delete them.
pub const INITIAL: &[&str] = &["default", "kube-system", "kube-public"];

/// A core `v1` `Namespace` (the k8s-openapi type, wrapped so the registry's traits apply).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct Namespace(pub core::Namespace);

impl ApiKind for Namespace {
    const KIND: &'static str = "Namespace";
    const LIST_KIND: &'static str = "NamespaceList";
    const VERSION: &'static str = "v1";
    const API_VERSION: &'static str = "v1";
    const PLURAL: &'static str = "namespaces";
    const SINGULAR: &'static str = "namespace";
    const SHORT_NAMES: &'static [&'static str] = &["ns"];
    const CATEGORIES: &'static [&'static str] = &[];
    const NAMESPACED: bool = false;
    // Served without a `/status` subresource: status is the server's alone here.
    const HAS_STATUS: bool = false;
    const INFO: KindInfo = KindInfo {
        group: "",
        version: Self::VERSION,
        kind: Self::KIND,
        list_kind: Self::LIST_KIND,
        plural: Self::PLURAL,
        singular: Self::SINGULAR,
        short_names: Self::SHORT_NAMES,
        categories: Self::CATEGORIES,
        namespaced: Self::NAMESPACED,
        has_status: Self::HAS_STATUS,
    };
}

impl HasSpecStatus for Namespace {
    type Spec = Option<core::NamespaceSpec>;
    type Status = core::NamespaceStatus;

    fn spec(&self) -> &Self::Spec {
        &self.0.spec
    }
    fn spec_mut(&mut self) -> &mut Self::Spec {
        &mut self.0.spec
    }
    fn status(&self) -> Option<&Self::Status> {
        self.0.status.as_ref()
    }
    fn set_status(&mut self, status: Option<Self::Status>) {
        self.0.status = status;
    }
}

impl kube_core::Resource for Namespace {
    type DynamicType = ();
    type Scope = kube_core::ClusterResourceScope;

    fn kind(_: &()) -> std::borrow::Cow<'_, str> {
        Self::KIND.into()
    }
    fn group(_: &()) -> std::borrow::Cow<'_, str> {
        "".into()
    }
    fn version(_: &()) -> std::borrow::Cow<'_, str> {
        Self::VERSION.into()
    }
    fn api_version(_: &()) -> std::borrow::Cow<'_, str> {
        Self::API_VERSION.into()
    }
    fn plural(_: &()) -> std::borrow::Cow<'_, str> {
        Self::PLURAL.into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.0.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.0.metadata
    }
}

impl Namespace {
    /// `spec.finalizers` (empty when unset).
    pub fn finalizers(&self) -> &[String] {
        self.0
            .spec
            .as_ref()
            .and_then(|s| s.finalizers.as_deref())
            .unwrap_or_default()
    }

    fn set_phase(&mut self, phase: &str) {
        self.0.status.get_or_insert_with(Default::default).phase = Some(phase.to_string());
    }
}

/// Creates the [`INITIAL`] namespaces that do not exist yet.
pub async fn create_initial(store: &dyn super::Resource) -> crate::errors::Result<()> {
    for name in INITIAL {
        let body =
            serde_json::json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": name } });
        match store
            .create(None, body, &super::store::WriteOptions::server())
            .await
        {
            Ok(_) => {}
            Err(e) if e.reason == crate::errors::Reason::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Whether a namespace (as JSON) is being deleted: a deletion timestamp or phase `Terminating`.
pub fn is_terminating(ns: &serde_json::Value) -> bool {
    ns.pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null())
        || ns.pointer("/status/phase").and_then(serde_json::Value::as_str) == Some(TERMINATING)
}

/// Create/update/delete policy of `Namespace`.
pub struct Strategy;

impl strategy::Strategy for Strategy {
    type Object = Namespace;

    const COLUMNS: &'static [Column] = &[Column {
        name: "Status",
        kind: "string",
        pointer: "/status/phase",
        priority: 0,
        description: "The phase of the namespace: Active or Terminating.",
    }];

    fn prepare_for_create(&self, obj: &mut Namespace) {
        obj.0.status = None;
        obj.set_phase(ACTIVE);
        let spec = obj.0.spec.get_or_insert_with(Default::default);
        let finalizers = spec.finalizers.get_or_insert_with(Vec::new);
        if !finalizers.iter().any(|f| f == FINALIZER) {
            finalizers.push(FINALIZER.to_string());
        }
    }

    fn prepare_for_update(&self, new: &mut Namespace, old: &Namespace) {
        new.0.spec.clone_from(&old.0.spec);
        new.0.status.clone_from(&old.0.status);
    }

    fn validate(&self, obj: &Namespace) -> FieldErrors {
        let mut errs = validate_object_meta_named(&obj.0.metadata, false, NameRule::Dns1123Label);
        let path = FieldPath::new("spec").child("finalizers");
        for (i, f) in obj.finalizers().iter().enumerate() {
            if let Err(msg) = super::validate::format::qualified_name(f) {
                errs.push(FieldError::invalid(path.index(i), f, msg));
            }
        }
        errs
    }

    fn validate_update(&self, new: &Namespace, old: &Namespace) -> FieldErrors {
        let mut errs = validate_object_meta_update(&new.0.metadata, &old.0.metadata);
        errs.extend(self.validate(new));
        errs
    }

    fn deletion_held(&self, obj: &Namespace) -> bool {
        !obj.finalizers().is_empty()
    }

    fn delete_forbidden(&self, obj: &Namespace) -> Option<&'static str> {
        let name = obj.0.metadata.name.as_deref().unwrap_or_default();
        INITIAL
            .contains(&name)
            .then_some("this namespace may not be deleted")
    }

    fn prepare_for_delete(&self, obj: &mut Namespace) {
        obj.set_phase(TERMINATING);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::strategy::Strategy as _;

    fn named(name: &str) -> Namespace {
        let mut n = Namespace::default();
        n.0.metadata.name = Some(name.into());
        n
    }

    #[test]
    fn create_sets_the_phase_and_the_finalizer() {
        let mut n = named("t1");
        Strategy.prepare_for_create(&mut n);
        assert_eq!(n.finalizers(), [FINALIZER]);
        assert_eq!(n.0.status.unwrap().phase.as_deref(), Some(ACTIVE));
    }

    #[test]
    fn names_are_dns_labels() {
        assert!(Strategy.validate(&named("t1")).is_empty());
        assert!(!Strategy.validate(&named("a.b")).is_empty());
        assert!(!Strategy.validate(&named("UPPER")).is_empty());
    }

    #[test]
    fn the_wire_form_is_core_v1() {
        let v = serde_json::to_value(named("t1")).unwrap();
        assert_eq!(v["apiVersion"], "v1");
        assert_eq!(v["kind"], "Namespace");
    }
}
