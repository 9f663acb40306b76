//! The chart renders and runs: every documented mode (`cozyplane_chartkit::MODES`: the TLS
//! modes with each `apiService.managedBy` they allow, embedded store or etcd, the agent's
//! tunnel options, DNS on/off and the cluster domain, masquerade, the agent off, the tenant
//! roles off, image digests, Cozystack's values file with its `_cluster`) is rendered by the real Helm and every rendered object passes
//! the real kube-apiserver's validation and admission: `kubectl apply --dry-run=server`, both
//! client-side and server-side apply (Helm 4 installs with server-side apply), into a release
//! namespace created for real. Each mode renders exactly the objects it promises, with the
//! flags and references it promises. Besides: `helm lint --strict` of every mode, required
//! values and unknown choices (Geneve) fail rendering with a message, and no template calls
//! `lookup`.
//!
//! One kube-apiserver (the realkube tier, `KUBE_BIN_DIR`) for all modes, one after the other.
//! Without Helm every test fails: run `make deps`.

use std::collections::BTreeSet;

use cozyplane_chartkit::{self as chartkit, CA_BUNDLE, DIGEST, MODES, Manifest, Mode};
use cozyplane_conformance::realkube::{self, ControlPlane};
use serde_json::Value;

/// cert-manager's `Certificate` is not a kind kube-apiserver knows. This CRD is our own, not
/// cert-manager's: a minimal schema of the fields the chart renders (`secretName`,
/// `dnsNames`, `issuerRef`), so that the dry-run checks their types and that the chart
/// renders no other field (kubectl's strict field validation refuses unknown ones).
const CERTIFICATE_CRD: &str = r"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: certificates.cert-manager.io
spec:
  group: cert-manager.io
  scope: Namespaced
  names: {plural: certificates, singular: certificate, kind: Certificate, listKind: CertificateList}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              required: [secretName, issuerRef]
              properties:
                secretName: {type: string, minLength: 1}
                dnsNames: {type: array, items: {type: string}}
                issuerRef:
                  type: object
                  required: [name]
                  properties:
                    name: {type: string}
                    kind: {type: string}
                    group: {type: string}
";

/// The release namespace of a mode.
fn namespace(m: &Mode) -> String {
    format!("cozy-{}", m.name)
}

/// `kubectl … -o name` of an object: `<kind>[.<group>]/<name>`, lowercase kind.
fn kubectl_name(o: &Value) -> String {
    let api = o["apiVersion"].as_str().unwrap_or_default();
    let kind = o["kind"].as_str().unwrap_or_default().to_lowercase();
    let name = o["metadata"]["name"].as_str().unwrap_or_default();
    match api.split_once('/') {
        Some((group, _)) => format!("{kind}.{group}/{name}"),
        None => format!("{kind}/{name}"),
    }
}

fn args(r: &Manifest, kind: &str, object: &str, container: &str) -> Vec<String> {
    Manifest::strings(r.container(kind, object, container), "args")
}

fn agent_args(r: &Manifest) -> Vec<String> {
    args(r, "DaemonSet", "cozyplane-agent", "agent")
}

fn server_args(r: &Manifest) -> Vec<String> {
    args(r, "Deployment", "cozyplane-apiserver", "apiserver")
}

fn has(list: &[String], want: &str) -> bool {
    list.iter().any(|a| a == want)
}

fn has_prefix(list: &[String], prefix: &str) -> bool {
    list.iter().any(|a| a.starts_with(prefix))
}

/// The plugin types, in order, of the conflist the agent's init container installs (the
/// ConfigMap `cozyplane-cni`).
fn conflist_types(r: &Manifest) -> Vec<String> {
    let text = r.object("ConfigMap", "cozyplane-cni")["data"]["10-cozyplane.conflist"]
        .as_str()
        .expect("the ConfigMap holds the conflist")
        .to_string();
    let list: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("the conflist: {e}\n{text}"));
    list["plugins"]
        .as_array()
        .expect("plugins")
        .iter()
        .map(|p| p["type"].as_str().expect("a type").to_string())
        .collect()
}

/// The chart's appVersion, the default image tag.
fn app_version() -> String {
    let chart = std::fs::read_to_string(chartkit::chart_dir().join("Chart.yaml")).expect("Chart.yaml");
    chart
        .lines()
        .find_map(|l| l.strip_prefix("appVersion:"))
        .map(|v| v.trim().trim_matches('"').to_string())
        .expect("an appVersion")
}

fn images(r: &Manifest) -> Vec<String> {
    let mut out = Vec::new();
    for o in &r.objects {
        let spec = &o["spec"]["template"]["spec"];
        for k in ["containers", "initContainers"] {
            for c in spec[k].as_array().into_iter().flatten() {
                out.push(c["image"].as_str().unwrap_or_default().to_string());
            }
        }
    }
    out
}

/// What a mode promises beyond its objects: the flags, references and names it changes.
fn check_content(m: &Mode, r: &Manifest) {
    let ns = namespace(m);
    for o in &r.objects {
        let want = if kubectl_name(o).starts_with("rolebinding.") {
            "kube-system"
        } else {
            &ns
        };
        let got = &o["metadata"]["namespace"];
        assert!(
            got.is_null() || got == want,
            "{}: {} in namespace {got}",
            m.name,
            kubectl_name(o)
        );
    }
    let agent = || agent_args(r);
    let server = || server_args(r);
    let ca_from = |s: &str| has(&server(), &format!("--apiservice-ca-bundle-from={s}"));
    let dns_names = || r.object("Certificate", "cozyplane-apiserver")["spec"]["dnsNames"].clone();
    match m.name {
        "defaults" => {
            let a = agent();
            for f in [
                "--in-cluster",
                "--tunnel=vxlan",
                "--tunnel-groups=on",
                "--masquerade=bpf",
                "--metrics-addr=0.0.0.0:9965",
                "--dns-resolver",
                "--dns-port=15353",
                "--cluster-domain=cluster.local",
            ] {
                assert!(has(&a, f), "defaults: agent lacks {f}: {a:?}");
            }
            let s = server();
            assert!(
                has(&s, &format!("--ensure-apiservice={ns}/cozyplane-apiserver")),
                "{s:?}"
            );
            assert!(has(&s, "--data-dir=/var/lib/cozyplane"), "{s:?}");
            assert!(!has_prefix(&s, "--tls-cert-file"), "self-signed: {s:?}");
            assert!(
                !has_prefix(&s, "--apiservice-ca-bundle-from"),
                "serving-cert by default: {s:?}"
            );
            let tag = format!(":{}", app_version());
            for i in images(r) {
                assert!(i.ends_with(&tag), "defaults: image {i} is not tagged {tag}");
            }
            let init = r.container("DaemonSet", "cozyplane-agent", "install-cni");
            assert_eq!(
                Manifest::strings(init, "command").last().map(String::as_str),
                Some("/usr/lib/cni"),
                "the init step installs the chained plugins from the image"
            );
            assert!(
                has(&agent(), "--kube-proxy-replacement=true"),
                "the agent is the Service proxy by default"
            );
            assert_eq!(
                conflist_types(r),
                ["cozyplane"],
                "the agent serves hostPorts: no portmap chained beside it"
            );
            assert!(
                !has_prefix(&agent(), "--nodeport-addresses"),
                "NodePorts on every node address by default"
            );
            assert!(
                !has_prefix(&agent(), "--host-devices"),
                "only the uplink hooked by default"
            );
        }
        "tls-cert-manager" => {
            assert!(ca_from(&format!("cert-manager:{ns}/cozyplane-apiserver-tls")));
            assert!(has(&server(), "--tls-cert-file=/etc/cozyplane/tls/tls.crt"));
            assert!(
                dns_names()
                    .as_array()
                    .expect("dnsNames")
                    .contains(&Value::from(format!(
                        "cozyplane-apiserver.{ns}.svc.cluster.local"
                    )))
            );
            let cert = r.object("Certificate", "cozyplane-apiserver");
            assert_eq!(cert["spec"]["issuerRef"]["name"], "cluster-ca");
            assert_eq!(cert["spec"]["secretName"], "cozyplane-apiserver-tls");
        }
        "tls-cert-manager-apiservice-chart" => {
            let api = r.object("APIService", "v1alpha1.sdn.cozystack.io");
            assert_eq!(
                api["metadata"]["annotations"]["cert-manager.io/inject-ca-from-secret"],
                format!("{ns}/cozyplane-apiserver-tls")
            );
            assert_eq!(api["spec"]["service"]["namespace"], ns.as_str());
            assert!(api["spec"]["caBundle"].is_null(), "the injector fills it");
            assert!(!has_prefix(&server(), "--ensure-apiservice"), "the chart owns it");
            let role = r.object("ClusterRole", "cozyplane-apiserver").to_string();
            assert!(!role.contains("apiservices"), "no APIService rights: {role}");
        }
        "tls-secret" => {
            assert!(ca_from("file:/etc/cozyplane/tls/ca.crt"));
            let d = r.object("Deployment", "cozyplane-apiserver").to_string();
            assert!(d.contains(r#""secretName":"cozyplane-serving""#), "{d}");
        }
        "tls-secret-apiservice-chart" => {
            let api = r.object("APIService", "v1alpha1.sdn.cozystack.io");
            assert_eq!(api["spec"]["caBundle"], CA_BUNDLE);
            assert!(!has_prefix(&server(), "--ensure-apiservice"));
        }
        "storage-etcd" => {
            let s = server();
            assert!(
                has(
                    &s,
                    "--etcd-servers=https://etcd-0.etcd:2379,https://etcd-1.etcd:2379"
                ),
                "{s:?}"
            );
            assert!(has(&s, "--etcd-cafile=/etc/cozyplane/etcd/ca.crt"), "{s:?}");
            assert!(!has_prefix(&s, "--data-dir"), "{s:?}");
            let d = r.object("Deployment", "cozyplane-apiserver");
            assert_eq!(d["spec"]["replicas"], 2);
            assert!(d["spec"]["strategy"].is_null(), "rolling, not Recreate: {d}");
        }
        "storage-embedded-ephemeral" => {
            let d = r.object("Deployment", "cozyplane-apiserver").to_string();
            assert!(d.contains(r#""emptyDir":{}"#), "{d}");
        }
        "tunnel-groups-off" => assert!(has(&agent(), "--tunnel-groups=off")),
        "dns-off" => {
            let a = agent();
            assert!(
                !has(&a, "--dns-resolver") && !has_prefix(&a, "--cluster-domain"),
                "{a:?}"
            );
        }
        "cluster-domain-cozy-local" => {
            assert!(has(&agent(), "--cluster-domain=cozy.local"));
            assert!(
                dns_names()
                    .as_array()
                    .expect("dnsNames")
                    .contains(&Value::from(format!("cozyplane-apiserver.{ns}.svc.cozy.local")))
            );
        }
        "masquerade-off" => assert!(has(&agent(), "--masquerade=off")),
        "kube-proxy-kept" => {
            assert!(has(&agent(), "--kube-proxy-replacement=false"));
            assert_eq!(
                conflist_types(r),
                ["cozyplane", "portmap"],
                "kube-proxy keeps the Services: portmap serves hostPorts"
            );
        }
        "agent-extras" => {
            let a = agent();
            assert!(has(&a, "--internal-cidrs=169.254.20.10/32,10.10.0.0/16"), "{a:?}");
            assert!(has(&a, "--nodeport-addresses=192.168.0.0/16,fd00::/64"), "{a:?}");
            assert!(has(&a, "--host-devices=eth1,vlan20"), "{a:?}");
            assert!(!has_prefix(&a, "--metrics-addr"), "{a:?}");
            assert!(has(&a, "--underlay-dev=bond0") && has(&a, "--fabric-block=10.244.3.0/24"));
        }
        "image-digests" => {
            let all = images(r);
            assert_eq!(all.len(), 3, "{all:?}");
            for i in all {
                assert!(i.ends_with(&format!("@{DIGEST}")), "{i}");
            }
        }
        // The tenant roles' Cozystack labels: chartkit/tests/packaging.rs.
        "cozystack" => assert!(has(&agent(), "--cluster-domain=cozy.local"), "from _cluster"),
        "agent-disabled" | "tenant-roles-off" => {}
        other => panic!("mode {other} has no content check here"),
    }
}

#[test]
fn every_mode_renders_what_it_promises_and_passes_server_side_dry_run() {
    // Rendered first: a chart or Helm problem fails before the control plane starts.
    let rendered: Vec<(Mode, Manifest)> = MODES.iter().map(|m| (*m, m.render(&namespace(m)).ok())).collect();
    for (m, r) in &rendered {
        assert_eq!(
            r.names(),
            m.objects(),
            "mode {}: rendered (left) vs promised (right)",
            m.name
        );
        check_content(m, r);
    }
    let bins = match realkube::bins() {
        Ok(b) => b,
        Err(why) => {
            realkube::not_run(&why);
            return;
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let cp = ControlPlane::start(&bins).await;
        cp.apply(CERTIFICATE_CRD).await;
        cp.ok(
            &cp.admin,
            &[
                "wait",
                "--for=condition=Established",
                "crd/certificates.cert-manager.io",
                "--timeout=60s",
            ],
        )
        .await;
        for (m, r) in &rendered {
            let ns = namespace(m);
            cp.ok(&cp.admin, &["create", "namespace", &ns]).await;
            let want: BTreeSet<String> = r.objects.iter().map(kubectl_name).collect();
            for how in [
                &["apply", "--dry-run=server", "-o", "name"][..],
                &[
                    "apply",
                    "--server-side",
                    "--field-manager=helm",
                    "--dry-run=server",
                    "-o",
                    "name",
                ][..],
            ] {
                let out = cp.kubectl_stdin(&cp.admin, how, &r.yaml).await;
                assert!(
                    out.status.success(),
                    "mode {}: kubectl {how:?} refused the rendered chart:\n{}",
                    m.name,
                    String::from_utf8_lossy(&out.stderr)
                );
                let got: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .map(str::to_string)
                    .collect();
                assert_eq!(
                    got, want,
                    "mode {}: kubectl {how:?} went over every object",
                    m.name
                );
            }
            // A dry run stores nothing.
            let left = cp
                .ok(
                    &cp.admin,
                    &["get", "all,configmaps,serviceaccounts", "-n", &ns, "-o", "name"],
                )
                .await;
            assert!(
                left.lines()
                    .all(|l| l == "serviceaccount/default" || l.starts_with("configmap/kube-root-ca")),
                "mode {}: the dry run left {left}",
                m.name
            );
        }
    });
}

#[test]
fn every_modes_server_args_parse_with_the_servers_command_line() {
    use clap::Parser as _;
    for m in MODES {
        let r = m.render(&namespace(m)).ok();
        let args = server_args(&r);
        let o = cozyplane_apiserver::options::Options::try_parse_from(
            std::iter::once("cozyplane-apiserver".to_string()).chain(args.clone()),
        )
        .unwrap_or_else(|e| panic!("mode {}: the server refuses {args:?}:\n{e}", m.name));
        let etcd = m.values.iter().any(|(k, _)| *k == "storage.etcdServers");
        assert_eq!(o.etcd_servers.len(), if etcd { 2 } else { 0 }, "{}", m.name);
        let chart_owns = m.values.contains(&("apiService.managedBy", "chart"));
        assert_eq!(o.ensure_apiservice.is_none(), chart_owns, "{}", m.name);
    }
}

#[test]
fn helm_lint_strict_passes_for_every_mode() {
    for m in MODES {
        let report = chartkit::lint(m.values).unwrap_or_else(|e| panic!("mode {}: {e}", m.name));
        assert!(report.contains("0 chart(s) failed"), "mode {}: {report}", m.name);
    }
}

#[test]
fn required_values_and_unknown_choices_fail_rendering_with_a_message() {
    let secret = [("tls.mode", "secret"), ("tls.secretName", "s")];
    let cases: &[(&[(&str, &str)], &str)] = &[
        (
            &[("apiService.managedBy", "chart")],
            "apiService.managedBy=chart needs tls.mode cert-manager or secret",
        ),
        (&[("tls.mode", "secret")], "tls.mode=secret needs tls.secretName"),
        (
            &[secret[0], secret[1], ("apiService.managedBy", "chart")],
            "apiService.managedBy=chart with tls.mode=secret needs apiService.caBundle",
        ),
        (
            &[("tls.mode", "cert-manager")],
            "tls.mode=cert-manager needs tls.certManager.issuerRef with a name",
        ),
        (
            &[("tls.mode", "acme")],
            r#"tls.mode "acme": one of self-signed, cert-manager, secret"#,
        ),
        (
            &[("apiService.managedBy", "helm")],
            r#"apiService.managedBy "helm": server or chart"#,
        ),
        (
            &[("agent.tunnel", "geneve")],
            r#"agent.tunnel "geneve": only vxlan is offered"#,
        ),
        (
            &[("agent.masquerade", "iptables")],
            r#"agent.masquerade "iptables": bpf or off"#,
        ),
        (&[("clusterDomain", "")], "clusterDomain is required"),
        (
            &[("image.agent.digest", "sha256:abc")],
            r#"image.agent.digest "sha256:abc" is not a digest"#,
        ),
        (
            &[("image.apiserver.digest", "latest")],
            r#"image.apiserver.digest "latest" is not a digest"#,
        ),
        (
            &[("apiserver.replicas", "2")],
            "apiserver.replicas > 1 needs storage.etcdServers",
        ),
        (
            &[
                ("apiserver.replicas", "2"),
                ("storage.etcdServers", "{https://e:2379}"),
            ],
            "apiserver.replicas > 1 needs storage.etcdServers",
        ),
    ];
    for (values, message) in cases {
        match chartkit::Render::new("cozy-system").values(values).run() {
            Err(chartkit::Error::Helm { stderr, .. }) => assert!(
                stderr.contains("execution error") && stderr.contains(message),
                "{values:?}: Helm's message lacks {message:?}:\n{stderr}"
            ),
            Err(e) => panic!("{values:?}: {e}"),
            Ok(m) => panic!("{values:?} rendered: {:?}", m.names()),
        }
        // Not `helm lint`: its lint mode logs `fail` and `required` at INFO and passes.
    }
    // The DNS domain also comes from the platform's values (Cozystack's cozystack-values).
    let r = chartkit::Render::new("cozy-system")
        .set("clusterDomain", "")
        .set("_cluster.cluster-domain", "cozy.local")
        .ok();
    assert!(has(&agent_args(&r), "--cluster-domain=cozy.local"));
}

/// The actions of a template (`{{ … }}`), string literals and comments removed.
fn actions(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start + 2..];
        let end = after.find("}}").unwrap_or(after.len());
        let action = after[..end].trim_matches('-').trim();
        if !(action.starts_with("/*") && action.ends_with("*/")) {
            let mut plain = String::new();
            let mut in_string = false;
            let mut escaped = false;
            for c in action.chars() {
                match (in_string, escaped, c) {
                    (true, false, '\\') => escaped = true,
                    (true, false, '"') => in_string = false,
                    (true, _, _) => escaped = false,
                    (false, _, '"') => in_string = true,
                    (false, _, c) => plain.push(c),
                }
            }
            out.push(plain);
        }
        rest = &after[(end + 2).min(after.len())..];
    }
    out
}

#[test]
fn no_template_calls_lookup() {
    // `lookup` yields nothing under `helm template`, dry runs and GitOps renderers, and reads
    // the live cluster otherwise: a chart that renders one way here and another there.
    let dir = chartkit::chart_dir().join("templates");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).expect("templates/") {
        let p = entry.expect("entry").path();
        let text = std::fs::read_to_string(&p).expect("template");
        for a in actions(&text) {
            seen += 1;
            let called = a
                .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.'))
                .any(|w| w == "lookup");
            assert!(!called, "{} calls lookup: {{{{{a}}}}}", p.display());
        }
    }
    assert!(seen > 50, "found only {seen} template actions");
    assert_eq!(
        actions(r#"{{- /* lookup */}} {{ x "lookup" }}"#),
        vec!["x ".to_string()]
    );
    assert_eq!(
        actions(r#"{{ lookup "v1" "Secret" }}"#),
        vec!["lookup  ".to_string()]
    );
}
