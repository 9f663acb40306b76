//! Lists read from storage, with selectors applied and pages filled with matching items.

use cozyplane_storage::{KeyValue, ListOptions, Revision};
use serde_json::Value;

use super::Resource;
use crate::errors::{ApiError, Result};
use crate::registry::selector::{FieldSelector, LabelSelector};

/// Options of a list.
#[derive(Clone, Debug, Default)]
pub struct ListParams {
    /// Read at this revision exactly (`resourceVersionMatch=Exact` or a paged list at X).
    pub revision: Option<Revision>,
    /// Require the store to have reached at least this revision (`NotOlderThan`).
    pub min_revision: Option<Revision>,
    /// Any revision will do (`resourceVersion=0`): the watch cache answers as it stands.
    pub any_revision: bool,
    /// Page size.
    pub limit: Option<u64>,
    /// Continue token.
    pub continue_token: Option<String>,
    /// Label filter.
    pub labels: LabelSelector,
    /// Field filter.
    pub fields: FieldSelector,
}

/// One page of a list: objects as JSON trees, or (`ListPage<Bytes>`, what the HTTP layer
/// sends) as their encoded JSON.
#[derive(Clone, Debug)]
pub struct ListPage<T = Value> {
    /// Matching objects, with `resourceVersion` set.
    pub items: Vec<T>,
    /// Revision of the snapshot.
    pub revision: Revision,
    /// Next-page token.
    pub continue_token: Option<String>,
    /// Items after this page (only without selectors).
    pub remaining: Option<u64>,
}

/// The most keys one storage read asks for while filling a filtered page (Kubernetes' bound).
const MAX_READ: u64 = 10_000;

/// A list read from storage (not the watch cache) with selectors applied, for any [`Resource`]:
/// the generic store and the test stand-in's unstructured store share it.
///
/// A page holds `limit` matching items whenever that many remain: with selectors, storage is
/// read again after a page of mostly non-matching keys (each read asking for twice as many keys
/// as the last, as Go's store does) until the page is full or the collection ends. The continue
/// token points after the last key scanned, so the next page neither repeats nor skips a key,
/// and every read of one list is at the same revision (the first read's, which the tokens carry).
pub async fn list_from_storage<R: Resource + ?Sized>(
    r: &R,
    ns: Option<&str>,
    p: &ListParams,
) -> Result<ListPage> {
    list_from_storage_as(r, ns, p, |kv| {
        let v = r.decode(&kv.value, kv.mod_revision)?;
        Ok((p.labels.matches_object(&v) && p.fields.matches_object(&v)).then_some(v))
    })
    .await
}

/// [`list_from_storage`] with each stored item decoded and filtered by `each` as soon as it is
/// read (`None`: it does not match `p`'s selectors), so a list of encoded items never holds the
/// JSON trees of all of them at once, and the watch cache can answer with the bytes it keeps.
pub async fn list_from_storage_as<R: Resource + ?Sized, T>(
    r: &R,
    ns: Option<&str>,
    p: &ListParams,
    each: impl Fn(&KeyValue) -> Result<Option<T>>,
) -> Result<ListPage<T>> {
    let err = |e| ApiError::from_storage(r.info(), "", e);
    if let Some(min) = p.min_revision {
        let cur = r.storage().current_revision().await.map_err(err)?;
        if cur < min {
            return Err(err(cozyplane_storage::Error::FutureRevision {
                requested: min,
                current: cur,
            }));
        }
    }
    let prefix = r.prefix(ns);
    let limit = p.limit.filter(|l| *l > 0);
    let filtered = !p.labels.is_empty() || !p.fields.is_empty();
    let mut opts = ListOptions {
        revision: p.revision,
        limit,
        continue_token: p.continue_token.clone(),
    };
    let mut items = Vec::new();
    let mut revision = None;
    loop {
        let listed = r.storage().list(&prefix, &opts).await.map_err(err)?;
        let rev = *revision.get_or_insert(listed.revision);
        for (scanned, kv) in listed.items.iter().enumerate() {
            if limit.is_some_and(|l| items.len() as u64 >= l) {
                // The page is full inside this read: resume after the last key scanned.
                let last = &listed.items[scanned - 1].key;
                return Ok(ListPage {
                    items,
                    revision: rev,
                    continue_token: Some(cozyplane_storage::continue_after(&prefix, last, rev)),
                    remaining: None,
                });
            }
            if let Some(item) = each(kv)? {
                items.push(item);
            }
        }
        let full = limit.is_some_and(|l| items.len() as u64 >= l);
        if listed.continue_token.is_none() || full {
            return Ok(ListPage {
                items,
                revision: rev,
                // Without selectors every key read is an item, so storage's count holds.
                remaining: if filtered { None } else { listed.remaining },
                continue_token: listed.continue_token,
            });
        }
        opts.continue_token = listed.continue_token;
        opts.limit = opts.limit.map(|l| (l * 2).min(MAX_READ).max(l));
    }
}
