//! `make e2e`: two nodes, the kube stand-in and cozyplane-apiserver, real packets.
//! Needs root (fails without it), ping and tcpdump, and the agent and CNI binaries built.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use cozyplane_apis::v1alpha1::{Port, VPC};
use cozyplane_bpf::DropReason;
use cozyplane_lab::{Lab, LabPod, Netns, capture, del_network, invoke_cni, invoke_plugin};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::json;

mod common;
use common::{Cp, create_pod, metric, pod, pod_with, tenant, vpc_ip, wait};

/// `hostPort` -> `containerPort` (TCP), as kubelet passes a pod's ports to the conflist's
/// `portMappings` capability.
fn host_port(host: u16, container: u16) -> serde_json::Value {
    json!({"portMappings": [{"hostPort": host, "containerPort": container, "protocol": "tcp"}]})
}

/// A TCP connection (a one-second iperf3 stream) from `client` to `to:port`, served by
/// `server` on `listen`: true if it connected and carried data. TCP connects only if the
/// replies come from the address the client dialled, so this also proves the client saw
/// `to`, not the backend's address.
fn tcp_ok(client: &LabPod, (to, port): (Ipv4Addr, u16), server: &LabPod, listen: u16) -> Result<(), String> {
    let _srv = server.ns.iperf_server(listen);
    let out = client.ns.exec(&[
        "iperf3",
        "-c",
        &to.to_string(),
        "-p",
        &port.to_string(),
        "-t",
        "1",
        "--connect-timeout",
        "3000",
    ]);
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// A DNAT rule as kube-proxy writes one for a NodePort (`externalTrafficPolicy: Local`, so
/// no masquerade: the backend sees the client) on `node`: `<node ip>:port` -> `to`.
fn node_port(node: &cozyplane_lab::Node, port: u16, to: (Ipv4Addr, u16)) {
    let dst = format!("{}:{}", to.0, to.1);
    let out = node.ns.exec(&[
        "iptables",
        "-t",
        "nat",
        "-A",
        "PREROUTING",
        "-d",
        &node.ip.to_string(),
        "-p",
        "tcp",
        "--dport",
        &port.to_string(),
        "-j",
        "DNAT",
        "--to-destination",
        &dst,
    ]);
    assert!(
        out.status.success(),
        "iptables: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `cozyplane_bpf_map_entries` of every map in `node`'s /metrics.
fn map_entries(node: &cozyplane_lab::Node) -> std::collections::BTreeMap<String, f64> {
    node.metrics()
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("cozyplane_bpf_map_entries{map=\"")?;
            let (map, v) = rest.split_once("\"}")?;
            Some((map.to_string(), v.trim().parse().ok()?))
        })
        // The policy maps follow the API's pods and policies (agent/src/policy/), not ADD and
        // DEL: a pod this test wires by hand keeps its identity while it exists in the API.
        .filter(|(map, _)| !cozyplane_bpf::maps::POLICY.contains(&map.as_str()))
        .collect()
}

/// A VPC pod on n1 whose ADD must fail: the CNI error, once checked that nothing was wired.
async fn refused_add(cp: &Cp, lab: &Lab, (ns, name): (&str, &str), vpc: &str) -> serde_json::Value {
    let uid = create_pod(cp, lab, 0, ns, name, Some(vpc))
        .await
        .metadata
        .uid
        .unwrap_or_default();
    let pns = Netns::new("p");
    let n1 = &lab.nodes[0];
    let (code, v) = invoke_cni(
        n1,
        "ADD",
        &format!("{ns}-{name}"),
        &pns.path(),
        (ns, name, &uid),
        &n1.conf(),
    );
    assert_ne!(code, 0, "ADD {ns}/{name} must fail: {v}");
    let links = pns.ip_ok(&["-o", "link"]);
    assert!(
        !links.contains("eth0"),
        "nothing was wired for {ns}/{name}: {links}"
    );
    v
}

/// `ip netns del`: what a runtime does to a sandbox, here before the test's own drop.
fn sh_netns_del(ns: &Netns) {
    let out = std::process::Command::new("ip")
        .args(["netns", "del", &ns.0])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn lab_e2e() {
    Lab::run(2, body);
}

async fn body(lab: &mut Lab) {
    let cp = Cp::start(lab).await;
    let kube_kc = cp.kube_kubeconfig();
    let sdn_kc = cp.server.kubeconfig.clone();
    let lab = &*lab;
    let (n1, n2) = (&lab.nodes[0], &lab.nodes[1]);

    // --- Default network across nodes.
    let a = pod(&cp, lab, 0, "default", "a", None).await;
    // b publishes a hostPort (the conflist's portmap, as kubelet asks for a pod's ports).
    let b = pod_with(&cp, lab, (1, "default", "b", None), &host_port(18081, 5202)).await;
    wait("n1 learns b's node", || {
        n1.remote(0, b.fabric) == Some(n2.ip.into())
    });
    wait("n2 learns a's node", || {
        n2.remote(0, a.fabric) == Some(n1.ip.into())
    });
    assert!(a.ns.ping(b.fabric, 3, 3), "default a -> b across nodes");
    assert!(b.ns.ping(a.fabric, 3, 3), "default b -> a across nodes");
    // n2's agent was started without --fabric-block: its block is its Node's spec.podCIDR.
    assert!(
        n2.log_text()
            .contains("fabric block from the Node's spec.podCIDR")
            && b.fabric.octets()[..3] == [10, 244, 2],
        "n2 did not take its block from spec.podCIDR: {} / {}",
        b.fabric,
        n2.log_text()
    );
    eprintln!("PASS default-network pods talk across nodes");
    let a2 = pod(&cp, lab, 0, "default", "a2", None).await;
    assert!(a.ns.ping(a2.fabric, 3, 3), "default a -> a2 on the same node");
    assert!(a2.ns.ping(a.fabric, 3, 3), "default a2 -> a on the same node");
    assert!(n1.ns.ping(a2.fabric, 3, 3), "node -> its own default pod");
    eprintln!("PASS default-network pods talk within a node");

    // --- A node reaches a pod on the other node (host route over the overlay), both ways.
    assert!(n1.ns.ping(b.fabric, 3, 3), "node n1 -> pod b on n2");
    assert!(n2.ns.ping(a.fabric, 3, 3), "node n2 -> pod a on n1");
    assert!(b.ns.ping(n1.ip, 3, 3), "pod b on n2 -> node n1");
    eprintln!("PASS a node reaches default-network pods on other nodes and back");

    // --- kube-proxy still works: Services as the DNAT rules kube-proxy writes on the client's
    // node, one backend on the same node, one on the other. The backend's reply must pass the
    // client node's conntrack to be un-NATed, else TCP never connects.
    for (vip, backend) in [("10.96.0.10", a2.fabric), ("10.96.0.11", b.fabric)] {
        let rule = [
            "iptables",
            "-t",
            "nat",
            "-A",
            "PREROUTING",
            "-d",
            vip,
            "-p",
            "tcp",
            "--dport",
            "80",
            "-j",
            "DNAT",
            "--to-destination",
        ];
        let to = format!("{backend}:5202");
        let mut args = rule.to_vec();
        args.push(&to);
        let out = n1.ns.exec(&args);
        assert!(
            out.status.success(),
            "iptables: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for (vip, server) in [("10.96.0.10", &a2), ("10.96.0.11", &b)] {
        let _srv = server.ns.iperf_server(5202);
        let out = a.ns.exec(&[
            "iperf3",
            "-c",
            vip,
            "-p",
            "80",
            "-t",
            "1",
            "--connect-timeout",
            "3000",
        ]);
        assert!(
            out.status.success(),
            "pod a -> Service {vip} (backend {}): {}{}",
            server.name,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    eprintln!("PASS Services through kube-proxy-style DNAT, backend on the same node and across nodes");

    // --- Two tenants, two VPCs with the same CIDR.
    tenant(&cp, "t1", "blue", "10.10.0.0/24").await;
    tenant(&cp, "t2", "green", "10.10.0.0/24").await;
    let blue1 = pod_with(&cp, lab, (0, "t1", "blue1", Some("blue")), &host_port(18080, 80)).await;
    let blue2 = pod(&cp, lab, 0, "t1", "blue2", Some("t1/blue")).await;
    let blue3 = pod(&cp, lab, 1, "t1", "blue3", Some("blue")).await;
    let green1 = pod(&cp, lab, 0, "t2", "green1", Some("green")).await;
    let green2 = pod(&cp, lab, 1, "t2", "green2", Some("green")).await;
    let (b1, b2, b3) = (
        vpc_ip(&cp, &blue1).await,
        vpc_ip(&cp, &blue2).await,
        vpc_ip(&cp, &blue3).await,
    );
    let (g1, g2) = (vpc_ip(&cp, &green1).await, vpc_ip(&cp, &green2).await);
    eprintln!("blue {b1} {b2} {b3}, green {g1} {g2}");
    assert_eq!(
        b1, g1,
        "both VPCs allocate from the same CIDR: the addresses overlap"
    );
    // The pod interface carries the VPC address and the Port's MAC; the result reports fabric.
    let addrs = blue1.ns.ip_ok(&["-4", "-o", "addr", "show", "dev", "eth0"]);
    assert!(addrs.contains(&format!("{b1}/32")), "{addrs}");
    let routes = blue1.ns.ip_ok(&["route", "show", "default"]);
    assert!(routes.contains("169.254.1.1"), "{routes}");
    assert!(
        blue1.result["ips"][0]["address"]
            .as_str()
            .unwrap()
            .starts_with("10.244.1.")
    );
    let ports: Api<Port> = Api::all(cp.sdn.clone());
    let mine = ports.list(&Default::default()).await.unwrap();
    assert_eq!(mine.items.len(), 5, "one Port per VPC pod");

    let vni = |ns: &str, name: &str| {
        let sdn = cp.sdn.clone();
        let (ns, name) = (ns.to_string(), name.to_string());
        async move {
            let v = Api::<VPC>::namespaced(sdn, &ns).get(&name).await.unwrap();
            u32::try_from(v.status.unwrap().vni).unwrap()
        }
    };
    let (blue_vni, green_vni) = (vni("t1", "blue").await, vni("t2", "green").await);
    wait("n1 learns blue3", || {
        n1.remote(blue_vni, b3) == Some(n2.ip.into())
    });
    wait("n1 learns green2", || {
        n1.remote(green_vni, g2) == Some(n2.ip.into())
    });
    assert!(blue1.ns.ping(b2, 3, 3), "blue same node");
    assert!(blue1.ns.ping(b3, 3, 3), "blue across nodes");
    assert!(green1.ns.ping(g2, 3, 3), "green across nodes");
    eprintln!("PASS same-VPC pods talk within and across nodes; two VPCs with one CIDR both work");

    // --- Isolation.
    let iso0 = n1.drops(DropReason::VpcIsolation);
    assert!(!blue1.ns.ping(a.fabric, 2, 1), "VPC pod -> default-network pod");
    assert!(!blue1.ns.ping(n1.ip, 2, 1), "VPC pod -> node");
    assert!(
        !blue1.ns.ping(green2.fabric, 2, 1),
        "VPC pod -> other VPC's fabric IP"
    );
    assert!(
        n1.drops(DropReason::VpcIsolation) >= iso0 + 6,
        "isolation drops are counted"
    );
    // green2 holds an address that also exists in blue (b3 == g2 or b2 == g2): blue1 reaches
    // blue's owner of that address, never green2.
    let seen = capture(&green2.ns, "eth0", "icmp", || {
        let _ = blue1.ns.ping(g2, 3, 0);
    });
    assert_eq!(seen, 0, "a blue pod's packets never reach a green pod");
    eprintln!("PASS a VPC pod cannot reach a default-network pod, the node, or another VPC");

    // --- The node reaches a VPC pod only through its fabric IP.
    assert!(n1.ns.ping(blue1.fabric, 3, 3), "node -> VPC pod fabric IP");
    assert!(
        n2.ns.ping(blue1.fabric, 3, 3),
        "node on another node -> VPC pod fabric IP (overlay, then the bridge)"
    );
    assert!(!n1.ns.ping(b1, 2, 1), "node -> VPC IP must not work");
    assert!(
        a.ns.ping(blue1.fabric, 3, 3),
        "net-0 pod -> VPC pod fabric IP (bridge)"
    );
    eprintln!("PASS the node reaches a VPC pod only through its fabric IP");

    // --- The chart's conflist chains portmap after us: every pod above was added through it,
    // each plugin found by its `type` in the node's CNI_PATH, the node's opt/cni/bin alone
    // (our plugin and portmap where the chart's installer put them), and portmap passed our
    // result on. `tuning`, outside the conflist, accepts our result of a VPC pod too, and
    // CHECK passes.
    {
        let mut installed: Vec<String> = std::fs::read_dir(n1.scratch.host_root().join("opt/cni/bin"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        installed.sort();
        let list = n1.conflist();
        let mut types: Vec<String> = list["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["type"].as_str().unwrap().to_string())
            .collect();
        types.sort();
        assert_eq!(
            installed, types,
            "the installer installs every plugin of the conflist under its type"
        );
        let prev = blue1.result.clone();
        let conf = json!({"cniVersion": "1.0.0", "name": "cozy", "type": "tuning",
            "sysctl": {"net.ipv4.conf.eth0.accept_local": "1"}, "prevResult": prev});
        let bin = std::path::Path::new(cozyplane_lab::SYSTEM_CNI_DIR).join("tuning");
        let pod = ("t1", "blue1", blue1.uid.as_str());
        let (code, v) = invoke_plugin(&bin, n1, "ADD", &blue1.cid, (&blue1.ns.path(), pod), &conf);
        assert_eq!(code, 0, "tuning ADD after cozyplane (VPC pod): {v}");
        assert_eq!(v["ips"], blue1.result["ips"], "tuning passes our result on: {v}");
        let (code, v) = invoke_plugin(&bin, n1, "CHECK", &blue1.cid, (&blue1.ns.path(), pod), &conf);
        assert_eq!(code, 0, "tuning CHECK: {v}");
    }
    assert!(
        blue1.ns.ping(b2, 3, 3),
        "the chained plugins left the VPC pod working"
    );
    eprintln!("PASS pods are added through the chart's conflist (portmap chained); tuning chains too");

    // --- A pod on one node reaches a hostPort (portmap) and a NodePort (kube-proxy-style DNAT,
    // no masquerade) on the other, both ways, with a default-network and a VPC backend. The
    // backend's node DNATed the request, so the reply must pass that node's conntrack to
    // leave as `<node>:<port>`; encapsulated straight to the client's node it would come from
    // the backend's fabric address and TCP would never connect.
    {
        node_port(n2, 30080, (b.fabric, 5202));
        node_port(n1, 30081, (a2.fabric, 5202));
        node_port(n1, 30082, (blue1.fabric, 80));
        let mut failed = Vec::new();
        for (what, client, to, server, listen) in [
            (
                "pod a on n1 -> hostPort on n2 (default-network b)",
                &a,
                (n2.ip, 18081),
                &b,
                5202,
            ),
            (
                "pod b on n2 -> hostPort on n1 (VPC blue1)",
                &b,
                (n1.ip, 18080),
                &blue1,
                80,
            ),
            (
                "pod a on n1 -> NodePort on n2 (default-network b)",
                &a,
                (n2.ip, 30080),
                &b,
                5202,
            ),
            (
                "pod b on n2 -> NodePort on n1 (default-network a2)",
                &b,
                (n1.ip, 30081),
                &a2,
                5202,
            ),
            (
                "pod b on n2 -> NodePort on n1 (VPC blue1)",
                &b,
                (n1.ip, 30082),
                &blue1,
                80,
            ),
        ] {
            if let Err(e) = tcp_ok(client, to, server, listen) {
                failed.push(format!("{what}: {e}"));
            }
        }
        assert!(failed.is_empty(), "{failed:#?}");
        // A pod's reply to a flow nobody DNATed keeps the overlay fast path: not recorded.
        let dnat = |n: &cozyplane_lab::Node| {
            cozyplane_bpf::maps::dnat::DnatMap::from_pin(&n.scratch.pins())
                .unwrap()
                .keys()
                .unwrap()
        };
        let seen = dnat(n2);
        assert!(
            seen.iter()
                .any(|k| k.pod == b.fabric.into() && k.peer == a.fabric.into()),
            "n2 recorded the DNATed flows into b: {seen:?}"
        );
        tcp_ok(&a, (b.fabric, 5202), &b, 5202).expect("pod a -> pod b directly");
        assert!(
            dnat(n2).len() == seen.len(),
            "a flow nobody DNATed is not recorded: {:?}",
            dnat(n2)
        );
        eprintln!(
            "PASS hostPorts and NodePorts reached from a pod on another node, both ways, default-network and VPC backends"
        );
    }

    // --- Spoofing, captured at the destination.
    let spoof0 = n1.drops(DropReason::SpoofIp);
    blue1.ns.ip_ok(&["addr", "add", "10.10.0.200/32", "dev", "eth0"]);
    let seen = capture(&blue2.ns, "eth0", "icmp and src host 10.10.0.200", || {
        let _ = blue1.ns.exec(&[
            "ping",
            "-n",
            "-q",
            "-c",
            "5",
            "-i",
            "0.05",
            "-W",
            "1",
            "-I",
            "10.10.0.200",
            &b2.to_string(),
        ]);
    });
    let control = capture(&blue2.ns, "eth0", &format!("icmp and src host {b1}"), || {
        let _ = blue1.ns.ping(b2, 3, 0);
    });
    assert_eq!(seen, 0, "spoofed packets must not reach the destination");
    assert!(control >= 3, "the capture sees legitimate packets ({control})");
    assert!(n1.drops(DropReason::SpoofIp) >= spoof0 + 5, "spoof drops counted");
    blue1.ns.ip_ok(&["addr", "del", "10.10.0.200/32", "dev", "eth0"]);
    eprintln!("PASS a spoofed source from a VPC pod is dropped (captured and counted)");

    // --- The agent's Prometheus metrics, scraped over HTTP: what just happened shows.
    {
        let text = n1.metrics();
        let spoofs = metric(&text, "cozyplane_drops_packets_total{reason=\"DROP_SPOOF_IP\"}");
        assert!(spoofs >= 5.0, "spoof drops in /metrics ({spoofs}):\n{text}");
        let blue_tx = metric(
            &text,
            &format!("cozyplane_net_packets_total{{net=\"{blue_vni}\",direction=\"tx\"}}"),
        );
        assert!(blue_tx > 0.0, "blue's packets in /metrics:\n{text}");
        let endpoints = metric(&text, "cozyplane_bpf_map_entries{map=\"sdn_endpoints\"}");
        assert!(
            endpoints >= 3.0,
            "n1's endpoints in /metrics ({endpoints}):\n{text}"
        );
        let adds = metric(
            &text,
            "cozyplane_cni_requests_total{command=\"ADD\",outcome=\"ok\"}",
        );
        assert!(adds >= 3.0, "n1's ADDs in /metrics ({adds}):\n{text}");
        let vethed = metric(&text, "cozyplane_cni_add_step_seconds_count{step=\"veth\"}");
        assert!(
            vethed >= 3.0,
            "ADD step histogram in /metrics ({vethed}):\n{text}"
        );
        eprintln!("PASS the agent's /metrics counts drops by reason, per-VPC packets, map entries and ADDs");
    }

    // --- The agent's clients multiplex over HTTP/2, as client-go's do: its five watches and
    // its CNI-path calls share a connection per API server. At most one per request that raced
    // the first handshake at start-up (three); over HTTP/1.1 this agent held 8 and 6 here.
    {
        for (what, url) in [
            ("our API", cp.server.url.as_str()),
            ("the kube API", cp.kube_url()),
        ] {
            let p = url.rsplit(':').next().unwrap().parse::<u16>().unwrap();
            let out = n1
                .ns
                .exec(&["ss", "-Htn", "state", "established", &format!("( dport = :{p} )")]);
            let conns = String::from_utf8_lossy(&out.stdout).lines().count();
            assert!(
                (1..=3).contains(&conns),
                "n1's agent holds {conns} connections to {what}"
            );
            eprintln!("n1's agent holds {conns} connection(s) to {what}");
        }
        eprintln!("PASS the agent's watches and calls share HTTP/2 connections");
    }

    // --- No binding: ADD fails with a clear error.
    {
        let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(cp.kube.clone());
        nss.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "t3"}})).unwrap(),
        )
        .await
        .unwrap();
        let v = refused_add(&cp, lab, ("t3", "intruder"), "t1/blue").await;
        assert_eq!(v["code"], 102, "{v}");
        assert!(v["msg"].as_str().unwrap().contains("no VPCBinding"), "{v}");
        eprintln!("PASS a pod without a VPCBinding fails ADD: {}", v["msg"]);
    }

    // --- CHECK and DEL of a VPC pod.
    {
        let mut conf = n1.conf();
        conf["prevResult"] = blue2.result.clone();
        let check = || {
            invoke_cni(
                n1,
                "CHECK",
                &blue2.cid,
                &blue2.ns.path(),
                ("t1", "blue2", &blue2.uid),
                &conf,
            )
        };
        let (code, v) = check();
        assert_eq!(code, 0, "CHECK: {v}");
        let port_of = |p: &LabPod| {
            let sdn = cp.sdn.clone();
            let name = p.name.clone();
            async move {
                Api::<Port>::all(sdn)
                    .list(&Default::default())
                    .await
                    .unwrap()
                    .items
                    .into_iter()
                    .filter(|x| x.spec.pod_name == name)
                    .count()
            }
        };
        assert_eq!(port_of(&blue2).await, 1);
        for _ in 0..2 {
            let (code, v) = invoke_cni(
                n1,
                "DEL",
                &blue2.cid,
                &blue2.ns.path(),
                ("t1", "blue2", &blue2.uid),
                &n1.conf(),
            );
            assert_eq!(code, 0, "DEL (idempotent): {v}");
        }
        assert_eq!(port_of(&blue2).await, 0, "DEL deletes the Port");
        let (code, v) = check();
        assert_ne!(code, 0, "CHECK after DEL fails: {v}");
        assert!(!blue1.ns.ping(b2, 2, 1), "deleted pod unreachable");
        eprintln!("PASS CHECK and DEL of a VPC pod");
    }

    // --- The runtime deleted the sandbox netns before DEL (which destroys the veth, both
    // ends): DEL still removes everything ADD made, found from the agent's record — IPAM
    // record, Port, and every map entry (the veth's sdn_ports entry included, keyed by an
    // ifindex that no longer exists). A default-network and a VPC pod.
    {
        let before = map_entries(n1);
        let ports_before = Api::<Port>::all(cp.sdn.clone())
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .len();
        let gone0 = pod(&cp, lab, 0, "default", "gone0", None).await;
        let gone1 = pod(&cp, lab, 0, "t1", "gone1", Some("blue")).await;
        let during = map_entries(n1);
        assert!(
            during["sdn_ports"] >= before["sdn_ports"] + 2.0,
            "the two pods' ports: {before:?} -> {during:?}"
        );
        for p in [&gone0, &gone1] {
            let host = p.result["interfaces"][0]["name"].as_str().unwrap().to_string();
            sh_netns_del(&p.ns);
            // The kernel destroys a netns (and the veth in it) asynchronously.
            wait("the veth of a deleted netns to go", || {
                !n1.ns.ip(&["link", "show", "dev", &host]).status.success()
            });
            let pod = (p.namespace.as_str(), p.name.as_str(), p.uid.as_str());
            let (code, v) = del_network(n1, &p.cid, &p.ns.path(), pod, (&json!({}), Some(&p.result)));
            assert_eq!(code, 0, "DEL of {} without its netns: {v}", p.name);
        }
        let after = map_entries(n1);
        assert_eq!(after, before, "DEL without the netns leaves no map entry");
        let ports_after = Api::<Port>::all(cp.sdn.clone())
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .len();
        assert_eq!(
            ports_after, ports_before,
            "DEL without the netns deletes the Port"
        );
        let ipam = std::fs::read_to_string(n1.scratch.dir.path().join("state/ipam.json")).unwrap();
        assert!(
            !ipam.contains(&gone0.cid) && !ipam.contains(&gone1.cid),
            "DEL without the netns removes the IPAM records: {ipam}"
        );
        eprintln!(
            "PASS DEL after the sandbox netns is gone removes the record, the Port and every map entry"
        );

        // An entry whose interface no longer exists (left by an agent that did not clean
        // up) goes at the next start.
        let pins = n1.scratch.pins();
        let stale_if = 0x7fff_fff0;
        cozyplane_bpf::maps::ports::PortsMap::from_pin(&pins)
            .unwrap()
            .set(stale_if, 0)
            .unwrap();
        assert_eq!(map_entries(n1)["sdn_ports"], before["sdn_ports"] + 1.0);
        n1.start_agent(&kube_kc, &sdn_kc);
        let ports = cozyplane_bpf::maps::ports::PortsMap::from_pin(&pins).unwrap();
        assert_eq!(
            ports.get(stale_if).unwrap(),
            None,
            "the restarted agent removes the entry of a vanished interface"
        );
        assert_eq!(map_entries(n1), before, "and nothing else");
        eprintln!("PASS an agent restart removes map entries of vanished interfaces");
    }

    // --- A VPC pod's Port is made when the pod is bound to its node, before the runtime calls
    // ADD (as kube-ovn allocates at scheduling): the ADD attaches with exactly that Port, and
    // a pod deleted before its ADD takes its Port with it.
    {
        let pods: Api<Pod> = Api::namespaced(cp.kube.clone(), "t1");
        let ports: Api<Port> = Api::all(cp.sdn.clone());
        let ports_of = |name: &'static str| {
            let ports = ports.clone();
            async move {
                let all = ports.list(&Default::default()).await.unwrap().items;
                all.into_iter()
                    .filter(|p| p.spec.pod_name == name)
                    .collect::<Vec<_>>()
            }
        };
        let stamp = |name: &'static str| {
            let pods = pods.clone();
            async move {
                let t = Instant::now();
                loop {
                    let ann = pods
                        .get(name)
                        .await
                        .unwrap()
                        .metadata
                        .annotations
                        .unwrap_or_default();
                    if let (Some(ip), Some(mac)) = (
                        ann.get("sdn.cozystack.io/vpc-ip"),
                        ann.get("sdn.cozystack.io/vpc-mac"),
                    ) {
                        return (ip.parse::<Ipv4Addr>().unwrap(), mac.clone());
                    }
                    assert!(
                        t.elapsed() < Duration::from_secs(20),
                        "{name} is never stamped before its ADD"
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        };
        let uid = create_pod(&cp, lab, 0, "t1", "early", Some("blue"))
            .await
            .metadata
            .uid
            .unwrap_or_default();
        let (ip, mac) = stamp("early").await;
        let made = ports_of("early").await;
        assert_eq!(made.len(), 1, "one Port before ADD: {made:?}");
        assert_eq!(
            (made[0].spec.ip.as_str(), made[0].spec.node.as_str()),
            (ip.to_string().as_str(), n1.name.as_str())
        );
        let pns = Netns::new("p");
        let cid = "t1-early";
        let (code, v) = invoke_cni(n1, "ADD", cid, &pns.path(), ("t1", "early", &uid), &n1.conf());
        assert_eq!(code, 0, "ADD with the Port made ahead: {v}");
        let after = ports_of("early").await;
        assert_eq!(after.len(), 1, "the ADD made no second Port: {after:?}");
        assert_eq!(
            after[0].metadata.name, made[0].metadata.name,
            "the ADD took the Port made ahead"
        );
        let addrs = pns.ip_ok(&["-4", "-o", "addr", "show", "dev", "eth0"]);
        assert!(
            addrs.contains(&format!("{ip}/32")),
            "eth0 has the stamped address {ip}: {addrs}"
        );
        let link = pns.ip_ok(&["-o", "link", "show", "dev", "eth0"]);
        assert!(link.contains(&mac), "eth0 has the stamped MAC {mac}: {link}");
        assert!(
            blue1.ns.ping(ip, 3, 3),
            "blue1 -> the pod attached with a Port made ahead"
        );
        let (code, v) = invoke_cni(n1, "DEL", cid, &pns.path(), ("t1", "early", &uid), &n1.conf());
        assert_eq!(code, 0, "DEL: {v}");
        assert!(
            ports_of("early").await.is_empty(),
            "DEL deletes the Port made ahead"
        );

        create_pod(&cp, lab, 0, "t1", "never-added", Some("blue")).await;
        stamp("never-added").await;
        assert_eq!(ports_of("never-added").await.len(), 1);
        pods.delete("never-added", &Default::default()).await.unwrap();
        let t = Instant::now();
        while !ports_of("never-added").await.is_empty() {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "the Port of a pod deleted before its ADD stays"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        eprintln!(
            "PASS a VPC pod's Port is made before its ADD, which takes it; a pod deleted before its ADD takes its Port with it"
        );
    }

    // --- Agent restart drops no established flow (cross-node VPC ping stream).
    {
        let flow = blue1
            .ns
            .command(&[
                "ping",
                "-n",
                "-q",
                "-c",
                "100",
                "-i",
                "0.02",
                "-W",
                "1",
                &b3.to_string(),
            ])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // And an established TCP stream (iperf3, 3 s) across the same restart.
        let _srv = blue3.ns.iperf_server(5201);
        let tcp = blue1
            .ns
            .command(&["iperf3", "-c", &b3.to_string(), "-p", "5201", "-t", "3", "-J"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let t = Instant::now();
        lab.nodes[0].start_agent(&kube_kc, &sdn_kc);
        eprintln!("agent on n1 restarted in {:?}", t.elapsed());
        let out = flow.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        // The maps stay pinned, so nothing should be lost; "a handful" (the bound)
        // leaves room for a reply later than ping's 1 s wait on a loaded CI machine, while a
        // restart that tore the datapath down for even 100 ms loses five in a row.
        let got = cozyplane_lab::received(&text);
        eprintln!("ping stream across the restart: {got} of 100 replies");
        assert!(got >= 97, "at most a handful lost across the restart: {text}");
        let out = tcp.wait_with_output().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        assert!(
            out.status.success() && v["error"].is_null(),
            "the TCP stream survives the restart: {v}"
        );
        let sent = v["end"]["sum_sent"]["bytes"].as_u64().unwrap_or(0);
        let got = v["end"]["sum_received"]["bytes"].as_u64().unwrap_or(0);
        // TCP itself retransmits whatever the restart cost; what the restart must not do is
        // break the connection. iperf3's sent and received sums differ by what was still in
        // flight when it stopped counting, so they are reported, not compared.
        assert!(
            got > 0 && sent > 0,
            "the stream carried data across the restart ({got} of {sent})"
        );
        eprintln!(
            "TCP stream across the restart: {got} bytes, {} retransmits",
            v["end"]["sum_sent"]["retransmits"]
        );
        eprintln!("PASS killing and restarting the agent drops no established flow");
    }

    // --- Net 0 needs only the kube API (docs/design.md: our server may itself be a net-0 pod).
    // n1's agent restarts while our API is unreachable: it starts, wires a net-0 pod that talks
    // across nodes, keeps the VPC pods it has, and refuses a new VPC pod as retryable.
    {
        let text = std::fs::read_to_string(&sdn_kc).unwrap();
        let dead = text.replace(&cp.server.url, "https://127.0.0.1:1");
        assert_ne!(dead, text, "the kubeconfig names {}", cp.server.url);
        let dead_kc = sdn_kc.with_file_name("unreachable.kubeconfig");
        std::fs::write(&dead_kc, dead).unwrap();
        n1.start_agent(&kube_kc, &dead_kc);
        let early = pod(&cp, lab, 0, "default", "before-sdn-api", None).await;
        assert!(
            early.ns.ping(b.fabric, 3, 3),
            "net-0 pod -> pod on n2 without our API"
        );
        assert!(
            n2.ns.ping(early.fabric, 3, 3),
            "n2 -> net-0 pod on n1 without our API"
        );
        assert!(blue1.ns.ping(b3, 3, 3), "VPC pods keep talking without our API");
        let v = refused_add(&cp, lab, ("t1", "blue-early"), "blue").await;
        assert_eq!(
            v["code"], 11,
            "a VPC ADD without our API is 'try again later': {v}"
        );
        eprintln!(
            "PASS net 0 works with only the kube API; a VPC ADD waits for ours ({})",
            v["msg"]
        );
    }
    drop(cp);
}
