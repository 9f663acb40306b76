//! The real Kubernetes control plane for tests: etcd, `kube-apiserver` and
//! `kube-controller-manager` (v1.36, from `KUBE_BIN_DIR`) on loopback with a fresh PKI, and
//! cozyplane-apiserver installed behind it as the chart installs it (see [`cozy`]).
//!
//! The binaries come xz-compressed (`<repo>/../shared/kube` by default, see
//! `/work/shared/kube/README.md` for how they were built); [`bins`] decompresses them once into a
//! cache directory keyed by the archive's sha256, never into the repository. Without them the
//! tier does not run: [`bins`] says why, and [`not_run`] turns that into a panic in CI
//! (`CI=true`) or with `REQUIRE_KUBE=1`, and a loud warning elsewhere.
//!
//! Every process is a child of the test process, stopped by PID when its owner is dropped.

pub mod audit;
pub mod cozy;
pub mod pki;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine as _;
use cozyplane_storage::testing::EtcdServer;

/// The decompressed control-plane binaries.
#[derive(Clone, Debug)]
pub struct Bins {
    /// `kube-apiserver`.
    pub apiserver: PathBuf,
    /// `kube-controller-manager`.
    pub controller_manager: PathBuf,
}

/// `KUBE_BIN_DIR`, else `<repo>/../shared/kube`.
pub fn bin_dir() -> PathBuf {
    std::env::var_os("KUBE_BIN_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/kube"),
        PathBuf::from,
    )
}

/// Where decompressed binaries are kept: `$COZYPLANE_KUBE_CACHE`, else `$CARGO_TARGET_DIR/kube`,
/// else `~/.cache/cozyplane/kube`.
fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("COZYPLANE_KUBE_CACHE") {
        return d.into();
    }
    if let Some(d) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(d).join("kube");
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
    home.join(".cache/cozyplane/kube")
}

fn sha256(path: &Path) -> Result<String, String> {
    let out = Command::new("sha256sum")
        .arg(path)
        .output()
        .map_err(|e| format!("sha256sum: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "sha256sum {}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .map(str::to_string)
        .ok_or_else(|| "sha256sum printed nothing".into())
}

/// `<cache>/<sha256 of the .xz>/<name>`, decompressed on first use (written to a temporary name
/// and renamed, so concurrent test binaries never run a half-written file).
fn decompressed(dir: &Path, name: &str) -> Result<PathBuf, String> {
    let xz = dir.join(format!("{name}.xz"));
    if !xz.exists() {
        return Err(format!("{} does not exist", xz.display()));
    }
    let out_dir = cache_dir().join(sha256(&xz)?);
    let out = out_dir.join(name);
    if out.exists() {
        return Ok(out);
    }
    std::fs::create_dir_all(&out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    let tmp = out_dir.join(format!(".{name}.{}", std::process::id()));
    let file = std::fs::File::create(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
    let st = Command::new("xz")
        .arg("-dc")
        .arg(&xz)
        .stdout(file)
        .status()
        .map_err(|e| format!("xz: {e}"))?;
    if !st.success() {
        let _ = std::fs::remove_file(&tmp);
        return Err(format!("xz -dc {} failed: {st}", xz.display()));
    }
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).map_err(|e| e.to_string())?;
    std::fs::rename(&tmp, &out).map_err(|e| e.to_string())?;
    Ok(out)
}

/// The control-plane binaries, decompressed; `Err` says why the tier cannot run.
pub fn bins() -> Result<Bins, String> {
    let dir = bin_dir();
    Ok(Bins {
        apiserver: decompressed(&dir, "kube-apiserver")?,
        controller_manager: decompressed(&dir, "kube-controller-manager")?,
    })
}

/// `sample-apiserver` (k8s.io/apiserver's reference aggregated server, the Go peer of the API
/// server bench), decompressed from the same folder and into the same cache as [`bins`].
pub fn sample_apiserver() -> Result<PathBuf, String> {
    decompressed(&bin_dir(), "sample-apiserver")
}

/// Another binary of `KUBE_BIN_DIR` (`kubelet`, `kube-scheduler`, `agnhost`, `crictl`, …),
/// decompressed from `<name>.xz` into the same cache as [`bins`]; `Err` says why it cannot be.
pub fn binary(name: &str) -> Result<PathBuf, String> {
    decompressed(&bin_dir(), name)
}

/// What a control plane serves besides the API ([`ControlPlane::start_with`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// Real kubelets will join: kube-apiserver reaches them by their `InternalIP`
    /// (`--kubelet-preferred-address-types`, else exec and logs resolve the node's name) with
    /// the admin's client certificate, verifying their serving certificates against the
    /// cluster CA; kube-controller-manager also runs the node-lifecycle controller (which
    /// removes the `not-ready` taint NodeTaint admission puts on a new Node) and the
    /// root-CA publisher (`kube-root-ca.crt`, which a pod's ServiceAccount token volume needs),
    /// the Endpoints and EndpointSlice-mirroring controllers (the upstream suite reads
    /// Endpoints) and the workload controllers (Deployments, ReplicaSets,
    /// ReplicationControllers, DaemonSets, StatefulSets, Jobs, pod GC, disruption);
    /// kube-scheduler runs (`KUBE_BIN_DIR/kube-scheduler.xz`, as `kubernetes-admin`), so pods
    /// without `nodeName` are placed; and Services get ClusterIPs from `10.96.0.0/16`
    /// ([`SERVICE_RANGE_WITH_KUBELETS`]) instead of a loopback range, where a pod connecting
    /// to a ClusterIP would reach its own loopback.
    pub kubelets: bool,
    /// With [`Options::kubelets`]: Services may be dual-stack, their IPv6 ClusterIPs from
    /// [`SERVICE_RANGE6_WITH_KUBELETS`] (the nodes' kubelets then report both families).
    pub dual_stack: bool,
}

/// The IPv6 ClusterIP range of a dual-stack control plane ([`Options::dual_stack`]).
pub const SERVICE_RANGE6_WITH_KUBELETS: &str = "fd96::/112";

/// The Service ClusterIP range of a control plane with kubelets ([`Options::kubelets`]): no
/// route leads there (no kube-proxy, no Service proxy of ours yet), so a connection to a
/// ClusterIP fails instead of reaching the pod's own loopback.
pub const SERVICE_RANGE_WITH_KUBELETS: &str = "10.96.0.0/16";

/// Whether a missing control plane must fail the run: in CI (`CI=true`) and with `REQUIRE_KUBE=1`.
pub fn required() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
        || std::env::var("REQUIRE_KUBE").is_ok_and(|v| v == "1")
}

/// The tier cannot run: panics where it is [`required`], otherwise prints a banner that nobody
/// can mistake for a pass.
pub fn not_run(why: &str) {
    let msg = format!(
        "the real-control-plane tier DID NOT RUN: {why}\n(looked in {}: set KUBE_BIN_DIR to the folder holding kube-apiserver.xz and kube-controller-manager.xz; default <repo>/../shared/kube)",
        bin_dir().display()
    );
    assert!(!required(), "{msg}");
    let bar = "!".repeat(100);
    eprintln!("\n{bar}\n{msg}\n{bar}\n");
}

/// A child process with its log file; SIGKILLed by PID and reaped when dropped.
pub struct Proc {
    child: Option<Child>,
    /// Its combined stdout and stderr.
    pub log: PathBuf,
    name: String,
}

impl Proc {
    /// Spawns `cmd` with stdout and stderr appended to `log`.
    pub fn spawn(name: &str, mut cmd: Command, log: &Path) -> Self {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .expect("log file");
        cmd.stdin(Stdio::null())
            .stdout(file.try_clone().expect("log file"))
            .stderr(file);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("{name} does not start: {e}"));
        Self {
            child: Some(child),
            log: log.to_path_buf(),
            name: name.into(),
        }
    }

    /// `Some(status)` once the process has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.as_mut().and_then(|c| c.try_wait().ok().flatten())
    }

    /// Its process id while it runs (for `/proc/<pid>` figures).
    pub fn id(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The end of its log, for failure messages.
    pub fn tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let from = lines.len().saturating_sub(40);
        format!(
            "--- {} ({}) ---\n{}",
            self.name,
            self.log.display(),
            lines[from..].join("\n")
        )
    }

    /// SIGKILL by PID and reap.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A free loopback port (found by binding port 0; a process that loses the race is restarted).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// A running control plane. Fields drop in order: scheduler, controller manager,
/// kube-apiserver, etcd, then the directory.
pub struct ControlPlane {
    scheduler: Option<Proc>,
    kcm: Proc,
    apiserver: Proc,
    _etcd: EtcdServer,
    _etcd_dir: tempfile::TempDir,
    /// `https://127.0.0.1:<port>` of kube-apiserver.
    pub url: String,
    /// kubeconfig of `kubernetes-admin` (`system:masters`).
    pub admin: PathBuf,
    /// kube-apiserver's audit log (JSON lines, level Metadata for everything).
    pub audit_log: PathBuf,
    /// The certificates.
    pub pki: pki::Pki,
    /// Instants at which a test stopped cozyplane on purpose (its watches end then).
    pub stops: Mutex<Vec<jiff::Timestamp>>,
    /// Where everything is written.
    pub dir: tempfile::TempDir,
}

const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n";

impl ControlPlane {
    /// Starts etcd, kube-apiserver and kube-controller-manager; returns once kube-apiserver's
    /// `/readyz` answers 200.
    pub async fn start(bins: &Bins) -> Self {
        Self::start_with(bins, Options::default()).await
    }

    /// [`ControlPlane::start`] serving what `opts` asks for besides.
    pub async fn start_with(bins: &Bins, opts: Options) -> Self {
        // REALKUBE_KEEP=1 keeps the logs, the audit log and the certificates for a post-mortem.
        let dir = tempfile::Builder::new()
            .prefix("realkube-")
            .disable_cleanup(std::env::var_os("REALKUBE_KEEP").is_some())
            .tempdir()
            .expect("temp dir");
        // etcd fsyncs every write: on a disk shared with compilers, kube-apiserver's bootstrap
        // (hundreds of writes) took 85 s with etcd timeouts. The data is thrown away, so it lives
        // in memory where there is a tmpfs (the later `--data-dir` wins over the helper's own).
        let etcd_dir = tempfile::Builder::new()
            .prefix("realkube-etcd-")
            .tempdir_in(if Path::new("/dev/shm").is_dir() {
                PathBuf::from("/dev/shm")
            } else {
                std::env::temp_dir()
            })
            .expect("etcd data dir");
        let data = format!("--data-dir={}", etcd_dir.path().join("data").display());
        let etcd = tokio::task::spawn_blocking(move || EtcdServer::start_with(vec![data], "http"))
            .await
            .expect("etcd starts");
        let pki = pki::Pki::mint().expect("PKI");
        let d = dir.path();
        let write = |name: &str, text: &str| {
            let p = d.join(name);
            std::fs::write(&p, text).expect("write control-plane file");
            p
        };
        let ca = write("ca.crt", &pki.ca.cert);
        let ca_key = write("ca.key", &pki.ca.key);
        let tls_crt = write("apiserver.crt", &pki.apiserver.cert);
        let tls_key = write("apiserver.key", &pki.apiserver.key);
        let fp_ca = write("front-proxy-ca.crt", &pki.front_proxy_ca.cert);
        let fp_crt = write("front-proxy-client.crt", &pki.front_proxy_client.cert);
        let fp_key = write("front-proxy-client.key", &pki.front_proxy_client.key);
        let sa_key = write("sa.key", &pki.sa_key.key);
        let sa_pub = write("sa.pub", &pki.sa_key.cert);
        let admin_crt = write("admin.crt", &pki.admin.cert);
        let admin_key = write("admin.key", &pki.admin.key);
        let policy = write("audit-policy.yaml", AUDIT_POLICY);
        let audit_log = d.join("audit.log");
        let p = |p: &Path| p.display().to_string();

        let mut attempt = 0;
        let (apiserver, url) = loop {
            attempt += 1;
            let port = free_port();
            let mut cmd = Command::new(&bins.apiserver);
            cmd.args([
                format!("--etcd-servers={}", etcd.client_url),
                "--bind-address=127.0.0.1".into(),
                "--advertise-address=127.0.0.1".into(),
                format!("--secure-port={port}"),
                format!("--tls-cert-file={}", p(&tls_crt)),
                format!("--tls-private-key-file={}", p(&tls_key)),
                format!("--client-ca-file={}", p(&ca)),
                "--service-account-issuer=https://kubernetes.default.svc".into(),
                format!("--service-account-key-file={}", p(&sa_pub)),
                format!("--service-account-signing-key-file={}", p(&sa_key)),
                format!(
                    "--service-cluster-ip-range={}",
                    match (opts.kubelets, opts.dual_stack) {
                        (true, true) =>
                            format!("{SERVICE_RANGE_WITH_KUBELETS},{SERVICE_RANGE6_WITH_KUBELETS}"),
                        (true, false) => SERVICE_RANGE_WITH_KUBELETS.into(),
                        (false, _) => "127.0.100.0/24".into(),
                    }
                ),
                "--authorization-mode=Node,RBAC".into(),
                // As every installer sets it: the chart's agent DaemonSet is privileged, and
                // the chart's dry run (tests/chart_dryrun.rs) is refused without it.
                "--allow-privileged=true".into(),
                "--enable-admission-plugins=NamespaceLifecycle,ServiceAccount,ResourceQuota".into(),
                format!("--requestheader-client-ca-file={}", p(&fp_ca)),
                "--requestheader-allowed-names=front-proxy-client".into(),
                "--requestheader-username-headers=X-Remote-User".into(),
                "--requestheader-uid-headers=X-Remote-Uid".into(),
                "--requestheader-group-headers=X-Remote-Group".into(),
                "--requestheader-extra-headers-prefix=X-Remote-Extra-".into(),
                format!("--proxy-client-cert-file={}", p(&fp_crt)),
                format!("--proxy-client-key-file={}", p(&fp_key)),
                "--enable-aggregator-routing=true".into(),
                "--endpoint-reconciler-type=none".into(),
                format!("--audit-policy-file={}", p(&policy)),
                format!("--audit-log-path={}", p(&audit_log)),
                "--audit-log-format=json".into(),
                "--audit-log-mode=blocking".into(),
                format!("--cert-dir={}", p(&d.join("apiserver-certs"))),
            ]);
            if opts.kubelets {
                cmd.args([
                    "--kubelet-preferred-address-types=InternalIP,Hostname".into(),
                    format!("--kubelet-client-certificate={}", p(&admin_crt)),
                    format!("--kubelet-client-key={}", p(&admin_key)),
                    format!("--kubelet-certificate-authority={}", p(&ca)),
                ]);
            }
            let mut proc = Proc::spawn("kube-apiserver", cmd, &d.join("kube-apiserver.log"));
            let url = format!("https://127.0.0.1:{port}");
            let admin = write_kubeconfig(d, "admin.kubeconfig", &url, &pki.ca.cert, &admin_user(&pki));
            match wait_ready(&mut proc, &admin).await {
                Ok(()) => break (proc, url),
                Err(tail) if attempt < 5 && tail.contains("address already in use") => {}
                Err(tail) => panic!("kube-apiserver did not become ready:\n{tail}"),
            }
        };
        let admin = d.join("admin.kubeconfig");

        let mut controllers = "namespace-controller,garbage-collector-controller,resourcequota-controller,clusterrole-aggregation-controller,endpointslice-controller,serviceaccount-controller".to_string();
        if opts.kubelets {
            // The Endpoints controllers too: the upstream suite's Endpoints tests read them.
            controllers.push_str(",node-lifecycle-controller,root-ca-certificate-publisher-controller,endpoints-controller,endpointslice-mirroring-controller");
            // The workload controllers: the upstream suite runs its servers as Deployments,
            // ReplicationControllers, DaemonSets and Jobs, and cleans up after deleted nodes' pods.
            controllers.push_str(",deployment-controller,replicaset-controller,replicationcontroller-controller,daemonset-controller,statefulset-controller,job-controller,pod-garbage-collector-controller,disruption-controller");
            // ServiceCIDR objects' readiness (the suite adds Service ranges at run time).
            controllers.push_str(",service-cidr-controller");
        }
        let mut cmd = Command::new(&bins.controller_manager);
        cmd.args([
            format!("--kubeconfig={}", p(&admin)),
            format!("--authentication-kubeconfig={}", p(&admin)),
            format!("--authorization-kubeconfig={}", p(&admin)),
            "--leader-elect=false".into(),
            format!("--controllers={controllers}"),
            format!("--service-account-private-key-file={}", p(&sa_key)),
            format!("--root-ca-file={}", p(&ca)),
            format!("--cluster-signing-cert-file={}", p(&ca)),
            format!("--cluster-signing-key-file={}", p(&ca_key)),
            "--bind-address=127.0.0.1".into(),
            "--secure-port=0".into(),
            format!("--cert-dir={}", p(&d.join("kcm-certs"))),
        ]);
        let kcm = Proc::spawn(
            "kube-controller-manager",
            cmd,
            &d.join("kube-controller-manager.log"),
        );
        // kube-scheduler: with the admin's kubeconfig for everything, no leader election, its
        // secure port on a free loopback port (a lost race shows in its log as a bind error).
        let scheduler = opts.kubelets.then(|| {
            let bin =
                binary("kube-scheduler").unwrap_or_else(|e| panic!("kube-scheduler from KUBE_BIN_DIR: {e}"));
            let mut cmd = Command::new(bin);
            cmd.args([
                format!("--kubeconfig={}", p(&admin)),
                format!("--authentication-kubeconfig={}", p(&admin)),
                format!("--authorization-kubeconfig={}", p(&admin)),
                "--leader-elect=false".into(),
                "--bind-address=127.0.0.1".into(),
                format!("--secure-port={}", free_port()),
                format!("--cert-dir={}", p(&d.join("scheduler-certs"))),
            ]);
            Proc::spawn("kube-scheduler", cmd, &d.join("kube-scheduler.log"))
        });
        let cp = Self {
            scheduler,
            kcm,
            apiserver,
            _etcd: etcd,
            _etcd_dir: etcd_dir,
            url,
            admin,
            audit_log,
            pki,
            stops: Mutex::new(Vec::new()),
            dir,
        };
        // The serviceaccount controller makes `default` in every namespace: until it runs, pods
        // cannot be created. Its first pass also shows the controller manager is up.
        cp.eventually("the controller manager to create kube-system/default", || async {
            cp.kubectl(
                &cp.admin,
                &["get", "serviceaccount", "default", "-n", "kube-system"],
            )
            .await
            .status
            .success()
        })
        .await;
        cp
    }

    /// The last lines of kube-apiserver's, kube-controller-manager's and kube-scheduler's logs.
    pub fn logs(&self) -> String {
        let mut s = format!("{}\n{}", self.apiserver.tail(), self.kcm.tail());
        if let Some(sched) = &self.scheduler {
            s.push('\n');
            s.push_str(&sched.tail());
        }
        s
    }

    /// Runs kubectl as `kubeconfig` (through [`crate::kubectl_command`]).
    pub async fn kubectl(&self, kubeconfig: &Path, args: &[&str]) -> Output {
        crate::kubectl_command(kubeconfig)
            .args(args)
            .output()
            .await
            .expect("kubectl runs")
    }

    /// Runs kubectl, asserts success, returns stdout.
    pub async fn ok(&self, kubeconfig: &Path, args: &[&str]) -> String {
        let out = self.kubectl(kubeconfig, args).await;
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs kubectl, asserts failure, returns stderr.
    pub async fn fails(&self, kubeconfig: &Path, args: &[&str]) -> String {
        let out = self.kubectl(kubeconfig, args).await;
        assert!(
            !out.status.success(),
            "kubectl {args:?} unexpectedly succeeded: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    /// `kubectl <args> -f -` with `input` on stdin; the output, success or not.
    pub async fn kubectl_stdin(&self, kubeconfig: &Path, args: &[&str], input: &str) -> Output {
        use tokio::io::AsyncWriteExt as _;
        let mut cmd = crate::kubectl_command(kubeconfig);
        cmd.args(args)
            .args(["-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("kubectl runs");
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(input.as_bytes()).await.expect("write stdin");
        drop(stdin);
        child.wait_with_output().await.expect("kubectl ends")
    }

    /// `kubectl apply -f -` of `yaml` as the admin; asserts success.
    pub async fn apply(&self, yaml: &str) -> String {
        let out = self.kubectl_stdin(&self.admin, &["apply"], yaml).await;
        assert!(
            out.status.success(),
            "kubectl apply failed: {}\n{yaml}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A kubeconfig (in the control plane's directory) for a client certificate of the cluster
    /// CA: user `cn` in `groups`, default namespace `ns`.
    pub fn user_kubeconfig(&self, cn: &str, groups: &[&str], ns: &str) -> PathBuf {
        let pem = self.pki.ca.client(cn, groups).expect("client certificate");
        let user = format!(
            "    client-certificate-data: {}\n    client-key-data: {}\n",
            b64(&pem.cert),
            b64(&pem.key)
        );
        let file: String = cn.chars().filter(char::is_ascii_alphanumeric).collect();
        let p = write_kubeconfig(
            self.dir.path(),
            &format!("user-{file}.kubeconfig"),
            &self.url,
            &self.pki.ca.cert,
            &user,
        );
        set_namespace(&p, ns);
        p
    }

    /// A kubeconfig that authenticates with a bearer token.
    pub fn token_kubeconfig(&self, name: &str, token: &str) -> PathBuf {
        write_kubeconfig(
            self.dir.path(),
            &format!("{name}.kubeconfig"),
            &self.url,
            &self.pki.ca.cert,
            &format!("    token: {token}\n"),
        )
    }

    /// A kube-rs client for `kubeconfig`.
    pub async fn client(&self, kubeconfig: &Path) -> kube::Client {
        let kc = kube::config::Kubeconfig::read_from(kubeconfig).expect("kubeconfig parses");
        let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .expect("kubeconfig loads");
        kube::Client::try_from(cfg).expect("client builds")
    }

    /// Creates a fresh namespace `<prefix>-<random>` and returns its name.
    pub async fn namespace(&self, prefix: &str) -> String {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let name = format!("{prefix}-{}", &id[..6]);
        self.ok(&self.admin, &["create", "namespace", &name]).await;
        name
    }

    /// Polls `f` every 250 ms until it holds; panics after 3 minutes (a hang guard, not a timing
    /// assertion) with the control plane's logs.
    pub async fn eventually<F, Fut>(&self, what: &str, mut f: F)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = bool>,
    {
        let deadline = Instant::now() + Duration::from_secs(180);
        while Instant::now() < deadline {
            if f().await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        panic!("timed out waiting for {what}\n{}", self.logs());
    }
}

fn admin_user(pki: &pki::Pki) -> String {
    format!(
        "    client-certificate-data: {}\n    client-key-data: {}\n",
        b64(&pki.admin.cert),
        b64(&pki.admin.key)
    )
}

/// Writes a kubeconfig for `url` trusting `ca` with the `user:` block `user` (indented fields).
pub fn write_kubeconfig(dir: &Path, file: &str, url: &str, ca: &str, user: &str) -> PathBuf {
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: realkube\n  cluster:\n    server: {url}\n    certificate-authority-data: {}\nusers:\n- name: u\n  user:\n{user}contexts:\n- name: realkube\n  context:\n    cluster: realkube\n    user: u\n    namespace: default\ncurrent-context: realkube\n",
        b64(ca)
    );
    let p = dir.join(file);
    std::fs::write(&p, text).expect("write kubeconfig");
    p
}

fn set_namespace(kubeconfig: &Path, ns: &str) {
    let text = std::fs::read_to_string(kubeconfig).expect("kubeconfig");
    std::fs::write(
        kubeconfig,
        text.replace("    namespace: default\n", &format!("    namespace: {ns}\n")),
    )
    .expect("write kubeconfig");
}

/// Waits until kube-apiserver answers `/readyz` with 200; `Err(log tail)` if it exits first.
async fn wait_ready(proc: &mut Proc, admin: &Path) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if let Some(st) = proc.exited() {
            return Err(format!("exited with {st}\n{}", proc.tail()));
        }
        let out = crate::kubectl_command(admin)
            .args(["get", "--raw", "/readyz", "--request-timeout=5s"])
            .output()
            .await
            .expect("kubectl runs");
        if out.status.success() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("not ready after 90 s\n{}", proc.tail()));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}
