//! A de-duplicating work queue: an item queued again before its turn is worked once.

use std::collections::HashSet;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{mpsc, watch};

use crate::errors::Result;

/// What a controller does with one queued item.
#[async_trait]
pub trait Reconcile<W>: Send + Sync {
    /// Brings the object `w` names to its desired state.
    async fn reconcile(&self, w: &W) -> Result<()>;
}

/// The sending side, shared by the event handlers.
pub struct Queue<W> {
    tx: mpsc::UnboundedSender<W>,
    pending: Mutex<HashSet<W>>,
}

impl<W: Clone + Eq + Hash + Send + 'static> Queue<W> {
    /// A queue and the receiver its worker reads.
    pub fn new() -> (Self, mpsc::UnboundedReceiver<W>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (
            Self {
                tx,
                pending: Mutex::default(),
            },
            rx,
        )
    }

    /// Queues `w` unless it is already waiting.
    pub fn add(&self, w: W) {
        let fresh = self
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(w.clone());
        if fresh {
            let _ = self.tx.send(w);
        }
    }

    /// The worker took `w`: a change from now on queues it again.
    pub fn taken(&self, w: &W) {
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(w);
    }

    /// Queues `w` after `delay` (a retry, or a deadline such as a grace period).
    pub fn add_after(self: &std::sync::Arc<Self>, w: W, delay: Duration)
    where
        W: Sync,
    {
        let q = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            q.add(w);
        });
    }
}

/// How long a reconcile that met a newer object waits before it runs again: long enough for
/// the watch to bring that object into the mirrors (a status derived from an older copy is
/// refused until then, so running again at once would only spin), short against `retry`.
const STALE_RETRY: Duration = Duration::from_millis(20);

/// Works `queue` one item at a time while `leader` says this replica leads: a stale read is
/// queued again after [`STALE_RETRY`], any other failure after `retry`. Returns when the queue or the leader
/// channel closes.
pub async fn work<W, R>(
    queue: &std::sync::Arc<Queue<W>>,
    mut rx: mpsc::UnboundedReceiver<W>,
    mut leader: watch::Receiver<bool>,
    r: &R,
    retry: Duration,
) where
    W: Clone + Eq + Hash + Send + Sync + std::fmt::Debug + 'static,
    R: Reconcile<W>,
{
    while let Some(w) = rx.recv().await {
        if leader.wait_for(|l| *l).await.is_err() {
            return;
        }
        queue.taken(&w);
        if let Err(e) = r.reconcile(&w).await {
            if e.is_stale() {
                queue.add_after(w, STALE_RETRY);
                continue;
            }
            tracing::warn!(work = ?w, error = %e.message, "reconcile failed; retrying");
            queue.add_after(w, retry);
        }
    }
}
