//! The server on a three-member etcd cluster (issue #39): `/readyz` tells the truth about the
//! quorum, `/livez` does not depend on etcd, and requests keep being served when a member dies.

use std::time::{Duration, Instant};

use cozyplane_conformance::{Backend, TestServer};
use cozyplane_storage::testing::EtcdCluster;

/// Polls `path` until it answers `code`; how long that took. Fails after `within`.
async fn until(s: &TestServer, path: &str, code: u16, within: Duration) -> Duration {
    let start = Instant::now();
    loop {
        let (got, _, body) = s.raw("GET", path, &[], None).await;
        if got == code {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < within,
            "{path} still answers {got} after {within:?}:\n{body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_follows_the_quorum_and_livez_ignores_etcd() {
    let mut cluster = EtcdCluster::start(3);
    let servers = format!("--etcd-servers={}", cluster.endpoints().join(","));
    let s = TestServer::start_bare(Backend::Embedded, &[&servers]).await;
    until(&s, "/readyz", 200, Duration::from_secs(10)).await;

    // One member down, the leader: still ready once the election is over, and serving.
    let leader = cluster.leader().expect("a leader");
    cluster.kill(leader);
    let (_, elected) = cluster.wait_leader_other_than(Some(leader), Duration::from_secs(20));
    let (code, _, body) = s.raw("GET", "/api/v1/namespaces", &[], None).await;
    assert_eq!(code, 200, "a LIST after the election failed: {body}");
    let (code, _, body) = s.raw("GET", "/readyz?verbose", &[], None).await;
    assert_eq!(
        code,
        200,
        "not ready {:?} after the election with two members:\n{body}",
        elected.elapsed()
    );

    // Quorum lost: not ready within 5 s, while /livez stays up.
    let other = cluster.follower();
    cluster.kill(other);
    let unready = until(&s, "/readyz", 500, Duration::from_secs(5)).await;
    let (_, _, body) = s.raw("GET", "/readyz?verbose", &[], None).await;
    assert!(
        body.contains("[-]storage failed"),
        "the storage check does not say it:\n{body}"
    );
    let (code, _, body) = s.raw("GET", "/livez", &[], None).await;
    assert_eq!(code, 200, "/livez fails on an etcd outage:\n{body}");

    // Quorum back: ready within 5 s of the new leader.
    cluster.restart(leader);
    cluster.restart(other);
    let (_, elected) = cluster.wait_leader_other_than(None, Duration::from_secs(30));
    until(&s, "/readyz", 200, Duration::from_secs(10)).await;
    let ready = elected.elapsed();
    println!(
        "/readyz: not ready {:.2} s after quorum was lost; ready again {:.2} s after it was restored",
        unready.as_secs_f64(),
        ready.as_secs_f64()
    );
    assert!(
        ready <= Duration::from_secs(5),
        "ready only {ready:?} after quorum was restored"
    );
}
