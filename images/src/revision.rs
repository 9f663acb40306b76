//! The commit an image is built from, and the tag that names it.

use std::path::Path;
use std::process::Command;

/// Why the revision could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RevisionError {
    /// git could not be run, or failed.
    #[error("git {args}: {message}")]
    Git {
        /// Its arguments.
        args: String,
        /// What went wrong.
        message: String,
    },
}

/// A commit of the repository and the state of the work tree.
#[derive(Debug, Clone, PartialEq)]
pub struct Revision {
    /// The full commit id.
    pub commit: String,
    /// Whether tracked files differ from it.
    pub dirty: bool,
    /// The commit's time (seconds since 1970): every timestamp in the image, unless
    /// SOURCE_DATE_EPOCH says otherwise.
    pub time: i64,
}

impl Revision {
    /// `<version>-g<12 hex of the commit>`, with `-dirty` when the work tree differs: the
    /// same commit always gives the same tag, and a tag never hides local changes.
    pub fn tag(&self, version: &str) -> String {
        let short = &self.commit[..self.commit.len().min(12)];
        format!("{version}-g{short}{}", if self.dirty { "-dirty" } else { "" })
    }
}

/// Reads HEAD of the repository at `repo`.
pub fn read(repo: &Path) -> Result<Revision, RevisionError> {
    let commit = git(repo, &["rev-parse", "HEAD"])?;
    let time = git(repo, &["log", "-1", "--format=%ct", "HEAD"])?;
    let time = time.parse().map_err(|e| RevisionError::Git {
        args: "log -1 --format=%ct".into(),
        message: format!("{time:?}: {e}"),
    })?;
    // Untracked files are not part of any build input git knows of; modified tracked ones are.
    let status = git(repo, &["status", "--porcelain", "--untracked-files=no"])?;
    Ok(Revision {
        commit,
        dirty: !status.is_empty(),
        time,
    })
}

fn git(repo: &Path, args: &[&str]) -> Result<String, RevisionError> {
    let err = |message: String| RevisionError::Git {
        args: args.join(" "),
        message,
    };
    let out = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .output()
        .map_err(|e| err(e.to_string()))?;
    if !out.status.success() {
        return Err(err(String::from_utf8_lossy(&out.stderr).trim().to_string()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_scheme() {
        let r = Revision {
            commit: "83a3ef6a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e".into(),
            dirty: false,
            time: 0,
        };
        assert_eq!(r.tag("0.1.0"), "0.1.0-g83a3ef6a0b1c");
        assert_eq!(
            Revision { dirty: true, ..r }.tag("0.1.0"),
            "0.1.0-g83a3ef6a0b1c-dirty"
        );
    }

    #[test]
    fn reads_this_repository() {
        let r = read(Path::new(env!("CARGO_MANIFEST_DIR"))).unwrap();
        assert_eq!(r.commit.len(), 40, "{r:?}");
        assert!(r.commit.bytes().all(|b| b.is_ascii_hexdigit()));
        // After 2020: a parsed commit time, not a default.
        assert!(r.time > 1_577_836_800, "{r:?}");
        assert!(read(Path::new("/")).is_err());
    }
}
