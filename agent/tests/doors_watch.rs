//! The doors watch (`agent/src/features/doors/`) against the real API server (in process,
//! embedded store): VPCs, Ports, FloatingIPs with their status written by the test (the
//! server's FloatingIP loop is not part of this), and a VPCGateway, into the pinned maps of a
//! private bpffs; beside it the core's watch (`agent/src/core/watch/`), which writes the ranges
//! the doors never NAT to (`sdn_internal`). Needs root; fails (never skips) without it. Time
//! limits are hang guards only.

mod common;

use std::collections::HashSet;
use std::net::IpAddr;
use std::time::Duration;

use cozyplane_agent::core::api::ApiClients;
use cozyplane_agent::core::datapath::loader::Datapath;
use cozyplane_agent::core::metrics::VpcNames;
use cozyplane_apis::v1alpha1::{
    FloatingIP, FloatingIPSpec, LocalVPCRef, Port, VPC, VPCGateway, VPCGatewayIngress, VPCGatewaySpec,
    VPCSpec,
};
use cozyplane_bpf::DatapathConfig;
use cozyplane_bpf::maps::fip_in::FipInMap;
use cozyplane_bpf::maps::internal::InternalMap;
use cozyplane_bpf::maps::lbg_ingress::LbgIngressMap;
use cozyplane_conformance::objects::{port, wait_for};
use cozyplane_conformance::{Backend, TestServer};
use cozyplane_lab::require_root;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn floating_ip(name: &str, target: &str) -> FloatingIP {
    let mut f = FloatingIP::new(
        name,
        FloatingIPSpec {
            vpc_ref: LocalVPCRef { name: "blue".into() },
            target: target.into(),
            ..Default::default()
        },
    );
    f.metadata.namespace = Some("default".into());
    f
}

/// Polls `f` until it returns `Some`; the deadline is a hang guard.
async fn eventually<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn floating_ips_gateways_and_ranges_reach_the_maps() {
    require_root();
    let fs = common::Bpffs::new("cpdoorsw");
    let dp = Datapath::load(&fs.pins(), &DatapathConfig::default()).expect("datapath");
    let pins = dp.pin_dir().to_path_buf();

    let server = TestServer::start(Backend::Embedded).await;
    let client = server.client().await;
    let pp = PostParams::default();
    let vpcs: Api<VPC> = Api::namespaced(client.clone(), "default");
    let mut v = VPC::new(
        "blue",
        VPCSpec {
            cidrs: vec!["10.0.0.0/24".into()],
            mtu: 0,
            dhcp: None,
            dns64: false,
        },
    );
    v.metadata.namespace = Some("default".into());
    vpcs.create(&pp, &v).await.unwrap();
    let v = wait_for(&vpcs, "blue", "a VNI", |v: Option<&VPC>| {
        v.and_then(|v| v.status.as_ref()).is_some_and(|s| s.vni != 0)
    })
    .await;
    let vni = u32::try_from(v.status.unwrap().vni).unwrap();
    Api::<Port>::all(client.clone())
        .create(&pp, &port("blue", "10.0.0.5"))
        .await
        .unwrap();

    let fips: Api<FloatingIP> = Api::namespaced(client.clone(), "default");
    for (name, addr) in [("f1", "203.0.113.10"), ("f2", "203.0.113.11")] {
        fips.create(&pp, &floating_ip(name, "10.0.0.5")).await.unwrap();
        let status = serde_json::json!({"status": {"address": addr}});
        fips.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap();
    }
    // A FloatingIP whose target no Port holds: not programmed.
    fips.create(&pp, &floating_ip("f3", "10.0.0.77")).await.unwrap();
    let status = serde_json::json!({"status": {"address": "203.0.113.12"}});
    fips.patch_status("f3", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();

    let api = ApiClients {
        kube: client.clone(),
        sdn: client.clone(),
        node: "n2".into(),
        node_ip: ip("192.0.2.2"),
        pods: Default::default(),
        grants: Default::default(),
        kube_turns: std::sync::Arc::new(tokio::sync::Semaphore::new(4)),
        sdn_turns: std::sync::Arc::new(tokio::sync::Semaphore::new(4)),
        prepared: Default::default(),
        severed: Default::default(),
    };
    let names = VpcNames::default();
    let task = tokio::spawn(cozyplane_agent::features::doors::run(
        api.clone(),
        pins.clone(),
        names.clone(),
    ));
    let routes = cozyplane_agent::core::watch::HostRoutes {
        // No such device: the watch writes its maps and leaves host routes alone.
        tunnel_dev: "cpdw-none".into(),
        net0_vni: 1,
        own_block: "10.244.9.0/24".parse().unwrap(),
        own_block6: None,
        cluster: vec!["10.96.0.0/12".parse().unwrap()],
    };
    let core_watch = tokio::spawn(cozyplane_agent::core::watch::run(api, pins.clone(), routes));
    let fip_in = || FipInMap::from_pin(&pins).unwrap().entries().unwrap();

    // f1 and f2 target the same address: the older (f1; same second, then by name) wins.
    let got = eventually("f1 programmed", || {
        let e = fip_in();
        (!e.is_empty()).then_some(e)
    })
    .await;
    assert_eq!(got, [(ip("203.0.113.10"), (vni, ip("10.0.0.5")))]);
    let want = HashSet::from([(0, ip("10.96.0.0"), 12), (vni, ip("10.0.0.0"), 24)]);
    eventually("the internal ranges written", || {
        let got: HashSet<_> = InternalMap::from_pin(&pins)
            .unwrap()
            .entries()
            .unwrap()
            .into_iter()
            .collect();
        got.is_superset(&want).then_some(())
    })
    .await;
    assert_eq!(names.get(vni), ("default".to_string(), "blue".to_string()));

    // The winner goes: the loser takes the target over.
    fips.delete("f1", &DeleteParams::default()).await.unwrap();
    eventually("f2 takes over", || {
        (fip_in() == [(ip("203.0.113.11"), (vni, ip("10.0.0.5")))]).then_some(())
    })
    .await;

    // The VPC's gateway admits LoadBalancer ingress: the gate opens for its VNI.
    let gws: Api<VPCGateway> = Api::namespaced(client.clone(), "default");
    let mut g = VPCGateway::new(
        "gw",
        VPCGatewaySpec {
            vpc_ref: LocalVPCRef { name: "blue".into() },
            ingress: VPCGatewayIngress { load_balancer: true },
            ..Default::default()
        },
    );
    g.metadata.namespace = Some("default".into());
    gws.create(&pp, &g).await.unwrap();
    eventually("the gate opens", || {
        (LbgIngressMap::from_pin(&pins).unwrap().nets().unwrap() == [vni]).then_some(())
    })
    .await;
    // And closes when the gateway goes.
    gws.delete("gw", &DeleteParams::default()).await.unwrap();
    eventually("the gate closes", || {
        LbgIngressMap::from_pin(&pins)
            .unwrap()
            .nets()
            .unwrap()
            .is_empty()
            .then_some(())
    })
    .await;
    task.abort();
    core_watch.abort();
    drop(dp);
}
