//! [`Storage::hold`](crate::Storage::hold) on etcd: the key is bound to an etcd lease of the
//! hold's TTL and renewed by lease keep-alives. A keep-alive is not a write, so holding the key
//! leaves etcd's revision still; the key disappears by itself (a delete event) when the holder
//! stops renewing.
//!
//! A key written by the portable compare-and-swap scheme (`hold.rs`: no lease, its expiry in the
//! value, as servers before this one wrote it) is honoured until its expiry and then replaced.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Compare as EtcdCompare, CompareOp, PutOptions, Txn as EtcdTxn, TxnOp};
use tokio::sync::Mutex;

use super::EtcdStore;
use super::members::{Failure, Kind};
use crate::{Result, hold};

/// The lease this process holds a key with.
#[derive(Clone, Debug)]
struct Held {
    key: String,
    holder: String,
    lease: i64,
}

/// The keys this store holds for its process (leader election holds one).
#[derive(Clone, Default)]
pub(super) struct Holds(Arc<Mutex<Vec<Held>>>);

impl EtcdStore {
    pub(super) async fn hold_with_lease(&self, key: &str, holder: &str, ttl: Duration) -> Result<bool> {
        let mut holds = self.holds.0.lock().await;
        if let Some(i) = holds.iter().position(|h| h.key == key && h.holder == holder) {
            let lease = holds[i].lease;
            if self.renew(key, holder, lease).await? {
                return Ok(true);
            }
            holds.swap_remove(i);
            // Lapsed or taken: campaign again below, as any candidate does.
        }
        match self.campaign(key, holder, ttl).await? {
            Some(lease) => {
                holds.push(Held {
                    key: key.into(),
                    holder: holder.into(),
                    lease,
                });
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Keeps `lease` alive; `true` if it still binds `key` with `holder`'s value.
    async fn renew(&self, key: &str, holder: &str, lease: i64) -> Result<bool> {
        // `keep_alive` sends one keep-alive and reads its answer: that is the renewal. A lease
        // etcd no longer knows (it lapsed) comes back as `LeaseKeepAliveError`.
        // A keep-alive is safe to send again: it is retried like a read.
        let kept = self
            .members
            .call(Kind::Read, |c| async move {
                c.client.lease_client().keep_alive(lease).await.map(|_| ())
            })
            .await;
        match kept {
            Ok(()) => {}
            Err(Failure::Answered(etcd_client::Error::LeaseKeepAliveError(_))) => return Ok(false),
            Err(f) => return Err(f.into_error()),
        }
        // A range read, not a write: is the key still the one this lease made?
        let resp = self.range(key.to_string(), None, Kind::Read).await?;
        Ok(resp
            .kvs()
            .first()
            .is_some_and(|kv| kv.lease() == lease && kv.value() == holder.as_bytes()))
    }

    /// Takes `key` for `holder` with a new lease of `ttl` if nobody holds it; the lease, or
    /// `None` if somebody does.
    async fn campaign(&self, key: &str, holder: &str, ttl: Duration) -> Result<Option<i64>> {
        let resp = self.range(key.to_string(), None, Kind::Read).await?;
        let guard = match resp.kvs().first() {
            // Our own campaign whose answer was lost (its member died): the holder is this
            // process's alone, so the lease is ours to keep alive.
            Some(kv) if kv.lease() != 0 && kv.value() == holder.as_bytes() => return Ok(Some(kv.lease())),
            // Bound to a live lease (ours lapsed, or another holder's): it goes when that does.
            Some(kv) if kv.lease() != 0 => return Ok(None),
            Some(kv) => {
                let (_, lapsed) = hold::holder_of(kv.value());
                if !lapsed {
                    return Ok(None);
                }
                EtcdCompare::mod_revision(key, CompareOp::Equal, kv.mod_revision())
            }
            None => EtcdCompare::create_revision(key, CompareOp::Equal, 0),
        };
        // etcd counts lease TTLs in whole seconds. A grant sent twice leaves a lease that
        // binds nothing and expires after `ttl`: it is retried like a read.
        let secs = ttl.as_secs().max(1) as i64;
        let lease = self
            .members
            .call(Kind::Read, |c| async move {
                c.client.lease_client().grant(secs, None).await
            })
            .await
            .map_err(Failure::into_error)?
            .id();
        let put = TxnOp::put(key, holder, Some(PutOptions::new().with_lease(lease)));
        let txn = EtcdTxn::new().when([guard]).and_then([put]);
        // An unknown outcome fails this round; the next one finds the key (above) if it applied.
        let won = self
            .members
            .call(Kind::Write, |c| {
                let txn = txn.clone();
                async move { c.kv.clone().txn(txn).await }
            })
            .await
            .map_err(Failure::into_error)?
            .succeeded();
        if won {
            Ok(Some(lease))
        } else {
            // Best effort: an unrevoked lease binds nothing and expires after `ttl` anyway.
            if let Some((_, c)) = self.members.pick(&[]) {
                let _ = c.client.lease_client().revoke(lease).await;
            }
            Ok(None)
        }
    }
}
