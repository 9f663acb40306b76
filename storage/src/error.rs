use crate::Revision;

/// The result of a storage call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a storage call failed.
///
/// The API server maps each variant to one Kubernetes `Status`; the mapping is noted per variant.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The key does not exist (`404 NotFound`).
    #[error("key {key:?} not found")]
    NotFound {
        /// The key.
        key: String,
    },

    /// A create found the key already there (`409 AlreadyExists`).
    #[error("key {key:?} already exists")]
    AlreadyExists {
        /// The key.
        key: String,
    },

    /// The key changed since the caller read it (`409 Conflict`): re-read and retry.
    #[error("key {key:?} is at revision {actual}, not the expected {expected}")]
    Conflict {
        /// The key.
        key: String,
        /// The revision the caller expected.
        expected: Revision,
        /// The revision the key is at now.
        actual: Revision,
    },

    /// A watch or list asked for history that has been compacted (`410 Gone`, "too old
    /// resource version"): re-list from the current revision.
    #[error("revision {requested} has been compacted (history starts at {compacted})")]
    Gone {
        /// The revision asked for.
        requested: Revision,
        /// The compaction point.
        compacted: Revision,
    },

    /// A continue token's revision has been compacted (`410 Expired`): restart the list.
    #[error("continue token at revision {requested} has expired (history starts at {compacted})")]
    Expired {
        /// The token's revision.
        requested: Revision,
        /// The compaction point.
        compacted: Revision,
    },

    /// A read at a revision the store has not reached (`504 Timeout`, "too large resource
    /// version"): retry later.
    #[error("revision {requested} is ahead of the store's current revision {current}")]
    FutureRevision {
        /// The revision asked for.
        requested: Revision,
        /// The store's revision.
        current: Revision,
    },

    /// A continue token that this store did not issue for this prefix (`400 BadRequest`).
    #[error("invalid continue token: {reason}")]
    InvalidContinue {
        /// What is wrong with it.
        reason: String,
    },

    /// A transaction that no backend may apply, such as one writing a key twice (`500`: a bug in
    /// the caller).
    #[error("invalid transaction: {reason}")]
    InvalidTxn {
        /// What is wrong with it.
        reason: String,
    },

    /// The store cannot be reached or did not answer in time (`503 ServiceUnavailable` or
    /// `504 Timeout`): retry with backoff.
    #[error("storage unavailable: {message}")]
    Unavailable {
        /// What the backend said.
        message: String,
    },

    /// The store answered with something it must never answer (`500 InternalError`).
    #[error("storage internal error: {message}")]
    Internal {
        /// What happened.
        message: String,
    },
}

impl Error {
    pub(crate) fn unavailable(e: impl std::fmt::Display) -> Self {
        Error::Unavailable {
            message: e.to_string(),
        }
    }

    pub(crate) fn internal(e: impl std::fmt::Display) -> Self {
        Error::Internal {
            message: e.to_string(),
        }
    }
}
