//! The real-node lab (issue 40): the real kube-apiserver and kube-controller-manager with
//! cozyplane-apiserver aggregated behind them, and two lab nodes each running a real
//! containerd and a real kubelet next to cozyplane's agent (`realnode/kit.rs`). Pods are
//! created with kubectl, started by the kubelets, and wired by our CNI plugin through
//! containerd; nothing is pulled (the images are built here and imported, `realnode/images.rs`).
//!
//! The first test pods name their node (`spec.nodeName`); a last one is left to
//! kube-scheduler, which the control plane runs when kubelets join.
//! Needs root, the binaries of `KUBE_BIN_DIR` (kubelet, kube-scheduler, agnhost, crictl,
//! kube-apiserver, kube-controller-manager), containerd, runc, gcc, busybox-static and Helm; fails, never
//! skips, without them.

#[path = "realnode/host.rs"]
mod host;
#[path = "realnode/images.rs"]
mod images;
#[path = "realnode/kit.rs"]
mod kit;

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use cozyplane_lab::Lab;

/// The pod's `status.podIP` once it is Running.
async fn wait_running(cluster: &kit::Cluster, ns: &str, pod: &str) -> Ipv4Addr {
    let cp = &cluster.cp;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = cp
            .kubectl(
                &cp.admin,
                &[
                    "get",
                    "pod",
                    pod,
                    "-n",
                    ns,
                    "-o",
                    "jsonpath={.status.phase} {.status.podIP}",
                ],
            )
            .await;
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        if let Some(ip) = text.strip_prefix("Running ")
            && let Ok(ip) = ip.trim().parse()
        {
            return ip;
        }
        if Instant::now() > deadline {
            let describe = cp.kubectl(&cp.admin, &["describe", "pod", pod, "-n", ns]).await;
            let logs = cluster.node_logs();
            panic!(
                "pod {ns}/{pod} not Running after 60 s ({text})\n{}\n{logs}",
                String::from_utf8_lossy(&describe.stdout)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn in_block(ip: Ipv4Addr, block: &str) -> bool {
    block.parse::<ipnet::Ipv4Net>().is_ok_and(|net| net.contains(&ip))
}

/// A pod on `node`, or left to the scheduler when `node` is empty.
fn pod_yaml(ns: &str, name: &str, node: &str, image: &str, args: &[&str]) -> String {
    let args: Vec<String> = args.iter().map(|a| format!("\"{a}\"")).collect();
    let node = if node.is_empty() {
        String::new()
    } else {
        format!("  nodeName: {node}\n")
    };
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n{node}  terminationGracePeriodSeconds: 2\n  containers:\n  - name: c\n    image: {image}\n    imagePullPolicy: Never\n    args: [{}]\n",
        args.join(", ")
    )
}

/// The host-side device of the route to `ip` in `node`'s netns (the pod's veth).
fn route_dev(node: &cozyplane_lab::Node, ip: Ipv4Addr) -> String {
    let out = node.ns.ip_ok(&["-o", "route", "get", &ip.to_string()]);
    let mut w = out.split_whitespace().skip_while(|w| *w != "dev");
    w.next();
    w.next().unwrap_or_default().to_string()
}

/// The container (sandbox) ids of the agent's IPAM records on `node` naming pod `ns/name`.
fn ipam_records(node: &cozyplane_lab::Node, pod: &str) -> Vec<String> {
    let text = std::fs::read_to_string(node.scratch.dir.path().join("state/ipam.json")).unwrap_or_default();
    let state: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    state["allocations"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["pod"] == pod)
        .filter_map(|a| Some(a["containerId"].as_str()?.to_string()))
        .collect()
}

#[test]
fn real_kubelets_run_pods_wired_by_our_cni_through_containerd() {
    Lab::run(2, async |lab| {
        let t0 = Instant::now();
        let cluster = kit::Cluster::start(lab).await;
        let cp = &cluster.cp;

        let ns = cp.namespace("realnode").await;
        cp.eventually("the namespace's default ServiceAccount", || async {
            cp.kubectl(&cp.admin, &["get", "serviceaccount", "default", "-n", &ns])
                .await
                .status
                .success()
        })
        .await;
        let (n1, n2) = (&lab.nodes[0], &lab.nodes[1]);
        let created = Instant::now();
        cp.apply(&pod_yaml(
            &ns,
            "server",
            &n2.name,
            images::AGNHOST,
            &["netexec", "--http-port=8080"],
        ))
        .await;
        cp.apply(&pod_yaml(
            &ns,
            "client",
            &n1.name,
            images::BUSYBOX,
            &["sleep", "3600"],
        ))
        .await;
        let server = wait_running(&cluster, &ns, "server").await;
        let client = wait_running(&cluster, &ns, "client").await;
        eprintln!("both pods Running {:?} after create", created.elapsed());
        assert!(
            in_block(server, &n2.block),
            "server {server} outside {}",
            n2.block
        );
        assert!(
            in_block(client, &n1.block),
            "client {client} outside {}",
            n1.block
        );

        // client (n1) -> server (n2) over the overlay, from inside the client container.
        // Bounded by busybox's `timeout`: Debian's busybox-static 1.35 `wget -T` segfaults.
        let url = format!("http://{server}:8080/hostname");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let out = cp
                .kubectl(
                    &cp.admin,
                    &[
                        "exec", "-n", &ns, "client", "--", "timeout", "5", "wget", "-qO-", &url,
                    ],
                )
                .await;
            let body = String::from_utf8_lossy(&out.stdout).trim().to_string();
            if body == "server" {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "client never got the server's hostname from {url}: {body:?} {}",
                String::from_utf8_lossy(&out.stderr)
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        eprintln!(
            "PASS client on {} reached server on {} over the overlay",
            n1.name, n2.name
        );

        // Deleting the client: the kubelet stops the sandbox, containerd runs our CNI DEL.
        let veth = route_dev(n1, client);
        assert!(
            !veth.is_empty() && veth != "ul0",
            "client's veth on {}: {veth:?}",
            n1.name
        );
        let pod = format!("{ns}/client");
        let sandbox = ipam_records(n1, &pod);
        assert_eq!(sandbox.len(), 1, "the agent's IPAM record of {pod}: {sandbox:?}");
        let deleted = Instant::now();
        cp.ok(
            &cp.admin,
            &[
                "delete",
                "pod",
                "-n",
                &ns,
                "client",
                "--wait=true",
                "--timeout=60s",
            ],
        )
        .await;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let link = n1.ns.ip(&["link", "show", "dev", &veth]);
            let gone = !link.status.success() && ipam_records(n1, &pod).is_empty();
            if gone {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "after deleting {pod}: veth {veth} still there: {}, IPAM records: {:?}\n{}",
                link.status.success(),
                ipam_records(n1, &pod),
                n1.log_text()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // ... through our plugin's DEL from containerd, for the sandbox ADD was for.
        let del = format!("command=Del container={}", sandbox[0]);
        assert!(
            n1.log_text().contains(&del),
            "no `{del}` in the agent's log:\n{}",
            n1.log_text()
        );
        eprintln!(
            "PASS delete of {pod}: CNI DEL of its sandbox, veth {veth} and the IPAM record gone {:?} after the delete",
            deleted.elapsed()
        );
        // The server is untouched.
        assert_eq!(ipam_records(n2, &format!("{ns}/server")).len(), 1);

        // A pod without `nodeName`: kube-scheduler places it on one of the nodes.
        let created = Instant::now();
        cp.apply(&pod_yaml(&ns, "placed", "", images::BUSYBOX, &["sleep", "3600"]))
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
