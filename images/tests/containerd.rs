//! The images as a node gets them: `cozyplane-images build` from the debug binaries this test
//! run already has (`make test-unit` builds them first), each archive imported into a
//! private containerd with `ctr -n k8s.io images import`, and containers started by
//! containerd and runc from the images' own config (user, environment, entrypoint), the
//! entrypoint given `--version`/`--help` the way a pod's `args` are.
//!
//! Needs root, containerd and runc (Debian's, `make deps` installs them); fails, never
//! skips, without them. The containerd has its own root, state, socket and opt directory in
//! a temporary directory and no CRI plugin, so nothing in it can pull from a registry;
//! it is stopped by its PID and its mounts are removed even when an assertion fails.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use cozyplane_images::oci;
use cozyplane_images::report::{Built, Report};

const VERSION: &str = env!("CARGO_PKG_VERSION");

fn require_root() {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let euid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .expect("Uid line");
    assert_eq!(
        euid, "0",
        "the test runs containerd and runc; it needs root and does not skip"
    );
}

fn require_tools() {
    for tool in ["containerd", "ctr", "runc"] {
        let ok = Command::new(tool)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        assert!(
            ok,
            "{tool} is missing: `make deps` installs it (Debian packages containerd, runc)"
        );
    }
}

/// target/debug, where `make test-unit` (and `cargo build`) put the binaries: this test's
/// executable is target/debug/deps/containerd-<hash>.
fn debug_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(Path::parent).unwrap().to_path_buf();
    for bin in ["cozyplane-apiserver", "cozyplane-agent", "cozyplane-cni"] {
        assert!(
            dir.join(bin).is_file(),
            "{}/{bin} is missing: `make test-unit` builds it (cargo build --bin cozyplane-apiserver \
             --bin cozyplane-agent; cargo build --manifest-path cni/bin/Cargo.toml)",
            dir.display()
        );
    }
    dir
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Runs the builder as `make images` does, into `out`; its images.json.
fn build(out: &Path, images: &[&str]) -> Report {
    let o = Command::new(env!("CARGO_BIN_EXE_cozyplane-images"))
        .arg("build")
        .arg("--repo")
        .arg(repo())
        .arg("--bin-dir")
        .arg(debug_dir())
        .arg("--out")
        .arg(out)
        .args(images)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "cozyplane-images build: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    println!("{}", String::from_utf8_lossy(&o.stdout));
    serde_json::from_slice(&std::fs::read(out.join("images.json")).unwrap()).unwrap()
}

/// A containerd of the test's own; stopped and cleaned up on drop.
struct Containerd {
    child: Child,
    dir: tempfile::TempDir,
    started: Vec<String>,
}

impl Containerd {
    fn start() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("cozyimg")
            .tempdir_in("/tmp")
            .unwrap();
        let d = dir.path();
        // No CRI plugin: it is the only part of containerd that pulls on its own, and ctr
        // pulls only when told to. The opt plugin would otherwise create /opt/containerd.
        let config = format!(
            "version = 2\nroot = \"{root}\"\nstate = \"{state}\"\n\
             disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n\
             [grpc]\n  address = \"{sock}\"\n\
             [plugins.\"io.containerd.internal.v1.opt\"]\n  path = \"{opt}\"\n",
            root = d.join("root").display(),
            state = d.join("state").display(),
            sock = d.join("sock").display(),
            opt = d.join("opt").display(),
        );
        std::fs::write(d.join("config.toml"), config).unwrap();
        let log = std::fs::File::create(d.join("containerd.log")).unwrap();
        let child = Command::new("containerd")
            .arg("--config")
            .arg(d.join("config.toml"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let c = Self {
            child,
            dir,
            started: Vec::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if c.ctr(&["version"]).status.success() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "containerd did not answer in 20 s:\n{}",
                c.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        c
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("containerd.log")).unwrap_or_default()
    }

    fn ctr(&self, args: &[&str]) -> Output {
        Command::new("ctr")
            .arg("--address")
            .arg(self.dir.path().join("sock"))
            .args(["--namespace", "k8s.io"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// `ctr run --rm <extra…> <reference> <id> <argv…>`: a container from the image's config
    /// (rootfs, user, environment, working directory) running `argv`; its stdout, or a panic
    /// with everything it said. ctr passes no EOF to a container's stdin, so a program that
    /// reads stdin is run through the image's shell with `</dev/null`.
    fn run(&mut self, reference: &str, extra: &[&str], argv: &[&str]) -> String {
        let id = format!("cozyimg-{}-{}", std::process::id(), self.started.len());
        self.started.push(id.clone());
        let mut child = Command::new("ctr")
            .arg("--address")
            .arg(self.dir.path().join("sock"))
            .args(["--namespace", "k8s.io", "run", "--rm"])
            .args(extra)
            .args([reference, &id])
            .args(argv)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("{argv:?} in {reference} did not finish in 60 s");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut out = String::new();
        let mut err = String::new();
        child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
        child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        assert!(
            status.success(),
            "{argv:?} in {reference}: {status}\nstdout: {out}\nstderr: {err}"
        );
        out
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        // Containers of a failed run may still exist: kill and delete them while containerd
        // is up, so their shims exit.
        for id in self.started.clone() {
            let _ = self.ctr(&["tasks", "kill", "--signal", "SIGKILL", &id]);
            let _ = self.ctr(&["tasks", "delete", "--force", &id]);
            let _ = self.ctr(&["containers", "delete", &id]);
        }
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline && matches!(self.child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Whatever containerd left mounted under its root (snapshots, rootfs of a container
        // that never ended), deepest first, before the directory is removed.
        let prefix = self.dir.path().display().to_string();
        let mut mounts: Vec<String> = std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split(' ').nth(4).map(str::to_string))
            .filter(|m| m.starts_with(&prefix))
            .collect();
        mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
        for m in mounts {
            let _ = Command::new("umount").args(["-l", &m]).status();
        }
    }
}

fn image<'a>(report: &'a Report, name: &str) -> &'a Built {
    report
        .images
        .iter()
        .find(|b| b.name == name)
        .unwrap_or_else(|| panic!("no {name} in {report:?}"))
}

#[test]
fn images_import_into_containerd_and_run() {
    require_root();
    require_tools();
    let started = Instant::now();
    let out = tempfile::tempdir().unwrap();
    let report = build(out.path(), &[]);
    assert_eq!(report.images.len(), 2, "{report:?}");
    let apiserver = image(&report, "cozyplane-apiserver");
    let agent = image(&report, "cozyplane-agent");

    // The archives are sound and name what images.json says; the entrypoints are the
    // binaries.
    let mut configs = Vec::new();
    for b in [apiserver, agent] {
        assert!(b.reference.ends_with(&format!(":{}", report.tag)), "{b:?}");
        assert!(
            report
                .tag
                .starts_with(&format!("{VERSION}-g{}", &report.revision[..12])),
            "{report:?}"
        );
        let v = oci::verify(&out.path().join(&b.archive)).unwrap();
        assert_eq!(
            (v.digest.as_str(), v.reference.as_str()),
            (b.digest.as_str(), b.reference.as_str())
        );
        let labels = &v.config["config"]["Labels"];
        assert_eq!(
            labels["org.opencontainers.image.revision"],
            report.revision.as_str()
        );
        assert_eq!(labels["org.opencontainers.image.version"], report.tag.as_str());
        configs.push(v.config);
    }
    assert_eq!(
        configs[0]["config"]["Entrypoint"],
        serde_json::json!(["/usr/bin/cozyplane-apiserver"])
    );
    assert_eq!(configs[0]["config"]["User"], "65532:65532");
    assert_eq!(
        configs[1]["config"]["Entrypoint"],
        serde_json::json!(["/usr/bin/cozyplane-agent"])
    );

    // Same inputs, same image: a second build of the same files has the same digest and
    // the same archive, byte for byte.
    let again = tempfile::tempdir().unwrap();
    let second = build(again.path(), &["apiserver"]);
    let apiserver2 = image(&second, "cozyplane-apiserver");
    assert_eq!(
        second.tag, report.tag,
        "HEAD or the work tree changed between the two builds"
    );
    assert_eq!(apiserver2.digest, apiserver.digest);
    assert!(
        std::fs::read(out.path().join(&apiserver.archive)).unwrap()
            == std::fs::read(again.path().join(&apiserver2.archive)).unwrap(),
        "two builds of the same inputs wrote different archives"
    );
    let built = started.elapsed();

    let mut ctd = Containerd::start();
    for b in [apiserver, agent] {
        let archive = out.path().join(&b.archive).display().to_string();
        let o = ctd.ctr(&["images", "import", &archive]);
        assert!(
            o.status.success(),
            "import {archive}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let ls = String::from_utf8_lossy(&ctd.ctr(&["images", "ls"]).stdout).into_owned();
    for b in [apiserver, agent] {
        assert!(
            ls.lines().any(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.first() == Some(&b.reference.as_str()) && f.get(2) == Some(&b.digest.as_str())
            }),
            "{} {} not in ctr images ls:\n{ls}",
            b.reference,
            b.digest
        );
    }

    // The API server: its entrypoint with --version and --help, as uid/gid 65532 (a static
    // busybox bind-mounted from the host asks; the image itself has no tools).
    let a = apiserver.reference.as_str();
    assert_eq!(
        ctd.run(a, &[], &["/usr/bin/cozyplane-apiserver", "--version"]),
        format!("cozyplane-apiserver {VERSION}\n")
    );
    let help = ctd.run(a, &[], &["/usr/bin/cozyplane-apiserver", "--help"]);
    assert!(
        help.contains("Usage: cozyplane-apiserver") && help.contains("--etcd-servers"),
        "{help}"
    );
    let id = ctd.run(
        a,
        &[
            "--mount",
            "type=bind,src=/bin/busybox,dst=/busybox,options=rbind:ro",
        ],
        &["/busybox", "id"],
    );
    assert!(id.starts_with("uid=65532(nonroot) gid=65532(nonroot)"), "{id}");

    // The agent and what it carries.
    let g = agent.reference.as_str();
    assert_eq!(
        ctd.run(g, &[], &["/usr/bin/cozyplane-agent", "--version"]),
        format!("cozyplane-agent {VERSION}\n")
    );
    let help = ctd.run(g, &[], &["/usr/bin/cozyplane-agent", "--help"]);
    assert!(
        help.contains("Usage: cozyplane-agent") && help.contains("--state-dir"),
        "{help}"
    );
    let cni = ctd.run(
        g,
        &[],
        &[
            "/bin/sh",
            "-c",
            "CNI_COMMAND=VERSION /usr/bin/cozyplane-cni </dev/null",
        ],
    );
    let cni: serde_json::Value = serde_json::from_str(&cni).unwrap_or_else(|e| panic!("{cni}: {e}"));
    assert!(
        cni["supportedVersions"]
            .as_array()
            .is_some_and(|v| v.contains(&"1.0.0".into())),
        "{cni}"
    );
    let nft = ctd.run(g, &[], &["nft", "--version"]);
    assert!(nft.starts_with("nftables v"), "{nft}");
    let portmap = ctd.run(
        g,
        &[],
        &[
            "/bin/sh",
            "-c",
            "test -x /usr/lib/cni/portmap && CNI_COMMAND=VERSION /usr/lib/cni/portmap </dev/null",
        ],
    );
    let portmap: serde_json::Value =
        serde_json::from_str(&portmap).unwrap_or_else(|e| panic!("{portmap}: {e}"));
    assert!(portmap["supportedVersions"].is_array(), "{portmap}");
    assert_eq!(ctd.run(g, &[], &["/bin/sh", "-c", "echo ok"]), "ok\n");
    // Every tool charts/cozyplane/files/install-cni.sh runs, as root.
    let tools = "for t in grep sed head mkdir cp chmod mv basename; do command -v $t >/dev/null || exit 1; done; id -u";
    assert_eq!(ctd.run(g, &[], &["/bin/sh", "-c", tools]), "0\n");
    // The SBOM inside is the one written beside the archive.
    let inside = ctd.run(
        g,
        &[],
        &["/bin/sh", "-c", "cat /usr/share/doc/cozyplane/sbom.json"],
    );
    assert_eq!(
        inside.as_bytes(),
        std::fs::read(out.path().join(&agent.sbom)).unwrap()
    );
    let sbom: serde_json::Value = serde_json::from_str(&inside).unwrap();
    assert_eq!(sbom["files"]["/usr/sbin/nft"], "debian:nftables");
    assert_eq!(sbom["files"]["/usr/bin/cozyplane-cni"], "cargo:cozyplane-cni-bin");

    drop(ctd);
    println!(
        "built twice in {built:?}, imported and ran in {:?}",
        started.elapsed() - built
    );
}
