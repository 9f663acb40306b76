//! `make e2e`, two nodes: revocation that severs (issue 11, item 3) with real packets. Needs
//! root, ping, tcpdump, iperf3, and the agent and CNI binaries built. The control-plane
//! helpers are shared with `e2e.rs` (`common/`).
//!
//! Layout: VPC r (10.30.0.0/24) of t1, bound in t1 (p2 on n1, p3 on n2) and in t2 (v1 on
//! n1, the pod whose right goes away). Deleting t2's binding reaps v1's Port only: the server
//! marks it (the `sdn.cozystack.io/sever` finalizer holds it and its address), n1's agent
//! severs v1 and releases the Port. Measured from the delete call, on the kernel's clock of
//! captures inside the pods: the last VPC packet v1 sent to a peer and the last one it
//! received, same node and across nodes (printed; the 1 s of the issue is not asserted, it
//! depends on the machine). Asserted: afterwards nothing passes either way (captures and
//! drop counters), and the node still reaches v1's fabric address (ICMP and a TCP connect,
//! as a kubelet probe would).

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use cozyplane_apis::v1alpha1::{Port, VPC, VPCBinding};
use cozyplane_bpf::DropReason;
use cozyplane_lab::{Lab, LabPod, Netns, Proc, capture, start_tcpdump, stop_tcpdump};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

mod common;
use common::{Cp, now, pod, stamps, tenant, vpc_ip, wait};

/// A ping from `from` to `to` every 10 ms for `secs` seconds, in the background.
fn pinger(from: &LabPod, to: Ipv4Addr, secs: u32) -> Proc {
    from.ns.pinger(None, to, secs)
}

/// A TCP connect from the node to `ip:port` (a one-shot iperf3 server listens there).
fn tcp_probe(node: &Netns, ip: Ipv4Addr, port: u16) -> bool {
    node.exec(&[
        "iperf3",
        "-c",
        &ip.to_string(),
        "-p",
        &port.to_string(),
        "-t",
        "1",
        "--connect-timeout",
        "2000",
    ])
    .status
    .success()
}

#[test]
fn lab_revocation() {
    Lab::run(2, body);
}

async fn body(lab: &mut Lab) {
    let cp = Cp::start(lab).await;
    let lab = &*lab;
    let (n1, n2) = (&lab.nodes[0], &lab.nodes[1]);

    tenant(&cp, "t1", "r", "10.30.0.0/24").await;
    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(cp.kube.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "t2"}})).unwrap(),
    )
    .await
    .unwrap();
    let grant: VPCBinding = serde_json::from_value(json!({"apiVersion": "sdn.cozystack.io/v1alpha1",
        "kind": "VPCBinding", "metadata": {"name": "r", "namespace": "t2"},
        "spec": {"vpcRef": {"namespace": "t1", "name": "r"}}}))
    .unwrap();
    let bindings: Api<VPCBinding> = Api::namespaced(cp.sdn.clone(), "t2");
    bindings.create(&PostParams::default(), &grant).await.unwrap();

    let v1 = pod(&cp, lab, 0, "t2", "v1", Some("t1/r")).await;
    let p2 = pod(&cp, lab, 0, "t1", "p2", Some("r")).await;
    let p3 = pod(&cp, lab, 1, "t1", "p3", Some("r")).await;
    let (iv1, ip2, ip3) = (
        vpc_ip(&cp, &v1).await,
        vpc_ip(&cp, &p2).await,
        vpc_ip(&cp, &p3).await,
    );
    let ports: Api<Port> = Api::all(cp.sdn.clone());
    let port = ports
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|p| p.spec.pod_name == "v1")
        .expect("v1's Port");
    let vni = Api::<VPC>::namespaced(cp.sdn.clone(), "t1")
        .get("r")
        .await
        .unwrap()
        .status
        .map_or(0, |s| u32::try_from(s.vni).unwrap());
    eprintln!("v1 {iv1} (fabric {}), p2 {ip2}, p3 {ip3}, vni {vni}", v1.fabric);
    wait("the nodes learn each other's VPC pods", || {
        n2.remote(vni, iv1).is_some() && n1.remote(vni, ip3).is_some()
    });
    assert!(v1.ns.ping(ip2, 3, 3), "v1 -> p2, same node, before");
    assert!(v1.ns.ping(ip3, 3, 3), "v1 -> p3, across nodes, before");
    assert!(p2.ns.ping(iv1, 3, 3), "p2 -> v1 before");
    assert!(p3.ns.ping(iv1, 3, 3), "p3 -> v1 before");
    assert!(n1.ns.ping(v1.fabric, 3, 3), "node -> v1's fabric address before");

    // --- Streams of pings both ways, same node and across nodes; captures inside the
    // receiving pods. The binding goes at `cut`.
    let dir = tempfile::tempdir().unwrap();
    let flows = [
        (
            "v1 -> p2 (sent, same node)",
            &p2,
            format!("icmp and src host {iv1}"),
        ),
        (
            "v1 -> p3 (sent, across nodes)",
            &p3,
            format!("icmp and src host {iv1}"),
        ),
        (
            "p2 -> v1 (received, same node)",
            &v1,
            format!("icmp and src host {ip2}"),
        ),
        (
            "p3 -> v1 (received, across nodes)",
            &v1,
            format!("icmp and src host {ip3}"),
        ),
    ];
    let caps: Vec<_> = flows
        .iter()
        .enumerate()
        .map(|(i, (_, p, f))| {
            let file = dir.path().join(format!("{i}.pcap"));
            (start_tcpdump(&p.ns, "eth0", f, &file), file)
        })
        .collect();
    let pings = [
        pinger(&v1, ip2, 5),
        pinger(&v1, ip3, 5),
        pinger(&p2, iv1, 5),
        pinger(&p3, iv1, 5),
    ];
    let severed0 = n1.drops(DropReason::Severed);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let cut = now();
    let t = Instant::now();
    bindings.delete("r", &DeleteParams::default()).await.unwrap();
    // The Port is held (the finalizer) until n1 severed v1, then goes.
    let uid = port.metadata.uid.clone().unwrap();
    let name = port.metadata.name.clone().unwrap();
    loop {
        match ports.get_opt(&name).await.unwrap() {
            Some(p) if p.metadata.uid.as_deref() == Some(uid.as_str()) => {}
            _ => break,
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "v1's Port is never released"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let released = t.elapsed();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    drop(pings);
    let mut report = Vec::new();
    for ((what, _, _), (p, file)) in flows.iter().zip(caps) {
        stop_tcpdump(p);
        let ts = stamps(&file);
        let before = ts.iter().filter(|t| **t < cut).count();
        let last = ts.iter().copied().fold(f64::MIN, f64::max);
        assert!(
            before >= 10,
            "{what}: the pings were passing before the delete ({before} packets)"
        );
        eprintln!(
            "{what}: {before} packets before the binding's delete, the last one {:.0} ms after it",
            (last - cut) * 1000.0
        );
        report.push((*what, last - cut));
        // The contract's bound (issue 29): a revocation stops the flow within 1 s of the
        // binding's delete. The pings run every 10 ms, so the last one seen is when it stopped.
        assert!(
            last - cut < 1.0,
            "{what}: the last packet {:.0} ms after the binding's delete, over the 1 s bound",
            (last - cut) * 1000.0
        );
    }
    eprintln!(
        "v1's Port released (finalizer removed by n1, Port gone) {} ms after the delete",
        released.as_millis()
    );
    let severed = n1.drops(DropReason::Severed) - severed0;
    assert!(severed > 0, "n1 counts DROP_SEVERED ({severed})");
    drop(report);

    // --- Afterwards: nothing passes in the VPC, either way; counted.
    let sev = n1.drops(DropReason::Severed);
    let iso = n2.drops(DropReason::VpcIsolation) + n2.drops(DropReason::NoEndpoint);
    let seen = capture(&p2.ns, "eth0", &format!("icmp and host {iv1}"), || {
        let _ = v1.ns.ping(ip2, 5, 0);
    });
    assert_eq!(seen, 0, "p2 sees nothing from v1");
    let seen = capture(&p3.ns, "eth0", &format!("icmp and host {iv1}"), || {
        let _ = v1.ns.ping(ip3, 5, 0);
    });
    assert_eq!(seen, 0, "p3 (n2) sees nothing from v1");
    let seen = capture(&v1.ns, "eth0", "icmp", || {
        let _ = p2.ns.ping(iv1, 5, 0);
        let _ = p3.ns.ping(iv1, 5, 0);
    });
    assert_eq!(seen, 0, "v1 receives nothing in its VPC");
    let sev = n1.drops(DropReason::Severed) - sev;
    let iso = n2.drops(DropReason::VpcIsolation) + n2.drops(DropReason::NoEndpoint) - iso;
    assert!(
        sev >= 15,
        "v1's 10 pings and p2's 5 are DROP_SEVERED on n1 ({sev})"
    );
    assert!(
        sev + iso >= 20,
        "p3's pings to v1 are dropped too: on n1 (severed) or, once the Port is gone, on n2 ({sev} + {iso})"
    );
    eprintln!(
        "PASS a revoked pod sends and receives nothing in its VPC ({sev} severed drops on n1, {iso} on n2)"
    );

    // --- The fabric address keeps the Kubernetes contract.
    assert!(n1.ns.ping(v1.fabric, 3, 3), "node -> v1's fabric address");
    let srv = v1.ns.iperf_server(5401);
    assert!(
        tcp_probe(&n1.ns, v1.fabric, 5401),
        "TCP probe of v1's fabric address"
    );
    drop(srv);
    // The other pods of the VPC are untouched.
    assert!(p2.ns.ping(ip3, 3, 3), "p2 -> p3 after v1 was severed");
    eprintln!("PASS the revoked pod's fabric address still answers the node (ICMP and TCP)");
}
