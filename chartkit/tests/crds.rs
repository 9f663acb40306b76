//! The network-policy-api CRDs the chart vendors (`charts/cozyplane/crds/`) and the agent's
//! rights on their kinds: each file is the upstream release's experimental-channel CRD
//! byte for byte below a header that names the release, the commit, the path and the body's
//! sha256; Helm renders both with `--include-crds` (and only then); the agent's ClusterRole
//! reads both kinds and every Node.

use std::io::Write as _;
use std::process::{Command, Stdio};

use cozyplane_chartkit::{Render, crd_files};
use serde_json::Value;

/// The release the files come from (`cozyplane_apis::admin_policy::UPSTREAM_RELEASE`; the
/// agent's tests check the two agree).
const RELEASE: &str = "v0.1.8";

fn sha256(bytes: &[u8]) -> String {
    let mut child = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("sha256sum runs");
    child.stdin.take().unwrap().write_all(bytes).unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

/// The header (leading `#` lines) and the rest.
fn split(text: &str) -> (String, &str) {
    let mut header = String::new();
    let mut rest = text;
    while rest.starts_with('#') {
        let end = rest.find('\n').map_or(rest.len(), |i| i + 1);
        header.push_str(&rest[..end]);
        rest = &rest[end..];
    }
    (header, rest)
}

#[test]
fn the_vendored_crds_are_the_upstream_experimental_channel_as_published() {
    let files = crd_files();
    let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "policy.networking.k8s.io_adminnetworkpolicies.yaml",
            "policy.networking.k8s.io_baselineadminnetworkpolicies.yaml"
        ]
    );
    for (name, text) in &files {
        let (header, body) = split(text);
        let path = format!("config/crd/experimental/{name}");
        assert!(
            header.contains(&format!("release {RELEASE} ")) && header.contains(&path),
            "{name}: the header names the release and the upstream path:\n{header}"
        );
        let want = header
            .lines()
            .find_map(|l| l.strip_prefix("# sha256 of everything below this header: "))
            .unwrap_or_else(|| panic!("{name}: the header records the body's sha256"));
        assert_eq!(sha256(body.as_bytes()), want, "{name}: the body is as vendored");
        let crd: Value = serde_norway::from_str(body).unwrap();
        assert_eq!(crd["kind"], "CustomResourceDefinition");
        assert_eq!(
            crd["metadata"]["annotations"]["policy.networking.k8s.io/channel"],
            "experimental"
        );
        assert_eq!(crd["spec"]["group"], "policy.networking.k8s.io");
        assert_eq!(crd["spec"]["scope"], "Cluster");
        let v = &crd["spec"]["versions"][0];
        assert_eq!(v["name"], "v1alpha1");
        assert_eq!(v["served"], true);
        // The experimental fields the agent reads.
        let schema = v["schema"]["openAPIV3Schema"].to_string();
        for field in ["\"nodes\"", "\"namedPort\"", "\"networks\"", "\"portRange\""] {
            assert!(schema.contains(field), "{name}: the schema has {field}");
        }
    }
}

#[test]
fn helm_renders_the_crds_only_when_asked_and_the_agent_reads_their_kinds() {
    let with = Render::new("cozy-system").include_crds().ok();
    let crds: Vec<String> = with
        .objects
        .iter()
        .filter(|o| o["kind"] == "CustomResourceDefinition")
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        crds,
        [
            "adminnetworkpolicies.policy.networking.k8s.io",
            "baselineadminnetworkpolicies.policy.networking.k8s.io"
        ]
    );
    let without = Render::new("cozy-system").ok();
    assert!(
        !without
            .objects
            .iter()
            .any(|o| o["kind"] == "CustomResourceDefinition"),
        "helm template leaves crds/ out by default (the mode lists stay as they are)"
    );

    let rules = without.object("ClusterRole", "cozyplane-agent")["rules"]
        .as_array()
        .unwrap()
        .clone();
    let grants = |group: &str, resource: &str, verb: &str| {
        rules.iter().any(|r| {
            let has = |k: &str, v: &str| r[k].as_array().is_some_and(|a| a.iter().any(|x| x == v));
            has("apiGroups", group) && has("resources", resource) && has("verbs", verb)
        })
    };
    for resource in ["adminnetworkpolicies", "baselineadminnetworkpolicies"] {
        for verb in ["get", "list", "watch"] {
            assert!(
                grants("policy.networking.k8s.io", resource, verb),
                "{resource} {verb}"
            );
        }
        assert!(
            !grants("policy.networking.k8s.io", resource, "update"),
            "read only"
        );
    }
    for verb in ["list", "watch"] {
        assert!(grants("", "nodes", verb), "nodes {verb}");
    }
}
