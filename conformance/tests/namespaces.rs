//! Namespaces of a standalone server (issue 15, defect 7): core `v1` `namespaces` served with
//! the same list/watch machinery as our kinds, discovery that kubectl follows, and the namespace
//! lifecycle (create refused in a missing or terminating namespace; delete empties the namespace,
//! then removes it).

use std::process::Output;
use std::time::Duration;

use cozyplane_conformance::{Backend, TestServer, kubectl_command};
use serde_json::{Value, json};

const JSON: (&str, &str) = ("content-type", "application/json");

fn parse(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("{e}: {s}"))
}

fn vpc_json(name: &str) -> String {
    json!({ "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "VPC", "metadata": { "name": name },
        "spec": { "cidrs": ["10.0.0.0/24"] } })
    .to_string()
}

/// kubectl with `stdin` (for `-f -`), whatever its outcome.
async fn kubectl_in(s: &TestServer, args: &[&str], stdin: &str) -> Output {
    use tokio::io::AsyncWriteExt;
    let mut child = kubectl_command(&s.kubeconfig)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    let mut input = child.stdin.take().expect("stdin is piped");
    input.write_all(stdin.as_bytes()).await.expect("write stdin");
    drop(input);
    child.wait_with_output().await.expect("kubectl ends")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Polls `GET path` until it answers 404 (30 s hang guard).
async fn wait_gone(s: &TestServer, path: &str) {
    for _ in 0..300 {
        let (c, _, _) = s.raw("GET", path, &[], None).await;
        if c == 404 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{path} still exists after 30 s");
}

#[tokio::test]
async fn kubectl_habits_with_namespaces() {
    let s = TestServer::start_bare(Backend::Embedded, &[]).await;
    let out = s.kubectl(&["create", "ns", "t1"]).await;
    assert_eq!(out.trim(), "namespace/t1 created");

    let out = s.kubectl(&["get", "ns"]).await;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["NAME", "STATUS", "AGE"],
        "{out}"
    );
    for ns in ["default", "kube-public", "kube-system", "t1"] {
        assert!(
            lines
                .iter()
                .any(|l| l.split_whitespace().take(2).eq([ns, "Active"])),
            "{ns} Active in:\n{out}"
        );
    }

    let yaml = s.kubectl(&["get", "ns", "t1", "-o", "yaml"]).await;
    for want in [
        "apiVersion: v1",
        "kind: Namespace",
        "name: t1",
        "phase: Active",
        "- kubernetes",
    ] {
        assert!(yaml.contains(want), "{want:?} in:\n{yaml}");
    }

    let o = s.kubectl_output(&["get", "vpc", "nope", "-n", "t1"]).await;
    assert!(!o.status.success());
    assert_eq!(
        stderr(&o).trim(),
        r#"Error from server (NotFound): vpcs.sdn.cozystack.io "nope" not found"#
    );

    let o = kubectl_in(&s, &["create", "-f", "-", "-n", "missing"], &vpc_json("v1")).await;
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains(r#"namespaces "missing" not found"#),
        "{}",
        stderr(&o)
    );

    let o = kubectl_in(&s, &["create", "-f", "-", "-n", "t1"], &vpc_json("v1")).await;
    assert!(o.status.success(), "{}", stderr(&o));
    s.kubectl(&["get", "vpc", "v1", "-n", "t1"]).await;

    // Deleting the namespace deletes what is in it; kubectl waits until the namespace is gone.
    let out = s.kubectl(&["delete", "ns", "t1", "--timeout=60s"]).await;
    assert_eq!(out.trim(), r#"namespace "t1" deleted"#);
    let o = s.kubectl_output(&["get", "ns", "t1"]).await;
    assert_eq!(
        stderr(&o).trim(),
        r#"Error from server (NotFound): namespaces "t1" not found"#
    );
    let (c, _, b) = s
        .raw(
            "GET",
            "/apis/sdn.cozystack.io/v1alpha1/namespaces/t1/vpcs",
            &[],
            None,
        )
        .await;
    assert_eq!(c, 200);
    assert_eq!(parse(&b)["items"], json!([]), "the VPCs of t1 outlived it: {b}");
    // Created again, the namespace starts empty.
    s.kubectl(&["create", "ns", "t1"]).await;
    let out = s.kubectl_output(&["get", "vpc", "-n", "t1"]).await;
    assert!(
        stderr(&out).contains("No resources found in t1 namespace"),
        "{}",
        stderr(&out)
    );
}

async fn lifecycle(backend: Backend) {
    let s = TestServer::start_bare(backend, &[]).await;
    let ns = |b: &str| format!("/api/v1/namespaces{b}");
    let vpcs = |n: &str| format!("/apis/sdn.cozystack.io/v1alpha1/namespaces/{n}/vpcs");

    // The initial namespaces stay, as in Kubernetes.
    let (c, _, b) = s.raw("DELETE", &ns("/default"), &[], None).await;
    assert_eq!(c, 403, "{b}");
    assert_eq!(
        parse(&b)["message"],
        r#"namespaces "default" is forbidden: this namespace may not be deleted"#
    );

    // Missing namespace: 404 NotFound, as Kubernetes' NamespaceLifecycle answers.
    let (c, _, b) = s.raw("POST", &vpcs("x"), &[JSON], Some(&vpc_json("a"))).await;
    assert_eq!(c, 404, "{b}");
    let st = parse(&b);
    assert_eq!(st["reason"], "NotFound");
    assert_eq!(st["message"], r#"namespaces "x" not found"#);

    // Names are DNS labels.
    let (c, _, b) = s
        .raw(
            "POST",
            &ns(""),
            &[JSON],
            Some(r#"{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"a.b"}}"#),
        )
        .await;
    assert_eq!(c, 422, "{b}");
    assert!(
        parse(&b)["message"]
            .as_str()
            .unwrap()
            .starts_with(r#"Namespace "a.b" is invalid"#),
        "{b}"
    );

    let (c, _, b) = s
        .raw(
            "POST",
            &ns(""),
            &[JSON],
            Some(r#"{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"t1","labels":{"team":"a"}},"status":{"phase":"Terminating"}}"#),
        )
        .await;
    assert_eq!(c, 201, "{b}");
    let created = parse(&b);
    assert_eq!(created["status"]["phase"], "Active");
    assert_eq!(created["spec"]["finalizers"], json!(["kubernetes"]));

    // Lists and watches are those of every kind: selectors, resourceVersion.
    let (c, _, b) = s.raw("GET", &ns("?labelSelector=team%3Da"), &[], None).await;
    assert_eq!(c, 200, "{b}");
    let list = parse(&b);
    assert_eq!(list["kind"], "NamespaceList");
    assert_eq!(list["apiVersion"], "v1");
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["t1"]);
    let (c, _, b) = s
        .raw("GET", &ns("?fieldSelector=metadata.name%3Ddefault"), &[], None)
        .await;
    assert_eq!(c, 200);
    assert_eq!(parse(&b)["items"].as_array().unwrap().len(), 1);

    // A VPC holding a finalizer keeps the namespace terminating.
    let held = json!({ "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "VPC",
        "metadata": { "name": "held", "finalizers": ["example.com/hold"] }, "spec": { "cidrs": ["10.0.0.0/24"] } });
    let (c, _, b) = s.raw("POST", &vpcs("t1"), &[JSON], Some(&held.to_string())).await;
    assert_eq!(c, 201, "{b}");
    let (c, _, b) = s.raw("POST", &vpcs("t1"), &[JSON], Some(&vpc_json("free"))).await;
    assert_eq!(c, 201, "{b}");

    let rv = created["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let (c, _, b) = s.raw("DELETE", &ns("/t1"), &[], None).await;
    assert_eq!(c, 200, "{b}");
    let marked = parse(&b);
    assert_eq!(marked["status"]["phase"], "Terminating");
    assert!(marked["metadata"]["deletionTimestamp"].is_string(), "{b}");

    // A watch from before the delete sees the namespace turn Terminating.
    let (c, _, b) = s
        .raw(
            "GET",
            &ns(&format!(
                "?watch=1&resourceVersion={rv}&fieldSelector=metadata.name%3Dt1&timeoutSeconds=1"
            )),
            &[],
            None,
        )
        .await;
    assert_eq!(c, 200);
    assert!(
        b.lines()
            .map(parse)
            .any(|e| e["type"] == "MODIFIED" && e["object"]["status"]["phase"] == "Terminating"),
        "{b}"
    );

    // Terminating: 403 Forbidden with Kubernetes' message.
    let (c, _, b) = s.raw("POST", &vpcs("t1"), &[JSON], Some(&vpc_json("late"))).await;
    assert_eq!(c, 403, "{b}");
    let st = parse(&b);
    assert_eq!(st["reason"], "Forbidden");
    assert_eq!(
        st["message"],
        r#"vpcs.sdn.cozystack.io "late" is forbidden: unable to create new content in namespace t1 because it is being terminated"#
    );

    // The controller deletes what it can; the held VPC is marked, and the namespace waits.
    wait_gone(&s, &format!("{}/free", vpcs("t1"))).await;
    let (c, _, b) = s.raw("GET", &ns("/t1"), &[], None).await;
    assert_eq!(c, 200, "{b}");
    let (c, _, b) = s.raw("GET", &format!("{}/held", vpcs("t1")), &[], None).await;
    assert_eq!(c, 200, "{b}");
    assert!(parse(&b)["metadata"]["deletionTimestamp"].is_string(), "{b}");

    // Releasing the finalizer lets the VPC, then the namespace, go.
    let (c, _, b) = s
        .raw(
            "PATCH",
            &format!("{}/held", vpcs("t1")),
            &[("content-type", "application/merge-patch+json")],
            Some(r#"{"metadata":{"finalizers":null}}"#),
        )
        .await;
    assert_eq!(c, 200, "{b}");
    wait_gone(&s, &ns("/t1")).await;
}

#[tokio::test]
async fn lifecycle_embedded() {
    lifecycle(Backend::Embedded).await;
}

#[tokio::test]
async fn lifecycle_etcd() {
    lifecycle(Backend::Etcd).await;
}

#[tokio::test]
async fn core_discovery_lists_namespaces() {
    let s = TestServer::start_bare(Backend::Embedded, &[]).await;
    let (c, _, b) = s.raw("GET", "/api", &[], None).await;
    assert_eq!(c, 200);
    assert_eq!(parse(&b)["versions"], json!(["v1"]));
    let (c, _, b) = s.raw("GET", "/api/v1", &[], None).await;
    assert_eq!(c, 200);
    let list = parse(&b);
    assert_eq!(list["groupVersion"], "v1");
    let ns = &list["resources"][0];
    assert_eq!(ns["name"], "namespaces");
    assert_eq!(ns["namespaced"], false);
    assert_eq!(ns["shortNames"], json!(["ns"]));
    assert_eq!(ns["verbs"].as_array().unwrap().len(), 8);
    let accept = (
        "accept",
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
    );
    let (c, h, b) = s.raw("GET", "/api", &[accept], None).await;
    assert_eq!(c, 200);
    assert!(
        h["content-type"]
            .to_str()
            .unwrap()
            .contains("as=APIGroupDiscoveryList")
    );
    let r = &parse(&b)["items"][0]["versions"][0];
    assert_eq!(r["version"], "v1");
    assert_eq!(r["resources"][0]["resource"], "namespaces");
    assert_eq!(r["resources"][0]["scope"], "Cluster");
}

/// With a kube-apiserver (here the stand-in) namespaces stay the cluster's: the server serves
/// no `/api/v1`, and the same lifecycle admission reads the cluster's namespaces.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_kube_apiserver_namespaces_are_the_clusters() {
    use cozyplane_conformance::standin::{Options, StandIn};
    let kube = StandIn::start(Options::default()).await;
    let kc = kube.admin_kubeconfig();
    let s = TestServer::start_bare(Backend::Embedded, &[&format!("--kubeconfig={}", kc.display())]).await;
    let (c, _, b) = s.raw("GET", "/api", &[], None).await;
    assert_eq!(c, 200);
    assert_eq!(parse(&b)["versions"], json!([]));
    let (c, _, _) = s.raw("GET", "/api/v1/namespaces", &[], None).await;
    assert_eq!(c, 404);
    let vpcs = "/apis/sdn.cozystack.io/v1alpha1/namespaces/t1/vpcs";
    let (c, _, b) = s.raw("POST", vpcs, &[JSON], Some(&vpc_json("a"))).await;
    assert_eq!(c, 404, "{b}");
    assert_eq!(parse(&b)["message"], r#"namespaces "t1" not found"#);
    kube.create(
        "namespaces",
        None,
        json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": "t1" } }),
    )
    .await
    .unwrap();
    let (c, _, b) = s.raw("POST", vpcs, &[JSON], Some(&vpc_json("a"))).await;
    assert_eq!(c, 201, "{b}");
}
