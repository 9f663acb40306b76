//! The etcd v3 backend, through `etcd-client`.
//!
//! Every call is one etcd request: writes are etcd transactions that compare revisions (the
//! compare-and-swap kube-apiserver does on etcd), lists are range reads, and a watch is one etcd
//! watch kept alive by a task (`watch.rs`) that reconnects after etcd restarts and resumes from
//! the last revision it delivered. `convert.rs` translates between the store's types and etcd's.
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
    Certificate, Client, CompactionOptions, Compare as EtcdCompare, CompareOp, ConnectOptions, GetOptions,
    Identity, PutOptions, SortOrder, SortTarget, TlsOptions, Txn as EtcdTxn, TxnOp, TxnOpResponse,
};
use tokio::sync::mpsc;

mod convert;
mod lease;
mod members;
mod outcome;
mod watch;

use convert::{etcd_txn, header_revision, read_error, to_kv, txn_response};
use members::{Failure, Kind, Members};
use watch::Watcher;

use crate::{
    Compare, Error, KeyValue, ListOptions, ListResult, Result, Revision, Storage, Summary, Txn, TxnResponse,
    WatchOptions, WatchStream, prefix_end, token,
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
