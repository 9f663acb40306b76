//! Live migration's relays on the two nodes of a migrating VM (issue 27, item 2;
//! `bpf/lib/migrate.h`).
//!
//! A VM's Ports are held by its source launcher (the Port's `spec.node`) and, while KubeVirt
//! migrates it, prepared for its target launcher on another node (`spec.migrationTarget`,
//! written by the target's ADD, which wires the target's endpoint relaying to the source from
//! its first packet). This task watches this node's Ports (`spec.node=<this node>`) and keeps
//! the relays of the attachments here in step with them:
//!
//! * a Port with a `migrationTarget` on another node: the holder's endpoint here relays to the
//!   target's node (`SDN_EP_F_MIGRATING`, `sdn_migrations`), so the VM gets its traffic
//!   wherever it runs during the cutover;
//! * a Port without one (the cutover moved it here, or the migration failed and the source kept
//!   it): the holder's endpoint stops relaying.
//!
//! The source's endpoint after the cutover is left relaying: the Port left this node's
//! selection (the revocation feature severs what is left of it), and the copies of what other
//! nodes still send here reach the VM until their watches catch up; the source launcher's DEL
//! removes it. Every node's own watch (`core/watch`) writes the other nodes' migrations into
//! `sdn_mig_peers`, for overlay trust.

use std::net::IpAddr;
use std::sync::Arc;

use cozyplane_apis::v1alpha1::Port;
use futures::StreamExt as _;
use futures::future::BoxFuture;
use kube::api::Api;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};

use crate::core::api::ApiClients;
use crate::core::cni::AgentState;
use crate::core::feature::{Core, Feature, FeatureError, spawned};

/// What the relay of Port `p`'s attachments here should be: `(holder pod, relay to)`.
pub fn relay_of(p: &Port, me: &str) -> (String, Option<IpAddr>) {
    let holder = format!("{}/{}", p.spec.pod_namespace, p.spec.pod_name);
    let to = p
        .spec
        .migration_target
        .as_ref()
        .filter(|t| t.node != me)
        .and_then(|t| t.node_ip.parse().ok());
    (holder, to)
}

async fn apply(api: &ApiClients, state: &AgentState, p: &Port) {
    let Some(name) = p.metadata.name.as_deref() else {
        return;
    };
    if p.metadata.deletion_timestamp.is_some() || p.workload().is_none() {
        return;
    }
    let (holder, to) = relay_of(p, &api.node);
    match state.relay_port(name, Some(&holder), to) {
        Ok(0) => {}
        Ok(n) => {
            match to {
                Some(node) => tracing::info!(port = %name, %node, attachments = n,
                    "live migration: relaying the VM's traffic to its target's node"),
                None => tracing::info!(port = %name, attachments = n,
                    "live migration over: the VM's endpoint here is the only one"),
            }
            if let Err(e) = state.save_records().await {
                tracing::warn!(port = %name, "live migration relay: {e}");
            }
        }
        Err(e) => {
            tracing::warn!(port = %name, "live migration relay: {e}");
            state.sync_error("migrate");
        }
    }
}

/// Watches this node's Ports forever (see the module docs).
pub async fn run(api: ApiClients, state: Arc<AgentState>) {
    let cfg = watcher::Config::default().fields(&format!("spec.node={}", api.node));
    let mut events = watcher::watcher(Api::<Port>::all(api.sdn.clone()), cfg)
        .default_backoff()
        .boxed();
    tracing::info!("watching this node's Ports for live migrations");
    while let Some(ev) = events.next().await {
        match ev {
            Ok(Event::InitApply(p) | Event::Apply(p)) => apply(&api, &state, &p).await,
            Ok(_) => {}
            Err(e) => tracing::warn!("port watch: {e}"),
        }
    }
}

/// Live migration's relays (see the module docs).
#[derive(Debug, Default)]
pub struct Migrate;

impl Feature for Migrate {
    fn name(&self) -> &'static str {
        "migrate"
    }

    fn start(self: Box<Self>, core: Core) -> BoxFuture<'static, Result<(), FeatureError>> {
        spawned(run(core.api, core.pods))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_relays_to_a_target_on_another_node_only() {
        let mut p: Port = serde_json::from_value(serde_json::json!({
            "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "Port",
            "metadata": {"name": "v100.10-0-0-2"},
            "spec": {"vpcRef": {"namespace": "t", "name": "v"}, "ip": "10.0.0.2",
                     "node": "n1", "nodeIP": "192.0.2.1", "podNamespace": "t", "podName": "src",
                     "migrationTarget": {"node": "n2", "nodeIP": "192.0.2.2",
                                         "podNamespace": "t", "podName": "dst"}}
        }))
        .unwrap();
        assert_eq!(
            relay_of(&p, "n1"),
            ("t/src".into(), Some("192.0.2.2".parse().unwrap()))
        );
        assert_eq!(relay_of(&p, "n2").1, None, "the target's own relay is its ADD's");
        p.spec.migration_target = None;
        assert_eq!(relay_of(&p, "n1"), ("t/src".into(), None));
    }
}
