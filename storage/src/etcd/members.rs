//! The etcd cluster's members, one connection each, and the failover every request goes through.
//!
//! `etcd-client` balances one channel over all endpoints and keeps sending a share of the
//! requests to a member that is down. Here every member has a connection of its own, and:
//!
//! * **A request goes to a member that answers.** It prefers the member that served the last
//!   request; members that are known to be down are tried only when no other is left.
//! * **A request that was never sent** (its connection could not be made, or etcd refused it
//!   before acting on it: `etcdserver: no leader`, `too many requests`) is retried on another
//!   member at once. While no member has a leader (an election, or quorum lost) the request is
//!   retried for [`ELECTION_WAIT`] and then fails with a clear reason.
//! * **A request whose outcome is unknown** (sent, then the connection died, the member froze or
//!   etcd gave up waiting for its leader) is retried only when it is a read ([`Kind::Read`],
//!   [`Kind::List`]); a write returns [`Failure::Unknown`] and the caller decides (the store
//!   re-runs its compare-guarded transaction and checks whether the first attempt applied:
//!   `outcome.rs`). Which failure is which is `classify.rs`'s job.
//! * **Members are health-checked** every [`CHECK_INTERVAL`](check::CHECK_INTERVAL) with etcd's
//!   `Status` call (local to the member, no consensus). A member that does not answer within
//!   [`CHECK_TIMEOUT`](check::CHECK_TIMEOUT) is marked down, which also abandons the requests in
//!   flight on it (a frozen member sends no RST, so nothing else would end them); it is used
//!   again once it answers. The checks and the member list syncs are `check.rs`.
//! * **The members are learned from etcd**: `MemberList`, re-read every
//!   [`SYNC_INTERVAL`](check::SYNC_INTERVAL) and soon after a member goes down, as etcd's Go
//!   client does with auto-sync. The configured endpoints are only the seed, unless discovery is
//!   turned off.
//!
//! Every connection asks etcd to require a leader (`hasleader` metadata): a member cut off from
//! the quorum refuses requests at once, and cancels its watches, instead of serving them stale
//! or hanging.

use std::future::Future;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use etcd_client::{Client, ConnectOptions, KvClient, WatchClient};
use tokio::sync::watch;
use tokio::time::Instant;

mod check;
mod classify;

use check::maintain;
use classify::{Class, classify, is_connect_error, short};

use crate::{Error, Result};

/// How long a unary read or write waits for one member before it is tried elsewhere (a read) or
/// its outcome is checked (a write). An etcd whose leader died can hold a proposal for several
/// seconds before it says so.
pub(super) const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a request keeps retrying while members answer only "no leader" or cannot be
/// reached: an election takes one to two seconds; after that the quorum is lost.
pub(super) const ELECTION_WAIT: Duration = Duration::from_secs(3);
/// The pause before the members that all failed are tried again.
const ROUND_PAUSE: Duration = Duration::from_millis(100);

/// What a member answered to its last health check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Health {
    /// It answers and has a leader.
    Up,
    /// It answers but has no leader (an election, or it is cut off from the quorum).
    Leaderless,
    /// It does not answer.
    Down,
}

/// The clients of one member's connection.
#[derive(Clone)]
pub(super) struct Conn {
    pub client: Client,
    pub kv: KvClient,
    pub watch: WatchClient,
}

/// One etcd member.
pub(super) struct Member {
    /// Its client URL.
    pub url: String,
    conn: RwLock<Option<Arc<Conn>>>,
    health: watch::Sender<Health>,
}

impl Member {
    fn new(url: String) -> Arc<Self> {
        Arc::new(Self {
            url,
            conn: RwLock::new(None),
            health: watch::Sender::new(Health::Down),
        })
    }

    fn conn(&self) -> Option<Arc<Conn>> {
        self.conn
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    pub(super) fn health(&self) -> Health {
        *self.health.borrow()
    }

    /// Sets the health; `true` if the member was not down and now is.
    fn set_health(&self, h: Health) -> bool {
        let mut went_down = false;
        self.health.send_if_modified(|cur| {
            if *cur == h {
                return false;
            }
            went_down = h == Health::Down;
            tracing::info!(member = %self.url, from = ?*cur, to = ?h, "etcd member health changed");
            *cur = h;
            true
        });
        went_down
    }

    /// Resolves when the member is marked down after this call (never if it is removed).
    pub(super) fn went_down(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.health.subscribe();
        async move {
            while rx.changed().await.is_ok() {
                if *rx.borrow_and_update() == Health::Down {
                    return;
                }
            }
            std::future::pending::<()>().await;
        }
    }
}

/// What a request does, which decides what may be retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// A unary read: retried on any failure but an answer.
    Read,
    /// A range read that may be large: as `Read`, with a longer wait per member.
    List,
    /// A write: retried only when it was not sent.
    Write,
}

/// Why a request failed.
#[derive(Debug)]
pub(super) enum Failure {
    /// etcd answered with an error that retrying does not change (a compacted revision, a
    /// permission denied, …).
    Answered(etcd_client::Error),
    /// A write was sent and what became of it is unknown.
    Unknown(String),
    /// No member served the request in time.
    Unavailable(String),
}

impl Failure {
    /// The storage error, for a failure that needs no mapping of etcd's answer.
    pub(super) fn into_error(self) -> Error {
        match self {
            Failure::Answered(e) => Error::unavailable(e),
            Failure::Unknown(m) => Error::unavailable(format!("the write's outcome is unknown: {m}")),
            Failure::Unavailable(m) => Error::unavailable(m),
        }
    }
}

/// The member set and the failover; see the [module documentation](self).
pub(super) struct Members {
    set: RwLock<Arc<[Arc<Member>]>>,
    preferred: RwLock<Option<Arc<Member>>>,
    opts: ConnectOptions,
    pub(super) request_timeout: Duration,
    dial_timeout: Duration,
    discover: bool,
    max_response: usize,
}

impl Members {
    /// Connects to the seed endpoints, learns the members, checks them once and starts the
    /// background health checks. Fails if no member answers within `dial_timeout`.
    pub(super) async fn connect(
        seeds: &[String],
        opts: ConnectOptions,
        request_timeout: Duration,
        dial_timeout: Duration,
        discover: bool,
        max_response: usize,
    ) -> Result<Arc<Self>> {
        if seeds.is_empty() {
            return Err(Error::unavailable("no etcd endpoint is configured"));
        }
        let members = Arc::new(Self {
            set: RwLock::new(seeds.iter().cloned().map(Member::new).collect()),
            preferred: RwLock::new(None),
            opts: opts.with_require_leader(true),
            request_timeout,
            dial_timeout,
            discover,
            max_response,
        });
        let errors = members.check().await;
        if members.all().iter().all(|m| m.health() == Health::Down) {
            return Err(Error::unavailable(format!(
                "no etcd endpoint answered: {}",
                errors.join("; ")
            )));
        }
        if discover {
            // The configured endpoints are a seed; a failure here is retried in the background.
            if let Err(e) = members.sync().await {
                tracing::warn!(error = %e, "reading etcd's member list failed");
            }
        }
        tokio::spawn(maintain(Arc::downgrade(&members)));
        Ok(members)
    }

    /// Every member.
    pub(super) fn all(&self) -> Arc<[Arc<Member>]> {
        self.set
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The connection of a member that answers, for calls that do their own retrying (watches).
    pub(super) fn pick(&self, skip: &[Arc<Member>]) -> Option<(Arc<Member>, Arc<Conn>)> {
        self.candidates(skip)
            .into_iter()
            .find_map(|m| m.conn().map(|c| (m, c)))
    }

    /// The members to try, best first: the preferred one if it is up, the others that are up,
    /// those without a leader, and only then those that are down. `skip` were tried already.
    fn candidates(&self, skip: &[Arc<Member>]) -> Vec<Arc<Member>> {
        let preferred = self
            .preferred
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        // The common case, without sorting: the member that served last is up.
        if skip.is_empty()
            && let Some(p) = preferred.as_ref().filter(|p| p.health() == Health::Up)
        {
            return vec![p.clone()];
        }
        let mut all: Vec<Arc<Member>> = self
            .all()
            .iter()
            .filter(|m| !skip.iter().any(|s| Arc::ptr_eq(s, m)))
            .cloned()
            .collect();
        let rank = |m: &Arc<Member>| {
            let first = preferred.as_ref().is_some_and(|p| Arc::ptr_eq(p, m));
            match m.health() {
                Health::Up if first => 0,
                Health::Up => 1,
                Health::Leaderless => 2,
                Health::Down => 3,
            }
        };
        all.sort_by_key(rank);
        all
    }

    fn prefer(&self, m: &Arc<Member>) {
        let current = self
            .preferred
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if current.as_ref().is_some_and(|p| Arc::ptr_eq(p, m)) {
            return;
        }
        drop(current);
        *self
            .preferred
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(m.clone());
    }

    /// Runs `f` on a member, failing over as the [module documentation](self) says, within the
    /// request timeout.
    pub(super) async fn call<T, F, Fut>(&self, kind: Kind, f: F) -> Result<T, Failure>
    where
        F: FnMut(Arc<Conn>) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        self.call_within(kind, self.request_timeout, f).await
    }

    /// As [`call`](Self::call), within `timeout`.
    pub(super) async fn call_within<T, F, Fut>(
        &self,
        kind: Kind,
        timeout: Duration,
        mut f: F,
    ) -> Result<T, Failure>
    where
        F: FnMut(Arc<Conn>) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let start = Instant::now();
        let deadline = start + timeout;
        let per_attempt = match kind {
            Kind::List => (self.request_timeout / 2).max(ATTEMPT_TIMEOUT),
            Kind::Read | Kind::Write => ATTEMPT_TIMEOUT,
        };
        let mut tried: Vec<Arc<Member>> = Vec::new();
        // Whether every failure so far said the request was not acted on: then the call gives
        // up after ELECTION_WAIT instead of the whole timeout.
        let mut only_refused = true;
        // The last failure per member, for the error message.
        let mut failures: Vec<(String, String)> = Vec::new();
        loop {
            let now = Instant::now();
            if now >= deadline || (only_refused && now >= start + ELECTION_WAIT) {
                let members: Vec<String> = failures.iter().map(|(u, why)| format!("{u}: {why}")).collect();
                let what = if only_refused && !failures.is_empty() {
                    "etcd has no quorum: no member has a leader or can be reached"
                } else {
                    "no etcd member served the request"
                };
                return Err(Failure::Unavailable(format!(
                    "{what} within {:.1?} ({})",
                    now - start,
                    members.join("; ")
                )));
            }
            let Some(member) = self.candidates(&tried).into_iter().next() else {
                // Every member failed this round: pause, then go round again.
                tried.clear();
                tokio::time::sleep_until((now + ROUND_PAUSE).min(deadline)).await;
                continue;
            };
            tried.push(member.clone());
            let Some(conn) = member.conn() else {
                note(&mut failures, &member.url, "not connected".into());
                continue;
            };
            let down = member.went_down();
            let until = (now + per_attempt).min(deadline);
            let outcome = tokio::select! {
                r = f(conn) => Some(r),
                _ = down => None,
                _ = tokio::time::sleep_until(until) => None,
            };
            let e = match outcome {
                Some(Ok(v)) => {
                    self.prefer(&member);
                    return Ok(v);
                }
                Some(Err(e)) => e,
                None => {
                    let why = format!("no answer in {:.1?}", Instant::now() - now);
                    only_refused = false;
                    if kind == Kind::Write {
                        return Err(Failure::Unknown(format!("{}: {why}", member.url)));
                    }
                    note(&mut failures, &member.url, why);
                    continue;
                }
            };
            note(&mut failures, &member.url, short(&e));
            match classify(&e) {
                Class::Final => return Err(Failure::Answered(e)),
                Class::NotSent => {
                    // A refused connection is as good as a failed health check.
                    if member.health() != Health::Down && is_connect_error(&e) {
                        member.set_health(Health::Down);
                    }
                }
                Class::NoLeader => {
                    if member.health() == Health::Up {
                        member.set_health(Health::Leaderless);
                    }
                }
                Class::Unknown => {
                    only_refused = false;
                    if kind == Kind::Write {
                        return Err(Failure::Unknown(format!("{}: {}", member.url, short(&e))));
                    }
                }
            }
        }
    }
}

/// Notes `why` as the last failure of the member at `url`.
fn note(failures: &mut Vec<(String, String)>, url: &str, why: String) {
    match failures.iter_mut().find(|(u, _)| u == url) {
        Some(f) => f.1 = why,
        None => failures.push((url.to_string(), why)),
    }
}
