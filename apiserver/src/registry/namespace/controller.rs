//! The namespace controller of a standalone server: a namespace marked for deletion loses every
//! namespaced object of every kind of ours, then its `kubernetes` finalizer, and is gone.
//!
//! Kubernetes' namespace controller does this in kube-controller-manager; with no cluster behind
//! a standalone server, the server does it itself. Every step is idempotent (a delete of what is
//! already gone is fine, the finalizer is dropped only once nothing is left), so two servers on
//! one etcd may both run it. Objects that carry finalizers of their own are deleted (marked) and
//! waited for: the namespace goes once they are gone.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::{FINALIZER, Namespace, Strategy};
use crate::errors::Result;
use crate::registry::cache::{Change, WatchCache};
use crate::registry::store::{DeleteOptions, Deleted, ListParams};
use crate::registry::{Resource, Store};

/// How often namespaces are looked at while one is still terminating (objects with finalizers
/// of their own are waited for), and otherwise at the latest.
const RETRY: Duration = Duration::from_millis(500);
const RESYNC: Duration = Duration::from_secs(10);

/// Runs the controller until the task is aborted: `namespaces` is the namespace store, `cache`
/// its watch cache (a change wakes the controller), `kinds` the kinds whose objects it deletes.
pub fn start(
    namespaces: Arc<Store<Strategy>>,
    cache: Arc<WatchCache>,
    kinds: Vec<Arc<dyn Resource>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut changes = None;
        loop {
            if changes.is_none() {
                changes = cache.subscribe(None, None, false).await.ok().map(|s| s.3);
            }
            let pending = match sweep(&namespaces, &kinds).await {
                Ok(pending) => pending,
                Err(e) => {
                    tracing::warn!(error = %e.message, "namespace controller");
                    true
                }
            };
            let wait = if pending { RETRY } else { RESYNC };
            let closed = match changes.as_mut() {
                Some(rx) => tokio::select! {
                    closed = next_change(rx) => closed,
                    () = tokio::time::sleep(wait) => false,
                },
                None => {
                    tokio::time::sleep(RETRY).await;
                    false
                }
            };
            if closed {
                changes = None;
            }
        }
    })
}

/// Waits for a namespace to change (a missed message counts as one); `true` once the cache's
/// channel is closed. Progress notes are skipped: the cache broadcasts one every second, and a
/// sweep lists every namespace from storage.
async fn next_change(rx: &mut tokio::sync::broadcast::Receiver<Change>) -> bool {
    use tokio::sync::broadcast::error::RecvError;
    loop {
        match rx.recv().await {
            Ok(Change::Progress { .. }) => {}
            Ok(_) | Err(RecvError::Lagged(_)) => return false,
            Err(RecvError::Closed) => return true,
        }
    }
}

/// One pass over every terminating namespace; `true` if one is still waiting.
async fn sweep(namespaces: &Store<Strategy>, kinds: &[Arc<dyn Resource>]) -> Result<bool> {
    let page = namespaces.list(None, &ListParams::default()).await?;
    let mut pending = false;
    for ns in &page.items {
        if !super::is_terminating(ns) || !has_finalizer(ns) {
            continue;
        }
        let name = ns
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if empty(name, kinds).await? {
            namespaces
                .finalize(None, name, |n: &mut Namespace| {
                    if let Some(f) = n.0.spec.as_mut().and_then(|s| s.finalizers.as_mut()) {
                        f.retain(|f| f != FINALIZER);
                    }
                })
                .await?;
            tracing::info!(namespace = name, "namespace finalized");
        } else {
            pending = true;
        }
    }
    Ok(pending)
}

fn has_finalizer(ns: &Value) -> bool {
    ns.pointer("/spec/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| f.iter().any(|f| f == FINALIZER))
}

/// Deletes every object in namespace `ns`; `true` if none is left.
async fn empty(ns: &str, kinds: &[Arc<dyn Resource>]) -> Result<bool> {
    let mut left = false;
    for kind in kinds.iter().filter(|k| k.info().namespaced) {
        let page = kind.list(Some(ns), &ListParams::default()).await?;
        for obj in &page.items {
            let name = obj
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            match kind.delete(Some(ns), name, &DeleteOptions::default()).await {
                Ok(Deleted::Gone(_)) => {}
                Ok(Deleted::Marked(_)) => left = true,
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(!left)
}
