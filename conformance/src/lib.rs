//! Conformance tests for cozyplane: the API server driven over HTTPS by the real `kubectl` and
//! by kube-rs, on the embedded store and on a real etcd.
//!
//! [`TestServer`] starts `cozyplane-apiserver` in-process in standalone mode on a free loopback
//! port with a temporary data directory (or a private etcd), and writes an admin kubeconfig.
//! Tests in `tests/` drive it with [`TestServer::kubectl`] and [`TestServer::client`].

pub mod delegated;
pub mod inproc;
pub mod objects;
pub mod realkube;
pub mod standin;
pub mod wire;

use std::path::{Path, PathBuf};
use std::process::Output;

use cozyplane_apiserver::options::Options;
use cozyplane_storage::testing::EtcdServer;

/// `/usr/bin/kubectl --kubeconfig <kubeconfig>` with a discovery cache of its own beside the
/// kubeconfig. kubectl otherwise shares `~/.kube/cache` keyed by host and port, and test servers
/// reuse loopback ports: a later server would be answered from an earlier one's discovery (and an
/// unauthenticated call would skip the discovery request whose 401 it expects).
pub fn kubectl_command(kubeconfig: &Path) -> tokio::process::Command {
    let cache = kubeconfig
        .parent()
        .unwrap_or_else(|| Path::new("."))
        .join("kubectl-cache");
    let mut cmd = tokio::process::Command::new("/usr/bin/kubectl");
    cmd.arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--cache-dir")
        .arg(cache)
        .kill_on_drop(true);
    cmd
}

/// Which store a test server runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// The embedded store in a temporary directory.
    Embedded,
    /// A private etcd process.
    Etcd,
}

/// A running API server; stopped (task aborted, etcd killed by PID) when dropped.
pub struct TestServer {
    /// `https://127.0.0.1:<port>`.
    pub url: String,
    /// Admin kubeconfig for this server.
    pub kubeconfig: PathBuf,
    /// The store the server runs on, for tests that act on storage directly (e.g. compaction).
    pub storage: std::sync::Arc<dyn cozyplane_storage::Storage>,
    task: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
    _etcd: Option<EtcdServer>,
}

/// The namespaces [`TestServer::start`] creates besides the server's own (`default`,
/// `kube-system`, `kube-public`): the tests write into them, and a standalone server refuses
/// writes into a namespace that does not exist, as Kubernetes does.
pub const FIXTURE_NAMESPACES: &[&str] = &["t1", "t2", "team-a", "team-b", "tenant", "pods", "bench"];

impl TestServer {
    /// Starts a server on `backend`, with the [`FIXTURE_NAMESPACES`].
    pub async fn start(backend: Backend) -> Self {
        Self::start_with_args(backend, &[]).await
    }

    /// Starts a server on `backend` with `extra` command-line flags appended, with the
    /// [`FIXTURE_NAMESPACES`].
    pub async fn start_with_args(backend: Backend, extra: &[&str]) -> Self {
        let s = Self::start_bare(backend, extra).await;
        for ns in FIXTURE_NAMESPACES {
            let body = format!(r#"{{"apiVersion":"v1","kind":"Namespace","metadata":{{"name":"{ns}"}}}}"#);
            let (code, _, text) = s
                .raw(
                    "POST",
                    "/api/v1/namespaces",
                    &[("content-type", "application/json")],
                    Some(&body),
                )
                .await;
            assert_eq!(code, 201, "creating namespace {ns}: {text}");
        }
        s
    }

    /// Starts a server on `backend` with `extra` flags and only the namespaces the server
    /// creates itself.
    pub async fn start_bare(backend: Backend, extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let kubeconfig = dir.path().join("kubeconfig");
        let etcd = (backend == Backend::Etcd).then(EtcdServer::start);
        let mut args = vec![
            "cozyplane-apiserver".to_string(),
            "--secure-port=0".into(),
            "--standalone".into(),
            format!("--write-kubeconfig={}", kubeconfig.display()),
            format!("--data-dir={}", dir.path().join("data").display()),
        ];
        if let Some(e) = &etcd {
            args.push(format!("--etcd-servers={}", e.client_url));
        }
        args.extend(extra.iter().map(|a| (*a).to_string()));
        let opts = <Options as clap::Parser>::parse_from(args);
        let storage = cozyplane_storage::open(opts.storage_config())
            .await
            .expect("storage opens");
        let server = opts.complete_with(storage.clone()).await.expect("server starts");
        let url = format!("https://127.0.0.1:{}", server.addr.port());
        let task = tokio::spawn(async move {
            let _ = server.run().await;
        });
        Self {
            url,
            kubeconfig,
            storage,
            task,
            _dir: dir,
            _etcd: etcd,
        }
    }

    /// Runs `/usr/bin/kubectl --kubeconfig <this> <args>` and returns its output.
    pub async fn kubectl_output(&self, args: &[&str]) -> Output {
        kubectl_command(&self.kubeconfig)
            .args(args)
            .output()
            .await
            .expect("kubectl runs")
    }

    /// Runs kubectl, asserts success and returns stdout.
    pub async fn kubectl(&self, args: &[&str]) -> String {
        let out = self.kubectl_output(args).await;
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs kubectl with `stdin` as input (for `-f -`), asserting success.
    pub async fn kubectl_stdin(&self, args: &[&str], stdin: &str) -> String {
        use tokio::io::AsyncWriteExt;
        let mut cmd = kubectl_command(&self.kubeconfig);
        cmd.args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = cmd.spawn().expect("kubectl runs");
        let mut input = child.stdin.take().expect("stdin is piped");
        input.write_all(stdin.as_bytes()).await.expect("write stdin");
        drop(input);
        let out = child.wait_with_output().await.expect("kubectl ends");
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A kube-rs client for the admin kubeconfig.
    pub async fn client(&self) -> kube::Client {
        let kc = kube::config::Kubeconfig::read_from(&self.kubeconfig).expect("kubeconfig parses");
        let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .expect("kubeconfig loads");
        kube::Client::try_from(cfg).expect("client builds")
    }

    /// A raw request through the kube-rs client: status, headers and body text.
    pub async fn raw(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&str>,
    ) -> (u16, http::HeaderMap, String) {
        let client = self.client().await;
        let mut b = http::Request::builder().method(method).uri(path);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let req = b
            .body(body.unwrap_or_default().as_bytes().to_vec())
            .expect("request builds");
        let resp = client
            .send(req.map(kube::client::Body::from))
            .await
            .expect("request is sent");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let bytes = http_body_util::BodyExt::collect(resp.into_body())
            .await
            .expect("body")
            .to_bytes();
        (status, headers, String::from_utf8_lossy(&bytes).into_owned())
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The `cozyplane-apiserver` binary for tests that run it as a child process:
/// `COZYPLANE_APISERVER`, else the one next to the test executable, built with the same profile
/// (`cargo build --bin cozyplane-apiserver`, which `make test-unit` runs).
pub fn server_binary() -> PathBuf {
    if let Ok(p) = std::env::var("COZYPLANE_APISERVER") {
        return p.into();
    }
    // <target>/<profile>/deps/<test>-<hash> → <target>/<profile>/cozyplane-apiserver
    let exe = std::env::current_exe().expect("current exe");
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .expect("target dir")
        .join("cozyplane-apiserver");
    assert!(
        bin.exists(),
        "{} missing: cargo build --bin cozyplane-apiserver (with this test's profile)",
        bin.display()
    );
    bin
}
