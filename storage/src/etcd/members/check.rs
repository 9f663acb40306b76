//! The background work on the member set: every member health-checked with etcd's `Status`
//! call every [`CHECK_INTERVAL`], and the member list re-read from etcd every
//! [`SYNC_INTERVAL`] (sooner after a member went down).

use std::sync::{Arc, Weak};
use std::time::Duration;

use etcd_client::Client;
use tokio::time::Instant;

use super::classify::{Class, classify};
use super::{Conn, Failure, Health, Kind, Member, Members};
use crate::{Error, Result};

/// How often every member is health-checked.
pub(super) const CHECK_INTERVAL: Duration = Duration::from_millis(500);
/// How long a health check waits for a member's answer.
pub(super) const CHECK_TIMEOUT: Duration = Duration::from_secs(1);
/// How often the member list is re-read from etcd.
pub(super) const SYNC_INTERVAL: Duration = Duration::from_secs(30);
/// The soonest the member list is re-read again after a member went down.
const SYNC_AFTER_FAILURE: Duration = Duration::from_secs(5);

impl Members {
    /// Health-checks every member at once; the errors of those that did not answer.
    pub(super) async fn check(&self) -> Vec<String> {
        let members = self.all();
        let checks = members.iter().map(|m| self.check_one(m));
        futures::future::join_all(checks)
            .await
            .into_iter()
            .flatten()
            .collect()
    }

    /// Checks one member, connecting it first if needed; its error if it did not answer.
    pub(super) async fn check_one(&self, m: &Arc<Member>) -> Option<String> {
        let conn = match m.conn() {
            Some(c) => c,
            None => match self.open(&m.url).await {
                Ok(c) => {
                    let c = Arc::new(c);
                    *m.conn.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(c.clone());
                    c
                }
                Err(e) => {
                    m.set_health(Health::Down);
                    return Some(format!("{}: {e}", m.url));
                }
            },
        };
        let mut maintenance = conn.client.maintenance_client();
        let (health, err) = match tokio::time::timeout(CHECK_TIMEOUT, maintenance.status()).await {
            Ok(Ok(s)) if s.leader() == 0 => (Health::Leaderless, None),
            Ok(Ok(_)) => (Health::Up, None),
            Ok(Err(e)) if classify(&e) == Class::NoLeader => (Health::Leaderless, None),
            Ok(Err(e)) => (Health::Down, Some(format!("{}: {e}", m.url))),
            Err(_) => (
                Health::Down,
                Some(format!("{}: no answer in {CHECK_TIMEOUT:?}", m.url)),
            ),
        };
        m.set_health(health);
        err
    }

    /// A connection to one member. With authentication this authenticates, so it needs the
    /// member to answer; without, it connects on first use.
    pub(super) async fn open(&self, url: &str) -> Result<Conn> {
        let connect = Client::connect([url], Some(self.opts.clone()));
        let client = tokio::time::timeout(self.dial_timeout, connect)
            .await
            .map_err(|_| Error::unavailable(format!("no answer in {:?}", self.dial_timeout)))?
            .map_err(Error::unavailable)?;
        Ok(Conn {
            kv: client.kv_client().max_decoding_message_size(self.max_response),
            watch: client.watch_client().max_decoding_message_size(self.max_response),
            client,
        })
    }

    /// Re-reads the member list and makes it the member set. Members that are kept keep their
    /// connection and health; a list without a started voting member changes nothing.
    pub(super) async fn sync(&self) -> Result<()> {
        let resp = self
            .call(Kind::Read, |c| async move {
                c.client.cluster_client().member_list().await
            })
            .await
            .map_err(Failure::into_error)?;
        let urls: Vec<String> = resp
            .members()
            .iter()
            .filter(|m| !m.is_learner())
            .filter_map(|m| m.client_urls().first().cloned())
            .collect();
        if urls.is_empty() {
            return Ok(());
        }
        let old = self.all();
        let same = old.len() == urls.len() && old.iter().all(|m| urls.iter().any(|u| same_url(u, &m.url)));
        if same {
            return Ok(());
        }
        let new: Arc<[Arc<Member>]> = urls
            .into_iter()
            .map(|u| {
                old.iter()
                    .find(|m| same_url(&m.url, &u))
                    .cloned()
                    .unwrap_or_else(|| Member::new(u))
            })
            .collect();
        tracing::info!(
            members = ?new.iter().map(|m| m.url.as_str()).collect::<Vec<_>>(),
            "etcd member list changed"
        );
        *self
            .set
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = new;
        // New members get a connection and a health at once.
        self.check().await;
        Ok(())
    }
}

/// Two client URLs name the same member (a seed may be written without its scheme).
pub(super) fn same_url(a: &str, b: &str) -> bool {
    let strip = |u: &str| {
        let u = u.trim_end_matches('/');
        u.split_once("://").map_or(u, |(_, rest)| rest).to_string()
    };
    strip(a) == strip(b)
}

/// The background health checks and member list syncs; ends when the store is dropped.
pub(super) async fn maintain(members: Weak<Members>) {
    let mut synced = Instant::now();
    loop {
        tokio::time::sleep(CHECK_INTERVAL).await;
        let Some(m) = members.upgrade() else { return };
        let before: Vec<Health> = m.all().iter().map(|m| m.health()).collect();
        m.check().await;
        let went_down = m
            .all()
            .iter()
            .zip(before)
            .any(|(m, h)| h != Health::Down && m.health() == Health::Down);
        let due = synced.elapsed() >= SYNC_INTERVAL || (went_down && synced.elapsed() >= SYNC_AFTER_FAILURE);
        if m.discover && due {
            if let Err(e) = m.sync().await {
                tracing::debug!(error = %e, "reading etcd's member list failed");
            }
            synced = Instant::now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_match_with_or_without_their_scheme() {
        assert!(same_url("http://127.0.0.1:2379", "127.0.0.1:2379/"));
        assert!(!same_url("http://127.0.0.1:2379", "http://127.0.0.1:2380"));
    }
}
