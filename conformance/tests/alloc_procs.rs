//! Issue 5 allocation across real `cozyplane-apiserver` processes: three processes on one etcd
//! share the allocation space (no duplicate VNI, address or MAC; every failure an explicit
//! 409/507 Status), and a process killed with SIGKILL in the middle of a create storm leaves no
//! half-claimed address. Storage is checked afterwards by the invariant scanner
//! (`alloc::scan::scan`).
//!
//! The last test is about the process itself: it keeps serving after running out of file
//! descriptors.
//!
//! The binary is found next to the test executable (`<target>/debug/cozyplane-apiserver`) or
//! through `COZYPLANE_APISERVER`; `make test-unit` builds it before `cargo test`.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use cozyplane_apis::v1alpha1::{Port, PortSpec, VPC, VPCRef, VPCSpec};
use cozyplane_apiserver::alloc::scan::scan;
use cozyplane_storage::testing::EtcdServer;
use cozyplane_storage::{Config, Storage, embedded, etcd};
use futures::StreamExt;
use kube::api::{Api, PostParams};

/// One `cozyplane-apiserver --standalone` child process; killed by PID when dropped.
struct Proc {
    child: Child,
    kubeconfig: PathBuf,
    data_dir: PathBuf,
    client: kube::Client,
}

impl Proc {
    /// Starts a process on `etcd_url` (or the embedded store in `data_dir`) and waits until it
    /// has written its kubeconfig and answers.
    async fn start(dir: &Path, etcd_url: Option<&str>) -> Self {
        let kubeconfig = dir.join("kubeconfig");
        let data_dir = dir.join("data");
        let _ = std::fs::remove_file(&kubeconfig);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("server.log"))
            .expect("log file");
        let mut cmd = Command::new(cozyplane_conformance::server_binary());
        cmd.arg("--secure-port=0")
            .arg("--standalone")
            .arg(format!("--write-kubeconfig={}", kubeconfig.display()))
            .arg(format!("--data-dir={}", data_dir.display()))
            .env("RUST_LOG", "warn")
            .stdout(log.try_clone().expect("log file"))
            .stderr(log);
        if let Some(u) = etcd_url {
            cmd.arg(format!("--etcd-servers={u}"));
        }
        let mut child = cmd.spawn().expect("server starts");
        let deadline = Instant::now() + Duration::from_secs(60);
        while !kubeconfig.exists() {
            if let Ok(Some(st)) = child.try_wait() {
                panic!(
                    "server exited with {st}: {}",
                    std::fs::read_to_string(dir.join("server.log")).unwrap_or_default()
                );
            }
            assert!(Instant::now() < deadline, "server did not write its kubeconfig");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // The file is written in one call; a torn read is retried.
        let client = loop {
            if let Ok(kc) = kube::config::Kubeconfig::read_from(&kubeconfig)
                && let Ok(cfg) =
                    kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                        .await
            {
                break kube::Client::try_from(cfg).expect("client builds");
            }
            assert!(Instant::now() < deadline, "kubeconfig unreadable");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        Self {
            child,
            kubeconfig,
            data_dir,
            client,
        }
    }

    /// SIGKILL, by PID (our own child), and reap it.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

fn vpc(name: &str, cidrs: &[&str]) -> VPC {
    let mut v = VPC::new(
        name,
        VPCSpec {
            cidrs: cidrs.iter().map(ToString::to_string).collect(),
            mtu: 0,
            dhcp: None,
            dns64: false,
        },
    );
    v.metadata.namespace = Some("default".into());
    v
}

fn port(vpc: &str) -> Port {
    let mut p = Port::new(
        "",
        PortSpec {
            vpc_ref: VPCRef {
                namespace: "default".into(),
                name: vpc.into(),
            },
            node: "n1".into(),
            node_ip: "192.168.0.1".into(),
            ..Default::default()
        },
    );
    p.metadata.name = None;
    p.metadata.generate_name = Some("p-".into());
    p
}

fn code(e: &kube::Error) -> u16 {
    match e {
        kube::Error::Api(s) => s.code,
        _ => 0,
    }
}

async fn assert_sound(storage: &Arc<dyn Storage>, what: &str) -> usize {
    let r = scan(storage).await.expect("scan");
    assert!(r.problems.is_empty(), "{what}: invariants: {:#?}", r.problems);
    r.claims
}

async fn etcd_storage(url: &str) -> Arc<dyn Storage> {
    cozyplane_storage::open(Config::Etcd(etcd::Config::new([url.to_string()])))
        .await
        .expect("etcd opens")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alloc_procs_01_three_processes_one_etcd() {
    let etcd = EtcdServer::start();
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().expect("temp dir")).collect();
    let mut procs = Vec::new();
    for d in &dirs {
        procs.push(Proc::start(d.path(), Some(&etcd.client_url)).await);
    }
    let clients: Vec<kube::Client> = procs.iter().map(|p| p.client.clone()).collect();
    let vpcs = |i: usize| Api::<VPC>::namespaced(clients[i % 3].clone(), "default");
    let ports = |i: usize| Api::<Port>::all(clients[i % 3].clone());

    // 500 VPCs, round-robin over the three processes → 500 distinct VNIs.
    let created: Vec<_> = futures::stream::iter(0..500)
        .map(|i| {
            let api = vpcs(i);
            async move {
                api.create(&PostParams::default(), &vpc(&format!("v{i}"), &["10.9.0.0/24"]))
                    .await
            }
        })
        .buffer_unordered(48)
        .collect()
        .await;
    let mut vnis = HashSet::new();
    for r in &created {
        let v = r.as_ref().expect("every VPC create succeeds");
        let vni = v.status.as_ref().expect("status").vni;
        assert!(vnis.insert(vni), "duplicate VNI {vni}");
    }
    assert_eq!(vnis.len(), 500);
    vpcs(0)
        .create(&PostParams::default(), &vpc("small", &["10.0.0.0/24"]))
        .await
        .unwrap();
    vpcs(1)
        .create(&PostParams::default(), &vpc("big", &["10.1.0.0/16"]))
        .await
        .unwrap();

    // 2,000 Ports, round-robin, a quarter into the /24 (253 addresses) and the rest into the /16.
    let results: Vec<_> = futures::stream::iter(0..2000)
        .map(|i| {
            let api = ports(i);
            async move {
                let v = if i % 4 == 0 { "small" } else { "big" };
                api.create(&PostParams::default(), &port(v)).await.map(|p| (v, p))
            }
        })
        .buffer_unordered(48)
        .collect()
        .await;
    let (mut ips, mut macs, mut small, mut failed) = (HashSet::new(), HashSet::new(), 0, 0);
    for r in results {
        match r {
            Ok((v, p)) => {
                assert!(ips.insert((v, p.spec.ip.clone())), "duplicate {v} {}", p.spec.ip);
                assert!(macs.insert(p.spec.mac.clone()), "duplicate MAC {}", p.spec.mac);
                small += usize::from(v == "small");
            }
            Err(e) => {
                assert!(matches!(code(&e), 409 | 507), "not an explicit Status: {e:?}");
                failed += 1;
            }
        }
    }
    // The /24 is exactly full; the /16 got every one of its 1,500.
    assert_eq!(small, 253, "failed: {failed}");
    assert_eq!(ips.len(), 253 + 1500, "failed: {failed}");
    let storage = etcd_storage(&etcd.client_url).await;
    let claims = assert_sound(&storage, "after the storm").await;
    // 502 VNIs, 1,753 addresses, 1,753 MACs.
    assert_eq!(claims, 502 + 2 * 1753);
    drop(procs);
}

/// Runs `n` Port creates against `clients` (round-robin) while `kill` is called once `at`
/// creates have answered. Requests to a killed process fail with transport errors (code 0);
/// every other failure must be an explicit 409/507.
async fn storm_with_kill(
    clients: &[kube::Client],
    victim: usize,
    n: usize,
    at: usize,
    kill: impl FnOnce(),
) -> usize {
    let answered = Arc::new(AtomicUsize::new(0));
    let mut kill = Some(kill);
    let mut stream = futures::stream::iter(0..n)
        .map(|i| {
            let idx = i % clients.len();
            let api = Api::<Port>::all(clients[idx].clone());
            let answered = answered.clone();
            async move {
                let v = if i % 3 == 0 { "small" } else { "big" };
                let r = api.create(&PostParams::default(), &port(v)).await;
                answered.fetch_add(1, Ordering::Relaxed);
                (idx, r)
            }
        })
        .buffer_unordered(32);
    let mut ok = 0;
    while let Some((idx, r)) = stream.next().await {
        match r {
            Ok(_) => ok += 1,
            Err(e) if idx == victim && kill.is_none() && code(&e) == 0 => {}
            Err(e) => assert!(matches!(code(&e), 409 | 507), "process {idx}: {e:?}"),
        }
        if answered.load(Ordering::Relaxed) >= at
            && let Some(k) = kill.take()
        {
            k();
        }
    }
    ok
}

/// A pseudo-random number in `lo..hi` (the kill point), printed for reproduction.
fn random_in(lo: usize, hi: usize) -> usize {
    lo + (uuid::Uuid::new_v4().as_u128() % (hi - lo) as u128) as usize
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alloc_procs_02_sigkill_mid_storm_etcd() {
    let etcd = EtcdServer::start();
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().expect("temp dir")).collect();
    let mut procs = [
        Proc::start(dirs[0].path(), Some(&etcd.client_url)).await,
        Proc::start(dirs[1].path(), Some(&etcd.client_url)).await,
    ];
    let api = Api::<VPC>::namespaced(procs[0].client.clone(), "default");
    api.create(&PostParams::default(), &vpc("small", &["10.0.0.0/24"]))
        .await
        .unwrap();
    api.create(&PostParams::default(), &vpc("big", &["10.1.0.0/16", "fd01::/64"]))
        .await
        .unwrap();
    let storage = etcd_storage(&etcd.client_url).await;
    for round in 0..4 {
        let victim = round % 2;
        let at = random_in(5, 250);
        eprintln!("round {round}: SIGKILL process {victim} after {at} answers");
        let clients: Vec<_> = procs.iter().map(|p| p.client.clone()).collect();
        let pid = procs[victim].child.id();
        let ok = storm_with_kill(&clients, victim, 300, at, || {
            // SIGKILL by PID: the child is ours.
            let _ = Command::new("kill").arg("-KILL").arg(pid.to_string()).status();
        })
        .await;
        procs[victim].kill();
        assert!(ok > 0);
        assert_sound(&storage, &format!("round {round}")).await;
        // A fresh process on the same etcd takes the victim's place.
        procs[victim] = Proc::start(dirs[victim].path(), Some(&etcd.client_url)).await;
    }
    // The survivors keep allocating without a gap: ask for every remaining /24 address.
    let api = Api::<Port>::all(procs[1].client.clone());
    loop {
        match api.create(&PostParams::default(), &port("small")).await {
            Ok(_) => {}
            Err(e) => {
                assert_eq!(code(&e), 507, "{e:?}");
                break;
            }
        }
    }
    assert_sound(&storage, "after filling the /24").await;
    // No address was lost to a killed process: the /24 holds exactly its 253 Ports.
    let small = api
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|p| p.spec.vpc_ref.name == "small")
        .count();
    assert_eq!(small, 253);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alloc_procs_03_sigkill_mid_storm_embedded_restart() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut p = Proc::start(dir.path(), None).await;
    let api = Api::<VPC>::namespaced(p.client.clone(), "default");
    api.create(&PostParams::default(), &vpc("small", &["10.0.0.0/24"]))
        .await
        .unwrap();
    api.create(&PostParams::default(), &vpc("big", &["10.1.0.0/16"]))
        .await
        .unwrap();
    for round in 0..3 {
        let at = random_in(5, 250);
        eprintln!("round {round}: SIGKILL after {at} answers");
        let pid = p.child.id();
        let clients = [p.client.clone()];
        storm_with_kill(&clients, 0, 300, at, || {
            let _ = Command::new("kill").arg("-KILL").arg(pid.to_string()).status();
        })
        .await;
        p.kill();
        // The process is gone: open its data directory here, scan, close, restart on it.
        {
            let storage = cozyplane_storage::open(Config::Embedded(embedded::Config::new(&p.data_dir)))
                .await
                .expect("embedded store reopens");
            assert_sound(&storage, &format!("round {round}")).await;
        }
        p = Proc::start(dir.path(), None).await;
        assert!(p.kubeconfig.exists());
    }
    // The restarted process allocates on top of what the killed ones left.
    let api = Api::<Port>::all(p.client.clone());
    let got = api
        .create(&PostParams::default(), &port("big"))
        .await
        .expect("create after restart");
    assert!(got.spec.ip.starts_with("10.1."), "{}", got.spec.ip);
    p.kill();
    let storage = cozyplane_storage::open(Config::Embedded(embedded::Config::new(&p.data_dir)))
        .await
        .expect("embedded store reopens");
    assert_sound(&storage, "final").await;
}

/// The control loops follow the lease: with two processes on one etcd, killing one (possibly the
/// leader) still leaves the other to reconcile. Waits are watches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alloc_procs_04_controllers_survive_a_killed_process() {
    use cozyplane_apis::v1alpha1::{LocalVPCRef, VPCGateway, VPCGatewaySpec};
    use kube::runtime::wait::await_condition;

    fn gateway(name: &str) -> VPCGateway {
        let mut g = VPCGateway::new(
            name,
            VPCGatewaySpec {
                vpc_ref: LocalVPCRef { name: "g".into() },
                ..Default::default()
            },
        );
        g.metadata.namespace = Some("default".into());
        g
    }
    fn exclusive(status: &'static str) -> impl Fn(Option<&VPCGateway>) -> bool {
        move |o| {
            o.and_then(|g| g.status.as_ref())
                .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Exclusive"))
                .is_some_and(|c| c.status == status)
        }
    }
    let etcd = EtcdServer::start();
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().expect("temp dir")).collect();
    let mut a = Proc::start(dirs[0].path(), Some(&etcd.client_url)).await;
    let b = Proc::start(dirs[1].path(), Some(&etcd.client_url)).await;
    let pp = PostParams::default();
    Api::<VPC>::namespaced(a.client.clone(), "default")
        .create(&pp, &vpc("g", &["10.5.0.0/24"]))
        .await
        .unwrap();
    let gws_a: Api<VPCGateway> = Api::namespaced(a.client.clone(), "default");
    gws_a.create(&pp, &gateway("gw-a")).await.unwrap();
    let wait = Duration::from_secs(120);
    tokio::time::timeout(wait, await_condition(gws_a.clone(), "gw-a", exclusive("True")))
        .await
        .expect("gw-a reconciled")
        .unwrap();
    a.kill();
    // Only b is left; whichever held the lease, b reconciles the new gateway.
    let gws_b: Api<VPCGateway> = Api::namespaced(b.client.clone(), "default");
    gws_b.create(&pp, &gateway("gw-b")).await.unwrap();
    tokio::time::timeout(wait, await_condition(gws_b.clone(), "gw-b", exclusive("False")))
        .await
        .expect("gw-b reconciled after the kill")
        .unwrap();
}

/// A server that runs out of file descriptors (EMFILE on `accept`) logs it, waits and accepts
/// again once descriptors are free, instead of ending: Go servers, kube-apiserver among them,
/// do the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_keeps_serving_after_running_out_of_file_descriptors() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = Proc::start(dir.path(), None).await;
    let vpcs: Api<VPC> = Api::namespaced(p.client.clone(), "default");
    vpcs.create(&PostParams::default(), &vpc("before", &["10.1.0.0/16"]))
        .await
        .expect("serves before");
    let pid = p.child.id();
    let fds = || std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count);
    let limit = fds() + 8;
    let st = Command::new("prlimit")
        .arg(format!("--pid={pid}"))
        .arg(format!("--nofile={limit}:{limit}"))
        .status()
        .expect("prlimit runs");
    assert!(st.success(), "prlimit --pid {pid}");
    let text = std::fs::read_to_string(&p.kubeconfig).unwrap();
    let addr = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: https://"))
        .expect("server URL in the kubeconfig")
        .to_string();
    // Connections the server accepts and then waits on for a TLS ClientHello: they hold its
    // descriptors until dropped. The kernel's backlog takes the rest.
    let hold: Vec<std::net::TcpStream> = (0..32)
        .map(|_| std::net::TcpStream::connect(&addr).expect("connect"))
        .collect();
    let log = || std::fs::read_to_string(dir.path().join("server.log")).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !log().contains("accept failed") {
        assert!(
            Instant::now() < deadline,
            "the server never ran out of descriptors ({} open, limit {limit}):\n{}",
            fds(),
            log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        p.child.try_wait().expect("wait").is_none(),
        "the server ended on a failed accept:\n{}",
        log()
    );
    drop(hold);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match vpcs
            .create(&PostParams::default(), &vpc("after", &["10.2.0.0/16"]))
            .await
        {
            Ok(_) => break,
            Err(e) => assert!(
                Instant::now() < deadline,
                "the server does not serve again: {e}\n{}",
                log()
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
