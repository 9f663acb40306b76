//! Revocation that severs: when a Port of this node is being deleted (its VPCBinding went and
//! the server reaped it, an operator deleted it, or the server found its pod gone), the pod
//! loses its right to the VPC. This task sees it first on its own watch of this node's Ports
//! (`spec.node=<this node>`), marks the pod's endpoint severed (`SDN_EP_F_SEVERED`, see
//! `bpf/lib/sever.h`: nothing passes from or to its VPC address any more, on any node, while
//! its fabric address still answers the kubelet), and only then removes the Port's
//! `sdn.cozystack.io/sever` finalizer, which lets the server finish the delete and release the
//! address and MAC. So an address is never handed to another pod while the old one can use it.
//!
//! * A terminating Port (`deletionTimestamp`, the finalizer still on) is severed and released.
//!   One without a record here (made ahead and never taken, or already torn down) is only
//!   released.
//! * A persistent Port (issue 27) taken by its workload's pod on another node leaves this
//!   node's selection: what is left of it here is severed too, but it is not revoked (its
//!   uid is not noted), so the workload may come back here.
//! * A Port gone without this agent seeing it terminate (the finalizer removed by hand, or
//!   while the agent was down): its attachments are severed at the delete event, and after a
//!   complete list (start, relist) every record naming a Port the list lacks is severed once a
//!   `GET` agrees the Port is gone (the list may predate an ADD's Port).
//! * An ADD racing the reap (it took the Port just before its delete) checks [`Severed`] after
//!   it recorded the attachment: either this task saw the record and severed it, or the ADD finds
//!   the Port's uid in [`Severed`] and fails (the pod's VPC is revoked).
//!
//! The severed flag lives in the pinned endpoint record, so it survives agent restarts; DEL
//! removes it with the record.

use std::collections::HashSet;
use std::sync::Arc;

use cozyplane_apis::v1alpha1::Port;
use futures::StreamExt as _;
use kube::api::Api;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};

use crate::core::api::{ApiClients, SEVER_FINALIZER};
use crate::core::cni::AgentState;
use futures::future::BoxFuture;

use crate::core::feature::{Core, Feature, FeatureError, spawned};

fn holds_finalizer(p: &Port) -> bool {
    p.metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|x| x == SEVER_FINALIZER))
}

/// Severs the attachments of Port `name` (its `uid` first noted in
/// [`Severed`](crate::core::api::severed::Severed), see the module
/// docs).
fn sever(api: &ApiClients, state: &AgentState, name: &str, uid: Option<&str>) {
    if let Some(uid) = uid {
        api.severed.insert(uid);
    }
    match state.sever_port(name) {
        Ok(0) => {}
        Ok(n) => {
            tracing::info!(port = %name, attachments = n, "severed: the pod's VPC address passes nothing");
        }
        Err(e) => {
            tracing::warn!(port = %name, "severing failed: {e}");
            state.sync_error("sever");
        }
    }
}

/// A terminating Port of this node: sever, then release.
async fn terminating(api: &ApiClients, state: &AgentState, p: &Port) {
    let Some(name) = p.metadata.name.as_deref() else {
        return;
    };
    sever(api, state, name, p.metadata.uid.as_deref());
    if holds_finalizer(p)
        && let Err(e) = api.release_port(name).await
    {
        // The next event or relist of the Port tries again.
        tracing::warn!(port = %name, "{e}");
        state.sync_error("sever");
    }
}

/// Whether Port `name` lives on, re-pointed at another node (a persistent Port taken there).
async fn moved_away(api: &ApiClients, name: &str) -> bool {
    match api.get_port(name).await {
        Ok(Some(p)) => p.metadata.deletion_timestamp.is_none() && p.spec.node != api.node,
        _ => false,
    }
}

/// After a complete list: records naming a Port the list lacks.
async fn orphans(api: &ApiClients, state: &AgentState, listed: &HashSet<String>) {
    for name in state.recorded_ports() {
        if listed.contains(&name) {
            continue;
        }
        match api.get_port(&name).await {
            Ok(None) => sever(api, state, &name, None),
            Ok(Some(p)) if p.metadata.deletion_timestamp.is_some() => terminating(api, state, &p).await,
            Ok(Some(_)) => {}
            Err(e) => tracing::warn!(port = %name, "{e}"),
        }
    }
}

/// Watches this node's Ports forever (see the module docs).
pub async fn run(api: ApiClients, state: Arc<AgentState>) {
    let cfg = watcher::Config::default().fields(&format!("spec.node={}", api.node));
    let mut events = watcher::watcher(Api::<Port>::all(api.sdn.clone()), cfg)
        .default_backoff()
        .boxed();
    let mut listed: HashSet<String> = HashSet::new();
    tracing::info!("watching this node's Ports for revocation");
    while let Some(ev) = events.next().await {
        match ev {
            Ok(Event::Init) => listed.clear(),
            Ok(Event::InitApply(p)) => {
                listed.extend(p.metadata.name.clone());
                if p.metadata.deletion_timestamp.is_some() {
                    terminating(&api, &state, &p).await;
                }
            }
            Ok(Event::InitDone) => orphans(&api, &state, &listed).await,
            Ok(Event::Apply(p)) => {
                if p.metadata.deletion_timestamp.is_some() {
                    terminating(&api, &state, &p).await;
                }
            }
            Ok(Event::Delete(p)) => {
                if let Some(name) = p.metadata.name.as_deref() {
                    // A workload's Port taken by its pod on another node left this node's
                    // selection without being deleted: what is left of it here is severed
                    // (never two live holders), but the Port is not revoked, so it may come
                    // back here with the workload's next pod.
                    let uid = if moved_away(&api, name).await {
                        None
                    } else {
                        p.metadata.uid.as_deref()
                    };
                    sever(&api, &state, name, uid);
                }
            }
            Err(e) => tracing::warn!("port watch: {e}"),
        }
    }
}

/// Revocation that severs (see the module docs).
#[derive(Debug, Default)]
pub struct Sever;

impl Feature for Sever {
    fn name(&self) -> &'static str {
        "sever"
    }

    fn start(self: Box<Self>, core: Core) -> BoxFuture<'static, Result<(), FeatureError>> {
        spawned(run(core.api, core.pods))
    }
}
