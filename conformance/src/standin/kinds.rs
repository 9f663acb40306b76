//! The stand-in's table of kinds: what our server and agents consume from a kube-apiserver.

use cozyplane_apis::KindInfo;

use super::store::{Flavor, KindDef};

macro_rules! kind {
    ($g:expr, $v:expr, $kind:expr, $plural:expr, $singular:expr, [$($short:expr),*], $ns:expr, $status:expr, $fields:expr, $flavor:expr) => {
        KindDef {
            info: KindInfo {
                group: $g,
                version: $v,
                kind: $kind,
                list_kind: concat!($kind, "List"),
                plural: $plural,
                singular: $singular,
                short_names: &[$($short),*],
                categories: &[],
                namespaced: $ns,
                has_status: $status,
            },
            fields: $fields,
            flavor: $flavor,
        }
    };
}

/// Every stored kind, in discovery order.
pub const KINDS: &[KindDef] = &[
    kind!(
        "",
        "v1",
        "Namespace",
        "namespaces",
        "namespace",
        ["ns"],
        false,
        true,
        &[("status.phase", "/status/phase")],
        Flavor::Namespace
    ),
    kind!(
        "",
        "v1",
        "Pod",
        "pods",
        "pod",
        ["po"],
        true,
        true,
        &[
            ("spec.nodeName", "/spec/nodeName"),
            ("status.phase", "/status/phase")
        ],
        Flavor::Pod
    ),
    kind!(
        "",
        "v1",
        "Node",
        "nodes",
        "node",
        ["no"],
        false,
        true,
        &[],
        Flavor::Plain
    ),
    kind!(
        "",
        "v1",
        "Service",
        "services",
        "service",
        ["svc"],
        true,
        true,
        &[],
        Flavor::Plain
    ),
    kind!(
        "",
        "v1",
        "Event",
        "events",
        "event",
        ["ev"],
        true,
        false,
        &[],
        Flavor::Plain
    ),
    kind!(
        "",
        "v1",
        "ConfigMap",
        "configmaps",
        "configmap",
        ["cm"],
        true,
        false,
        &[],
        Flavor::Plain
    ),
    kind!(
        "",
        "v1",
        "ResourceQuota",
        "resourcequotas",
        "resourcequota",
        ["quota"],
        true,
        true,
        &[],
        Flavor::Plain
    ),
    kind!(
        "discovery.k8s.io",
        "v1",
        "EndpointSlice",
        "endpointslices",
        "endpointslice",
        [],
        true,
        false,
        &[],
        Flavor::Plain
    ),
    kind!(
        "networking.k8s.io",
        "v1",
        "NetworkPolicy",
        "networkpolicies",
        "networkpolicy",
        ["netpol"],
        true,
        false,
        &[],
        Flavor::Plain
    ),
    // The network-policy-api CRDs the chart installs (charts/cozyplane/crds/), served here as
    // if installed: the admin tiers of the agents' policy writer (issue 29).
    kind!(
        "policy.networking.k8s.io",
        "v1alpha1",
        "AdminNetworkPolicy",
        "adminnetworkpolicies",
        "adminnetworkpolicy",
        ["anp"],
        false,
        true,
        &[],
        Flavor::Plain
    ),
    kind!(
        "policy.networking.k8s.io",
        "v1alpha1",
        "BaselineAdminNetworkPolicy",
        "baselineadminnetworkpolicies",
        "baselineadminnetworkpolicy",
        ["banp"],
        false,
        true,
        &[],
        Flavor::Plain
    ),
    kind!(
        "rbac.authorization.k8s.io",
        "v1",
        "Role",
        "roles",
        "role",
        [],
        true,
        false,
        &[],
        Flavor::Plain
    ),
    kind!(
        "rbac.authorization.k8s.io",
        "v1",
        "RoleBinding",
        "rolebindings",
        "rolebinding",
        [],
        true,
        false,
        &[],
        Flavor::Plain
    ),
    kind!(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRole",
        "clusterroles",
        "clusterrole",
        [],
        false,
        false,
        &[],
        Flavor::Plain
    ),
    kind!(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
        "clusterrolebinding",
        [],
        false,
        false,
        &[],
        Flavor::Plain
    ),
    kind!(
        "apiregistration.k8s.io",
        "v1",
        "APIService",
        "apiservices",
        "apiservice",
        [],
        false,
        true,
        &[],
        Flavor::Plain
    ),
];

/// A create-only virtual resource (the reviews).
#[derive(Clone, Copy, Debug)]
pub struct Review {
    /// Group.
    pub group: &'static str,
    /// Kind.
    pub kind: &'static str,
    /// Plural.
    pub plural: &'static str,
    /// Namespaced (LocalSubjectAccessReview).
    pub namespaced: bool,
}

/// The review resources.
pub const REVIEWS: &[Review] = &[
    Review {
        group: "authentication.k8s.io",
        kind: "TokenReview",
        plural: "tokenreviews",
        namespaced: false,
    },
    Review {
        group: "authorization.k8s.io",
        kind: "SubjectAccessReview",
        plural: "subjectaccessreviews",
        namespaced: false,
    },
    Review {
        group: "authorization.k8s.io",
        kind: "SelfSubjectAccessReview",
        plural: "selfsubjectaccessreviews",
        namespaced: false,
    },
    Review {
        group: "authorization.k8s.io",
        kind: "LocalSubjectAccessReview",
        plural: "localsubjectaccessreviews",
        namespaced: true,
    },
];

/// The one version the stand-in serves of a group it serves itself (its kinds'; `v1` for
/// every group but the network-policy-api's `v1alpha1`).
pub fn group_version(g: &str) -> &'static str {
    KINDS
        .iter()
        .find(|k| k.info.group == g)
        .map_or("v1", |k| k.info.version)
}

/// Every group the stand-in serves itself ("" is the legacy core group), in order.
pub fn local_groups() -> Vec<&'static str> {
    let mut g: Vec<&'static str> = Vec::new();
    for k in KINDS {
        if !g.contains(&k.info.group) {
            g.push(k.info.group);
        }
    }
    for r in REVIEWS {
        if !g.contains(&r.group) {
            g.push(r.group);
        }
    }
    g
}
