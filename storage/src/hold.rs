//! Holding a key for one process at a time: the primitive the API server's leader election
//! stands on ([`Storage::hold`](crate::Storage::hold)).
//!
//! The portable scheme, which every backend gets by default, keeps `<holder> <expiry ms>` in
//! the key and takes or renews it with a compare-and-swap transaction: every renewal is a write.
//! etcd overrides it with one of its leases (`etcd/lease.rs`), renewed by keep-alives that write
//! nothing, so a quiet cluster's revision stays still (a moving revision is what keeps caches
//! from proving a quiet resource unchanged, and it is work done for nothing).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use crate::{Compare, Error, Result, Storage, Txn};

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

/// The value the portable scheme stores: the holder and when its hold lapses.
pub(crate) fn value(holder: &str, ttl: Duration) -> Bytes {
    Bytes::from(format!("{holder} {}", now_ms() + ttl.as_millis()))
}

/// Who holds a key written by the portable scheme, and whether that hold has lapsed. A value
/// without an expiry (a lease-backed one read by this scheme) never lapses here: its lease does.
pub(crate) fn holder_of(value: &[u8]) -> (String, bool) {
    let text = String::from_utf8_lossy(value);
    match text.split_once(' ') {
        Some((holder, expiry)) => (holder.to_string(), expiry.parse::<u128>().unwrap_or(0) < now_ms()),
        None => (text.into_owned(), false),
    }
}

/// The portable scheme: takes `key` for `holder` if it is free, lapsed or already `holder`'s,
/// and pushes its expiry `ttl` ahead.
pub(crate) async fn by_compare_and_swap<S: Storage + ?Sized>(
    store: &S,
    key: &str,
    holder: &str,
    ttl: Duration,
) -> Result<bool> {
    let cond = match store.get(key).await {
        Ok(kv) => {
            let (current, lapsed) = holder_of(&kv.value);
            if current != holder && !lapsed {
                return Ok(false);
            }
            Compare::ModRevision(key.into(), kv.mod_revision)
        }
        Err(Error::NotFound { .. }) => Compare::Absent(key.into()),
        Err(e) => return Err(e),
    };
    let r = store
        .txn(Txn::new().when(cond).put(key, value(holder, ttl)))
        .await?;
    Ok(r.succeeded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_name_their_holder_and_expiry() {
        let (h, lapsed) = holder_of(&value("a", Duration::from_secs(10)));
        assert_eq!((h.as_str(), lapsed), ("a", false));
        assert_eq!(holder_of(b"b 0"), ("b".to_string(), true));
        assert_eq!(holder_of(b"c"), ("c".to_string(), false));
        assert_eq!(holder_of(b"d x"), ("d".to_string(), true));
    }
}
