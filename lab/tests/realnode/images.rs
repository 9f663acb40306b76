//! The test images a real node runs, built without a registry by the workspace's image
//! builder (`cozyplane_images`): one uncompressed layer each, written as OCI archives that
//! `ctr -n k8s.io images import` takes.
//!
//! | reference | what is in it |
//! |---|---|
//! | [`PAUSE`] | `/pause`: a static C program compiled here with `gcc -static` that sleeps until SIGTERM or SIGINT and reaps children |
//! | [`BUSYBOX`] | Debian's `busybox-static` as `/bin/busybox` with a link per applet in `/bin` (`sh`, `sleep`, …) and `wget` wrapped (its `-T` segfaults) |
//! | [`AGNHOST`] | the e2e suite's `agnhost` (`KUBE_BIN_DIR/agnhost.xz`) as `/agnhost`, the entrypoint, with the same busybox for a shell and the machine's `curl`, OpenBSD `nc` (as `/usr/bin/nc`) and `dash` (as `/bin/sh`, which, unlike busybox's shell, looks commands up in PATH) with the shared libraries `ldd` names (the upstream suite's networking checks run `sh -c` with `curl` and `nc -u` inside agnhost pods) |

use std::path::{Path, PathBuf};
use std::process::Command;

use cozyplane_images::layer::{Compression, Tree};
use cozyplane_images::oci::{Image, ImageConfig, Platform, RootFs, RunConfig, rfc3339};

/// The sandbox image every node's containerd is configured with.
pub(crate) const PAUSE: &str = "registry.k8s.io/pause:3.10.2";
/// The e2e suite's busybox.
pub(crate) const BUSYBOX: &str = "registry.k8s.io/e2e-test-images/busybox:1.37.0-1";
/// The e2e suite's agnhost.
pub(crate) const AGNHOST: &str = "registry.k8s.io/e2e-test-images/agnhost:2.63.0";

const PAUSE_C: &str = r"#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
static void stop(int sig) { (void)sig; _exit(0); }
static void reap(int sig) { (void)sig; while (waitpid(-1, 0, WNOHANG) > 0) {} }
int main(void) {
	signal(SIGTERM, stop);
	signal(SIGINT, stop);
	signal(SIGCHLD, reap);
	for (;;) pause();
}
";

/// The archives, in `dir`: (reference, path).
pub(crate) fn build(dir: &Path) -> Vec<(&'static str, PathBuf)> {
    let stage = dir.join("stage");
    // pause
    let pause_dir = stage.join("pause");
    std::fs::create_dir_all(&pause_dir).expect("stage dir");
    let src = stage.join("pause.c");
    std::fs::write(&src, PAUSE_C).expect("pause.c");
    let out = Command::new("gcc")
        .args(["-static", "-Os", "-s", "-o"])
        .arg(pause_dir.join("pause"))
        .arg(&src)
        .output()
        .expect("gcc runs");
    assert!(
        out.status.success(),
        "gcc -static pause.c: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // busybox: the binary and a link per applet.
    let bb = stage.join("busybox");
    busybox_tree(&bb);
    let agnhost = cozyplane_conformance::realkube::binary("agnhost")
        .unwrap_or_else(|e| panic!("agnhost from KUBE_BIN_DIR: {e}"));

    let mut out = Vec::new();
    let mut tree = Tree::default();
    tree.copy(&pause_dir, "/").expect("pause layer");
    out.push((PAUSE, write(dir, PAUSE, &tree, run(&["/pause"], None))));
    let mut tree = Tree::default();
    tree.copy(&bb, "/").expect("busybox layer");
    out.push((BUSYBOX, write(dir, BUSYBOX, &tree, run(&[], Some(&["sh"])))));
    let mut tree = Tree::default();
    tree.copy(&bb, "/").expect("busybox layer");
    tree.copy(&agnhost, "/agnhost").expect("agnhost layer");
    with_libs(&mut tree, Path::new("/usr/bin/curl"), "/usr/bin/curl");
    // busybox's `nc` has no `-u`, which the suite's UDP checks use; `/usr/bin` comes first
    // in PATH. busybox's own shell runs its applets before PATH (Debian builds it
    // standalone), so `/bin/sh` is dash, which looks commands up in PATH.
    with_libs(&mut tree, Path::new("/usr/bin/nc.openbsd"), "/usr/bin/nc");
    with_libs(&mut tree, Path::new("/usr/bin/dash"), "/bin/sh");
    out.push((
        AGNHOST,
        write(dir, AGNHOST, &tree, run(&["/agnhost"], Some(&["pause"]))),
    ));
    out
}

/// `/bin/wget`: busybox's applet with `-T <s>` / `--timeout=<s>` turned into busybox's
/// `timeout <s>` around it (positional parameters rebuilt in place: POSIX sh has no arrays).
const WGET: &str = r#"#!/bin/sh
t=
n=$#
i=0
while [ "$i" -lt "$n" ]; do
  a=$1; shift; i=$((i + 1))
  case "$a" in
    -T) t=$1; shift; i=$((i + 1)) ;;
    -T*) t=${a#-T} ;;
    --timeout=*) t=${a#--timeout=} ;;
    *) set -- "$@" "$a" ;;
  esac
done
if [ -n "$t" ]; then exec /bin/busybox timeout "$t" /bin/busybox wget "$@"; fi
exec /bin/busybox wget "$@"
"#;

/// `/bin/busybox`, `/bin/<applet>` → `busybox`, `/bin/wget` ([`WGET`]), `/tmp` (1777), `/etc/passwd` and `/etc/group`
/// with root and nobody.
fn busybox_tree(root: &Path) {
    let bin = root.join("bin");
    std::fs::create_dir_all(&bin).expect("stage bin");
    std::fs::copy("/bin/busybox", bin.join("busybox"))
        .expect("/bin/busybox (Debian's busybox-static: make deps installs it)");
    let list = Command::new("/bin/busybox")
        .arg("--list")
        .output()
        .expect("busybox --list");
    for applet in String::from_utf8_lossy(&list.stdout).split_whitespace() {
        if applet != "busybox" {
            std::os::unix::fs::symlink("busybox", bin.join(applet)).expect("applet link");
        }
    }
    // Debian's busybox-static 1.35 `wget` segfaults whenever it is given `-T` (a timeout),
    // which the suite's Service checks pass (`wget -q -O - -T 1 …`): the applet is wrapped to
    // run under busybox's `timeout` instead.
    std::fs::remove_file(bin.join("wget")).expect("the wget applet link");
    std::fs::write(bin.join("wget"), WGET).expect("stage wget");
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(bin.join("wget"), std::fs::Permissions::from_mode(0o755)).expect("chmod wget");
    let tmp = root.join("tmp");
    std::fs::create_dir_all(&tmp).expect("stage tmp");
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777)).expect("chmod tmp");
    let etc = root.join("etc");
    std::fs::create_dir_all(&etc).expect("stage etc");
    std::fs::write(
        etc.join("passwd"),
        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n",
    )
    .expect("passwd");
    std::fs::write(etc.join("group"), "root:x:0:\nnogroup:x:65534:\n").expect("group");
}

/// `bin` as `dest` with every shared library `ldd` lists for it (and the loader), each at
/// the path `ldd` names, with the content of the file that path resolves to.
fn with_libs(tree: &mut Tree, bin: &Path, dest: &str) {
    tree.copy(bin, dest)
        .unwrap_or_else(|e| panic!("{}: {e} (make deps installs it)", bin.display()));
    let out = Command::new("ldd").arg(bin).output().expect("ldd runs");
    assert!(out.status.success(), "ldd {}", bin.display());
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        // `libz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x…)` or `/lib64/ld-linux-x86-64.so.2 (0x…)`
        let path = line
            .split("=>")
            .last()
            .and_then(|r| r.split_whitespace().next())
            .filter(|p| p.starts_with('/'));
        let Some(path) = path else { continue };
        let real = std::fs::canonicalize(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        tree.copy(&real, path)
            .unwrap_or_else(|e| panic!("library {path} of {}: {e}", bin.display()));
    }
}

fn run(entrypoint: &[&str], cmd: Option<&[&str]>) -> RunConfig {
    let v = |a: &[&str]| a.iter().map(|s| (*s).to_string()).collect::<Vec<_>>();
    RunConfig {
        env: vec!["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into()],
        entrypoint: (!entrypoint.is_empty()).then(|| v(entrypoint)),
        cmd: cmd.map(v),
        ..RunConfig::default()
    }
}

/// The archive of one layer `tree` run as `config`, tagged `reference`, in `dir`.
fn write(dir: &Path, reference: &str, tree: &Tree, config: RunConfig) -> PathBuf {
    let layer = tree.write(0, Compression::None).expect("layer");
    let platform = Platform::host();
    let image = Image::new(
        ImageConfig {
            created: rfc3339(0),
            architecture: platform.architecture,
            os: platform.os,
            config,
            rootfs: RootFs {
                kind: "layers".into(),
                diff_ids: Vec::new(),
            },
            history: Vec::new(),
        },
        vec![layer],
    );
    let name: String = reference
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let path = dir.join(format!("{name}.tar"));
    image.write_archive(reference, 0, &path).expect("write archive");
    path
}
