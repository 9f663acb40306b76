//! What a build made: `images.json` (for the chart's `image.<x>.digest` and for scripts) and
//! a summary for people.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// The images of one build.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Report {
    /// The tag every image got.
    pub tag: String,
    /// The commit they were built from.
    pub revision: String,
    /// Whether the work tree differed from it.
    pub dirty: bool,
    /// The timestamp inside the images (seconds since 1970).
    pub source_date_epoch: i64,
    /// One entry per image.
    pub images: Vec<Built>,
}

/// One built image.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Built {
    /// `cozyplane-agent`.
    pub name: String,
    /// `<registry>/<name>:<tag>`.
    pub reference: String,
    /// `<registry>/<name>`: the chart's `image.<x>.repository`.
    pub repository: String,
    /// The manifest digest: the chart's `image.<x>.digest`.
    pub digest: String,
    /// The archive's file name, in the output directory.
    pub archive: String,
    /// The SBOM's file name, in the output directory.
    pub sbom: String,
    /// Bytes of the archive file.
    pub archive_size: u64,
    /// Bytes a registry stores and a node pulls (manifest, config, compressed layers).
    pub compressed_size: u64,
    /// Bytes of the unpacked layers.
    pub uncompressed_size: u64,
    /// Files, directories and links in the image.
    pub entries: usize,
    /// `name version` of each Debian package inside.
    pub debian_packages: Vec<String>,
    /// `binary: N crates` for each Rust binary inside.
    pub crates: Vec<String>,
}

impl Report {
    /// Writes the report as pretty JSON.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let mut v = serde_json::to_vec_pretty(self).expect("a report serialises");
        v.push(b'\n');
        std::fs::write(path, v)
    }
}

impl Built {
    /// A few lines for a person.
    pub fn summary(&self) -> String {
        format!(
            "{}\n  digest        {}\n  archive       {} ({})\n  size          {} compressed, {} uncompressed, {} entries\n  debian        {}\n  crates        {}\n",
            self.reference,
            self.digest,
            self.archive,
            mib(self.archive_size),
            mib(self.compressed_size),
            mib(self.uncompressed_size),
            self.entries,
            if self.debian_packages.is_empty() {
                "-".to_string()
            } else {
                self.debian_packages.join(", ")
            },
            self.crates.join(", "),
        )
    }
}

fn mib(n: u64) -> String {
    format!("{:.1} MiB", n as f64 / (1024.0 * 1024.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_names_digest_and_sizes() {
        let b = Built {
            name: "cozyplane-x".into(),
            reference: "r/cozyplane-x:1".into(),
            repository: "r/cozyplane-x".into(),
            digest: "sha256:ab".into(),
            archive: "cozyplane-x-1.oci.tar".into(),
            sbom: "cozyplane-x-1.sbom.json".into(),
            archive_size: 3 * 1024 * 1024,
            compressed_size: 1024 * 1024 + 512 * 1024,
            uncompressed_size: 10 * 1024 * 1024,
            entries: 7,
            debian_packages: vec!["libc6 2.36".into()],
            crates: vec!["/usr/bin/x: 3 crates".into()],
        };
        let s = b.summary();
        assert!(
            s.starts_with("r/cozyplane-x:1\n  digest        sha256:ab\n"),
            "{s}"
        );
        assert!(
            s.contains("1.5 MiB compressed, 10.0 MiB uncompressed, 7 entries"),
            "{s}"
        );
        assert!(s.contains("(3.0 MiB)") && s.contains("libc6 2.36"), "{s}");
    }
}
