//! Issue 5 control loops, observed the way a client would: every wait is a watch
//! (`kube::runtime::wait::await_condition`) on the object, never a sleep. The deadline around
//! each wait only turns a hang into a failure.

use cozyplane_apis::v1alpha1::{
    LocalVPCRef, Port, VPC, VPCBinding, VPCBindingSpec, VPCGateway, VPCGatewaySpec, VPCPeering, VPCRef,
    VPCSpec,
};
use cozyplane_conformance::objects::{attached_port, peering, wait_for, wait_gone};
use cozyplane_conformance::{Backend, TestServer};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::wait::Condition as WaitCondition;

fn cond<'a>(cs: &'a [Condition], ty: &str) -> Option<&'a Condition> {
    cs.iter().find(|c| c.type_ == ty)
}

fn vpc(ns: &str, name: &str, cidr: &str) -> VPC {
    let mut v = VPC::new(
        name,
        VPCSpec {
            cidrs: vec![cidr.into()],
            mtu: 0,
            dhcp: None,
            dns64: false,
        },
    );
    v.metadata.namespace = Some(ns.into());
    v
}

/// A peering status condition `ty` with `status`, plus `peerVNI == vni` when given.
fn peering_has(ty: &'static str, status: &'static str, vni: Option<i32>) -> impl WaitCondition<VPCPeering> {
    move |o: Option<&VPCPeering>| {
        o.and_then(|p| p.status.as_ref()).is_some_and(|s| {
            cond(&s.conditions, ty).is_some_and(|c| c.status == status) && vni.is_none_or(|v| s.peer_vni == v)
        })
    }
}

fn vni_of(v: &VPC) -> i32 {
    v.status.as_ref().map_or(0, |s| s.vni)
}

#[tokio::test]
async fn controllers_01_peering_status() {
    let s = TestServer::start(Backend::Embedded).await;
    let c = s.client().await;
    let vpcs_a: Api<VPC> = Api::namespaced(c.clone(), "team-a");
    let vpcs_b: Api<VPC> = Api::namespaced(c.clone(), "team-b");
    let peer_a: Api<VPCPeering> = Api::namespaced(c.clone(), "team-a");
    let peer_b: Api<VPCPeering> = Api::namespaced(c.clone(), "team-b");
    let pp = PostParams::default();
    let a = vpcs_a
        .create(&pp, &vpc("team-a", "a", "10.0.0.0/24"))
        .await
        .unwrap();
    let b = vpcs_b
        .create(&pp, &vpc("team-b", "b", "10.1.0.0/24"))
        .await
        .unwrap();
    let (va, vb) = (vni_of(&a), vni_of(&b));

    // One half alone: the peer VPC is known, but nothing matches it yet.
    peer_a
        .create(&pp, &peering("team-a", "a", "team-b", "b"))
        .await
        .unwrap();
    let p = wait_for(
        &peer_a,
        "a-to-b",
        "unmatched",
        peering_has("PeerMatched", "False", Some(vb)),
    )
    .await;
    assert_eq!(p.status.unwrap().phase, "Pending");

    // The reciprocal half: both sides matched, each reporting the other's VNI.
    peer_b
        .create(&pp, &peering("team-b", "b", "team-a", "a"))
        .await
        .unwrap();
    let p = wait_for(
        &peer_a,
        "a-to-b",
        "matched",
        peering_has("PeerMatched", "True", Some(vb)),
    )
    .await;
    let st = p.status.unwrap();
    assert_eq!(cond(&st.conditions, "CIDRsDisjoint").unwrap().status, "True");
    let q = wait_for(
        &peer_b,
        "b-to-a",
        "matched",
        peering_has("PeerMatched", "True", Some(va)),
    )
    .await;
    let st = q.status.unwrap();
    for ty in ["VPCReady", "PeerVPCReady", "CIDRsDisjoint"] {
        assert_eq!(cond(&st.conditions, ty).unwrap().status, "True", "{ty}: {st:?}");
    }
    wait_for(&peer_b, "b-to-a", "Ready", |o: Option<&VPCPeering>| {
        o.and_then(|p| p.status.as_ref())
            .is_some_and(|s| s.phase == "Ready")
    })
    .await;

    // Overlapping CIDRs: matched, but CIDRsDisjoint False and not Ready.
    vpcs_b
        .create(&pp, &vpc("team-b", "c", "10.0.0.0/16"))
        .await
        .unwrap();
    peer_a
        .create(&pp, &peering("team-a", "a", "team-b", "c"))
        .await
        .unwrap();
    peer_b
        .create(&pp, &peering("team-b", "c", "team-a", "a"))
        .await
        .unwrap();
    for (api, name) in [(&peer_a, "a-to-c"), (&peer_b, "c-to-a")] {
        let p = wait_for(api, name, "overlap seen", |o: Option<&VPCPeering>| {
            o.and_then(|p| p.status.as_ref()).is_some_and(|s| {
                cond(&s.conditions, "PeerMatched").is_some_and(|c| c.status == "True")
                    && cond(&s.conditions, "CIDRsDisjoint").is_some_and(|c| c.status == "False")
            })
        })
        .await;
        assert_eq!(p.status.unwrap().phase, "Pending");
    }

    // Deleting one half unmatches the other.
    let del = peer_b.delete("b-to-a", &DeleteParams::default()).await.unwrap();
    if let Some(uid) = del.left().and_then(|o| o.metadata.uid) {
        wait_gone(&peer_b, "b-to-a", &uid).await;
    }
    wait_for(
        &peer_a,
        "a-to-b",
        "unmatched again",
        peering_has("PeerMatched", "False", Some(vb)),
    )
    .await;
}

fn binding(ns: &str, name: &str, vpc_ns: &str, vpc: &str) -> VPCBinding {
    let mut b = VPCBinding::new(
        name,
        VPCBindingSpec {
            vpc_ref: VPCRef {
                namespace: vpc_ns.into(),
                name: vpc.into(),
            },
        },
    );
    b.metadata.namespace = Some(ns.into());
    b
}

const REAP: &str = "sdn.cozystack.io/reap-ports";
const SEVER: &str = "sdn.cozystack.io/sever";

fn has_sever_finalizer(p: &Port) -> bool {
    p.metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|f| f == SEVER))
}

fn has_reap_finalizer(o: Option<&VPCBinding>) -> bool {
    o.and_then(|b| b.metadata.finalizers.as_ref())
        .is_some_and(|f| f.iter().any(|f| f == REAP))
}

#[tokio::test]
async fn controllers_02_binding_reap() {
    let s = TestServer::start(Backend::Embedded).await;
    let c = s.client().await;
    let pp = PostParams::default();
    Api::<VPC>::namespaced(c.clone(), "tenant")
        .create(&pp, &vpc("tenant", "x", "10.4.0.0/24"))
        .await
        .unwrap();
    let bindings: Api<VPCBinding> = Api::namespaced(c.clone(), "pods");
    let ports: Api<Port> = Api::all(c.clone());
    // Two bindings in one namespace grant the same VPC.
    let b1 = bindings
        .create(&pp, &binding("pods", "b1", "tenant", "x"))
        .await
        .unwrap();
    let b2 = bindings
        .create(&pp, &binding("pods", "b2", "tenant", "x"))
        .await
        .unwrap();
    // The finalizer comes with the create itself (no second write by a controller).
    assert!(has_reap_finalizer(Some(&b1)), "{:?}", b1.metadata.finalizers);
    assert!(has_reap_finalizer(Some(&b2)), "{:?}", b2.metadata.finalizers);
    let mut ours = Vec::new();
    for _ in 0..3 {
        ours.push(
            ports
                .create(&pp, &attached_port("tenant", "x", "pods"))
                .await
                .unwrap(),
        );
    }
    // A Port of another pod namespace is never reaped by these bindings.
    let theirs = ports
        .create(&pp, &attached_port("tenant", "x", "elsewhere"))
        .await
        .unwrap();
    let selector = "sdn.cozystack.io/vpc=x,sdn.cozystack.io/pod-namespace=pods";
    let lp = ListParams::default().labels(selector);

    // Deleting b1 while b2 still grants the VPC: b1 goes, the Ports stay.
    bindings.delete("b1", &DeleteParams::default()).await.unwrap();
    wait_gone(&bindings, "b1", b1.metadata.uid.as_deref().unwrap()).await;
    assert_eq!(ports.list(&lp).await.unwrap().items.len(), 3);

    // Deleting b2, the last grant: its Ports are deleted before its finalizer goes.
    bindings.delete("b2", &DeleteParams::default()).await.unwrap();
    wait_gone(&bindings, "b2", b2.metadata.uid.as_deref().unwrap()).await;
    for p in &ours {
        let name = p.metadata.name.as_deref().unwrap();
        // Every Port carries the agent's sever finalizer from its create: the reap only marks
        // it, and its address stays claimed until the node's agent severed the pod.
        assert!(has_sever_finalizer(p), "{:?}", p.metadata.finalizers);
        wait_for(&ports, name, "marked for deletion", |o: Option<&Port>| {
            o.is_some_and(|p| p.metadata.deletion_timestamp.is_some())
        })
        .await;
        let mut again = attached_port("tenant", "x", "elsewhere");
        again.spec.ip.clone_from(&p.spec.ip);
        let err = ports
            .create(&pp, &again)
            .await
            .expect_err("the address is re-issued");
        assert!(
            matches!(&err, kube::Error::Api(s) if s.code == 422 && s.message.contains("already allocated")),
            "{name}: {err}"
        );
        // What the agent does once it severed the pod.
        let remove = serde_json::json!([
            {"op": "test", "path": "/metadata/finalizers/0", "value": SEVER},
            {"op": "remove", "path": "/metadata/finalizers/0"}
        ]);
        ports
            .patch(
                name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Json::<()>(serde_json::from_value(remove).unwrap()),
            )
            .await
            .unwrap();
        wait_gone(&ports, name, p.metadata.uid.as_deref().unwrap()).await;
    }
    assert!(ports.list(&lp).await.unwrap().items.is_empty());
    let name = theirs.metadata.name.as_deref().unwrap();
    assert!(ports.get_opt(name).await.unwrap().is_some(), "{name} was reaped");
    // The reaped Ports released their addresses.
    let r = cozyplane_apiserver::alloc::scan::scan(&s.storage).await.unwrap();
    assert!(r.problems.is_empty(), "{:#?}", r.problems);
}

fn gateway(name: &str, vpc: &str) -> VPCGateway {
    let mut g = VPCGateway::new(
        name,
        VPCGatewaySpec {
            vpc_ref: LocalVPCRef { name: vpc.into() },
            ..Default::default()
        },
    );
    g.metadata.namespace = Some("default".into());
    g
}

fn exclusive(status: &'static str) -> impl WaitCondition<VPCGateway> {
    move |o: Option<&VPCGateway>| {
        o.and_then(|g| g.status.as_ref())
            .and_then(|s| cond(&s.conditions, "Exclusive"))
            .is_some_and(|c| c.status == status)
    }
}

#[tokio::test]
async fn controllers_03_gateway_exclusivity() {
    let s = TestServer::start(Backend::Embedded).await;
    let c = s.client().await;
    let pp = PostParams::default();
    Api::<VPC>::namespaced(c.clone(), "default")
        .create(&pp, &vpc("default", "g", "10.5.0.0/24"))
        .await
        .unwrap();
    let gws: Api<VPCGateway> = Api::namespaced(c.clone(), "default");
    // Created one after the other: gw-a is older (or, within one second, first by name).
    let old = gws.create(&pp, &gateway("gw-a", "g")).await.unwrap();
    let g = wait_for(&gws, "gw-a", "exclusive", exclusive("True")).await;
    let st = g.status.unwrap();
    assert_eq!(st.phase, "Ready");
    assert_eq!(cond(&st.conditions, "VPCResolved").unwrap().status, "True");
    gws.create(&pp, &gateway("gw-b", "g")).await.unwrap();
    let g = wait_for(&gws, "gw-b", "in conflict", exclusive("False")).await;
    let st = g.status.unwrap();
    let c_ex = cond(&st.conditions, "Exclusive").unwrap();
    assert_eq!(c_ex.reason, "GatewayConflict");
    assert!(c_ex.message.contains("gw-a"), "{}", c_ex.message);
    assert_eq!(st.phase, "Pending");
    // The older one is still the boundary.
    let g = gws.get("gw-a").await.unwrap();
    assert_eq!(
        cond(&g.status.unwrap().conditions, "Exclusive").unwrap().status,
        "True"
    );
    // A gateway of an unknown VPC is not resolved.
    gws.create(&pp, &gateway("gw-z", "nope")).await.unwrap();
    wait_for(&gws, "gw-z", "unresolved", |o: Option<&VPCGateway>| {
        o.and_then(|g| g.status.as_ref())
            .and_then(|s| cond(&s.conditions, "VPCResolved"))
            .is_some_and(|c| c.status == "False")
    })
    .await;
    // Deleting the boundary hands it to the next one.
    gws.delete("gw-a", &DeleteParams::default()).await.unwrap();
    wait_gone(&gws, "gw-a", old.metadata.uid.as_deref().unwrap()).await;
    wait_for(&gws, "gw-b", "exclusive", exclusive("True")).await;
}
