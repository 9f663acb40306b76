//! The embedded backend: the whole store in one `redb` file under a data directory.
//!
//! Three tables hold the state: `kv` (key → create revision, mod revision, value), `log`
//! (revision → the events of that revision, each with the value it replaced) and `meta` (the
//! current and the compacted revision). The log is the watch history and also the undo record
//! that lets a list read a past revision: the state at revision R is the current state with the
//! events after R rolled back.
//!
//! All writes go through one writer thread that takes whatever requests are waiting, applies
//! them in order in one redb write transaction (each its own revision) and commits with fsync
//! before it answers any of them: group commit, so many concurrent writers share one fsync while
//! every acknowledged write is on disk. After a commit the writer publishes the events to live
//! watches through a broadcast channel; a watch that falls behind the channel re-reads the log.

mod codec;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use tokio::sync::{broadcast, mpsc, oneshot, watch};

use crate::progress::ProgressTicker;
use crate::{
    Error, Event, KeyValue, ListOptions, ListResult, Op, Result, Revision, Storage, Txn, TxnResponse,
    WatchOptions, WatchStream, token,
};

const KV: TableDefinition<&str, &[u8]> = TableDefinition::new("kv");
const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("log");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const META_REVISION: &str = "revision";
const META_COMPACTED: &str = "compacted";

/// The file inside the data directory.
const FILE_NAME: &str = "cozyplane.redb";
/// Requests the writer folds into one commit at most.
const MAX_BATCH: usize = 1024;
/// Log entries a catching-up watch reads per step.
const CATCH_UP_CHUNK: usize = 1024;

/// Settings of the embedded store.
#[derive(Clone, Debug)]
pub struct Config {
    /// Where the store keeps its file; created if missing.
    pub data_dir: PathBuf,
    /// How many revisions of event history to keep. Older history is compacted automatically,
    /// so watches and paged lists that fall further behind than this get `Gone`/`Expired`.
    pub history: u64,
    /// Page cache size in bytes.
    pub cache_bytes: usize,
    /// Capacity of the live event channel, in commits. A watch that falls further behind
    /// re-reads the log instead.
    pub event_buffer: usize,
}

impl Config {
    /// Defaults for a data directory.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Self {
            data_dir: data_dir.into(),
            history: 100_000,
            cache_bytes: 256 << 20,
            event_buffer: 4096,
        }
    }
}

/// The committed state the writer publishes.
#[derive(Clone, Copy, Debug)]
struct Committed {
    revision: Revision,
    compacted: Revision,
}

struct Shared {
    db: Database,
    committed: watch::Sender<Committed>,
    events: broadcast::Sender<Arc<[Event]>>,
}

enum Request {
    Txn(Txn, oneshot::Sender<Result<TxnResponse>>),
    Compact(Revision, oneshot::Sender<Result<()>>),
}

/// The embedded backend; see the [module documentation](self).
pub struct EmbeddedStore {
    shared: Arc<Shared>,
    writer: Option<mpsc::UnboundedSender<Request>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl EmbeddedStore {
    /// Open (or create) the store in `config.data_dir`.
    pub async fn open(config: Config) -> Result<Self> {
        tokio::task::spawn_blocking(move || Self::open_blocking(&config))
            .await
            .map_err(Error::internal)?
    }

    fn open_blocking(config: &Config) -> Result<Self> {
        std::fs::create_dir_all(&config.data_dir).map_err(Error::unavailable)?;
        let db = Database::builder()
            .set_cache_size(config.cache_bytes)
            .create(config.data_dir.join(FILE_NAME))
            .map_err(Error::unavailable)?;
        let wtx = db.begin_write().map_err(Error::unavailable)?;
        let state = {
            wtx.open_table(KV).map_err(Error::unavailable)?;
            wtx.open_table(LOG).map_err(Error::unavailable)?;
            let mut meta = wtx.open_table(META).map_err(Error::unavailable)?;
            let get = |name| meta.get(name).map(|v| v.map(|g| g.value()));
            let revision = get(META_REVISION).map_err(Error::unavailable)?;
            let compacted = get(META_COMPACTED).map_err(Error::unavailable)?.unwrap_or(0);
            // A fresh store starts at revision 1, as etcd does, so no item is ever at 0, which the
            // API reserves for "any version".
            let revision = match revision {
                Some(r) => r,
                None => {
                    meta.insert(META_REVISION, 1).map_err(Error::unavailable)?;
                    1
                }
            };
            Committed { revision, compacted }
        };
        wtx.commit().map_err(Error::unavailable)?;

        let (events, _) = broadcast::channel(config.event_buffer.max(16));
        let shared = Arc::new(Shared {
            db,
            committed: watch::Sender::new(state),
            events,
        });
        let (tx, rx) = mpsc::unbounded_channel();
        let writer = Writer {
            shared: shared.clone(),
            state,
            history: config.history.max(1),
        };
        let thread = std::thread::Builder::new()
            .name("embedded-writer".into())
            .spawn(move || writer.run(rx))
            .map_err(Error::internal)?;
        Ok(Self {
            shared,
            writer: Some(tx),
            thread: Some(thread),
        })
    }

    async fn request<T>(&self, make: impl FnOnce(oneshot::Sender<Result<T>>) -> Request) -> Result<T> {
        let (tx, rx) = oneshot::channel();
        let writer = self
            .writer
            .as_ref()
            .ok_or_else(|| Error::unavailable("store is closed"))?;
        writer
            .send(make(tx))
            .map_err(|_| Error::unavailable("writer thread stopped"))?;
        rx.await
            .map_err(|_| Error::unavailable("writer thread stopped"))?
    }

    async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Shared) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let shared = self.shared.clone();
        tokio::task::spawn_blocking(move || f(&shared))
            .await
            .map_err(Error::internal)?
    }
}

impl Drop for EmbeddedStore {
    fn drop(&mut self) {
        // Closing the channel stops the writer after the batch in flight; joining makes the
        // file free for the next open once the last watch has let go of it.
        self.writer.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[async_trait]
impl Storage for EmbeddedStore {
    async fn get(&self, key: &str) -> Result<KeyValue> {
        let rtx = self.shared.db.begin_read().map_err(Error::unavailable)?;
        let kv = rtx.open_table(KV).map_err(Error::unavailable)?;
        match kv.get(key).map_err(Error::unavailable)? {
            Some(raw) => codec::decode_item(key, raw.value()),
            None => Err(Error::NotFound { key: key.into() }),
        }
    }

    async fn list(&self, prefix: &str, opts: &ListOptions) -> Result<ListResult> {
        let (prefix, opts) = (prefix.to_string(), opts.clone());
        self.read(move |s| list_blocking(s, &prefix, &opts)).await
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse> {
        txn.check()?;
        self.request(|tx| Request::Txn(txn, tx)).await
    }

    async fn watch(&self, key: &str, opts: WatchOptions) -> Result<WatchStream> {
        // Subscribe before reading the revision: every event after it is then either in the
        // channel or, if the channel overflows, in the log.
        let live = self.shared.events.subscribe();
        let from = opts
            .revision
            .unwrap_or_else(|| self.shared.committed.borrow().revision);
        let (tx, rx) = mpsc::channel(1024);
        let w = Watcher {
            shared: self.shared.clone(),
            key: key.to_string(),
            prefix: opts.prefix,
            last: from,
            tx,
            progress: opts.progress_interval,
        };
        tokio::spawn(w.run(live));
        Ok(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx)))
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        self.request(|tx| Request::Compact(revision, tx)).await
    }

    async fn current_revision(&self) -> Result<Revision> {
        Ok(self.shared.committed.borrow().revision)
    }

    async fn health(&self) -> Result<()> {
        if self.writer.as_ref().is_none_or(mpsc::UnboundedSender::is_closed) {
            return Err(Error::unavailable("writer thread stopped"));
        }
        let rtx = self.shared.db.begin_read().map_err(Error::unavailable)?;
        rtx.open_table(META).map_err(Error::unavailable)?;
        Ok(())
    }

    fn backend(&self) -> &'static str {
        "embedded"
    }
}

// === the writer ===

struct Writer {
    shared: Arc<Shared>,
    state: Committed,
    history: u64,
}

/// What one request of a batch answers once the batch is committed.
enum Reply {
    Txn(oneshot::Sender<Result<TxnResponse>>, Result<TxnResponse>),
    Compact(oneshot::Sender<Result<()>>, Result<()>),
}

impl Writer {
    fn run(mut self, mut rx: mpsc::UnboundedReceiver<Request>) {
        while let Some(first) = rx.blocking_recv() {
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(r) => batch.push(r),
                    Err(_) => break,
                }
            }
            self.commit(batch);
        }
    }

    fn commit(&mut self, batch: Vec<Request>) {
        let before = self.state;
        let mut events: Vec<Event> = Vec::new();
        let mut replies = Vec::with_capacity(batch.len());
        let outcome = self.apply(batch, &mut events, &mut replies);
        if let Err(e) = outcome {
            // Nothing of the batch is on disk: every request fails, and the revision is back
            // where the file has it.
            tracing::error!(error = %e, "embedded store commit failed");
            self.state = before;
            let msg = e.to_string();
            for reply in replies {
                match reply {
                    Reply::Txn(tx, _) => drop(tx.send(Err(Error::unavailable(&msg)))),
                    Reply::Compact(tx, _) => drop(tx.send(Err(Error::unavailable(&msg)))),
                }
            }
            return;
        }
        // Publish events before the revision: a watch that reads the revision and then drains
        // the channel has then seen every event up to that revision.
        if !events.is_empty() {
            let _ = self.shared.events.send(events.into());
        }
        self.shared.committed.send_replace(self.state);
        for reply in replies {
            match reply {
                Reply::Txn(tx, r) => drop(tx.send(r)),
                Reply::Compact(tx, r) => drop(tx.send(r)),
            }
        }
    }

    fn apply(
        &mut self,
        batch: Vec<Request>,
        events: &mut Vec<Event>,
        replies: &mut Vec<Reply>,
    ) -> Result<()> {
        let wtx = self.shared.db.begin_write().map_err(Error::unavailable)?;
        {
            let mut kv = wtx.open_table(KV).map_err(Error::unavailable)?;
            let mut log = wtx.open_table(LOG).map_err(Error::unavailable)?;
            for req in batch {
                match req {
                    Request::Txn(txn, tx) => {
                        let r = self.apply_txn(&mut kv, &mut log, txn, events);
                        let r = match r {
                            Ok(r) => Ok(r),
                            // A storage error aborts the whole batch.
                            Err(e @ (Error::Unavailable { .. } | Error::Internal { .. })) => {
                                replies.push(Reply::Txn(tx, Err(Error::internal("aborted"))));
                                return Err(e);
                            }
                            Err(e) => Err(e),
                        };
                        replies.push(Reply::Txn(tx, r));
                    }
                    Request::Compact(rev, tx) => {
                        let r = if rev > self.state.revision {
                            Err(Error::FutureRevision {
                                requested: rev,
                                current: self.state.revision,
                            })
                        } else {
                            self.compact(&mut log, rev)?;
                            Ok(())
                        };
                        replies.push(Reply::Compact(tx, r));
                    }
                }
            }
            // Keep the history bounded; trim in steps so one commit never deletes a huge range.
            let floor = self.state.revision.saturating_sub(self.history);
            if floor > self.state.compacted + (self.history / 8).max(64) {
                self.compact(&mut log, floor.min(self.state.compacted + 65_536))?;
            }
            let mut meta = wtx.open_table(META).map_err(Error::unavailable)?;
            meta.insert(META_REVISION, self.state.revision)
                .map_err(Error::unavailable)?;
            meta.insert(META_COMPACTED, self.state.compacted)
                .map_err(Error::unavailable)?;
        }
        wtx.commit().map_err(Error::unavailable)?;
        Ok(())
    }

    fn apply_txn(
        &mut self,
        kv: &mut redb::Table<&str, &[u8]>,
        log: &mut redb::Table<u64, &[u8]>,
        txn: Txn,
        events: &mut Vec<Event>,
    ) -> Result<TxnResponse> {
        let read = |kv: &redb::Table<&str, &[u8]>, key: &str| -> Result<Option<KeyValue>> {
            match kv.get(key).map_err(Error::unavailable)? {
                Some(raw) => codec::decode_item(key, raw.value()).map(Some),
                None => Ok(None),
            }
        };
        let mut current = Vec::with_capacity(txn.compares.len());
        let mut ok = true;
        for c in &txn.compares {
            let item = read(kv, c.key())?;
            ok &= c.holds(item.as_ref().map(|i| i.mod_revision));
            current.push((c.key().to_string(), item));
        }
        if !ok {
            return Ok(TxnResponse {
                succeeded: false,
                revision: self.state.revision,
                current,
                prev: Vec::new(),
            });
        }
        let rev = self.state.revision + 1;
        let mut changed = Vec::with_capacity(txn.ops.len());
        let mut prevs = Vec::with_capacity(txn.ops.len());
        for op in txn.ops {
            let prev = read(kv, op.key())?;
            match op {
                Op::Put { key, value } => {
                    let create = prev.as_ref().map_or(rev, |p| p.create_revision);
                    kv.insert(key.as_str(), codec::encode_item(create, rev, &value).as_slice())
                        .map_err(Error::unavailable)?;
                    let item = KeyValue {
                        key,
                        value,
                        create_revision: create,
                        mod_revision: rev,
                    };
                    changed.push(Event::Put {
                        kv: item,
                        prev: prev.clone(),
                    });
                }
                Op::Delete { key } => {
                    if prev.is_some() {
                        kv.remove(key.as_str()).map_err(Error::unavailable)?;
                        changed.push(Event::Delete {
                            key,
                            revision: rev,
                            prev: prev.clone(),
                        });
                    }
                }
            }
            prevs.push(prev);
        }
        if !changed.is_empty() {
            log.insert(rev, codec::encode_events(&changed).as_slice())
                .map_err(Error::unavailable)?;
            self.state.revision = rev;
            events.extend(changed);
        }
        Ok(TxnResponse {
            succeeded: true,
            revision: self.state.revision,
            current: Vec::new(),
            prev: prevs,
        })
    }

    /// Drop the log up to and including `rev`: afterwards the history starts after `rev`.
    fn compact(&mut self, log: &mut redb::Table<u64, &[u8]>, rev: Revision) -> Result<()> {
        if rev <= self.state.compacted {
            return Ok(());
        }
        log.retain_in(..=rev, |_, _| false).map_err(Error::unavailable)?;
        self.state.compacted = rev;
        Ok(())
    }
}

// === reads ===

fn read_committed(rtx: &redb::ReadTransaction) -> Result<Committed> {
    let meta = rtx.open_table(META).map_err(Error::unavailable)?;
    let get = |name| -> Result<u64> {
        Ok(meta
            .get(name)
            .map_err(Error::unavailable)?
            .map_or(0, |g| g.value()))
    };
    Ok(Committed {
        revision: get(META_REVISION)?,
        compacted: get(META_COMPACTED)?,
    })
}

fn list_blocking(s: &Shared, prefix: &str, opts: &ListOptions) -> Result<ListResult> {
    let rtx = s.db.begin_read().map_err(Error::unavailable)?;
    let now = read_committed(&rtx)?;
    let (revision, start, from_token) = match &opts.continue_token {
        Some(t) => {
            let c = token::decode(prefix, t)?;
            (c.revision, c.start, true)
        }
        None => (
            opts.revision.filter(|r| *r > 0).unwrap_or(now.revision),
            prefix.to_string(),
            false,
        ),
    };
    if revision > now.revision {
        return Err(Error::FutureRevision {
            requested: revision,
            current: now.revision,
        });
    }
    if revision < now.compacted {
        return Err(if from_token {
            Error::Expired {
                requested: revision,
                compacted: now.compacted,
            }
        } else {
            Error::Gone {
                requested: revision,
                compacted: now.compacted,
            }
        });
    }

    // Keys changed after `revision`, with their state at `revision` (None: absent then).
    let mut undo: BTreeMap<String, Option<KeyValue>> = BTreeMap::new();
    if revision < now.revision {
        let log = rtx.open_table(LOG).map_err(Error::unavailable)?;
        for entry in log.range(revision + 1..).map_err(Error::unavailable)? {
            let (rev, raw) = entry.map_err(Error::unavailable)?;
            for ev in codec::decode_events(rev.value(), raw.value())? {
                let (key, prev) = match ev {
                    Event::Put { kv, prev } => (kv.key, prev),
                    Event::Delete { key, prev, .. } => (key, prev),
                    Event::Progress { .. } => continue,
                };
                if key.starts_with(prefix) && key.as_str() >= start.as_str() {
                    undo.entry(key).or_insert(prev);
                }
            }
        }
    }

    let kv = rtx.open_table(KV).map_err(Error::unavailable)?;
    let mut current = kv
        .range(start.as_str()..)
        .map_err(Error::unavailable)?
        .map_while(|e| match e {
            Ok((k, v)) if k.value().starts_with(prefix) => Some(codec::decode_item(k.value(), v.value())),
            Ok(_) => None,
            Err(e) => Some(Err(Error::unavailable(e))),
        });
    let mut past = undo.into_iter().peekable();
    let limit = opts.limit.filter(|l| *l > 0).map_or(usize::MAX, |l| l as usize);
    let mut items = Vec::new();
    let mut remaining = 0u64;
    let mut next_current = current.next().transpose()?;
    loop {
        // Merge the current keys with the rolled-back ones, in key order; a rolled-back key
        // wins over the current entry of the same key.
        let take_past = match (&next_current, past.peek()) {
            (None, None) => break,
            (None, Some(_)) => true,
            (Some(_), None) => false,
            (Some(c), Some((k, _))) => k.as_str() <= c.key.as_str(),
        };
        let item = if take_past {
            let (k, v) = past.next().expect("peeked");
            if next_current.as_ref().is_some_and(|c| c.key == k) {
                next_current = current.next().transpose()?;
            }
            v
        } else {
            let c = next_current.take();
            next_current = current.next().transpose()?;
            c
        };
        let Some(item) = item else { continue };
        if items.len() < limit {
            items.push(item);
        } else {
            remaining += 1;
        }
    }
    let continue_token =
        (remaining > 0).then(|| token::encode(prefix, &items.last().expect("a full page").key, revision));
    Ok(ListResult {
        items,
        revision,
        remaining: continue_token.as_ref().map(|_| remaining),
        continue_token,
    })
}

/// Read the log after `after`: at most `CATCH_UP_CHUNK` revisions, and the committed state.
fn read_log(s: &Shared, after: Revision) -> Result<(Vec<Event>, Committed, bool)> {
    let rtx = s.db.begin_read().map_err(Error::unavailable)?;
    let now = read_committed(&rtx)?;
    if after < now.compacted {
        return Err(Error::Gone {
            requested: after,
            compacted: now.compacted,
        });
    }
    let log = rtx.open_table(LOG).map_err(Error::unavailable)?;
    let mut events = Vec::new();
    let mut n = 0;
    for entry in log.range(after + 1..).map_err(Error::unavailable)? {
        let (rev, raw) = entry.map_err(Error::unavailable)?;
        events.extend(codec::decode_events(rev.value(), raw.value())?);
        n += 1;
        if n == CATCH_UP_CHUNK {
            return Ok((events, now, true));
        }
    }
    Ok((events, now, false))
}

// === watches ===

struct Watcher {
    shared: Arc<Shared>,
    key: String,
    prefix: bool,
    /// Every event up to here has been delivered (or did not match).
    last: Revision,
    tx: mpsc::Sender<Result<Event>>,
    progress: Option<Duration>,
}

/// Why the live phase of a watch stopped.
enum Stop {
    /// The consumer dropped the stream, or an error was delivered: end the watch.
    Done,
    /// The live channel overflowed: re-read the log from `last`.
    Lagged,
}

/// The consumer is gone (or was sent a final error).
struct Closed;

impl Watcher {
    fn matches(&self, key: &str) -> bool {
        if self.prefix {
            key.starts_with(&self.key)
        } else {
            key == self.key
        }
    }

    async fn run(mut self, mut live: broadcast::Receiver<Arc<[Event]>>) {
        let mut tick = ProgressTicker::new(self.progress);
        loop {
            if self.catch_up().await.is_err() {
                return;
            }
            if let Stop::Done = self.follow(&mut live, &mut tick).await {
                return;
            }
        }
    }

    /// Deliver the log after `last` until it is exhausted.
    async fn catch_up(&mut self) -> Result<(), Closed> {
        loop {
            let shared = self.shared.clone();
            let after = self.last;
            let read = tokio::task::spawn_blocking(move || read_log(&shared, after)).await;
            let (events, more) = match read.map_err(Error::internal).and_then(|r| r) {
                Ok((events, _, more)) => (events, more),
                Err(e) => {
                    let _ = self.tx.send(Err(e)).await;
                    return Err(Closed);
                }
            };
            self.deliver(&events).await?;
            if !more {
                return Ok(());
            }
        }
    }

    async fn follow(
        &mut self,
        live: &mut broadcast::Receiver<Arc<[Event]>>,
        tick: &mut ProgressTicker,
    ) -> Stop {
        loop {
            tokio::select! {
                batch = live.recv() => match batch {
                    Ok(batch) => {
                        if self.deliver(&batch).await.is_err() {
                            return Stop::Done;
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => return Stop::Lagged,
                    Err(broadcast::error::RecvError::Closed) => {
                        let _ = self.tx.send(Err(Error::unavailable("store closed"))).await;
                        return Stop::Done;
                    }
                },
                _ = tick.tick() => {
                    // The writer publishes a commit's events before its revision, so once the
                    // channel is drained every event up to `now` has been delivered.
                    let now = self.shared.committed.borrow().revision;
                    loop {
                        match live.try_recv() {
                            Ok(batch) => {
                                if self.deliver(&batch).await.is_err() {
                                    return Stop::Done;
                                }
                            }
                            Err(broadcast::error::TryRecvError::Empty) => break,
                            Err(broadcast::error::TryRecvError::Lagged(_)) => return Stop::Lagged,
                            Err(broadcast::error::TryRecvError::Closed) => return Stop::Done,
                        }
                    }
                    self.last = self.last.max(now);
                    if self.tx.send(Ok(Event::Progress { revision: self.last })).await.is_err() {
                        return Stop::Done;
                    }
                }
                _ = self.tx.closed() => return Stop::Done,
            }
        }
    }

    /// Deliver the matching events of whole revisions (a commit, or a chunk of the log) that
    /// come after `last`, then move `last` past them.
    async fn deliver(&mut self, events: &[Event]) -> Result<(), Closed> {
        let mut newest = self.last;
        for ev in events {
            let rev = ev.revision();
            if rev <= self.last {
                continue;
            }
            newest = newest.max(rev);
            if ev.key().is_some_and(|k| self.matches(k)) && self.tx.send(Ok(ev.clone())).await.is_err() {
                return Err(Closed);
            }
        }
        self.last = newest;
        Ok(())
    }
}
