//! Fills a build context with an image's root filesystem: `<context>/rootfs`, which the
//! image's Containerfile copies with `COPY rootfs/ /`.
//!
//! Besides the files of the [`Plan`], the rootfs gets the shared libraries they link (at the
//! paths this host's loader found them, so the loader finds them there in the image too),
//! /etc/passwd and /etc/group (root and `nonroot`, 65532), /etc/nsswitch.conf, a
//! world-writable sticky /tmp, and later the SBOM ([`SBOM_PATH`]). Modes are set
//! explicitly, never left to the umask: the image must not depend on who staged it.
//!
//! Our binaries go in without their debug sections (`objcopy --strip-debug`): the release
//! profile's line tables, and the full debug info some C dependencies bring, were 80 % of
//! each release binary (the API server: 163 MiB, 31 MiB without). The symbol table stays,
//! so a panic's backtrace still names its functions; the unstripped binaries stay in
//! target/release for a debugger.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use crate::plan::{Plan, Source};

/// Where the SBOM lives inside every image (the `io.cozystack.cozyplane.sbom` label says
/// so too).
pub const SBOM_PATH: &str = "/usr/share/doc/cozyplane/sbom.json";

/// The uid and gid of the unprivileged user (distroless's `nonroot`).
pub const NONROOT: u32 = 65532;

const PASSWD: &str = "root:x:0:0:root:/root:/sbin/nologin\n\
                      nonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin\n";
const GROUP: &str = "root:x:0:\nnonroot:x:65532:\n";
// Without this file glibc asks DNS before /etc/hosts (its built-in default), so names the
// kubelet writes into the pod's /etc/hosts would be looked up remotely first.
const NSSWITCH: &str = "passwd: files\ngroup: files\nhosts: files dns\n";

/// Why staging failed.
#[derive(Debug, thiserror::Error)]
pub enum StageError {
    /// A file could not be read, copied or created.
    #[error("{path}: {source}")]
    Io {
        /// The file concerned.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// A binary of this repository has not been built.
    #[error("{0} is missing: build it first (`make images` builds the release binaries)")]
    NotBuilt(PathBuf),
    /// A host file is missing.
    #[error("{path} is missing: install the Debian package that provides it ({hint})")]
    NotInstalled {
        /// The file.
        path: PathBuf,
        /// Which package the Makefile's DEPS list installs it with.
        hint: &'static str,
    },
    /// Its libraries could not be listed.
    #[error(transparent)]
    Libs(#[from] crate::libs::LibsError),
    /// `objcopy --strip-debug` failed.
    #[error("objcopy --strip-debug {path}: {message} (binutils)")]
    Strip {
        /// The binary.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> StageError + '_ {
    move |source| StageError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Where a staged file came from (the SBOM's input).
#[derive(Debug, Clone, PartialEq)]
pub enum Origin {
    /// A binary of this repository.
    Built {
        /// Its package.
        package: &'static str,
        /// Its workspace's Cargo.toml, relative to the repository root.
        manifest: &'static str,
    },
    /// A file of this host, at this path.
    Host(PathBuf),
    /// A symbolic link to this target.
    Link(String),
    /// Written by the stage itself (passwd, group, nsswitch.conf, the SBOM).
    Generated,
}

/// A staged root filesystem.
#[derive(Debug)]
pub struct Staged {
    /// `<context>/rootfs`.
    pub rootfs: PathBuf,
    /// Every file and link in it (not directories), by path inside the image.
    pub files: BTreeMap<String, Origin>,
}

impl Staged {
    /// Writes a generated file at `path` (absolute, inside the image), mode 0644.
    pub fn write(&mut self, path: &str, contents: &[u8]) -> Result<(), StageError> {
        let dst = self.host_path(path)?;
        fs::write(&dst, contents).map_err(io_err(&dst))?;
        fs::set_permissions(&dst, fs::Permissions::from_mode(0o644)).map_err(io_err(&dst))?;
        self.files.insert(path.to_string(), Origin::Generated);
        Ok(())
    }

    /// The host path of `path` inside the rootfs, its parent directories created (0755).
    fn host_path(&self, path: &str) -> Result<PathBuf, StageError> {
        let rel = path.trim_start_matches('/');
        let mut dir = self.rootfs.clone();
        let parts: Vec<&str> = rel.split('/').collect();
        for part in &parts[..parts.len() - 1] {
            dir.push(part);
            if !dir.is_dir() {
                fs::create_dir(&dir).map_err(io_err(&dir))?;
                fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).map_err(io_err(&dir))?;
            }
        }
        Ok(self.rootfs.join(rel))
    }

    fn copy(&mut self, from: &Path, path: &str, mode: u32, origin: Origin) -> Result<(), StageError> {
        let dst = self.host_path(path)?;
        if matches!(origin, Origin::Built { .. }) {
            strip_debug(from, &dst)?;
        } else {
            // fs::copy follows links: a library reached through its soname link is stored
            // as a file under the name the loader asks for.
            fs::copy(from, &dst).map_err(io_err(from))?;
        }
        fs::set_permissions(&dst, fs::Permissions::from_mode(mode)).map_err(io_err(&dst))?;
        self.files.insert(path.to_string(), origin);
        Ok(())
    }
}

/// Stages `plan` into `context` (its `rootfs` replaced), taking this repository's binaries
/// from `bin_dir`.
pub fn stage(plan: &Plan, bin_dir: &Path, context: &Path) -> Result<Staged, StageError> {
    let rootfs = context.join("rootfs");
    if rootfs.exists() {
        fs::remove_dir_all(&rootfs).map_err(io_err(&rootfs))?;
    }
    fs::create_dir_all(&rootfs).map_err(io_err(&rootfs))?;
    fs::set_permissions(&rootfs, fs::Permissions::from_mode(0o755)).map_err(io_err(&rootfs))?;
    let mut staged = Staged {
        rootfs,
        files: BTreeMap::new(),
    };

    let mut with_libs = Vec::new();
    for file in plan.files {
        let (from, mode, origin) = match file.source {
            Source::Built {
                bin,
                package,
                manifest,
            } => {
                let from = bin_dir.join(bin);
                if !from.is_file() {
                    return Err(StageError::NotBuilt(from));
                }
                (from, 0o755, Origin::Built { package, manifest })
            }
            Source::Host(p) => {
                let from = PathBuf::from(p);
                let meta = fs::metadata(&from).map_err(|_| StageError::NotInstalled {
                    path: from.clone(),
                    hint: hint(p),
                })?;
                // Keep the package's executable bits, never setuid or group/other write.
                (
                    from.clone(),
                    meta.permissions().mode() & 0o755,
                    Origin::Host(from),
                )
            }
        };
        staged.copy(&from, file.path, mode, origin)?;
        with_libs.push(from);
    }
    for bin in &with_libs {
        for lib in crate::libs::needed(bin)? {
            let path = lib.display().to_string();
            if staged.files.contains_key(&path) {
                continue;
            }
            let mode = fs::metadata(&lib).map_err(io_err(&lib))?.permissions().mode() & 0o755;
            staged.copy(&lib, &path, mode, Origin::Host(lib.clone()))?;
        }
    }
    for (path, target) in plan.links {
        let dst = staged.host_path(path)?;
        std::os::unix::fs::symlink(target, &dst).map_err(io_err(&dst))?;
        staged
            .files
            .insert(path.to_string(), Origin::Link(target.to_string()));
    }
    staged.write("/etc/passwd", PASSWD.as_bytes())?;
    staged.write("/etc/group", GROUP.as_bytes())?;
    staged.write("/etc/nsswitch.conf", NSSWITCH.as_bytes())?;
    let tmp = staged.rootfs.join("tmp");
    fs::create_dir(&tmp).map_err(io_err(&tmp))?;
    fs::set_permissions(&tmp, fs::Permissions::from_mode(0o1777)).map_err(io_err(&tmp))?;
    Ok(staged)
}

fn strip_debug(from: &Path, to: &Path) -> Result<(), StageError> {
    let err = |message: String| StageError::Strip {
        path: from.to_path_buf(),
        message,
    };
    let out = std::process::Command::new("objcopy")
        .arg("--strip-debug")
        .arg(from)
        .arg(to)
        .output()
        .map_err(|e| err(e.to_string()))?;
    if !out.status.success() {
        return Err(err(String::from_utf8_lossy(&out.stderr).trim().to_string()));
    }
    Ok(())
}

fn hint(path: &str) -> &'static str {
    match path {
        "/usr/sbin/nft" => "nftables",
        "/usr/lib/cni/portmap" => "containernetworking-plugins",
        "/bin/busybox" => "busybox-static",
        _ => "see the Makefile's DEPS",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::File;

    #[test]
    fn stages_binaries_libraries_accounts_and_tmp() {
        // A "built" binary (this test executable: dynamic, so it brings libc and the loader)
        // and a host file.
        let me = std::env::current_exe().unwrap();
        let bin_dir = me.parent().unwrap();
        let bin: &'static str = Box::leak(
            me.file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned()
                .into_boxed_str(),
        );
        let files: &'static [File] = Box::leak(Box::new([File {
            path: "/usr/bin/x",
            source: Source::Built {
                bin,
                package: "cozyplane-images",
                manifest: "Cargo.toml",
            },
        }]));
        let plan = Plan {
            short: "t",
            name: "t",
            files,
            links: &[("/bin/y", "x")],
        };
        let ctx = tempfile::tempdir().unwrap();
        // A stale file from an earlier stage must not survive.
        fs::create_dir_all(ctx.path().join("rootfs/stale")).unwrap();
        let staged = stage(&plan, bin_dir, ctx.path()).unwrap();
        let root = &staged.rootfs;
        assert!(!root.join("stale").exists());
        // Our binaries lose their debug sections and nothing else.
        let staged_len = fs::metadata(root.join("usr/bin/x")).unwrap().len();
        assert!(staged_len < fs::metadata(&me).unwrap().len(), "not stripped");
        let sections = |p: &Path| {
            let o = std::process::Command::new("objdump")
                .arg("-h")
                .arg(p)
                .output()
                .unwrap();
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter_map(|l| l.split_whitespace().nth(1).map(str::to_string))
                .filter(|s| s.starts_with('.'))
                .collect::<Vec<_>>()
        };
        let before = sections(&me);
        let after = sections(&root.join("usr/bin/x"));
        assert!(before.iter().any(|s| s == ".debug_line"), "{before:?}");
        assert!(
            !after.iter().any(|s| s == ".debug_line" || s == ".debug_info"),
            "{after:?}"
        );
        // Every section the loader maps stays (.debug_gdb_scripts is one of them).
        let removed: Vec<&String> = before.iter().filter(|s| !after.contains(s)).collect();
        assert!(
            removed
                .iter()
                .all(|s| s.starts_with(".debug_") && *s != ".debug_gdb_scripts"),
            "{removed:?}"
        );
        let mode = |p: &str| fs::symlink_metadata(root.join(p)).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode("usr/bin/x"), 0o755);
        assert_eq!(mode("tmp"), 0o1777);
        assert_eq!(mode("etc/passwd"), 0o644);
        assert_eq!(mode("usr"), 0o755);
        assert!(
            fs::read_to_string(root.join("etc/passwd"))
                .unwrap()
                .contains(":65532:65532:")
        );
        assert_eq!(fs::read_link(root.join("bin/y")).unwrap(), Path::new("x"));
        let libc = staged
            .files
            .iter()
            .find(|(p, _)| p.contains("/libc.so"))
            .unwrap_or_else(|| panic!("no libc in {:?}", staged.files));
        assert!(matches!(libc.1, Origin::Host(h) if h == Path::new(libc.0)));
        assert!(root.join(libc.0.trim_start_matches('/')).is_file());
        assert_eq!(
            staged.files["/usr/bin/x"],
            Origin::Built {
                package: "cozyplane-images",
                manifest: "Cargo.toml"
            }
        );

        let missing = Plan {
            short: "t",
            name: "t",
            files: &[File {
                path: "/usr/bin/z",
                source: Source::Host("/nonexistent/z"),
            }],
            links: &[],
        };
        assert!(matches!(
            stage(&missing, bin_dir, ctx.path()),
            Err(StageError::NotInstalled { .. })
        ));
    }
}
