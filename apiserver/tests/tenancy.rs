//! Tenancy end to end against a fake kube-apiserver: delegated authorization of the virtual verbs
//! `export`/`peer`, namespace lifecycle, ResourceQuota charge/refuse/replenish and the APIService
//! registration.
//!
//! The fake (plain axum over TLS on loopback) answers SubjectAccessReviews from a table, serves
//! namespaces, resourcequotas (with optimistic `resourceVersion`s) and apiservices from memory.
//! The server runs standalone (`--standalone`, so the test's client CA is trusted) with
//! `--authorization-kubeconfig` and `--kubeconfig` pointing at the fake.

mod common;

use std::time::Duration;

use base64::Engine as _;
use cozyplane_apiserver::server::apiservice::{self, CaSource, Registration};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use serde_json::{Value, json};

use common::*;

#[tokio::test]
async fn virtual_verbs_export_and_peer() {
    let s = setup().await;
    s.fake.add_namespace("t1", false);
    s.fake.add_namespace("t2", false);
    grant_tenant(&s.fake, "alice", "t1");
    s.fake.allow("alice", "export", "vpcs", "t1");
    let alice = s.users.client("alice").await;

    call(&alice, "POST", &path("t1", "vpcs"), Some(vpc("v")))
        .await
        .unwrap();
    let binding = |ns: &str| json!({"apiVersion":"sdn.cozystack.io/v1alpha1","kind":"VPCBinding","metadata":{"name":"b1"},"spec":{"vpcRef":{"namespace":ns,"name":"v"}}});
    let err = call(&alice, "POST", &path("t1", "vpcbindings"), Some(binding("t2")))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        (
            403,
            "vpcbindings.sdn.cozystack.io \"b1\" is forbidden: User \"alice\" cannot export resource \"vpcs\" in API group \"sdn.cozystack.io\" in the namespace \"t2\"".into()
        )
    );
    call(&alice, "POST", &path("t1", "vpcbindings"), Some(binding("t1")))
        .await
        .unwrap();

    let peering = json!({"apiVersion":"sdn.cozystack.io/v1alpha1","kind":"VPCPeering","metadata":{"name":"p"},"spec":{"vpcRef":{"name":"v"},"peerRef":{"namespace":"t2","name":"w"}}});
    let err = call(&alice, "POST", &path("t1", "vpcpeerings"), Some(peering.clone()))
        .await
        .unwrap_err();
    assert_eq!(err.0, 403);
    assert!(err.1.contains("cannot peer resource \"vpcs\""), "{}", err.1);
    s.fake.allow("alice", "peer", "vpcs", "t1");
    call(&alice, "POST", &path("t1", "vpcpeerings"), Some(peering))
        .await
        .unwrap();

    // Not granted at all: the authorization layer refuses before admission.
    let err = call(&alice, "GET", &path("t2", "vpcs"), None).await.unwrap_err();
    assert_eq!(err.0, 403);
    let err = call(&alice, "GET", "/apis/sdn.cozystack.io/v1alpha1/ports", None)
        .await
        .unwrap_err();
    assert_eq!(err.0, 403);

    // SubjectAccessReview failing for the virtual verb → fail closed.
    *s.fake.state.sar_down.lock().unwrap() = true;
    let b2 = json!({"apiVersion":"sdn.cozystack.io/v1alpha1","kind":"VPCBinding","metadata":{"name":"b2"},"spec":{"vpcRef":{"namespace":"t1","name":"v"}}});
    let err = call(&alice, "POST", &path("t1", "vpcbindings"), Some(b2))
        .await
        .unwrap_err();
    assert_eq!(err.0, 403, "{err:?}");
    assert!(err.1.contains("could not be reached"), "{}", err.1);
}

#[tokio::test]
async fn authentication_needs_a_trusted_certificate() {
    let s = setup().await;
    s.fake.add_namespace("t1", false);
    grant_tenant(&s.fake, "alice", "t1");
    // No certificate: anonymous, only health paths.
    let anon = s.users.client_with(None, "").await;
    assert_eq!(
        call(&anon, "GET", &path("t1", "vpcs"), None).await.unwrap_err().0,
        401
    );
    // A certificate of another CA is not alice.
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let other = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
    let mallory = s.users.client_with(Some(&other), "alice").await;
    assert_eq!(
        call(&mallory, "GET", &path("t1", "vpcs"), None)
            .await
            .unwrap_err()
            .0,
        401
    );
    // X-Remote-User without a front-proxy certificate is ignored.
    let req = axum::http::Request::builder()
        .uri(path("t1", "vpcs"))
        .header("x-remote-user", "alice")
        .header("x-remote-group", "system:masters")
        .body(Vec::new())
        .unwrap();
    match anon.request::<Value>(req).await {
        Err(kube::Error::Api(st)) => assert_eq!(st.code, 401),
        other => panic!("expected 401, got {other:?}"),
    }
    let alice = s.users.client("alice").await;
    call(&alice, "GET", &path("t1", "vpcs"), None).await.unwrap();
}

#[tokio::test]
async fn namespace_lifecycle() {
    let s = setup().await;
    s.fake.add_namespace("gone", true);
    for ns in ["nope", "gone"] {
        grant_tenant(&s.fake, "alice", ns);
    }
    let alice = s.users.client("alice").await;
    assert_eq!(
        call(&alice, "POST", &path("nope", "vpcs"), Some(vpc("v")))
            .await
            .unwrap_err(),
        (404, "namespaces \"nope\" not found".into())
    );
    assert_eq!(
        call(&alice, "POST", &path("gone", "vpcs"), Some(vpc("v"))).await.unwrap_err(),
        (
            403,
            "vpcs.sdn.cozystack.io \"v\" is forbidden: unable to create new content in namespace gone because it is being terminated".into()
        )
    );
    // Namespace deletion: the namespace controller's deletecollection empties every namespaced kind.
    s.fake.add_namespace("t1", false);
    grant_tenant(&s.fake, "alice", "t1");
    s.fake.allow("alice", "deletecollection", "vpcs", "t1");
    s.fake.allow("alice", "export", "vpcs", "t1");
    call(&alice, "POST", &path("t1", "vpcs"), Some(vpc("a")))
        .await
        .unwrap();
    call(&alice, "POST", &path("t1", "vpcs"), Some(vpc("b")))
        .await
        .unwrap();
    let gone = call(
        &alice,
        "DELETE",
        &path("t1", "vpcs"),
        Some(json!({"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Background"})),
    )
    .await
    .unwrap();
    assert_eq!(gone["items"].as_array().unwrap().len(), 2);
    let left = call(&alice, "GET", &path("t1", "vpcs"), None).await.unwrap();
    assert!(left["items"].as_array().unwrap().is_empty());
}

async fn wait_for(mut f: impl FnMut() -> bool, what: &str) {
    for _ in 0..100 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test]
async fn quota_charges_refuses_and_replenishes() {
    let s = setup().await;
    s.fake.add_namespace("t1", false);
    grant_tenant(&s.fake, "alice", "t1");
    const R: &str = "count/vpcs.sdn.cozystack.io";
    s.fake.add_quota("t1", "q1", &json!({ R: "2", "pods": "10" }));
    // The reconciler fills in status.hard/used for our resource.
    wait_for(
        || s.fake.quota("t1", "q1")["status"]["used"][R] == "0",
        "quota initialization",
    )
    .await;
    let alice = s.users.client("alice").await;
    call(&alice, "POST", &path("t1", "vpcs"), Some(vpc("v1")))
        .await
        .unwrap();
    // dryRun charges nothing.
    call(
        &alice,
        "POST",
        &format!("{}?dryRun=All", path("t1", "vpcs")),
        Some(vpc("dry")),
    )
    .await
    .unwrap();
    assert_eq!(s.fake.quota("t1", "q1")["status"]["used"][R], "1");
    call(&alice, "POST", &path("t1", "vpcs"), Some(vpc("v2")))
        .await
        .unwrap();
    let err = call(&alice, "POST", &path("t1", "vpcs"), Some(vpc("v3")))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        (
            403,
            "vpcs.sdn.cozystack.io \"v3\" is forbidden: exceeded quota: q1, requested: count/vpcs.sdn.cozystack.io=1, used: count/vpcs.sdn.cozystack.io=2, limited: count/vpcs.sdn.cozystack.io=2".into()
        )
    );
    let q = s.fake.quota("t1", "q1");
    assert_eq!(q["status"]["used"][R], "2");
    assert_eq!(q["status"]["hard"][R], "2");
    assert!(
        q["status"]["used"].get("pods").is_none(),
        "only our resources are touched"
    );
    // Deleting one lets the next through once the reconciler recounted.
    call(&alice, "DELETE", &format!("{}/v1", path("t1", "vpcs")), None)
        .await
        .unwrap();
    wait_for(
        || s.fake.quota("t1", "q1")["status"]["used"][R] == "1",
        "recount after delete",
    )
    .await;
    call(&alice, "POST", &path("t1", "vpcs"), Some(vpc("v3")))
        .await
        .unwrap();
}

#[tokio::test]
async fn apiservice_is_created_then_patched() {
    let fake = FakeApiserver::start().await;
    let client = cozyplane_apiserver::options::kube_client(Some(&fake.kubeconfig))
        .await
        .unwrap();
    let mut r = Registration {
        service: "cozy-sdn/cozyplane-apiserver".parse().unwrap(),
        port: 443,
        group_priority_minimum: 1000,
        version_priority: 15,
        ca: CaSource::ServingCert,
    };
    assert!(apiservice::ensure(client.clone(), &r, "CA1").await.unwrap());
    let name = "v1alpha1.sdn.cozystack.io";
    let o = fake.state.apiservices.lock().unwrap()[name].clone();
    assert_eq!(o["spec"]["service"]["name"], "cozyplane-apiserver");
    assert_eq!(o["spec"]["groupPriorityMinimum"], 1000);
    assert_eq!(
        o["spec"]["caBundle"],
        base64::engine::general_purpose::STANDARD.encode("CA1")
    );
    r.version_priority = 20;
    r.ca = CaSource::CertManager("cozy-sdn/cozyplane-tls".into());
    assert!(!apiservice::ensure(client, &r, "CA2").await.unwrap());
    let o = fake.state.apiservices.lock().unwrap()[name].clone();
    assert_eq!(o["spec"]["versionPriority"], 20);
    assert_eq!(
        o["metadata"]["annotations"]["cert-manager.io/inject-ca-from-secret"],
        "cozy-sdn/cozyplane-tls"
    );
}
