//! Issue 4's acceptance tests, end to end: the real kubectl → the kube stand-in (TokenReview,
//! RBAC, aggregation proxy) → cozyplane in delegated mode → SubjectAccessReviews and quota back
//! to the stand-in.
//!
//! Every test starts its own stand-in and server ([`tenants`]): the chart's generated tenant
//! ClusterRoles (`charts/cozyplane/templates/tenant-rbac.yaml`, rendered here) are created with
//! kubectl, namespaces `t1` and `t2` get one ServiceAccount-like token user each (`alice`,
//! `bob`) bound to the built-in `admin` role, into which the tenant roles aggregate.
//!
//! The security tests talk HTTPS to cozyplane directly (bypassing the stand-in) with crafted
//! `X-Remote-*` headers and chosen client certificates. Contract IDs (FP-*, AUTH-*, QUOTA-*,
//! AV-*, DISC-*, KC-*) refer to `aggregator-contract.md`.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use cozyplane_apiserver::registry::Resource as _;
use cozyplane_conformance::standin::pki::{self, Ca, Pem};
use cozyplane_conformance::standin::{Cozyplane, Options, StandIn, Token};
use http_body_util::BodyExt as _;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::{Value, json};

const ALICE: &str = "system:serviceaccount:t1:alice";
const BOB: &str = "system:serviceaccount:t2:bob";
const CAROL: &str = "system:serviceaccount:t1:carol";
const GV: &str = "/apis/sdn.cozystack.io/v1alpha1";
const V2: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

// ---------------------------------------------------------------------------------------------
// Harness

/// A stand-in with cozyplane behind it, two tenants and their kubeconfigs.
struct Env {
    s: StandIn,
    server: Cozyplane,
    admin: PathBuf,
    alice: PathBuf,
    bob: PathBuf,
    carol: PathBuf,
    dir: tempfile::TempDir,
}

fn sa_groups(ns: &str) -> Vec<String> {
    vec![
        "system:serviceaccounts".to_string(),
        format!("system:serviceaccounts:{ns}"),
    ]
}

fn sa_token(token: &str, user: &str, ns: &str) -> Token {
    let groups = sa_groups(ns);
    let groups: Vec<&str> = groups.iter().map(String::as_str).collect();
    Token::new(token, user, &groups)
}

/// The chart's tenant roles as Helm renders them with the default values.
fn rendered_tenant_rbac() -> String {
    let m = cozyplane_chartkit::Render::new("cozy-system")
        .show_only("templates/tenant-rbac.yaml")
        .ok();
    assert_eq!(m.objects.len(), 2, "the tenant roles are on by default");
    m.yaml
}

async fn ok(s: &StandIn, kc: &Path, args: &[&str]) -> String {
    let out = s.kubectl(kc, args).await;
    assert!(
        out.status.success(),
        "kubectl {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs kubectl, asserts it failed and returns stderr.
async fn fails(s: &StandIn, kc: &Path, args: &[&str]) -> String {
    let out = s.kubectl(kc, args).await;
    assert!(
        !out.status.success(),
        "kubectl {args:?} unexpectedly succeeded: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `kubectl auth can-i` answer (stdout, trimmed; "no" exits 1).
async fn can_i(s: &StandIn, kc: &Path, args: &[&str]) -> String {
    let mut all = vec!["auth", "can-i"];
    all.extend_from_slice(args);
    let out = s.kubectl(kc, &all).await;
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn manifest(dir: &Path, name: &str, v: &Value) -> String {
    let p = dir.join(name);
    std::fs::write(&p, v.to_string()).expect("write manifest");
    p.display().to_string()
}

/// Polls `f` until it holds, for at most a minute (a bound, not a timing assertion).
async fn eventually<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while tokio::time::Instant::now() < deadline {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("timed out waiting for {what}");
}

fn obj(kind: &str, name: &str, spec: &Value) -> Value {
    json!({ "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": kind, "metadata": { "name": name }, "spec": spec })
}

fn vpc(name: &str, cidr: &str) -> Value {
    obj("VPC", name, &json!({ "cidrs": [cidr] }))
}

impl Env {
    /// Creates `v` in `ns` as `kc` with kubectl; the result is kubectl's output.
    async fn create(&self, kc: &Path, ns: &str, v: &Value) -> std::process::Output {
        let name = format!(
            "{}-{}-{}.json",
            v["kind"].as_str().unwrap_or("obj"),
            v["metadata"]["name"].as_str().unwrap_or("x"),
            uuid::Uuid::new_v4()
        );
        let file = manifest(self.dir.path(), &name, v);
        self.s.kubectl(kc, &["create", "-n", ns, "-f", &file]).await
    }

    async fn create_ok(&self, kc: &Path, ns: &str, v: &Value) {
        let out = self.create(kc, ns, v).await;
        assert!(
            out.status.success(),
            "create {v} in {ns} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    async fn create_fails(&self, kc: &Path, ns: &str, v: &Value) -> String {
        let out = self.create(kc, ns, v).await;
        assert!(
            !out.status.success(),
            "create {v} in {ns} unexpectedly succeeded: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    /// The server's CA (the APIService's caBundle, as `--ensure-apiservice` wrote it).
    async fn server_ca(&self) -> String {
        let svc = self
            .s
            .shared
            .reg
            .store("apiservices")
            .get(None, "v1alpha1.sdn.cozystack.io")
            .await
            .expect("the APIService exists");
        let b = svc["spec"]["caBundle"].as_str().expect("caBundle");
        String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(b)
                .expect("base64"),
        )
        .expect("PEM")
    }

    /// A direct request to cozyplane, bypassing the stand-in.
    async fn direct(
        &self,
        client: Option<&Pem>,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&Value>,
    ) -> Reply {
        https(
            &self.server.url,
            &self.server_ca().await,
            client,
            method,
            path,
            headers,
            body,
        )
        .await
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    /// The ResourceQuota `name` in `ns` as JSON.
    async fn quota(&self, ns: &str, name: &str) -> Value {
        let out = ok(
            &self.s,
            &self.admin,
            &["get", "quota", name, "-n", ns, "-o", "json"],
        )
        .await;
        serde_json::from_str(&out).expect("quota JSON")
    }
}

/// Starts the stand-in and cozyplane, creates the tenant roles from the chart, `t1` with
/// `alice` and `t2` with `bob` (both `admin` in their namespace), and waits until the roles
/// have aggregated into `admin`.
async fn tenants() -> Env {
    let s = StandIn::start(Options {
        tokens: vec![
            sa_token("alice-token", ALICE, "t1"),
            sa_token("bob-token", BOB, "t2"),
            sa_token("carol-token", CAROL, "t1"),
        ],
        ..Default::default()
    })
    .await;
    let admin = s.admin_kubeconfig();
    let alice = s.token_kubeconfig("alice-token");
    let bob = s.token_kubeconfig("bob-token");
    let carol = s.token_kubeconfig("carol-token");
    let dir = tempfile::tempdir().expect("temp dir");
    let server = s.start_cozyplane().await;
    eventually("the APIService to be Available", || async {
        s.kubectl(
            &admin,
            &[
                "get",
                "apiservice",
                "v1alpha1.sdn.cozystack.io",
                "-o",
                "jsonpath={.status.conditions[0].status}",
            ],
        )
        .await
        .stdout
            == b"True"
    })
    .await;

    let rbac = dir.path().join("tenant-rbac.yaml");
    std::fs::write(&rbac, rendered_tenant_rbac()).expect("write tenant-rbac.yaml");
    let out = ok(
        &s,
        &admin,
        &["create", "-f", &rbac.display().to_string(), "-o", "name"],
    )
    .await;
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "clusterrole.rbac.authorization.k8s.io/cozyplane-tenant-edit",
            "clusterrole.rbac.authorization.k8s.io/cozyplane-tenant-view"
        ]
    );
    for (ns, sa) in [("t1", "t1:alice"), ("t2", "t2:bob")] {
        ok(&s, &admin, &["create", "namespace", ns]).await;
        ok(
            &s,
            &admin,
            &[
                "create",
                "rolebinding",
                "tenant-admin",
                "-n",
                ns,
                "--clusterrole=admin",
                &format!("--serviceaccount={sa}"),
            ],
        )
        .await;
    }
    for (kc, ns) in [(&alice, "t1"), (&bob, "t2")] {
        eventually("the tenant roles to aggregate into admin", || async {
            can_i(&s, kc, &["create", "vpcs", "-n", ns]).await == "yes"
        })
        .await;
    }
    Env {
        s,
        server,
        admin,
        alice,
        bob,
        carol,
        dir,
    }
}

/// A response to a direct request.
#[derive(Debug)]
struct Reply {
    code: u16,
    content_type: String,
    body: String,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

/// One HTTPS request to `url` trusting `ca_pem`, presenting `client` (if any), with `headers`
/// added verbatim (repeated names become repeated headers). Err on transport failures.
async fn https(
    url: &str,
    ca_pem: &str,
    client: Option<&Pem>,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&Value>,
) -> Result<Reply, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots
            .add(c.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    let b = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots);
    let mut cfg = match client {
        Some(p) => {
            let chain = CertificateDer::pem_slice_iter(p.cert.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| e.to_string())?;
            let key = PrivateKeyDer::from_pem_slice(p.key.as_bytes()).map_err(|e| e.to_string())?;
            b.with_client_auth_cert(chain, key).map_err(|e| e.to_string())?
        }
        None => b.with_no_client_auth(),
    };
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    let host = url.trim_start_matches("https://");
    let tcp = tokio::net::TcpStream::connect(host)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(ServerName::IpAddress(Ipv4Addr::LOCALHOST.into()), tcp)
        .await
        .map_err(|e| format!("TLS: {e}"))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(conn);
    let mut req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", host);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = match body {
        Some(v) => req
            .header("content-type", "application/json")
            .body(http_body_util::Full::new(bytes::Bytes::from(v.to_string()))),
        None => req.body(http_body_util::Full::new(bytes::Bytes::new())),
    }
    .map_err(|e| e.to_string())?;
    let resp = sender
        .send_request(req)
        .await
        .map_err(|e| format!("request: {e}"))?;
    let code = resp.status().as_u16();
    let content_type = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("body: {e}"))?
        .to_bytes();
    Ok(Reply {
        code,
        content_type,
        body: String::from_utf8_lossy(&bytes).into_owned(),
    })
}

/// The `X-Remote-*` headers of `user` in the groups of a ServiceAccount of `ns`.
fn remote(user: &'static str, ns: &str) -> Vec<(&'static str, String)> {
    let mut h = vec![("x-remote-user", user.to_string())];
    for g in sa_groups(ns) {
        h.push(("x-remote-group", g));
    }
    h.push(("x-remote-group", "system:authenticated".to_string()));
    h
}

fn borrow<'a>(h: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    h.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

// ---------------------------------------------------------------------------------------------
// Tenancy (through the stand-in with the real kubectl)

/// Acceptance: a tenant can create VPCs, VPCGateways and SecurityGroups in its namespace, and
/// `kubectl auth can-i export vpcs` says yes there (and only there). KC-09, AUTH-04, AUTH-12.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_creates_vpcs_gateways_securitygroups_and_can_i_export_kc09_auth04_auth12() {
    let e = tenants().await;
    let (s, alice, bob) = (&e.s, &e.alice, &e.bob);

    e.create_ok(alice, "t1", &vpc("v1", "10.1.0.0/24")).await;
    e.create_ok(
        alice,
        "t1",
        &obj("VPCGateway", "gw", &json!({ "vpcRef": { "name": "v1" } })),
    )
    .await;
    e.create_ok(
        alice,
        "t1",
        &obj(
            "SecurityGroup",
            "web",
            &json!({ "vpcRef": { "name": "v1" }, "podSelector": { "matchLabels": { "app": "web" } },
                "ingress": [{ "from": { "cidr": "10.1.0.0/24" }, "ports": [{ "protocol": "TCP", "port": 80 }] }] }),
        ),
    )
    .await;
    e.create_ok(bob, "t2", &vpc("w1", "10.2.0.0/24")).await;
    let names = ok(
        s,
        alice,
        &["get", "vpcs,vpcgateways,securitygroups", "-n", "t1", "-o", "name"],
    )
    .await;
    assert_eq!(
        names.lines().collect::<Vec<_>>(),
        [
            "vpc.sdn.cozystack.io/v1",
            "vpcgateway.sdn.cozystack.io/gw",
            "securitygroup.sdn.cozystack.io/web"
        ],
        "{names}"
    );
    // The server stored them as the tenant: its SARs went back to the stand-in.
    assert!(e.s.reviews("SubjectAccessReview") > 0);

    // kubectl resolves `vpcs` to sdn.cozystack.io through discovery and asks a
    // SelfSubjectAccessReview with that group (KC-09).
    assert_eq!(can_i(s, alice, &["export", "vpcs", "-n", "t1"]).await, "yes");
    assert_eq!(can_i(s, alice, &["peer", "vpcs", "-n", "t1"]).await, "yes");
    assert_eq!(
        can_i(s, alice, &["export", "vpcs.sdn.cozystack.io/v1", "-n", "t1"]).await,
        "yes"
    );
    assert_eq!(can_i(s, alice, &["export", "vpcs", "-n", "t2"]).await, "no");
    assert_eq!(can_i(s, bob, &["export", "vpcs", "-n", "t2"]).await, "yes");
    assert_eq!(can_i(s, bob, &["export", "vpcs", "-n", "t1"]).await, "no");
    for verb in ["create", "delete", "deletecollection", "patch", "watch"] {
        for res in [
            "vpcs",
            "vpcgateways",
            "securitygroups",
            "vpcbindings",
            "vpcpeerings",
            "floatingips",
        ] {
            assert_eq!(
                can_i(s, alice, &[verb, res, "-n", "t1"]).await,
                "yes",
                "{verb} {res}"
            );
        }
    }
    assert_eq!(
        can_i(s, alice, &["get", "vpcs", "--subresource=status", "-n", "t1"]).await,
        "yes"
    );
}

/// Acceptance: a tenant cannot list ports, servicevips, hostfirewalls, nor the other tenant's
/// VPCs, nor create HostFirewalls. The stand-in refuses first (AUTH-12) with Kubernetes'
/// message (AUTH-06), and our server refuses too when asked directly (AUTH-04, FP-03).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_cannot_list_cluster_kinds_nor_other_tenants_vpcs_nor_create_hostfirewalls_auth04_auth06_auth12()
 {
    let e = tenants().await;
    let (s, alice, bob) = (&e.s, &e.alice, &e.bob);
    e.create_ok(bob, "t2", &vpc("w1", "10.2.0.0/24")).await;

    for res in ["ports", "servicevips", "hostfirewalls"] {
        let err = fails(s, alice, &["get", res]).await;
        assert!(
            err.contains(&format!(
                "{res}.sdn.cozystack.io is forbidden: User \"{ALICE}\" cannot list resource \"{res}\" in API group \"sdn.cozystack.io\" at the cluster scope"
            )),
            "{err}"
        );
        assert_eq!(can_i(s, alice, &["list", res]).await, "no");
        assert_eq!(can_i(s, alice, &["get", res, "-n", "t1"]).await, "no");
    }
    let err = fails(s, alice, &["get", "vpcs", "-n", "t2"]).await;
    assert!(
        err.contains(&format!(
            "vpcs.sdn.cozystack.io is forbidden: User \"{ALICE}\" cannot list resource \"vpcs\" in API group \"sdn.cozystack.io\" in the namespace \"t2\""
        )),
        "{err}"
    );
    let err = fails(s, alice, &["get", "vpc", "w1", "-n", "t2"]).await;
    assert!(
        err.contains(&format!(
            "vpcs.sdn.cozystack.io \"w1\" is forbidden: User \"{ALICE}\" cannot get resource \"vpcs\" in API group \"sdn.cozystack.io\" in the namespace \"t2\""
        )),
        "{err}"
    );
    fails(s, alice, &["get", "vpcs", "--all-namespaces"]).await;
    let hf = json!({ "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "HostFirewall", "metadata": { "name": "hf" },
        "spec": { "nodeSelector": {}, "policyTypes": ["Ingress"] } });
    let file = manifest(e.dir.path(), "hf.json", &hf);
    let err = fails(s, alice, &["create", "-f", &file]).await;
    assert!(
        err.contains(&format!(
            "hostfirewalls.sdn.cozystack.io is forbidden: User \"{ALICE}\" cannot create resource \"hostfirewalls\" in API group \"sdn.cozystack.io\" at the cluster scope"
        )),
        "{err}"
    );
    // The operator can (so the refusal above is about the tenant, not the object).
    ok(s, &e.admin, &["create", "-f", &file]).await;
    assert_eq!(can_i(s, alice, &["create", "hostfirewalls"]).await, "no");

    // Asked directly (as the front proxy would ask for alice), our server refuses as well.
    let fp = &e.s.shared.pki.front_proxy_client;
    let h = remote(ALICE, "t1");
    let r = e
        .direct(
            Some(fp),
            "GET",
            &format!("{GV}/namespaces/t2/vpcs"),
            &borrow(&h),
            None,
        )
        .await;
    assert_eq!(r.code, 403, "{r:?}");
    assert_eq!(
        r.json()["message"],
        format!(
            "vpcs.sdn.cozystack.io is forbidden: User \"{ALICE}\" cannot list resource \"vpcs\" in API group \"sdn.cozystack.io\" in the namespace \"t2\""
        ),
        "{r:?}"
    );
    for res in ["ports", "servicevips", "hostfirewalls"] {
        let r = e
            .direct(Some(fp), "GET", &format!("{GV}/{res}"), &borrow(&h), None)
            .await;
        assert_eq!(r.code, 403, "{res}: {r:?}");
    }
    let r = e
        .direct(
            Some(fp),
            "POST",
            &format!("{GV}/hostfirewalls"),
            &borrow(&h),
            Some(&hf),
        )
        .await;
    assert_eq!(r.code, 403, "{r:?}");
    // ... while alice's own namespace is fine (the headers did make her alice).
    let r = e
        .direct(
            Some(fp),
            "GET",
            &format!("{GV}/namespaces/t1/vpcs"),
            &borrow(&h),
            None,
        )
        .await;
    assert_eq!(r.code, 200, "{r:?}");
}

/// Acceptance: a VPCBinding to a VPC the user cannot export is refused (403), to its own VPC
/// accepted; a VPCPeering without `peer` is refused, with it accepted. The virtual verbs are
/// SubjectAccessReviews for the requesting user (AUTH-04), answered by the stand-in's RBAC with
/// the chart's roles.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vpcbinding_needs_export_and_vpcpeering_needs_peer_auth04_auth06() {
    let e = tenants().await;
    let (s, alice, bob, carol) = (&e.s, &e.alice, &e.bob, &e.carol);
    e.create_ok(alice, "t1", &vpc("v1", "10.1.0.0/24")).await;
    e.create_ok(bob, "t2", &vpc("w1", "10.2.0.0/24")).await;

    // Binding to bob's VPC: alice may create bindings in t1 but cannot export t2/w1.
    let foreign = obj(
        "VPCBinding",
        "b-foreign",
        &json!({ "vpcRef": { "namespace": "t2", "name": "w1" } }),
    );
    let err = e.create_fails(alice, "t1", &foreign).await;
    assert!(
        err.contains(&format!(
            "vpcbindings.sdn.cozystack.io \"b-foreign\" is forbidden: User \"{ALICE}\" cannot export resource \"vpcs\" in API group \"sdn.cozystack.io\" in the namespace \"t2\""
        )),
        "{err}"
    );
    assert!(err.contains("Forbidden"), "a 403: {err}");
    // Her own VPC: accepted.
    let own = obj(
        "VPCBinding",
        "b-own",
        &json!({ "vpcRef": { "namespace": "t1", "name": "v1" } }),
    );
    e.create_ok(alice, "t1", &own).await;
    // Bob, who can export w1, cannot create the binding in t1 (no rights there).
    let err = e.create_fails(bob, "t1", &foreign).await;
    assert!(err.contains("forbidden"), "{err}");
    // Once bob's namespace grants alice `export` on w1 alone, her binding goes through.
    let role = json!({ "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": { "name": "export-w1", "namespace": "t2" },
        "rules": [{ "apiGroups": ["sdn.cozystack.io"], "resources": ["vpcs"], "resourceNames": ["w1"], "verbs": ["export"] }] });
    let rb = json!({ "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": { "name": "t1-alice-binds-w1", "namespace": "t2" },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "export-w1" },
        "subjects": [{ "kind": "ServiceAccount", "namespace": "t1", "name": "alice" }] });
    ok(
        s,
        bob,
        &["create", "-f", &manifest(e.dir.path(), "role.json", &role)],
    )
    .await;
    ok(s, bob, &["create", "-f", &manifest(e.dir.path(), "rb.json", &rb)]).await;
    eventually("alice's export on t2/w1 to be granted", || async {
        e.create(alice, "t1", &foreign).await.status.success()
    })
    .await;

    // Peering: carol may create vpcpeerings in t1 but holds no `peer` on its VPCs.
    let role = json!({ "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": { "name": "peering-writer", "namespace": "t1" },
        "rules": [{ "apiGroups": ["sdn.cozystack.io"], "resources": ["vpcpeerings"], "verbs": ["create", "get", "list"] }] });
    ok(
        s,
        alice,
        &["create", "-f", &manifest(e.dir.path(), "pw.json", &role)],
    )
    .await;
    ok(
        s,
        alice,
        &[
            "create",
            "rolebinding",
            "carol-peerings",
            "-n",
            "t1",
            "--role=peering-writer",
            "--serviceaccount=t1:carol",
        ],
    )
    .await;
    eventually("carol to be allowed to create vpcpeerings", || async {
        can_i(s, carol, &["create", "vpcpeerings", "-n", "t1"]).await == "yes"
    })
    .await;
    assert_eq!(can_i(s, carol, &["peer", "vpcs", "-n", "t1"]).await, "no");
    let peering = obj(
        "VPCPeering",
        "to-w1",
        &json!({ "vpcRef": { "name": "v1" }, "peerRef": { "namespace": "t2", "name": "w1" } }),
    );
    let err = e.create_fails(carol, "t1", &peering).await;
    assert!(
        err.contains(&format!(
            "vpcpeerings.sdn.cozystack.io \"to-w1\" is forbidden: User \"{CAROL}\" cannot peer resource \"vpcs\" in API group \"sdn.cozystack.io\" in the namespace \"t1\""
        )),
        "{err}"
    );
    // alice holds `peer` on her VPCs (tenant-edit, aggregated into admin): accepted; bob's half
    // in t2 likewise.
    e.create_ok(alice, "t1", &peering).await;
    e.create_ok(
        bob,
        "t2",
        &obj(
            "VPCPeering",
            "to-v1",
            &json!({ "vpcRef": { "name": "w1" }, "peerRef": { "namespace": "t1", "name": "v1" } }),
        ),
    )
    .await;
    let names = ok(
        s,
        alice,
        &["get", "vpcbindings,vpcpeerings", "-n", "t1", "-o", "name"],
    )
    .await;
    assert_eq!(
        names.lines().collect::<Vec<_>>(),
        [
            "vpcbinding.sdn.cozystack.io/b-foreign",
            "vpcbinding.sdn.cozystack.io/b-own",
            "vpcpeering.sdn.cozystack.io/to-w1"
        ],
        "{names}"
    );
}

/// Acceptance: ResourceQuota `count/vpcs.sdn.cozystack.io: 2` → the second VPC is allowed, the
/// third refused with Kubernetes' exact message, `status.used` shows 2, and deleting one lets
/// the next create through. QUOTA-01..QUOTA-05.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_count_vpcs_2_second_allowed_third_refused_used_2_replenished_quota01_quota02_quota03_quota05()
{
    let e = tenants().await;
    let (s, admin, alice, bob) = (&e.s, &e.admin, &e.alice, &e.bob);
    let key = "count/vpcs.sdn.cozystack.io";
    let q = json!({ "apiVersion": "v1", "kind": "ResourceQuota", "metadata": { "name": "sdn", "namespace": "t1" },
        "spec": { "hard": { key: "2" } } });
    ok(
        s,
        admin,
        &[
            "create",
            "--validate=false",
            "-f",
            &manifest(e.dir.path(), "q.json", &q),
        ],
    )
    .await;
    // The server fills in a new quota's status for the resources it counts (QUOTA-04: until
    // then a create would be "status unknown").
    eventually("the quota's status to be initialized", || async {
        let q = e.quota("t1", "sdn").await;
        q["status"]["hard"][key] == "2" && q["status"]["used"][key] == "0"
    })
    .await;

    e.create_ok(alice, "t1", &vpc("a", "10.1.0.0/24")).await;
    e.create_ok(alice, "t1", &vpc("b", "10.1.1.0/24")).await;
    let err = e.create_fails(alice, "t1", &vpc("c", "10.1.2.0/24")).await;
    assert!(
        err.contains(
            "vpcs.sdn.cozystack.io \"c\" is forbidden: exceeded quota: sdn, requested: count/vpcs.sdn.cozystack.io=1, used: count/vpcs.sdn.cozystack.io=2, limited: count/vpcs.sdn.cozystack.io=2"
        ),
        "{err}"
    );
    assert!(err.contains("Error from server (Forbidden)"), "{err}");
    let q = e.quota("t1", "sdn").await;
    assert_eq!(q["status"]["used"][key], "2", "{q}");
    assert_eq!(q["status"]["hard"][key], "2", "{q}");
    // A dry run is checked but charges nothing.
    let out = s
        .kubectl(
            alice,
            &[
                "create",
                "--dry-run=server",
                "-n",
                "t1",
                "-f",
                &manifest(e.dir.path(), "d.json", &vpc("d", "10.1.3.0/24")),
            ],
        )
        .await;
    assert!(!out.status.success(), "a dry run over quota is refused too");
    // The tenant sees the quota's numbers as kubectl prints them.
    let desc = ok(s, alice, &["get", "quota", "sdn", "-n", "t1", "-o", "json"]).await;
    assert!(desc.contains("\"count/vpcs.sdn.cozystack.io\": \"2\""), "{desc}");
    // Other namespaces are not limited.
    for n in ["x", "y", "z"] {
        e.create_ok(bob, "t2", &vpc(n, "10.2.0.0/24")).await;
    }

    // Deleting one lets the next create through once usage is recounted (QUOTA-05).
    ok(s, alice, &["delete", "vpc", "a", "-n", "t1"]).await;
    eventually("usage to drop to 1", || async {
        e.quota("t1", "sdn").await["status"]["used"][key] == "1"
    })
    .await;
    e.create_ok(alice, "t1", &vpc("c", "10.1.2.0/24")).await;
    let q = e.quota("t1", "sdn").await;
    assert_eq!(q["status"]["used"][key], "2", "{q}");
    let err = e.create_fails(alice, "t1", &vpc("d", "10.1.3.0/24")).await;
    assert!(
        err.contains("exceeded quota: sdn, requested: count/vpcs.sdn.cozystack.io=1, used: count/vpcs.sdn.cozystack.io=2, limited: count/vpcs.sdn.cozystack.io=2"),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------------
// Security (direct HTTPS to cozyplane)

/// X-Remote-User without a client certificate, with a certificate from another CA, with a
/// request-header certificate whose CN is not allowed, or with a client-CA certificate: never
/// that user. FP-03 (control), FP-04, FP-05.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x_remote_user_without_cert_other_ca_or_disallowed_cn_is_not_that_user_fp03_fp04_fp05() {
    let e = tenants().await;
    e.create_ok(&e.alice, "t1", &vpc("v1", "10.1.0.0/24")).await;
    let list = format!("{GV}/namespaces/t1/vpcs");
    let alice = remote(ALICE, "t1");
    let alice = borrow(&alice);
    let masters = [
        ("x-remote-user", "system:admin"),
        ("x-remote-group", "system:masters"),
    ];

    // Control (FP-03): the front proxy's certificate makes the headers count.
    let fp = e.s.shared.pki.front_proxy_client.clone();
    let r = e.direct(Some(&fp), "GET", &list, &alice, None).await;
    assert_eq!(r.code, 200, "{r:?}");
    assert!(r.body.contains("\"v1\""), "{r:?}");

    // FP-04: no client certificate → the headers are ignored. Go then evaluates
    // system:anonymous (403); this server admits anonymous requests only to the always-allow
    // paths and answers 401 elsewhere (authz::authn). Either way: never that user.
    for h in [&alice[..], &masters[..]] {
        let r = e.direct(None, "GET", &list, h, None).await;
        not_that_user(&r, &["system:anonymous"]);
        let r = e
            .direct(None, "POST", &list, h, Some(&vpc("spoofed", "10.9.0.0/24")))
            .await;
        not_that_user(&r, &["system:anonymous"]);
    }
    let r = e
        .direct(None, "GET", &format!("{GV}/ports"), &masters, None)
        .await;
    not_that_user(&r, &["system:anonymous"]);

    // Another CA, same CN as the real front proxy → not authenticated.
    let (_, other) = pki::untrusted_client_cert("front-proxy-client", &[]).expect("mint");
    for h in [&alice[..], &masters[..]] {
        let r = e.direct(Some(&other), "GET", &list, h, None).await;
        not_that_user(&r, &[]);
    }

    // FP-05: the request-header CA but a CN outside requestheader-allowed-names → 401.
    let evil =
        e.s.shared
            .pki
            .client_cert(Ca::FrontProxy, "evil-proxy", &[])
            .expect("mint");
    for h in [&alice[..], &masters[..]] {
        let r = e.direct(Some(&evil), "GET", &list, h, None).await;
        assert_eq!(r.code, 401, "{r:?}");
        let v = r.json();
        assert_eq!(
            (&v["kind"], &v["status"], &v["reason"], &v["code"], &v["message"]),
            (
                &json!("Status"),
                &json!("Failure"),
                &json!("Unauthorized"),
                &json!(401),
                &json!("Unauthorized")
            ),
            "{r:?}"
        );
    }

    // A client-CA certificate is a user, not a front proxy: the headers do not change who it is.
    let eve = e.s.shared.pki.client_cert(Ca::Cluster, "eve", &[]).expect("mint");
    let r = e.direct(Some(&eve), "GET", &list, &alice, None).await;
    assert_eq!(r.code, 403, "{r:?}");
    let m = r.json()["message"].as_str().unwrap_or_default().to_string();
    assert!(m.contains("User \"eve\"") && !m.contains(ALICE), "{r:?}");
}

/// `r` refuses the request (401, or 403 for one of `allowed_users`) and names neither alice nor
/// system:admin.
fn not_that_user(r: &Reply, allowed_users: &[&str]) {
    assert!(matches!(r.code, 401 | 403), "{r:?}");
    let m = r.json()["message"].as_str().unwrap_or_default().to_string();
    assert!(!m.contains(ALICE) && !m.contains("system:admin"), "{r:?}");
    if r.code == 403 {
        assert!(
            allowed_users.iter().any(|u| m.contains(&format!("User \"{u}\""))),
            "{r:?}"
        );
    } else {
        assert_eq!(r.json()["reason"], "Unauthorized", "{r:?}");
    }
}

/// An expired or revoked token → 401: alice's token works, is removed from the stand-in's token
/// file, and then both the stand-in and our server (once its TokenReview cache expires) answer
/// 401. AUTH-01, AUTH-02.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoked_token_is_401_auth01_auth02() {
    let e = tenants().await;
    let list = format!("{GV}/namespaces/t1/vpcs");
    let bearer = [("authorization", "Bearer alice-token")];
    let before = e.s.reviews("TokenReview");
    let r = e.direct(None, "GET", &list, &bearer, None).await;
    assert_eq!(r.code, 200, "the token is alice's (via TokenReview): {r:?}");
    assert!(e.s.reviews("TokenReview") > before);
    let r = e
        .direct(None, "GET", &format!("{GV}/namespaces/t2/vpcs"), &bearer, None)
        .await;
    assert_eq!(r.code, 403, "{r:?}");
    assert!(r.body.contains(ALICE), "{r:?}");
    ok(&e.s, &e.alice, &["get", "vpcs", "-n", "t1"]).await;

    // An unknown token is never anonymous: 401 (AUTH-02).
    let r = e
        .direct(
            None,
            "GET",
            &list,
            &[("authorization", "Bearer nobody-token")],
            None,
        )
        .await;
    assert_eq!(r.code, 401, "{r:?}");
    assert_eq!(r.json()["reason"], "Unauthorized", "{r:?}");

    e.s.revoke_token("alice-token");
    let file = std::fs::read_to_string(&e.s.token_file).expect("token file");
    assert!(
        !file.contains("alice-token") && file.contains("bob-token"),
        "{file}"
    );
    let err = fails(&e.s, &e.alice, &["get", "vpcs", "-n", "t1"]).await;
    assert!(err.contains("Unauthorized"), "{err}");
    // Polled with a bound: the server may serve its cached TokenReview for a moment.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let r = loop {
        let r = e.direct(None, "GET", &list, &bearer, None).await;
        assert!(
            matches!(r.code, 200 | 401),
            "a token is either still cached or refused: {r:?}"
        );
        if r.code == 401 {
            break r;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the revoked token is still accepted: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(r.json()["reason"], "Unauthorized", "{r:?}");
    // ... and stays refused; bob is unaffected.
    let r = e
        .direct(None, "POST", &list, &bearer, Some(&vpc("late", "10.1.9.0/24")))
        .await;
    assert_eq!(r.code, 401, "{r:?}");
    let r = e
        .direct(
            None,
            "GET",
            &format!("{GV}/namespaces/t2/vpcs"),
            &[("authorization", "Bearer bob-token")],
            None,
        )
        .await;
    assert_eq!(r.code, 200, "{r:?}");
}

/// The SubjectAccessReview endpoint down (the stand-in stopped, connections and all) → writes
/// fail closed with 403/503, never 2xx; system:masters (no SAR needed) is still served.
/// AUTH-04, AUTH-08.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sar_endpoint_down_fails_closed_never_allowed_auth04_auth08() {
    let e = tenants().await;
    let ca = e.server_ca().await;
    let fp = e.s.shared.pki.front_proxy_client.clone();
    let admin = e.s.shared.pki.admin.clone();
    let url = e.server.url.clone();
    let list = format!("{GV}/namespaces/t1/vpcs");
    let alice = remote(ALICE, "t1");
    let alice = borrow(&alice);
    let r = https(
        &url,
        &ca,
        Some(&fp),
        "POST",
        &list,
        &alice,
        Some(&vpc("before", "10.1.0.0/24")),
    )
    .await
    .expect("request");
    assert_eq!(r.code, 201, "allowed while the SAR endpoint is up: {r:?}");

    let Env { s, server, .. } = e;
    drop(s);
    // Past the server's 1 s decision caches (start_cozyplane's TTLs): from here on only a fresh
    // SubjectAccessReview could allow anything.
    tokio::time::sleep(Duration::from_secs(3)).await;

    let writes = [
        ("POST", list.clone(), Some(vpc("after", "10.1.1.0/24"))),
        ("DELETE", format!("{list}/before"), None),
        (
            "POST",
            format!("{GV}/namespaces/t1/vpcbindings"),
            Some(obj(
                "VPCBinding",
                "b",
                &json!({ "vpcRef": { "namespace": "t1", "name": "before" } }),
            )),
        ),
    ];
    for (method, path, body) in &writes {
        let r = https(&url, &ca, Some(&fp), method, path, &alice, body.as_ref())
            .await
            .expect("our server answers");
        assert!(
            matches!(r.code, 403 | 503),
            "{method} {path} with the SAR endpoint down: {r:?}"
        );
    }
    let r = https(&url, &ca, Some(&fp), "GET", &list, &alice, None)
        .await
        .expect("our server answers");
    assert!(matches!(r.code, 403 | 503), "{r:?}");
    // A bearer token cannot be reviewed either: not 2xx.
    let r = https(
        &url,
        &ca,
        None,
        "POST",
        &list,
        &[("authorization", "Bearer alice-token")],
        Some(&vpc("tok", "10.1.2.0/24")),
    )
    .await
    .expect("our server answers");
    assert!(matches!(r.code, 401 | 403 | 503), "{r:?}");

    // system:masters needs no SAR (AUTH-08): the object written before is still there.
    let r = https(&url, &ca, Some(&admin), "GET", &list, &[], None)
        .await
        .expect("our server answers");
    assert_eq!(r.code, 200, "{r:?}");
    let list = r.json();
    let names: Vec<&str> = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|i| i["metadata"]["name"].as_str())
        .collect();
    assert_eq!(names, ["before"], "nothing was written while refused: {r:?}");
    drop(server);
}

// ---------------------------------------------------------------------------------------------
// Availability and discovery

/// The aggregator's availability check (GET /apis/sdn.cozystack.io/v1alpha1 as
/// system:kube-aggregator in system:masters) answers 200 within the aggregator's 5 s budget and
/// without a SubjectAccessReview; the aggregated discovery through the stand-in lists our group.
/// AV-01, AV-02, AV-05, AUTH-08, AUTH-10, DISC-05, DISC-09.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn availability_check_200_as_masters_and_discovery_lists_our_group_av01_av05_auth08_auth10_disc05_disc09()
 {
    let e = tenants().await;
    let (s, admin) = (&e.s, &e.admin);
    let fp = s.shared.pki.front_proxy_client.clone();
    let aggregator = [
        ("x-remote-user", "system:kube-aggregator"),
        ("x-remote-group", "system:masters"),
    ];

    // AV-01: the probe, exactly as the aggregator sends it; AV-05's 5 s cut is the bound.
    let sars = s.reviews("SubjectAccessReview");
    // As the aggregator (front proxy) and with a client certificate in system:masters.
    for (client, h) in [(&fp, &aggregator[..]), (&s.shared.pki.admin, &[][..])] {
        let r = tokio::time::timeout(Duration::from_secs(5), e.direct(Some(client), "GET", GV, h, None))
            .await
            .expect("the availability check answers within the aggregator's timeout");
        assert_eq!(r.code, 200, "{r:?}");
        let v = r.json();
        assert_eq!(v["kind"], "APIResourceList", "{r:?}");
        assert_eq!(v["groupVersion"], "sdn.cozystack.io/v1alpha1");
        assert!(
            v["resources"]
                .as_array()
                .is_some_and(|a| a.iter().any(|r| r["name"] == "vpcs")),
            "{r:?}"
        );
    }
    assert_eq!(
        s.reviews("SubjectAccessReview"),
        sars,
        "system:masters is allowed without a SubjectAccessReview (AUTH-08)"
    );
    // The stand-in's own availability controller agrees.
    let cond = ok(
        s,
        admin,
        &[
            "get",
            "apiservice",
            "v1alpha1.sdn.cozystack.io",
            "-o",
            "jsonpath={.status.conditions[0]}",
        ],
    )
    .await;
    let cond: Value = serde_json::from_str(&cond).expect("condition JSON");
    assert_eq!(
        (&cond["type"], &cond["status"], &cond["reason"], &cond["message"]),
        (
            &json!("Available"),
            &json!("True"),
            &json!("Passed"),
            &json!("all checks passed")
        )
    );

    // AUTH-10: the aggregator's other internal calls.
    let r = e
        .direct(
            Some(&fp),
            "GET",
            "/apis",
            &[("accept", V2), aggregator[0], aggregator[1]],
            None,
        )
        .await;
    assert_eq!(r.code, 200, "{r:?}");
    assert!(r.content_type.starts_with(V2), "{r:?}");
    let r = e
        .direct(
            Some(&fp),
            "GET",
            GV,
            &[("x-remote-user", "system:kube-aggregator")],
            None,
        )
        .await;
    assert_eq!(r.code, 200, "legacy discovery fallback without groups: {r:?}");
    let r = e
        .direct(
            Some(&fp),
            "GET",
            "/openapi/v2",
            &[("x-remote-user", "system:aggregator")],
            None,
        )
        .await;
    assert_eq!(r.code, 200, "OpenAPI download as system:aggregator: {}", r.code);

    // Discovery through the stand-in: legacy ...
    let apis = ok(s, admin, &["get", "--raw", "/apis"]).await;
    let v: Value = serde_json::from_str(&apis).expect("APIGroupList");
    let ours = v["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .find(|g| g["name"] == "sdn.cozystack.io")
        .unwrap_or_else(|| panic!("sdn.cozystack.io in {apis}"));
    assert_eq!(
        ours["preferredVersion"]["groupVersion"],
        "sdn.cozystack.io/v1alpha1"
    );
    let gv = ok(s, &e.alice, &["get", "--raw", GV]).await;
    assert!(gv.contains("\"name\":\"vpcs\""), "{gv}");
    // ... and aggregated (DISC-05, DISC-09): as the admin and as a tenant.
    for client in [Some(&s.shared.pki.admin), None] {
        let h: Vec<(&str, &str)> = match client {
            Some(_) => vec![("accept", V2)],
            None => vec![("accept", V2), ("authorization", "Bearer alice-token")],
        };
        let r = https(&s.url, &s.shared.pki.ca, client, "GET", "/apis", &h, None)
            .await
            .expect("stand-in answers");
        assert_eq!(r.code, 200, "{r:?}");
        assert!(r.content_type.starts_with(V2), "{r:?}");
        let v = r.json();
        assert_eq!(v["kind"], "APIGroupDiscoveryList");
        let item = v["items"]
            .as_array()
            .expect("items")
            .iter()
            .find(|i| i["metadata"]["name"] == "sdn.cozystack.io")
            .unwrap_or_else(|| panic!("sdn.cozystack.io in {}", r.body));
        let version = &item["versions"][0];
        assert_eq!(version["version"], "v1alpha1");
        assert_eq!(version["freshness"], "Current", "{item}");
        let vpcs = version["resources"]
            .as_array()
            .expect("resources")
            .iter()
            .find(|r| r["resource"] == "vpcs")
            .unwrap_or_else(|| panic!("vpcs in {item}"));
        assert_eq!(vpcs["scope"], "Namespaced");
        assert!(vpcs["responseKind"].is_object(), "DISC-07: {vpcs}");
    }
    // kubectl itself consumes the aggregated document.
    let res = ok(
        s,
        &e.alice,
        &["api-resources", "--api-group=sdn.cozystack.io", "-o", "name"],
    )
    .await;
    for r in ["vpcs", "vpcbindings", "ports", "hostfirewalls"] {
        assert!(res.contains(&format!("{r}.sdn.cozystack.io")), "{res}");
    }
}
