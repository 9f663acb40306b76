//! `metadata` rules shared by every kind, and label selectors embedded in specs.
//!
//! These are the checks Kubernetes applies to every object (`ValidateObjectMeta` and
//! `ValidateObjectMetaUpdate` in apimachinery), so objects stored here are acceptable to any
//! client or tool that handles built-in kinds.

use std::collections::{BTreeMap, HashSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

use super::field::{FieldError, FieldErrors, FieldPath};
use super::format;

/// The most bytes all annotations of an object may take together (keys plus values), as in
/// Kubernetes: 256 KiB.
pub const ANNOTATIONS_MAX_BYTES: usize = 256 * 1024;

/// Which format `metadata.name` must have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameRule {
    /// DNS-1123 subdomain: the Kubernetes default for object names.
    Dns1123Subdomain,
    /// DNS-1123 label: for names that are used as label values or referenced by DNS-label refs.
    Dns1123Label,
    /// DNS-1035 label: for names that become the prefix of a Service name.
    Dns1035Label,
}

impl NameRule {
    fn check(self, s: &str) -> Result<(), String> {
        match self {
            Self::Dns1123Subdomain => format::dns1123_subdomain(s),
            Self::Dns1123Label => format::dns1123_label(s),
            Self::Dns1035Label => format::dns1035_label(s),
        }
    }
}

/// Validates the metadata of a new object whose names are DNS-1123 subdomains; `namespaced` is
/// the kind's scope. See [`validate_object_meta_named`] for the rules.
pub fn validate_object_meta(meta: &ObjectMeta, namespaced: bool) -> FieldErrors {
    validate_object_meta_named(meta, namespaced, NameRule::Dns1123Subdomain)
}

/// Validates the metadata of a new object, with `metadata.name` in the format `rule`:
///
/// - `name` is required unless `generateName` is set; it, and `generateName` with trailing
///   `-`s removed, must match `rule`;
/// - `namespace` is required and a DNS-1123 label for namespaced kinds, and forbidden for
///   cluster-scoped ones;
/// - label keys are qualified names, values valid label values;
/// - annotation keys are qualified names (checked lower-cased, as Kubernetes does), and all
///   annotations together take at most [`ANNOTATIONS_MAX_BYTES`];
/// - finalizers are qualified names and unique;
/// - `generation` and `deletionGracePeriodSeconds` are not negative;
/// - each owner reference has `apiVersion`, `kind`, `name` and `uid`, and at most one is the
///   controller.
pub fn validate_object_meta_named(meta: &ObjectMeta, namespaced: bool, rule: NameRule) -> FieldErrors {
    let path = FieldPath::new("metadata");
    let mut errs = FieldErrors::new();

    let name = meta.name.as_deref().unwrap_or_default();
    let generate_name = meta.generate_name.as_deref().unwrap_or_default();
    if name.is_empty() {
        if generate_name.is_empty() {
            errs.push(FieldError::required(
                path.child("name"),
                "name or generateName is required",
            ));
        }
    } else if let Err(msg) = rule.check(name) {
        errs.push(FieldError::invalid(path.child("name"), name, msg));
    }
    if !generate_name.is_empty() {
        // The server appends a random suffix; a trailing '-' is how users separate it.
        let base = generate_name.trim_end_matches('-');
        if let Err(msg) = rule.check(base) {
            errs.push(FieldError::invalid(
                path.child("generateName"),
                generate_name,
                msg,
            ));
        }
    }

    let namespace = meta.namespace.as_deref().unwrap_or_default();
    if namespaced {
        if namespace.is_empty() {
            errs.push(FieldError::required(path.child("namespace"), ""));
        } else if let Err(msg) = format::dns1123_label(namespace) {
            errs.push(FieldError::invalid(path.child("namespace"), namespace, msg));
        }
    } else if !namespace.is_empty() {
        errs.push(FieldError::forbidden(
            path.child("namespace"),
            "not allowed on this cluster-scoped kind",
        ));
    }

    if let Some(labels) = &meta.labels {
        errs.extend(validate_labels(labels, &path.child("labels")));
    }
    if let Some(annotations) = &meta.annotations {
        errs.extend(validate_annotations(annotations, &path.child("annotations")));
    }
    if let Some(finalizers) = &meta.finalizers {
        errs.extend(validate_finalizers(finalizers, &path.child("finalizers")));
    }
    if let Some(generation) = meta.generation.filter(|g| *g < 0) {
        errs.push(FieldError::invalid_int(
            path.child("generation"),
            generation,
            "must not be negative",
        ));
    }
    if let Some(grace) = meta.deletion_grace_period_seconds.filter(|g| *g < 0) {
        errs.push(FieldError::invalid_int(
            path.child("deletionGracePeriodSeconds"),
            grace,
            "must not be negative",
        ));
    }
    if let Some(owners) = &meta.owner_references {
        let owners_path = path.child("ownerReferences");
        let mut controllers = 0;
        for (i, owner) in owners.iter().enumerate() {
            let p = owners_path.index(i);
            for (field, value) in [
                ("apiVersion", &owner.api_version),
                ("kind", &owner.kind),
                ("name", &owner.name),
                ("uid", &owner.uid),
            ] {
                if value.is_empty() {
                    errs.push(FieldError::required(p.child(field), ""));
                }
            }
            if owner.controller == Some(true) {
                controllers += 1;
                if controllers > 1 {
                    errs.push(FieldError::forbidden(
                        p.child("controller"),
                        "only one owner reference may be the controller",
                    ));
                }
            }
        }
    }
    errs
}

/// Validates an update's metadata against the stored object's: the new metadata must be valid
/// (see [`validate_object_meta_named`], which the kind validators call separately), and
/// `name`, `namespace`, `uid`, `creationTimestamp`, a set `deletionTimestamp` and a set
/// `deletionGracePeriodSeconds` may not change. An object being deleted may lose finalizers but
/// not gain new ones.
pub fn validate_object_meta_update(new: &ObjectMeta, old: &ObjectMeta) -> FieldErrors {
    let path = FieldPath::new("metadata");
    let mut errs = FieldErrors::new();
    let text = |v: &Option<String>| v.clone().unwrap_or_default();
    for (field, n, o) in [
        ("name", text(&new.name), text(&old.name)),
        ("namespace", text(&new.namespace), text(&old.namespace)),
        ("uid", text(&new.uid), text(&old.uid)),
    ] {
        if n != o {
            errs.push(FieldError::invalid(path.child(field), &n, "field is immutable"));
        }
    }
    if new.creation_timestamp != old.creation_timestamp {
        errs.push(FieldError::forbidden(
            path.child("creationTimestamp"),
            "field is immutable",
        ));
    }
    if old.deletion_timestamp.is_some() && new.deletion_timestamp != old.deletion_timestamp {
        errs.push(FieldError::forbidden(
            path.child("deletionTimestamp"),
            "field is immutable once set",
        ));
    }
    if old.deletion_grace_period_seconds.is_some()
        && new.deletion_grace_period_seconds != old.deletion_grace_period_seconds
    {
        errs.push(FieldError::forbidden(
            path.child("deletionGracePeriodSeconds"),
            "field is immutable once set",
        ));
    }
    if old.deletion_timestamp.is_some() {
        let old_finalizers: HashSet<&String> = old.finalizers.iter().flatten().collect();
        for (i, f) in new.finalizers.iter().flatten().enumerate() {
            if !old_finalizers.contains(f) {
                errs.push(FieldError::forbidden(
                    path.child("finalizers").index(i),
                    "no new finalizers can be added while the object is being deleted",
                ));
            }
        }
    }
    errs
}

/// Validates a label map at `path`: keys are qualified names, values label values.
pub fn validate_labels(labels: &BTreeMap<String, String>, path: &FieldPath) -> FieldErrors {
    let mut errs = FieldErrors::new();
    for (key, value) in labels {
        if let Err(msg) = format::qualified_name(key) {
            errs.push(FieldError::invalid(path.clone(), key, msg));
        }
        if let Err(msg) = format::label_value(value) {
            errs.push(FieldError::invalid(path.key(key), value, msg));
        }
    }
    errs
}

/// Validates an annotation map at `path`: keys are qualified names (compared lower-cased),
/// and keys plus values take at most [`ANNOTATIONS_MAX_BYTES`].
pub fn validate_annotations(annotations: &BTreeMap<String, String>, path: &FieldPath) -> FieldErrors {
    let mut errs = FieldErrors::new();
    let mut total = 0usize;
    for (key, value) in annotations {
        if let Err(msg) = format::qualified_name(&key.to_lowercase()) {
            errs.push(FieldError::invalid(path.clone(), key, msg));
        }
        total = total.saturating_add(key.len()).saturating_add(value.len());
    }
    if total > ANNOTATIONS_MAX_BYTES {
        errs.push(FieldError::too_long(path.clone(), ANNOTATIONS_MAX_BYTES, "bytes"));
    }
    errs
}

fn validate_finalizers(finalizers: &[String], path: &FieldPath) -> FieldErrors {
    let mut errs = FieldErrors::new();
    let mut seen = HashSet::new();
    for (i, f) in finalizers.iter().enumerate() {
        if let Err(msg) = format::qualified_name(f) {
            errs.push(FieldError::invalid(path.index(i), f, msg));
        } else if !seen.insert(f) {
            errs.push(FieldError::duplicate(path.index(i), f));
        }
    }
    errs
}

/// Label-selector operators, as spelled in `matchExpressions[].operator`.
pub const SELECTOR_OPERATORS: &[&str] = &["In", "NotIn", "Exists", "DoesNotExist"];

/// Validates a label selector embedded in a spec (e.g. `spec.podSelector`):
///
/// - `matchLabels` entries follow the label rules;
/// - each `matchExpressions[i]` has a qualified-name `key` and an operator from
///   [`SELECTOR_OPERATORS`]; `In`/`NotIn` need at least one value, `Exists`/`DoesNotExist`
///   take none; values are valid label values and unique.
pub fn validate_label_selector(selector: &LabelSelector, path: &FieldPath) -> FieldErrors {
    let mut errs = FieldErrors::new();
    if let Some(labels) = &selector.match_labels {
        errs.extend(validate_labels(labels, &path.child("matchLabels")));
    }
    let exprs_path = path.child("matchExpressions");
    for (i, req) in selector.match_expressions.iter().flatten().enumerate() {
        let p = exprs_path.index(i);
        if req.key.is_empty() {
            errs.push(FieldError::required(p.child("key"), ""));
        } else if let Err(msg) = format::qualified_name(&req.key) {
            errs.push(FieldError::invalid(p.child("key"), &req.key, msg));
        }
        let values = req.values.as_deref().unwrap_or_default();
        match req.operator.as_str() {
            "In" | "NotIn" => {
                if values.is_empty() {
                    errs.push(FieldError::required(
                        p.child("values"),
                        "at least one value is required when operator is In or NotIn",
                    ));
                }
            }
            "Exists" | "DoesNotExist" => {
                if !values.is_empty() {
                    errs.push(FieldError::forbidden(
                        p.child("values"),
                        "must be empty when operator is Exists or DoesNotExist",
                    ));
                }
            }
            "" => errs.push(FieldError::required(p.child("operator"), "")),
            other => errs.push(FieldError::not_supported(
                p.child("operator"),
                other,
                SELECTOR_OPERATORS,
            )),
        }
        let mut seen = HashSet::new();
        for (j, v) in values.iter().enumerate() {
            if let Err(msg) = format::label_value(v) {
                errs.push(FieldError::invalid(p.child("values").index(j), v, msg));
            } else if !seen.insert(v) {
                errs.push(FieldError::duplicate(p.child("values").index(j), v));
            }
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelectorRequirement, OwnerReference, Time};
    use proptest::prelude::*;

    use super::*;
    use crate::validation::ErrorType;
    use crate::validation::test_util::assert_errors;

    fn meta(name: &str, ns: Option<&str>) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.to_owned()),
            namespace: ns.map(str::to_owned),
            ..ObjectMeta::default()
        }
    }

    fn map(entries: &[(&str, &str)]) -> BTreeMap<String, String> {
        entries
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn valid_metadata_passes() {
        let mut m = meta("blue.example", Some("tenant-a"));
        m.labels = Some(map(&[
            ("app", "web"),
            ("sdn.cozystack.io/vpc", ""),
            ("k8s.io/x", "A_b.c"),
        ]));
        m.annotations = Some(map(&[("Example.com/Note", "any text at all / \n ok")]));
        m.finalizers = Some(vec!["sdn.cozystack.io/sever".into(), "kubernetes".into()]);
        assert_errors(&validate_object_meta(&m, true), &[]);
        assert_errors(&validate_object_meta(&meta("p", None), false), &[]);
    }

    #[test]
    fn name_is_required_unless_generated() {
        let mut m = ObjectMeta {
            namespace: Some("ns".into()),
            ..ObjectMeta::default()
        };
        assert_errors(
            &validate_object_meta(&m, true),
            &[("metadata.name", ErrorType::Required)],
        );
        m.generate_name = Some("gw-".into());
        assert_errors(&validate_object_meta(&m, true), &[]);
        m.generate_name = Some("Gw-".into());
        assert_errors(
            &validate_object_meta(&m, true),
            &[("metadata.generateName", ErrorType::Invalid)],
        );
    }

    #[test]
    fn name_rules() {
        let bad = meta("Blue", Some("ns"));
        assert_errors(
            &validate_object_meta(&bad, true),
            &[("metadata.name", ErrorType::Invalid)],
        );
        let dotted = meta("a.b", Some("ns"));
        assert_errors(&validate_object_meta(&dotted, true), &[]);
        assert_errors(
            &validate_object_meta_named(&dotted, true, NameRule::Dns1123Label),
            &[("metadata.name", ErrorType::Invalid)],
        );
        assert_errors(
            &validate_object_meta_named(&meta("1gw", Some("ns")), true, NameRule::Dns1035Label),
            &[("metadata.name", ErrorType::Invalid)],
        );
        assert_errors(
            &validate_object_meta(&meta(&"a".repeat(254), Some("ns")), true),
            &[("metadata.name", ErrorType::Invalid)],
        );
    }

    #[test]
    fn namespace_follows_the_scope() {
        assert_errors(
            &validate_object_meta(&meta("a", None), true),
            &[("metadata.namespace", ErrorType::Required)],
        );
        assert_errors(
            &validate_object_meta(&meta("a", Some("Tenant")), true),
            &[("metadata.namespace", ErrorType::Invalid)],
        );
        assert_errors(
            &validate_object_meta(&meta("a", Some("ns")), false),
            &[("metadata.namespace", ErrorType::Forbidden)],
        );
    }

    #[test]
    fn labels_annotations_finalizers() {
        let mut m = meta("a", None);
        m.labels = Some(map(&[("bad key", "v"), ("ok", "bad value")]));
        m.annotations = Some(map(&[("/x", "v")]));
        m.finalizers = Some(vec!["a/b".into(), "a/b".into(), "not ok".into()]);
        m.generation = Some(-1);
        assert_errors(
            &validate_object_meta(&m, false),
            &[
                ("metadata.labels", ErrorType::Invalid),
                ("metadata.labels[ok]", ErrorType::Invalid),
                ("metadata.annotations", ErrorType::Invalid),
                ("metadata.finalizers[1]", ErrorType::Duplicate),
                ("metadata.finalizers[2]", ErrorType::Invalid),
                ("metadata.generation", ErrorType::Invalid),
            ],
        );
    }

    #[test]
    fn annotations_are_size_limited() {
        let mut m = meta("a", None);
        m.annotations = Some(map(&[("big", &"x".repeat(ANNOTATIONS_MAX_BYTES))]));
        assert_errors(
            &validate_object_meta(&m, false),
            &[("metadata.annotations", ErrorType::TooLong)],
        );
    }

    #[test]
    fn owner_references() {
        let mut m = meta("a", None);
        let owner = OwnerReference {
            api_version: "v1".into(),
            kind: "Service".into(),
            name: "s".into(),
            uid: "u".into(),
            controller: Some(true),
            ..OwnerReference::default()
        };
        m.owner_references = Some(vec![owner.clone(), owner, OwnerReference::default()]);
        assert_errors(
            &validate_object_meta(&m, false),
            &[
                ("metadata.ownerReferences[1].controller", ErrorType::Forbidden),
                ("metadata.ownerReferences[2].apiVersion", ErrorType::Required),
                ("metadata.ownerReferences[2].kind", ErrorType::Required),
                ("metadata.ownerReferences[2].name", ErrorType::Required),
                ("metadata.ownerReferences[2].uid", ErrorType::Required),
            ],
        );
    }

    #[test]
    fn update_keeps_identity() {
        let mut old = meta("a", Some("ns"));
        old.uid = Some("u1".into());
        old.creation_timestamp = Some(Time(Default::default()));
        let mut new = meta("b", Some("ns2"));
        new.uid = Some("u2".into());
        assert_errors(
            &validate_object_meta_update(&new, &old),
            &[
                ("metadata.name", ErrorType::Invalid),
                ("metadata.namespace", ErrorType::Invalid),
                ("metadata.uid", ErrorType::Invalid),
                ("metadata.creationTimestamp", ErrorType::Forbidden),
            ],
        );
        assert_errors(&validate_object_meta_update(&old, &old), &[]);
    }

    #[test]
    fn no_new_finalizers_while_deleting() {
        let mut old = meta("a", None);
        old.deletion_timestamp = Some(Time(Default::default()));
        old.finalizers = Some(vec!["x.io/a".into()]);
        let mut new = old.clone();
        new.finalizers = Some(vec![]);
        assert_errors(&validate_object_meta_update(&new, &old), &[]);
        new.finalizers = Some(vec!["x.io/a".into(), "x.io/b".into()]);
        assert_errors(
            &validate_object_meta_update(&new, &old),
            &[("metadata.finalizers[1]", ErrorType::Forbidden)],
        );
    }

    fn req(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: Some(values.iter().map(|v| (*v).to_owned()).collect()),
        }
    }

    #[test]
    fn selectors() {
        let path = FieldPath::new("spec").child("podSelector");
        let good = LabelSelector {
            match_labels: Some(map(&[("app", "web")])),
            match_expressions: Some(vec![
                req("tier", "In", &["a", "b"]),
                req("x.io/y", "Exists", &[]),
                req("z", "NotIn", &["c"]),
                req("w", "DoesNotExist", &[]),
            ]),
        };
        assert_errors(&validate_label_selector(&good, &path), &[]);
        assert_errors(&validate_label_selector(&LabelSelector::default(), &path), &[]);

        let bad = LabelSelector {
            match_labels: Some(map(&[("app", "-web")])),
            match_expressions: Some(vec![
                req("tier", "In", &[]),
                req("", "Exists", &["a"]),
                req("k", "Matches", &["a", "a", "b c"]),
                req("k", "", &[]),
            ]),
        };
        assert_errors(
            &validate_label_selector(&bad, &path),
            &[
                ("spec.podSelector.matchLabels[app]", ErrorType::Invalid),
                ("spec.podSelector.matchExpressions[0].values", ErrorType::Required),
                ("spec.podSelector.matchExpressions[1].key", ErrorType::Required),
                (
                    "spec.podSelector.matchExpressions[1].values",
                    ErrorType::Forbidden,
                ),
                (
                    "spec.podSelector.matchExpressions[2].operator",
                    ErrorType::NotSupported,
                ),
                (
                    "spec.podSelector.matchExpressions[2].values[1]",
                    ErrorType::Duplicate,
                ),
                (
                    "spec.podSelector.matchExpressions[2].values[2]",
                    ErrorType::Invalid,
                ),
                (
                    "spec.podSelector.matchExpressions[3].operator",
                    ErrorType::Required,
                ),
            ],
        );
    }

    proptest! {
        #[test]
        fn random_metadata_never_panics(name in "\\PC{0,80}", ns in "\\PC{0,20}", key in "\\PC{0,80}", value in "\\PC{0,80}") {
            let mut m = meta(&name, Some(&ns));
            m.labels = Some(map(&[(&key, &value)]));
            m.annotations = Some(map(&[(&key, &value)]));
            m.finalizers = Some(vec![key.clone()]);
            let _ = validate_object_meta(&m, true);
            let _ = validate_object_meta(&m, false);
            let sel = LabelSelector {
                match_labels: Some(map(&[(&key, &value)])),
                match_expressions: Some(vec![req(&key, &value, &[&name])]),
            };
            let _ = validate_label_selector(&sel, &FieldPath::new("s"));
        }
    }
}
