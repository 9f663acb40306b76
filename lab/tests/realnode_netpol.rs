//! The real-node lab (issue 40) with NetworkPolicy: `networking.k8s.io/v1` NetworkPolicies
//! written with `kubectl apply` to the real kube-apiserver, followed by the agents' watches
//! and enforced on net 0 between real pods, a busybox client on `n1` and an agnhost
//! `netexec` server on `n2` (docs/policy.md). Each change is measured from the write to the
//! first request that shows it, and must then hold for two more requests:
//!
//! 1. a policy selecting the server for ingress with no rule: the client is refused, and the
//!    drops are NetworkPolicy's (`sdn_pol_drops`, on either node);
//! 2. a second one admitting the client's pods (by label) on the server's port: reached;
//! 3. that one deleted: refused again;
//! 4. the first one deleted: reached.
//!
//! Shares the kit of `realnode.rs` (`realnode/kit.rs`, `realnode/pods.rs`); needs what it
//! needs.

#[path = "realnode/host.rs"]
mod host;
#[path = "realnode/images.rs"]
mod images;
#[path = "realnode/kit.rs"]
mod kit;
#[path = "realnode/pods.rs"]
mod pods;

use std::time::{Duration, Instant};

use cozyplane_bpf::abi::LAYER_NP;
use cozyplane_lab::{Lab, Node};
use pods::{Outcome, SERVER_PORT, reached};
use serde_json::json;

/// How long a policy change may take to show through real pods.
const WITHIN: Duration = Duration::from_secs(20);

/// A change of the namespace's NetworkPolicies.
enum Write {
    /// `kubectl apply` of this one.
    Apply(serde_json::Value),
    /// `kubectl delete` of the one of this name.
    Delete(&'static str),
}

/// Packets NetworkPolicy dropped on `node` (`sdn_pol_drops`, every reason).
fn np_drops(node: &Node) -> u64 {
    cozyplane_bpf::maps::pol_drops::PolDropsMap::from_pin(&node.scratch.pins())
        .and_then(|m| m.all())
        .map(|rows| {
            rows.iter()
                .filter(|r| r.layer == LAYER_NP)
                .map(|r| r.stats.packets)
                .sum()
        })
        .unwrap_or(0)
}

#[test]
fn network_policies_on_real_nodes() {
    Lab::run(2, async |lab| {
        let t0 = Instant::now();
        let cluster = kit::Cluster::start(lab).await;
        let cp = &cluster.cp;
        let ns = pods::namespace(cp, "netpol").await;
        let (n1, n2): (&Node, &Node) = (&lab.nodes[0], &lab.nodes[1]);
        let (server, _client) = pods::server_and_client(&cluster, &ns, n2, n1).await;
        let url = pods::hostname_url(server);
        pods::wait_for(&cluster, &ns, "client", &url, &reached(), Duration::from_secs(30)).await;
        eprintln!("PASS without a NetworkPolicy the client on n1 reaches the server on n2");

        // A change, then requests until it shows (measured from the write), then two more
        // that agree.
        let step = async |what: &str, write: Write, want: Outcome| {
            let written = Instant::now();
            match write {
                Write::Apply(policy) => {
                    cp.apply(&policy.to_string()).await;
                }
                Write::Delete(name) => {
                    cp.ok(&cp.admin, &["delete", "networkpolicy", "-n", &ns, name])
                        .await;
                }
            }
            let seen = pods::wait_for(&cluster, &ns, "client", &url, &want, WITHIN).await;
            let took = written.elapsed();
            pods::holds(&cluster, &ns, "client", &url, &want, 2).await;
            eprintln!(
                "PASS {what}: {want:?} {took:?} after the write (request {} after it; a refused one waits out its 2 s), and twice more",
                seen.request
            );
        };

        let deny = json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": { "name": "deny-server", "namespace": ns },
            "spec": { "podSelector": { "matchLabels": { "app": "server" } }, "policyTypes": ["Ingress"] }
        });
        // The source's `from_pod` decides the destination's ingress too, so the client's node
        // may be the one that drops.
        let drops = [np_drops(n1), np_drops(n2)];
        step(
            "the server isolated for ingress with no rule",
            Write::Apply(deny),
            Outcome::Failed,
        )
        .await;
        let dropped = [np_drops(n1) - drops[0], np_drops(n2) - drops[1]];
        assert!(
            dropped.iter().sum::<u64>() > 0,
            "the refusals are not NetworkPolicy drops (sdn_pol_drops of layer NP unchanged on n1 and n2)"
        );
        eprintln!(
            "PASS NetworkPolicy drops counted meanwhile: {} on n1, {} on n2",
            dropped[0], dropped[1]
        );

        let allow = json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": { "name": "allow-client", "namespace": ns },
            "spec": {
                "podSelector": { "matchLabels": { "app": "server" } },
                "policyTypes": ["Ingress"],
                "ingress": [{
                    "from": [{ "podSelector": { "matchLabels": { "app": "client" } } }],
                    "ports": [{ "protocol": "TCP", "port": SERVER_PORT }]
                }]
            }
        });
        step(
            "a second policy admitting pods labelled app=client on the server's port",
            Write::Apply(allow),
            reached(),
        )
        .await;
        step(
            "the admitting policy deleted",
            Write::Delete("allow-client"),
            Outcome::Failed,
        )
        .await;
        step(
            "the isolating policy deleted",
            Write::Delete("deny-server"),
            reached(),
        )
        .await;
        drop(cluster);
        eprintln!("real-node NetworkPolicy: {:?} in all", t0.elapsed());
    });
}
