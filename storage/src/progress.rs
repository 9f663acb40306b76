use std::time::Duration;

use tokio::time::{Instant, Interval, MissedTickBehavior, interval_at};

/// Paces the progress notifications of one watch. Without an interval it never fires, so a
/// `select!` branch on [`ProgressTicker::tick`] costs nothing for watches that asked for none.
pub(crate) struct ProgressTicker(Option<Interval>);

impl ProgressTicker {
    pub(crate) fn new(every: Option<Duration>) -> Self {
        Self(every.map(|p| {
            let mut t = interval_at(Instant::now() + p, p);
            // A consumer that stalls gets one late notification, not a burst.
            t.set_missed_tick_behavior(MissedTickBehavior::Delay);
            t
        }))
    }

    pub(crate) async fn tick(&mut self) {
        match self.0.as_mut() {
            Some(t) => {
                t.tick().await;
            }
            None => std::future::pending().await,
        }
    }
}
