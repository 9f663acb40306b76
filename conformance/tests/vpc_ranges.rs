//! Issue 11 item 5: several ranges per VPC, through the API. Port IPAM fills the ranges of a
//! family in the listed order; a range that still holds addresses cannot be removed (422 with
//! the field of the range); peering's overlap test covers every range.

use cozyplane_apis::v1alpha1::{Port, VPC, VPCPeering, VPCSpec};
use cozyplane_apiserver::alloc::scan::scan;
use cozyplane_conformance::objects::{delete_and_release, peering, port, wait_for};
use cozyplane_conformance::{Backend, TestServer};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::wait::Condition as WaitCondition;
use serde_json::{Value, json};

fn vpc(ns: &str, name: &str, cidrs: &[&str]) -> VPC {
    let mut v = VPC::new(
        name,
        VPCSpec {
            cidrs: cidrs.iter().map(ToString::to_string).collect(),
            mtu: 0,
            dhcp: None,
            dns64: false,
        },
    );
    v.metadata.namespace = Some(ns.into());
    v
}

fn status_of(e: &kube::Error) -> (u16, String) {
    match e {
        kube::Error::Api(s) => (s.code, s.message.clone()),
        other => (0, other.to_string()),
    }
}

async fn assert_sound(s: &TestServer) {
    let r = scan(&s.storage).await.unwrap();
    assert!(r.problems.is_empty(), "invariants: {:#?}", r.problems);
}

/// `PATCH` of a VPC's ranges as raw JSON: the status code and the body (a `Status` on error).
async fn patch_cidrs(s: &TestServer, name: &str, cidrs: &[&str]) -> (u16, Value) {
    let body = json!({"spec": {"cidrs": cidrs}}).to_string();
    let (code, _, text) = s
        .raw(
            "PATCH",
            &format!("/apis/sdn.cozystack.io/v1alpha1/namespaces/default/vpcs/{name}"),
            &[("content-type", "application/merge-patch+json")],
            Some(&body),
        )
        .await;
    (code, serde_json::from_str(&text).unwrap_or(Value::Null))
}

#[tokio::test]
async fn ranges_01_ipam_fills_the_ranges_of_a_family_in_order() {
    let s = TestServer::start(Backend::Embedded).await;
    let c = s.client().await;
    let vpcs: Api<VPC> = Api::namespaced(c.clone(), "default");
    let ports: Api<Port> = Api::all(c.clone());
    let pp = PostParams::default();
    // Range 1 holds one address (.2), range 2 five (.2-.6); two IPv6 ranges likewise.
    vpcs.create(
        &pp,
        &vpc(
            "default",
            "r",
            &["10.0.0.0/30", "fd00::/126", "10.1.0.0/29", "fd01::/120"],
        ),
    )
    .await
    .unwrap();
    let mut got = Vec::new();
    for _ in 0..6 {
        got.push(ports.create(&pp, &port("r", "")).await.unwrap().spec.ip);
    }
    assert_eq!(
        got,
        [
            "10.0.0.2", "10.1.0.2", "10.1.0.3", "10.1.0.4", "10.1.0.5", "10.1.0.6"
        ]
    );
    let e = ports.create(&pp, &port("r", "")).await.unwrap_err();
    let (code, msg) = status_of(&e);
    assert_eq!(code, 507, "{msg}");
    assert!(msg.contains("10.0.0.0/30, 10.1.0.0/29"), "{msg}");
    // A freed address of range 1 is taken before anything else.
    let first = ports.list(&Default::default()).await.unwrap();
    let p2 = first
        .items
        .iter()
        .find(|p| p.spec.ip == "10.0.0.2")
        .unwrap()
        .metadata
        .name
        .clone()
        .unwrap();
    let p4 = first
        .items
        .iter()
        .find(|p| p.spec.ip == "10.1.0.4")
        .unwrap()
        .metadata
        .name
        .clone()
        .unwrap();
    // Released as the node's agent would after severing (the sever finalizer).
    delete_and_release(&ports, &p4).await;
    delete_and_release(&ports, &p2).await;
    assert_eq!(
        ports.create(&pp, &port("r", "")).await.unwrap().spec.ip,
        "10.0.0.2"
    );
    assert_eq!(
        ports.create(&pp, &port("r", "")).await.unwrap().spec.ip,
        "10.1.0.4"
    );
    // The other family: its own ranges, in their order.
    let mut got6 = Vec::new();
    for _ in 0..3 {
        got6.push(ports.create(&pp, &port("r", "::")).await.unwrap().spec.ip);
    }
    assert_eq!(got6, ["fd00::2", "fd00::3", "fd01::2"]);
    // An exact address in a secondary range is accepted as it is.
    let p = ports.create(&pp, &port("r", "fd01::77")).await.unwrap();
    assert_eq!(p.spec.ip, "fd01::77");
    assert_sound(&s).await;
}

#[tokio::test]
async fn ranges_02_a_used_range_cannot_be_removed() {
    let s = TestServer::start(Backend::Embedded).await;
    let c = s.client().await;
    let vpcs: Api<VPC> = Api::namespaced(c.clone(), "default");
    let ports: Api<Port> = Api::all(c.clone());
    let pp = PostParams::default();
    vpcs.create(
        &pp,
        &vpc("default", "u", &["10.0.0.0/30", "10.1.0.0/24", "10.2.0.0/24"]),
    )
    .await
    .unwrap();
    let a = ports.create(&pp, &port("u", "")).await.unwrap();
    let b = ports.create(&pp, &port("u", "")).await.unwrap();
    assert_eq!((a.spec.ip.as_str(), b.spec.ip.as_str()), ("10.0.0.2", "10.1.0.2"));
    let b_name = b.metadata.name.clone().unwrap();

    // Removing range 2, which holds b: 422, the cause at spec.cidrs[1] naming the Port.
    let (code, st) = patch_cidrs(&s, "u", &["10.0.0.0/30", "10.2.0.0/24"]).await;
    assert_eq!(code, 422, "{st}");
    assert_eq!(st["reason"], "Invalid", "{st}");
    let causes = st["details"]["causes"].as_array().unwrap();
    assert_eq!(causes.len(), 1, "{st}");
    assert_eq!(causes[0]["field"], "spec.cidrs[1]", "{st}");
    assert_eq!(causes[0]["reason"], "FieldValueForbidden", "{st}");
    let msg = causes[0]["message"].as_str().unwrap();
    assert!(msg.contains(&b_name) && msg.contains("10.1.0.0/24"), "{msg}");
    // Shrinking it past b is refused the same way; so is a PUT that drops it.
    let (code, st) = patch_cidrs(&s, "u", &["10.0.0.0/30", "10.1.0.128/25", "10.2.0.0/24"]).await;
    assert_eq!(code, 422, "{st}");
    let mut cur = vpcs.get("u").await.unwrap();
    cur.spec.cidrs = vec!["10.1.0.0/24".into(), "10.2.0.0/24".into()];
    let e = vpcs.replace("u", &pp, &cur).await.unwrap_err();
    let (code, msg) = status_of(&e);
    assert_eq!(code, 422, "{msg}");
    assert!(msg.contains("spec.cidrs[0]"), "{msg}");
    assert_eq!(
        vpcs.get("u").await.unwrap().spec.cidrs,
        ["10.0.0.0/30", "10.1.0.0/24", "10.2.0.0/24"],
        "nothing was written"
    );

    // The unused range 3 goes; reordering keeps every address in a range.
    let (code, st) = patch_cidrs(&s, "u", &["10.1.0.0/24", "10.0.0.0/30"]).await;
    assert_eq!(code, 200, "{st}");
    // A sixth IPv4 range is refused at its index.
    let six = [
        "10.1.0.0/24",
        "10.0.0.0/30",
        "10.3.0.0/24",
        "10.4.0.0/24",
        "10.5.0.0/24",
        "10.6.0.0/24",
    ];
    let (code, st) = patch_cidrs(&s, "u", &six).await;
    assert_eq!(code, 422, "{st}");
    assert_eq!(st["details"]["causes"][0]["field"], "spec.cidrs[5]", "{st}");
    assert!(patch_cidrs(&s, "u", &six[..5]).await.0 == 200);

    // Once b is gone, its range may go too.
    delete_and_release(&ports, &b_name).await;
    let (code, st) = patch_cidrs(&s, "u", &["10.0.0.0/30"]).await;
    assert_eq!(code, 200, "{st}");
    // Server-side apply and dry runs go through the same check.
    let (code, st) = patch_cidrs(&s, "u", &["10.9.0.0/24"]).await;
    assert_eq!(code, 422, "a's range still holds a: {st}");
    let apply = vpc("default", "u", &["10.9.0.0/24"]);
    let e = vpcs
        .patch(
            "u",
            &PatchParams::apply("ranges-test").force(),
            &Patch::Apply(&json!({
                "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "VPC",
                "metadata": {"name": "u", "namespace": "default"},
                "spec": apply.spec,
            })),
        )
        .await
        .unwrap_err();
    assert_eq!(status_of(&e).0, 422);
    assert_sound(&s).await;
}

/// `CIDRsDisjoint` is `disjoint` and the peering is matched.
fn disjoint_is(disjoint: &'static str) -> impl WaitCondition<VPCPeering> {
    move |o: Option<&VPCPeering>| {
        o.and_then(|p| p.status.as_ref()).is_some_and(|s| {
            let c = |ty: &str, v: &str| s.conditions.iter().any(|c| c.type_ == ty && c.status == v);
            c("PeerMatched", "True") && c("CIDRsDisjoint", disjoint)
        })
    }
}

#[tokio::test]
async fn ranges_03_peering_overlap_on_a_second_range_stays_pending() {
    let s = TestServer::start(Backend::Embedded).await;
    let c = s.client().await;
    let pp = PostParams::default();
    let vpcs_b: Api<VPC> = Api::namespaced(c.clone(), "team-b");
    let peer_a: Api<VPCPeering> = Api::namespaced(c.clone(), "team-a");
    let peer_b: Api<VPCPeering> = Api::namespaced(c.clone(), "team-b");
    // First ranges apart; a's second range overlaps b's second.
    Api::<VPC>::namespaced(c.clone(), "team-a")
        .create(&pp, &vpc("team-a", "a", &["10.0.0.0/24", "10.5.0.0/24"]))
        .await
        .unwrap();
    vpcs_b
        .create(&pp, &vpc("team-b", "b", &["10.1.0.0/24", "10.5.0.0/25"]))
        .await
        .unwrap();
    peer_a
        .create(&pp, &peering("team-a", "a", "team-b", "b"))
        .await
        .unwrap();
    peer_b
        .create(&pp, &peering("team-b", "b", "team-a", "a"))
        .await
        .unwrap();
    for (api, name) in [(&peer_a, "a-to-b"), (&peer_b, "b-to-a")] {
        let p = wait_for(api, name, "overlap seen", disjoint_is("False")).await;
        assert_eq!(p.status.unwrap().phase, "Pending", "{name}");
    }
    // b drops its (unused) second range: the pair is disjoint and Ready.
    vpcs_b
        .patch(
            "b",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"cidrs": ["10.1.0.0/24"]}})),
        )
        .await
        .unwrap();
    wait_for(&peer_a, "a-to-b", "Ready", |o: Option<&VPCPeering>| {
        o.and_then(|p| p.status.as_ref())
            .is_some_and(|s| s.phase == "Ready")
    })
    .await;
}
