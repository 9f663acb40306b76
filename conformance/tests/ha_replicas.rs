//! Issue #39, three server replicas: three `cozyplane-apiserver` processes on a three-member etcd
//! cluster, the controller leader killed with SIGKILL.
//!
//! Which replica leads is what each one says on `/metrics` (`cozyplane_controller_leader`, set
//! by `controllers::leader` from the lease in etcd). The test proves:
//!
//! * exactly one replica leads before the kill, and exactly one survivor after it;
//! * no survivor leads while the dead leader's lease still runs (at least [`LEASE`] − [`RENEW`]
//!   after the kill: the lease was renewed at most one renew period before it), and one leads
//!   within [`LEASE`] (the lease lapses, etcd deletes the key, a candidate watching it
//!   campaigns at once);
//! * the work that arrived while nobody led is done once by the new leader: a VPCBinding created
//!   and deleted during the hand-over carries its finalizer once (from its create), stays until
//!   the new leader reaps its Ports, and is then deleted exactly once; a VPCGateway created
//!   during the hand-over gets its status; nothing is lost (the allocation invariants hold).
//!
//! The servers are `--standalone` (no kube connection), so the kube-backed loops (Port GC,
//! SecurityGroup membership, Port claimants, the doors) do not run and are not checked here.
//!
//! The binary is found as in `alloc_procs.rs` (`COZYPLANE_APISERVER`, or next to the test
//! executable: `cargo build --bin cozyplane-apiserver`).

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use cozyplane_apis::v1alpha1::{
    LocalVPCRef, Port, VPC, VPCBinding, VPCBindingSpec, VPCGateway, VPCGatewaySpec, VPCRef, VPCSpec,
};
use cozyplane_apiserver::controllers::leader::{LEASE, RENEW};
use cozyplane_conformance::objects::{attached_port, wait_for, wait_gone};
use cozyplane_storage::testing::EtcdCluster;
use cozyplane_storage::{Config, Storage};
use futures::StreamExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};

/// What the bound on the hand-over allows beyond [`LEASE`]: etcd revokes an expired
/// lease on its lessor's 500 ms tick, and the campaign (a read, a lease grant, a transaction) and
/// this test's 100 ms poll take the rest.
const SLACK: Duration = Duration::from_secs(1);
/// How often the replicas' `/metrics` are read.
const POLL: Duration = Duration::from_millis(100);

const REAP: &str = "sdn.cozystack.io/reap-ports";
const SEVER: &str = "sdn.cozystack.io/sever";

/// One `cozyplane-apiserver --standalone` child process; killed by PID when dropped.
struct Proc {
    child: Child,
    client: kube::Client,
}

impl Proc {
    /// Starts a process on the etcd `endpoints` (comma-separated) and waits until it has written
    /// its kubeconfig.
    async fn start(dir: &Path, endpoints: &str) -> Self {
        let kubeconfig = dir.join("kubeconfig");
        let log_path = dir.join("server.log");
        let log = std::fs::File::create(&log_path).expect("log file");
        let child = Command::new(cozyplane_conformance::server_binary())
            .arg("--secure-port=0")
            .arg("--standalone")
            .arg(format!("--write-kubeconfig={}", kubeconfig.display()))
            .arg(format!("--data-dir={}", dir.join("data").display()))
            .arg(format!("--etcd-servers={endpoints}"))
            .env("RUST_LOG", "warn,cozyplane_apiserver::controllers::leader=info")
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .expect("server starts");
        // Killed by PID from here on, whatever happens below.
        let mut child = KillOnDrop(Some(child));
        let deadline = Instant::now() + Duration::from_secs(60);
        let client = loop {
            if let Some(c) = child.0.as_mut()
                && let Ok(Some(st)) = c.try_wait()
            {
                panic!(
                    "server exited with {st}: {}",
                    std::fs::read_to_string(&log_path).unwrap_or_default()
                );
            }
            // The file is written in one call; a torn read is retried.
            if let Ok(kc) = kube::config::Kubeconfig::read_from(&kubeconfig)
                && let Ok(cfg) =
                    kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                        .await
            {
                break kube::Client::try_from(cfg).expect("client builds");
            }
            assert!(Instant::now() < deadline, "server did not write its kubeconfig");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        Self {
            child: child.0.take().expect("child"),
            client,
        }
    }

    /// The process's ID.
    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, by PID (our own child), and reap it.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Whether this replica says it leads the controllers; `None` if it does not answer.
    async fn leads(&self) -> Option<bool> {
        let req = http::Request::get("/metrics").body(Vec::new()).ok()?;
        let text = self.client.request_text(req).await.ok()?;
        let line = text
            .lines()
            .find(|l| l.starts_with("cozyplane_controller_leader "))?;
        Some(line.ends_with(" 1"))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A child killed by PID when dropped, until it is taken.
struct KillOnDrop(Option<Child>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The indexes in `of` of the replicas that say they lead (those that do not answer do not).
async fn leaders(procs: &[Proc], of: &[usize]) -> Vec<usize> {
    let mut out = Vec::new();
    for &i in of {
        if procs[i].leads().await == Some(true) {
            out.push(i);
        }
    }
    out
}

fn vpc(name: &str, cidr: &str) -> VPC {
    let mut v = VPC::new(
        name,
        VPCSpec {
            cidrs: vec![cidr.into()],
            mtu: 0,
            dhcp: None,
            dns64: false,
        },
    );
    v.metadata.namespace = Some("default".into());
    v
}

fn binding(name: &str, vpc: &str) -> VPCBinding {
    let mut b = VPCBinding::new(
        name,
        VPCBindingSpec {
            vpc_ref: VPCRef {
                namespace: "default".into(),
                name: vpc.into(),
            },
        },
    );
    b.metadata.namespace = Some("default".into());
    b
}

fn gateway(name: &str, vpc: &str) -> VPCGateway {
    let mut g = VPCGateway::new(
        name,
        VPCGatewaySpec {
            vpc_ref: LocalVPCRef { name: vpc.into() },
            ..Default::default()
        },
    );
    g.metadata.namespace = Some("default".into());
    g
}

fn finalizers<K: kube::Resource>(o: &K) -> Vec<String> {
    o.meta().finalizers.clone().unwrap_or_default()
}

fn count(f: &[String], name: &str) -> usize {
    f.iter().filter(|x| *x == name).count()
}

/// One event of the binding's watch: its type, the finalizers and whether it is terminating.
type Seen = (&'static str, Vec<String>, bool);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ha_replicas_01_the_next_replica_leads_within_the_lease_and_finalizes_once() {
    let cluster = EtcdCluster::start(3);
    let endpoints = cluster.endpoints().join(",");
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().expect("temp dir")).collect();
    let mut procs = Vec::new();
    for d in &dirs {
        procs.push(Proc::start(d.path(), &endpoints).await);
    }
    let all = [0, 1, 2];

    // The first campaign finds no lease: one replica leads within a renew period or two.
    let deadline = Instant::now() + LEASE + RENEW + SLACK;
    let leader = loop {
        let l = leaders(&procs, &all).await;
        assert!(l.len() <= 1, "two replicas lead at once: {l:?}");
        if let [l] = l[..] {
            break l;
        }
        assert!(Instant::now() < deadline, "no replica leads");
        tokio::time::sleep(POLL).await;
    };
    let survivors: Vec<usize> = all.into_iter().filter(|i| *i != leader).collect();
    let (a, b) = (survivors[0], survivors[1]);
    let c = procs[a].client.clone();
    let pp = PostParams::default();
    let vpcs: Api<VPC> = Api::namespaced(c.clone(), "default");
    let bindings: Api<VPCBinding> = Api::namespaced(c.clone(), "default");
    let gateways: Api<VPCGateway> = Api::namespaced(c.clone(), "default");
    let ports: Api<Port> = Api::all(c.clone());
    vpcs.create(&pp, &vpc("x", "10.7.0.0/24")).await.unwrap();

    // A watch on the binding, from before it exists, on a replica that stays up.
    let rv = bindings
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap_or_default();
    let mut stream = bindings
        .watch(&WatchParams::default().fields("metadata.name=during"), &rv)
        .await
        .unwrap()
        .boxed();
    let watch = tokio::spawn(async move {
        let mut seen: Vec<Seen> = Vec::new();
        let mut deleted_at = None;
        loop {
            // After the deletion, 3 s more: an event then would be a second finalization.
            let wait = deleted_at.map_or(Duration::from_secs(120), |t: Instant| {
                Duration::from_secs(3).saturating_sub(t.elapsed())
            });
            let ev = match tokio::time::timeout(wait, stream.next()).await {
                Ok(Some(ev)) => ev.expect("watch event"),
                Ok(None) | Err(_) => return seen,
            };
            let (ty, o) = match ev {
                WatchEvent::Added(o) => ("ADDED", o),
                WatchEvent::Modified(o) => ("MODIFIED", o),
                WatchEvent::Deleted(o) => ("DELETED", o),
                WatchEvent::Bookmark(_) => continue,
                WatchEvent::Error(e) => panic!("watch error: {e:?}"),
            };
            if ty == "DELETED" {
                deleted_at.get_or_insert_with(Instant::now);
            }
            seen.push((ty, finalizers(&o), o.metadata.deletion_timestamp.is_some()));
        }
    });

    // SIGKILL of the leader, by PID.
    let pid = procs[leader].pid();
    procs[leader].kill();
    let killed = Instant::now();

    // During the hand-over, on a survivor: a binding with its Ports, a gateway; the binding is
    // deleted at once, so its finalization is the new leader's work.
    let created = bindings.create(&pp, &binding("during", "x")).await.unwrap();
    assert_eq!(
        count(&finalizers(&created), REAP),
        1,
        "the create sets the finalizer once: {:?}",
        created.metadata.finalizers
    );
    let mut ours = Vec::new();
    for _ in 0..3 {
        ours.push(
            ports
                .create(&pp, &attached_port("default", "x", "default"))
                .await
                .unwrap(),
        );
    }
    let theirs = ports
        .create(&pp, &attached_port("default", "x", "elsewhere"))
        .await
        .unwrap();
    let gw = gateways.create(&pp, &gateway("gw", "x")).await.unwrap();
    assert!(
        gw.status.is_none(),
        "a gateway's status is the leader's: {:?}",
        gw.status
    );
    bindings.delete("during", &DeleteParams::default()).await.unwrap();
    let queued = killed.elapsed();
    // Nobody leads yet: the binding waits, terminating, with its finalizer; its Ports are whole.
    assert!(
        leaders(&procs, &survivors).await.is_empty(),
        "a survivor leads {queued:?} after the kill, while the dead leader's lease runs"
    );
    let pending = bindings.get("during").await.unwrap();
    assert!(pending.metadata.deletion_timestamp.is_some());
    assert_eq!(count(&finalizers(&pending), REAP), 1);
    for p in &ours {
        let p = ports.get(p.metadata.name.as_deref().unwrap()).await.unwrap();
        assert!(
            p.metadata.deletion_timestamp.is_none(),
            "reaped while nobody leads"
        );
    }

    // The hand-over.
    let new = loop {
        let l = leaders(&procs, &survivors).await;
        assert!(l.len() <= 1, "two survivors lead at once: {l:?}");
        if let [l] = l[..] {
            break l;
        }
        assert!(
            killed.elapsed() < LEASE + SLACK,
            "no survivor leads {:?} after the leader's SIGKILL",
            killed.elapsed()
        );
        tokio::time::sleep(POLL).await;
    };
    let handover = killed.elapsed();
    let earliest = LEASE.saturating_sub(RENEW);
    println!(
        "controller leader (pid {pid}) killed; replica {new} leads after {:.2} s \
         (lease {LEASE:?}, renew {RENEW:?}: expected between {earliest:?} and {:?}); \
         the binding, its Ports and the gateway were written {:.2} s after the kill",
        handover.as_secs_f64(),
        LEASE,
        queued.as_secs_f64(),
    );
    assert!(handover <= LEASE + SLACK, "hand-over took {handover:?}");
    assert!(
        handover + POLL >= earliest,
        "a survivor led {handover:?} after the kill, before the dead leader's lease could lapse"
    );

    // The new leader finishes the binding: its Ports are reaped, then it is gone.
    wait_gone(&bindings, "during", created.metadata.uid.as_deref().unwrap()).await;
    let finalized = killed.elapsed();
    for p in &ours {
        let name = p.metadata.name.as_deref().unwrap();
        let p = wait_for(&ports, name, "marked for deletion", |o: Option<&Port>| {
            o.is_some_and(|p| p.metadata.deletion_timestamp.is_some())
        })
        .await;
        assert_eq!(
            count(&finalizers(&p), SEVER),
            1,
            "{name}: {:?}",
            p.metadata.finalizers
        );
    }
    let name = theirs.metadata.name.as_deref().unwrap();
    let kept = ports.get(name).await.unwrap();
    assert!(
        kept.metadata.deletion_timestamp.is_none(),
        "{name}, of another pod namespace, was reaped"
    );
    let gw = wait_for(&gateways, "gw", "Ready", |o: Option<&VPCGateway>| {
        o.and_then(|g| g.status.as_ref())
            .is_some_and(|s| s.phase == "Ready")
    })
    .await;
    let st = gw.status.unwrap();
    let exclusive = st.conditions.iter().find(|c| c.type_ == "Exclusive");
    assert_eq!(exclusive.map(|c| c.status.as_str()), Some("True"), "{st:?}");

    // What a watcher of the binding saw: one create, its deletion, one delete and nothing after.
    let seen = watch.await.expect("watch task");
    println!("the binding's events: {seen:?}");
    assert_eq!(seen.first().map(|s| s.0), Some("ADDED"), "{seen:?}");
    assert_eq!(seen.iter().filter(|s| s.0 == "ADDED").count(), 1, "{seen:?}");
    assert_eq!(
        seen.iter().filter(|s| s.0 == "DELETED").count(),
        1,
        "finalized more than once or never: {seen:?}"
    );
    assert_eq!(seen.last().map(|s| s.0), Some("DELETED"), "{seen:?}");
    assert!(
        seen.iter().all(|s| count(&s.1, REAP) <= 1),
        "a finalizer listed twice: {seen:?}"
    );
    assert!(
        seen.iter()
            .any(|s| s.0 == "MODIFIED" && s.2 && count(&s.1, REAP) == 1),
        "the deletion did not wait for the finalizer: {seen:?}"
    );

    // Still exactly one leader, and the other survivor follows.
    let l = leaders(&procs, &survivors).await;
    assert_eq!(l, vec![new], "leaders after the hand-over");
    let other = if new == a { b } else { a };
    assert_eq!(procs[other].leads().await, Some(false));

    // What the agent does once it severed each pod: the Ports go and release their addresses.
    let remove = serde_json::json!([
        {"op": "test", "path": "/metadata/finalizers/0", "value": SEVER},
        {"op": "remove", "path": "/metadata/finalizers/0"}
    ]);
    for p in &ours {
        let name = p.metadata.name.as_deref().unwrap();
        ports
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Json::<()>(serde_json::from_value(remove.clone()).unwrap()),
            )
            .await
            .unwrap();
        wait_gone(&ports, name, p.metadata.uid.as_deref().unwrap()).await;
    }
    let storage: std::sync::Arc<dyn Storage> = cozyplane_storage::open(Config::Etcd(cluster.config()))
        .await
        .expect("etcd opens");
    let r = cozyplane_apiserver::alloc::scan::scan(&storage).await.unwrap();
    assert!(r.problems.is_empty(), "{:#?}", r.problems);
    println!(
        "the binding deleted during the hand-over was finalized {:.2} s after the kill ({:.2} s after the new leader)",
        finalized.as_secs_f64(),
        (finalized - handover).as_secs_f64()
    );
}
