//! The etcd v3 backend, through `etcd-client`.
//!
//! Every call is one etcd request: writes are etcd transactions that compare revisions (the
//! compare-and-swap kube-apiserver does on etcd), lists are range reads, and a watch is one etcd
//! watch kept alive by a task that reconnects after etcd restarts and resumes from the last
//! revision it delivered.
//!
//! Every request goes through the failover of [`members`]: one connection per etcd member, the
//! members learned from etcd, health-checked in the background, a request sent again on another
//! member when that is safe. A write whose outcome is unknown (sent, then its member died) is
//! settled by `outcome.rs`: sent again under its own compare, and if the compare then fails,
//! the write is recognised as ours from etcd's history.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use etcd_client::{
    Certificate, Client, CompactionOptions, Compare as EtcdCompare, CompareOp, ConnectOptions, DeleteOptions,
    EventType, GetOptions, Identity, PutOptions, SortOrder, SortTarget, TlsOptions, Txn as EtcdTxn, TxnOp,
    TxnOpResponse, WatchOptions as EtcdWatchOptions,
};
use tokio::sync::mpsc;

mod lease;
mod members;
mod outcome;

use members::{Failure, Kind, Members};

use crate::progress::ProgressTicker;
use crate::{
    Compare, Error, Event, KeyValue, ListOptions, ListResult, Op, Result, Revision, Storage, Summary, Txn,
    TxnResponse, WatchOptions, WatchStream, prefix_end, token,
};

/// How to reach etcd.
#[derive(Clone, Debug)]
pub struct Config {
    /// Client URLs, e.g. `https://10.0.0.1:2379`. A URL without a scheme uses TLS when a CA or
    /// a client certificate is configured.
    pub endpoints: Vec<String>,
    /// PEM CA bundle that signs etcd's serving certificate.
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate, for etcd's `--client-cert-auth`.
    pub cert_file: Option<PathBuf>,
    /// PEM key of the client certificate.
    pub key_file: Option<PathBuf>,
    /// etcd user, when etcd authentication is enabled.
    pub username: Option<String>,
    /// Password of `username`.
    pub password: Option<String>,
    /// Deadline of every request.
    pub request_timeout: Duration,
    /// Deadline of establishing a connection.
    pub dial_timeout: Duration,
    /// Learn the cluster's members from etcd (`MemberList`, re-read every 30 s) and use their
    /// advertised client URLs; `endpoints` are then only the seed. Turn it off when the
    /// advertised URLs cannot be reached from the server (then exactly `endpoints` are used).
    pub discover_members: bool,
}

impl Config {
    /// Plain-text access to the given endpoints, with default timeouts.
    pub fn new(endpoints: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            ca_file: None,
            cert_file: None,
            key_file: None,
            username: None,
            password: None,
            request_timeout: Duration::from_secs(10),
            dial_timeout: Duration::from_secs(5),
            discover_members: true,
        }
    }
}

/// The etcd backend; see the [module documentation](self).
#[derive(Clone)]
pub struct EtcdStore {
    members: Arc<Members>,
    holds: lease::Holds,
}

/// The largest response we accept. gRPC's 4 MiB default is far below a list of a few thousand
/// objects; etcd itself caps requests (1.5 MiB by default), responses only by memory.
const MAX_RESPONSE_BYTES: usize = 2 << 30;

impl EtcdStore {
    /// Connect to etcd. Fails if no endpoint answers within the dial timeout.
    ///
    /// The store checks every member in the background from then on: drop every clone of it
    /// (and every watch stream) to stop that.
    pub async fn connect(config: Config) -> Result<Self> {
        let mut opts = ConnectOptions::new()
            .with_timeout(config.request_timeout)
            .with_connect_timeout(config.dial_timeout)
            .with_keep_alive(Duration::from_secs(10), Duration::from_secs(5));
        if let (Some(user), Some(password)) = (&config.username, &config.password) {
            opts = opts.with_user(user.clone(), password.clone());
        }
        if config.ca_file.is_some() || config.cert_file.is_some() {
            let read = |p: &PathBuf| {
                std::fs::read(p).map_err(|e| Error::unavailable(format!("reading {}: {e}", p.display())))
            };
            let mut tls = TlsOptions::new();
            if let Some(ca) = &config.ca_file {
                tls = tls.ca_certificate(Certificate::from_pem(read(ca)?));
            }
            match (&config.cert_file, &config.key_file) {
                (Some(cert), Some(key)) => tls = tls.identity(Identity::from_pem(read(cert)?, read(key)?)),
                (None, None) => {}
                _ => {
                    return Err(Error::unavailable(
                        "an etcd client certificate needs both cert and key files",
                    ));
                }
            }
            opts = opts.with_tls(tls);
        }
        let members = Members::connect(
            &config.endpoints,
            opts,
            config.request_timeout,
            config.dial_timeout,
            config.discover_members,
            MAX_RESPONSE_BYTES,
        )
        .await?;
        Ok(Self {
            members,
            holds: lease::Holds::default(),
        })
    }

    /// A client of a member that answers, for callers that need etcd features beyond the
    /// trait; `None` while no member does. It has no failover of its own.
    pub fn client(&self) -> Option<Client> {
        self.members.pick(&[]).map(|(_, c)| c.client.clone())
    }

    /// The client URLs of the members in use (learned from etcd unless discovery is off).
    pub fn members(&self) -> Vec<String> {
        self.members.all().iter().map(|m| m.url.clone()).collect()
    }

    /// One etcd transaction of `txn`, with its failover; [`Failure::Unknown`] if it was sent
    /// and its outcome is unknown.
    async fn txn_once(&self, txn: &Txn) -> Result<TxnResponse, Failure> {
        let etcd = etcd_txn(txn);
        let resp = self
            .members
            .call(Kind::Write, |c| {
                let etcd = etcd.clone();
                async move { c.kv.clone().txn(etcd).await }
            })
            .await?;
        txn_response(txn, &resp).map_err(|e| Failure::Unavailable(e.to_string()))
    }

    /// A read with failover, its error mapped by [`read_error`].
    async fn range(
        &self,
        key: String,
        opts: Option<GetOptions>,
        kind: Kind,
    ) -> Result<etcd_client::GetResponse> {
        self.members
            .call(kind, |c| {
                let (key, opts) = (key.clone(), opts.clone());
                async move { c.kv.clone().get(key, opts).await }
            })
            .await
            .map_err(|f| match f {
                Failure::Answered(e) => read_error(&e, 0, false),
                other => other.into_error(),
            })
    }
}

/// The etcd transaction of `txn`: its puts and deletes return the items they replace, and when
/// a compare fails, every compared key is read.
fn etcd_txn(txn: &Txn) -> EtcdTxn {
    let compares: Vec<EtcdCompare> = txn
        .compares
        .iter()
        .map(|c| match c {
            Compare::Exists(k) => EtcdCompare::create_revision(k.as_str(), CompareOp::Greater, 0),
            Compare::Absent(k) => EtcdCompare::create_revision(k.as_str(), CompareOp::Equal, 0),
            Compare::ModRevision(k, r) => EtcdCompare::mod_revision(k.as_str(), CompareOp::Equal, *r as i64),
        })
        .collect();
    let ops: Vec<TxnOp> = txn
        .ops
        .iter()
        .map(|op| match op {
            Op::Put { key, value } => TxnOp::put(
                key.as_str(),
                value.to_vec(),
                Some(PutOptions::new().with_prev_key()),
            ),
            Op::Delete { key } => TxnOp::delete(key.as_str(), Some(DeleteOptions::new().with_prev_key())),
        })
        .collect();
    let reads: Vec<TxnOp> = txn.compares.iter().map(|c| TxnOp::get(c.key(), None)).collect();
    EtcdTxn::new().when(compares).and_then(ops).or_else(reads)
}

/// etcd's answer to [`etcd_txn`] as a [`TxnResponse`].
fn txn_response(txn: &Txn, resp: &etcd_client::TxnResponse) -> Result<TxnResponse> {
    let mut out = TxnResponse {
        succeeded: resp.succeeded(),
        revision: header_revision(resp.header()),
        current: Vec::new(),
        prev: Vec::new(),
    };
    for (i, r) in resp.op_responses().into_iter().enumerate() {
        match r {
            TxnOpResponse::Put(mut p) => out.prev.push(p.take_prev_key().map(to_kv).transpose()?),
            TxnOpResponse::Delete(mut d) => {
                out.prev
                    .push(d.take_prev_kvs().into_iter().next().map(to_kv).transpose()?);
            }
            TxnOpResponse::Get(mut g) => {
                let item = g.take_kvs().into_iter().next().map(to_kv).transpose()?;
                out.current.push((txn.compares[i].key().to_string(), item));
            }
            TxnOpResponse::Txn(_) => return Err(Error::internal("etcd answered a nested transaction")),
        }
    }
    Ok(out)
}

fn to_kv(kv: etcd_client::KeyValue) -> Result<KeyValue> {
    let (create_revision, mod_revision) = (kv.create_revision() as Revision, kv.mod_revision() as Revision);
    let (key, value) = kv.into_key_value();
    let key = String::from_utf8(key).map_err(|_| Error::internal("etcd returned a non-UTF-8 key"))?;
    Ok(KeyValue {
        key,
        value: Bytes::from(value),
        create_revision,
        mod_revision,
    })
}

fn header_revision(h: Option<&etcd_client::ResponseHeader>) -> Revision {
    h.map_or(0, |h| h.revision() as Revision)
}

/// Map an etcd read error; `requested` is the revision the read asked for.
fn read_error(e: &etcd_client::Error, requested: Revision, from_token: bool) -> Error {
    let msg = e.to_string();
    if msg.contains("required revision has been compacted") {
        // etcd does not say where history starts; 0 marks "unknown".
        if from_token {
            Error::Expired {
                requested,
                compacted: 0,
            }
        } else {
            Error::Gone {
                requested,
                compacted: 0,
            }
        }
    } else if msg.contains("required revision is a future revision") {
        Error::FutureRevision {
            requested,
            current: 0,
        }
    } else {
        Error::unavailable(msg)
    }
}

#[async_trait]
impl Storage for EtcdStore {
    async fn get(&self, key: &str) -> Result<KeyValue> {
        let mut resp = self.range(key.to_string(), None, Kind::Read).await?;
        match resp.take_kvs().into_iter().next() {
            Some(kv) => to_kv(kv),
            None => Err(Error::NotFound { key: key.into() }),
        }
    }

    async fn list(&self, prefix: &str, opts: &ListOptions) -> Result<ListResult> {
        let (revision, start, from_token) = match &opts.continue_token {
            Some(t) => {
                let c = token::decode(prefix, t)?;
                (Some(c.revision), c.start, true)
            }
            None => (opts.revision.filter(|r| *r > 0), prefix.to_string(), false),
        };
        let mut get = GetOptions::new().with_range(prefix_end(prefix.as_bytes()));
        if let Some(rev) = revision {
            get = get.with_revision(rev as i64);
        }
        if let Some(limit) = opts.limit.filter(|l| *l > 0) {
            get = get.with_limit(limit as i64);
        }
        let read = self
            .members
            .call(Kind::List, |c| {
                let (start, get) = (start.clone(), get.clone());
                async move { c.kv.clone().get(start, Some(get)).await }
            })
            .await;
        let mut resp = match read {
            Ok(r) => r,
            Err(Failure::Answered(e)) => {
                let mut err = read_error(&e, revision.unwrap_or(0), from_token);
                if let Error::FutureRevision { current, .. } = &mut err {
                    *current = self.current_revision().await.unwrap_or(0);
                }
                return Err(err);
            }
            Err(f) => return Err(f.into_error()),
        };
        let revision = revision.unwrap_or_else(|| header_revision(resp.header()));
        let (more, count) = (resp.more(), resp.count() as u64);
        let items = resp
            .take_kvs()
            .into_iter()
            .map(to_kv)
            .collect::<Result<Vec<_>>>()?;
        let continue_token = match items.last() {
            Some(last) if more => Some(token::encode(prefix, &last.key, revision)),
            _ => None,
        };
        let remaining = continue_token
            .as_ref()
            .map(|_| count.saturating_sub(items.len() as u64));
        Ok(ListResult {
            items,
            revision,
            continue_token,
            remaining,
        })
    }

    /// One range at `revision`: the newest key by `mod_revision` (keys only) and etcd's count
    /// of the whole range. etcd reads the range inside its own process to sort it; nothing but
    /// one key crosses the wire.
    async fn summary(&self, prefix: &str, revision: Revision) -> Result<Summary> {
        let get = GetOptions::new()
            .with_range(prefix_end(prefix.as_bytes()))
            .with_revision(revision as i64)
            .with_sort(SortTarget::Mod, SortOrder::Descend)
            .with_limit(1)
            .with_keys_only();
        let read = self
            .members
            .call(Kind::List, |c| {
                let get = get.clone();
                async move { c.kv.clone().get(prefix, Some(get)).await }
            })
            .await;
        let resp = match read {
            Ok(r) => r,
            Err(Failure::Answered(e)) => {
                let mut err = read_error(&e, revision, false);
                if let Error::FutureRevision { current, .. } = &mut err {
                    *current = self.current_revision().await.unwrap_or(0);
                }
                return Err(err);
            }
            Err(f) => return Err(f.into_error()),
        };
        Ok(Summary {
            count: resp.count() as u64,
            newest: resp.kvs().first().map_or(0, |kv| kv.mod_revision() as Revision),
        })
    }

    /// The hot path of every API create, kept to exactly one compare-and-put: no previous value
    /// is asked for (the compare guarantees there is none) and no response is cloned.
    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue> {
        let txn = EtcdTxn::new()
            .when([EtcdCompare::create_revision(key, CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key, value.to_vec(), None)]);
        let sent = self
            .members
            .call(Kind::Write, |c| {
                let txn = txn.clone();
                async move { c.kv.clone().txn(txn).await }
            })
            .await;
        let (succeeded, rev) = match sent {
            Ok(resp) => (resp.succeeded(), header_revision(resp.header())),
            Err(Failure::Unknown(why)) => {
                let txn = Txn::new()
                    .when(Compare::Absent(key.into()))
                    .put(key, value.clone());
                let r = self.settle(&txn, why).await?;
                (r.succeeded, r.revision)
            }
            Err(f) => return Err(f.into_error()),
        };
        if !succeeded {
            return Err(Error::AlreadyExists { key: key.into() });
        }
        Ok(KeyValue {
            key: key.into(),
            value,
            create_revision: rev,
            mod_revision: rev,
        })
    }

    /// The hot path of every API update: one compare-and-put, without the generic
    /// transaction's bookkeeping. The previous item is asked for because the result names the
    /// key's create revision.
    async fn update(&self, key: &str, value: Bytes, expected: Revision) -> Result<KeyValue> {
        let txn = EtcdTxn::new()
            .when([EtcdCompare::mod_revision(key, CompareOp::Equal, expected as i64)])
            .and_then([TxnOp::put(
                key,
                value.to_vec(),
                Some(PutOptions::new().with_prev_key()),
            )])
            .or_else([TxnOp::get(key, Some(GetOptions::new().with_keys_only()))]);
        let sent = self
            .members
            .call(Kind::Write, |c| {
                let txn = txn.clone();
                async move { c.kv.clone().txn(txn).await }
            })
            .await;
        let resp = match sent {
            Ok(resp) => resp,
            Err(Failure::Unknown(why)) => {
                let txn = Txn::new()
                    .when(Compare::ModRevision(key.into(), expected))
                    .put(key, value.clone());
                let r = self.settle(&txn, why).await?;
                let revision = r.revision;
                let prev = crate::guarded_outcome(key, expected, r.succeeded, r.current, r.prev)?;
                return Ok(KeyValue {
                    key: key.into(),
                    value,
                    create_revision: prev.create_revision,
                    mod_revision: revision,
                });
            }
            Err(f) => return Err(f.into_error()),
        };
        let rev = header_revision(resp.header());
        let first = resp.op_responses().into_iter().next();
        match (resp.succeeded(), first) {
            (true, Some(TxnOpResponse::Put(p))) => {
                let create_revision = p.prev_key().map_or(rev, |kv| kv.create_revision() as Revision);
                Ok(KeyValue {
                    key: key.into(),
                    value,
                    create_revision,
                    mod_revision: rev,
                })
            }
            (false, Some(TxnOpResponse::Get(g))) => match g.kvs().first() {
                Some(kv) => Err(Error::Conflict {
                    key: key.into(),
                    expected,
                    actual: kv.mod_revision() as Revision,
                }),
                None => Err(Error::NotFound { key: key.into() }),
            },
            _ => Err(Error::internal(
                "etcd answered an update transaction out of shape",
            )),
        }
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse> {
        txn.check()?;
        match self.txn_once(&txn).await {
            Ok(r) => Ok(r),
            Err(Failure::Unknown(why)) => self.settle(&txn, why).await,
            Err(f) => Err(f.into_error()),
        }
    }

    async fn watch(&self, key: &str, opts: WatchOptions) -> Result<WatchStream> {
        let from = match opts.revision {
            Some(r) => r,
            None => self.current_revision().await?,
        };
        let (tx, rx) = mpsc::channel(1024);
        let w = Watcher {
            members: self.members.clone(),
            key: key.to_string(),
            opts,
            last: from,
            tx,
        };
        tokio::spawn(w.run());
        Ok(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx)))
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        let opts = CompactionOptions::new().with_physical();
        // Compacting twice at one revision is harmless: a retry is safe.
        let sent = self
            .members
            .call(Kind::List, |c| {
                let opts = opts.clone();
                async move { c.kv.clone().compact(revision as i64, Some(opts)).await }
            })
            .await;
        match sent {
            Ok(_) => Ok(()),
            Err(Failure::Answered(e)) => match read_error(&e, revision, false) {
                // Compacting where history already starts later is a no-op, as in the embedded store.
                Error::Gone { .. } => Ok(()),
                Error::FutureRevision { requested, .. } => Err(Error::FutureRevision {
                    requested,
                    current: self.current_revision().await.unwrap_or(0),
                }),
                other => Err(other),
            },
            Err(f) => Err(f.into_error()),
        }
    }

    async fn current_revision(&self) -> Result<Revision> {
        let resp = self
            .range("/".into(), Some(GetOptions::new().with_count_only()), Kind::Read)
            .await?;
        Ok(header_revision(resp.header()))
    }

    /// A linearizable read, which only a member in the quorum can serve (members without a
    /// leader refuse it): `Ok` while a quorum serves, within [`HEALTH_TIMEOUT`].
    async fn health(&self) -> Result<()> {
        self.members
            .call_within(Kind::Read, HEALTH_TIMEOUT, |c| async move {
                c.kv.clone()
                    .get("/", Some(GetOptions::new().with_count_only()))
                    .await
            })
            .await
            .map(|_| ())
            .map_err(Failure::into_error)
    }

    async fn hold(&self, key: &str, holder: &str, ttl: Duration) -> Result<bool> {
        self.hold_with_lease(key, holder, ttl).await
    }

    fn backend(&self) -> &'static str {
        "etcd"
    }
}

/// How long [`Storage::health`] waits for a member of the quorum to answer.
pub const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);

/// The task behind one watch stream.
struct Watcher {
    members: Arc<Members>,
    key: String,
    opts: WatchOptions,
    /// Every event up to here has been delivered.
    last: Revision,
    tx: mpsc::Sender<Result<Event>>,
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
    async fn run(mut self) {
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
