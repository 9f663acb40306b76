//! The options' sources: this node's Ports (field selector `spec.node=<node>`: a guest is
//! answered only on the node that holds its Port) and every VPC, each kept only when it sets
//! `spec.dhcp`, published as one [`Table`] the responder threads read per request.
//!
//! Why a watch of its own and not the core's: the core's view keeps only what the CNI path
//! needs of a VPC (VNI, MTU, families) and only other nodes' Ports.

use std::sync::{Arc, RwLock};

use cozyplane_apis::v1alpha1::{Port, VPC};
use futures::{StreamExt as _, stream::BoxStream};
use kube::api::Api;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};

use super::options::{Level, Table};
use crate::core::api::ApiClients;
use crate::core::watch::{Cache, changes_live, name_of};

// Boxed: a Port is some hundred bytes larger than a VPC, and the events are few.
enum Ev {
    Port(Box<Result<Event<Port>, watcher::Error>>),
    Vpc(Box<Result<Event<VPC>, watcher::Error>>),
}

fn port_row(p: &Port) -> Option<(String, Level)> {
    Some((p.metadata.name.clone()?, Level::of(p.spec.dhcp.as_ref()?)))
}

fn vpc_row(v: &VPC) -> Option<((String, String), Level)> {
    Some((name_of(&v.metadata), Level::of(v.spec.dhcp.as_ref()?)))
}

/// Keeps `table` in line with the API until the process ends.
pub async fn run(api: ApiClients, table: Arc<RwLock<Table>>) {
    let cfg = watcher::Config::default();
    let ports = watcher::watcher(
        Api::<Port>::all(api.sdn.clone()),
        cfg.clone().fields(&format!("spec.node={}", api.node)),
    )
    .default_backoff()
    .map(|e| Ev::Port(Box::new(e)));
    let vpcs = watcher::watcher(Api::<VPC>::all(api.sdn.clone()), cfg)
        .default_backoff()
        .map(|e| Ev::Vpc(Box::new(e)));
    let streams: Vec<BoxStream<'static, Ev>> = vec![ports.boxed(), vpcs.boxed()];
    let mut events = futures::stream::select_all(streams);
    let mut port_cache: Cache<String, Level> = Cache::new();
    let mut vpc_cache: Cache<(String, String), Level> = Cache::new();
    while let Some(ev) = events.next().await {
        let changed = match &ev {
            Ev::Port(r) => changes_live(r),
            Ev::Vpc(r) => changes_live(r),
        };
        let res = match ev {
            Ev::Port(r) => (*r).map(|e| {
                port_cache.apply(e, port_row, |p| p.metadata.name.clone().unwrap_or_default());
            }),
            Ev::Vpc(r) => (*r).map(|e| vpc_cache.apply(e, vpc_row, |v| name_of(&v.metadata))),
        };
        if let Err(e) = res {
            tracing::warn!("autoconf watch: {e}");
            continue;
        }
        if changed && let Ok(mut t) = table.write() {
            *t = Table {
                ports: port_cache.live.clone(),
                vpcs: vpc_cache.live.clone(),
            };
        }
    }
}
