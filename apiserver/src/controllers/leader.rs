//! Leader election over the store: one key held by the leader through [`Storage::hold`] (an
//! etcd lease kept alive, which writes nothing; a compare-and-swap of `<holder> <expiry ms>`
//! on the embedded store, where the only candidate wins at once).

use std::sync::Arc;
use std::time::Duration;

use cozyplane_storage::Storage;

/// The lease key.
pub const LEASE_KEY: &str = crate::registry::keys::LEASE;
/// How long a lease lasts without renewal.
pub const LEASE: Duration = Duration::from_secs(10);
/// How often the holder renews (and a candidate retries).
pub const RENEW: Duration = Duration::from_secs(2);

/// One candidate.
pub struct Elector {
    storage: Arc<dyn Storage>,
    id: String,
}

impl Elector {
    /// A candidate with a random identity.
    pub fn new(storage: Arc<dyn Storage>) -> Self {
        Self {
            storage,
            id: uuid::Uuid::new_v4().to_string(),
        }
    }

    /// Takes or renews the lease; `true` while this candidate leads. A store that cannot be
    /// reached ends the lead: the loops stop rather than act on a lease that may have lapsed.
    pub async fn try_lead(&self) -> bool {
        match self.storage.hold(LEASE_KEY, &self.id, LEASE).await {
            Ok(held) => held,
            Err(e) => {
                tracing::debug!(error = %e, "leader lease not renewed");
                false
            }
        }
    }

    /// Returns once this candidate holds the lease (retrying every [`RENEW`]).
    pub async fn wait_leader(&self) {
        loop {
            if self.try_lead().await {
                return;
            }
            tokio::time::sleep(RENEW).await;
        }
    }
}
