//! Failover on a three-member etcd cluster (issue #39): the real etcd binary on loopback ports,
//! a mixed load (creates, allocations, GETs, LISTs, a watch) on the etcd backend, and a fault.
//!
//! Each fault test pins the store to the member it then takes away (the member is the first
//! endpoint, discovery off), so the fault always hits the member the requests go to. After the
//! fault, each test checks the contract of the issue: no read that started after the election
//! failed, creates were acknowledged again within 2 s of the new leader, every acknowledged
//! write is still there, no address was allocated twice, and the watch that started before the
//! fault delivered every acknowledged write once, without a 410. The figures are printed
//! (`-- --nocapture`).
//!
//! The tests run one at a time: a cluster and its load are all a 2-core machine can time.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use cozyplane_storage::etcd::{Config, EtcdStore};
use cozyplane_storage::testing::{EtcdCluster, runtime};
use cozyplane_storage::{Compare, Error, Event, ListOptions, Revision, Storage, Txn, WatchOptions};
use futures::StreamExt;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A failed request: when it started and ended, and why.
#[derive(Clone, Debug)]
struct Failed {
    started: Instant,
    ended: Instant,
    error: String,
}

/// What the load saw.
#[derive(Default)]
struct Log {
    /// Acknowledged creates: key, value, revision, when acknowledged.
    creates: Vec<(String, Bytes, Revision, Instant)>,
    create_failures: Vec<Failed>,
    /// Acknowledged allocations: port key, address key, revision.
    ports: Vec<(String, String, Revision)>,
    alloc_failures: Vec<Failed>,
    reads: u64,
    read_failures: Vec<Failed>,
    /// Watch: every put's (key, revision), and the errors.
    watched: Vec<(String, Revision)>,
    watch_errors: Vec<String>,
}

struct Load {
    stop: Arc<AtomicBool>,
    log: Arc<Mutex<Log>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    watcher: tokio::task::JoinHandle<()>,
}

fn record(log: &Mutex<Log>, f: impl FnOnce(&mut Log)) {
    f(&mut log.lock().unwrap());
}

impl Load {
    /// Four creators, two allocators, two readers and a watch of everything from now on.
    async fn start(store: Arc<EtcdStore>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let log = Arc::new(Mutex::new(Log::default()));
        let nonce: u64 = rand::random();
        let opts = WatchOptions {
            prefix: true,
            ..Default::default()
        };
        let mut w = store.watch("/ha/", opts).await.unwrap();
        let watcher = {
            let log = log.clone();
            tokio::spawn(async move {
                while let Some(item) = w.next().await {
                    match item {
                        Ok(Event::Put { kv, .. }) => {
                            record(&log, |l| l.watched.push((kv.key, kv.mod_revision)));
                        }
                        Ok(_) => {}
                        Err(e) => record(&log, |l| l.watch_errors.push(e.to_string())),
                    }
                }
            })
        };
        let mut tasks = Vec::new();
        for w in 0..4 {
            let (store, stop, log) = (store.clone(), stop.clone(), log.clone());
            tasks.push(tokio::spawn(async move {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let key = format!("/ha/objs/{w}-{n:06}");
                    let value = Bytes::from(format!("{{\"uid\":\"{nonce}-{w}-{n}\"}}"));
                    let started = Instant::now();
                    match store.create(&key, value.clone()).await {
                        Ok(kv) => {
                            record(&log, |l| {
                                l.creates.push((key, value, kv.mod_revision, Instant::now()));
                            });
                            n += 1;
                        }
                        Err(e) => {
                            let ended = Instant::now();
                            record(&log, |l| {
                                l.create_failures.push(Failed {
                                    started,
                                    ended,
                                    error: e.to_string(),
                                });
                            });
                            // A failed create may have applied: the next key is a new one.
                            n += 1;
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    }
                }
            }));
        }
        // Two allocators compete for the same addresses: one claim key per address, claimed in
        // the transaction that stores the port, as the API server's allocator does.
        let cursor = Arc::new(AtomicU64::new(0));
        for w in 0..2 {
            let (store, stop, log, cursor) = (store.clone(), stop.clone(), log.clone(), cursor.clone());
            tasks.push(tokio::spawn(async move {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let port = format!("/ha/ports/{w}-{n:06}");
                    let ip_n = cursor.load(Ordering::Relaxed);
                    let ip = format!("/ha/ips/{ip_n:06}");
                    let txn = Txn::new()
                        .when(Compare::Absent(port.clone()))
                        .when(Compare::Absent(ip.clone()))
                        .put(port.clone(), Bytes::from(ip.clone()))
                        .put(ip.clone(), Bytes::from(port.clone()));
                    let started = Instant::now();
                    match store.txn(txn).await {
                        Ok(r) if r.succeeded => {
                            cursor.fetch_max(ip_n + 1, Ordering::Relaxed);
                            record(&log, |l| l.ports.push((port, ip, r.revision)));
                            n += 1;
                        }
                        Ok(r) => {
                            cursor.fetch_max(ip_n + 1, Ordering::Relaxed);
                            if r.current.iter().any(|(k, kv)| *k == port && kv.is_some()) {
                                // Our own port key exists: an allocation reported as failed
                                // that had applied.
                                let ended = Instant::now();
                                record(&log, |l| {
                                    l.alloc_failures.push(Failed {
                                        started,
                                        ended,
                                        error: format!("{port} exists after a failed allocation"),
                                    });
                                });
                                n += 1;
                            }
                        }
                        Err(e) => {
                            let ended = Instant::now();
                            record(&log, |l| {
                                l.alloc_failures.push(Failed {
                                    started,
                                    ended,
                                    error: e.to_string(),
                                });
                            });
                            n += 1;
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    }
                }
            }));
        }
        for r in 0..2 {
            let (store, stop, log) = (store.clone(), stop.clone(), log.clone());
            tasks.push(tokio::spawn(async move {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let started = Instant::now();
                    let result = if (i + r).is_multiple_of(2) {
                        let opts = ListOptions {
                            limit: Some(50),
                            ..Default::default()
                        };
                        store.list("/ha/objs/", &opts).await.map(|_| ())
                    } else {
                        let last = log.lock().unwrap().creates.last().map(|c| c.0.clone());
                        match last {
                            Some(key) => store.get(&key).await.map(|_| ()),
                            None => store.current_revision().await.map(|_| ()),
                        }
                    };
                    let ended = Instant::now();
                    record(&log, |l| match result {
                        Ok(()) => l.reads += 1,
                        Err(e) => l.read_failures.push(Failed {
                            started,
                            ended,
                            error: e.to_string(),
                        }),
                    });
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }));
        }
        Self {
            stop,
            log,
            tasks,
            watcher,
        }
    }

    /// Stops the writers and readers, waits until the watch has caught up with every
    /// acknowledged write (or 20 s), and returns what was seen.
    async fn finish(self) -> Log {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            t.await.unwrap();
        }
        let want: HashSet<(String, Revision)> = {
            let l = self.log.lock().unwrap();
            l.creates
                .iter()
                .map(|(k, _, r, _)| (k.clone(), *r))
                .chain(l.ports.iter().map(|(k, _, r)| (k.clone(), *r)))
                .chain(l.ports.iter().map(|(_, ip, r)| (ip.clone(), *r)))
                .collect()
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let seen: HashSet<(String, Revision)> =
                self.log.lock().unwrap().watched.iter().cloned().collect();
            if want.is_subset(&seen) || Instant::now() > deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.watcher.abort();
        Arc::try_unwrap(self.log)
            .map(|m| m.into_inner().unwrap())
            .unwrap_or_else(|a| std::mem::take(&mut *a.lock().unwrap()))
    }
}

/// Checks what must hold whatever the fault: nothing acknowledged lost, no address given out
/// twice, the watch complete and exactly once, no create refused as a duplicate of itself.
async fn check_nothing_lost(store: &EtcdStore, log: &Log) {
    for (key, value, rev, _) in &log.creates {
        let kv = store
            .get(key)
            .await
            .unwrap_or_else(|e| panic!("acknowledged {key} lost: {e}"));
        assert_eq!(&kv.value, value, "{key} holds another value");
        assert_eq!(kv.create_revision, *rev, "{key} was created at another revision");
    }
    let mut ips = HashSet::new();
    for (port, ip, _) in &log.ports {
        assert!(ips.insert(ip.clone()), "{ip} was allocated twice");
        let p = store
            .get(port)
            .await
            .unwrap_or_else(|e| panic!("acknowledged {port} lost: {e}"));
        assert_eq!(p.value, Bytes::from(ip.clone()), "{port} names another address");
        let claim = store
            .get(ip)
            .await
            .unwrap_or_else(|e| panic!("the claim {ip} lost: {e}"));
        assert_eq!(
            claim.value,
            Bytes::from(port.clone()),
            "{ip} is claimed by another port"
        );
    }
    let duplicates: Vec<_> = log
        .create_failures
        .iter()
        .filter(|f| f.error.contains("already exists"))
        .collect();
    assert!(
        duplicates.is_empty(),
        "a create was refused as AlreadyExists by its own first attempt: {duplicates:?}"
    );
    assert!(
        log.watch_errors.is_empty(),
        "the watch failed: {:?}",
        log.watch_errors
    );
    // A transaction's puts share its revision: an event is its key at its revision.
    let mut seen = HashSet::new();
    for (key, rev) in &log.watched {
        assert!(
            seen.insert((key.as_str(), *rev)),
            "{key} at {rev} delivered twice"
        );
    }
    for (key, _, rev, _) in &log.creates {
        assert!(
            seen.contains(&(key.as_str(), *rev)),
            "the watch missed {key} at {rev}"
        );
    }
    for (port, ip, rev) in &log.ports {
        assert!(
            seen.contains(&(port.as_str(), *rev)),
            "the watch missed {port} at {rev}"
        );
        assert!(
            seen.contains(&(ip.as_str(), *rev)),
            "the watch missed {ip} at {rev}"
        );
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    KillLeader,
    KillFollower,
    FreezeLeader,
    FreezeFollower,
}

/// The scenario of one fault; see the module documentation.
fn fault_under_load(fault: Fault) {
    let _serial = serial();
    let mut cluster = EtcdCluster::start(3);
    let leader = cluster.leader().expect("a leader");
    let target = match fault {
        Fault::KillLeader | Fault::FreezeLeader => leader,
        Fault::KillFollower | Fault::FreezeFollower => cluster.follower(),
    };
    let mut endpoints = cluster.endpoints();
    endpoints.swap(0, target);
    let mut config = Config::new(endpoints);
    config.discover_members = false;
    let rt = runtime();
    let store = Arc::new(rt.block_on(EtcdStore::connect(config)).unwrap());
    let load = rt.block_on(async {
        let load = Load::start(store.clone()).await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        load
    });
    let before = load.log.lock().unwrap().creates.len();
    let faulted = Instant::now();
    match fault {
        Fault::KillLeader | Fault::KillFollower => cluster.kill(target),
        Fault::FreezeLeader | Fault::FreezeFollower => cluster.freeze(target),
    }
    // The load runs on the runtime's threads meanwhile.
    let elected = match fault {
        Fault::KillLeader | Fault::FreezeLeader => {
            cluster
                .wait_leader_other_than(Some(leader), Duration::from_secs(20))
                .1
        }
        Fault::KillFollower | Fault::FreezeFollower => faulted,
    };
    std::thread::sleep(Duration::from_secs(10));
    let log = rt.block_on(load.finish());
    // Creates are back at the first acknowledgement after the new leader (for a follower's
    // fault: after the fault); the longest pause between two acknowledgements is the outage.
    let back = log
        .creates
        .iter()
        .map(|c| c.3)
        .filter(|t| *t >= elected)
        .min()
        .expect("creates resumed after the fault")
        .duration_since(elected);
    let gap = log
        .creates
        .windows(2)
        .filter(|w| w[1].3 > faulted)
        .map(|w| w[1].3.saturating_duration_since(w[0].3))
        .max()
        .unwrap_or_default();
    let reads_failed_after: Vec<&Failed> = log
        .read_failures
        .iter()
        .filter(|f| f.started >= elected)
        .collect();
    let writes_failed_after = log
        .create_failures
        .iter()
        .chain(&log.alloc_failures)
        .filter(|f| f.started >= elected)
        .count();
    println!(
        "{fault:?}: election {:.2} s after the fault; creates acknowledged again {:.2} s after it \
         (longest pause between acknowledged creates {:.2} s); {} creates before, {} after; \
         {} allocations; reads {} ok, {} failed in all, {} failed after the election; \
         writes failed: {} creates, {} allocations ({} started after the election); {} events watched",
        elected.duration_since(faulted).as_secs_f64(),
        back.as_secs_f64(),
        gap.as_secs_f64(),
        before,
        log.creates.len() - before,
        log.ports.len(),
        log.reads,
        log.read_failures.len(),
        reads_failed_after.len(),
        log.create_failures.len(),
        log.alloc_failures.len(),
        writes_failed_after,
        log.watched.len(),
    );
    for f in log
        .create_failures
        .iter()
        .chain(&log.alloc_failures)
        .chain(&log.read_failures)
    {
        println!(
            "  failed +{:.2} s ({:.2} s long): {}",
            f.started.saturating_duration_since(faulted).as_secs_f64(),
            f.ended.duration_since(f.started).as_secs_f64(),
            f.error
        );
    }
    assert!(
        reads_failed_after.is_empty(),
        "reads failed after the election: {reads_failed_after:?}"
    );
    assert!(
        back <= Duration::from_secs(2),
        "creates were acknowledged again only {back:?} after the new leader"
    );
    rt.block_on(check_nothing_lost(&store, &log));
}

#[test]
fn leader_sigkill_under_load_costs_no_read_and_no_acknowledged_write() {
    fault_under_load(Fault::KillLeader);
}

#[test]
fn follower_sigkill_under_load_costs_no_read_and_no_acknowledged_write() {
    fault_under_load(Fault::KillFollower);
}

#[test]
fn leader_sigstop_under_load_costs_no_read_and_no_acknowledged_write() {
    fault_under_load(Fault::FreezeLeader);
}

#[test]
fn follower_sigstop_under_load_costs_no_read_and_no_acknowledged_write() {
    fault_under_load(Fault::FreezeFollower);
}

/// Two of three members killed: requests fail with a clear 503-class error well inside the
/// request timeout, the health check fails within 5 s; both back: healthy within 5 s, the load
/// resumes, nothing acknowledged is lost and the watch that ran throughout missed nothing.
#[test]
fn quorum_loss_fails_fast_and_recovers_with_nothing_lost() {
    let _serial = serial();
    let mut cluster = EtcdCluster::start(3);
    let rt = runtime();
    let config = cluster.config();
    let request_timeout = config.request_timeout;
    let store = Arc::new(rt.block_on(EtcdStore::connect(config)).unwrap());
    let load = rt.block_on(async {
        let load = Load::start(store.clone()).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        load
    });
    let leader = cluster.leader().expect("a leader");
    let follower = cluster.follower();
    let lost = Instant::now();
    cluster.kill(leader);
    cluster.kill(follower);
    let (unready, failed_get) = rt.block_on(async {
        let unready = loop {
            if store.health().await.is_err() {
                break lost.elapsed();
            }
            assert!(
                lost.elapsed() < Duration::from_secs(15),
                "still healthy without quorum"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let started = Instant::now();
        let r = store.get("/ha/objs/0-000000").await;
        (unready, (started.elapsed(), r))
    });
    let (took, result) = failed_get;
    let err = result.expect_err("a read without quorum must fail");
    println!(
        "quorum lost: unhealthy after {:.2} s; a GET failed in {:.2} s with: {err}",
        unready.as_secs_f64(),
        took.as_secs_f64()
    );
    assert!(
        matches!(err, Error::Unavailable { .. }),
        "not a 503-class error: {err:?}"
    );
    assert!(
        unready <= Duration::from_secs(5),
        "still healthy {unready:?} after losing quorum"
    );
    assert!(took < request_timeout, "a read without quorum hung {took:?}");
    std::thread::sleep(Duration::from_secs(2));
    let restarted = Instant::now();
    cluster.restart(leader);
    cluster.restart(follower);
    let (_, elected) = cluster.wait_leader_other_than(None, Duration::from_secs(30));
    let ready = rt.block_on(async {
        loop {
            if store.health().await.is_ok() {
                break Instant::now();
            }
            assert!(
                elected.elapsed() < Duration::from_secs(15),
                "not healthy after quorum was restored"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let acked_before = load.log.lock().unwrap().creates.len();
    std::thread::sleep(Duration::from_secs(4));
    let log = rt.block_on(load.finish());
    let after = log.creates.len() - acked_before;
    println!(
        "quorum restored: a leader {:.2} s after the restart, healthy {:.2} s after that; \
         {after} creates acknowledged after recovery, {} in all",
        elected.duration_since(restarted).as_secs_f64(),
        ready.saturating_duration_since(elected).as_secs_f64(),
        log.creates.len()
    );
    assert!(
        ready.saturating_duration_since(elected) <= Duration::from_secs(5),
        "healthy only {:?} after quorum was restored",
        ready.saturating_duration_since(elected)
    );
    assert!(after > 0, "the load did not resume");
    rt.block_on(check_nothing_lost(&store, &log));
}

/// The configured endpoint is only the seed: the store learns every member from etcd, and keeps
/// serving when the seed member dies.
#[test]
fn members_are_learned_from_the_seed_and_outlive_it() {
    let _serial = serial();
    let mut cluster = EtcdCluster::start(3);
    let rt = runtime();
    let seed = cluster.endpoints()[0].clone();
    let store = rt.block_on(EtcdStore::connect(Config::new([seed]))).unwrap();
    let mut learned = store.members();
    learned.sort();
    let mut all = cluster.endpoints();
    all.sort();
    assert_eq!(learned, all, "the store did not learn the members from the seed");
    let kv = rt
        .block_on(store.create("/seed/a", Bytes::from_static(b"x")))
        .unwrap();
    cluster.kill(0);
    rt.block_on(async {
        let got = store.get("/seed/a").await.expect("a read after the seed died");
        assert_eq!(got, kv);
        store
            .create("/seed/b", Bytes::from_static(b"y"))
            .await
            .expect("a create after the seed died");
    });
}
