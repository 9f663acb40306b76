//! The objects of `pod_trace.rs`: two tenant namespaces, their pods (addresses patched into
//! their status), two Nodes, the NetworkPolicies, the network-policy-api CRDs, one
//! AdminNetworkPolicy and the BaselineAdminNetworkPolicy.

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

/// Pod `ns/name` labelled `app`, with the container port `pg` (5432), on `node`, with
/// address `ip` (no kubelet: the status is patched).
pub(crate) async fn create_pod(admin: &kube::Client, ns: &str, name: &str, app: &str, ip: &str, node: &str) {
    let api: Api<Pod> = Api::namespaced(admin.clone(), ns);
    let p: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": app}},
        "spec": {"nodeName": node, "automountServiceAccountToken": false, "containers": [{
            "name": "c", "image": "registry.k8s.io/pause:3.10",
            "ports": [{"name": "pg", "containerPort": 5432}]}]}}))
    .unwrap();
    api.create(&PostParams::default(), &p).await.unwrap();
    let status = json!({"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]}});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

/// Node `name` labelled `role: worker` with the InternalIP `ip`.
pub(crate) async fn create_node(admin: &kube::Client, name: &str, ip: &str) {
    let api: Api<Node> = Api::all(admin.clone());
    let n: Node = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"role": "worker"}}}))
    .unwrap();
    api.create(&PostParams::default(), &n).await.unwrap();
    let status = json!({"status": {"addresses": [{"type": "InternalIP", "address": ip}]}});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

/// The network-policy-api CRD of `plural`: the chart's vendored copy when it is there, else
/// the v0.1.8 release's from the project's mirror (`NETWORK_POLICY_API_REPO`).
pub(crate) fn crd(plural: &str) -> String {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/cozyplane/crds");
    let want = format!("name: {plural}.policy.networking.k8s.io");
    for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let text = std::fs::read_to_string(e.path()).unwrap_or_default();
        if text.contains(&want) {
            return text;
        }
    }
    let repo = std::env::var("NETWORK_POLICY_API_REPO")
        .unwrap_or_else(|_| "/work/.mirror/kubernetes-sigs+network-policy-api/repo".into());
    let spec = format!("v0.1.8:config/crd/standard/policy.networking.k8s.io_{plural}.yaml");
    let out = std::process::Command::new("git")
        .args(["-C", &repo, "show", &spec])
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "no CRD of {plural}: neither in {} nor at {repo} {spec}",
        dir.display()
    );
    String::from_utf8(out.stdout).expect("YAML")
}

/// A tenant namespace (`tenant: yes`).
pub(crate) fn namespace(name: &str) -> String {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {"tenant": "yes"}}})
        .to_string()
}

/// `t1/db-in` (db admits web on its named port `pg`) and `t2/api-in` (api admits t1 on 80).
pub(crate) fn network_policies() -> String {
    json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
         "metadata": {"name": "db-in", "namespace": "t1"},
         "spec": {"podSelector": {"matchLabels": {"app": "db"}}, "policyTypes": ["Ingress"],
                  "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "web"}}}],
                               "ports": [{"protocol": "TCP", "port": "pg"}]}]}},
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
         "metadata": {"name": "api-in", "namespace": "t2"},
         "spec": {"podSelector": {"matchLabels": {"app": "api"}}, "policyTypes": ["Ingress"],
                  "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "t1"}}}],
                               "ports": [{"protocol": "TCP", "port": 80}]}]}},
    ]})
    .to_string()
}

/// ANP `tenants` (egress: Deny TCP 25 anywhere, Pass TCP 5432 to t1's db; ingress: Allow TCP
/// 9000 from every namespace) and the BANP (ingress: Deny from t2; egress: Deny TCP 6000 to
/// the pods' range), both over the tenant namespaces.
pub(crate) fn admin_policies() -> String {
    let tenants = json!({"namespaceSelector": {"matchLabels": {"tenant": "yes"}}});
    json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "policy.networking.k8s.io/v1alpha1", "kind": "AdminNetworkPolicy",
         "metadata": {"name": "tenants"},
         "spec": {"priority": 10, "subject": {"namespaces": tenants["namespaceSelector"]},
            "egress": [
                {"name": "deny-smtp", "action": "Deny", "to": [{"networks": ["0.0.0.0/0"]}],
                 "ports": [{"portNumber": {"protocol": "TCP", "port": 25}}]},
                {"name": "pass-db", "action": "Pass",
                 "to": [{"pods": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "t1"}},
                                  "podSelector": {"matchLabels": {"app": "db"}}}}],
                 "ports": [{"portNumber": {"protocol": "TCP", "port": 5432}}]}],
            "ingress": [
                {"name": "allow-9000", "action": "Allow", "from": [{"namespaces": {}}],
                 "ports": [{"portNumber": {"protocol": "TCP", "port": 9000}}]}]}},
        {"apiVersion": "policy.networking.k8s.io/v1alpha1", "kind": "BaselineAdminNetworkPolicy",
         "metadata": {"name": "default"},
         "spec": {"subject": {"namespaces": tenants["namespaceSelector"]},
            "ingress": [{"name": "deny-from-t2", "action": "Deny",
                         "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "t2"}}}]}],
            "egress": [{"name": "deny-6000", "action": "Deny", "to": [{"networks": ["10.244.0.0/16"]}],
                        "ports": [{"portNumber": {"protocol": "TCP", "port": 6000}}]}]}},
    ]})
    .to_string()
}
