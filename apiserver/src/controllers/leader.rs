//! Leader election over the store: a lease key holding `<holder> <expiry ms>`, taken and renewed
//! with compare-and-swap transactions (so it works the same on etcd and on the embedded store,
//! where the only candidate wins at once).

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use cozyplane_storage::{Compare, Storage, Txn};

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

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

impl Elector {
    /// A candidate with a random identity.
    pub fn new(storage: Arc<dyn Storage>) -> Self {
        Self {
            storage,
            id: uuid::Uuid::new_v4().to_string(),
        }
    }

    /// Takes or renews the lease; `true` while this candidate leads.
    pub async fn try_lead(&self) -> bool {
        let value = Bytes::from(format!("{} {}", self.id, now_ms() + LEASE.as_millis()));
        let cond = match self.storage.get(LEASE_KEY).await {
            Ok(kv) => {
                let text = String::from_utf8_lossy(&kv.value).into_owned();
                let (holder, expiry) = text.split_once(' ').unwrap_or(("", "0"));
                let expired = expiry.parse::<u128>().unwrap_or(0) < now_ms();
                if holder != self.id && !expired {
                    return false;
                }
                Compare::ModRevision(LEASE_KEY.into(), kv.mod_revision)
            }
            Err(cozyplane_storage::Error::NotFound { .. }) => Compare::Absent(LEASE_KEY.into()),
            Err(_) => return false,
        };
        self.storage
            .txn(Txn::new().when(cond).put(LEASE_KEY, value))
            .await
            .is_ok_and(|r| r.succeeded)
    }

    /// Returns once this candidate holds the lease (renewing it at most every [`RENEW`]).
    pub async fn wait_leader(&self) {
        loop {
            if self.try_lead().await {
                return;
            }
            tokio::time::sleep(RENEW).await;
        }
    }
}
