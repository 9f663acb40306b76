//! Tenancy through the real RBAC: the chart's tenant roles aggregated into `admin` by
//! kube-controller-manager, the `export`/`peer` virtual verbs answered by real
//! SubjectAccessReviews, ResourceQuota on our kinds, and the front-proxy trust boundary.

use std::net::Ipv4Addr;
use std::sync::Arc;

use base64::Engine as _;
use cozyplane_conformance::standin::pki::Pem;
use http_body_util::BodyExt as _;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::{Value, json};

use crate::{Env, obj, vpc};

/// A tenant bound to the built-in `admin` ClusterRole in its namespace manages our tenant kinds
/// there (the chart's `cozyplane-tenant-edit` aggregated into `admin` by the real
/// clusterrole-aggregation controller), and nothing of other namespaces or cluster kinds.
pub(crate) fn tenant_persona(env: &Arc<Env>) {
    let e = env.clone();
    env.run(async move {
        let cp = &e.cp;
        let ns = cp.namespace("tenant").await;
        let other = cp.namespace("other").await;
        let kc = e.tenant(&ns).await;
        let admin_role = e.get_json(&["clusterrole", "admin"]).await;
        assert!(
            admin_role["rules"]
                .as_array()
                .is_some_and(|r| r.iter().any(|r| r["apiGroups"] == json!(["sdn.cozystack.io"])
                    && r["verbs"]
                        .as_array()
                        .is_some_and(|v| v.contains(&json!("export"))))),
            "the tenant roles are aggregated into admin: {admin_role}"
        );
        e.create_ok(&kc, &ns, &vpc("v1", "10.1.0.0/24")).await;
        e.create_ok(
            &kc,
            &ns,
            &obj(
                "SecurityGroup",
                "web",
                &json!({ "vpcRef": { "name": "v1" }, "podSelector": { "matchLabels": { "app": "web" } } }),
            ),
        )
        .await;
        e.create_ok(
            &kc,
            &ns,
            &obj("VPCGateway", "gw", &json!({ "vpcRef": { "name": "v1" } })),
        )
        .await;
        let names = cp
            .ok(&kc, &["get", "vpcs,securitygroups,vpcgateways", "-o", "name"])
            .await;
        for want in [
            "vpc.sdn.cozystack.io/v1",
            "securitygroup.sdn.cozystack.io/web",
            "vpcgateway.sdn.cozystack.io/gw",
        ] {
            assert!(names.lines().any(|l| l == want), "{want} missing: {names}");
        }
        assert_eq!(e.can_i(&kc, &["export", "vpcs", "-n", &ns]).await, "yes");
        assert_eq!(e.can_i(&kc, &["peer", "vpcs", "-n", &ns]).await, "yes");
        assert_eq!(e.can_i(&kc, &["export", "vpcs", "-n", &other]).await, "no");
        // Not in other namespaces, not the cluster kinds.
        let err = cp.fails(&kc, &["get", "vpcs", "-n", &other]).await;
        assert!(err.contains("Forbidden"), "{err}");
        let err = cp.fails(&kc, &["get", "ports.sdn.cozystack.io"]).await;
        assert!(err.contains("Forbidden"), "{err}");
        let err = e.create_fails(&kc, &other, &vpc("intruder", "10.9.0.0/24")).await;
        assert!(err.contains("Forbidden"), "{err}");
    });
}

/// A VPCBinding to another namespace's VPC needs `export` on that VPC, a VPCPeering needs
/// `peer` on the local VPC: our server asks kube-apiserver (SubjectAccessReview) for the
/// requesting user, and real RBAC answers, including a Role granting `export` on one VPC by name.
pub(crate) fn virtual_verbs(env: &Arc<Env>) {
    let e = env.clone();
    env.run(async move {
        let cp = &e.cp;
        let (a, b) = (cp.namespace("va").await, cp.namespace("vb").await);
        let (ka, kb) = (e.tenant(&a).await, e.tenant(&b).await);
        e.create_ok(&ka, &a, &vpc("v1", "10.1.0.0/24")).await;
        e.create_ok(&kb, &b, &vpc("w1", "10.2.0.0/24")).await;
        let user_a = format!("tenant-{a}");

        let foreign = obj(
            "VPCBinding",
            "b-foreign",
            &json!({ "vpcRef": { "namespace": b, "name": "w1" } }),
        );
        let err = e.create_fails(&ka, &a, &foreign).await;
        assert!(
            err.contains(&format!(
                "User \"{user_a}\" cannot export resource \"vpcs\" in API group \"sdn.cozystack.io\" in the namespace \"{b}\""
            )),
            "{err}"
        );
        // b grants a `export` on w1 alone.
        let role = json!({ "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": { "name": "export-w1", "namespace": b },
            "rules": [{ "apiGroups": ["sdn.cozystack.io"], "resources": ["vpcs"], "resourceNames": ["w1"], "verbs": ["export"] }] });
        let binding = json!({ "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": { "name": "export-w1", "namespace": b },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "export-w1" },
            "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user_a }] });
        cp.apply(&list(&[role, binding])).await;
        // Our server caches SubjectAccessReview answers for a while: retry until it asks again.
        cp.eventually("the binding to w1 to be allowed", || async {
            e.create(&ka, &a, &foreign).await.status.success()
        })
        .await;

        // Peering: a user who may create vpcpeerings but holds no `peer`.
        let c = format!("peerless-{a}");
        let kc = cp.user_kubeconfig(&c, &[], &a);
        let role = json!({ "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": { "name": "peering-writer", "namespace": a },
            "rules": [{ "apiGroups": ["sdn.cozystack.io"], "resources": ["vpcpeerings"], "verbs": ["create", "get", "list"] }] });
        let binding = json!({ "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": { "name": "peering-writer", "namespace": a },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "peering-writer" },
            "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": c }] });
        cp.apply(&list(&[role, binding])).await;
        cp.eventually("the peering writer's role", || async {
            e.can_i(&kc, &["create", "vpcpeerings.sdn.cozystack.io", "-n", &a])
                .await
                == "yes"
        })
        .await;
        let peering = obj(
            "VPCPeering",
            "to-w1",
            &json!({ "vpcRef": { "name": "v1" }, "peerRef": { "namespace": b, "name": "w1" } }),
        );
        let err = e.create_fails(&kc, &a, &peering).await;
        assert!(
            err.contains(&format!(
                "User \"{c}\" cannot peer resource \"vpcs\" in API group \"sdn.cozystack.io\" in the namespace \"{a}\""
            )),
            "{err}"
        );
        e.create_ok(&ka, &a, &peering).await;
    });
}

/// A `v1` List of `items`, for one `kubectl apply`.
fn list(items: &[Value]) -> String {
    json!({ "apiVersion": "v1", "kind": "List", "items": items }).to_string()
}

/// `count/vpcs.sdn.cozystack.io` in a real ResourceQuota: the third VPC of a quota of two is
/// refused with kube-apiserver's wording, usage shows in the quota's status, and a delete frees
/// a slot.
pub(crate) fn quota(env: &Arc<Env>) {
    let e = env.clone();
    env.run(async move {
        let cp = &e.cp;
        let ns = cp.namespace("quota").await;
        let kc = e.tenant(&ns).await;
        let key = "count/vpcs.sdn.cozystack.io";
        let q = json!({ "apiVersion": "v1", "kind": "ResourceQuota", "metadata": { "name": "sdn", "namespace": ns },
            "spec": { "hard": { key: "2" } } });
        cp.apply(&q.to_string()).await;
        cp.eventually("the quota's status to count our VPCs", || async {
            let q = e.get_json(&["quota", "sdn", "-n", &ns]).await;
            q["status"]["hard"][key] == "2" && q["status"]["used"][key] == "0"
        })
        .await;
        e.create_ok(&kc, &ns, &vpc("a", "10.1.0.0/24")).await;
        e.create_ok(&kc, &ns, &vpc("b", "10.1.1.0/24")).await;
        let err = e.create_fails(&kc, &ns, &vpc("c", "10.1.2.0/24")).await;
        assert!(
            err.contains("exceeded quota: sdn, requested: count/vpcs.sdn.cozystack.io=1, used: count/vpcs.sdn.cozystack.io=2, limited: count/vpcs.sdn.cozystack.io=2"),
            "{err}"
        );
        assert!(err.contains("Forbidden"), "{err}");
        cp.eventually("usage 2 in the quota's status", || async {
            e.get_json(&["quota", "sdn", "-n", &ns]).await["status"]["used"][key] == "2"
        })
        .await;
        cp.ok(&kc, &["delete", "vpc", "a"]).await;
        cp.eventually("usage to drop to 1", || async {
            e.get_json(&["quota", "sdn", "-n", &ns]).await["status"]["used"][key] == "1"
        })
        .await;
        e.create_ok(&kc, &ns, &vpc("c", "10.1.2.0/24")).await;
    });
}

/// A reply of a direct request.
#[derive(Debug)]
struct Reply {
    code: u16,
    body: String,
}

/// One HTTPS request straight to our server (bypassing kube-apiserver) trusting `ca`,
/// presenting `client` if any, with `headers` verbatim.
async fn direct(port: u16, ca: &str, client: Option<&Pem>, path: &str, headers: &[(&str, &str)]) -> Reply {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots.add(c.expect("CA PEM")).expect("CA");
    }
    let b = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots);
    let mut cfg = match client {
        Some(p) => {
            let chain = CertificateDer::pem_slice_iter(p.cert.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .expect("client PEM");
            let key = PrivateKeyDer::from_pem_slice(p.key.as_bytes()).expect("client key");
            b.with_client_auth_cert(chain, key).expect("client auth")
        }
        None => b.with_no_client_auth(),
    };
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect to our server");
    let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(ServerName::IpAddress(Ipv4Addr::LOCALHOST.into()), tcp)
        .await
        .expect("TLS to our server");
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .expect("HTTP handshake");
    tokio::spawn(conn);
    let mut req = http::Request::get(path).header("host", format!("127.0.0.1:{port}"));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = sender
        .send_request(
            req.body(http_body_util::Full::new(bytes::Bytes::new()))
                .expect("request"),
        )
        .await
        .expect("response");
    let code = resp.status().as_u16();
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    Reply {
        code,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

/// `X-Remote-User: kubernetes-admin` / `X-Remote-Group: system:masters` sent straight to our
/// server is honoured only with kube-apiserver's front-proxy client certificate (the control);
/// without a certificate, with a cluster-CA certificate, or with a front-proxy-CA certificate
/// whose CN is not `front-proxy-client`, the request is not that user's.
pub(crate) fn front_proxy_spoofing(env: &Arc<Env>) {
    let e = env.clone();
    env.run(async move {
        let cp = &e.cp;
        let ns = cp.namespace("spoof").await;
        e.create_ok(&cp.admin, &ns, &vpc("secret", "10.1.0.0/24")).await;
        let svc = e.get_json(&["apiservice", "v1alpha1.sdn.cozystack.io"]).await;
        let ca = String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(svc["spec"]["caBundle"].as_str().unwrap_or_default())
                .expect("caBundle"),
        )
        .expect("PEM");
        let port = e.cozy.lock().await.port;
        let path = format!("/apis/sdn.cozystack.io/v1alpha1/namespaces/{ns}/vpcs");
        let spoof = [
            ("x-remote-user", "kubernetes-admin"),
            ("x-remote-group", "system:masters"),
        ];
        let items = |r: &Reply| -> usize {
            serde_json::from_str::<Value>(&r.body)
                .ok()
                .and_then(|v| v["items"].as_array().map(Vec::len))
                .unwrap_or(0)
        };

        // The control: the aggregator's own certificate makes the headers count.
        let real = &cp.pki.front_proxy_client;
        let r = direct(port, &ca, Some(real), &path, &spoof).await;
        assert_eq!((r.code, items(&r)), (200, 1), "{r:?}");

        let not_allowed = cp
            .pki
            .front_proxy_ca
            .client("evil-proxy", &[])
            .expect("certificate");
        let cluster_ca_cert = cp.pki.ca.client("front-proxy-client", &[]).expect("certificate");
        for (what, cert) in [
            ("no client certificate", None),
            ("a front-proxy-CA certificate with another CN", Some(&not_allowed)),
            (
                "a cluster-CA certificate named front-proxy-client",
                Some(&cluster_ca_cert),
            ),
        ] {
            let r = direct(port, &ca, cert, &path, &spoof).await;
            assert!(
                matches!(r.code, 401 | 403),
                "{what}: X-Remote-User was honoured: {r:?}"
            );
            assert!(!r.body.contains("\"secret\""), "{what}: {r:?}");
        }
    });
}

/// A tenant asks its VPC for a SecurityGroup verdict with `kubectl create --raw` (a `create`
/// of `vpcs/trace`, granted by the chart's tenant roles aggregated into `admin`), and is
/// refused in another namespace by real RBAC.
pub(crate) fn trace(env: &Arc<Env>) {
    let e = env.clone();
    env.run(async move {
        let cp = &e.cp;
        let ns = cp.namespace("trace").await;
        let other = cp.namespace("trace-other").await;
        let kc = e.tenant(&ns).await;
        e.create_ok(&kc, &ns, &vpc("v1", "10.1.0.0/24")).await;
        e.create_ok(&cp.admin, &other, &vpc("v1", "10.2.0.0/24")).await;
        for (n, want) in [(&ns, "yes"), (&other, "no")] {
            let got = e
                .can_i(
                    &kc,
                    &["create", "vpcs.sdn.cozystack.io", "--subresource=trace", "-n", n],
                )
                .await;
            assert_eq!(got, want, "create vpcs/trace in {n}");
        }
        let question = json!({"apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "VPCTrace", "spec": {
            "source": {"address": "10.1.0.2"}, "destination": {"address": "10.1.0.3"},
            "protocol": "TCP", "port": 80}});
        let uri = |n: &str| format!("/apis/sdn.cozystack.io/v1alpha1/namespaces/{n}/vpcs/v1/trace");
        let out = cp
            .kubectl_stdin(&kc, &["create", "--raw", &uri(&ns)], &question.to_string())
            .await;
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let answer: Value = serde_json::from_slice(&out.stdout).expect("the answer is JSON");
        // No Port holds either address: nothing is attached there, the trace says so.
        assert_eq!(answer["status"]["verdict"], "Dropped", "{answer}");
        assert_eq!(answer["status"]["layer"], "Isolation", "{answer}");
        assert_eq!(answer["status"]["reason"], "NoPort", "{answer}");
        let out = cp
            .kubectl_stdin(&kc, &["create", "--raw", &uri(&other)], &question.to_string())
            .await;
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains("Forbidden"), "{err}");
        // Bad input through the aggregator: the 422 and its cause reach kubectl.
        let bad = json!({"apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "VPCTrace", "spec": {
            "source": {"address": "10.1.0.999"}, "destination": {"address": "10.1.0.3"},
            "protocol": "TCP", "port": 80}});
        let out = cp
            .kubectl_stdin(&kc, &["create", "--raw", &uri(&ns)], &bad.to_string())
            .await;
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("spec.source.address"),
            "{err}"
        );
    });
}
