//! The real kubectl (v1.32) against the server, on the embedded store and on etcd.

use cozyplane_conformance::{Backend, TestServer};

const VPC: &str = "apiVersion: sdn.cozystack.io/v1alpha1
kind: VPC
metadata:
  name: v1
spec:
  cidrs: [\"10.0.0.0/24\"]
";

async fn crud_flow(backend: Backend) {
    let s = TestServer::start(backend).await;
    let resources = s.kubectl(&["api-resources"]).await;
    for r in ["vpcs", "ports", "vpcpeerings", "hostfirewalls"] {
        assert!(resources.contains(r), "{resources}");
    }
    assert!(
        s.kubectl_stdin(&["create", "-f", "-"], VPC)
            .await
            .contains("vpc.sdn.cozystack.io/v1 created")
    );
    let table = s.kubectl(&["get", "vpcs"]).await;
    let header = table.lines().next().unwrap();
    for col in ["NAME", "CIDRS", "VNI", "PHASE", "AGE"] {
        assert!(header.contains(col), "{table}");
    }
    assert!(table.contains("10.0.0.0/24"), "{table}");
    assert!(
        s.kubectl(&["get", "vpcs", "-o", "wide"])
            .await
            .lines()
            .next()
            .unwrap()
            .contains("MTU")
    );
    let yaml = s.kubectl(&["get", "vpc", "v1", "-o", "yaml"]).await;
    for f in [
        "uid:",
        "resourceVersion:",
        "creationTimestamp:",
        "generation: 1",
        "namespace: default",
    ] {
        assert!(yaml.contains(f), "{yaml}");
    }
    // apply twice: the first patches in the last-applied annotation, the second is a no-op.
    s.kubectl_stdin(&["apply", "-f", "-"], VPC).await;
    assert!(
        s.kubectl_stdin(&["apply", "-f", "-"], VPC)
            .await
            .contains("unchanged")
    );
    s.kubectl(&["label", "vpc", "v1", "team=a"]).await;
    s.kubectl(&["annotate", "vpc", "v1", "note=x"]).await;
    assert!(
        s.kubectl(&["get", "vpcs", "-l", "team=a", "-o", "name"])
            .await
            .contains("vpc.sdn.cozystack.io/v1")
    );
    assert!(
        s.kubectl(&["get", "vpcs", "-l", "team!=a", "-o", "name"])
            .await
            .trim()
            .is_empty()
    );
    s.kubectl(&[
        "patch",
        "vpc",
        "v1",
        "--type=merge",
        "-p",
        r#"{"spec":{"mtu":1400}}"#,
    ])
    .await;
    s.kubectl(&[
        "patch",
        "vpc",
        "v1",
        "--type=json",
        "-p",
        r#"[{"op":"replace","path":"/spec/mtu","value":1450}]"#,
    ])
    .await;
    let json = s
        .kubectl(&[
            "get",
            "vpc",
            "v1",
            "-o",
            "jsonpath={.spec.mtu} {.metadata.generation}",
        ])
        .await;
    assert_eq!(json, "1450 3");
    let replaced = VPC.replace("10.0.0.0/24", "10.1.0.0/24");
    let current = s
        .kubectl(&["get", "vpc", "v1", "-o", "jsonpath={.metadata.resourceVersion}"])
        .await;
    let with_rv = replaced.replace("name: v1", &format!("name: v1\n  resourceVersion: \"{current}\""));
    s.kubectl_stdin(&["replace", "-f", "-"], &with_rv).await;
    assert!(s.kubectl(&["get", "vpc", "v1"]).await.contains("10.1.0.0/24"));
    let explain = s.kubectl(&["explain", "vpc.spec.cidrs"]).await;
    assert!(
        explain.contains("KIND:       VPC") && explain.contains("cidrs"),
        "{explain}"
    );
    assert!(
        s.kubectl(&["get", "sdn", "-o", "name"])
            .await
            .contains("vpc.sdn.cozystack.io/v1")
    );
    s.kubectl(&["delete", "vpc", "v1"]).await;
    assert!(s.kubectl(&["get", "vpcs", "-o", "name"]).await.trim().is_empty());
}

#[tokio::test]
async fn kubectl_crud_on_embedded_store() {
    crud_flow(Backend::Embedded).await;
}

#[tokio::test]
async fn kubectl_crud_on_etcd() {
    crud_flow(Backend::Etcd).await;
}

#[tokio::test]
async fn kubectl_rejects_invalid_objects_with_field_causes() {
    let s = TestServer::start(Backend::Embedded).await;
    let out = s.raw(
        "POST",
        "/apis/sdn.cozystack.io/v1alpha1/namespaces/default/vpcs",
        &[("content-type", "application/json")],
        Some(r#"{"apiVersion":"sdn.cozystack.io/v1alpha1","kind":"VPC","metadata":{"name":"bad"},"spec":{"cidrs":["nope"]}}"#),
    )
    .await;
    assert_eq!(out.0, 422, "{}", out.2);
    assert!(out.2.contains("spec.cidrs[0]"), "{}", out.2);
}

#[tokio::test]
async fn kubectl_get_watch_and_wait_follow_changes() {
    let s = TestServer::start(Backend::Embedded).await;
    s.kubectl_stdin(&["create", "-f", "-"], VPC).await;
    let watch = {
        let kc = s.kubeconfig.clone();
        tokio::spawn(async move {
            cozyplane_conformance::kubectl_command(&kc)
                .args(["get", "vpcs", "-w", "--request-timeout=4s"])
                .output()
                .await
                .unwrap()
        })
    };
    let wait_phase = {
        let kc = s.kubeconfig.clone();
        tokio::spawn(async move {
            cozyplane_conformance::kubectl_command(&kc)
                .args([
                    "wait",
                    "vpc/v1",
                    "--for=jsonpath={.status.phase}=Ready",
                    "--timeout=20s",
                ])
                .output()
                .await
                .unwrap()
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let (code, _, body) = s
        .raw(
            "PATCH",
            "/apis/sdn.cozystack.io/v1alpha1/namespaces/default/vpcs/v1/status",
            &[("content-type", "application/merge-patch+json")],
            Some(r#"{"status":{"phase":"Ready","vni":100,"conditions":[{"type":"Ready","status":"True","reason":"Allocated","message":"","lastTransitionTime":"2026-01-01T00:00:00Z","observedGeneration":1}]}}"#),
        )
        .await;
    assert_eq!(code, 200, "{body}");
    let waited = wait_phase.await.unwrap();
    assert!(
        waited.status.success(),
        "{}",
        String::from_utf8_lossy(&waited.stderr)
    );
    let cond = s
        .kubectl(&["wait", "vpc/v1", "--for=condition=Ready", "--timeout=10s"])
        .await;
    assert!(cond.contains("condition met"), "{cond}");
    let w = watch.await.unwrap();
    let out = String::from_utf8_lossy(&w.stdout);
    assert!(
        out.lines().any(|l| l.contains("100") && l.contains("Ready")),
        "{out}"
    );
}
