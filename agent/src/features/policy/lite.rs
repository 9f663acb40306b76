//! The few fields of a Pod the NetworkPolicy compiler reads, deserialized from the watch
//! stream without the rest of the object.
//!
//! Every node watches every pod of the cluster (a remote pod is a peer), so what one pod
//! costs in memory and parse time is paid cluster-size times on every node. A metadata-only
//! watch would drop `spec` and `status`, which hold the named ports, `hostNetwork` and the
//! addresses; so this type keeps exactly those and serde skips the rest (annotations,
//! managed fields, volumes, env, conditions) while parsing, without allocating for it.
//!
//! Nodes likewise ([`LiteNode`]): every node watches every Node (AdminNetworkPolicy `nodes`
//! peers select them by label and stand for their addresses), and a Node's status is mostly
//! images, conditions and capacity; only its labels and `status.addresses` are kept.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, Node, NodeAddress, NodeStatus, Pod, PodIP, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Deserializer};

/// A Pod as the policy watch sees it.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct LitePod {
    /// Name, namespace, labels, uid, resourceVersion (the watch needs it); nothing else.
    #[serde(deserialize_with = "lite_meta")]
    pub metadata: ObjectMeta,
    /// `hostNetwork` and named container ports.
    #[serde(default)]
    pub spec: LiteSpec,
    /// The pod's addresses and phase.
    #[serde(default)]
    pub status: LiteStatus,
}

/// The spec fields read.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LiteSpec {
    /// `spec.hostNetwork`.
    #[serde(default)]
    pub host_network: Option<bool>,
    /// `spec.containers[].ports` (init containers' ports are never targets).
    #[serde(default)]
    pub containers: Vec<LiteContainer>,
}

/// A container's ports.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct LiteContainer {
    /// `ports`.
    #[serde(default)]
    pub ports: Vec<LitePort>,
}

/// A container port.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LitePort {
    /// Its name, if it has one (only named ports matter).
    #[serde(default)]
    pub name: Option<String>,
    /// The port.
    #[serde(default)]
    pub container_port: i32,
    /// `TCP` when absent.
    #[serde(default)]
    pub protocol: Option<String>,
}

/// The status fields read.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LiteStatus {
    /// `status.podIP`.
    #[serde(default, rename = "podIP")]
    pub pod_ip: Option<String>,
    /// `status.podIPs[].ip`.
    #[serde(default, rename = "podIPs")]
    pub pod_ips: Vec<LitePodIp>,
}

/// One of `status.podIPs`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct LitePodIp {
    /// The address.
    #[serde(default)]
    pub ip: String,
}

/// Only the metadata fields the compiler and the watcher use.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MetaFields {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    uid: Option<String>,
    #[serde(default)]
    resource_version: Option<String>,
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
}

fn lite_meta<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    let m = MetaFields::deserialize(d)?;
    Ok(ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        uid: m.uid,
        resource_version: m.resource_version,
        labels: m.labels,
        ..ObjectMeta::default()
    })
}

impl kube::Resource for LitePod {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind((): &()) -> Cow<'_, str> {
        "Pod".into()
    }
    fn group((): &()) -> Cow<'_, str> {
        "".into()
    }
    fn version((): &()) -> Cow<'_, str> {
        "v1".into()
    }
    fn plural((): &()) -> Cow<'_, str> {
        "pods".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl LitePod {
    /// The compiler's view of the pod (the same reading as [`cozyplane_policy::np::PodInfo::from_k8s`]
    /// of the full object).
    pub fn info(&self) -> cozyplane_policy::np::PodInfo {
        let containers = self
            .spec
            .containers
            .iter()
            .map(|c| Container {
                ports: Some(
                    c.ports
                        .iter()
                        .filter(|p| p.name.is_some())
                        .map(|p| ContainerPort {
                            name: p.name.clone(),
                            container_port: p.container_port,
                            protocol: p.protocol.clone(),
                            ..ContainerPort::default()
                        })
                        .collect(),
                ),
                ..Container::default()
            })
            .collect();
        let pod = Pod {
            metadata: self.metadata.clone(),
            spec: Some(PodSpec {
                host_network: self.spec.host_network,
                containers,
                ..PodSpec::default()
            }),
            status: Some(PodStatus {
                pod_ip: self.status.pod_ip.clone(),
                pod_ips: Some(
                    self.status
                        .pod_ips
                        .iter()
                        .map(|i| PodIP { ip: i.ip.clone() })
                        .collect(),
                ),
                ..PodStatus::default()
            }),
        };
        cozyplane_policy::np::PodInfo::from_k8s(&pod)
    }
}

/// A Node as the policy watch sees it.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct LiteNode {
    /// Name, labels, uid, resourceVersion; nothing else.
    #[serde(deserialize_with = "lite_meta")]
    pub metadata: ObjectMeta,
    /// `status.addresses`.
    #[serde(default)]
    pub status: LiteNodeStatus,
}

/// The Node status fields read.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct LiteNodeStatus {
    /// `status.addresses`.
    #[serde(default)]
    pub addresses: Vec<LiteNodeAddress>,
}

/// One of `status.addresses`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct LiteNodeAddress {
    /// `InternalIP`, `ExternalIP`, `Hostname`, ...
    #[serde(default, rename = "type")]
    pub type_: String,
    /// The address (or name).
    #[serde(default)]
    pub address: String,
}

impl kube::Resource for LiteNode {
    type DynamicType = ();
    type Scope = k8s_openapi::ClusterResourceScope;

    fn kind((): &()) -> Cow<'_, str> {
        "Node".into()
    }
    fn group((): &()) -> Cow<'_, str> {
        "".into()
    }
    fn version((): &()) -> Cow<'_, str> {
        "v1".into()
    }
    fn plural((): &()) -> Cow<'_, str> {
        "nodes".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl LiteNode {
    /// The Node with what was read of it (metadata as above, `status.addresses`): what the
    /// compilers' readers ([`cozyplane_policy::np::NodeInfo::from_k8s`],
    /// [`super::feed::node_info`]) take.
    pub fn node(&self) -> Node {
        Node {
            metadata: self.metadata.clone(),
            spec: None,
            status: Some(NodeStatus {
                addresses: Some(
                    self.status
                        .addresses
                        .iter()
                        .map(|a| NodeAddress {
                            type_: a.type_.clone(),
                            address: a.address.clone(),
                        })
                        .collect(),
                ),
                ..NodeStatus::default()
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_pod_reads_as_the_compiler_reads_it() {
        let full = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "web-1", "namespace": "shop", "uid": "u1", "resourceVersion": "7",
                "labels": {"app": "web", "pod-template-hash": "abc"},
                "annotations": {"big": "x".repeat(4096)},
                "managedFields": [{"manager": "kubectl", "operation": "Apply"}],
            },
            "spec": {
                "hostNetwork": false,
                "containers": [{
                    "name": "c", "image": "nginx",
                    "ports": [
                        {"name": "http", "containerPort": 8080},
                        {"name": "dns", "containerPort": 53, "protocol": "UDP"},
                        {"containerPort": 9000},
                    ],
                    "env": [{"name": "A", "value": "b"}],
                }],
            },
            "status": {
                "phase": "Running", "podIP": "10.244.1.5",
                "podIPs": [{"ip": "10.244.1.5"}, {"ip": "fd44::5"}],
            },
        });
        let lite: LitePod = serde_json::from_value(full.clone()).unwrap();
        let pod: Pod = serde_json::from_value(full).unwrap();
        assert_eq!(lite.info(), cozyplane_policy::np::PodInfo::from_k8s(&pod));
        assert_eq!(lite.metadata.resource_version.as_deref(), Some("7"));
        assert!(lite.metadata.annotations.is_none() && lite.metadata.managed_fields.is_none());
    }

    #[test]
    fn a_full_node_reads_as_the_compilers_read_it() {
        let full = serde_json::json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {
                "name": "n1", "uid": "u1", "resourceVersion": "9",
                "labels": {"role": "edge", "kubernetes.io/hostname": "n1"},
                "annotations": {"big": "x".repeat(4096)},
            },
            "spec": {"podCIDR": "10.244.1.0/24", "taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {
                "addresses": [{"type": "InternalIP", "address": "192.0.2.1"},
                              {"type": "InternalIP", "address": "2001:db8::1"},
                              {"type": "Hostname", "address": "n1"}],
                "images": [{"names": ["x"], "sizeBytes": 1}],
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        });
        let lite: LiteNode = serde_json::from_value(full.clone()).unwrap();
        let node: Node = serde_json::from_value(full).unwrap();
        let np = cozyplane_policy::np::NodeInfo::from_k8s(&lite.node());
        assert_eq!(np, cozyplane_policy::np::NodeInfo::from_k8s(&node));
        assert_eq!(np.ips.len(), 2, "the hostname is no address");
        let own = ["192.0.2.9".parse().unwrap()];
        assert_eq!(
            super::super::feed::node_info(&lite.node(), &own),
            super::super::feed::node_info(&node, &own)
        );
        assert_eq!(lite.metadata.resource_version.as_deref(), Some("9"));
        assert!(lite.metadata.annotations.is_none());
    }
}
