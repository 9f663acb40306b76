//! What a real node changes on the host and must give back: the machine-wide sysctls a
//! kubelet sets, the cgroups it and containerd make (every v1 hierarchy and the cgroup2 one),
//! and the sockets of the shims containerd started.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The machine-wide sysctls a kubelet with `protectKernelDefaults: false` sets (its
/// `setupKernelTunables`), under `/proc/sys`.
pub(crate) const KUBELET_SYSCTLS: &[&str] = &[
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
];

/// Values of [`KUBELET_SYSCTLS`], written back on drop.
pub(crate) struct Sysctls(Vec<(PathBuf, String)>);

impl Sysctls {
    /// Reads them now.
    pub(crate) fn save() -> Self {
        Self(
            KUBELET_SYSCTLS
                .iter()
                .filter_map(|k| {
                    let p = Path::new("/proc/sys").join(k);
                    Some((p.clone(), std::fs::read_to_string(&p).ok()?.trim().to_string()))
                })
                .collect(),
        )
    }
}

impl Drop for Sysctls {
    fn drop(&mut self) {
        for (p, v) in &self.0 {
            if std::fs::read_to_string(p).is_ok_and(|now| now.trim() != v)
                && let Err(e) = std::fs::write(p, v)
            {
                eprintln!("restoring {} to {v}: {e}", p.display());
            }
        }
    }
}

/// Mount points of the cgroup hierarchies of type `fstype` (`cgroup` for v1, `cgroup2`).
pub(crate) fn hierarchies(fstype: &str) -> Vec<PathBuf> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .expect("mountinfo")
        .lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let mount = left.split(' ').nth(4)?;
            (right.split(' ').next()? == fstype).then(|| PathBuf::from(mount))
        })
        .collect()
}

/// One cgroup path in every v1 hierarchy (and, once runc has made it there, in the hybrid
/// layout's cgroup2 hierarchy).
pub(crate) struct Cgroup {
    rel: String,
    /// The v1 hierarchies, where it is created.
    mounts: Vec<PathBuf>,
    /// Those and the cgroup2 one, where it is removed.
    all: Vec<PathBuf>,
}

impl Cgroup {
    pub(crate) fn create(rel: &str) -> Self {
        let mounts = hierarchies("cgroup");
        assert!(
            !mounts.is_empty(),
            "no cgroup v1 hierarchy: the real-node lab runs kubelets on cgroupfs v1"
        );
        let mut all = mounts.clone();
        all.extend(hierarchies("cgroup2"));
        let cg = Self {
            rel: rel.trim_matches('/').to_string(),
            mounts,
            all,
        };
        for m in &cg.mounts {
            let mut dir = m.clone();
            for part in cg.rel.split('/').chain(["runtime"]) {
                let parent = dir.clone();
                dir.push(part);
                if !dir.exists() {
                    std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
                }
                for f in ["cpuset.cpus", "cpuset.mems"] {
                    if let Ok(v) = std::fs::read_to_string(parent.join(f)) {
                        let _ = std::fs::write(dir.join(f), v.trim());
                    }
                }
            }
        }
        cg
    }

    /// The kubelet's `cgroupRoot`.
    pub(crate) fn root(&self) -> String {
        format!("/{}", self.rel)
    }

    /// `cgroup.procs` of `runtime/` in every hierarchy.
    pub(crate) fn runtime_procs(&self) -> Vec<PathBuf> {
        self.mounts
            .iter()
            .map(|m| m.join(&self.rel).join("runtime/cgroup.procs"))
            .collect()
    }

    /// Every directory of the cgroup, deepest first.
    fn dirs(&self) -> Vec<PathBuf> {
        fn walk(d: &Path, out: &mut Vec<PathBuf>) {
            if let Ok(rd) = std::fs::read_dir(d) {
                for e in rd.flatten() {
                    if e.file_type().is_ok_and(|t| t.is_dir()) {
                        walk(&e.path(), out);
                    }
                }
            }
            out.push(d.to_path_buf());
        }
        let mut out = Vec::new();
        for m in &self.all {
            let top = m.join(&self.rel);
            if top.exists() {
                walk(&top, &mut out);
            }
        }
        out
    }

    /// The PIDs in the cgroup and below.
    pub(crate) fn pids(&self) -> HashSet<i32> {
        let mut pids = HashSet::new();
        for d in self.dirs() {
            if let Ok(t) = std::fs::read_to_string(d.join("cgroup.procs")) {
                pids.extend(t.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
            }
        }
        pids
    }

    /// SIGKILLs every process in the cgroup by PID until none is left, then removes it.
    pub(crate) fn destroy(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let dirs = self.dirs();
            if dirs.is_empty() {
                return;
            }
            let pids = self.pids();
            for pid in &pids {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(*pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            if pids.is_empty() {
                for d in &dirs {
                    let _ = std::fs::remove_dir(d);
                }
            }
            if Instant::now() > deadline {
                eprintln!("cgroup {} not removed: {dirs:?}", self.rel);
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The sockets of the containerd shims among `pids`: containerd 1.6 names one
/// `/run/containerd/s/<sha256 of "<containerd address>/<namespace>/<id>">` (its
/// `shim.SocketAddress`), from the shim's `-address`, `-namespace` and `-id`. A shim that
/// is SIGKILLed leaves it behind.
pub(crate) fn shim_sockets(pids: &HashSet<i32>) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for pid in pids {
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if !args
            .first()
            .is_some_and(|a| a.ends_with("containerd-shim-runc-v2"))
        {
            continue;
        }
        let flag = |f: &str| {
            args.iter()
                .position(|a| a == f)
                .and_then(|i| args.get(i + 1).cloned())
        };
        let (Some(address), Some(ns), Some(id)) = (flag("-address"), flag("-namespace"), flag("-id")) else {
            continue;
        };
        let Ok(mut child) = Command::new("sha256sum")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
        else {
            continue;
        };
        if let Some(mut stdin) = child.stdin.take() {
            use std::io::Write as _;
            let _ = stdin.write_all(format!("{address}/{ns}/{id}").as_bytes());
        }
        if let Ok(o) = child.wait_with_output()
            && let Some(hex) = String::from_utf8_lossy(&o.stdout).split_whitespace().next()
        {
            out.push(Path::new("/run/containerd/s").join(hex));
        }
    }
    out
}
