//! Applies a parsed Containerfile to a build context, as `docker build` would: the image
//! config from ARG/ENV/LABEL/USER/WORKDIR/ENTRYPOINT/CMD, one layer per COPY.

use std::collections::BTreeMap;
use std::path::{Component, Path};

use crate::containerfile::{Instruction, Line};
use crate::layer::{Compression, LayerError, Tree};
use crate::oci::{History, Image, ImageConfig, Platform, RootFs, RunConfig};

/// What docker sets when a Linux image's Containerfile sets no PATH (BuildKit's default).
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Why an instruction could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum AssembleError {
    /// The instruction's arguments make no image.
    #[error("line {line}: {message}")]
    Invalid {
        /// Its line.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A COPY failed.
    #[error("line {line}: {source}")]
    Copy {
        /// Its line.
        line: usize,
        /// Why.
        #[source]
        source: LayerError,
    },
}

/// Builds the image `lines` describe from `context`. `build_args` are docker's
/// `--build-arg`s; `epoch` is every timestamp of the image (config and layer entries).
pub fn assemble(
    lines: &[Line],
    context: &Path,
    build_args: &BTreeMap<String, String>,
    epoch: i64,
    compression: Compression,
) -> Result<Image, AssembleError> {
    let created = crate::oci::rfc3339(epoch);
    let mtime = u64::try_from(epoch).unwrap_or(0);
    let mut vars: BTreeMap<String, String> = BTreeMap::new();
    let mut env: Vec<(String, String)> = Vec::new();
    let mut run = RunConfig::default();
    let mut trees: Vec<(String, Tree)> = Vec::new();
    for line in lines {
        let invalid = |message: String| AssembleError::Invalid {
            line: line.number,
            message,
        };
        match &line.instruction {
            Instruction::Arg { name, default } => {
                let value = build_args
                    .get(name)
                    .cloned()
                    .or_else(|| default.as_ref().map(|d| d.expand(&vars)));
                if let Some(v) = value {
                    vars.insert(name.clone(), v);
                }
            }
            Instruction::Env(pairs) => {
                for (k, w) in pairs {
                    let v = w.expand(&vars);
                    match env.iter_mut().find(|(ek, _)| ek == k) {
                        Some(slot) => slot.1 = v.clone(),
                        None => env.push((k.clone(), v.clone())),
                    }
                    vars.insert(k.clone(), v);
                }
            }
            Instruction::Label(pairs) => {
                for (k, w) in pairs {
                    run.labels.insert(k.clone(), w.expand(&vars));
                }
            }
            Instruction::User(w) => run.user = Some(w.expand(&vars)),
            Instruction::Workdir(w) => {
                let dir = w.expand(&vars);
                if !dir.starts_with('/') {
                    return Err(invalid(format!(
                        "WORKDIR {dir}: only absolute paths are supported"
                    )));
                }
                // docker would create a missing directory in a layer of its own; requiring it
                // in the staged rootfs keeps both builds identical.
                if !trees.iter().any(|(_, t)| t.has_dir(&dir)) {
                    return Err(invalid(format!(
                        "WORKDIR {dir}: no such directory in the copied files"
                    )));
                }
                run.working_dir = Some(dir);
            }
            Instruction::Copy { src, dest } => {
                let src = src.expand(&vars);
                let dest = dest.expand(&vars);
                let rel = Path::new(&src);
                if rel.is_absolute() || rel.components().any(|c| c == Component::ParentDir) {
                    return Err(invalid(format!(
                        "COPY {src}: the source must be inside the build context"
                    )));
                }
                let mut tree = Tree::default();
                tree.copy(&context.join(rel), &dest)
                    .map_err(|source| AssembleError::Copy {
                        line: line.number,
                        source,
                    })?;
                trees.push((format!("COPY {src} {dest}"), tree));
            }
            Instruction::Entrypoint(argv) => run.entrypoint = Some(argv.clone()),
            Instruction::Cmd(argv) => run.cmd = Some(argv.clone()),
        }
    }
    if !env.iter().any(|(k, _)| k == "PATH") {
        env.insert(0, ("PATH".into(), DEFAULT_PATH.into()));
    }
    run.env = env.into_iter().map(|(k, v)| format!("{k}={v}")).collect();

    let mut layers = Vec::new();
    let mut history = Vec::new();
    for (i, (created_by, tree)) in trees.iter().enumerate() {
        let layer = tree
            .write(mtime, compression)
            .map_err(|source| AssembleError::Copy {
                line: copy_line(lines, i),
                source,
            })?;
        layers.push(layer);
        history.push(History {
            created: created.clone(),
            created_by: created_by.clone(),
        });
    }
    let platform = Platform::host();
    let config = ImageConfig {
        created,
        architecture: platform.architecture,
        os: platform.os,
        config: run,
        rootfs: RootFs {
            kind: "layers".into(),
            diff_ids: Vec::new(),
        },
        history,
    };
    Ok(Image::new(config, layers))
}

/// The line of the `i`-th COPY.
fn copy_line(lines: &[Line], i: usize) -> usize {
    lines
        .iter()
        .filter(|l| matches!(l.instruction, Instruction::Copy { .. }))
        .nth(i)
        .map_or(0, |l| l.number)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::containerfile::parse;
    use std::fs;

    fn context() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        fs::create_dir_all(d.path().join("rootfs/usr/bin")).unwrap();
        fs::write(d.path().join("rootfs/usr/bin/x"), b"x").unwrap();
        d
    }

    #[test]
    fn config_follows_the_containerfile() {
        let d = context();
        let text = "FROM scratch\nARG VERSION\nARG OTHER=o\nCOPY rootfs/ /\nUSER 65532:65532\n\
                    ENV A=1 B=$A-${OTHER}\nENV A=2\nWORKDIR /usr/bin\n\
                    LABEL v=\"${VERSION}\" unset=\"[$NOPE]\"\nENTRYPOINT [\"/usr/bin/x\"]\nCMD [\"--help\"]\n";
        let args = [("VERSION".to_string(), "1.0-g1".to_string())].into();
        let img = assemble(&parse(text).unwrap(), d.path(), &args, 1_000, Compression::None).unwrap();
        let c: serde_json::Value = serde_json::from_slice(&img.config).unwrap();
        let cfg = &c["config"];
        assert_eq!(cfg["User"], "65532:65532");
        // docker's default PATH first, ENV in order, a repeated key replaced in place.
        assert_eq!(
            cfg["Env"],
            serde_json::json!([format!("PATH={DEFAULT_PATH}"), "A=2", "B=1-o"])
        );
        assert_eq!(cfg["WorkingDir"], "/usr/bin");
        assert_eq!(cfg["Labels"], serde_json::json!({"v": "1.0-g1", "unset": "[]"}));
        assert_eq!(cfg["Entrypoint"], serde_json::json!(["/usr/bin/x"]));
        assert_eq!(cfg["Cmd"], serde_json::json!(["--help"]));
        assert_eq!(c["created"], "1970-01-01T00:16:40Z");
        assert_eq!(c["history"][0]["created_by"], "COPY rootfs/ /");
        assert_eq!(img.layers.len(), 1);
        assert_eq!(c["rootfs"]["diff_ids"][0], img.layers[0].diff_id.as_str());
    }

    #[test]
    fn refuses_what_docker_would_do_differently() {
        let d = context();
        let none = BTreeMap::new();
        for (text, needle) in [
            (
                "FROM scratch\nCOPY rootfs/ /\nWORKDIR /srv\n",
                "line 3: WORKDIR /srv: no such directory",
            ),
            ("FROM scratch\nCOPY ../etc /\n", "line 2: COPY ../etc"),
            ("FROM scratch\nCOPY missing /\n", "line 2: "),
        ] {
            let e = assemble(&parse(text).unwrap(), d.path(), &none, 0, Compression::None).unwrap_err();
            assert!(e.to_string().starts_with(needle), "{text:?}: {e}");
        }
    }
}
