//! The real-node lab (issue 40) through restarts of what runs beside the pods: a server pod
//! (agnhost `netexec`) on `n2` and a busybox client on `n1` keep talking when `n1`'s
//! containerd is restarted (SIGTERM by PID, then started again with the same configuration)
//! and when both nodes' agents are SIGKILLed and started again (fail static, seen through
//! real pods). Nothing is wired twice: the sandbox containerd recovers is the one our CNI
//! ADD was for, and the agents keep every pod's IPAM record and map entry.
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

use cozyplane_lab::{Lab, Node};
use pods::{Wiring, reached};

/// Is a process `pid` alive (signal 0)?
fn alive(pid: u32) -> bool {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).expect("PID"));
    nix::sys::signal::kill(pid, None).is_ok()
}

/// The wiring of both pods (client on `n1`, server on `n2`) equals `before`'s, every part
/// of it: same sandbox in one IPAM record, same veth, same endpoint entry, no other pod
/// veth, no CNI ADD since.
fn assert_kept(before: &(Wiring, Wiring), now: &(Wiring, Wiring), after: &str) {
    assert_eq!(before.0, now.0, "the client's wiring on n1 changed after {after}");
    assert_eq!(before.1, now.1, "the server's wiring on n2 changed after {after}");
}

#[test]
fn pods_keep_working_across_containerd_and_agent_restarts() {
    Lab::run(2, async |lab| {
        let t0 = Instant::now();
        let mut cluster = kit::Cluster::start(lab).await;
        let ns = pods::namespace(&cluster.cp, "restarts").await;
        let (n1, n2): (&Node, &Node) = (&lab.nodes[0], &lab.nodes[1]);
        let (server, client) = pods::server_and_client(&cluster, &ns, n2, n1).await;
        let url = pods::hostname_url(server);
        let wiring = || {
            (
                Wiring::of(n1, &ns, "client", client),
                Wiring::of(n2, &ns, "server", server),
            )
        };
        let took = pods::wait_for(&cluster, &ns, "client", &url, &reached(), Duration::from_secs(30)).await;
        eprintln!("client reached server {took} after both Running");
        let before = wiring();
        before.0.assert_wired("the client on n1");
        before.1.assert_wired("the server on n2");
        assert_eq!(before.0.veths.len(), 1, "pod veths on n1: {:?}", before.0.veths);
        let sandboxes = cluster.rn.nodes[0].sandboxes(true);
        assert_eq!(
            sandboxes, before.0.sandboxes,
            "n1's ready sandboxes are the client's, the one our ADD was for"
        );
        let states = (
            pods::container_state(&cluster.cp, &ns, "client").await,
            pods::container_state(&cluster.cp, &ns, "server").await,
        );
        assert!(
            states.0.starts_with("Running 0 ") && states.1.starts_with("Running 0 "),
            "{states:?}"
        );

        // containerd on n1 restarted: the shims and containers stay, containerd recovers its
        // sandboxes from its own state; neither it nor the kubelet runs a sandbox again.
        let (stopped, started) = cluster.rn.nodes[0].restart_containerd(n1);
        let back = Instant::now();
        eprintln!(
            "containerd on n1: exited {stopped:?} after SIGTERM, answering {started:?} after its start"
        );
        let took = pods::wait_for(&cluster, &ns, "client", &url, &reached(), Duration::from_secs(60)).await;
        eprintln!(
            "PASS after containerd's restart on n1, kubectl exec into the client reached the server again {took} after containerd answered"
        );
        // A sandbox the kubelet found dead would be run again at its next relist (each
        // second): give it a few.
        tokio::time::sleep(Duration::from_secs(5).saturating_sub(back.elapsed())).await;
        let now_states = (
            pods::container_state(&cluster.cp, &ns, "client").await,
            pods::container_state(&cluster.cp, &ns, "server").await,
        );
        assert_eq!(
            states, now_states,
            "the pods' phase, restart count and container after containerd's restart"
        );
        assert_eq!(
            cluster.rn.nodes[0].sandboxes(false),
            sandboxes,
            "n1's sandboxes after containerd's restart (all states): not the one our ADD was for"
        );
        assert_eq!(
            cluster.rn.nodes[0].sandboxes(true),
            sandboxes,
            "n1's ready sandboxes after containerd's restart"
        );
        assert_kept(&before, &wiring(), "containerd's restart on n1");
        pods::holds(&cluster, &ns, "client", &url, &reached(), 2).await;
        eprintln!(
            "PASS containerd restarted on n1: pods Running, same containers, same sandbox {}, one IPAM record, no CNI ADD, veths {:?} ({:?} in all)",
            sandboxes[0],
            before.0.veths,
            back.elapsed()
        );

        // Both agents SIGKILLed by PID: the datapath stays pinned and keeps forwarding.
        let pids: Vec<u32> = [n1, n2]
            .iter()
            .map(|n| n.agent_pid().expect("agent runs"))
            .collect();
        let killed = Instant::now();
        n1.stop_agent();
        n2.stop_agent();
        for (n, pid) in [n1, n2].iter().zip(&pids) {
            assert!(
                !alive(*pid),
                "{}'s agent (PID {pid}) still alive after SIGKILL",
                n.name
            );
        }
        let took = pods::wait_for(&cluster, &ns, "client", &url, &reached(), Duration::from_secs(10)).await;
        pods::holds(&cluster, &ns, "client", &url, &reached(), 2).await;
        for (n, pid) in [n1, n2].iter().zip(&pids) {
            assert!(
                !alive(*pid) && n.agent_pid().is_none(),
                "{}'s agent ran again during the check",
                n.name
            );
        }
        eprintln!(
            "PASS with both agents killed, the client reached the server 3 times, the first {took} after the kill ({:?} without agents)",
            killed.elapsed()
        );
        assert_kept(&before, &wiring(), "the agents were killed");

        // Started again: they take over the pinned maps and their state as they are.
        let starting = Instant::now();
        cluster.start_agent(n1);
        cluster.start_agent(n2);
        eprintln!(
            "agents on n1 and n2 serving their CNI sockets {:?} after their start",
            starting.elapsed()
        );
        let took = pods::wait_for(&cluster, &ns, "client", &url, &reached(), Duration::from_secs(10)).await;
        // Their start-up reconciliation and watches have had a moment.
        tokio::time::sleep(Duration::from_secs(3)).await;
        pods::holds(&cluster, &ns, "client", &url, &reached(), 2).await;
        assert_kept(&before, &wiring(), "the agents' restart");
        eprintln!(
            "PASS agents restarted on n1 and n2: the client reached the server {took} after their sockets were up, and 2 more times 3 s later; IPAM records, veths and endpoint entries kept, no CNI ADD"
        );
        drop(cluster);
        eprintln!("real-node restarts: {:?} in all", t0.elapsed());
    });
}
