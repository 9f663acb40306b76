//! The chart's tenant roles are generated from the table of kinds; this fails when
//! `charts/cozyplane/templates/tenant-rbac.yaml` is stale. Regenerate with
//! `COZYPLANE_UPDATE_RBAC=1 cargo test -p cozyplane-apiserver --test rbac`.

#[test]
fn tenant_rbac_template_is_up_to_date() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../charts/cozyplane/templates/tenant-rbac.yaml");
    let want = cozyplane_apiserver::rbac::tenant_rbac_yaml();
    if std::env::var_os("COZYPLANE_UPDATE_RBAC").is_some() {
        std::fs::write(&path, &want).expect("write the template");
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "{} is stale; regenerate it with COZYPLANE_UPDATE_RBAC=1 cargo test -p cozyplane-apiserver --test rbac",
        path.display()
    );
}
