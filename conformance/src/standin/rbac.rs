//! Kubernetes RBAC evaluation over the stand-in's stored Roles, ClusterRoles and bindings, the
//! ClusterRole aggregation controller, and the bootstrap policy (cluster-admin, admin, edit,
//! view and the discovery roles).

use std::collections::BTreeMap;

use cozyplane_apiserver::registry::Resource;
use cozyplane_apiserver::registry::selector::LabelSelector;
use cozyplane_apiserver::registry::store::WriteOptions;
use serde_json::{Value, json};

use super::Registry;

/// An authenticated (or anonymous) user.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    /// User name.
    pub name: String,
    /// UID, possibly empty.
    pub uid: String,
    /// Groups.
    pub groups: Vec<String>,
    /// Extra attributes.
    pub extra: BTreeMap<String, Vec<String>>,
}

impl Identity {
    /// A user in `groups`.
    pub fn new(name: &str, groups: &[&str]) -> Self {
        Self {
            name: name.into(),
            groups: groups.iter().map(|g| (*g).to_string()).collect(),
            ..Default::default()
        }
    }

    /// `system:anonymous`.
    pub fn anonymous() -> Self {
        Self::new("system:anonymous", &["system:unauthenticated"])
    }
}

/// What a request wants to do.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attrs {
    /// Verb (`get`, `list`, `watch`, `create`, ...).
    pub verb: String,
    /// API group ("" for core).
    pub group: String,
    /// API version.
    pub version: String,
    /// Plural resource.
    pub resource: String,
    /// Subresource.
    pub subresource: String,
    /// Object name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// Non-resource path (then the resource fields are empty).
    pub path: Option<String>,
}

impl Attrs {
    /// The "forbidden" message Kubernetes prints for a denied request.
    pub fn forbidden_message(&self, who: &Identity) -> String {
        if let Some(p) = &self.path {
            return format!(
                "forbidden: User \"{}\" cannot {} path \"{p}\"",
                who.name, self.verb
            );
        }
        let res = if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        };
        // Kubernetes names the group-qualified resource: `vpcs.sdn.cozystack.io "v1"`.
        let qualified = if self.group.is_empty() {
            self.resource.clone()
        } else {
            format!("{}.{}", self.resource, self.group)
        };
        let named = if self.name.is_empty() {
            qualified
        } else {
            format!("{qualified} \"{}\"", self.name)
        };
        let scope = if self.namespace.is_empty() {
            "at the cluster scope".to_string()
        } else {
            format!("in the namespace \"{}\"", self.namespace)
        };
        format!(
            "{named} is forbidden: User \"{}\" cannot {} resource \"{res}\" in API group \"{}\" {scope}",
            who.name, self.verb, self.group
        )
    }
}

fn strs(v: &Value, field: &str) -> Vec<String> {
    v.get(field)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default()
}

/// Whether one PolicyRule covers `a`.
pub fn rule_allows(rule: &Value, a: &Attrs) -> bool {
    let verbs = strs(rule, "verbs");
    if !verbs.iter().any(|v| v == "*" || *v == a.verb) {
        return false;
    }
    if let Some(p) = &a.path {
        return strs(rule, "nonResourceURLs")
            .iter()
            .any(|u| u == "*" || u == p || u.strip_suffix('*').is_some_and(|pre| p.starts_with(pre)));
    }
    if !strs(rule, "apiGroups").iter().any(|g| g == "*" || *g == a.group) {
        return false;
    }
    let combined = if a.subresource.is_empty() {
        a.resource.clone()
    } else {
        format!("{}/{}", a.resource, a.subresource)
    };
    let res_ok = strs(rule, "resources").iter().any(|r| {
        r == "*" || *r == combined || (!a.subresource.is_empty() && *r == format!("*/{}", a.subresource))
    });
    if !res_ok {
        return false;
    }
    let names = strs(rule, "resourceNames");
    names.is_empty() || (!a.name.is_empty() && names.contains(&a.name))
}

fn subject_matches(s: &Value, who: &Identity, binding_ns: &str) -> bool {
    let name = s.get("name").and_then(Value::as_str).unwrap_or_default();
    match s.get("kind").and_then(Value::as_str).unwrap_or_default() {
        "User" => name == who.name,
        "Group" => who.groups.iter().any(|g| g == name),
        "ServiceAccount" => {
            let ns = s
                .get("namespace")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .unwrap_or(binding_ns);
            who.name == format!("system:serviceaccount:{ns}:{name}")
        }
        _ => false,
    }
}

/// The decision and its reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Allowed?
    pub allowed: bool,
    /// Why (empty when denied without an opinion).
    pub reason: String,
}

/// Evaluates `a` for `who` with Kubernetes RBAC semantics (plus `system:masters`).
pub async fn authorize(reg: &Registry, who: &Identity, a: &Attrs) -> Decision {
    if who.groups.iter().any(|g| g == "system:masters") {
        return Decision {
            allowed: true,
            reason: "system:masters".into(),
        };
    }
    let mut bindings: Vec<(String, Value)> = reg
        .list("clusterrolebindings", None)
        .await
        .into_iter()
        .map(|b| ("ClusterRoleBinding".to_string(), b))
        .collect();
    if a.path.is_none() && !a.namespace.is_empty() {
        bindings.extend(
            reg.list("rolebindings", Some(&a.namespace))
                .await
                .into_iter()
                .map(|b| ("RoleBinding".to_string(), b)),
        );
    }
    for (bkind, b) in bindings {
        let bns = b
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let subjects = b
            .get("subjects")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if !subjects.iter().any(|s| subject_matches(s, who, &bns)) {
            continue;
        }
        let rkind = b
            .pointer("/roleRef/kind")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let rname = b
            .pointer("/roleRef/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let role = match rkind {
            "ClusterRole" => reg.store("clusterroles").get(None, rname).await.ok(),
            "Role" if bkind == "RoleBinding" => reg.store("roles").get(Some(&bns), rname).await.ok(),
            _ => None,
        };
        let Some(role) = role else { continue };
        let rules = role
            .get("rules")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if rules.iter().any(|r| rule_allows(r, a)) {
            let bname = b
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let ns = if bns.is_empty() {
                String::new()
            } else {
                format!(" in {bns}")
            };
            return Decision {
                allowed: true,
                reason: format!(
                    "RBAC: allowed by {bkind} \"{bname}{ns}\" of {rkind} \"{rname}\" to User \"{}\"",
                    who.name
                ),
            };
        }
    }
    Decision {
        allowed: false,
        reason: String::new(),
    }
}

/// A `metav1.LabelSelector` as the selector string the registry parses.
pub fn selector_of(sel: &Value) -> Option<LabelSelector> {
    let mut parts = Vec::new();
    if let Some(m) = sel.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in m {
            parts.push(format!("{k}={}", v.as_str().unwrap_or_default()));
        }
    }
    for e in sel
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let k = e.get("key").and_then(Value::as_str).unwrap_or_default();
        let vals = strs(e, "values").join(",");
        match e.get("operator").and_then(Value::as_str).unwrap_or_default() {
            "In" => parts.push(format!("{k} in ({vals})")),
            "NotIn" => parts.push(format!("{k} notin ({vals})")),
            "Exists" => parts.push(k.to_string()),
            "DoesNotExist" => parts.push(format!("!{k}")),
            _ => return None,
        }
    }
    LabelSelector::parse(&parts.join(",")).ok()
}

/// One pass of the ClusterRole aggregation controller: fills `rules` of every ClusterRole with an
/// `aggregationRule` from the ClusterRoles its selectors match.
pub async fn aggregate_once(reg: &Registry) {
    let roles = reg.list("clusterroles", None).await;
    for r in &roles {
        let Some(selectors) = r
            .pointer("/aggregationRule/clusterRoleSelectors")
            .and_then(Value::as_array)
        else {
            continue;
        };
        let me = r
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let sels: Vec<LabelSelector> = selectors.iter().filter_map(selector_of).collect();
        let mut rules: Vec<Value> = Vec::new();
        for other in &roles {
            let name = other
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if name == me || !sels.iter().any(|s| !s.is_empty() && s.matches_object(other)) {
                continue;
            }
            for rule in other.get("rules").and_then(Value::as_array).into_iter().flatten() {
                if !rules.contains(rule) {
                    rules.push(rule.clone());
                }
            }
        }
        if r.get("rules").cloned().unwrap_or(json!([])) != json!(rules) {
            let mut next = r.clone();
            next["rules"] = json!(rules);
            let _ = reg
                .store("clusterroles")
                .update(None, me, next, false, &WriteOptions::server())
                .await;
        }
    }
}

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> Value {
    json!({ "apiGroups": groups, "resources": resources, "verbs": verbs })
}

const READ: &[&str] = &["get", "list", "watch"];
const WRITE: &[&str] = &["create", "delete", "deletecollection", "patch", "update"];

fn cluster_role(name: &str, labels: &Value, rules: &[Value], aggregate_from: Option<&str>) -> Value {
    let mut r = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": { "name": name, "labels": labels }, "rules": rules,
    });
    if let Some(l) = aggregate_from {
        r["aggregationRule"] = json!({ "clusterRoleSelectors": [{ "matchLabels": { l: "true" } }] });
    }
    r
}

fn binding(name: &str, role: &str, groups: &[&str]) -> Value {
    let subjects: Vec<Value> = groups
        .iter()
        .map(|g| json!({ "kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": g }))
        .collect();
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": { "name": name },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role },
        "subjects": subjects,
    })
}

/// The bootstrap ClusterRoles and ClusterRoleBindings.
pub fn bootstrap() -> (Vec<Value>, Vec<Value>) {
    let agg = |l: &str| json!({ format!("rbac.authorization.k8s.io/aggregate-to-{l}"): "true" });
    let core_res = &["pods", "services", "configmaps", "endpoints"];
    let roles = vec![
        cluster_role(
            "cluster-admin",
            &json!({}),
            &[
                rule(&["*"], &["*"], &["*"]),
                json!({ "nonResourceURLs": ["*"], "verbs": ["*"] }),
            ],
            None,
        ),
        cluster_role(
            "admin",
            &json!({}),
            &[],
            Some("rbac.authorization.k8s.io/aggregate-to-admin"),
        ),
        cluster_role(
            "edit",
            &agg("admin"),
            &[],
            Some("rbac.authorization.k8s.io/aggregate-to-edit"),
        ),
        cluster_role(
            "view",
            &agg("edit"),
            &[],
            Some("rbac.authorization.k8s.io/aggregate-to-view"),
        ),
        cluster_role(
            "system:aggregate-to-admin",
            &agg("admin"),
            &[
                rule(&["rbac.authorization.k8s.io"], &["roles", "rolebindings"], &["*"]),
                rule(
                    &["authorization.k8s.io"],
                    &["localsubjectaccessreviews"],
                    &["create"],
                ),
            ],
            None,
        ),
        cluster_role(
            "system:aggregate-to-edit",
            &agg("edit"),
            &[
                rule(&[""], core_res, WRITE),
                rule(&["networking.k8s.io"], &["networkpolicies"], WRITE),
                rule(&["discovery.k8s.io"], &["endpointslices"], WRITE),
            ],
            None,
        ),
        cluster_role(
            "system:aggregate-to-view",
            &agg("view"),
            &[
                rule(
                    &[""],
                    &[
                        "pods",
                        "pods/status",
                        "services",
                        "services/status",
                        "configmaps",
                        "endpoints",
                        "resourcequotas",
                        "resourcequotas/status",
                        "namespaces",
                        "namespaces/status",
                    ],
                    READ,
                ),
                rule(&["networking.k8s.io"], &["networkpolicies"], READ),
                rule(&["discovery.k8s.io"], &["endpointslices"], READ),
            ],
            None,
        ),
        cluster_role(
            "system:discovery",
            &json!({}),
            &[
                json!({ "nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/openapi", "/openapi/*", "/version", "/version/", "/healthz", "/livez", "/readyz"], "verbs": ["get"] }),
            ],
            None,
        ),
        cluster_role(
            "system:basic-user",
            &json!({}),
            &[rule(
                &["authorization.k8s.io"],
                &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                &["create"],
            )],
            None,
        ),
        cluster_role(
            "system:public-info-viewer",
            &json!({}),
            &[
                json!({ "nonResourceURLs": ["/healthz", "/livez", "/readyz", "/version", "/version/"], "verbs": ["get"] }),
            ],
            None,
        ),
    ];
    let bindings = vec![
        binding("cluster-admin", "cluster-admin", &["system:masters"]),
        binding("system:discovery", "system:discovery", &["system:authenticated"]),
        binding(
            "system:basic-user",
            "system:basic-user",
            &["system:authenticated"],
        ),
        binding(
            "system:public-info-viewer",
            "system:public-info-viewer",
            &["system:authenticated", "system:unauthenticated"],
        ),
    ];
    (roles, bindings)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(verb: &str, group: &str, resource: &str, sub: &str, name: &str) -> Attrs {
        Attrs {
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            subresource: sub.into(),
            name: name.into(),
            namespace: "t1".into(),
            ..Default::default()
        }
    }

    #[test]
    fn rules_match_like_kubernetes() {
        let r = json!({ "apiGroups": [""], "resources": ["pods"], "verbs": ["get"] });
        assert!(rule_allows(&r, &attrs("get", "", "pods", "", "a")));
        assert!(!rule_allows(&r, &attrs("list", "", "pods", "", "")));
        assert!(!rule_allows(&r, &attrs("get", "", "pods", "status", "a")));
        assert!(!rule_allows(&r, &attrs("get", "apps", "pods", "", "a")));
        let star = json!({ "apiGroups": ["*"], "resources": ["*/status"], "verbs": ["*"] });
        assert!(rule_allows(&star, &attrs("update", "x", "pods", "status", "a")));
        assert!(!rule_allows(&star, &attrs("update", "x", "pods", "", "a")));
        let named = json!({ "apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["c"], "verbs": ["get", "list"] });
        assert!(rule_allows(&named, &attrs("get", "", "configmaps", "", "c")));
        assert!(!rule_allows(&named, &attrs("get", "", "configmaps", "", "d")));
        assert!(!rule_allows(&named, &attrs("list", "", "configmaps", "", "")));
        let nr = json!({ "nonResourceURLs": ["/apis/*"], "verbs": ["get"] });
        let mut a = Attrs {
            verb: "get".into(),
            path: Some("/apis/sdn.cozystack.io".into()),
            ..Default::default()
        };
        assert!(rule_allows(&nr, &a));
        a.path = Some("/metrics".into());
        assert!(!rule_allows(&nr, &a));
    }
}
