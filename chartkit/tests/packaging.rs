//! The Cozystack packaging (`packaging/cozystack/`) against the chart and its docs: the
//! PackageSource points at this chart and at values files it has, its Package selects one of
//! its variants, and `docs/install.md`'s table of every object the package makes ("On
//! Cozystack") is exactly what the cozystack-operator derives from the PackageSource plus what
//! Helm renders with the PackageSource's values files, release and namespace, and with the
//! `_cluster` values the platform's `cozystack-values` Secret gives every HelmRelease.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use cozyplane_chartkit::{Manifest, Render, chart_dir};
use serde_json::{Value, json};

/// `(kind, name, namespace)`; the namespace is empty for cluster-scoped objects.
type Row = (String, String, String);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn yaml(rel: &str) -> Value {
    let p = repo().join(rel);
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_norway::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn s(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

/// What `_cluster` holds on a default Cozystack (the keys the chart reads).
fn cozystack_cluster_values() -> Value {
    json!({"cluster-domain": "cozy.local"})
}

/// The rows of the table under the heading `## On Cozystack` whose header is
/// `| kind | name | namespace | made by |`; `with_agent` keeps the rows marked *agent*.
fn documented(with_agent: bool) -> BTreeSet<Row> {
    let doc = std::fs::read_to_string(repo().join("docs/install.md")).unwrap();
    let section = doc
        .split("\n## On Cozystack")
        .nth(1)
        .expect("docs/install.md has a section \"On Cozystack\"");
    let section = section.split("\n## ").next().unwrap();
    let mut lines = section
        .lines()
        .skip_while(|l| !l.starts_with("| kind | name | namespace | made by |"));
    assert!(lines.next().is_some(), "the object table's header");
    lines.next(); // |---|
    let rows: BTreeSet<Row> = lines
        .take_while(|l| l.starts_with('|'))
        .filter(|l| with_agent || !l.contains("*agent*"))
        .map(|l| {
            let cells: Vec<String> = l
                .trim_matches('|')
                .split('|')
                .map(|c| c.trim().trim_matches('`').to_string())
                .collect();
            (cells[0].clone(), cells[1].clone(), cells[2].clone())
        })
        .collect();
    assert!(rows.len() > 10, "the table has its rows: {rows:?}");
    rows
}

/// What the cozystack-operator makes of a PackageSource whatever the variant: one
/// ArtifactGenerator in cozy-system named as the source, with an output artifact for every
/// component of every variant, `<source>-<variant>-<component>` with dots made dashes.
fn source_objects(ps: &Value) -> BTreeSet<Row> {
    let source = s(&ps["metadata"]["name"]);
    let mut out = BTreeSet::from([(
        "ArtifactGenerator".to_string(),
        source.clone(),
        "cozy-system".to_string(),
    )]);
    for v in ps["spec"]["variants"].as_array().unwrap() {
        for c in v["components"].as_array().unwrap() {
            let artifact = format!("{source}-{}-{}", s(&v["name"]), s(&c["name"])).replace('.', "-");
            out.insert((
                "ExternalArtifact".to_string(),
                artifact,
                "cozy-system".to_string(),
            ));
        }
    }
    out
}

/// What the operator makes of the Package's variant's component: its namespace and its
/// HelmRelease (named `releaseName`, else the component's name).
fn package_objects(component: &Value) -> BTreeSet<Row> {
    let install = &component["install"];
    let namespace = s(&install["namespace"]);
    let release = install["releaseName"]
        .as_str()
        .map_or_else(|| s(&component["name"]), str::to_string);
    BTreeSet::from([
        ("Namespace".to_string(), namespace.clone(), String::new()),
        ("HelmRelease".to_string(), release, namespace),
    ])
}

fn rows(manifest: &Manifest) -> BTreeSet<Row> {
    manifest
        .objects
        .iter()
        .map(|o| {
            (
                s(&o["kind"]),
                s(&o["metadata"]["name"]),
                s(&o["metadata"]["namespace"]),
            )
        })
        .collect()
}

/// The chart rendered as the HelmRelease of `component` renders it.
fn render(component: &Value, chart: &Path) -> Manifest {
    let install = &component["install"];
    let release = install["releaseName"]
        .as_str()
        .map_or_else(|| s(&component["name"]), str::to_string);
    let mut r = Render::new(&s(&install["namespace"]))
        .release(&release)
        .set_json("_cluster", &cozystack_cluster_values());
    for f in component["valuesFiles"].as_array().into_iter().flatten() {
        r = r.values_file(&chart.join(s(f)));
    }
    r.ok()
}

#[test]
fn the_package_source_points_at_this_chart_and_its_values_files() {
    let ps = yaml("packaging/cozystack/packagesource.yaml");
    let git = yaml("packaging/cozystack/source.yaml");
    let pkg = yaml("packaging/cozystack/package.yaml");
    assert_eq!(ps["apiVersion"], "cozystack.io/v1alpha1");
    assert_eq!(ps["kind"], "PackageSource");
    assert_eq!(pkg["kind"], "Package");
    assert_eq!(
        pkg["metadata"]["name"], ps["metadata"]["name"],
        "a Package is named as its source"
    );
    let source = &ps["spec"]["sourceRef"];
    assert_eq!(source["kind"], git["kind"]);
    assert_eq!(source["name"], git["metadata"]["name"]);
    assert_eq!(source["namespace"], git["metadata"]["namespace"]);
    assert_eq!(
        git["metadata"]["namespace"], "cozy-system",
        "where the operator's sources live"
    );

    let variants = ps["spec"]["variants"].as_array().expect("variants");
    let names: Vec<String> = variants.iter().map(|v| s(&v["name"])).collect();
    assert!(
        names.contains(&s(&pkg["spec"]["variant"])),
        "the Package's variant is one of {names:?}"
    );
    for v in variants {
        for c in v["components"].as_array().expect("components") {
            let chart = repo().join(s(&source["path"])).join(s(&c["path"]));
            assert_eq!(
                chart.canonicalize().unwrap(),
                chart_dir().canonicalize().unwrap(),
                "variant {}: the component is this chart",
                v["name"]
            );
            assert!(
                !s(&c["install"]["namespace"]).is_empty(),
                "the operator refuses an empty namespace"
            );
            let files = c["valuesFiles"].as_array().expect("valuesFiles");
            assert_eq!(
                files[0], "values.yaml",
                "the chart's own values come first (the operator overwrites with the first)"
            );
            for f in files {
                assert!(
                    chart.join(s(f)).is_file(),
                    "variant {}: {f} is in the chart",
                    v["name"]
                );
            }
        }
    }
}

#[test]
fn the_install_docs_list_every_object_of_each_variant() {
    let ps = yaml("packaging/cozystack/packagesource.yaml");
    for v in ps["spec"]["variants"].as_array().unwrap() {
        let variant = s(&v["name"]);
        let mut made = source_objects(&ps);
        for c in v["components"].as_array().unwrap() {
            let chart = repo()
                .join(s(&ps["spec"]["sourceRef"]["path"]))
                .join(s(&c["path"]));
            let manifest = render(c, &chart);
            made.extend(package_objects(c));
            made.extend(rows(&manifest));
            // With `--ensure-apiservice` the server registers the APIService itself.
            let server = manifest.container("Deployment", "cozyplane-apiserver", "apiserver");
            if Manifest::strings(server, "args")
                .iter()
                .any(|a| a.starts_with("--ensure-apiservice"))
            {
                made.insert((
                    "APIService".to_string(),
                    "v1alpha1.sdn.cozystack.io".to_string(),
                    String::new(),
                ));
            }
        }
        // The docs' table is of the `default` variant; `apiserver-only` leaves out the agent.
        let documented = match variant.as_str() {
            "default" => documented(true),
            "apiserver-only" => documented(false),
            other => panic!("variant {other} is not in docs/install.md"),
        };
        let missing: Vec<_> = made.difference(&documented).collect();
        let extra: Vec<_> = documented.difference(&made).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "variant {variant}: made but not in docs/install.md: {missing:?}; in the docs but not made: {extra:?}"
        );
    }
}

#[test]
fn cozystack_values_give_its_cluster_domain_and_tenant_roles() {
    let ps = yaml("packaging/cozystack/packagesource.yaml");
    let c = &ps["spec"]["variants"][0]["components"][0];
    let chart = repo()
        .join(s(&ps["spec"]["sourceRef"]["path"]))
        .join(s(&c["path"]));
    let m = render(c, &chart);
    let args = Manifest::strings(m.container("DaemonSet", "cozyplane-agent", "agent"), "args");
    assert!(
        args.iter().any(|a| a == "--cluster-domain=cozy.local"),
        "the resolver serves the platform's domain from _cluster: {args:?}"
    );
    assert!(
        args.iter().any(|a| a == "--dns-resolver"),
        "DNS steering is on: {args:?}"
    );
    let labels = |name: &str| m.object("ClusterRole", name)["metadata"]["labels"].clone();
    assert_eq!(
        labels("cozyplane-tenant-edit")["rbac.cozystack.io/aggregate-to-tenant-admin"],
        "true"
    );
    assert_eq!(
        labels("cozyplane-tenant-view")["rbac.cozystack.io/aggregate-to-tenant-view"],
        "true"
    );
    assert_eq!(
        labels("cozyplane-tenant-view")["rbac.authorization.k8s.io/aggregate-to-view"],
        "true",
        "Kubernetes' aggregation stays"
    );

    // Without Cozystack's values file, the chart's own default; an explicit value wins over
    // `_cluster`.
    let plain = Render::new("cozy-cozyplane").ok();
    let args = Manifest::strings(plain.container("DaemonSet", "cozyplane-agent", "agent"), "args");
    assert!(
        args.iter().any(|a| a == "--cluster-domain=cluster.local"),
        "{args:?}"
    );
    let explicit = Render::new("x")
        .set("clusterDomain", "corp.example")
        .set_json("_cluster", &cozystack_cluster_values())
        .ok();
    let args = Manifest::strings(
        explicit.container("DaemonSet", "cozyplane-agent", "agent"),
        "args",
    );
    assert!(
        args.iter().any(|a| a == "--cluster-domain=corp.example"),
        "{args:?}"
    );
}
