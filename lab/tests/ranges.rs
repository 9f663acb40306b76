//! `make e2e`, two nodes: a VPC with two IPv4 ranges (issue 11, item 5) delivers between
//! pods of both ranges, on one node and across nodes, and a range its pods still use cannot
//! be removed. Needs root, ping and tcpdump, and the agent and CNI binaries built; the
//! control-plane helpers are shared with `e2e.rs` (`common/`).
//!
//! Layout: VPC m in t1 with 10.40.0.0/30 (one address, .2) and 10.41.0.0/29. IPAM fills the
//! first range first, so r1 (made first, on n2) gets 10.40.0.2 and the rest the second range:
//! s1 and s1b on n1, s2 on n2. VPC o in t2 (10.50.0.0/24 and 10.41.0.0/28, overlapping m's
//! second range) with o1 on n2 is peered with m: Pending until o drops its second range.

use std::path::Path;
use std::time::Instant;

use cozyplane_apis::v1alpha1::VPCPeering;
use cozyplane_bpf::maps::xnet_allow::XnetAllowMap;
use cozyplane_lab::{Lab, capture, del_network};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

mod common;
use common::{Cp, pod, tenant_ranges, vpc_ip, wait};

#[test]
fn lab_ranges() {
    Lab::run(2, body);
}

/// A merge patch of VPC t1/m's ranges; the API error, if any.
async fn set_ranges(cp: &Cp, cidrs: &[&str]) -> Result<(), kube::core::Status> {
    set_ranges_of(cp, "t1", "m", cidrs).await
}

/// A merge patch of VPC `ns/name`'s ranges; the API error, if any.
async fn set_ranges_of(cp: &Cp, ns: &str, name: &str, cidrs: &[&str]) -> Result<(), kube::core::Status> {
    let vpcs: Api<cozyplane_apis::v1alpha1::VPC> = Api::namespaced(cp.sdn.clone(), ns);
    match vpcs
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"cidrs": cidrs}})),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) => Err(*s),
        Err(e) => panic!("patch of {ns}/{name}: {e}"),
    }
}

/// Both halves are made by the test: `ns/vpc` offered to `peer_ns/peer`, named `vpc-to-peer`.
async fn half(cp: &Cp, (ns, vpc): (&str, &str), (peer_ns, peer): (&str, &str)) {
    let p: VPCPeering = serde_json::from_value(json!({"apiVersion": "sdn.cozystack.io/v1alpha1",
        "kind": "VPCPeering", "metadata": {"name": format!("{vpc}-to-{peer}"), "namespace": ns},
        "spec": {"vpcRef": {"name": vpc}, "peerRef": {"namespace": peer_ns, "name": peer}}}))
    .unwrap();
    Api::<VPCPeering>::namespaced(cp.sdn.clone(), ns)
        .create(&PostParams::default(), &p)
        .await
        .unwrap();
}

fn allows(pins: &Path, s: u32, t: u32) -> bool {
    XnetAllowMap::from_pin(pins)
        .and_then(|m| m.entries())
        .unwrap_or_default()
        .iter()
        .any(|(k, _)| *k == (s, t))
}

/// Polls the async `f` every 100 ms until it holds; fails after 20 s (a hang guard).
async fn wait_async<F: std::future::Future<Output = bool>>(what: &str, mut f: impl FnMut() -> F) {
    let t = Instant::now();
    while !f().await {
        assert!(t.elapsed().as_secs() < 20, "timed out waiting for {what}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

async fn body(lab: &mut Lab) {
    let cp = Cp::start(lab).await;
    let lab = &*lab;
    let (n1, n2) = (&lab.nodes[0], &lab.nodes[1]);

    tenant_ranges(&cp, "t1", "m", &["10.40.0.0/30", "10.41.0.0/29"]).await;
    let r1 = pod(&cp, lab, 1, "t1", "r1", Some("m")).await;
    let s1 = pod(&cp, lab, 0, "t1", "s1", Some("m")).await;
    let s1b = pod(&cp, lab, 0, "t1", "s1b", Some("m")).await;
    let s2 = pod(&cp, lab, 1, "t1", "s2", Some("m")).await;
    let (ir1, is1, is1b, is2) = (
        vpc_ip(&cp, &r1).await,
        vpc_ip(&cp, &s1).await,
        vpc_ip(&cp, &s1b).await,
        vpc_ip(&cp, &s2).await,
    );
    eprintln!("r1 {ir1} (n2), s1 {is1} (n1), s1b {is1b} (n1), s2 {is2} (n2)");
    assert_eq!(ir1.to_string(), "10.40.0.2", "the first range is filled first");
    for ip in [is1, is1b, is2] {
        assert_eq!(
            ip.octets()[..3],
            [10, 41, 0],
            "{ip}: the second range once the first is full"
        );
    }
    let vni = {
        let v = Api::<cozyplane_apis::v1alpha1::VPC>::namespaced(cp.sdn.clone(), "t1")
            .get("m")
            .await
            .unwrap();
        u32::try_from(v.status.unwrap().vni).unwrap()
    };
    wait("each node learns the other's pods of both ranges", || {
        n1.remote(vni, ir1).is_some() && n1.remote(vni, is2).is_some() && n2.remote(vni, is1).is_some()
    });

    // Both ranges, both ways: same node (r1-s2 on n2, s1-s1b on n1) and across nodes.
    let pairs = [
        ("r1 -> s2, n2, first range to second", &r1, is2),
        ("s2 -> r1, n2, second range to first", &s2, ir1),
        ("s1 -> s1b, n1, second range", &s1, is1b),
        ("r1 (n2) -> s1 (n1), first range to second", &r1, is1),
        ("s1 (n1) -> r1 (n2), second range to first", &s1, ir1),
        ("s1b (n1) -> s2 (n2), second range", &s1b, is2),
    ];
    for (what, from, to) in pairs {
        assert!(from.ns.ping(to, 3, 3), "{what}");
    }
    // Native addresses: s1 sees r1's own address from the first range.
    let seen = capture(&s1.ns, "eth0", &format!("icmp and src host {ir1}"), || {
        let _ = r1.ns.ping(is1, 3, 3);
    });
    assert!(
        seen >= 3,
        "s1 (n1) sees r1's first-range address as the source ({seen})"
    );
    eprintln!("PASS a VPC with two ranges delivers between both ranges, same node and across nodes");

    // Peering compares and routes every range. o's second range overlaps m's second: the
    // pair stays Pending and no node programs it; without it, o1 reaches m's pods of both
    // ranges (r1 on its node, s1 across).
    tenant_ranges(&cp, "t2", "o", &["10.50.0.0/24", "10.41.0.0/28"]).await;
    let o1 = pod(&cp, lab, 1, "t2", "o1", Some("o")).await;
    let io1 = vpc_ip(&cp, &o1).await;
    let vo = {
        let v = Api::<cozyplane_apis::v1alpha1::VPC>::namespaced(cp.sdn.clone(), "t2")
            .get("o")
            .await
            .unwrap();
        u32::try_from(v.status.unwrap().vni).unwrap()
    };
    half(&cp, ("t1", "m"), ("t2", "o")).await;
    half(&cp, ("t2", "o"), ("t1", "m")).await;
    let peerings: Api<VPCPeering> = Api::namespaced(cp.sdn.clone(), "t1");
    // The status loop's verdict, for the right reason: matched, but the ranges overlap.
    wait_async("m-to-o matched with CIDRsDisjoint=False", || async {
        let p = peerings.get("m-to-o").await.unwrap();
        p.status.is_some_and(|s| {
            let c = |ty: &str, v: &str| s.conditions.iter().any(|c| c.type_ == ty && c.status == v);
            c("PeerMatched", "True") && c("CIDRsDisjoint", "False")
        })
    })
    .await;
    let st = peerings.get("m-to-o").await.unwrap().status.unwrap();
    assert_eq!(st.phase, "Pending", "second ranges overlap: {st:?}");
    for n in &lab.nodes {
        assert!(
            !allows(&n.scratch.pins(), vni, vo) && !allows(&n.scratch.pins(), vo, vni),
            "{} programs the overlapping pair",
            n.name
        );
    }
    assert!(!o1.ns.ping(ir1, 2, 1), "o1 -> r1 while the pair overlaps");
    set_ranges_of(&cp, "t2", "o", &["10.50.0.0/24"])
        .await
        .expect("o's second range holds nothing");
    for n in &lab.nodes {
        let pins = n.scratch.pins();
        wait(&format!("{} programs m-o", n.name), || {
            allows(&pins, vni, vo) && allows(&pins, vo, vni)
        });
    }
    assert!(o1.ns.ping(ir1, 3, 3), "o1 -> r1 (first range), same node, peered");
    assert!(o1.ns.ping(is1, 3, 3), "o1 (n2) -> s1 (n1, second range), peered");
    assert!(s1.ns.ping(io1, 3, 3), "s1 (n1, second range) -> o1 (n2), peered");
    eprintln!(
        "PASS peering: an overlap in the second ranges stays Pending; every range is routed once disjoint"
    );

    // A used range cannot be removed: 422 naming the range's field, and nothing changes.
    let e = set_ranges(&cp, &["10.40.0.0/30"])
        .await
        .expect_err("removing the second range, which s1, s1b and s2 use");
    assert_eq!(e.code, 422, "{e:?}");
    assert!(
        e.message.contains("spec.cidrs[1]") && e.message.contains("10.41.0.0/29"),
        "{}",
        e.message
    );
    assert!(s1.ns.ping(ir1, 2, 2), "s1 -> r1 after the refused change");
    // Once r1 is gone (DEL releases its Port), its range may go; the rest keeps working.
    let pod_id = (r1.namespace.as_str(), r1.name.as_str(), r1.uid.as_str());
    let (code, v) = del_network(n2, &r1.cid, &r1.ns.path(), pod_id, (&json!({}), Some(&r1.result)));
    assert_eq!(code, 0, "DEL r1: {v}");
    let t = Instant::now();
    loop {
        match set_ranges(&cp, &["10.41.0.0/29"]).await {
            Ok(()) => break,
            Err(e) => {
                assert!(
                    t.elapsed().as_secs() < 20,
                    "the first range is still refused after r1's DEL: {}",
                    e.message
                );
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
        }
    }
    assert!(
        s1.ns.ping(is2, 3, 3),
        "s1 (n1) -> s2 (n2) after the first range went"
    );
    eprintln!("PASS a used range cannot be removed (422 at spec.cidrs[1]); an unused one can");
}
