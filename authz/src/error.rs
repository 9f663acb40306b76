//! Errors of this crate.

use std::path::PathBuf;

/// Why building the layers, verifying a certificate or asking the kube-apiserver failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A CA bundle file could not be read.
    #[error("reading CA bundle {path}")]
    ReadCaFile {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A CA bundle held no certificate or an invalid one.
    #[error("invalid CA bundle {origin}: {reason}")]
    InvalidCaBundle {
        /// Where the bundle came from (file path or ConfigMap key).
        origin: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A ConfigMap list value was not a JSON array of strings.
    #[error("ConfigMap key {key} is not a JSON list of strings")]
    InvalidListValue {
        /// The key.
        key: String,
        /// The JSON error.
        #[source]
        source: serde_json::Error,
    },
    /// `--requestheader-uid-headers` was given without `X-Remote-Uid`.
    #[error("--requestheader-uid-headers must include X-Remote-Uid when set")]
    UidHeadersWithoutRemoteUid,
    /// A kubeconfig could not be loaded.
    #[error("loading kubeconfig {path}")]
    Kubeconfig {
        /// The kubeconfig path.
        path: PathBuf,
        /// The kube error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// No kubeconfig was given and the in-cluster configuration is unavailable.
    #[error("no kubeconfig given and not running in a cluster")]
    InCluster(#[source] kube::config::InClusterError),
    /// Building a kube client from a configuration failed.
    #[error("building kube client")]
    Client(#[source] kube::Error),
    /// Reading the `extension-apiserver-authentication` ConfigMap failed.
    #[error("looking up ConfigMap kube-system/extension-apiserver-authentication")]
    Lookup(#[source] kube::Error),
    /// A TokenReview could not be completed.
    #[error("TokenReview request failed")]
    TokenReview(#[source] kube::Error),
    /// A SubjectAccessReview could not be completed.
    #[error("SubjectAccessReview request failed")]
    SubjectAccessReview(#[source] kube::Error),
    /// The kube-apiserver did not answer a review in time.
    #[error("{review} timed out after {seconds}s")]
    ReviewTimeout {
        /// `TokenReview` or `SubjectAccessReview`.
        review: &'static str,
        /// The timeout.
        seconds: u64,
    },
    /// A SubjectAccessReview answered both allowed and denied.
    #[error("SubjectAccessReview returned both allow and deny")]
    ContradictoryReview,
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
