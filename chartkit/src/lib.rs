//! The chart (`charts/cozyplane`) as Helm renders it, for tests: [`Render`] runs the real
//! `helm template` (the pinned binary `make deps` installs, named by `COZYPLANE_HELM`) and
//! parses what it prints into objects; [`lint`] runs `helm lint --strict`; [`MODES`] lists the
//! documented value combinations and the objects each promises.
//!
//! Users: the conformance tier applies the chart's RBAC from it and dry-runs every mode
//! against the real kube-apiserver (`conformance/tests/chart_dryrun.rs`); the lab proves it
//! installs the CNI exactly as the rendered init container does (`lab/tests/chart.rs`); the
//! agent parses the rendered DaemonSet's flags (`agent/tests/chart_args.rs`). It links
//! nothing of ours, so neither the lab nor the agent gets server code through it.
//!
//! Without Helm every caller fails (never skips), saying to run `make deps`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The release name every test renders with (only labels and names carry it).
pub const RELEASE: &str = "cozyplane";

/// Why rendering (or linting) failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Helm exited non-zero: a `fail`, a `required` value, a template error. `stderr` holds
    /// Helm's message (`Error: execution error at (<template>:<line>:<col>): <message>`).
    #[error("helm {args}: {stderr}")]
    Helm {
        /// The arguments, space-separated.
        args: String,
        /// What Helm printed on stderr.
        stderr: String,
    },
    /// Helm printed something that is not a stream of YAML objects.
    #[error("helm's output is not YAML: {0}")]
    Yaml(String),
}

/// `COZYPLANE_HELM`, else the Makefile's default (`$HOME/.cache/cozyplane/tools/helm`).
///
/// # Panics
///
/// When there is no file there: run `make deps`, which installs the pinned Helm.
pub fn helm() -> PathBuf {
    let (path, from) = match std::env::var_os("COZYPLANE_HELM") {
        Some(p) => (PathBuf::from(p), "COZYPLANE_HELM"),
        None => {
            let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/root"), PathBuf::from);
            (
                home.join(".cache/cozyplane/tools/helm"),
                "the default of COZYPLANE_HELM",
            )
        }
    };
    assert!(
        path.is_file(),
        "Helm is not installed at {} ({from}): run `make deps`, which installs the pinned Helm there",
        path.display()
    );
    path
}

/// The chart's directory.
pub fn chart_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/cozyplane")
}

/// One `helm template` of the chart: a release ([`RELEASE`] unless [`release`](Self::release)
/// names another) in a namespace, with values files and `--set` values, and optionally only
/// some templates.
#[derive(Clone, Debug)]
pub struct Render {
    release: String,
    namespace: String,
    files: Vec<PathBuf>,
    sets: Vec<(&'static str, String)>,
    show_only: Vec<String>,
    include_crds: bool,
}

impl Render {
    /// The chart's defaults, released as [`RELEASE`] into `namespace`.
    pub fn new(namespace: &str) -> Self {
        Self {
            release: RELEASE.to_string(),
            namespace: namespace.to_string(),
            files: Vec::new(),
            sets: Vec::new(),
            show_only: Vec::new(),
            include_crds: false,
        }
    }

    /// Another release name.
    #[must_use]
    pub fn release(mut self, name: &str) -> Self {
        self.release = name.to_string();
        self
    }

    /// `--values <file>`, merged over the chart's `values.yaml` in the order given (every
    /// `--set` still wins, as in Helm).
    #[must_use]
    pub fn values_file(mut self, file: &Path) -> Self {
        self.files.push(file.to_path_buf());
        self
    }

    /// `--set-json key=<value as JSON>`: a map or list in one value.
    #[must_use]
    pub fn set_json(mut self, key: &str, value: &Value) -> Self {
        self.sets.push(("--set-json", format!("{key}={value}")));
        self
    }

    /// `--set key=value` (Helm's syntax: `{a,b}` is a list, `true`/`false` and numbers are
    /// typed).
    #[must_use]
    pub fn set(mut self, key: &str, value: &str) -> Self {
        self.sets.push(("--set", format!("{key}={value}")));
        self
    }

    /// [`set`](Self::set) of every pair.
    #[must_use]
    pub fn values(self, values: &[(&str, &str)]) -> Self {
        values.iter().fold(self, |r, (k, v)| r.set(k, v))
    }

    /// Only `template` (relative to the chart, e.g. `templates/serviceaccounts.yaml`); may be
    /// given more than once.
    #[must_use]
    pub fn show_only(mut self, template: &str) -> Self {
        self.show_only.push(template.to_string());
        self
    }

    /// `--include-crds`: the chart's `crds/` too (Helm installs them before the templates;
    /// `helm template` leaves them out by default).
    #[must_use]
    pub fn include_crds(mut self) -> Self {
        self.include_crds = true;
        self
    }

    fn args(&self) -> Vec<String> {
        let mut a = vec![
            "template".to_string(),
            self.release.clone(),
            chart_dir().display().to_string(),
            "--namespace".to_string(),
            self.namespace.clone(),
        ];
        for f in &self.files {
            a.extend(["--values".to_string(), f.display().to_string()]);
        }
        for (flag, s) in &self.sets {
            a.extend([(*flag).to_string(), s.clone()]);
        }
        for t in &self.show_only {
            a.extend(["--show-only".to_string(), t.clone()]);
        }
        if self.include_crds {
            a.push("--include-crds".to_string());
        }
        a
    }

    /// Runs `helm template`.
    pub fn run(&self) -> Result<Manifest, Error> {
        let yaml = run_helm(&self.args())?;
        Manifest::parse(yaml)
    }

    /// [`run`](Self::run), panicking with Helm's message on failure.
    pub fn ok(&self) -> Manifest {
        self.run().unwrap_or_else(|e| panic!("{e}"))
    }
}

/// The chart's `crds/` files (the network-policy-api CRDs, vendored): `(file name, text)`,
/// sorted by name.
///
/// # Panics
///
/// When the directory cannot be read.
pub fn crd_files() -> Vec<(String, String)> {
    let dir = chart_dir().join("crds");
    let mut out: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let p = e.expect("a directory entry").path();
            let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p.file_name().unwrap().to_string_lossy().into_owned(), text)
        })
        .collect();
    out.sort();
    out
}

fn run_helm(args: &[String]) -> Result<String, Error> {
    let out = Command::new(helm())
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", helm().display()));
    if !out.status.success() {
        return Err(Error::Helm {
            args: args.join(" "),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `helm lint --strict` of the chart with `--set` values; Helm's report on success.
pub fn lint(values: &[(&str, &str)]) -> Result<String, Error> {
    let mut args = vec![
        "lint".to_string(),
        "--strict".to_string(),
        chart_dir().display().to_string(),
    ];
    for (k, v) in values {
        args.extend(["--set".to_string(), format!("{k}={v}")]);
    }
    run_helm(&args)
}

/// What `helm template` printed: the YAML stream and its objects in order.
#[derive(Clone, Debug)]
pub struct Manifest {
    /// The multi-document YAML as Helm printed it (what `kubectl apply -f -` takes).
    pub yaml: String,
    /// Every object (empty documents dropped).
    pub objects: Vec<Value>,
}

impl Manifest {
    fn parse(yaml: String) -> Result<Self, Error> {
        let mut objects = Vec::new();
        for doc in serde_norway::Deserializer::from_str(&yaml) {
            let v: Value = serde::Deserialize::deserialize(doc).map_err(|e| Error::Yaml(e.to_string()))?;
            if !v.is_null() {
                objects.push(v);
            }
        }
        Ok(Self { yaml, objects })
    }

    /// `(kind, name)` of every object.
    pub fn names(&self) -> BTreeSet<(String, String)> {
        self.objects
            .iter()
            .map(|o| {
                (
                    o["kind"].as_str().unwrap_or_default().to_string(),
                    o["metadata"]["name"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    }

    /// The object `kind`/`name`, if rendered.
    pub fn get(&self, kind: &str, name: &str) -> Option<&Value> {
        self.objects
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
    }

    /// The object `kind`/`name`.
    ///
    /// # Panics
    ///
    /// When it was not rendered (the message lists what was).
    pub fn object(&self, kind: &str, name: &str) -> &Value {
        self.get(kind, name)
            .unwrap_or_else(|| panic!("no {kind} {name} rendered; rendered: {:?}", self.names()))
    }

    /// The container `name` (or init container) of the pod template of `kind`/`object`.
    ///
    /// # Panics
    ///
    /// When there is none.
    pub fn container(&self, kind: &str, object: &str, name: &str) -> &Value {
        let spec = &self.object(kind, object)["spec"]["template"]["spec"];
        ["containers", "initContainers"]
            .iter()
            .filter_map(|k| spec[k].as_array())
            .flatten()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("{kind} {object} has no container {name}: {spec}"))
    }

    /// The `args` (or `command`, `field`) of a container, as strings.
    pub fn strings(container: &Value, field: &str) -> Vec<String> {
        container[field]
            .as_array()
            .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect())
            .unwrap_or_default()
    }
}

/// A documented combination of values and what it renders, relative to the defaults
/// ([`DEFAULT_OBJECTS`]).
#[derive(Clone, Copy, Debug)]
pub struct Mode {
    /// Short name (a namespace is made of it: lowercase and dashes).
    pub name: &'static str,
    /// `--set` pairs.
    pub values: &'static [(&'static str, &'static str)],
    /// Values files of the chart (relative to it), given before the `--set` pairs.
    pub files: &'static [&'static str],
    /// `(kind, name)` rendered besides the defaults'.
    pub adds: &'static [(&'static str, &'static str)],
    /// `(kind, name)` of the defaults' not rendered.
    pub drops: &'static [(&'static str, &'static str)],
}

impl Mode {
    /// The `(kind, name)` set this mode promises.
    pub fn objects(&self) -> BTreeSet<(String, String)> {
        let own = |l: &[(&str, &str)]| -> BTreeSet<(String, String)> {
            l.iter()
                .map(|(k, n)| ((*k).to_string(), (*n).to_string()))
                .collect()
        };
        let drops = own(self.drops);
        own(DEFAULT_OBJECTS)
            .difference(&drops)
            .cloned()
            .chain(own(self.adds))
            .collect()
    }

    /// Its render into `namespace`.
    pub fn render(&self, namespace: &str) -> Render {
        let r = self
            .files
            .iter()
            .fold(Render::new(namespace), |r, f| r.values_file(&chart_dir().join(f)));
        r.values(self.values)
    }
}

/// What the defaults render: the API server (self-signed TLS, the server registers the
/// APIService, the embedded store on a PVC), its RBAC, the tenant roles and the agent.
pub const DEFAULT_OBJECTS: &[(&str, &str)] = &[
    ("ServiceAccount", "cozyplane-apiserver"),
    ("ServiceAccount", "cozyplane-agent"),
    ("Service", "cozyplane-apiserver"),
    ("Deployment", "cozyplane-apiserver"),
    ("PersistentVolumeClaim", "cozyplane-apiserver-data"),
    ("ClusterRole", "cozyplane-apiserver"),
    ("ClusterRoleBinding", "cozyplane-apiserver"),
    ("ClusterRoleBinding", "cozyplane-apiserver:system:auth-delegator"),
    (
        "RoleBinding",
        "cozyplane-apiserver:extension-apiserver-authentication-reader",
    ),
    ("ClusterRole", "cozyplane-tenant-edit"),
    ("ClusterRole", "cozyplane-tenant-view"),
    ("DaemonSet", "cozyplane-agent"),
    ("ConfigMap", "cozyplane-cni"),
    ("ClusterRole", "cozyplane-agent"),
    ("ClusterRoleBinding", "cozyplane-agent"),
];

const CERTIFICATE: (&str, &str) = ("Certificate", "cozyplane-apiserver");
const APISERVICE: (&str, &str) = ("APIService", "v1alpha1.sdn.cozystack.io");
const ISSUER: [(&str, &str); 3] = [
    ("tls.mode", "cert-manager"),
    ("tls.certManager.issuerRef.kind", "ClusterIssuer"),
    ("tls.certManager.issuerRef.name", "cluster-ca"),
];

/// A `caBundle` value for [`MODES`]: base64, as the field wants; the dry-run checks its type,
/// not that it holds a certificate.
pub const CA_BUNDLE: &str = "Q0EgYnVuZGxlIG9mIHRoZSBkcnktcnVu";

/// A digest for the image modes.
pub const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// Every documented mode (docs/install.md, values.yaml): the TLS modes with each
/// `apiService.managedBy` they allow, the two stores, the agent's tunnel options, DNS, the
/// cluster domain, masquerade, the Service proxy off (the conflist then chains `portmap`),
/// the agent's extra flags (NodePort addresses among them), the agent off, the tenant roles
/// off, image digests.
pub const MODES: &[Mode] = &[
    Mode {
        name: "defaults",
        files: &[],
        values: &[],
        adds: &[],
        drops: &[],
    },
    Mode {
        name: "tls-cert-manager",
        files: &[],
        values: &ISSUER,
        adds: &[CERTIFICATE],
        drops: &[],
    },
    Mode {
        name: "tls-cert-manager-apiservice-chart",
        files: &[],
        values: &[ISSUER[0], ISSUER[1], ISSUER[2], ("apiService.managedBy", "chart")],
        adds: &[CERTIFICATE, APISERVICE],
        drops: &[],
    },
    Mode {
        name: "tls-secret",
        files: &[],
        values: &[("tls.mode", "secret"), ("tls.secretName", "cozyplane-serving")],
        adds: &[],
        drops: &[],
    },
    Mode {
        name: "tls-secret-apiservice-chart",
        files: &[],
        values: &[
            ("tls.mode", "secret"),
            ("tls.secretName", "cozyplane-serving"),
            ("apiService.managedBy", "chart"),
            ("apiService.caBundle", CA_BUNDLE),
        ],
        adds: &[APISERVICE],
        drops: &[],
    },
    Mode {
        name: "storage-etcd",
        files: &[],
        values: &[
            (
                "storage.etcdServers",
                "{https://etcd-0.etcd:2379,https://etcd-1.etcd:2379}",
            ),
            ("storage.etcdSecret", "cozyplane-etcd"),
            ("apiserver.replicas", "2"),
            ISSUER[0],
            ISSUER[1],
            ISSUER[2],
        ],
        adds: &[CERTIFICATE],
        drops: &[("PersistentVolumeClaim", "cozyplane-apiserver-data")],
    },
    Mode {
        name: "storage-embedded-ephemeral",
        files: &[],
        values: &[("storage.persistence.enabled", "false")],
        adds: &[],
        drops: &[("PersistentVolumeClaim", "cozyplane-apiserver-data")],
    },
    Mode {
        name: "tunnel-groups-off",
        files: &[],
        values: &[("agent.tunnelGroups", "false")],
        adds: &[],
        drops: &[],
    },
    Mode {
        name: "dns-off",
        files: &[],
        values: &[("agent.dns.enabled", "false")],
        adds: &[],
        drops: &[],
    },
    Mode {
        name: "cluster-domain-cozy-local",
        files: &[],
        values: &[("clusterDomain", "cozy.local"), ISSUER[0], ISSUER[1], ISSUER[2]],
        adds: &[CERTIFICATE],
        drops: &[],
    },
    Mode {
        name: "masquerade-off",
        files: &[],
        values: &[("agent.masquerade", "off")],
        adds: &[],
        drops: &[],
    },
    Mode {
        name: "kube-proxy-kept",
        files: &[],
        values: &[("agent.kubeProxyReplacement", "false")],
        adds: &[],
        drops: &[],
    },
    Mode {
        name: "agent-extras",
        files: &[],
        values: &[
            ("agent.internalCIDRs", "{169.254.20.10/32,10.10.0.0/16}"),
            ("agent.nodePortAddresses", "{192.168.0.0/16,fd00::/64}"),
            ("agent.hostDevices", "{eth1,vlan20}"),
            ("agent.metricsPort", "0"),
            (
                "agent.extraArgs",
                "{--underlay-dev=bond0,--fabric-block=10.244.3.0/24}",
            ),
        ],
        adds: &[],
        drops: &[],
    },
    Mode {
        name: "image-digests",
        files: &[],
        values: &[("image.apiserver.digest", DIGEST), ("image.agent.digest", DIGEST)],
        adds: &[],
        drops: &[],
    },
    Mode {
        name: "agent-disabled",
        files: &[],
        values: &[("agent.enabled", "false")],
        adds: &[],
        drops: &[
            ("ServiceAccount", "cozyplane-agent"),
            ("DaemonSet", "cozyplane-agent"),
            ("ConfigMap", "cozyplane-cni"),
            ("ClusterRole", "cozyplane-agent"),
            ("ClusterRoleBinding", "cozyplane-agent"),
        ],
    },
    Mode {
        name: "cozystack",
        files: &["values-cozystack.yaml"],
        values: &[("_cluster.cluster-domain", "cozy.local")],
        adds: &[],
        drops: &[],
    },
    Mode {
        name: "tenant-roles-off",
        files: &[],
        values: &[("rbac.tenantRoles", "false")],
        adds: &[],
        drops: &[
            ("ClusterRole", "cozyplane-tenant-edit"),
            ("ClusterRole", "cozyplane-tenant-view"),
        ],
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_names_are_unique_namespace_names() {
        let mut seen = BTreeSet::new();
        for m in MODES {
            assert!(seen.insert(m.name), "{} twice", m.name);
            assert!(
                m.name.len() <= 50
                    && m.name
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
                "{}",
                m.name
            );
        }
    }

    #[test]
    fn a_mode_drops_only_what_the_defaults_render() {
        let defaults = MODES[0].objects();
        for m in MODES {
            for (k, n) in m.drops {
                assert!(
                    defaults.contains(&((*k).to_string(), (*n).to_string())),
                    "{}: drops {k} {n}",
                    m.name
                );
            }
        }
    }
}
