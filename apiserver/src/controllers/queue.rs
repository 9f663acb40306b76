//! A de-duplicating work queue: an item queued again before its turn is worked once.

use std::collections::HashSet;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::mpsc;

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
