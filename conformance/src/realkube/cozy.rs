//! cozyplane-apiserver installed behind the real control plane the way the chart installs it:
//! the chart's ServiceAccounts and RBAC (`serviceaccounts.yaml`, `apiserver-rbac.yaml`,
//! `tenant-rbac.yaml` as Helm renders them with the default values: [`chart_rbac`]),
//! a ServiceAccount token from the TokenRequest API (`kubectl create token`) as the only
//! credential of `--kubeconfig`, `--authentication-kubeconfig` and `--authorization-kubeconfig`,
//! its own embedded store, a self-signed serving certificate for the Service's names, and
//! `--ensure-apiservice` registering `v1alpha1.sdn.cozystack.io` for the Service.
//!
//! Loopback stands in for the pod network: the Service has no selector and an EndpointSlice of
//! `addressType: FQDN` with the address `127.0.0.1` (EndpointSlice validation refuses loopback
//! IPs), which the aggregator dials with `--enable-aggregator-routing`.

use std::path::PathBuf;
use std::process::Command;

use super::{ControlPlane, Proc, free_port};

/// The Service (and ServiceAccount) name the chart uses.
pub const NAME: &str = "cozyplane-apiserver";

/// The namespace of the release the tier installs (named `cozyplane_chartkit::RELEASE`).
pub const RELEASE_NAMESPACE: &str = "cozy-system";

/// The templates whose objects the tier applies: the ServiceAccounts and the RBAC.
pub const RBAC_TEMPLATES: &[&str] = &[
    "templates/serviceaccounts.yaml",
    "templates/apiserver-rbac.yaml",
    "templates/tenant-rbac.yaml",
];

/// [`RBAC_TEMPLATES`] rendered by Helm (`helm template --show-only`) with the chart's default
/// values, released into [`RELEASE_NAMESPACE`]: the YAML stream `kubectl apply` takes.
///
/// # Panics
///
/// When Helm is missing (run `make deps`) or fails to render.
pub fn chart_rbac() -> String {
    RBAC_TEMPLATES
        .iter()
        .fold(cozyplane_chartkit::Render::new(RELEASE_NAMESPACE), |r, t| {
            r.show_only(t)
        })
        .ok()
        .yaml
}

/// The user the server's ServiceAccount token authenticates as.
pub fn service_account_user() -> String {
    format!("system:serviceaccount:{RELEASE_NAMESPACE}:{NAME}")
}

/// The installed server: one process at a time on a fixed port (the EndpointSlice's).
pub struct Cozyplane {
    /// The loopback port it serves on.
    pub port: u16,
    /// Its kubeconfig (the ServiceAccount token).
    pub kubeconfig: PathBuf,
    /// The data directory of its embedded store (kept across restarts, like the chart's PVC).
    pub data_dir: PathBuf,
    /// The server's log.
    pub log: PathBuf,
    proc: Option<Proc>,
    extra: Vec<String>,
}

impl Cozyplane {
    /// The flags the chart's Deployment passes with its default values (`tls.mode:
    /// self-signed`, `apiService.managedBy: server`), plus the kubeconfigs a pod gets from its
    /// in-cluster ServiceAccount.
    fn args(&self) -> Vec<String> {
        let kc = self.kubeconfig.display();
        let mut a = vec![
            "--bind-address=127.0.0.1".to_string(),
            format!("--secure-port={}", self.port),
            format!("--data-dir={}", self.data_dir.display()),
            format!("--ensure-apiservice={RELEASE_NAMESPACE}/{NAME}"),
            "--apiservice-group-priority-minimum=1000".into(),
            "--apiservice-version-priority=15".into(),
            format!("--kubeconfig={kc}"),
            format!("--authentication-kubeconfig={kc}"),
            format!("--authorization-kubeconfig={kc}"),
        ];
        a.extend(self.extra.iter().cloned());
        a
    }

    /// Starts the process (again).
    pub fn start(&mut self) {
        assert!(self.proc.is_none(), "cozyplane is already running");
        let mut cmd = Command::new(crate::server_binary());
        cmd.args(self.args()).env("RUST_LOG", "info");
        self.proc = Some(Proc::spawn("cozyplane-apiserver", cmd, &self.log));
    }

    /// SIGKILL by PID.
    pub fn kill(&mut self) {
        if let Some(mut p) = self.proc.take() {
            p.kill();
        }
    }

    /// Whether the process is running.
    pub fn running(&mut self) -> bool {
        self.proc.as_mut().is_some_and(|p| p.exited().is_none())
    }

    /// The end of the server's log.
    pub fn tail(&self) -> String {
        self.proc.as_ref().map_or_else(String::new, Proc::tail)
    }
}

/// The Service and its loopback EndpointSlice.
fn service_yaml(port: u16) -> String {
    format!(
        r"apiVersion: v1
kind: Service
metadata:
  name: {NAME}
  namespace: {RELEASE_NAMESPACE}
spec:
  ports:
    - name: https
      port: 443
      targetPort: {port}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {NAME}-loopback
  namespace: {RELEASE_NAMESPACE}
  labels:
    kubernetes.io/service-name: {NAME}
addressType: FQDN
endpoints:
  - addresses: [127.0.0.1]
    conditions: {{ready: true}}
ports:
  - name: https
    port: {port}
    protocol: TCP
"
    )
}

impl ControlPlane {
    /// Installs cozyplane (see the module docs) with `extra` flags and waits until its
    /// APIService is `Available`.
    pub async fn install_cozyplane(&self, extra: &[&str]) -> Cozyplane {
        let rbac = chart_rbac();
        self.ok(&self.admin, &["create", "namespace", RELEASE_NAMESPACE])
            .await;
        self.apply(&rbac).await;
        let token = self
            .ok(
                &self.admin,
                &["create", "token", NAME, "-n", RELEASE_NAMESPACE, "--duration=24h"],
            )
            .await;
        let kubeconfig = self.token_kubeconfig("cozyplane", token.trim());
        let dir = self.dir.path().join("cozyplane");
        std::fs::create_dir_all(&dir).expect("cozyplane dir");
        let mut c = Cozyplane {
            port: 0,
            kubeconfig,
            data_dir: dir.join("data"),
            log: dir.join("server.log"),
            proc: None,
            extra: extra.iter().map(|s| (*s).to_string()).collect(),
        };
        // A port found free can be taken before the server binds it: then it exits at once,
        // and another port (and EndpointSlice) is tried.
        for attempt in 1.. {
            c.port = free_port();
            self.apply(&service_yaml(c.port)).await;
            c.start();
            // It logs this line once it listens.
            while c.running() && !c.tail().contains("serving sdn.cozystack.io") {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            if c.running() || attempt == 3 || !c.tail().contains("in use") {
                break;
            }
            c.kill();
        }
        self.wait_available(&mut c, "True").await;
        c
    }

    /// The APIService's `Available` condition status (`True`, `False`), or empty.
    pub async fn available(&self) -> String {
        let out = self
            .kubectl(
                &self.admin,
                &[
                    "get",
                    "apiservice",
                    "v1alpha1.sdn.cozystack.io",
                    "-o",
                    "jsonpath={.status.conditions[?(@.type==\"Available\")].status}",
                ],
            )
            .await;
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Waits until the APIService's `Available` is `want`; on a hang, panics with every log.
    pub async fn wait_available(&self, c: &mut Cozyplane, want: &str) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        loop {
            if self.available().await == want {
                return;
            }
            if want == "True" && c.proc.is_some() && !c.running() {
                panic!("cozyplane-apiserver exited\n{}", c.tail());
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the APIService never became Available={want}\n{}\n{}",
                c.tail(),
                self.logs()
            );
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        }
    }
}
