//! The doors of VPCs (issue 12): the LoadBalancer Services and EndpointSlices the VPCGateway and
//! FloatingIP loops own, and the status they derive. The server runs in delegated mode against
//! the kube stand-in with the chart's RBAC, and the stand-in plays the LoadBalancer
//! implementation (`Options::lb_pool`), assigning ingress addresses as MetalLB's controller
//! does. Every wait is a watch; the deadline only turns a hang into a failure.

use std::collections::BTreeMap;

use cozyplane_apis::v1alpha1::{FloatingIP, Port, PortSpec, VPC, VPCGateway, VPCRef};
use cozyplane_conformance::delegated::Delegated;
use cozyplane_conformance::objects::{WAIT, delete_and_release, wait_for};
use cozyplane_conformance::standin::{Options, StandIn};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::{reflector, watcher};
use serde_json::{Value, json};

const NS: &str = "t1";
const POOL4: &str = "203.0.113.0/28";
const POOL6: &str = "2001:db8:100::/124";

struct Env {
    _d: Delegated,
    client: kube::Client,
}

impl Env {
    fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), NS)
    }
}

/// The stand-in (as configured by `opts`) with the server behind it bound to the chart's role,
/// namespace `t1` and VPCs `v1` (dual-stack) and `v4only`.
async fn setup(opts: Options) -> Env {
    let d = Delegated::start(opts, &[], &[]).await;
    d.namespace(NS).await;
    let e = Env {
        client: d.client.clone(),
        _d: d,
    };
    for (name, cidrs) in [
        ("v1", json!(["10.0.0.0/24", "fd00:10::/64"])),
        ("v4only", json!(["10.1.0.0/24"])),
    ] {
        let v: VPC = serde_json::from_value(json!({
            "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "VPC",
            "metadata": { "name": name }, "spec": { "cidrs": cidrs },
        }))
        .unwrap();
        e.api::<VPC>().create(&PostParams::default(), &v).await.unwrap();
    }
    e
}

fn pool() -> Options {
    Options::default().lb_pool(POOL4, POOL6)
}

async fn gateway(e: &Env, name: &str, vpc: &str, spec: Value) -> VPCGateway {
    let mut spec = spec;
    spec["vpcRef"] = json!({ "name": vpc });
    let g: VPCGateway = serde_json::from_value(json!({
        "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "VPCGateway",
        "metadata": { "name": name }, "spec": spec,
    }))
    .unwrap();
    e.api::<VPCGateway>()
        .create(&PostParams::default(), &g)
        .await
        .unwrap()
}

async fn floating_ip(e: &Env, name: &str, target: &str) -> FloatingIP {
    let f: FloatingIP = serde_json::from_value(json!({
        "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "FloatingIP",
        "metadata": { "name": name }, "spec": { "vpcRef": { "name": "v1" }, "target": target },
    }))
    .unwrap();
    e.api::<FloatingIP>()
        .create(&PostParams::default(), &f)
        .await
        .unwrap()
}

/// Waits, through a watch of the objects labelled `labels`, until `pred` holds for them.
async fn until<K>(api: &Api<K>, labels: &str, what: &str, pred: impl Fn(&[K]) -> bool) -> Vec<K>
where
    K: kube::Resource
        + Clone
        + std::fmt::Debug
        + k8s_openapi::serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (reader, writer) = reflector::store();
    let mut events = reflector(
        writer,
        watcher(api.clone(), watcher::Config::default().labels(labels)),
    )
    .boxed();
    let mut listed = false;
    let seen = tokio::time::timeout(WAIT, async {
        loop {
            match events.next().await {
                Some(Ok(watcher::Event::InitDone)) => listed = true,
                Some(Ok(_)) => {}
                Some(Err(e)) => panic!("watch {labels}: {e}"),
                None => panic!("watch {labels} ended"),
            }
            if listed {
                let now: Vec<K> = reader.state().iter().map(|o| (**o).clone()).collect();
                if pred(&now) {
                    return now;
                }
            }
        }
    })
    .await;
    seen.unwrap_or_else(|_| panic!("{labels}: never {what}; last seen {:#?}", reader.state()))
}

fn cond<'a>(conds: &'a [Condition], ty: &str) -> Option<&'a Condition> {
    conds.iter().find(|c| c.type_ == ty)
}

fn gw_cond(g: Option<&VPCGateway>, ty: &str, status: &str) -> bool {
    g.and_then(|g| g.status.as_ref())
        .and_then(|s| cond(&s.conditions, ty))
        .is_some_and(|c| c.status == status)
}

fn fip_cond(f: Option<&FloatingIP>, ty: &str, status: &str) -> bool {
    f.and_then(|f| f.status.as_ref())
        .and_then(|s| cond(&s.conditions, ty))
        .is_some_and(|c| c.status == status)
}

fn labels_of(o: &impl kube::Resource) -> BTreeMap<String, String> {
    o.meta().labels.clone().unwrap_or_default()
}

/// One Service per family of the VPC with every field the loop sets, and a same-named slice
/// whose one Ready endpoint is the NAT address the stand-in assigned, which status reports.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_services_and_slices_have_their_shape_and_the_nat_address_comes_from_the_ingress() {
    let e = setup(pool().lb_class("lab")).await;
    let gw = gateway(
        &e,
        "gw",
        "v1",
        json!({ "loadBalancerClass": "lab", "nat": { "enabled": true, "addressClaimName": "claim-a" } }),
    )
    .await;
    let gws = e.api::<VPCGateway>();
    let g = wait_for(&gws, "gw", "both NAT addresses", |g: Option<&VPCGateway>| {
        g.and_then(|g| g.status.as_ref())
            .is_some_and(|s| !s.nat_address.is_empty() && !s.nat_address6.is_empty())
    })
    .await;
    let st = g.status.clone().unwrap();
    assert!(st.nat_address.starts_with("203.0.113."), "{st:?}");
    assert!(st.nat_address6.starts_with("2001:db8:100::"), "{st:?}");
    assert_eq!(st.phase, "Ready");
    for (ty, reason) in [
        ("VPCResolved", "VPCResolved"),
        ("NATReady", "NATReady"),
        ("Exclusive", "Exclusive"),
    ] {
        let c = cond(&st.conditions, ty).unwrap_or_else(|| panic!("{ty} in {st:?}"));
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", reason), "{ty}");
    }
    let svcs = until(
        &e.api::<Service>(),
        "sdn.cozystack.io/vpc-gateway=gw",
        "two",
        |s| s.len() == 2,
    )
    .await;
    let uid = gw.metadata.uid.clone().unwrap();
    for s in &svcs {
        let name = s.metadata.name.clone().unwrap();
        let l = labels_of(s);
        let fam = l["sdn.cozystack.io/address-family"].clone();
        let (short, addr) = match fam.as_str() {
            "IPv4" => ("v4", st.nat_address.clone()),
            "IPv6" => ("v6", st.nat_address6.clone()),
            other => panic!("family label {other}"),
        };
        assert_eq!(
            s.metadata.generate_name.as_deref(),
            Some(&*format!("gw-{short}-"))
        );
        assert!(name.starts_with(&format!("gw-{short}-")), "{name}");
        assert_eq!(l["service.kubernetes.io/service-proxy-name"], "cozyplane");
        assert_eq!(l["sdn.cozystack.io/vpc-gateway"], "gw");
        let ann = s.metadata.annotations.clone().unwrap_or_default();
        if fam == "IPv4" {
            assert_eq!(
                ann.get("local.sdn.cozystack.io/ip-address-claim")
                    .map(String::as_str),
                Some("claim-a")
            );
        } else {
            assert!(
                !ann.contains_key("local.sdn.cozystack.io/ip-address-claim"),
                "no claim6: {ann:?}"
            );
        }
        let refs = s.metadata.owner_references.clone().unwrap_or_default();
        assert_eq!(refs.len(), 1, "{refs:?}");
        assert_eq!(
            (
                refs[0].kind.as_str(),
                refs[0].name.as_str(),
                refs[0].uid.as_str(),
                refs[0].controller
            ),
            ("VPCGateway", "gw", uid.as_str(), Some(true))
        );
        assert_eq!(refs[0].api_version, "sdn.cozystack.io/v1alpha1");
        let spec = s.spec.clone().unwrap();
        assert_eq!(spec.type_.as_deref(), Some("LoadBalancer"));
        assert_eq!(spec.external_traffic_policy.as_deref(), Some("Cluster"));
        assert_eq!(spec.allocate_load_balancer_node_ports, Some(false));
        assert_eq!(spec.ip_family_policy.as_deref(), Some("SingleStack"));
        assert_eq!(spec.ip_families, Some(vec![fam.clone()]));
        assert_eq!(spec.load_balancer_class.as_deref(), Some("lab"));
        let ports = spec.ports.unwrap();
        assert_eq!(ports.len(), 1);
        assert_eq!((ports[0].port, ports[0].protocol.as_deref()), (1, Some("TCP")));
        // The slice: same name, our labels, one always-Ready endpoint at the NAT address.
        let sl = wait_for(
            &e.api::<EndpointSlice>(),
            &name,
            "its endpoint",
            |o: Option<&EndpointSlice>| {
                o.is_some_and(|s| s.endpoints.as_ref().is_some_and(|e| !e.is_empty()))
            },
        )
        .await;
        let l = labels_of(&sl);
        assert_eq!(l["kubernetes.io/service-name"], name);
        assert_eq!(l["endpointslice.kubernetes.io/managed-by"], "cozyplane");
        assert_eq!(l["sdn.cozystack.io/vpc-gateway"], "gw");
        assert_eq!(sl.address_type, fam);
        let eps = sl.endpoints.unwrap();
        assert_eq!(eps.len(), 1);
        assert_eq!(eps[0].addresses, vec![addr]);
        assert_eq!(eps[0].conditions.as_ref().and_then(|c| c.ready), Some(true));
    }
    // Cleanup on delete: the Services and slices go with the gateway.
    gws.delete("gw", &DeleteParams::default()).await.unwrap();
    until(
        &e.api::<Service>(),
        "sdn.cozystack.io/vpc-gateway=gw",
        "gone",
        <[Service]>::is_empty,
    )
    .await;
    until(
        &e.api::<EndpointSlice>(),
        "sdn.cozystack.io/vpc-gateway=gw",
        "gone",
        <[EndpointSlice]>::is_empty,
    )
    .await;
}

/// The older gateway of a VPC owns the door; the younger waits with `Exclusive=False` and no
/// Service, and takes over (Services, address) once the older one is deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusivity_hands_the_door_over_when_the_older_gateway_is_deleted() {
    let e = setup(pool()).await;
    let gws = e.api::<VPCGateway>();
    gateway(&e, "old", "v4only", json!({ "nat": { "enabled": true } })).await;
    wait_for(&gws, "old", "a NAT address", |g: Option<&VPCGateway>| {
        g.and_then(|g| g.status.as_ref())
            .is_some_and(|s| !s.nat_address.is_empty())
    })
    .await;
    // Within the same second the name breaks the tie: "old" still wins.
    gateway(&e, "young", "v4only", json!({ "nat": { "enabled": true } })).await;
    let y = wait_for(&gws, "young", "the conflict", |g: Option<&VPCGateway>| {
        gw_cond(g, "Exclusive", "False")
    })
    .await;
    let c = cond(&y.status.as_ref().unwrap().conditions, "Exclusive").unwrap();
    assert_eq!(c.reason, "GatewayConflict");
    assert!(c.message.contains("old"), "{c:?}");
    assert!(y.status.as_ref().unwrap().nat_address.is_empty());
    let svcs = e.api::<Service>();
    until(&svcs, "sdn.cozystack.io/vpc-gateway=old", "one Service", |s| {
        s.len() == 1
    })
    .await;
    until(
        &svcs,
        "sdn.cozystack.io/vpc-gateway=young",
        "none",
        <[Service]>::is_empty,
    )
    .await;
    gws.delete("old", &DeleteParams::default()).await.unwrap();
    let y = wait_for(&gws, "young", "the door", |g: Option<&VPCGateway>| {
        gw_cond(g, "Exclusive", "True")
            && g.and_then(|g| g.status.as_ref())
                .is_some_and(|s| !s.nat_address.is_empty())
    })
    .await;
    assert_eq!(y.status.unwrap().phase, "Ready");
    until(
        &svcs,
        "sdn.cozystack.io/vpc-gateway=old",
        "gone",
        <[Service]>::is_empty,
    )
    .await;
    let s = until(&svcs, "sdn.cozystack.io/vpc-gateway=young", "one Service", |s| {
        s.len() == 1
    })
    .await;
    assert_eq!(labels_of(&s[0])["sdn.cozystack.io/address-family"], "IPv4");
}

/// Disabling NAT removes the Services and slices and clears the address (`NATReady` stays true:
/// nothing is pending); enabling it again brings a door back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disabling_nat_removes_the_services_and_clears_the_address() {
    let e = setup(pool()).await;
    let gws = e.api::<VPCGateway>();
    gateway(&e, "gw", "v4only", json!({ "nat": { "enabled": true } })).await;
    wait_for(&gws, "gw", "a NAT address", |g: Option<&VPCGateway>| {
        g.and_then(|g| g.status.as_ref())
            .is_some_and(|s| !s.nat_address.is_empty())
    })
    .await;
    until(
        &e.api::<EndpointSlice>(),
        "sdn.cozystack.io/vpc-gateway=gw",
        "a slice",
        |s| s.len() == 1,
    )
    .await;
    gws.patch(
        "gw",
        &PatchParams::default(),
        &Patch::Merge(json!({ "spec": { "nat": { "enabled": false } } })),
    )
    .await
    .unwrap();
    let g = wait_for(&gws, "gw", "the address cleared", |g: Option<&VPCGateway>| {
        g.and_then(|g| g.status.as_ref())
            .is_some_and(|s| s.nat_address.is_empty())
    })
    .await;
    assert!(gw_cond(Some(&g), "NATReady", "True"), "{:?}", g.status);
    until(
        &e.api::<Service>(),
        "sdn.cozystack.io/vpc-gateway=gw",
        "gone",
        <[Service]>::is_empty,
    )
    .await;
    until(
        &e.api::<EndpointSlice>(),
        "sdn.cozystack.io/vpc-gateway=gw",
        "gone",
        <[EndpointSlice]>::is_empty,
    )
    .await;
}

/// Without an address pool nothing is assigned: `NATReady=False` (`NATAddressPending`); a
/// cluster that does not serve IPv6 refuses that family's Service, and the message says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_family_gets_no_address_and_pending_says_why() {
    let e = setup(Options::default().service_families(&["IPv4"])).await;
    let gws = e.api::<VPCGateway>();
    gateway(&e, "gw", "v1", json!({ "nat": { "enabled": true } })).await;
    let g = wait_for(&gws, "gw", "the IPv6 refusal", |g: Option<&VPCGateway>| {
        g.and_then(|g| g.status.as_ref())
            .and_then(|s| cond(&s.conditions, "NATReady"))
            .is_some_and(|c| c.message.contains("IPv6"))
    })
    .await;
    let st = g.status.unwrap();
    let c = cond(&st.conditions, "NATReady").unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "NATAddressPending"),
        "{c:?}"
    );
    assert!(c.message.contains("not configured on this cluster"), "{c:?}");
    assert!(st.nat_address.is_empty() && st.nat_address6.is_empty());
    let s = until(
        &e.api::<Service>(),
        "sdn.cozystack.io/vpc-gateway=gw",
        "the IPv4 Service",
        |s| s.len() == 1,
    )
    .await;
    assert_eq!(labels_of(&s[0])["sdn.cozystack.io/address-family"], "IPv4");
}

async fn vni(e: &Env) -> i32 {
    wait_for(&e.api::<VPC>(), "v1", "a VNI", |v: Option<&VPC>| {
        v.and_then(|v| v.status.as_ref()).is_some_and(|s| s.vni != 0)
    })
    .await
    .status
    .unwrap()
    .vni
}

async fn target_port(e: &Env, node: &str) -> String {
    let mut p = Port::new(
        "",
        PortSpec {
            vpc_ref: VPCRef {
                namespace: NS.into(),
                name: "v1".into(),
            },
            ip: "10.0.0.5".into(),
            node: node.into(),
            node_ip: "192.168.0.1".into(),
            ..Default::default()
        },
    );
    p.metadata.name = None;
    p.metadata.generate_name = Some("p-".into());
    Api::<Port>::all(e.client.clone())
        .create(&PostParams::default(), &p)
        .await
        .unwrap()
        .metadata
        .name
        .unwrap()
}

/// The older FloatingIP of a target owns the Service; the loser gets `TargetConflict` and none.
/// The slice's endpoint is the target on its Port's node, Ready while the Port is live; the
/// phase is Ready when Service, address, live target and exclusivity all hold. Deleting the
/// winner removes its Service and hands the target to the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn floating_ip_loser_gets_no_service_and_target_live_follows_the_port() {
    let e = setup(pool()).await;
    vni(&e).await;
    let mut n = Node::default();
    n.metadata.name = Some("n1".into());
    Api::<Node>::all(e.client.clone())
        .create(&PostParams::default(), &n)
        .await
        .unwrap();
    let fips = e.api::<FloatingIP>();
    let a = floating_ip(&e, "a", "10.0.0.5").await;
    let f = wait_for(&fips, "a", "an address", |f: Option<&FloatingIP>| {
        f.and_then(|f| f.status.as_ref())
            .is_some_and(|s| !s.address.is_empty())
    })
    .await;
    let st = f.status.clone().unwrap();
    assert!(st.address.starts_with("203.0.113."), "{st:?}");
    assert_eq!(st.phase, "Pending", "no Port holds the target yet: {st:?}");
    assert!(fip_cond(Some(&f), "ServiceReady", "True") && fip_cond(Some(&f), "AddressAssigned", "True"));
    assert!(fip_cond(Some(&f), "TargetLive", "False") && fip_cond(Some(&f), "TargetExclusive", "True"));
    let svcs = e.api::<Service>();
    let s = until(&svcs, "sdn.cozystack.io/floating-ip=a", "one Service", |s| {
        s.len() == 1
    })
    .await;
    let svc = &s[0];
    let name = svc.metadata.name.clone().unwrap();
    assert!(name.starts_with("a-"), "{name}");
    assert_eq!(svc.metadata.generate_name.as_deref(), Some("a-"));
    let l = labels_of(svc);
    assert_eq!(l["service.kubernetes.io/service-proxy-name"], "cozyplane");
    assert_eq!(l["sdn.cozystack.io/floating-ip"], "a");
    let spec = svc.spec.clone().unwrap();
    assert_eq!(spec.type_.as_deref(), Some("LoadBalancer"));
    assert_eq!(spec.external_traffic_policy.as_deref(), Some("Cluster"));
    assert_eq!(spec.allocate_load_balancer_node_ports, Some(false));
    assert_eq!(spec.ip_families, Some(vec!["IPv4".to_string()]));
    let refs = svc.metadata.owner_references.clone().unwrap();
    assert_eq!(
        (refs[0].kind.as_str(), refs[0].uid.as_str(), refs[0].controller),
        ("FloatingIP", a.metadata.uid.as_deref().unwrap(), Some(true))
    );
    let endpoint = |ready: bool, node: Option<&'static str>| {
        move |o: Option<&EndpointSlice>| {
            o.and_then(|s| s.endpoints.as_ref())
                .and_then(|e| e.first())
                .is_some_and(|ep| {
                    ep.addresses == ["10.0.0.5"]
                        && ep.conditions.as_ref().and_then(|c| c.ready) == Some(ready)
                        && ep.node_name.as_deref() == node
                })
        }
    };
    let slices = e.api::<EndpointSlice>();
    let sl = wait_for(&slices, &name, "a not-Ready endpoint", endpoint(false, None)).await;
    assert_eq!(labels_of(&sl)["kubernetes.io/service-name"], name);
    assert_eq!(
        labels_of(&sl)["endpointslice.kubernetes.io/managed-by"],
        "cozyplane"
    );
    // The loser (created later, or in the same second with a later name).
    floating_ip(&e, "b", "10.0.0.5").await;
    let b = wait_for(&fips, "b", "the conflict", |f: Option<&FloatingIP>| {
        fip_cond(f, "TargetExclusive", "False")
    })
    .await;
    let c = cond(&b.status.as_ref().unwrap().conditions, "TargetExclusive").unwrap();
    assert_eq!(c.reason, "TargetConflict");
    assert!(c.message.contains('a'), "{c:?}");
    assert!(fip_cond(Some(&b), "ServiceReady", "False"));
    until(
        &svcs,
        "sdn.cozystack.io/floating-ip=b",
        "none",
        <[Service]>::is_empty,
    )
    .await;
    // The target comes alive on n1, then goes away.
    let port = target_port(&e, "n1").await;
    wait_for(
        &slices,
        &name,
        "a Ready endpoint on n1",
        endpoint(true, Some("n1")),
    )
    .await;
    let f = wait_for(&fips, "a", "Ready", |f: Option<&FloatingIP>| {
        f.and_then(|f| f.status.as_ref())
            .is_some_and(|s| s.phase == "Ready")
    })
    .await;
    assert!(fip_cond(Some(&f), "TargetLive", "True"));
    delete_and_release(&Api::<Port>::all(e.client.clone()), &port).await;
    wait_for(&fips, "a", "TargetLive=False", |f: Option<&FloatingIP>| {
        fip_cond(f, "TargetLive", "False")
    })
    .await;
    wait_for(&slices, &name, "a not-Ready endpoint", endpoint(false, None)).await;
    // Deleting the winner: its Service goes, the loser takes over.
    fips.delete("a", &DeleteParams::default()).await.unwrap();
    until(
        &svcs,
        "sdn.cozystack.io/floating-ip=a",
        "gone",
        <[Service]>::is_empty,
    )
    .await;
    until(
        &slices,
        "sdn.cozystack.io/floating-ip=a",
        "gone",
        <[EndpointSlice]>::is_empty,
    )
    .await;
    until(&svcs, "sdn.cozystack.io/floating-ip=b", "one Service", |s| {
        s.len() == 1
    })
    .await;
    wait_for(
        &fips,
        "b",
        "exclusive with an address",
        |f: Option<&FloatingIP>| {
            fip_cond(f, "TargetExclusive", "True")
                && f.and_then(|f| f.status.as_ref())
                    .is_some_and(|s| !s.address.is_empty())
        },
    )
    .await;
}

/// The stand-in's pool: one address per Service and family, never twice, released on delete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standin_assigns_distinct_pool_addresses_and_releases_them() {
    let s = StandIn::start(Options::default().lb_pool("203.0.113.0/30", "")).await;
    let client = s.admin_client().await;
    let svcs: Api<Service> = Api::namespaced(client, "default");
    let lb = |name: &str, class: Option<&str>| {
        let mut v = json!({ "apiVersion": "v1", "kind": "Service",
            "metadata": { "name": name, "labels": { "lb": "t" } },
            "spec": { "type": "LoadBalancer", "ports": [{ "port": 1 }] } });
        if let Some(c) = class {
            v["spec"]["loadBalancerClass"] = json!(c);
        }
        serde_json::from_value::<Service>(v).unwrap()
    };
    let ip = |s: &Service| -> Option<String> {
        s.status
            .as_ref()?
            .load_balancer
            .as_ref()?
            .ingress
            .as_ref()?
            .first()?
            .ip
            .clone()
    };
    for n in ["one", "two", "three"] {
        svcs.create(&PostParams::default(), &lb(n, None)).await.unwrap();
    }
    svcs.create(&PostParams::default(), &lb("other-class", Some("elsewhere")))
        .await
        .unwrap();
    // A /30 has two hosts: two Services get them, the third waits.
    let all = until(&svcs, "lb=t", "two addresses", |s| {
        s.iter().filter(|s| ip(s).is_some()).count() == 2
    })
    .await;
    let mut ips: Vec<String> = all.iter().filter_map(ip).collect();
    ips.sort();
    assert_eq!(ips, ["203.0.113.1", "203.0.113.2"]);
    let holder = all
        .iter()
        .find(|s| ip(s).is_some())
        .unwrap()
        .metadata
        .name
        .clone()
        .unwrap();
    let freed = ip(all
        .iter()
        .find(|s| s.metadata.name.as_deref() == Some(&*holder))
        .unwrap())
    .unwrap();
    svcs.delete(&holder, &DeleteParams::default()).await.unwrap();
    let all = until(&svcs, "lb=t", "the freed address reused", |s| {
        s.len() == 3 && s.iter().filter(|s| ip(s).is_some()).count() == 2
    })
    .await;
    assert!(all.iter().any(|s| ip(s).as_deref() == Some(&*freed)), "{all:?}");
    let other = all
        .iter()
        .find(|s| s.metadata.name.as_deref() == Some("other-class"))
        .unwrap();
    assert_eq!(ip(other), None, "another class is not ours");
}
