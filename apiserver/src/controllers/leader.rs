//! Leader election over the store: one key held by the leader through [`Storage::hold`] (an
//! etcd lease kept alive, which writes nothing; a compare-and-swap of `<holder> <expiry ms>`
//! on the embedded store, where the only candidate wins at once).
//!
//! A candidate watches the key and campaigns as soon as it is deleted (on etcd, the lapse of
//! the dead holder's lease), so a hand-over takes what was left of that lease (at most
//! [`LEASE`], plus etcd's 500 ms revocation tick), not that plus a renew period.
//!
//! Whether this process leads is the gauge [`LEADING`] (`cozyplane_controller_leader` on
//! `/metrics`), and each change is logged.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use cozyplane_storage::{Storage, WatchOptions, WatchStream};
use futures::StreamExt as _;
use prometheus_client::metrics::gauge::Gauge;

/// The lease key.
pub const LEASE_KEY: &str = crate::registry::keys::LEASE;
/// How long a lease lasts without renewal.
pub const LEASE: Duration = Duration::from_secs(10);
/// How often the holder renews (and a candidate retries).
pub const RENEW: Duration = Duration::from_secs(2);

/// `cozyplane_controller_leader`: 1 while this process holds the lease (its loops work), else 0.
/// It is the process's: servers started inside one process (tests) share it.
pub static LEADING: LazyLock<Gauge> = LazyLock::new(Gauge::default);

/// One candidate.
pub struct Elector {
    storage: Arc<dyn Storage>,
    id: String,
    /// What the last [`try_lead`](Self::try_lead) found, to log the changes.
    leading: AtomicBool,
}

impl Elector {
    /// A candidate with a random identity.
    pub fn new(storage: Arc<dyn Storage>) -> Self {
        Self {
            storage,
            id: uuid::Uuid::new_v4().to_string(),
            leading: AtomicBool::new(false),
        }
    }

    /// Takes or renews the lease; `true` while this candidate leads. A store that cannot be
    /// reached ends the lead: the loops stop rather than act on a lease that may have lapsed.
    pub async fn try_lead(&self) -> bool {
        let held = match self.storage.hold(LEASE_KEY, &self.id, LEASE).await {
            Ok(held) => held,
            Err(e) => {
                tracing::debug!(error = %e, "leader lease not renewed");
                false
            }
        };
        LEADING.set(i64::from(held));
        if self.leading.swap(held, Ordering::Relaxed) != held {
            if held {
                tracing::info!(holder = %self.id, "this replica leads the controllers");
            } else {
                tracing::info!(holder = %self.id, "this replica no longer leads the controllers");
            }
        }
        held
    }

    /// A watch of the lease key, or `None` when the store cannot start one now.
    pub async fn lapses(&self) -> Option<WatchStream> {
        self.storage.watch(LEASE_KEY, WatchOptions::default()).await.ok()
    }

    /// Waits [`RENEW`], or less: until the lease key changes (deleted when the holder's lease
    /// lapses on etcd; replaced by a new holder). A watch that ended is started again.
    pub async fn until_lapse(&self, lapses: &mut Option<WatchStream>) {
        let Some(w) = lapses.as_mut() else {
            tokio::time::sleep(RENEW).await;
            *lapses = self.lapses().await;
            return;
        };
        tokio::select! {
            () = tokio::time::sleep(RENEW) => {}
            ev = w.next() => {
                if !matches!(ev, Some(Ok(_))) {
                    *lapses = self.lapses().await;
                }
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
