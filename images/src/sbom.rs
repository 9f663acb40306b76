//! What an image is made of: every file with its origin, the Debian packages the host files
//! come from (`dpkg -S`, versions from `dpkg-query -W`), and the crates linked into each
//! Rust binary (`cargo metadata` for this host's target: normal dependencies, without
//! proc-macros, which run in the compiler and are not linked).
//!
//! Written into the image ([`crate::stage::SBOM_PATH`]) and next to its archive.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

use crate::stage::{Origin, Staged};

/// Why the SBOM could not be made.
#[derive(Debug, thiserror::Error)]
pub enum SbomError {
    /// A command could not be run or failed.
    #[error("{command}: {message}")]
    Command {
        /// The command.
        command: String,
        /// What went wrong.
        message: String,
    },
    /// A host file no Debian package owns: the SBOM could not say what it is.
    #[error("{0} belongs to no Debian package (dpkg -S); only packaged host files may go into an image")]
    Unowned(PathBuf),
    /// `cargo metadata` does not know the package.
    #[error("cargo metadata of {manifest}: no package {package}")]
    NoPackage {
        /// The Cargo.toml.
        manifest: String,
        /// The package.
        package: String,
    },
}

/// The bill of materials of one image.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Sbom {
    /// The image's name.
    pub image: String,
    /// Every file and link, by path: `debian:<package>`, `cargo:<package>`,
    /// `link:<target>` or `generated`.
    pub files: BTreeMap<String, String>,
    /// The Debian packages the host files come from.
    pub debian_packages: Vec<DebPackage>,
    /// The crates in each Rust binary.
    pub binaries: Vec<Binary>,
}

/// One Debian package.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DebPackage {
    /// Package name.
    pub name: String,
    /// Version, as dpkg has it installed.
    pub version: String,
    /// Architecture.
    pub architecture: String,
}

/// The crates of one Rust binary.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Binary {
    /// Its path in the image.
    pub path: String,
    /// The package that builds it.
    pub package: String,
    /// Every crate linked into it, the package itself included.
    pub crates: Vec<Crate>,
}

/// One crate.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct Crate {
    /// Crate (package) name.
    pub name: String,
    /// Version.
    pub version: String,
    /// `crates.io`, `local` (this repository) or cargo's source id.
    pub source: String,
}

impl Sbom {
    /// The SBOM as stored: pretty JSON with a final newline.
    pub fn to_json(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec_pretty(self).expect("an SBOM serialises");
        v.push(b'\n');
        v
    }
}

/// The SBOM of `staged` for the image `image`; `repo` is the repository root, for the
/// workspaces' Cargo.toml files. The SBOM's own file is listed too, as `generated`.
pub fn collect(image: &str, staged: &Staged, repo: &Path) -> Result<Sbom, SbomError> {
    let hosts: Vec<&PathBuf> = staged
        .files
        .values()
        .filter_map(|o| if let Origin::Host(p) = o { Some(p) } else { None })
        .collect();
    let owners = owners(&hosts)?;
    let mut files = BTreeMap::new();
    let mut binaries = Vec::new();
    let mut metadata: BTreeMap<&str, serde_json::Value> = BTreeMap::new();
    for (path, origin) in &staged.files {
        let what = match origin {
            Origin::Built { package, manifest } => {
                if !metadata.contains_key(manifest) {
                    metadata.insert(manifest, cargo_metadata(&repo.join(manifest))?);
                }
                let crates = crates(&metadata[manifest], package).ok_or_else(|| SbomError::NoPackage {
                    manifest: manifest.to_string(),
                    package: package.to_string(),
                })?;
                binaries.push(Binary {
                    path: path.clone(),
                    package: package.to_string(),
                    crates,
                });
                format!("cargo:{package}")
            }
            Origin::Host(p) => format!("debian:{}", owners[p]),
            Origin::Link(target) => format!("link:{target}"),
            Origin::Generated => "generated".to_string(),
        };
        files.insert(path.clone(), what);
    }
    files.insert(crate::stage::SBOM_PATH.to_string(), "generated".to_string());
    let names: BTreeSet<&String> = owners.values().collect();
    Ok(Sbom {
        image: image.to_string(),
        files,
        debian_packages: versions(&names)?,
        binaries,
    })
}

fn run(cmd: &mut Command) -> Result<std::process::Output, SbomError> {
    let command = format!("{cmd:?}");
    cmd.env("LC_ALL", "C").output().map_err(|e| SbomError::Command {
        command,
        message: e.to_string(),
    })
}

/// The package owning each host file. dpkg knows a file by the path its package installs
/// it under: on a merged-/usr system the loader's `/lib/x86_64-linux-gnu/libc.so.6` may be
/// registered as that or as `/usr/lib/…`, and a soname link's target by its own name; so
/// the path, its canonical form and that form without `/usr` are all asked.
fn owners(paths: &[&PathBuf]) -> Result<BTreeMap<PathBuf, String>, SbomError> {
    let mut candidates: BTreeMap<&PathBuf, Vec<String>> = BTreeMap::new();
    for p in paths {
        let mut c = vec![p.display().to_string()];
        if let Ok(real) = p.canonicalize() {
            let real = real.display().to_string();
            if let Some(short) = real.strip_prefix("/usr") {
                c.push(short.to_string());
            }
            c.push(real);
        }
        c.dedup();
        candidates.insert(p, c);
    }
    let all: BTreeSet<&String> = candidates.values().flatten().collect();
    let mut owner_of: BTreeMap<String, String> = BTreeMap::new();
    if !all.is_empty() {
        // Exit status 1 when some candidate is unknown, which is expected: read stdout.
        let out = run(Command::new("dpkg").arg("-S").args(all))?;
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            if line.starts_with("diversion by") {
                continue;
            }
            if let Some((pkgs, path)) = line.split_once(": ") {
                let pkg = pkgs.split(", ").next().unwrap_or(pkgs);
                owner_of.insert(path.to_string(), pkg.split(':').next().unwrap_or(pkg).to_string());
            }
        }
    }
    let mut out = BTreeMap::new();
    for (p, c) in candidates {
        let pkg = c
            .iter()
            .find_map(|c| owner_of.get(c))
            .ok_or_else(|| SbomError::Unowned(p.clone()))?;
        out.insert(p.clone(), pkg.clone());
    }
    Ok(out)
}

fn versions(names: &BTreeSet<&String>) -> Result<Vec<DebPackage>, SbomError> {
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let mut cmd = Command::new("dpkg-query");
    cmd.args(["-W", "-f", "${Package}\t${Version}\t${Architecture}\n"])
        .args(names);
    let out = run(&mut cmd)?;
    if !out.status.success() {
        return Err(SbomError::Command {
            command: format!("{cmd:?}"),
            message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    let mut v: Vec<DebPackage> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut f = l.split('\t');
            Some(DebPackage {
                name: f.next()?.to_string(),
                version: f.next()?.to_string(),
                architecture: f.next()?.to_string(),
            })
        })
        .collect();
    v.sort_by(|a, b| a.name.cmp(&b.name));
    v.dedup_by(|a, b| a.name == b.name);
    Ok(v)
}

fn cargo_metadata(manifest: &Path) -> Result<serde_json::Value, SbomError> {
    // The binaries are for this host; another platform's dependencies are not in them.
    let target = format!("{}-unknown-linux-gnu", std::env::consts::ARCH);
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args([
        "metadata",
        "--format-version",
        "1",
        "--locked",
        "--filter-platform",
        &target,
    ])
    .arg("--manifest-path")
    .arg(manifest);
    let out = run(&mut cmd)?;
    if !out.status.success() {
        return Err(SbomError::Command {
            command: format!("{cmd:?}"),
            message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    serde_json::from_slice(&out.stdout).map_err(|e| SbomError::Command {
        command: format!("{cmd:?}"),
        message: e.to_string(),
    })
}

/// The crates `package` links: the closure of its normal dependencies in the resolve
/// graph, proc-macro crates (and what only they use) left out.
fn crates(metadata: &serde_json::Value, package: &str) -> Option<Vec<Crate>> {
    let packages = metadata["packages"].as_array()?;
    let by_id: BTreeMap<&str, &serde_json::Value> = packages
        .iter()
        .filter_map(|p| Some((p["id"].as_str()?, p)))
        .collect();
    let root = packages
        .iter()
        .find(|p| p["name"] == package && p["source"].is_null())?["id"]
        .as_str()?;
    let nodes: BTreeMap<&str, &serde_json::Value> = metadata["resolve"]["nodes"]
        .as_array()?
        .iter()
        .filter_map(|n| Some((n["id"].as_str()?, n)))
        .collect();
    let is_proc_macro = |p: &serde_json::Value| {
        p["targets"].as_array().is_some_and(|ts| {
            ts.iter().any(|t| {
                t["kind"]
                    .as_array()
                    .is_some_and(|k| k.iter().any(|k| k == "proc-macro"))
            })
        })
    };
    let mut seen = BTreeSet::new();
    let mut todo = vec![root];
    while let Some(id) = todo.pop() {
        if !seen.insert(id) {
            continue;
        }
        let Some(node) = nodes.get(id) else { continue };
        for dep in node["deps"].as_array().into_iter().flatten() {
            let normal = dep["dep_kinds"]
                .as_array()
                .is_some_and(|ks| ks.iter().any(|k| k["kind"].is_null()));
            let Some(dep_id) = dep["pkg"].as_str() else {
                continue;
            };
            if normal && by_id.get(dep_id).is_some_and(|p| !is_proc_macro(p)) {
                todo.push(dep_id);
            }
        }
    }
    let mut out: Vec<Crate> = seen
        .into_iter()
        .filter_map(|id| {
            let p = by_id.get(id)?;
            let source = match p["source"].as_str() {
                None => "local".to_string(),
                Some("registry+https://github.com/rust-lang/crates.io-index") => "crates.io".to_string(),
                Some(s) => s.to_string(),
            };
            Some(Crate {
                name: p["name"].as_str()?.to_string(),
                version: p["version"].as_str()?.to_string(),
                source,
            })
        })
        .collect();
    out.sort();
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crates_follow_normal_dependencies_only() {
        // root -> a (normal) -> b (normal); root -> t (dev only); root -> m (proc-macro) -> s.
        let meta = serde_json::json!({
            "packages": [
                {"id": "root", "name": "root", "version": "0.1.0", "source": null, "targets": [{"kind": ["bin"]}]},
                {"id": "a", "name": "a", "version": "1.0.0",
                 "source": "registry+https://github.com/rust-lang/crates.io-index", "targets": [{"kind": ["lib"]}]},
                {"id": "b", "name": "b", "version": "2.0.0", "source": "git+https://example.org/b", "targets": [{"kind": ["lib"]}]},
                {"id": "t", "name": "t", "version": "1.0.0", "source": null, "targets": [{"kind": ["lib"]}]},
                {"id": "m", "name": "m", "version": "1.0.0", "source": null, "targets": [{"kind": ["proc-macro"]}]},
                {"id": "s", "name": "s", "version": "1.0.0", "source": null, "targets": [{"kind": ["lib"]}]}
            ],
            "resolve": {"nodes": [
                {"id": "root", "deps": [
                    {"pkg": "a", "dep_kinds": [{"kind": null}]},
                    {"pkg": "t", "dep_kinds": [{"kind": "dev"}]},
                    {"pkg": "m", "dep_kinds": [{"kind": null}]}
                ]},
                {"id": "a", "deps": [{"pkg": "b", "dep_kinds": [{"kind": "build"}, {"kind": null}]}]},
                {"id": "b", "deps": []},
                {"id": "t", "deps": []},
                {"id": "m", "deps": [{"pkg": "s", "dep_kinds": [{"kind": null}]}]},
                {"id": "s", "deps": []}
            ]}
        });
        let got: Vec<(String, String)> = crates(&meta, "root")
            .unwrap()
            .into_iter()
            .map(|c| (c.name, c.source))
            .collect();
        assert_eq!(
            got,
            [
                ("a".into(), "crates.io".into()),
                ("b".into(), "git+https://example.org/b".into()),
                ("root".into(), "local".into())
            ]
        );
        assert!(crates(&meta, "nope").is_none());
    }

    #[test]
    fn a_host_file_is_found_with_its_package() {
        // /bin/sh (a link, diverted by dash) is on every Debian host; dpkg must name its package.
        let ld = PathBuf::from("/bin/sh");
        let found = owners(&[&ld]).unwrap();
        let pkg = &found[&ld];
        assert!(!pkg.is_empty());
        let v = versions(&[pkg].into_iter().collect()).unwrap();
        assert_eq!(v.len(), 1);
        assert_eq!(&v[0].name, pkg);
        assert!(!v[0].version.is_empty());
        let none = PathBuf::from("/nonexistent/file");
        assert!(matches!(owners(&[&none]), Err(SbomError::Unowned(_))));
    }
}
