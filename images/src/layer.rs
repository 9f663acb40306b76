//! One image layer: the tree a `COPY` adds, written as a tarball that depends only on the
//! files' contents, modes and link targets.
//!
//! Entries are sorted by path, every parent directory has its own entry, owner and group
//! are 0 with no names, and every mtime is the same given time (the commit's,
//! SOURCE_DATE_EPOCH): the same staged files give the same bytes on any machine, and so the
//! same digest.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Component, Path, PathBuf};

use flate2::{Compression as Level, GzBuilder};

use crate::digest::Hashing;

/// Why a layer could not be made.
#[derive(Debug, thiserror::Error)]
pub enum LayerError {
    /// Reading the build context or writing the layer failed.
    #[error("{path}: {source}")]
    Io {
        /// The file concerned.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// The context holds something a layer cannot carry (a socket, a device, …).
    #[error("{0}: only regular files, directories and symbolic links can be copied")]
    FileType(PathBuf),
    /// A path that is not absolute inside the image, or that climbs out with `..`.
    #[error("{0}: not a clean absolute path inside the image")]
    Path(String),
    /// A file where a directory is needed.
    #[error("/{0} is a file in this layer, and something is copied beneath it")]
    NotADirectory(String),
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> LayerError + '_ {
    move |source| LayerError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// How the layer's tar is stored in the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Compression {
    /// gzip (`application/vnd.oci.image.layer.v1.tar+gzip`): what registries and runtimes
    /// expect.
    Gzip,
    /// The plain tar (`application/vnd.oci.image.layer.v1.tar`): faster to build, larger.
    None,
}

#[derive(Debug, Clone)]
enum Node {
    Dir { mode: u32 },
    File { mode: u32, from: PathBuf },
    Symlink { target: PathBuf },
}

/// The files of one layer, by path inside the image (without the leading `/`).
#[derive(Debug, Default, Clone)]
pub struct Tree {
    nodes: BTreeMap<String, Node>,
}

impl Tree {
    /// Adds `src` as `COPY src dest` does: a directory's contents go into `dest`, a file
    /// becomes `dest` (or `dest/<name>` when `dest` ends with `/`); files keep their modes,
    /// links their targets; missing parents are created with mode 0755.
    pub fn copy(&mut self, src: &Path, dest: &str) -> Result<(), LayerError> {
        let meta = fs::symlink_metadata(src).map_err(io_err(src))?;
        let dest_key = clean(dest)?;
        if meta.is_dir() {
            if !dest_key.is_empty() {
                self.insert(
                    &dest_key,
                    Node::Dir {
                        mode: meta.permissions().mode() & 0o7777,
                    },
                )?;
            }
            self.copy_dir(src, &dest_key)
        } else {
            let key = if dest.ends_with('/') {
                let name = src
                    .file_name()
                    .ok_or_else(|| LayerError::Path(src.display().to_string()))?;
                join(&dest_key, &name.to_string_lossy())
            } else {
                dest_key
            };
            if key.is_empty() {
                return Err(LayerError::Path(dest.to_string()));
            }
            self.insert(&key, node(src, &meta)?)
        }
    }

    fn copy_dir(&mut self, dir: &Path, key: &str) -> Result<(), LayerError> {
        for entry in fs::read_dir(dir).map_err(io_err(dir))? {
            let entry = entry.map_err(io_err(dir))?;
            let path = entry.path();
            let meta = fs::symlink_metadata(&path).map_err(io_err(&path))?;
            let child = join(key, &entry.file_name().to_string_lossy());
            self.insert(&child, node(&path, &meta)?)?;
            if meta.is_dir() {
                self.copy_dir(&path, &child)?;
            }
        }
        Ok(())
    }

    fn insert(&mut self, key: &str, node: Node) -> Result<(), LayerError> {
        let mut parent = String::new();
        for part in key.split('/').take(key.split('/').count() - 1) {
            parent = join(&parent, part);
            match self.nodes.get(&parent) {
                Some(Node::Dir { .. }) => {}
                Some(_) => return Err(LayerError::NotADirectory(parent)),
                None => {
                    self.nodes.insert(parent.clone(), Node::Dir { mode: 0o755 });
                }
            }
        }
        self.nodes.insert(key.to_string(), node);
        Ok(())
    }

    /// Whether the layer has a directory at `path` (absolute, inside the image).
    pub fn has_dir(&self, path: &str) -> bool {
        match clean(path) {
            Ok(k) if k.is_empty() => true,
            Ok(k) => matches!(self.nodes.get(&k), Some(Node::Dir { .. })),
            Err(_) => false,
        }
    }

    /// Number of entries (files, directories and links).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the layer adds nothing.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The layer as a blob: its tar, compressed as asked, with every mtime `mtime`.
    pub fn write(&self, mtime: u64, compression: Compression) -> Result<Layer, LayerError> {
        let out = Path::new("<layer>");
        let (blob, diff_id, uncompressed_size) = match compression {
            Compression::Gzip => {
                // No name and mtime 0 in the gzip header: its bytes depend on the tar alone.
                let gz = GzBuilder::new().mtime(0).write(Vec::new(), Level::default());
                let (gz, diff_id, n) = self.tar(mtime, Hashing::new(gz))?;
                (gz.finish().map_err(io_err(out))?, diff_id, n)
            }
            Compression::None => {
                let (blob, diff_id, n) = self.tar(mtime, Hashing::new(Vec::new()))?;
                (blob, diff_id, n)
            }
        };
        let digest = crate::digest::of(&blob);
        Ok(Layer {
            blob,
            digest,
            diff_id,
            uncompressed_size,
            entries: self.nodes.len(),
            compression,
        })
    }

    fn tar<W: Write>(&self, mtime: u64, out: Hashing<W>) -> Result<(W, String, u64), LayerError> {
        let mut b = tar::Builder::new(out);
        for (key, node) in &self.nodes {
            let mut h = tar::Header::new_gnu();
            h.set_uid(0);
            h.set_gid(0);
            h.set_mtime(mtime);
            let path = Path::new(key);
            match node {
                Node::Dir { mode } => {
                    h.set_entry_type(tar::EntryType::Directory);
                    h.set_mode(*mode);
                    h.set_size(0);
                    b.append_data(&mut h, format!("{key}/"), io::empty())
                        .map_err(io_err(path))?;
                }
                Node::File { mode, from } => {
                    let f = fs::File::open(from).map_err(io_err(from))?;
                    let len = f.metadata().map_err(io_err(from))?.len();
                    h.set_entry_type(tar::EntryType::Regular);
                    h.set_mode(*mode);
                    h.set_size(len);
                    // A file that grows while it is read must not spill into the next header.
                    b.append_data(&mut h, key, io::Read::take(f, len))
                        .map_err(io_err(from))?;
                }
                Node::Symlink { target } => {
                    h.set_entry_type(tar::EntryType::Symlink);
                    h.set_mode(0o777);
                    h.set_size(0);
                    b.append_link(&mut h, key, target).map_err(io_err(path))?;
                }
            }
        }
        let hashing = b.into_inner().map_err(io_err(Path::new("<layer>")))?;
        Ok(hashing.finish())
    }
}

/// A layer ready to go into an image.
#[derive(Debug, Clone)]
pub struct Layer {
    /// The bytes stored as the layer's blob.
    pub blob: Vec<u8>,
    /// `sha256:` of `blob`.
    pub digest: String,
    /// `sha256:` of the uncompressed tar (the config's `rootfs.diff_ids`).
    pub diff_id: String,
    /// Size of the uncompressed tar.
    pub uncompressed_size: u64,
    /// Files, directories and links in it.
    pub entries: usize,
    /// How `blob` is stored.
    pub compression: Compression,
}

fn node(path: &Path, meta: &fs::Metadata) -> Result<Node, LayerError> {
    let ft = meta.file_type();
    let mode = meta.permissions().mode() & 0o7777;
    if ft.is_symlink() {
        Ok(Node::Symlink {
            target: fs::read_link(path).map_err(io_err(path))?,
        })
    } else if ft.is_dir() {
        Ok(Node::Dir { mode })
    } else if ft.is_file() {
        Ok(Node::File {
            mode,
            from: path.to_path_buf(),
        })
    } else {
        Err(LayerError::FileType(path.to_path_buf()))
    }
}

/// `/a/b/` → `a/b`; `/` → ``; refuses relative paths and `..`.
fn clean(path: &str) -> Result<String, LayerError> {
    let p = Path::new(path);
    if !p.is_absolute() {
        return Err(LayerError::Path(path.to_string()));
    }
    let mut parts = Vec::new();
    for c in p.components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(s) => parts.push(s.to_string_lossy().into_owned()),
            Component::ParentDir | Component::Prefix(_) => return Err(LayerError::Path(path.to_string())),
        }
    }
    Ok(parts.join("/"))
}

fn join(a: &str, b: &str) -> String {
    if a.is_empty() {
        b.to_string()
    } else {
        format!("{a}/{b}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read as _;

    fn context() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("rootfs");
        fs::create_dir_all(root.join("usr/bin")).unwrap();
        fs::write(root.join("usr/bin/tool"), b"#!binary").unwrap();
        fs::set_permissions(root.join("usr/bin/tool"), fs::Permissions::from_mode(0o755)).unwrap();
        fs::create_dir(root.join("tmp")).unwrap();
        fs::set_permissions(root.join("tmp"), fs::Permissions::from_mode(0o1777)).unwrap();
        std::os::unix::fs::symlink("tool", root.join("usr/bin/alias")).unwrap();
        d
    }

    fn entries(layer: &Layer) -> Vec<(String, u32, u64, u64, String)> {
        let mut gz = flate2::read::GzDecoder::new(&layer.blob[..]);
        let mut raw = Vec::new();
        gz.read_to_end(&mut raw).unwrap();
        assert_eq!(crate::digest::of(&raw), layer.diff_id);
        let mut a = tar::Archive::new(&raw[..]);
        a.entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let h = e.header();
                let link = e
                    .link_name()
                    .unwrap()
                    .map(|l| l.display().to_string())
                    .unwrap_or_default();
                (
                    e.path().unwrap().display().to_string(),
                    h.mode().unwrap(),
                    h.uid().unwrap(),
                    h.mtime().unwrap(),
                    link,
                )
            })
            .collect()
    }

    #[test]
    fn sorted_owned_by_root_with_one_mtime() {
        let d = context();
        let mut t = Tree::default();
        t.copy(&d.path().join("rootfs"), "/").unwrap();
        let layer = t.write(1_700_000_000, Compression::Gzip).unwrap();
        let got = entries(&layer);
        let paths: Vec<&str> = got.iter().map(|e| e.0.as_str()).collect();
        assert_eq!(
            paths,
            ["tmp/", "usr/", "usr/bin/", "usr/bin/alias", "usr/bin/tool"]
        );
        assert!(got.iter().all(|e| e.2 == 0 && e.3 == 1_700_000_000), "{got:?}");
        assert_eq!(got[0].1, 0o1777);
        assert_eq!(got[3].4, "tool");
        assert_eq!(got[4].1, 0o755);
        assert_eq!(layer.entries, 5);
    }

    #[test]
    fn same_files_same_digest_whatever_their_mtime() {
        let d = context();
        let mut t = Tree::default();
        t.copy(&d.path().join("rootfs"), "/").unwrap();
        let a = t.write(1, Compression::Gzip).unwrap();
        // Touching a file changes its mtime on disk, not the layer.
        fs::write(d.path().join("rootfs/usr/bin/tool"), b"#!binary").unwrap();
        let b = t.write(1, Compression::Gzip).unwrap();
        assert_eq!(a.digest, b.digest);
        fs::write(d.path().join("rootfs/usr/bin/tool"), b"#!other!").unwrap();
        let c = t.write(1, Compression::Gzip).unwrap();
        assert_ne!(a.digest, c.digest);
        let plain = t.write(1, Compression::None).unwrap();
        assert_eq!(plain.digest, plain.diff_id);
        assert_eq!(plain.diff_id, c.diff_id);
    }

    #[test]
    fn copy_of_a_file_and_parents() {
        let d = context();
        let mut t = Tree::default();
        t.copy(&d.path().join("rootfs/usr/bin/tool"), "/opt/x/").unwrap();
        t.copy(&d.path().join("rootfs/usr/bin/tool"), "/opt/y").unwrap();
        assert!(t.has_dir("/opt/x") && t.has_dir("/") && !t.has_dir("/opt/y"));
        assert_eq!(t.len(), 4);
        assert!(matches!(
            t.copy(&d.path().join("rootfs/usr/bin/tool"), "/opt/y/z"),
            Err(LayerError::NotADirectory(p)) if p == "opt/y"
        ));
        assert!(matches!(
            t.copy(&d.path().join("rootfs"), "/a/../b"),
            Err(LayerError::Path(_))
        ));
    }
}
