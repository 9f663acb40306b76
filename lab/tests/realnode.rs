//! The real-node lab (issue 40): the real kube-apiserver and kube-controller-manager with
//! cozyplane-apiserver aggregated behind them, and two lab nodes each running a real
//! containerd and a real kubelet next to cozyplane's agent (`realnode/kit.rs`). Pods are
//! created with kubectl, started by the kubelets, and wired by our CNI plugin through
//! containerd; nothing is pulled (the images are built here and imported, `realnode/images.rs`).
//!
//! The first test pods name their node (`spec.nodeName`); a last one is left to
//! kube-scheduler, which the control plane runs when kubelets join. A Service's short name
//! resolves from a pod to its ClusterIP (the kit's cluster DNS) and reaches the server, a name
//! of nothing is NXDOMAIN. Deleted pods, one of them
//! with a failing PreStop hook, are followed down to our CNI DEL. Restarts of containerd and
//! of the agents: `realnode_restarts.rs`; NetworkPolicy: `realnode_netpol.rs`; the steps on
//! pods they share: `realnode/pods.rs`.
//! Needs root, the binaries of `KUBE_BIN_DIR` (kubelet, kube-scheduler, agnhost, crictl,
//! kube-apiserver, kube-controller-manager), containerd, runc, gcc, busybox-static, dnsmasq and Helm; fails, never
//! skips, without them.

#[path = "realnode/host.rs"]
mod host;
#[path = "realnode/images.rs"]
mod images;
#[path = "realnode/kit.rs"]
mod kit;
#[path = "realnode/pods.rs"]
mod pods;

use std::time::{Duration, Instant};

use cozyplane_lab::Lab;
use pods::{in_block, wait_running};
use serde_json::json;

/// What `nslookup <name>` printed in the client pod (busybox's asks for each name of the
/// search path, A and AAAA, and says NXDOMAIN for those that do not exist).
async fn nslookup(cluster: &kit::Cluster, ns: &str, name: &str) -> String {
    let out = cluster
        .cp
        .kubectl(
            &cluster.cp.admin,
            &["exec", "-n", ns, "client", "--", "timeout", "5", "nslookup", name],
        )
        .await;
    String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr)
}

/// Waits (30 s at most) until `nslookup <name>` in the client pod answers `ip`.
async fn resolves(cluster: &kit::Cluster, ns: &str, name: &str, ip: &str) {
    let start = Instant::now();
    loop {
        let out = nslookup(cluster, ns, name).await;
        if out.contains(&format!("Address: {ip}")) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "nslookup {name}, not {ip}: {out}\n{}",
            cluster.dns.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[test]
fn real_kubelets_run_pods_wired_by_our_cni_through_containerd() {
    Lab::run(2, async |lab| {
        let t0 = Instant::now();
        let cluster = kit::Cluster::start(lab).await;
        let cp = &cluster.cp;

        let ns = pods::namespace(cp, "realnode").await;
        let (n1, n2) = (&lab.nodes[0], &lab.nodes[1]);
        // Beside them, a pod whose PreStop hook fails.
        let mut hooked = pods::pod(&ns, "hooked", &n1.name, images::BUSYBOX, &["sleep", "3600"]);
        hooked["spec"]["containers"][0]["lifecycle"] =
            json!({ "preStop": { "exec": { "command": ["false"] } } });
        cp.apply(&hooked.to_string()).await;
        let (server, client) = pods::server_and_client(&cluster, &ns, n2, n1).await;
        let hooked = wait_running(&cluster, &ns, "hooked").await;

        // client (n1) -> server (n2) over the overlay, from inside the client container.
        let url = pods::hostname_url(server);
        pods::wait_for(
            &cluster,
            &ns,
            "client",
            &url,
            &pods::reached(),
            Duration::from_secs(30),
        )
        .await;
        eprintln!(
            "PASS client on {} reached server on {} over the overlay",
            n1.name, n2.name
        );

        // The cluster DNS: a Service's short name resolves to its ClusterIP through the search
        // path the kubelet wrote, and reaches the server by name; a headless Service's to the
        // server's address; a name of nothing does not resolve.
        for (name, ip) in [("web", ""), ("web-headless", "None")] {
            let svc = json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": { "name": name, "namespace": ns },
                "spec": { "clusterIP": ip, "selector": { "app": "server" },
                          "ports": [{ "port": 80, "targetPort": pods::SERVER_PORT }] }
            });
            cp.apply(&svc.to_string()).await;
        }
        let jsonpath = "jsonpath={.spec.clusterIP}";
        let ip = cp
            .ok(&cp.admin, &["get", "service", "web", "-n", &ns, "-o", jsonpath])
            .await;
        let made = Instant::now();
        resolves(&cluster, &ns, "web", ip.trim()).await;
        eprintln!(
            "PASS `nslookup web` answers its ClusterIP {} {:?} after the create",
            ip.trim(),
            made.elapsed()
        );
        resolves(&cluster, &ns, "web-headless", &server.to_string()).await;
        let out = nslookup(&cluster, &ns, "nothing-here").await;
        assert!(
            out.contains("NXDOMAIN") && !out.contains("Name:"),
            "nslookup nothing-here: {out}"
        );
        pods::wait_for(
            &cluster,
            &ns,
            "client",
            "http://web/hostname",
            &pods::reached(),
            Duration::from_secs(30),
        )
        .await;
        eprintln!(
            "PASS `nslookup web-headless` answers the server's address, `nslookup nothing-here` NXDOMAIN; http://web/ reaches the server"
        );

        // Deleting the client: the kubelet stops the sandbox, containerd runs our CNI DEL.
        let took = pods::delete_torn_down(&cluster, n1, &ns, "client", client).await;
        eprintln!(
            "PASS delete of {ns}/client: CNI DEL of its sandbox, veth and IPAM record gone {took:?} after the delete"
        );
        // The server is untouched.
        assert_eq!(pods::ipam_records(n2, &format!("{ns}/server")).len(), 1);

        // A failing PreStop hook does not keep the sandbox (and our DEL) from going.
        let took = pods::delete_torn_down(&cluster, n1, &ns, "hooked", hooked).await;
        // The kubelet says so (its event may trail the delete a little).
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let events = cp
                .ok(
                    &cp.admin,
                    &[
                        "get",
                        "events",
                        "-n",
                        &ns,
                        "--field-selector",
                        "involvedObject.name=hooked,reason=FailedPreStopHook",
                        "-o",
                        "name",
                    ],
                )
                .await;
            if !events.trim().is_empty() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "no FailedPreStopHook event for {ns}/hooked: the hook did not run and fail"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        eprintln!(
            "PASS delete of {ns}/hooked, whose PreStop hook failed: CNI DEL, veth and IPAM record gone {took:?} after the delete"
        );

        // A pod without `nodeName`: kube-scheduler places it on one of the nodes.
        let created = Instant::now();
        cp.apply(&pods::pod(&ns, "placed", "", images::BUSYBOX, &["sleep", "3600"]).to_string())
            .await;
        let placed = wait_running(&cluster, &ns, "placed").await;
        let node = cp
            .ok(
                &cp.admin,
                &[
                    "get",
                    "pod",
                    "placed",
                    "-n",
                    &ns,
                    "-o",
                    "jsonpath={.spec.nodeName}",
                ],
            )
            .await;
        let on = lab
            .nodes
            .iter()
            .find(|n| n.name == node.trim())
            .unwrap_or_else(|| panic!("pod placed on {node:?}, not a lab node"));
        assert!(
            in_block(placed, &on.block),
            "placed {placed} outside {}",
            on.block
        );
        eprintln!(
            "PASS a pod without nodeName scheduled onto {} and Running {:?} after create",
            on.name,
            created.elapsed()
        );
        drop(cluster);
        eprintln!("real-node lab: {:?} in all", t0.elapsed());
    });
}
