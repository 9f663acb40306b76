//! The task behind one watch stream: one etcd watch on a member that answers, moved to another
//! member when its own goes down, and resumed from the last revision it delivered.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{EventType, WatchOptions as EtcdWatchOptions};
use tokio::sync::mpsc;

use super::convert::{header_revision, to_kv};
use super::members::{self, Members};
use crate::progress::ProgressTicker;
use crate::{Error, Event, Result, Revision, WatchOptions, prefix_end};

/// The task behind one watch stream.
pub(super) struct Watcher {
    pub(super) members: Arc<Members>,
    pub(super) key: String,
    pub(super) opts: WatchOptions,
    /// Every event up to here has been delivered.
    pub(super) last: Revision,
    pub(super) tx: mpsc::Sender<Result<Event>>,
}

/// How a connection to etcd's watch ended.
enum End {
    /// The consumer is gone, or was sent its final error.
    Done,
    /// The connection broke: watch again from `last`, after a pause.
    Reconnect,
    /// The member went down: watch again from `last` on another member, at once.
    Switch,
}

impl Watcher {
    pub(super) async fn run(mut self) {
        let mut backoff = Duration::from_millis(50);
        loop {
            match self.connection().await {
                End::Done => return,
                End::Switch => {
                    tracing::debug!(key = %self.key, last = self.last, "etcd watch moving to another member");
                    backoff = Duration::from_millis(50);
                }
                End::Reconnect => {
                    if self.tx.is_closed() {
                        return;
                    }
                    tracing::debug!(key = %self.key, last = self.last, "etcd watch reconnecting");
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        _ = self.tx.closed() => return,
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                }
            }
        }
    }

    async fn connection(&mut self) -> End {
        let mut wopts = EtcdWatchOptions::new()
            .with_start_revision(self.last as i64 + 1)
            .with_prev_key();
        if self.opts.prefix {
            wopts = wopts.with_range(prefix_end(self.key.as_bytes()));
        }
        let Some((member, conn)) = self.members.pick(&[]) else {
            return End::Reconnect;
        };
        // A frozen member sends no RST: the health check marking it down ends this connection.
        let down = member.went_down();
        tokio::pin!(down);
        let mut wc = conn.watch.clone();
        let mut stream = tokio::select! {
            s = wc.watch(self.key.as_str(), Some(wopts)) => match s {
                Ok(s) => s,
                Err(_) => return End::Reconnect,
            },
            _ = &mut down => return End::Switch,
            _ = tokio::time::sleep(members::ATTEMPT_TIMEOUT) => return End::Reconnect,
            _ = self.tx.closed() => return End::Done,
        };
        let mut tick = ProgressTicker::new(self.opts.progress_interval);
        loop {
            tokio::select! {
                _ = &mut down => return End::Switch,
                msg = stream.message() => {
                    let Ok(Some(resp)) = msg else { return End::Reconnect };
                    if resp.canceled() {
                        // etcd 3.4 answers a compacted start revision with a cancel and then
                        // leaves the stream open: this is the end of the watch, not a pause.
                        if resp.compact_revision() > 0 {
                            let gone = Error::Gone { requested: self.last, compacted: resp.compact_revision() as Revision };
                            let _ = self.tx.send(Err(gone)).await;
                            return End::Done;
                        }
                        return End::Reconnect;
                    }
                    if resp.created() {
                        continue;
                    }
                    if resp.events().is_empty() {
                        // A progress notification. etcd before 3.4.25 / 3.5.8 can send one
                        // while a watcher that fell behind still has events to deliver
                        // (etcd-io/etcd#15220; Debian ships 3.4.23), so the resume point stays
                        // at the last delivered event: after a reconnect the stream re-reads
                        // from there, which costs nothing if the notification was true and
                        // loses nothing if it was early. Consumers get the revision as reported.
                        let rev = header_revision(resp.header()).max(self.last);
                        if self.opts.progress_interval.is_some()
                            && self.tx.send(Ok(Event::Progress { revision: rev })).await.is_err()
                        {
                            return End::Done;
                        }
                        continue;
                    }
                    let mut newest = self.last;
                    for ev in resp.events() {
                        let item = match convert(ev) {
                            Ok(e) => e,
                            Err(e) => {
                                let _ = self.tx.send(Err(e)).await;
                                return End::Done;
                            }
                        };
                        newest = newest.max(item.revision());
                        if item.revision() <= self.last {
                            continue;
                        }
                        if self.tx.send(Ok(item)).await.is_err() {
                            return End::Done;
                        }
                    }
                    self.last = newest;
                }
                _ = tick.tick() => {
                    if stream.request_progress().await.is_err() {
                        return End::Reconnect;
                    }
                }
                _ = self.tx.closed() => return End::Done,
            }
        }
    }
}

fn convert(ev: &etcd_client::Event) -> Result<Event> {
    let kv = ev
        .kv()
        .cloned()
        .ok_or_else(|| Error::internal("etcd watch event without a key"))?;
    let prev = ev.prev_kv().cloned().map(to_kv).transpose()?;
    let kv = to_kv(kv)?;
    Ok(match ev.event_type() {
        EventType::Put => Event::Put { kv, prev },
        EventType::Delete => Event::Delete {
            revision: kv.mod_revision,
            key: kv.key,
            prev,
        },
    })
}
