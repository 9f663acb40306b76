//! What a pod trace reads from the kube-apiserver, one list per kind (the server's own
//! ServiceAccount, through the RBAC table's rows), and its compile: the same `NpCompiler`
//! inputs the agents feed from their watches.
//!
//! The lists are not taken at one revision (the kube-apiserver has none across kinds); each
//! is a consistent list of its kind. A cluster without the network-policy-api CRDs (404 on
//! their list) has no admin policy, as the agents treat it; any other failure is a 503: an
//! answer that silently left out a tier would be wrong.

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::ListParams;

use cozyplane_apis::admin_policy::{AdminNetworkPolicy, BaselineAdminNetworkPolicy};
use cozyplane_policy::np::{NamespaceInfo, NodeInfo, NpCompiler, PodInfo};

use crate::errors::{ApiError, Result};
use crate::rbac::server::{
    ADMINNETWORKPOLICIES, Access, BASELINEADMINNETWORKPOLICIES, NAMESPACES, NETWORKPOLICIES, NODES, PODS,
};

/// Everything the default network's policy is compiled from.
#[derive(Clone, Debug, Default)]
pub struct PodWorld {
    /// Every Namespace (labels).
    pub namespaces: Vec<Namespace>,
    /// Every Pod, finished ones included (see [`PodWorld::live_pods`]).
    pub pods: Vec<Pod>,
    /// Every NetworkPolicy.
    pub policies: Vec<NetworkPolicy>,
    /// Every AdminNetworkPolicy.
    pub anps: Vec<AdminNetworkPolicy>,
    /// The BaselineAdminNetworkPolicy (at most one, `default`).
    pub banps: Vec<BaselineAdminNetworkPolicy>,
    /// Every Node (addresses, labels).
    pub nodes: Vec<Node>,
}

/// A pod that finished (`Succeeded`, `Failed`) holds no address: the kubelet may hand it to
/// another pod. The agents' Pod watch leaves such pods out by a field selector.
pub fn finished(p: &Pod) -> bool {
    matches!(
        p.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

async fn list<K>(row: &'static Access, client: &kube::Client, optional: bool) -> Result<Vec<K>>
where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    let api = row.uses("list").api_all::<K>(client.clone());
    match api.list(&ListParams::default()).await {
        Ok(l) => Ok(l.items),
        Err(kube::Error::Api(s)) if optional && s.code == 404 => Ok(Vec::new()),
        Err(e) => {
            tracing::warn!(error = %e, resource = row.resource, "pod trace: listing failed");
            Err(ApiError::unavailable(format!(
                "the trace could not read {}.{} from the kube-apiserver: {e}",
                row.resource,
                if row.group.is_empty() { "core" } else { row.group }
            )))
        }
    }
}

impl PodWorld {
    /// Reads the world from the kube-apiserver.
    pub async fn read(client: &kube::Client) -> Result<Self> {
        let (namespaces, pods, policies, anps, banps, nodes) = futures::try_join!(
            list::<Namespace>(&NAMESPACES, client, false),
            list::<Pod>(&PODS, client, false),
            list::<NetworkPolicy>(&NETWORKPOLICIES, client, false),
            list::<AdminNetworkPolicy>(&ADMINNETWORKPOLICIES, client, true),
            list::<BaselineAdminNetworkPolicy>(&BASELINEADMINNETWORKPOLICIES, client, true),
            list::<Node>(&NODES, client, false),
        )?;
        Ok(Self {
            namespaces,
            pods,
            policies,
            anps,
            banps,
            nodes,
        })
    }

    /// The pods the agents compile: every pod that has not finished.
    pub fn live_pods(&self) -> impl Iterator<Item = &Pod> {
        self.pods.iter().filter(|p| !finished(p))
    }

    /// The compile the agents make of the same objects: NetworkPolicies, Pods and Namespaces
    /// at once (`NpCompiler::build`), then the Nodes (for `nodes` peers) and the admin
    /// policies.
    pub fn compile(&self) -> NpCompiler {
        let mut c = NpCompiler::build(
            self.namespaces.iter().map(NamespaceInfo::from_k8s),
            self.live_pods().map(PodInfo::from_k8s),
            self.policies.iter(),
        );
        for n in &self.nodes {
            c.set_node(NodeInfo::from_k8s(n));
        }
        for a in &self.anps {
            c.set_anp(a);
        }
        for b in &self.banps {
            c.set_banp(b);
        }
        c
    }
}
