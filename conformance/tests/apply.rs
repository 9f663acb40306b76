//! Server-side apply, managedFields and strategic merge patch, driven by the real kubectl (v1.32)
//! the way GitOps tools use them, and over raw HTTP where kubectl cannot show the contract
//! (PATCH-01..09, OBJ-11, OAPI-07, KC-04, KC-05).

use std::process::Output;

use cozyplane_conformance::{Backend, TestServer};
use serde_json::{Value, json};

const VPCS: &str = "/apis/sdn.cozystack.io/v1alpha1/namespaces/default/vpcs";
/// Cluster-scoped, with a status no controller writes.
const HFS: &str = "/apis/sdn.cozystack.io/v1alpha1/hostfirewalls";
const JSON: (&str, &str) = ("content-type", "application/json");
const APPLY: (&str, &str) = ("content-type", "application/apply-patch+yaml");
const MERGE: (&str, &str) = ("content-type", "application/merge-patch+json");
const SMP: (&str, &str) = ("content-type", "application/strategic-merge-patch+json");

fn vpc_yaml(name: &str, cidr: &str, mtu: i32) -> String {
    format!(
        "apiVersion: sdn.cozystack.io/v1alpha1
kind: VPC
metadata:
  name: {name}
  labels:
    team: a
spec:
  cidrs: [\"{cidr}\"]
  mtu: {mtu}
"
    )
}

fn parse(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("{e}: {s}"))
}

/// Runs kubectl with optional stdin and extra environment, without asserting success.
async fn kubectl(s: &TestServer, args: &[&str], stdin: Option<&str>, env: &[(&str, &str)]) -> Output {
    use tokio::io::AsyncWriteExt;
    let mut cmd = cozyplane_conformance::kubectl_command(&s.kubeconfig);
    cmd.args(args)
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("kubectl runs");
    let mut input = child.stdin.take().expect("stdin is piped");
    if let Some(text) = stdin {
        input.write_all(text.as_bytes()).await.expect("write stdin");
    }
    drop(input);
    child.wait_with_output().await.expect("kubectl ends")
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "kubectl failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

async fn get(s: &TestServer, name: &str) -> Value {
    let (c, _, b) = s.raw("GET", &format!("{VPCS}/{name}"), &[], None).await;
    assert_eq!(c, 200, "{b}");
    parse(&b)
}

/// Waits until the VPC controller has written the status of the current generation, so the
/// object stays put while a test checks resourceVersions.
async fn settled(s: &TestServer, name: &str) -> Value {
    for _ in 0..200 {
        let v = get(s, name).await;
        if v["status"]["phase"] == "Ready"
            && v["status"]["conditions"][0]["observedGeneration"] == v["metadata"]["generation"]
        {
            return v;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("VPC {name} never became Ready");
}

fn rv(v: &Value) -> String {
    v["metadata"]["resourceVersion"].as_str().unwrap().to_string()
}

/// The managedFields entry of `manager` with `operation`.
fn entry<'a>(v: &'a Value, manager: &str, operation: &str) -> Option<&'a Value> {
    v["metadata"]["managedFields"]
        .as_array()?
        .iter()
        .find(|e| e["manager"] == manager && e["operation"] == operation)
}

#[tokio::test]
async fn kc_05_patch_05_07_server_side_apply_with_kubectl() {
    let s = TestServer::start(Backend::Embedded).await;
    let first = vpc_yaml("ssa", "10.0.0.0/24", 1400);
    // Create through apply.
    let out = ok(&kubectl(&s, &["apply", "--server-side", "-f", "-"], Some(&first), &[]).await);
    assert!(
        out.contains("vpc.sdn.cozystack.io/ssa serverside-applied"),
        "{out}"
    );
    let live = get(&s, "ssa").await;
    let e = entry(&live, "kubectl", "Apply").expect("kubectl owns its fields");
    assert_eq!(e["apiVersion"], "sdn.cozystack.io/v1alpha1");
    assert_eq!(e["fieldsType"], "FieldsV1");
    assert!(e["time"].is_string());
    assert_eq!(e["fieldsV1"]["f:spec"]["f:cidrs"], json!({}));
    assert_eq!(e["fieldsV1"]["f:spec"]["f:mtu"], json!({}));
    assert_eq!(e["fieldsV1"]["f:metadata"]["f:labels"]["f:team"], json!({}));
    // Re-applying the same configuration is a no-op: same resourceVersion (OBJ-11).
    let before = rv(&settled(&s, "ssa").await);
    ok(&kubectl(&s, &["apply", "--server-side", "-f", "-"], Some(&first), &[]).await);
    assert_eq!(rv(&get(&s, "ssa").await), before);
    // Another manager changing an owned field conflicts, naming the field and the owner.
    let other = vpc_yaml("ssa", "10.0.0.0/24", 1500);
    let out = kubectl(
        &s,
        &["apply", "--server-side", "--field-manager=ops", "-f", "-"],
        Some(&other),
        &[],
    )
    .await;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("conflict"), "{err}");
    assert!(err.contains(".spec.mtu"), "{err}");
    assert!(err.contains("kubectl"), "{err}");
    assert_eq!(get(&s, "ssa").await["spec"]["mtu"], 1400);
    // Same values are shared ownership, not conflicts; --force-conflicts takes the changed one.
    ok(&kubectl(
        &s,
        &[
            "apply",
            "--server-side",
            "--field-manager=ops",
            "--force-conflicts",
            "-f",
            "-",
        ],
        Some(&other),
        &[],
    )
    .await);
    let live = get(&s, "ssa").await;
    assert_eq!(live["spec"]["mtu"], 1500);
    let ops = entry(&live, "ops", "Apply").unwrap();
    assert_eq!(ops["fieldsV1"]["f:spec"]["f:mtu"], json!({}));
    assert_eq!(ops["fieldsV1"]["f:spec"]["f:cidrs"], json!({}));
    let kubectl_entry = entry(&live, "kubectl", "Apply").unwrap();
    assert!(
        kubectl_entry["fieldsV1"]["f:spec"].get("f:mtu").is_none(),
        "{live}"
    );
    assert_eq!(kubectl_entry["fieldsV1"]["f:spec"]["f:cidrs"], json!({}));
    // The field kubectl lost is no longer its to remove: dropping mtu from kubectl's
    // configuration leaves it; dropping the label (owned by both) leaves it too.
    let without_mtu = "apiVersion: sdn.cozystack.io/v1alpha1
kind: VPC
metadata:
  name: ssa
spec:
  cidrs: [\"10.0.0.0/24\"]
";
    ok(&kubectl(&s, &["apply", "--server-side", "-f", "-"], Some(without_mtu), &[]).await);
    let live = get(&s, "ssa").await;
    assert_eq!(live["spec"]["mtu"], 1500);
    assert_eq!(live["metadata"]["labels"]["team"], "a");
}

#[tokio::test]
async fn kc_04_oapi_07_client_side_apply_uses_strategic_merge_patch() {
    let s = TestServer::start(Backend::Embedded).await;
    let v1 = vpc_yaml("csa", "10.0.0.0/24", 1400);
    let out = ok(&kubectl(&s, &["apply", "-f", "-"], Some(&v1), &[]).await);
    assert!(out.contains("created"), "{out}");
    let live = get(&s, "csa").await;
    assert!(
        entry(&live, "kubectl-client-side-apply", "Update").is_some(),
        "{live}"
    );
    // Change a field and drop the label: kubectl computes a three-way strategic merge patch.
    let v2 = "apiVersion: sdn.cozystack.io/v1alpha1
kind: VPC
metadata:
  name: csa
spec:
  cidrs: [\"10.0.0.0/24\"]
  mtu: 1500
";
    let out = kubectl(&s, &["apply", "-v=8", "-f", "-"], Some(v2), &[]).await;
    let stdout = ok(&out);
    assert!(stdout.contains("configured"), "{stdout}");
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(
        log.contains("application/strategic-merge-patch+json"),
        "kubectl did not send a strategic merge patch:\n{log}"
    );
    let live = get(&s, "csa").await;
    assert_eq!(live["spec"]["mtu"], 1500);
    assert!(live["metadata"].get("labels").is_none(), "{live}");
    // Unchanged re-apply.
    let out = ok(&kubectl(&s, &["apply", "-f", "-"], Some(v2), &[]).await);
    assert!(out.contains("unchanged"), "{out}");
}

#[tokio::test]
async fn patch_09_kubectl_edit_round_trips_and_records_its_manager() {
    let s = TestServer::start(Backend::Embedded).await;
    ok(&kubectl(
        &s,
        &["create", "-f", "-"],
        Some(&vpc_yaml("ed", "10.0.0.0/24", 1400)),
        &[],
    )
    .await);
    let live = get(&s, "ed").await;
    assert!(entry(&live, "kubectl-create", "Update").is_some(), "{live}");
    let out = ok(&kubectl(
        &s,
        &["edit", "vpc", "ed"],
        None,
        &[("KUBE_EDITOR", "sed -i s/mtu:\\ 1400/mtu:\\ 1450/")],
    )
    .await);
    assert!(out.contains("edited"), "{out}");
    let live = get(&s, "ed").await;
    assert_eq!(live["spec"]["mtu"], 1450);
    let e = entry(&live, "kubectl-edit", "Update").expect("kubectl-edit entry");
    assert_eq!(e["fieldsV1"]["f:spec"]["f:mtu"], json!({}));
    // kubectl-create no longer owns mtu.
    let c = entry(&live, "kubectl-create", "Update").unwrap();
    assert!(c["fieldsV1"]["f:spec"].get("f:mtu").is_none(), "{live}");
    // An edit that changes nothing is not a write.
    let before = rv(&settled(&s, "ed").await);
    let out = kubectl(&s, &["edit", "vpc", "ed"], None, &[("KUBE_EDITOR", "true")]).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(rv(&get(&s, "ed").await), before);
}

#[tokio::test]
async fn patch_01_unknown_patch_types_are_415_and_charset_is_ignored() {
    let s = TestServer::start(Backend::Embedded).await;
    let (c, _, b) = s
        .raw(
            "PATCH",
            &format!("{VPCS}/x?fieldManager=ops"),
            &[("content-type", "application/apply-patch+yaml; charset=utf-8")],
            Some(&vpc_yaml("x", "10.0.0.0/24", 0)),
        )
        .await;
    assert_eq!(c, 201, "{b}");
    for ct in ["application/yaml", "text/plain", "application/apply-patch+json"] {
        let (c, _, b) = s
            .raw("PATCH", &format!("{VPCS}/x"), &[("content-type", ct)], Some("{}"))
            .await;
        assert_eq!(c, 415, "{ct}: {b}");
        let st = parse(&b);
        assert_eq!(st["reason"], "UnsupportedMediaType");
        for t in [
            "application/json-patch+json",
            "application/merge-patch+json",
            "application/strategic-merge-patch+json",
            "application/apply-patch+yaml",
        ] {
            assert!(st["message"].as_str().unwrap().contains(t), "{b}");
        }
    }
    let (c, _, b) = s
        .raw(
            "PATCH",
            &format!("{VPCS}/x"),
            &[("content-type", "application/merge-patch+json; charset=utf-8")],
            Some(r#"{"spec":{"mtu":1300}}"#),
        )
        .await;
    assert_eq!(c, 200, "{b}");
}

#[tokio::test]
async fn patch_04_strategic_merge_patch_directives() {
    let s = TestServer::start(Backend::Embedded).await;
    let body = json!({
        "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "VPC",
        "metadata": { "name": "smp", "finalizers": ["a.example/x", "b.example/y"],
            "ownerReferences": [
                { "apiVersion": "v1", "kind": "ConfigMap", "name": "o1", "uid": "u1" },
                { "apiVersion": "v1", "kind": "ConfigMap", "name": "o2", "uid": "u2" }
            ] },
        "spec": { "cidrs": ["10.0.0.0/24", "fd00::/64"], "mtu": 1400 },
    });
    let (c, _, b) = s.raw("POST", VPCS, &[JSON], Some(&body.to_string())).await;
    assert_eq!(c, 201, "{b}");
    let uid = parse(&b)["metadata"]["uid"].as_str().unwrap().to_string();
    let path = format!("{VPCS}/smp");
    // The garbage collector's form: delete one owner reference by its merge key (uid).
    let gc = json!({ "metadata": { "ownerReferences": [{ "$patch": "delete", "uid": "u1" }], "uid": uid } });
    let (c, _, b) = s.raw("PATCH", &path, &[SMP], Some(&gc.to_string())).await;
    assert_eq!(c, 200, "{b}");
    let v = parse(&b);
    assert_eq!(v["metadata"]["ownerReferences"].as_array().unwrap().len(), 1);
    assert_eq!(v["metadata"]["ownerReferences"][0]["uid"], "u2");
    // Owner references merge by uid; $setElementOrder orders them.
    let add = json!({ "metadata": {
        "$setElementOrder/ownerReferences": [{ "uid": "u3" }, { "uid": "u2" }],
        "ownerReferences": [{ "apiVersion": "v1", "kind": "Secret", "name": "o3", "uid": "u3" }] } });
    let (c, _, b) = s.raw("PATCH", &path, &[SMP], Some(&add.to_string())).await;
    assert_eq!(c, 200, "{b}");
    let v = parse(&b);
    let uids: Vec<&str> = v["metadata"]["ownerReferences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["uid"].as_str().unwrap())
        .collect();
    assert_eq!(uids, ["u3", "u2"]);
    // Finalizers merge as a set; $deleteFromPrimitiveList removes one.
    let fin = json!({ "metadata": { "finalizers": ["c.example/z"],
        "$deleteFromPrimitiveList/finalizers": ["a.example/x"] } });
    let (c, _, b) = s.raw("PATCH", &path, &[SMP], Some(&fin.to_string())).await;
    assert_eq!(c, 200, "{b}");
    let mut f: Vec<String> = serde_json::from_value(parse(&b)["metadata"]["finalizers"].clone()).unwrap();
    f.sort();
    assert_eq!(f, ["b.example/y", "c.example/z"]);
    // Atomic lists are replaced; null deletes; $patch: replace replaces a whole object.
    let (c, _, b) = s
        .raw(
            "PATCH",
            &path,
            &[SMP],
            Some(r#"{"spec":{"cidrs":["10.2.0.0/24"],"mtu":null}}"#),
        )
        .await;
    assert_eq!(c, 200, "{b}");
    let v = parse(&b);
    assert_eq!(v["spec"], json!({ "cidrs": ["10.2.0.0/24"] }));
    let (c, _, b) = s
        .raw(
            "PATCH",
            &path,
            &[SMP],
            Some(r#"{"spec":{"$patch":"replace","cidrs":["10.3.0.0/24"],"mtu":1300}}"#),
        )
        .await;
    assert_eq!(c, 200, "{b}");
    assert_eq!(
        parse(&b)["spec"],
        json!({ "cidrs": ["10.3.0.0/24"], "mtu": 1300 })
    );
    // Status conditions merge by type through /status.
    let (c, _, b) = s
        .raw(
            "POST",
            HFS,
            &[JSON],
            Some(r#"{"apiVersion":"sdn.cozystack.io/v1alpha1","kind":"HostFirewall","metadata":{"name":"smp"},"spec":{}}"#),
        )
        .await;
    assert_eq!(c, 201, "{b}");
    let hf = format!("{HFS}/smp");
    let st = json!({ "status": { "conditions": [
        { "type": "A", "status": "True", "reason": "R", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z" },
        { "type": "B", "status": "False", "reason": "R", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z" } ] } });
    let (c, _, b) = s
        .raw("PATCH", &format!("{hf}/status"), &[SMP], Some(&st.to_string()))
        .await;
    assert_eq!(c, 200, "{b}");
    let one = json!({ "status": { "conditions": [
        { "type": "B", "status": "True", "reason": "R", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z" } ] } });
    let (c, _, b) = s
        .raw("PATCH", &format!("{hf}/status"), &[SMP], Some(&one.to_string()))
        .await;
    assert_eq!(c, 200, "{b}");
    let conds = parse(&b)["status"]["conditions"].clone();
    assert_eq!(conds.as_array().unwrap().len(), 2, "{conds}");
    assert_eq!(conds[1]["status"], "True");
    // Bad directives are 400, a resourceVersion in the patch is a precondition.
    let (c, _, b) = s
        .raw("PATCH", &path, &[SMP], Some(r#"{"spec":{"$patch":"bogus"}}"#))
        .await;
    assert_eq!(c, 400, "{b}");
    let (c, _, b) = s
        .raw(
            "PATCH",
            &path,
            &[SMP],
            Some(r#"{"metadata":{"resourceVersion":"1"},"spec":{"mtu":1200}}"#),
        )
        .await;
    assert_eq!(c, 409, "{b}");
    // The SMP writer is an Update manager.
    let (c, _, b) = s
        .raw(
            "PATCH",
            &format!("{path}?fieldManager=smp"),
            &[SMP],
            Some(r#"{"spec":{"mtu":1350}}"#),
        )
        .await;
    assert_eq!(c, 200, "{b}");
    let v = parse(&b);
    assert_eq!(
        entry(&v, "smp", "Update").unwrap()["fieldsV1"]["f:spec"]["f:mtu"],
        json!({})
    );
}

#[tokio::test]
async fn patch_05_apply_create_update_and_removal() {
    let s = TestServer::start(Backend::Embedded).await;
    let path = format!("{VPCS}/v9?fieldManager=ops");
    // YAML body creates: 201.
    let (c, _, b) = s
        .raw(
            "PATCH",
            &path,
            &[APPLY],
            Some(&vpc_yaml("v9", "10.0.0.0/24", 1400)),
        )
        .await;
    assert_eq!(c, 201, "{b}");
    let v = parse(&b);
    let e = entry(&v, "ops", "Apply").unwrap();
    assert_eq!(e["apiVersion"], "sdn.cozystack.io/v1alpha1");
    assert_eq!(e["fieldsType"], "FieldsV1");
    assert!(e["time"].as_str().unwrap().ends_with('Z'));
    assert!(e.get("subresource").is_none());
    assert_eq!(v["metadata"]["managedFields"].as_array().unwrap().len(), 1);
    // JSON is YAML too; an existing object answers 200. Omitted fields owned by nobody else go.
    let json_cfg = json!({ "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "VPC",
        "metadata": { "name": "v9" }, "spec": { "cidrs": ["10.0.0.0/24"] } });
    let (c, _, b) = s.raw("PATCH", &path, &[APPLY], Some(&json_cfg.to_string())).await;
    assert_eq!(c, 200, "{b}");
    let v = parse(&b);
    assert!(v["spec"].get("mtu").is_none(), "{v}");
    assert!(v["metadata"].get("labels").is_none(), "{v}");
    assert_eq!(v["metadata"]["generation"], 2);
    // A field another manager also set is kept when the applier stops applying it.
    let (c, _, b) = s
        .raw(
            "PATCH",
            &format!("{VPCS}/v9?fieldManager=tuner"),
            &[MERGE],
            Some(r#"{"spec":{"mtu":1300}}"#),
        )
        .await;
    assert_eq!(c, 200, "{b}");
    let with_mtu = json!({ "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "VPC",
        "metadata": { "name": "v9" }, "spec": { "cidrs": ["10.0.0.0/24"], "mtu": 1300 } });
    let (c, _, b) = s.raw("PATCH", &path, &[APPLY], Some(&with_mtu.to_string())).await;
    assert_eq!(c, 200, "{b}");
    let (c, _, b) = s.raw("PATCH", &path, &[APPLY], Some(&json_cfg.to_string())).await;
    assert_eq!(c, 200, "{b}");
    assert_eq!(parse(&b)["spec"]["mtu"], 1300);
    // Unparseable YAML and non-objects are 400.
    for bad in ["spec: [unclosed", "- a\n- b\n", "42"] {
        let (c, _, b) = s.raw("PATCH", &path, &[APPLY], Some(bad)).await;
        assert_eq!(c, 400, "{bad}: {b}");
        assert_eq!(parse(&b)["kind"], "Status");
    }
}

#[tokio::test]
async fn patch_05_apply_identity_must_match_the_endpoint() {
    let s = TestServer::start(Backend::Embedded).await;
    let path = format!("{VPCS}/v1?fieldManager=ops");
    let good = vpc_yaml("v1", "10.0.0.0/24", 0);
    for (bad, msg) in [
        (
            good.replace("sdn.cozystack.io/v1alpha1", "sdn.cozystack.io/v1"),
            "Incorrect version",
        ),
        (good.replace("kind: VPC", "kind: Port"), "Incorrect kind"),
        (
            good.replace("name: v1", "name: other"),
            "does not match the name on the URL",
        ),
        (
            good.replace("apiVersion: sdn.cozystack.io/v1alpha1\n", ""),
            "Incorrect version",
        ),
        (
            good.replace("  name: v1", "  name: v1\n  namespace: elsewhere"),
            "namespace",
        ),
    ] {
        let (c, _, b) = s.raw("PATCH", &path, &[APPLY], Some(&bad)).await;
        assert_eq!(c, 400, "{bad}: {b}");
        assert!(parse(&b)["message"].as_str().unwrap().contains(msg), "{b}");
    }
    let (c, _, _) = s.raw("GET", &format!("{VPCS}/v1"), &[], None).await;
    assert_eq!(c, 404);
}

#[tokio::test]
async fn patch_06_field_manager_and_force_options() {
    let s = TestServer::start(Backend::Embedded).await;
    let cfg = vpc_yaml("v1", "10.0.0.0/24", 0);
    let (c, _, b) = s.raw("PATCH", &format!("{VPCS}/v1"), &[APPLY], Some(&cfg)).await;
    assert_eq!(c, 422, "{b}");
    let st = parse(&b);
    assert_eq!(st["details"]["kind"], "PatchOptions");
    assert_eq!(st["details"]["group"], "meta.k8s.io");
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .contains("fieldManager: Required value: is required for apply patch"),
        "{b}"
    );
    let long = "m".repeat(129);
    let (c, _, b) = s
        .raw(
            "PATCH",
            &format!("{VPCS}/v1?fieldManager={long}"),
            &[APPLY],
            Some(&cfg),
        )
        .await;
    assert_eq!(c, 422, "{b}");
    let (c, _, b) = s
        .raw(
            "POST",
            &format!("{VPCS}?fieldManager={long}"),
            &[JSON],
            Some("{}"),
        )
        .await;
    assert_eq!(c, 422, "{b}");
    assert_eq!(parse(&b)["details"]["kind"], "CreateOptions");
    let (c, _, b) = s
        .raw(
            "PATCH",
            &format!("{VPCS}/v1?fieldManager=ops"),
            &[APPLY],
            Some(&cfg),
        )
        .await;
    assert_eq!(c, 201, "{b}");
    let (c, _, b) = s
        .raw("PATCH", &format!("{VPCS}/v1?force=true"), &[MERGE], Some("{}"))
        .await;
    assert_eq!(c, 422, "{b}");
    assert!(
        parse(&b)["message"]
            .as_str()
            .unwrap()
            .contains("force: Forbidden: may not be specified for non-apply patch"),
        "{b}"
    );
}

#[tokio::test]
async fn patch_07_apply_conflicts_and_force() {
    let s = TestServer::start(Backend::Embedded).await;
    let (c, _, b) = s
        .raw(
            "POST",
            &format!("{VPCS}?fieldManager=kubectl-client-side-apply"),
            &[JSON],
            Some(
                &json!({ "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "VPC",
                "metadata": { "name": "c" }, "spec": { "cidrs": ["10.0.0.0/24"], "mtu": 1400 } })
                .to_string(),
            ),
        )
        .await;
    assert_eq!(c, 201, "{b}");
    let cfg = vpc_yaml("c", "10.9.0.0/24", 1500);
    let path = format!("{VPCS}/c?fieldManager=ops");
    let (c, _, b) = s.raw("PATCH", &path, &[APPLY], Some(&cfg)).await;
    assert_eq!(c, 409, "{b}");
    let st = parse(&b);
    assert_eq!(st["reason"], "Conflict");
    let causes = st["details"]["causes"].as_array().unwrap();
    assert_eq!(causes.len(), 2, "{b}");
    let fields: Vec<&str> = causes.iter().map(|c| c["field"].as_str().unwrap()).collect();
    assert_eq!(fields, [".spec.cidrs", ".spec.mtu"]);
    for cause in causes {
        assert_eq!(cause["reason"], "FieldManagerConflict");
        assert_eq!(
            cause["message"],
            "conflict with \"kubectl-client-side-apply\" using sdn.cozystack.io/v1alpha1"
        );
    }
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .starts_with("Apply failed with 2 conflicts:"),
        "{b}"
    );
    // One conflict: the exact message of the contract.
    let one = vpc_yaml("c", "10.0.0.0/24", 1500);
    let (c, _, b) = s.raw("PATCH", &path, &[APPLY], Some(&one)).await;
    assert_eq!(c, 409, "{b}");
    assert_eq!(
        parse(&b)["message"],
        "Apply failed with 1 conflict: conflict with \"kubectl-client-side-apply\" using sdn.cozystack.io/v1alpha1: .spec.mtu"
    );
    assert_eq!(get(&s, "c").await["spec"]["mtu"], 1400);
    // force=true: 200, the value changes and ownership moves.
    let (c, _, b) = s
        .raw("PATCH", &format!("{path}&force=true"), &[APPLY], Some(&cfg))
        .await;
    assert_eq!(c, 200, "{b}");
    let v = parse(&b);
    assert_eq!(v["spec"], json!({ "cidrs": ["10.9.0.0/24"], "mtu": 1500 }));
    let ops = entry(&v, "ops", "Apply").unwrap();
    assert_eq!(ops["fieldsV1"]["f:spec"]["f:mtu"], json!({}));
    // The previous owner lost both fields, so its entry is gone.
    assert!(entry(&v, "kubectl-client-side-apply", "Update").is_none(), "{v}");
}

#[tokio::test]
async fn patch_08_managed_fields_in_apply_configuration_is_400() {
    let s = TestServer::start(Backend::Embedded).await;
    let cfg = vpc_yaml("m", "10.0.0.0/24", 0).replace(
        "  labels:",
        "  managedFields:\n  - manager: x\n    operation: Apply\n  labels:",
    );
    let (c, _, b) = s
        .raw(
            "PATCH",
            &format!("{VPCS}/m?fieldManager=ops"),
            &[APPLY],
            Some(&cfg),
        )
        .await;
    assert_eq!(c, 400, "{b}");
    assert!(
        parse(&b)["message"]
            .as_str()
            .unwrap()
            .contains("metadata.managedFields must be nil"),
        "{b}"
    );
}

#[tokio::test]
async fn patch_09_update_managers_for_post_put_patch() {
    let s = TestServer::start(Backend::Embedded).await;
    let body = json!({ "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "VPC",
        "metadata": { "name": "u", "labels": { "a": "1" } }, "spec": { "cidrs": ["10.0.0.0/24"] } });
    let (c, _, b) = s
        .raw(
            "POST",
            &format!("{VPCS}?fieldManager=creator"),
            &[JSON],
            Some(&body.to_string()),
        )
        .await;
    assert_eq!(c, 201, "{b}");
    let v = parse(&b);
    let e = entry(&v, "creator", "Update").unwrap();
    assert_eq!(e["fieldsV1"]["f:spec"]["f:cidrs"], json!({}));
    assert_eq!(e["fieldsV1"]["f:metadata"]["f:labels"]["f:a"], json!({}));
    // PUT without fieldManager: the manager is the User-Agent up to its first '/'.
    let mut put = settled(&s, "u").await;
    put["spec"]["mtu"] = json!(1400);
    let (c, _, b) = s
        .raw(
            "PUT",
            &format!("{VPCS}/u"),
            &[JSON, ("user-agent", "my-operator/v1.2 (linux)")],
            Some(&put.to_string()),
        )
        .await;
    assert_eq!(c, 200, "{b}");
    let v = parse(&b);
    let e = entry(&v, "my-operator", "Update").expect("manager from the User-Agent");
    assert_eq!(e["fieldsV1"], json!({ "f:spec": { "f:mtu": {} } }));
    let v = settled(&s, "u").await;
    // A no-op PUT of the object as read (managedFields included) changes nothing (OBJ-11).
    let (c, _, b) = s
        .raw(
            "PUT",
            &format!("{VPCS}/u?fieldManager=other"),
            &[JSON],
            Some(&v.to_string()),
        )
        .await;
    assert_eq!(c, 200, "{b}");
    assert_eq!(rv(&parse(&b)), rv(&v));
    assert!(entry(&parse(&b), "other", "Update").is_none());
    // managedFields: [{}] resets the tracking.
    let (c, _, b) = s
        .raw(
            "PATCH",
            &format!("{VPCS}/u"),
            &[MERGE],
            Some(r#"{"metadata":{"managedFields":[{}]}}"#),
        )
        .await;
    assert_eq!(c, 200, "{b}");
    assert!(parse(&b)["metadata"].get("managedFields").is_none(), "{b}");
    // A status write records a subresource manager.
    let (c, _, b) = s
        .raw(
            "POST",
            HFS,
            &[JSON],
            Some(r#"{"apiVersion":"sdn.cozystack.io/v1alpha1","kind":"HostFirewall","metadata":{"name":"u"},"spec":{}}"#),
        )
        .await;
    assert_eq!(c, 201, "{b}");
    let cond = r#"{"status":{"conditions":[{"type":"Ready","status":"True","reason":"R","message":"","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}"#;
    let (c, _, b) = s
        .raw(
            "PATCH",
            &format!("{HFS}/u/status?fieldManager=ctl"),
            &[MERGE],
            Some(cond),
        )
        .await;
    assert_eq!(c, 200, "{b}");
    let v = parse(&b);
    let e = entry(&v, "ctl", "Update").unwrap();
    assert_eq!(e["subresource"], "status");
    assert_eq!(
        e["fieldsV1"]["f:status"]["f:conditions"]["k:{\"type\":\"Ready\"}"]["f:status"],
        json!({})
    );
}

#[tokio::test]
async fn patch_05_apply_dry_run_stores_nothing() {
    let s = TestServer::start(Backend::Embedded).await;
    let cfg = vpc_yaml("d", "10.0.0.0/24", 1400);
    let (c, _, b) = s
        .raw(
            "PATCH",
            &format!("{VPCS}/d?fieldManager=ops&dryRun=All"),
            &[APPLY],
            Some(&cfg),
        )
        .await;
    assert_eq!(c, 201, "{b}");
    assert!(entry(&parse(&b), "ops", "Apply").is_some());
    let (c, _, _) = s.raw("GET", &format!("{VPCS}/d"), &[], None).await;
    assert_eq!(c, 404);
    let (c, _, b) = s
        .raw(
            "PATCH",
            &format!("{VPCS}/d?fieldManager=ops"),
            &[APPLY],
            Some(&cfg),
        )
        .await;
    assert_eq!(c, 201, "{b}");
    let before = settled(&s, "d").await;
    let (c, _, b) = s
        .raw(
            "PATCH",
            &format!("{VPCS}/d?fieldManager=ops&dryRun=All"),
            &[APPLY],
            Some(&vpc_yaml("d", "10.0.0.0/24", 1500)),
        )
        .await;
    assert_eq!(c, 200, "{b}");
    assert_eq!(parse(&b)["spec"]["mtu"], 1500);
    assert_eq!(get(&s, "d").await, before);
}

fn hf_yaml(name: &str, body: &str) -> String {
    format!(
        "apiVersion: sdn.cozystack.io/v1alpha1
kind: HostFirewall
metadata:
  name: {name}
{body}"
    )
}

#[tokio::test]
async fn patch_05_09_status_apply_records_a_subresource_manager() {
    let s = TestServer::start(Backend::Embedded).await;
    let spec = hf_yaml("st", "spec:\n  policyTypes: [Ingress]\n");
    let (c, _, b) = s
        .raw(
            "PATCH",
            &format!("{HFS}/st/status?fieldManager=ctl"),
            &[APPLY],
            Some(&spec),
        )
        .await;
    assert_eq!(c, 404, "status apply does not create: {b}");
    let (c, _, b) = s
        .raw(
            "PATCH",
            &format!("{HFS}/st?fieldManager=ops"),
            &[APPLY],
            Some(&spec),
        )
        .await;
    assert_eq!(c, 201, "{b}");
    let status_cfg = hf_yaml(
        "st",
        "spec:
  policyTypes: [Egress]
status:
  conditions:
  - type: Ready
    status: \"False\"
    reason: Test
    message: \"\"
    lastTransitionTime: \"2026-01-01T00:00:00Z\"
",
    );
    let (c, _, b) = s
        .raw(
            "PATCH",
            &format!("{HFS}/st/status?fieldManager=ctl"),
            &[APPLY],
            Some(&status_cfg),
        )
        .await;
    assert_eq!(c, 200, "{b}");
    let v = parse(&b);
    assert_eq!(v["status"]["conditions"][0]["reason"], "Test");
    // The spec in a status apply is ignored and not owned.
    assert_eq!(v["spec"]["policyTypes"], json!(["Ingress"]));
    let e = entry(&v, "ctl", "Apply").unwrap();
    assert_eq!(e["subresource"], "status");
    assert!(e["fieldsV1"].get("f:spec").is_none(), "{v}");
    assert_eq!(
        e["fieldsV1"]["f:status"]["f:conditions"]["k:{\"type\":\"Ready\"}"]["f:status"],
        json!({})
    );
    // The main-resource applier neither owns nor changes status.
    let ops = entry(&v, "ops", "Apply").unwrap();
    assert!(ops["fieldsV1"].get("f:status").is_none(), "{v}");
    let (c, _, b) = s
        .raw(
            "PATCH",
            &format!("{HFS}/st?fieldManager=ops"),
            &[APPLY],
            Some(&spec),
        )
        .await;
    assert_eq!(c, 200, "{b}");
    assert_eq!(parse(&b)["status"]["conditions"][0]["reason"], "Test");
    // Another status manager conflicts with ctl; force moves the condition's fields.
    let other = status_cfg.replace("reason: Test", "reason: Other");
    let (c, _, b) = s
        .raw(
            "PATCH",
            &format!("{HFS}/st/status?fieldManager=probe"),
            &[APPLY],
            Some(&other),
        )
        .await;
    assert_eq!(c, 409, "{b}");
    assert!(b.contains("with subresource \\\"status\\\""), "{b}");
    let (c, _, b) = s
        .raw(
            "PATCH",
            &format!("{HFS}/st/status?fieldManager=probe&force=true"),
            &[APPLY],
            Some(&other),
        )
        .await;
    assert_eq!(c, 200, "{b}");
    assert_eq!(parse(&b)["status"]["conditions"][0]["reason"], "Other");
}

#[tokio::test]
async fn patch_05_set_and_keyed_lists_merge_between_appliers() {
    let s = TestServer::start(Backend::Embedded).await;
    let a = hf_yaml("sets", "spec:\n  policyTypes: [Ingress]\n");
    let b_cfg = hf_yaml("sets", "spec:\n  policyTypes: [Egress]\n");
    let (c, _, b) = s
        .raw("PATCH", &format!("{HFS}/sets?fieldManager=a"), &[APPLY], Some(&a))
        .await;
    assert_eq!(c, 201, "{b}");
    // policyTypes is a set: each applier owns its values, no conflict.
    let (c, _, b) = s
        .raw(
            "PATCH",
            &format!("{HFS}/sets?fieldManager=b"),
            &[APPLY],
            Some(&b_cfg),
        )
        .await;
    assert_eq!(c, 200, "{b}");
    let v = parse(&b);
    assert_eq!(v["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
    assert_eq!(
        entry(&v, "b", "Apply").unwrap()["fieldsV1"]["f:spec"]["f:policyTypes"],
        json!({ "v:\"Egress\"": {} })
    );
    // a stops applying its value: only its value goes.
    let (c, _, b) = s
        .raw(
            "PATCH",
            &format!("{HFS}/sets?fieldManager=a"),
            &[APPLY],
            Some(&hf_yaml("sets", "spec: {}\n")),
        )
        .await;
    assert_eq!(c, 200, "{b}");
    assert_eq!(parse(&b)["spec"]["policyTypes"], json!(["Egress"]));
    // Atomic lists (rules) are owned whole: a different list from another manager conflicts.
    let rules = |cidr: &str| {
        hf_yaml(
            "sets",
            &format!("spec:\n  ingress:\n  - from:\n    - cidr: {cidr}\n"),
        )
    };
    let (c, _, b) = s
        .raw(
            "PATCH",
            &format!("{HFS}/sets?fieldManager=a"),
            &[APPLY],
            Some(&rules("10.0.0.0/8")),
        )
        .await;
    assert_eq!(c, 200, "{b}");
    let (c, _, b) = s
        .raw(
            "PATCH",
            &format!("{HFS}/sets?fieldManager=b"),
            &[APPLY],
            Some(&rules("10.1.0.0/16")),
        )
        .await;
    assert_eq!(c, 409, "{b}");
    assert_eq!(parse(&b)["details"]["causes"][0]["field"], ".spec.ingress");
}

#[tokio::test]
async fn fv_patch_05_field_validation_applies_to_apply() {
    let s = TestServer::start(Backend::Embedded).await;
    let cfg = vpc_yaml("fv", "10.0.0.0/24", 0).replace("  mtu: 0", "  bogus: 1");
    let (c, _, b) = s
        .raw(
            "PATCH",
            &format!("{VPCS}/fv?fieldManager=ops&fieldValidation=Strict"),
            &[APPLY],
            Some(&cfg),
        )
        .await;
    assert_eq!(c, 400, "{b}");
    assert!(
        parse(&b)["message"].as_str().unwrap().contains("spec.bogus"),
        "{b}"
    );
    let (c, h, b) = s
        .raw(
            "PATCH",
            &format!("{VPCS}/fv?fieldManager=ops"),
            &[APPLY],
            Some(&cfg),
        )
        .await;
    assert_eq!(c, 201, "{b}");
    assert!(h["warning"].to_str().unwrap().contains("spec.bogus"));
    let v = parse(&b);
    assert!(v["spec"].get("bogus").is_none());
    // The dropped field is not owned either.
    let e = entry(&v, "ops", "Apply").unwrap();
    assert!(e["fieldsV1"]["f:spec"].get("f:bogus").is_none(), "{v}");
}

#[tokio::test]
async fn oapi_07_patch_operations_advertise_every_patch_type() {
    let s = TestServer::start(Backend::Embedded).await;
    let types = [
        "application/json-patch+json",
        "application/merge-patch+json",
        "application/strategic-merge-patch+json",
        "application/apply-patch+yaml",
    ];
    let (c, _, b) = s.raw("GET", "/openapi/v2", &[], None).await;
    assert_eq!(c, 200);
    let v2 = parse(&b);
    let item = "/apis/sdn.cozystack.io/v1alpha1/namespaces/{namespace}/vpcs/{name}";
    for p in [item.to_string(), format!("{item}/status")] {
        assert_eq!(v2["paths"][&p]["patch"]["consumes"], json!(types), "{p}");
    }
    let (c, _, b) = s
        .raw("GET", "/openapi/v3/apis/sdn.cozystack.io/v1alpha1", &[], None)
        .await;
    assert_eq!(c, 200);
    let v3 = parse(&b);
    for p in [item.to_string(), format!("{item}/status")] {
        let content = v3["paths"][&p]["patch"]["requestBody"]["content"]
            .as_object()
            .unwrap();
        let mut got: Vec<&str> = content.keys().map(String::as_str).collect();
        got.sort_unstable();
        let mut want = types.to_vec();
        want.sort_unstable();
        assert_eq!(got, want, "{p}");
    }
    // The schema carries the list semantics SSA and SMP use (OAPI-08).
    let schemas = &v3["components"]["schemas"];
    let spec = &schemas["io.cozystack.sdn.v1alpha1.VPCSpec"];
    assert_eq!(
        spec["properties"]["cidrs"]["x-kubernetes-list-type"], "atomic",
        "{spec}"
    );
}
