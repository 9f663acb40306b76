//! The chart's RBAC, generated from tables: the tenant ClusterRoles from the table of kinds
//! (here), the server's own ClusterRole from its table of kube access ([`server`]).
//!
//! `charts/cozyplane/templates/tenant-rbac.yaml` is the output of [`tenant_rbac_yaml`]; the test
//! `apiserver/tests/rbac.rs` fails when the file is stale (regenerate with
//! `COZYPLANE_UPDATE_RBAC=1 cargo test -p cozyplane-apiserver --test rbac`).
//!
//! Only namespaced kinds appear: a RoleBinding of these roles can then never grant a
//! cluster-scoped kind (`ports`, `servicevips`, `hostfirewalls`). The virtual verbs `export` and
//! `peer` on `vpcs` are in the edit role; under a RoleBinding they cover only the VPCs of that
//! namespace. `create` on `vpcs/trace` and on `podtraces` (questions, they change nothing) is
//! in both roles.

use std::fmt::Write as _;

pub mod server;

pub use server::{Access, SERVER_ACCESS, server_rbac_yaml, server_role_rules};

use cozyplane_apis::{GROUP, KindInfo, v1alpha1::KINDS};

/// Verbs of the edit role on each tenant kind (Kubernetes' `edit` verbs).
pub const EDIT_VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];
/// Verbs of the view role.
pub const VIEW_VERBS: [&str; 3] = ["get", "list", "watch"];
/// Virtual verbs on `vpcs` tenants hold for their own VPCs.
pub const VIRTUAL_VERBS: [&str; 2] = ["export", "peer"];
/// Resources and subresources that answer a question without changing anything (`create` is
/// the verb of a POSTed question, as a SubjectAccessReview's): in the edit and the view role.
/// `vpcs/trace` asks about a VPC's SecurityGroups, `podtraces` about the default network's
/// policy for the namespace's pods.
pub const QUESTIONS: [&str; 2] = ["vpcs/trace", cozyplane_apis::v1alpha1::POD_TRACE_RESOURCE];

/// The kinds a tenant may be granted: the namespaced ones.
pub fn tenant_kinds() -> Vec<&'static KindInfo> {
    KINDS.iter().filter(|k| k.namespaced).collect()
}

fn list(items: &[&str]) -> String {
    format!("[{}]", items.join(", "))
}

fn rule(out: &mut String, resources: &[&str], verbs: &[&str]) {
    let _ = writeln!(out, "  - apiGroups: [{GROUP}]");
    let _ = writeln!(out, "    resources: {}", list(resources));
    let _ = writeln!(out, "    verbs: {}", list(verbs));
}

/// `role` names the key under the chart's `rbac.tenantRoleLabels` whose labels the role also
/// carries: a platform's own aggregated roles select ours by their labels (Cozystack's
/// `cozy:tenant:admin`/`cozy:tenant:view` by `rbac.cozystack.io/aggregate-to-tenant-*`).
fn header(out: &mut String, name: &str, role: &str, aggregate: &[&str]) {
    out.push_str("---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n");
    let _ = writeln!(out, "  name: {name}");
    out.push_str("  labels:\n    {{- include \"cozyplane.labels\" . | nindent 4 }}\n");
    for a in aggregate {
        let _ = writeln!(out, "    rbac.authorization.k8s.io/aggregate-to-{a}: \"true\"");
    }
    // Each value quoted: a label value is a string, and `--set key=true` would make it a bool.
    let _ = writeln!(
        out,
        "    {{{{- range $k, $v := (dig \"tenantRoleLabels\" \"{role}\" dict .Values.rbac) }}}}\n    {{{{ $k }}}}: {{{{ $v | quote }}}}\n    {{{{- end }}}}"
    );
    out.push_str("rules:\n");
}

/// The chart template of the tenant roles.
pub fn tenant_rbac_yaml() -> String {
    let kinds = tenant_kinds();
    let plurals: Vec<&str> = kinds.iter().map(|k| k.plural).collect();
    let status: Vec<String> = kinds
        .iter()
        .filter(|k| k.has_status)
        .map(|k| format!("{}/status", k.plural))
        .collect();
    let status: Vec<&str> = status.iter().map(String::as_str).collect();
    let mut out = String::from(
        "# Generated from the table of kinds by cozyplane_apiserver::rbac::tenant_rbac_yaml; do not edit.\n\
         # Regenerate: COZYPLANE_UPDATE_RBAC=1 cargo test -p cozyplane-apiserver --test rbac\n\
         {{- if .Values.rbac.tenantRoles }}\n",
    );
    header(&mut out, "cozyplane-tenant-edit", "edit", &["admin", "edit"]);
    rule(&mut out, &plurals, &EDIT_VERBS);
    if !status.is_empty() {
        rule(&mut out, &status, &["get"]);
    }
    rule(&mut out, &["vpcs"], &VIRTUAL_VERBS);
    rule(&mut out, &QUESTIONS, &["create"]);
    header(&mut out, "cozyplane-tenant-view", "view", &["view"]);
    rule(&mut out, &plurals, &VIEW_VERBS);
    if !status.is_empty() {
        rule(&mut out, &status, &["get"]);
    }
    rule(&mut out, &QUESTIONS, &["create"]);
    out.push_str("{{- end }}\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_namespaced_kinds_and_the_virtual_verbs() {
        let y = tenant_rbac_yaml();
        for k in KINDS.iter().filter(|k| !k.namespaced) {
            assert!(
                !y.contains(k.plural),
                "{} must not be granted to tenants",
                k.plural
            );
        }
        assert!(y.contains("resources: [vpcs]\n    verbs: [export, peer]"));
        assert_eq!(
            y.matches("resources: [vpcs/trace, podtraces]\n    verbs: [create]")
                .count(),
            2,
            "edit and view may ask for a trace"
        );
        assert!(y.contains("aggregate-to-view"));
    }
}
