//! `make e2e`, three nodes, the real kube-apiserver: a VM with a secondary interface keeps that
//! interface's address and MAC across live migrations (issue 37's acceptance, with issue 27's
//! migration flow).
//!
//! The VM's launchers are KubeVirt-shaped pods (`vm.kubevirt.io/name`) in VPC t1/red on `eth0`
//! that list t1/blue in `sdn.cozystack.io/vpcs`, `net1` pinned to 10.20.0.50 and
//! 02:00:00:00:20:50: one CNI ADD makes both interfaces, each a persistent Port of the VM
//! (keyed by VM and interface). The guest is a netns with two NICs, each plugged into one
//! launcher interface through KubeVirt's bridge binding (`migration_vm`), holding the Port's
//! address and MAC as the guest would. KubeVirt is played as in `migration.rs`: each target
//! launcher carries `kubevirt.io/migrationJobUID`, the test writes the VMI's
//! `status.migrationState` as virt-handler does, the source launcher goes after the cutover.
//!
//! While the VM goes back and forth between n1 and n2, a pod of blue on n3 pings the guest's
//! `net1` address and a pod of red on n3 its `eth0` address, every 10 ms. Asserted per
//! migration: the target's ADD prepares both Ports (`spec.migrationTarget`), its interfaces
//! carry the Ports' MACs, the guest answers on both through the relay before the cutover; at
//! most 2 probes lost on each interface; after the cutover both Ports name the target
//! (`spec.node`, `spec.podName`) with their address and MAC unchanged, `net1`'s Port still
//! `spec.interface: net1`; on the wire (captured on the target launcher's `net1`) every echo
//! request reaches the guest addressed to 02:00:00:00:20:50 and every reply leaves from it;
//! the source launcher's DEL keeps both Ports. A migration whose target goes before the
//! cutover leaves both Ports with the source and loses nothing. The gap in the replies across
//! each cutover is printed. Needs root, `KUBE_BIN_DIR` and the agent and CNI binaries built.

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use cozyplane_apis::net::claim::port_name;
use cozyplane_apis::v1alpha1::{PORT_INTERFACE_LABEL, PORT_WORKLOAD_LABEL, Port, VPC, VPCBinding};
use cozyplane_lab::{Lab, LabPod, Netns, start_tcpdump, stop_tcpdump};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::json;

mod common;
mod migration_vm;
use common::{Cp, gone, pod, pod_labelled, tenant, until, vni, vpc_ip, wait};
use migration_vm::kubevirt::{
    self, VM, condition, migration_completed, migration_failed, migration_started, vmi_api, vmi_status,
};
use migration_vm::{Pinger, Vm, gap_at, lost_between, now, quantile};

/// The secondary interface, its VPC and its pins.
const NET1: &str = "net1";
const NET1_IP: Ipv4Addr = Ipv4Addr::new(10, 20, 0, 50);
const NET1_MAC: &str = "02:00:00:00:20:50";
const BLUE_CIDR: &str = "10.20.0.0/24";
const VPCS: &str = r#"[{"vpc":"t1/blue","interface":"net1","ips":["10.20.0.50"],"mac":"02:00:00:00:20:50"}]"#;

/// Migrations back and forth.
const MIGRATIONS: usize = 6;

#[test]
fn lab_live_migration_secondary_interface() {
    Lab::run(3, body);
}

/// One of the VM's Ports as it must stay: name, address, MAC.
struct Kept {
    what: &'static str,
    name: String,
    ip: String,
    mac: String,
}

/// A launcher of the VM on node `node`: eth0 in red, net1 in blue; the target of migration
/// `job` if given.
async fn launcher(cp: &Cp, lab: &Lab, (node, name): (usize, &str), job: Option<&str>) -> LabPod {
    let mut labels = vec![VM];
    if let Some(j) = job {
        labels.push(("kubevirt.io/migrationJobUID", j));
    }
    pod_labelled(
        cp,
        lab,
        (node, "t1", name, Some("red")),
        (&labels, &[("sdn.cozystack.io/vpcs", VPCS)]),
    )
    .await
}

/// The MAC of interface `dev` in `ns`, as the kernel reports it.
fn mac_of(ns: &Netns, dev: &str) -> String {
    let o = ns.exec(&["cat", &format!("/sys/class/net/{dev}/address")]);
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// Asserts that every Port of `kept` is `holder`'s on its node, with its address and MAC.
async fn held_by(cp: &Cp, lab: &Lab, kept: &[Kept], holder: &LabPod, when: &str) {
    let ports = Api::<Port>::all(cp.sdn.clone());
    for k in kept {
        let p = ports
            .get(&k.name)
            .await
            .unwrap_or_else(|e| panic!("{when}: {}'s Port {} is gone: {e}", k.what, k.name));
        assert!(
            p.metadata.deletion_timestamp.is_none(),
            "{when}: {}'s Port {} is being deleted",
            k.what,
            k.name
        );
        assert_eq!(
            (p.spec.node.as_str(), p.spec.pod_name.as_str()),
            (lab.nodes[holder.node].name.as_str(), holder.name.as_str()),
            "{when}: {}'s Port {} names its holder",
            k.what,
            k.name
        );
        assert_eq!(
            (p.spec.ip.as_str(), p.spec.mac.as_str()),
            (k.ip.as_str(), k.mac.as_str()),
            "{when}: {}'s Port {} kept its address and MAC",
            k.what,
            k.name
        );
        assert!(
            p.spec.migration_target.is_none(),
            "{when}: {}'s Port {} has no migration in progress: {:?}",
            k.what,
            k.name,
            p.spec.migration_target
        );
    }
}

/// The Ethernet `(source, destination)` of frames.
type Macs = Vec<(String, String)>;

/// The Ethernet source and destination of every ICMP echo request to and reply from
/// `NET1_IP` seen on `dev` inside `ns` for `d`: `(requests, replies)`.
fn echo_macs(ns: &Netns, dev: &str, d: Duration) -> (Macs, Macs) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("net1.pcap");
    let cap = start_tcpdump(ns, dev, &format!("icmp and host {NET1_IP}"), &file);
    std::thread::sleep(d);
    stop_tcpdump(cap);
    let out = std::process::Command::new("tcpdump")
        .args(["-e", "-t", "-n", "-r", file.to_str().expect("utf-8 path")])
        .output()
        .expect("tcpdump -r");
    let (mut req, mut rep) = (Vec::new(), Vec::new());
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        // `<src> > <dst>, ethertype IPv4 (0x0800), length 98: a > b: ICMP echo request, …`
        let w: Vec<&str> = l.split_whitespace().collect();
        let Some(macs) = w
            .get(2)
            .map(|dst| (w[0].to_string(), dst.trim_end_matches(',').to_string()))
        else {
            continue;
        };
        if l.contains(&format!("> {NET1_IP}: ICMP echo request")) {
            req.push(macs);
        } else if l.contains(&format!("{NET1_IP} > ")) && l.contains("ICMP echo reply") {
            rep.push(macs);
        }
    }
    (req, rep)
}

/// The probes of one migration: the peers on n3 and what they ping.
struct Probes<'a> {
    peer: &'a Netns,
    client: &'a Netns,
    eth0_ip: Ipv4Addr,
}

/// One migration of the VM from `source` to a new launcher on node `to`; returns the target
/// launcher and the instant of the cutover.
async fn migrate(
    (cp, lab, vmis): (&Cp, &Lab, &Api<DynamicObject>),
    vm: &mut Vm,
    source: &LabPod,
    probes: &Probes<'_>,
    (to, i): (usize, usize),
    kept: &[Kept],
) -> (LabPod, f64) {
    let ports = Api::<Port>::all(cp.sdn.clone());
    let (name, job) = (format!("virt-launcher-vm1-{i}"), format!("mig-{i}"));
    let target = launcher(cp, lab, (to, &name), Some(&job)).await;
    // The target's one ADD prepared both Ports beside the source, which keeps them.
    for k in kept {
        let p = ports.get(&k.name).await.unwrap();
        let t = p.spec.migration_target.as_ref().unwrap_or_else(|| {
            panic!(
                "migration {i}: the target's ADD did not prepare {}'s Port {}",
                k.what, k.name
            )
        });
        assert_eq!(
            (t.pod_name.as_str(), t.node.as_str()),
            (name.as_str(), lab.nodes[to].name.as_str()),
            "migration {i}: {}'s Port is prepared for the target",
            k.what
        );
        assert_eq!(
            p.spec.pod_name, source.name,
            "migration {i}: the source holds {}'s Port until the cutover",
            k.what
        );
        assert_eq!(
            condition(&p, "Migrating"),
            ("True".to_string(), "TargetPrepared".to_string()),
            "migration {i}: {}'s Port shows the migration in progress",
            k.what
        );
    }
    assert_eq!(
        mac_of(&target.ns, "eth0"),
        kept[0].mac,
        "migration {i}: the target's eth0 has the VM's eth0 MAC"
    );
    assert_eq!(
        mac_of(&target.ns, NET1),
        NET1_MAC,
        "migration {i}: the target's net1 has the pinned MAC"
    );
    let addrs = target.ns.ip_ok(&["-o", "-4", "addr", "show", "dev", NET1]);
    assert!(
        addrs.contains(&format!("{NET1_IP}/32")),
        "migration {i}: the target's net1 holds the pinned address: {addrs}"
    );
    migration_started(
        vmis,
        &job,
        (&lab.nodes[source.node].name, &source.name),
        (&lab.nodes[to].name, &name),
    )
    .await;
    let nic = vm.wire(&target);
    // The memory copy.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let at = vm.switch_to(&nic);
    // The relay: the guest answers on the target on both interfaces while every node still
    // sends to the source.
    assert!(
        probes.peer.ping(NET1_IP, 3, 1),
        "migration {i}: net1 is unreachable on the target before the cutover"
    );
    assert!(
        probes.client.ping(probes.eth0_ip, 3, 1),
        "migration {i}: eth0 is unreachable on the target before the cutover"
    );
    migration_completed(vmis, &lab.nodes[to].name).await;
    for k in kept {
        let p = until("the cutover moved the Port", || async {
            let p = ports.get(&k.name).await.ok()?;
            (p.spec.node == lab.nodes[to].name
                && p.spec.pod_name == name
                && p.spec.migration_target.is_none())
            .then_some(p)
        })
        .await;
        assert_eq!(
            condition(&p, "Migrating").0,
            "False",
            "migration {i}: {}'s migration is over",
            k.what
        );
    }
    held_by(cp, lab, kept, &target, &format!("migration {i}, cutover")).await;
    let net1 = ports.get(&kept[1].name).await.unwrap();
    assert_eq!(net1.spec.interface, NET1, "net1's Port still names its interface");
    // On the wire, at the target launcher's net1 (bridged to the guest): the datapath
    // addresses the guest by the pinned MAC, and the guest answers from it.
    let (req, rep) = echo_macs(&target.ns, NET1, Duration::from_millis(300));
    assert!(
        !req.is_empty() && !rep.is_empty(),
        "migration {i}: no echo on the target's net1 ({} requests, {} replies)",
        req.len(),
        rep.len()
    );
    assert!(
        req.iter().all(|(_, dst)| dst == NET1_MAC),
        "migration {i}: a request to net1 not addressed to {NET1_MAC}: {req:?}"
    );
    assert!(
        rep.iter().all(|(src, _)| src == NET1_MAC),
        "migration {i}: a reply of net1 not from {NET1_MAC}: {rep:?}"
    );
    eprintln!(
        "migration {i}: on the target's net1, {} echo requests to and {} replies from {NET1_MAC}",
        req.len(),
        rep.len()
    );
    // KubeVirt deletes the source launcher once the migration completed: its DEL (eth0 and
    // the listed net1) keeps the VM's Ports.
    gone(cp, lab, source).await;
    held_by(cp, lab, kept, &target, &format!("migration {i}, source gone")).await;
    (target, at)
}

async fn body(lab: &mut Lab) {
    let cp = Cp::start_real(lab, &[]).await;
    kubevirt::install_crd(&cp).await;
    let lab = &*lab;
    tenant(&cp, "t1", "red", "10.60.0.0/24").await;
    let blue: VPC = serde_json::from_value(json!({
        "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "VPC",
        "metadata": {"name": "blue", "namespace": "t1"}, "spec": {"cidrs": [BLUE_CIDR]}}))
    .unwrap();
    Api::<VPC>::namespaced(cp.sdn.clone(), "t1")
        .create(&PostParams::default(), &blue)
        .await
        .unwrap();
    let binding: VPCBinding = serde_json::from_value(json!({
        "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "VPCBinding",
        "metadata": {"name": "blue", "namespace": "t1"},
        "spec": {"vpcRef": {"namespace": "t1", "name": "blue"}}}))
    .unwrap();
    Api::<VPCBinding>::namespaced(cp.sdn.clone(), "t1")
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    let (red_vni, blue_vni) = (vni(&cp, "t1", "red").await, vni(&cp, "t1", "blue").await);
    let sas = Api::<ServiceAccount>::namespaced(cp.kube.clone(), "t1");
    until("t1's default ServiceAccount", || async {
        sas.get_opt("default").await.ok().flatten()
    })
    .await;
    let ports = Api::<Port>::all(cp.sdn.clone());
    let vmis = vmi_api(&cp);
    kubevirt::create_vmi(&vmis).await;
    // The peers on n3: one in each VPC.
    let peer = pod(&cp, lab, 2, "t1", "peer", Some("blue")).await;
    let client = pod(&cp, lab, 2, "t1", "client", Some("red")).await;

    // The VM's first launcher, on n1: one ADD, both interfaces, both Ports the VM's.
    let mut source = launcher(&cp, lab, (0, "virt-launcher-vm1-0"), None).await;
    let eth0_ip = vpc_ip(&cp, &source).await;
    let eth0_mac = mac_of(&source.ns, "eth0");
    let kept = [
        Kept {
            what: "eth0",
            name: port_name(red_vni, IpAddr::V4(eth0_ip)),
            ip: eth0_ip.to_string(),
            mac: eth0_mac.clone(),
        },
        Kept {
            what: "net1",
            name: port_name(blue_vni, IpAddr::V4(NET1_IP)),
            ip: NET1_IP.to_string(),
            mac: NET1_MAC.to_string(),
        },
    ];
    held_by(&cp, lab, &kept, &source, "first launcher").await;
    for (k, ifname) in kept.iter().zip(["eth0", NET1]) {
        let p = ports.get(&k.name).await.unwrap();
        let labels = p.metadata.labels.unwrap_or_default();
        assert_eq!(
            (
                labels.get(PORT_WORKLOAD_LABEL).map(String::as_str),
                labels.get(PORT_INTERFACE_LABEL).map(String::as_str)
            ),
            (Some(VM.1), Some(ifname)),
            "{}'s Port is the VM's persistent Port of {ifname}",
            k.what
        );
    }
    assert_eq!(
        mac_of(&source.ns, NET1),
        NET1_MAC,
        "the launcher's net1 has the pinned MAC"
    );
    vmi_status(&vmis, json!({"nodeName": lab.nodes[0].name, "phase": "Running"})).await;
    let mut vm = Vm::new(eth0_ip, &eth0_mac).with_nic(NET1, NET1_IP, NET1_MAC, &[BLUE_CIDR]);
    let nic = vm.wire(&source);
    vm.switch_to(&nic);
    wait("the blue peer reaches the guest's net1", || {
        peer.ns.ping(NET1_IP, 1, 1)
    });
    wait("the red client reaches the guest's eth0", || {
        client.ns.ping(eth0_ip, 1, 1)
    });
    eprintln!(
        "PASS the guest (eth0 {eth0_ip} {eth0_mac}, net1 {NET1_IP} {NET1_MAC}) runs in {} on n1",
        source.name
    );

    // 1. Migrations back and forth under a 10 ms ping of each interface from n3.
    let probes = Probes {
        peer: &peer.ns,
        client: &client.ns,
        eth0_ip,
    };
    let mut ping1 = Pinger::start(&peer.ns, NET1_IP);
    let mut ping0 = Pinger::start(&client.ns, eth0_ip);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let mut windows = Vec::new();
    for i in 1..=MIGRATIONS {
        let to = 1 - source.node;
        let t0 = now();
        let (next, at) = migrate((&cp, lab, &vmis), &mut vm, &source, &probes, (to, i), &kept).await;
        eprintln!("migration {i} to n{}: {:.0} ms", to + 1, (now() - t0) * 1000.0);
        source = next;
        // The window closes once the replies after the cutover had time to come back.
        tokio::time::sleep(Duration::from_millis(100)).await;
        windows.push((t0, now(), at));
    }
    let took = started.elapsed();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (replies1, replies0) = (ping1.stop(), ping0.stop());
    let mut losses = Vec::new();
    for (what, replies) in [("net1", &replies1), ("eth0", &replies0)] {
        let lost: Vec<f64> = windows
            .iter()
            .map(|(a, b, _)| lost_between(replies, *a, *b) as f64)
            .collect();
        let gaps: Vec<f64> = windows
            .iter()
            .map(|(_, _, at)| (gap_at(replies, *at) * 10_000.0).round() / 10.0)
            .collect();
        eprintln!(
            "FIGURES {what}: {MIGRATIONS} migrations in {took:?}: lost probes per migration {lost:?} (max {}); reply gap across the cutover {gaps:?} ms (p50 {:.1}, max {:.1}); {} replies",
            quantile(&lost, 1.0),
            quantile(&gaps, 0.5),
            quantile(&gaps, 1.0),
            replies.len()
        );
        losses.push((what, lost));
    }
    for (what, lost) in losses {
        assert!(
            lost.iter().all(|l| *l <= 2.0),
            "{what}: at most 2 probes lost per migration: {lost:?}"
        );
    }
    eprintln!(
        "PASS {MIGRATIONS} migrations: both Ports followed the VM, net1 kept {NET1_IP} and {NET1_MAC} on the wire"
    );

    // 2. A migration that fails: the target launcher goes before the cutover.
    let mut ping1 = Pinger::start(&peer.ns, NET1_IP);
    let to = 1 - source.node;
    let t0 = now();
    let failed = launcher(&cp, lab, (to, "virt-launcher-vm1-failed"), Some("mig-failed")).await;
    for k in &kept {
        let p = ports.get(&k.name).await.unwrap();
        assert_eq!(
            p.spec.migration_target.as_ref().map(|t| t.pod_name.as_str()),
            Some(failed.name.as_str()),
            "the failing target prepared {}'s Port",
            k.what
        );
    }
    migration_started(
        &vmis,
        "mig-failed",
        (&lab.nodes[source.node].name, &source.name),
        (&lab.nodes[to].name, &failed.name),
    )
    .await;
    gone(&cp, lab, &failed).await;
    migration_failed(&vmis).await;
    for k in &kept {
        until("the failed target's preparation undone", || async {
            let p = ports.get(&k.name).await.ok()?;
            p.spec.migration_target.is_none().then_some(())
        })
        .await;
    }
    held_by(&cp, lab, &kept, &source, "failed migration").await;
    // The guest, still behind the source, gets net1's traffic there, by its MAC.
    let (req, rep) = echo_macs(&source.ns, NET1, Duration::from_millis(300));
    assert!(
        !req.is_empty()
            && !rep.is_empty()
            && req.iter().all(|(_, dst)| dst == NET1_MAC)
            && rep.iter().all(|(src, _)| src == NET1_MAC),
        "after the rollback, net1's echoes on the source: requests {req:?}, replies {rep:?}"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    let replies = ping1.stop();
    let lost = lost_between(&replies, t0, now());
    assert_eq!(lost, 0, "a failed migration loses nothing on net1");
    assert!(peer.ns.ping(NET1_IP, 3, 3), "net1 still answers on the source");
    assert!(client.ns.ping(eth0_ip, 3, 3), "eth0 still answers on the source");
    eprintln!(
        "PASS a failed migration rolled back: both Ports stayed with {}; {} net1 replies, none lost",
        source.name,
        replies.len()
    );
}
