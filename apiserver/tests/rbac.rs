//! The chart's RBAC is generated from tables: the tenant roles from the table of kinds, the
//! server's own role from its table of kube access. These fail when
//! `charts/cozyplane/templates/tenant-rbac.yaml` or `apiserver-rbac.yaml` is stale, or when the
//! server's code reaches the kube-apiserver without going through the table. Regenerate with
//! `COZYPLANE_UPDATE_RBAC=1 cargo test -p cozyplane-apiserver --test rbac`.

use std::path::{Path, PathBuf};

fn template_is_up_to_date(file: &str, want: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../charts/cozyplane/templates")
        .join(file);
    if std::env::var_os("COZYPLANE_UPDATE_RBAC").is_some() {
        std::fs::write(&path, want).expect("write the template");
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "{} is stale; regenerate it with COZYPLANE_UPDATE_RBAC=1 cargo test -p cozyplane-apiserver --test rbac",
        path.display()
    );
}

#[test]
fn tenant_rbac_template_is_up_to_date() {
    template_is_up_to_date("tenant-rbac.yaml", &cozyplane_apiserver::rbac::tenant_rbac_yaml());
}

#[test]
fn server_rbac_template_is_up_to_date() {
    template_is_up_to_date(
        "apiserver-rbac.yaml",
        &cozyplane_apiserver::rbac::server_rbac_yaml(),
    );
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("read the source dir") {
        let p = e.expect("dir entry").path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Every kube `Api` of the server is built from a row of the RBAC table (`Access::api_all`,
/// `Access::api_namespaced`), which the generated role grants; building one directly would
/// read something the role may not grant.
#[test]
fn kube_apis_are_built_only_from_the_rbac_table() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let table = root.join("rbac/server.rs");
    let mut files = Vec::new();
    sources(&root, &mut files);
    let direct = [
        "Api::all(",
        "Api::namespaced(",
        "Api::default_namespaced(",
        "Api::all_with(",
        "Api::namespaced_with(",
    ];
    let mut found = Vec::new();
    for f in files.iter().filter(|f| **f != table) {
        let text = std::fs::read_to_string(f).expect("read a source file");
        for (i, line) in text.lines().enumerate() {
            if direct.iter().any(|d| line.contains(d)) {
                found.push(format!("{}:{}: {}", f.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "build kube Apis from a row of apiserver/src/rbac/server.rs instead:\n{}",
        found.join("\n")
    );
}

/// The chart's APIService in `tls.mode=secret` takes its CA from `apiService.caBundle`, never
/// from `lookup` (which yields nothing under `helm template` and GitOps renderers, and fails
/// on a missing Secret), and refuses to render without it.
#[test]
fn apiservice_ca_comes_from_a_value() {
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/cozyplane");
    let t = std::fs::read_to_string(chart.join("templates/apiservice.yaml")).expect("apiservice.yaml");
    assert!(!t.contains("lookup \""), "apiservice.yaml calls lookup:\n{t}");
    let open = "{{- if eq .Values.tls.mode \"secret\" }}";
    let start = t.find(open).expect("a secret branch") + open.len();
    let branch = &t[start..start + t[start..].find("\n  {{- end }}\n{{- end }}").expect("its end")];
    let fail = branch
        .find("{{- if not .Values.apiService.caBundle }}\n  {{- fail \"")
        .expect("an empty value fails the render");
    let set = branch
        .find("caBundle: {{ .Values.apiService.caBundle | quote }}")
        .expect("caBundle comes from the value");
    assert!(fail < set, "{branch}");
    let values = std::fs::read_to_string(chart.join("values.yaml")).expect("values.yaml");
    let api_service = &values[values.find("\napiService:\n").expect("apiService values")..];
    let api_service = &api_service[..api_service[1..].find("\n\n").map_or(api_service.len(), |e| e + 1)];
    assert!(api_service.contains("\n  caBundle: \"\"\n"), "{api_service}");
}
