//! Issue 5 allocation: VNIs, Port IPAM (addresses, MACs, claim names), ServiceVIP and
//! SecurityGroup ids, under concurrency, checked afterwards by the storage invariant scanner.

use std::collections::HashSet;

use cozyplane_apis::v1alpha1::{Port, VPC, VPCSpec};
use cozyplane_apiserver::alloc::scan::scan;
use cozyplane_conformance::objects::{delete_and_release, port};
use cozyplane_conformance::{Backend, TestServer};
use futures::StreamExt;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::Value;

fn vpc(name: &str, cidrs: &[&str]) -> VPC {
    let mut v = VPC::new(
        name,
        VPCSpec {
            cidrs: cidrs.iter().map(ToString::to_string).collect(),
            mtu: 0,
            dhcp: None,
            dns64: false,
        },
    );
    v.metadata.namespace = Some("default".into());
    v
}

fn code(e: &kube::Error) -> u16 {
    match e {
        kube::Error::Api(s) => s.code,
        _ => 0,
    }
}

async fn assert_sound(s: &TestServer) {
    let r = scan(&s.storage).await.unwrap();
    assert!(r.problems.is_empty(), "invariants: {:#?}", r.problems);
}

#[tokio::test]
async fn alloc_01_vni_and_port_ipam_basics() {
    let s = TestServer::start(Backend::Embedded).await;
    let c = s.client().await;
    let vpcs: Api<VPC> = Api::namespaced(c.clone(), "default");
    let ports: Api<Port> = Api::all(c.clone());
    let a = vpcs
        .create(&PostParams::default(), &vpc("a", &["10.0.0.0/29"]))
        .await
        .unwrap();
    let b = vpcs
        .create(&PostParams::default(), &vpc("b", &["10.0.0.0/24", "fd00::/64"]))
        .await
        .unwrap();
    let (va, vb) = (a.status.unwrap().vni, b.status.unwrap().vni);
    assert!(va >= 100 && vb >= 100 && va != vb, "{va} {vb}");
    // Lowest free, skipping network and .1; name and MAC filled by the server.
    let p1 = ports
        .create(&PostParams::default(), &port("a", ""))
        .await
        .unwrap();
    assert_eq!(p1.spec.ip, "10.0.0.2");
    assert_eq!(
        p1.metadata.name.as_deref(),
        Some(format!("v{va}.10-0-0-2").as_str())
    );
    let mac: cozyplane_apis::net::MacAddr = p1.spec.mac.parse().unwrap();
    assert!(mac.is_local_unicast(), "{mac}");
    // An exact address, then the same again: 422 on spec.ip (as a Service's taken clusterIP).
    let p6 = ports
        .create(&PostParams::default(), &port("a", "10.0.0.6"))
        .await
        .unwrap();
    assert_eq!(
        p6.metadata.name.as_deref(),
        Some(format!("v{va}.10-0-0-6").as_str())
    );
    let e = ports
        .create(&PostParams::default(), &port("a", "10.0.0.6"))
        .await
        .unwrap_err();
    assert_eq!(code(&e), 422, "{e:?}");
    assert!(
        e.to_string().contains("spec.ip") && e.to_string().contains("already allocated to Port"),
        "{e}"
    );
    // Fill the /29 (.2-.6): .3 .4 .5, then exhaustion is 507.
    for want in ["10.0.0.3", "10.0.0.4", "10.0.0.5"] {
        let p = ports
            .create(&PostParams::default(), &port("a", ""))
            .await
            .unwrap();
        assert_eq!(p.spec.ip, want);
    }
    let e = ports
        .create(&PostParams::default(), &port("a", ""))
        .await
        .unwrap_err();
    assert_eq!(code(&e), 507, "{e:?}");
    // Deleting frees the address for the next create, once the agent's sever finalizer (set by
    // every Port's create) is gone: until then the deleted Port still holds it.
    let gone = format!("v{va}.10-0-0-3");
    ports.delete(&gone, &DeleteParams::default()).await.unwrap();
    let e = ports
        .create(&PostParams::default(), &port("a", ""))
        .await
        .unwrap_err();
    assert_eq!(code(&e), 507, "a terminating Port keeps its address: {e:?}");
    delete_and_release(&ports, &gone).await;
    let p = ports
        .create(&PostParams::default(), &port("a", ""))
        .await
        .unwrap();
    assert_eq!(p.spec.ip, "10.0.0.3");
    // Dual stack: the unspecified address of a family asks for that family.
    let p = ports
        .create(&PostParams::default(), &port("b", "::"))
        .await
        .unwrap();
    assert_eq!(p.spec.ip, "fd00::2");
    let p = ports
        .create(&PostParams::default(), &port("b", ""))
        .await
        .unwrap();
    assert_eq!(p.spec.ip, "10.0.0.2");
    // A duplicate explicit MAC is a 422 on spec.mac.
    let mut dup = port("b", "");
    dup.spec.mac = p1.spec.mac.clone();
    let e = ports.create(&PostParams::default(), &dup).await.unwrap_err();
    assert_eq!(code(&e), 422, "{e:?}");
    assert!(e.to_string().contains("spec.mac"), "{e}");
    // A ServiceVIP walks down from the top and conflicts with a Port on the same address.
    let (code_vip, _, body) = s
        .raw(
            "POST",
            "/apis/sdn.cozystack.io/v1alpha1/servicevips",
            &[("content-type", "application/json")],
            Some(r#"{"metadata":{"generateName":"x"},"spec":{"vpcRef":{"namespace":"default","name":"b"},"serviceRef":{"namespace":"default","name":"s"},"ports":[{"protocol":"TCP","port":80}]}}"#),
        )
        .await;
    assert_eq!(code_vip, 201, "{body}");
    let vip: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(vip["spec"]["ip"], "10.0.0.254");
    let e = ports
        .create(&PostParams::default(), &port("b", "10.0.0.254"))
        .await
        .unwrap_err();
    assert_eq!(code(&e), 422, "{e:?}");
    assert!(e.to_string().contains("ServiceVIP"), "the holder is named: {e}");
    // The projection shows used and free addresses.
    let (c2, _, body) = s
        .raw(
            "GET",
            "/apis/sdn.cozystack.io/v1alpha1/namespaces/default/vpcs/a/allocations",
            &[],
            None,
        )
        .await;
    assert_eq!(c2, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["cidrs"][0]["used"], 5, "{v}");
    assert_eq!(v["cidrs"][0]["free"], "0", "{v}");
    // SecurityGroup ids 1, 2, … per VPC.
    for want in [1, 2] {
        let (c3, _, body) = s
            .raw(
                "POST",
                "/apis/sdn.cozystack.io/v1alpha1/namespaces/default/securitygroups",
                &[("content-type", "application/json")],
                Some(r#"{"metadata":{"generateName":"g-"},"spec":{"vpcRef":{"name":"a"}}}"#),
            )
            .await;
        assert_eq!(c3, 201, "{body}");
        let g: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(g["status"]["id"], want, "{g}");
    }
    // The VNI is immutable through /status.
    let (c4, _, body) = s
        .raw(
            "PATCH",
            "/apis/sdn.cozystack.io/v1alpha1/namespaces/default/vpcs/a/status",
            &[("content-type", "application/merge-patch+json")],
            Some(r#"{"status":{"vni":4242}}"#),
        )
        .await;
    assert_eq!(c4, 422, "{body}");
    assert_sound(&s).await;
}

async fn storm(backend: Backend) {
    let s = TestServer::start(backend).await;
    let c = s.client().await;
    let vpcs: Api<VPC> = Api::namespaced(c.clone(), "default");
    let ports: Api<Port> = Api::all(c.clone());
    // 500 VPCs concurrently → 500 distinct VNIs.
    let created: Vec<_> = futures::stream::iter(0..500)
        .map(|i| {
            let vpcs = vpcs.clone();
            async move {
                vpcs.create(&PostParams::default(), &vpc(&format!("v{i}"), &["10.9.0.0/24"]))
                    .await
            }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    let vnis: HashSet<i32> = created
        .iter()
        .map(|r| r.as_ref().unwrap().status.as_ref().unwrap().vni)
        .collect();
    assert_eq!(vnis.len(), 500);
    vpcs.create(&PostParams::default(), &vpc("small", &["10.0.0.0/24"]))
        .await
        .unwrap();
    vpcs.create(&PostParams::default(), &vpc("big", &["10.1.0.0/16"]))
        .await
        .unwrap();
    // 2,000 Ports concurrently in a /24 + /16 mix.
    let results: Vec<_> = futures::stream::iter(0..2000)
        .map(|i| {
            let ports = ports.clone();
            async move {
                let v = if i % 4 == 0 { "small" } else { "big" };
                ports
                    .create(&PostParams::default(), &port(v, ""))
                    .await
                    .map(|p| (v, p))
            }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    let (mut ips, mut macs, mut small) = (HashSet::new(), HashSet::new(), 0);
    for r in results {
        match r {
            Ok((v, p)) => {
                assert!(ips.insert((v, p.spec.ip.clone())), "duplicate {}", p.spec.ip);
                assert!(macs.insert(p.spec.mac.clone()), "duplicate MAC {}", p.spec.mac);
                small += usize::from(v == "small");
            }
            Err(e) => assert!(matches!(code(&e), 409 | 507), "{e:?}"),
        }
    }
    // The /24 holds 253 addresses; 500 asked, so it is exactly full.
    assert_eq!(small, 253);
    assert_eq!(ips.len(), 253 + 1500);
    assert_sound(&s).await;
}

#[tokio::test]
async fn alloc_02_storm_embedded() {
    storm(Backend::Embedded).await;
}

#[tokio::test]
async fn alloc_03_storm_etcd() {
    storm(Backend::Etcd).await;
}

/// Issue 16: Ports take their VPC from the allocator's cache, but a cache that has not yet seen
/// a change never fails a create. A CIDR added to a VPC is usable by the very next create, and
/// a VPC deleted and made again under the same name gives its new VNI and CIDR at once.
#[tokio::test]
async fn alloc_04_a_stale_vpc_cache_never_fails_a_create() {
    use kube::api::{Patch, PatchParams};
    let s = TestServer::start(Backend::Embedded).await;
    let c = s.client().await;
    let vpcs: Api<VPC> = Api::namespaced(c.clone(), "default");
    let ports: Api<Port> = Api::all(c.clone());
    let pp = PostParams::default();
    vpcs.create(&pp, &vpc("grow", &["10.40.0.0/24"])).await.unwrap();
    // Warm the cache with the VPC as first created.
    assert_eq!(
        ports.create(&pp, &port("grow", "")).await.unwrap().spec.ip,
        "10.40.0.2"
    );
    // One range per family: the IPv6 range is replaced each round (its Port gone first).
    for i in 1..=10 {
        let cidr = format!("fd41:{i}::/64");
        let patch = serde_json::json!({"spec": {"cidrs": ["10.40.0.0/24", cidr]}});
        vpcs.patch("grow", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
        let want = format!("fd41:{i}::5");
        let p = ports.create(&pp, &port("grow", &want)).await.unwrap();
        assert_eq!(p.spec.ip, want);
        // Released as the agent would: a Port held by its finalizer keeps its range in use.
        delete_and_release(&ports, p.metadata.name.as_deref().unwrap()).await;
    }
    for i in 0..5 {
        let cidr = format!("10.50.{i}.0/24");
        let v = vpcs.create(&pp, &vpc("again", &[&cidr])).await.unwrap();
        let vni = v.status.unwrap().vni;
        let p = ports.create(&pp, &port("again", "")).await.unwrap();
        assert_eq!(p.spec.ip, format!("10.50.{i}.2"));
        assert!(
            p.metadata
                .name
                .as_deref()
                .unwrap()
                .starts_with(&format!("v{vni}.")),
            "{:?} under VNI {vni}",
            p.metadata.name
        );
        delete_and_release(&ports, p.metadata.name.as_deref().unwrap()).await;
        vpcs.delete("again", &DeleteParams::default()).await.unwrap();
    }
    assert_sound(&s).await;
}
