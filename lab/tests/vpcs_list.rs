//! `make e2e`, two nodes: secondary VPC interfaces without Multus (issue 37, item 2). A pod on
//! the default network lists two VPCs of its namespace in `sdn.cozystack.io/vpcs`, each with
//! the range 10.10.0.0/24; the ADD of its network (the node's conflist, as kubelet runs it)
//! attaches `eth0` on net 0, then `net1` (VPC blue, pinned address and MAC) and `net2` (VPC
//! green, pinned to the same address: the ranges overlap freely). Asserted: one CNI result
//! naming all three interfaces; the network-status annotation the agent wrote, in Multus's
//! format; each interface's Port names it (`spec.interface`); the routes (default on `eth0`,
//! the VPC's range only on `net1`/`net2`); each interface reaches its own VPC's pod on the
//! other node and not the other VPC's; `eth0` still reaches a net-0 pod; CNI GC listing only
//! `eth0` keeps the secondaries; the pod's DEL removes every interface, Port and endpoint. A
//! list naming an unbound VPC fails the ADD whole, leaving nothing (not even `eth0`). Needs
//! root and the agent and CNI binaries built.

use std::net::IpAddr;

use cozyplane_apis::v1alpha1::Port;
use cozyplane_bpf::maps::endpoints::EndpointsMap;
use cozyplane_lab::{Lab, Netns, add_network, del_network, invoke_cni, plugin_conf};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};

mod common;
use common::{Cp, create_pod_with, pod, tenant, vni, vpc_ip};

const LIST: &str = "sdn.cozystack.io/vpcs";
const STATUS: &str = "k8s.v1.cni.cncf.io/network-status";
const PINNED: &str = "10.10.0.50";

#[test]
fn lab_vpcs_list() {
    Lab::run(2, body);
}

/// The Ports of VPC `t1/<vpc>` held by pod `name`.
async fn ports_of(cp: &Cp, vpc: &str, name: &str) -> Vec<Port> {
    let sel = format!("sdn.cozystack.io/vpc-namespace=t1,sdn.cozystack.io/vpc={vpc}");
    Api::<Port>::all(cp.sdn.clone())
        .list(&ListParams::default().labels(&sel))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.spec.pod_name == name && p.metadata.deletion_timestamp.is_none())
        .collect()
}

/// `ip route show` of `dev` inside `ns`, one route per line.
fn routes(ns: &Netns, dev: &str) -> Vec<String> {
    ns.ip_ok(&["route", "show", "dev", dev])
        .lines()
        .map(|l| l.trim().to_string())
        .collect()
}

/// Three pings from `ns` out of `dev` to `to`; true when at least one is answered.
fn ping_via(ns: &Netns, dev: &str, to: IpAddr) -> bool {
    ns.ping_from(Some(dev), to, 3) > 0
}

async fn body(lab: &mut Lab) {
    let cp = Cp::start(lab).await;
    let lab = &*lab;
    let n0 = &lab.nodes[0];
    tenant(&cp, "t1", "blue", "10.10.0.0/24").await;
    // A second VPC of t1 with the same range, and its binding.
    let green: cozyplane_apis::v1alpha1::VPC = serde_json::from_value(json!({
        "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "VPC",
        "metadata": {"name": "green", "namespace": "t1"}, "spec": {"cidrs": ["10.10.0.0/24"]}}))
    .unwrap();
    Api::<cozyplane_apis::v1alpha1::VPC>::namespaced(cp.sdn.clone(), "t1")
        .create(&PostParams::default(), &green)
        .await
        .unwrap();
    let binding: cozyplane_apis::v1alpha1::VPCBinding = serde_json::from_value(json!({
        "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "VPCBinding",
        "metadata": {"name": "green", "namespace": "t1"},
        "spec": {"vpcRef": {"namespace": "t1", "name": "green"}}}))
    .unwrap();
    Api::<cozyplane_apis::v1alpha1::VPCBinding>::namespaced(cp.sdn.clone(), "t1")
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    let (blue_vni, green_vni) = (vni(&cp, "t1", "blue").await, vni(&cp, "t1", "green").await);

    // The peers on the other node: one pod in each VPC, one on net 0. A filler in green first,
    // so that green's pod does not hold the address blue's pod has.
    let filler = pod(&cp, lab, 1, "t1", "filler", Some("green")).await;
    let b1 = pod(&cp, lab, 1, "t1", "b1", Some("blue")).await;
    let g1 = pod(&cp, lab, 1, "t1", "g1", Some("green")).await;
    let plain = pod(&cp, lab, 1, "t1", "plain", None).await;
    let (b1_ip, g1_ip) = (
        IpAddr::V4(vpc_ip(&cp, &b1).await),
        IpAddr::V4(vpc_ip(&cp, &g1).await),
    );
    common::gone(&cp, lab, &filler).await;
    assert_ne!(b1_ip, g1_ip);

    // The multi-homed pod.
    let list = format!(
        r#"[{{"vpc": "blue", "ips": ["{PINNED}"], "mac": "02:00:00:00:00:50"}}, {{"vpc": "t1/green", "ips": ["{PINNED}"]}}]"#
    );
    let uid = create_pod_with(&cp, lab, (0, "t1", "multi", None), (&[], &[(LIST, &list)])).await;
    let ns = Netns::new("p");
    let (code, result) = add_network(n0, "t1-multi", &ns.path(), ("t1", "multi", &uid), &json!({}));
    assert_eq!(code, 0, "ADD: {result}\n{}", n0.log_text());
    let sandbox: Vec<&str> = result["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["sandbox"].is_string())
        .filter_map(|i| i["name"].as_str())
        .collect();
    assert_eq!(sandbox, ["eth0", "net1", "net2"], "{result}");
    for ip in result["ips"].as_array().unwrap() {
        let at = ip["interface"].as_u64().unwrap() as usize;
        assert!(
            result["interfaces"][at]["sandbox"].is_string(),
            "{ip} points at a host interface"
        );
    }

    // network-status, as Multus would have written it.
    // Written once ADD has returned.
    let status: Vec<Value> = common::until("the network-status annotation", || async {
        let pod = Api::<Pod>::namespaced(cp.kube.clone(), "t1")
            .get("multi")
            .await
            .ok()?;
        serde_json::from_str(pod.metadata.annotations?.get(STATUS)?).ok()
    })
    .await;
    let names: Vec<(&str, &str)> = status
        .iter()
        .map(|s| (s["name"].as_str().unwrap(), s["interface"].as_str().unwrap()))
        .collect();
    assert_eq!(names[1..], [("blue", "net1"), ("t1/green", "net2")], "{status:?}");
    assert_eq!(status[0]["default"], true);
    assert_eq!(status[1]["ips"], json!([PINNED]));
    assert_eq!(status[1]["mac"], "02:00:00:00:00:50");
    let mac1 = ns.exec(&["cat", "/sys/class/net/net1/address"]);
    assert_eq!(String::from_utf8_lossy(&mac1.stdout).trim(), "02:00:00:00:00:50");

    // Each interface's Port names it.
    for (vpc, ifname) in [("blue", "net1"), ("green", "net2")] {
        let ports = ports_of(&cp, vpc, "multi").await;
        assert_eq!(ports.len(), 1, "{vpc}: {ports:?}");
        assert_eq!(
            (ports[0].spec.interface.as_str(), ports[0].spec.ip.as_str()),
            (ifname, PINNED)
        );
    }

    // Routes: the default on eth0 only, each VPC's range on its interface.
    let default = ns.ip_ok(&["route", "show", "default"]);
    assert!(
        default.contains("dev eth0") && default.lines().count() == 1,
        "{default}"
    );
    for dev in ["net1", "net2"] {
        let r = routes(&ns, dev);
        assert!(
            r.len() == 1 && r[0].starts_with("10.10.0.0/24 via 169.254.1.1") && r[0].contains("onlink"),
            "{dev}: {r:?}"
        );
    }

    // Each interface reaches its own VPC's pod on the other node, not the other's; eth0 the
    // net-0 pod.
    assert!(ping_via(&ns, "net1", b1_ip), "net1 → blue's pod");
    assert!(ping_via(&ns, "net2", g1_ip), "net2 → green's pod");
    assert!(
        !ping_via(&ns, "net1", g1_ip),
        "net1 reached green's address {g1_ip}"
    );
    assert!(
        !ping_via(&ns, "net2", b1_ip),
        "net2 reached blue's address {b1_ip}"
    );
    assert!(ping_via(&ns, "eth0", IpAddr::V4(plain.fabric)), "eth0 → net 0");
    // And back: blue's pod reaches the pinned address in blue (net1). The reply leaves by the
    // pod's own routing, which takes the lowest metric of the two routes to 10.10.0.0/24
    // (net1's): a pod whose VPCs share a range answers connections on the other interface
    // only with routing of its own (a VRF, policy rules), the tenant's business.
    assert!(b1.ns.ping(PINNED.parse::<IpAddr>().unwrap(), 3, 1));

    // CNI GC listing the pod's network only keeps its secondary interfaces.
    let list_conf = n0.conflist();
    let mut gc = plugin_conf(&list_conf, 0, None, &json!({}));
    gc["cniVersion"] = json!("1.1.0");
    gc["cni.dev/valid-attachments"] = json!([{"containerID": "t1-multi", "ifname": "eth0"},
        {"containerID": "t1-b1", "ifname": "eth0"}, {"containerID": "t1-g1", "ifname": "eth0"},
        {"containerID": "t1-plain", "ifname": "eth0"}]);
    let (code, out) = invoke_cni(n0, "GC", "", "", ("", "", ""), &gc);
    assert_eq!(code, 0, "GC: {out}");
    assert!(ping_via(&ns, "net1", b1_ip), "net1 after GC");

    // The pod's DEL removes every interface, Port and endpoint.
    let (code, out) = del_network(
        n0,
        "t1-multi",
        &ns.path(),
        ("t1", "multi", &uid),
        (&json!({}), Some(&result)),
    );
    assert_eq!(code, 0, "DEL: {out}");
    let links = ns.ip_ok(&["-o", "link"]);
    assert!(
        !links.contains("net1") && !links.contains("net2") && !links.contains("eth0"),
        "{links}"
    );
    for vpc in ["blue", "green"] {
        assert!(ports_of(&cp, vpc, "multi").await.is_empty(), "{vpc}: a Port left");
    }
    let pinned: IpAddr = PINNED.parse().unwrap();
    let eps = EndpointsMap::from_pin(&n0.scratch.pins()).unwrap();
    assert!(
        eps.get(blue_vni, pinned).unwrap().is_none(),
        "blue's endpoint left"
    );
    assert!(
        eps.get(green_vni, pinned).unwrap().is_none(),
        "green's endpoint left"
    );

    // A list naming a VPC no binding grants: the ADD fails whole and leaves nothing.
    let before = n0.pod_veths();
    let uid = create_pod_with(
        &cp,
        lab,
        (0, "t1", "denied", None),
        (&[], &[(LIST, "blue,t9/red")]),
    )
    .await;
    let ns2 = Netns::new("p");
    let (code, out) = add_network(n0, "t1-denied", &ns2.path(), ("t1", "denied", &uid), &json!({}));
    assert_ne!(code, 0, "ADD with an unbound VPC: {out}");
    assert_eq!(out["code"], 102, "{out}");
    assert_eq!(n0.pod_veths(), before, "a veth left");
    assert!(ports_of(&cp, "blue", "denied").await.is_empty(), "a Port left");
    let links = ns2.ip_ok(&["-o", "link"]);
    assert!(!links.contains("eth0") && !links.contains("net1"), "{links}");
}
