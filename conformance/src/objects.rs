//! What several conformance tests share: our objects as a tenant writes them, and waits that
//! watch the object (never a sleep; the deadline only turns a hang into a failure).

use std::time::Duration;

use cozyplane_apis::v1alpha1::{LocalVPCRef, Port, PortSpec, VPCPeering, VPCPeeringSpec, VPCRef};
use kube::Api;
use kube::runtime::wait::{Condition, await_condition, conditions};

/// The longest a wait may take before the test fails as hung.
pub const WAIT: Duration = Duration::from_secs(120);

/// Waits, through a watch, until `name` satisfies `cond`; returns the object.
pub async fn wait_for<K>(api: &Api<K>, name: &str, what: &str, cond: impl Condition<K>) -> K
where
    K: kube::Resource + Clone + std::fmt::Debug + k8s_openapi::serde::de::DeserializeOwned + Send + 'static,
    K::DynamicType: Default,
{
    tokio::time::timeout(WAIT, await_condition(api.clone(), name, cond))
        .await
        .unwrap_or_else(|_| panic!("{name}: never {what}"))
        .expect("watch")
        .unwrap_or_else(|| panic!("{name}: deleted while waiting for {what}"))
}

/// Waits, through a watch, until `name` (of `uid`) is gone.
pub async fn wait_gone<K>(api: &Api<K>, name: &str, uid: &str)
where
    K: kube::Resource + Clone + std::fmt::Debug + k8s_openapi::serde::de::DeserializeOwned + Send + 'static,
    K::DynamicType: Default,
{
    tokio::time::timeout(
        WAIT,
        await_condition(api.clone(), name, conditions::is_deleted(uid)),
    )
    .await
    .unwrap_or_else(|_| panic!("{name}: never deleted"))
    .expect("watch");
}

/// A Port of VPC `default/<vpc>` on node `n1` asking for `ip` (empty: the server picks), its
/// name generated (`p-…`).
pub fn port(vpc: &str, ip: &str) -> Port {
    let mut p = Port::new(
        "",
        PortSpec {
            vpc_ref: VPCRef {
                namespace: "default".into(),
                name: vpc.into(),
            },
            ip: ip.into(),
            node: "n1".into(),
            node_ip: "192.168.0.1".into(),
            ..Default::default()
        },
    );
    p.metadata.name = None;
    p.metadata.generate_name = Some("p-".into());
    p
}

/// A Port of VPC `vpc_ns/vpc` attached, by the labels the CNI writes, to a pod in `pod_ns`
/// (its address and name left to the server).
pub fn attached_port(vpc_ns: &str, vpc: &str, pod_ns: &str) -> Port {
    let mut p = port(vpc, "");
    p.spec.vpc_ref.namespace = vpc_ns.into();
    p.metadata.labels = Some(std::collections::BTreeMap::from([
        ("sdn.cozystack.io/vpc-namespace".to_string(), vpc_ns.to_string()),
        ("sdn.cozystack.io/vpc".to_string(), vpc.to_string()),
        ("sdn.cozystack.io/pod-namespace".to_string(), pod_ns.to_string()),
    ]));
    p
}

/// The half of a peering that `ns` owns: its VPC `local` towards `peer_ns/peer`, named
/// `<local>-to-<peer>`.
pub fn peering(ns: &str, local: &str, peer_ns: &str, peer: &str) -> VPCPeering {
    let mut p = VPCPeering::new(
        &format!("{local}-to-{peer}"),
        VPCPeeringSpec {
            vpc_ref: LocalVPCRef { name: local.into() },
            peer_ref: VPCRef {
                namespace: peer_ns.into(),
                name: peer.into(),
            },
        },
    );
    p.metadata.namespace = Some(ns.into());
    p
}

/// Deletes Port `name` and removes its finalizers, as the node's agent does once it severed
/// the pod (`agent/src/sever.rs`): for tests without an agent that need the address back.
pub async fn delete_and_release(ports: &Api<Port>, name: &str) {
    ports
        .delete(name, &kube::api::DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("delete Port {name}: {e}"));
    let unfinalized = serde_json::json!({"metadata": {"finalizers": null}});
    match ports
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(unfinalized),
        )
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => panic!("release Port {name}: {e}"),
    }
}
