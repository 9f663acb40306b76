//! The shared libraries a binary needs, as this host's dynamic loader resolves them.
//!
//! `ldd` asks the loader itself (LD_TRACE_LOADED_OBJECTS), so the answer follows every
//! DT_NEEDED recursively through the host's search path and includes the loader: exactly
//! the files the binary opens at start in an image that has them at the same paths. It
//! runs the loader on the binary, so it is only ever used on files this build trusts
//! (our binaries and Debian's).

use std::path::{Path, PathBuf};
use std::process::Command;

/// Why the libraries of a binary could not be listed.
#[derive(Debug, thiserror::Error)]
pub enum LibsError {
    /// `ldd` could not be run.
    #[error("ldd {path}: {source}")]
    Spawn {
        /// The binary.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A library the binary needs is not on this host.
    #[error("{path} needs {lib}, which this host does not have")]
    NotFound {
        /// The binary.
        path: PathBuf,
        /// The library's name.
        lib: String,
    },
    /// `ldd` failed on a dynamic executable.
    #[error("ldd {path}: {stderr}")]
    Failed {
        /// The binary.
        path: PathBuf,
        /// What ldd said.
        stderr: String,
    },
}

/// Absolute paths of the shared objects `bin` loads (the loader included), in ldd's
/// order; empty for a static executable.
pub fn needed(bin: &Path) -> Result<Vec<PathBuf>, LibsError> {
    let out = Command::new("ldd")
        .arg(bin)
        .env("LC_ALL", "C")
        .output()
        .map_err(|source| LibsError::Spawn {
            path: bin.to_path_buf(),
            source,
        })?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // glibc's ldd says so (and exits 1) for static executables; static-pie ones say
    // "statically linked" and succeed.
    if stdout.contains("not a dynamic executable") || stderr.contains("not a dynamic executable") {
        return Ok(Vec::new());
    }
    if !out.status.success() {
        return Err(LibsError::Failed {
            path: bin.to_path_buf(),
            stderr: stderr.trim().to_string(),
        });
    }
    parse(&stdout).map_err(|lib| LibsError::NotFound {
        path: bin.to_path_buf(),
        lib,
    })
}

/// ldd's lines: `name => /path (0x…)`, `/path/ld-linux… (0x…)`, `linux-vdso.so.1 (0x…)`
/// (in the kernel, no file), `name => not found` (the name is the error).
fn parse(stdout: &str) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    for line in stdout.lines().map(str::trim) {
        let target = match line.split_once(" => ") {
            Some((name, rest)) => {
                if rest.starts_with("not found") {
                    return Err(name.to_string());
                }
                rest
            }
            None => line,
        };
        let path = target.split(" (").next().unwrap_or("").trim();
        if path.starts_with('/') && !out.iter().any(|p: &PathBuf| p == Path::new(path)) {
            out.push(PathBuf::from(path));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ldd_output() {
        let out = "\tlinux-vdso.so.1 (0x00007ffc)\n\
                   \tlibnftables.so.1 => /lib/x86_64-linux-gnu/libnftables.so.1 (0x00007f)\n\
                   \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n\
                   \t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n\
                   \tstatically linked\n";
        assert_eq!(
            parse(out).unwrap(),
            [
                PathBuf::from("/lib/x86_64-linux-gnu/libnftables.so.1"),
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2"),
            ]
        );
        assert_eq!(parse("\tlibfoo.so.1 => not found\n").unwrap_err(), "libfoo.so.1");
    }

    #[test]
    fn a_real_binary_needs_libc_and_a_static_one_nothing() {
        // The test binary itself is dynamic (glibc); the kernel's vDSO is never listed.
        let me = std::env::current_exe().unwrap();
        let libs = needed(&me).unwrap();
        assert!(
            libs.iter()
                .any(|p| p.file_name().unwrap().to_string_lossy().starts_with("libc.so")),
            "{libs:?}"
        );
        assert!(libs.iter().all(|p| p.is_absolute() && p.exists()), "{libs:?}");
        if Path::new("/bin/busybox").exists() {
            assert!(needed(Path::new("/bin/busybox")).unwrap().is_empty());
        }
    }
}
