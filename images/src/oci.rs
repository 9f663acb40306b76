//! The OCI image format: the config, the manifest, and the archive that carries them with
//! the layers — an OCI image layout (`oci-layout`, `index.json`, `blobs/sha256/…`) plus
//! docker's `manifest.json` in the same tar, the way `docker save` writes since docker 25, so
//! that `ctr images import`, `podman load` and `docker load` all take the one file.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Read as _, Write as _};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::layer::{Compression, Layer};

/// Media type of an image manifest.
pub const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// Media type of an image index.
pub const INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// Media type of an image config.
pub const CONFIG: &str = "application/vnd.oci.image.config.v1+json";
/// Media type of a gzip-compressed layer.
pub const LAYER_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
/// Media type of an uncompressed layer.
pub const LAYER_TAR: &str = "application/vnd.oci.image.layer.v1.tar";
/// The annotation containerd names an imported image by.
pub const CONTAINERD_NAME: &str = "io.containerd.image.name";
/// The OCI annotation for an image's reference in a layout.
pub const REF_NAME: &str = "org.opencontainers.image.ref.name";

/// A content descriptor.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    /// What the blob is.
    pub media_type: String,
    /// `sha256:<hex>` of the blob.
    pub digest: String,
    /// Its length in bytes.
    pub size: u64,
    /// The platform an index entry is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<Platform>,
    /// Annotations (the image's name, in an index).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// An OS and CPU architecture in OCI's spelling.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Platform {
    /// `amd64`, `arm64`, …
    pub architecture: String,
    /// `linux`.
    pub os: String,
}

impl Platform {
    /// The platform this builder runs on, which is the one the staged binaries are for.
    pub fn host() -> Self {
        let architecture = match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            other => other,
        };
        Self {
            architecture: architecture.into(),
            os: "linux".into(),
        }
    }
}

/// The image config (OCI image-spec `config.md`): how a runtime starts the image.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ImageConfig {
    /// RFC 3339 build time (the commit's time, for reproducibility).
    pub created: String,
    /// CPU architecture.
    pub architecture: String,
    /// `linux`.
    pub os: String,
    /// The process defaults.
    pub config: RunConfig,
    /// The layers' uncompressed digests.
    pub rootfs: RootFs,
    /// One entry per layer.
    #[serde(default)]
    pub history: Vec<History>,
}

/// The `config` object of an image config.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct RunConfig {
    /// `USER`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// `ENV`, as `KEY=value`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// `ENTRYPOINT`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entrypoint: Option<Vec<String>>,
    /// `CMD`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cmd: Option<Vec<String>>,
    /// `WORKDIR`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
    /// `LABEL`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

/// `rootfs` of an image config.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RootFs {
    /// Always `layers`.
    #[serde(rename = "type")]
    pub kind: String,
    /// `sha256:` of each uncompressed layer, bottom first.
    pub diff_ids: Vec<String>,
}

/// A `history` entry.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct History {
    /// When (the config's `created`).
    pub created: String,
    /// The instruction that made the layer.
    pub created_by: String,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Manifest {
    schema_version: u32,
    media_type: String,
    config: Descriptor,
    layers: Vec<Descriptor>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Index {
    schema_version: u32,
    media_type: String,
    manifests: Vec<Descriptor>,
}

/// docker's `manifest.json` entry (the docker-archive format `docker load` reads).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DockerManifest {
    config: String,
    repo_tags: Vec<String>,
    layers: Vec<String>,
}

/// A built image: its blobs, in memory.
#[derive(Debug, Clone)]
pub struct Image {
    /// The config blob.
    pub config: Vec<u8>,
    /// The layers, bottom first.
    pub layers: Vec<Layer>,
    /// The manifest blob; its digest is the image's.
    pub manifest: Vec<u8>,
}

impl Image {
    /// Serialises `config` (its `rootfs` filled from `layers`) and the manifest over them.
    pub fn new(mut config: ImageConfig, layers: Vec<Layer>) -> Self {
        config.rootfs = RootFs {
            kind: "layers".into(),
            diff_ids: layers.iter().map(|l| l.diff_id.clone()).collect(),
        };
        let config = serde_json::to_vec(&config).expect("an image config serialises");
        let manifest = Manifest {
            schema_version: 2,
            media_type: MANIFEST.into(),
            config: Descriptor {
                media_type: CONFIG.into(),
                digest: crate::digest::of(&config),
                size: config.len() as u64,
                platform: None,
                annotations: BTreeMap::new(),
            },
            layers: layers
                .iter()
                .map(|l| Descriptor {
                    media_type: match l.compression {
                        Compression::Gzip => LAYER_GZIP,
                        Compression::None => LAYER_TAR,
                    }
                    .into(),
                    digest: l.digest.clone(),
                    size: l.blob.len() as u64,
                    platform: None,
                    annotations: BTreeMap::new(),
                })
                .collect(),
        };
        let manifest = serde_json::to_vec(&manifest).expect("a manifest serialises");
        Self {
            config,
            layers,
            manifest,
        }
    }

    /// The manifest's digest: what a registry, the chart's `image.<x>.digest` and
    /// `ctr images ls` call the image.
    pub fn digest(&self) -> String {
        crate::digest::of(&self.manifest)
    }

    /// What a registry stores and a node pulls: manifest, config and (compressed) layers.
    pub fn compressed_size(&self) -> u64 {
        (self.manifest.len() + self.config.len()) as u64
            + self.layers.iter().map(|l| l.blob.len() as u64).sum::<u64>()
    }

    /// The layers unpacked (tar bytes), which is about what the image takes on a node's disk.
    pub fn uncompressed_size(&self) -> u64 {
        self.layers.iter().map(|l| l.uncompressed_size).sum()
    }

    /// Writes the archive for `reference` (`registry/name:tag`) to `path` (through a
    /// temporary file beside it, so a reader never sees half an archive). The archive's
    /// own entries have mtime `mtime`, so it too is the same for the same image.
    pub fn write_archive(&self, reference: &str, mtime: u64, path: &Path) -> io::Result<u64> {
        let digest = self.digest();
        let annotations: BTreeMap<String, String> = [
            (CONTAINERD_NAME.to_string(), reference.to_string()),
            (REF_NAME.to_string(), reference.to_string()),
        ]
        .into();
        let index = Index {
            schema_version: 2,
            media_type: INDEX.into(),
            manifests: vec![Descriptor {
                media_type: MANIFEST.into(),
                digest: digest.clone(),
                size: self.manifest.len() as u64,
                platform: Some(Platform::host()),
                annotations,
            }],
        };
        let docker = [DockerManifest {
            config: blob_path(&crate::digest::of(&self.config)),
            repo_tags: vec![reference.to_string()],
            layers: self.layers.iter().map(|l| blob_path(&l.digest)).collect(),
        }];
        let mut files: BTreeMap<String, &[u8]> = BTreeMap::new();
        let index = serde_json::to_vec(&index).expect("an index serialises");
        let docker = serde_json::to_vec(&docker).expect("a docker manifest serialises");
        let layout = br#"{"imageLayoutVersion":"1.0.0"}"#;
        files.insert("oci-layout".into(), layout);
        files.insert("index.json".into(), &index);
        files.insert("manifest.json".into(), &docker);
        files.insert(blob_path(&digest), &self.manifest);
        files.insert(blob_path(&crate::digest::of(&self.config)), &self.config);
        for l in &self.layers {
            files.insert(blob_path(&l.digest), &l.blob);
        }

        let tmp = path.with_extension("tar.partial");
        let mut b = tar::Builder::new(io::BufWriter::new(fs::File::create(&tmp)?));
        for dir in ["blobs/", "blobs/sha256/"] {
            let mut h = header(mtime, 0o755, tar::EntryType::Directory, 0);
            b.append_data(&mut h, dir, io::empty())?;
        }
        for (name, data) in files {
            let mut h = header(mtime, 0o644, tar::EntryType::Regular, data.len() as u64);
            b.append_data(&mut h, name, data)?;
        }
        let mut w = b.into_inner()?;
        w.flush()?;
        w.into_inner()
            .map_err(io::IntoInnerError::into_error)?
            .sync_all()?;
        fs::rename(&tmp, path)?;
        Ok(fs::metadata(path)?.len())
    }
}

fn header(mtime: u64, mode: u32, kind: tar::EntryType, size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(mtime);
    h.set_size(size);
    h
}

fn blob_path(digest: &str) -> String {
    format!("blobs/sha256/{}", digest.trim_start_matches("sha256:"))
}

/// The time `epoch` (seconds since 1970, UTC) in RFC 3339, as image configs write it; the
/// epoch itself for one outside what jiff represents (years -9999..=9999).
pub fn rfc3339(epoch: i64) -> String {
    jiff::Timestamp::from_second(epoch)
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
        .to_string()
}

/// Why an archive failed [`verify`].
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// Reading it failed.
    #[error("{path}: {source}")]
    Io {
        /// The archive.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// Its structure or a digest is wrong.
    #[error("{path}: {message}")]
    Bad {
        /// The archive.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// What [`verify`] found in a sound archive.
#[derive(Debug, Clone, PartialEq)]
pub struct Verified {
    /// The manifest's digest.
    pub digest: String,
    /// The image's reference (the index's `io.containerd.image.name`).
    pub reference: String,
    /// The config.
    pub config: serde_json::Value,
}

/// Reads an archive back and checks what a runtime will: every blob's name is its sha256,
/// the index names one manifest whose config and layers are present with their sizes, each
/// layer unpacks to its diff_id, and docker's manifest.json points at the same blobs.
pub fn verify(path: &Path) -> Result<Verified, VerifyError> {
    let io = |source| VerifyError::Io {
        path: path.to_path_buf(),
        source,
    };
    let bad = |message: String| VerifyError::Bad {
        path: path.to_path_buf(),
        message,
    };
    let mut files: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut archive = tar::Archive::new(io::BufReader::new(fs::File::open(path).map_err(io)?));
    for entry in archive.entries().map_err(io)? {
        let mut entry = entry.map_err(io)?;
        if entry.header().entry_type().is_dir() {
            continue;
        }
        let name = entry.path().map_err(io)?.display().to_string();
        let mut data = Vec::new();
        entry.read_to_end(&mut data).map_err(io)?;
        files.insert(name, data);
    }
    for (name, data) in &files {
        if let Some(hex) = name.strip_prefix("blobs/sha256/") {
            let actual = crate::digest::of(data);
            if actual != format!("sha256:{hex}") {
                return Err(bad(format!("{name} holds {actual}")));
            }
        }
    }
    let blob = |d: &Descriptor| -> Result<&Vec<u8>, VerifyError> {
        let data = files
            .get(&blob_path(&d.digest))
            .ok_or_else(|| bad(format!("{} missing", d.digest)))?;
        if data.len() as u64 != d.size {
            return Err(bad(format!(
                "{} has {} bytes, its descriptor says {}",
                d.digest,
                data.len(),
                d.size
            )));
        }
        Ok(data)
    };
    let json = |name: &str| -> Result<&Vec<u8>, VerifyError> {
        files.get(name).ok_or_else(|| bad(format!("no {name}")))
    };
    json("oci-layout")?;
    let index: Index =
        serde_json::from_slice(json("index.json")?).map_err(|e| bad(format!("index.json: {e}")))?;
    let [desc] = &index.manifests[..] else {
        return Err(bad(format!(
            "index.json lists {} manifests, not 1",
            index.manifests.len()
        )));
    };
    let manifest: Manifest =
        serde_json::from_slice(blob(desc)?).map_err(|e| bad(format!("manifest: {e}")))?;
    let config_bytes = blob(&manifest.config)?;
    let config: ImageConfig =
        serde_json::from_slice(config_bytes).map_err(|e| bad(format!("config: {e}")))?;
    if config.rootfs.diff_ids.len() != manifest.layers.len() {
        return Err(bad("config and manifest disagree on the number of layers".into()));
    }
    for (layer, diff_id) in manifest.layers.iter().zip(&config.rootfs.diff_ids) {
        let data = blob(layer)?;
        let actual = if layer.media_type == LAYER_GZIP {
            let mut raw = Vec::new();
            flate2::read::GzDecoder::new(&data[..])
                .read_to_end(&mut raw)
                .map_err(|e| bad(format!("{}: {e}", layer.digest)))?;
            crate::digest::of(&raw)
        } else {
            crate::digest::of(data)
        };
        if &actual != diff_id {
            return Err(bad(format!(
                "{} unpacks to {actual}, the config says {diff_id}",
                layer.digest
            )));
        }
    }
    let docker: Vec<DockerManifest> =
        serde_json::from_slice(json("manifest.json")?).map_err(|e| bad(format!("manifest.json: {e}")))?;
    let [docker] = &docker[..] else {
        return Err(bad("manifest.json lists other than one image".into()));
    };
    let ours: Vec<String> = manifest.layers.iter().map(|l| blob_path(&l.digest)).collect();
    if docker.config != blob_path(&manifest.config.digest) || docker.layers != ours {
        return Err(bad(
            "manifest.json and the OCI manifest name different blobs".into()
        ));
    }
    let reference = desc.annotations.get(CONTAINERD_NAME).cloned().unwrap_or_default();
    if docker.repo_tags != [reference.clone()] {
        return Err(bad(format!(
            "manifest.json tags {:?}, index.json names {reference}",
            docker.repo_tags
        )));
    }
    Ok(Verified {
        digest: desc.digest.clone(),
        reference,
        config: serde_json::from_slice(config_bytes).map_err(|e| bad(format!("config: {e}")))?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer::Tree;

    fn image(content: &[u8]) -> (tempfile::TempDir, Image) {
        let d = tempfile::tempdir().unwrap();
        fs::create_dir_all(d.path().join("rootfs/usr/bin")).unwrap();
        fs::write(d.path().join("rootfs/usr/bin/x"), content).unwrap();
        let mut t = Tree::default();
        t.copy(&d.path().join("rootfs"), "/").unwrap();
        let layer = t.write(86_400, Compression::Gzip).unwrap();
        let config = ImageConfig {
            created: rfc3339(86_400),
            architecture: "amd64".into(),
            os: "linux".into(),
            config: RunConfig {
                entrypoint: Some(vec!["/usr/bin/x".into()]),
                ..Default::default()
            },
            rootfs: RootFs {
                kind: String::new(),
                diff_ids: vec![],
            },
            history: vec![],
        };
        (d, Image::new(config, vec![layer]))
    }

    #[test]
    fn archive_blobs_match_their_digests() {
        let (d, img) = image(b"binary");
        let path = d.path().join("x.oci.tar");
        img.write_archive("example.org/x:1", 86_400, &path).unwrap();
        let v = verify(&path).unwrap();
        assert_eq!(v.digest, img.digest());
        assert_eq!(v.reference, "example.org/x:1");
        assert_eq!(v.config["rootfs"]["diff_ids"][0], img.layers[0].diff_id.as_str());
        assert_eq!(v.config["config"]["Entrypoint"][0], "/usr/bin/x");
        assert_eq!(v.config["created"], "1970-01-02T00:00:00Z");

        // A blob whose bytes changed no longer matches its name: verify must notice.
        let layer_hex = img.layers[0].digest.trim_start_matches("sha256:").to_string();
        let mut a = tar::Archive::new(fs::File::open(&path).unwrap());
        let data = a
            .entries()
            .unwrap()
            .map(Result::unwrap)
            .find(|e| e.path().unwrap().ends_with(&layer_hex))
            .unwrap()
            .raw_file_position();
        let mut raw = fs::read(&path).unwrap();
        raw[data as usize + 20] ^= 0xff;
        fs::write(&path, &raw).unwrap();
        let e = verify(&path).unwrap_err().to_string();
        assert!(e.contains(&format!("blobs/sha256/{layer_hex} holds")), "{e}");
    }

    #[test]
    fn same_inputs_same_archive() {
        // Build twice from separate copies of the same files: the digest and every byte of
        // the archive are equal; a changed file changes the digest.
        let (d1, a) = image(b"binary");
        let (d2, b) = image(b"binary");
        let (_d3, c) = image(b"binary2");
        assert_eq!(a.digest(), b.digest());
        assert_ne!(a.digest(), c.digest());
        a.write_archive("r/x:1", 7, &d1.path().join("a.tar")).unwrap();
        b.write_archive("r/x:1", 7, &d2.path().join("b.tar")).unwrap();
        assert_eq!(
            fs::read(d1.path().join("a.tar")).unwrap(),
            fs::read(d2.path().join("b.tar")).unwrap()
        );
    }

    #[test]
    fn rfc3339_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_767_225_599), "2025-12-31T23:59:59Z");
    }
}
