//! sha256 digests in the `sha256:<hex>` form OCI descriptors use, of bytes in memory or of a
//! stream as it is written.

use std::io::{self, Write};

use sha2::{Digest as _, Sha256};

/// `sha256:<hex>` of `bytes`.
pub fn of(bytes: &[u8]) -> String {
    format(Sha256::digest(bytes).as_slice())
}

fn format(hash: &[u8]) -> String {
    let mut s = String::with_capacity(7 + 64);
    s.push_str("sha256:");
    for b in hash {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// A writer that hashes and counts what passes through it on the way to `inner`: a layer's
/// diff_id (the uncompressed tar) and its digest (the gzip) come from one pass.
pub struct Hashing<W> {
    inner: W,
    hash: Sha256,
    len: u64,
}

impl<W: Write> Hashing<W> {
    /// Wraps `inner`.
    pub fn new(inner: W) -> Self {
        Self {
            inner,
            hash: Sha256::new(),
            len: 0,
        }
    }

    /// The writer, the `sha256:<hex>` of everything written and its length.
    pub fn finish(self) -> (W, String, u64) {
        (self.inner, format(self.hash.finalize().as_slice()), self.len)
    }
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hash.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streamed_equals_in_memory() {
        // The empty string's sha256 is well known; a streamed digest must equal the direct one.
        assert_eq!(
            of(b""),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        let mut h = Hashing::new(Vec::new());
        h.write_all(b"hello ").unwrap();
        h.write_all(b"world").unwrap();
        let (out, d, n) = h.finish();
        assert_eq!(out, b"hello world");
        assert_eq!(n, 11);
        assert_eq!(d, of(b"hello world"));
    }
}
