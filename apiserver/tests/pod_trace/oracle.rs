//! The test's side of `pod_trace.rs`: its own compile of the objects kube-apiserver holds,
//! independent of the server's reading, and the names of the verdict's tiers.

use cozyplane_apis::admin_policy::{AdminNetworkPolicy, BaselineAdminNetworkPolicy};
use cozyplane_policy::model::Tables;
use cozyplane_policy::np::{NamespaceInfo, NodeInfo, NpCompiler, PodInfo};
use cozyplane_policy::verdict::Tier;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, ListParams};

/// The test's own compile of what kube-apiserver holds, as the agents feed `NpCompiler`.
pub(crate) async fn compile(admin: &kube::Client) -> Tables {
    let lp = ListParams::default();
    let namespaces = Api::<Namespace>::all(admin.clone()).list(&lp).await.unwrap();
    let pods = Api::<Pod>::all(admin.clone()).list(&lp).await.unwrap();
    let policies = Api::<NetworkPolicy>::all(admin.clone()).list(&lp).await.unwrap();
    let nodes = Api::<Node>::all(admin.clone()).list(&lp).await.unwrap();
    let anps = match Api::<AdminNetworkPolicy>::all(admin.clone()).list(&lp).await {
        Ok(l) => l.items,
        Err(kube::Error::Api(s)) if s.code == 404 => Vec::new(),
        Err(e) => panic!("{e}"),
    };
    let banps = match Api::<BaselineAdminNetworkPolicy>::all(admin.clone())
        .list(&lp)
        .await
    {
        Ok(l) => l.items,
        Err(kube::Error::Api(s)) if s.code == 404 => Vec::new(),
        Err(e) => panic!("{e}"),
    };
    let mut c = NpCompiler::build(
        namespaces.items.iter().map(NamespaceInfo::from_k8s),
        pods.items
            .iter()
            .filter(|p| {
                let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
                !matches!(phase, Some("Succeeded" | "Failed"))
            })
            .map(PodInfo::from_k8s),
        policies.items.iter(),
    );
    for n in &nodes.items {
        c.set_node(NodeInfo::from_k8s(n));
    }
    for a in &anps {
        c.set_anp(a);
    }
    for b in &banps {
        c.set_banp(b);
    }
    c.tables()
}

/// The name the answer gives tier `t`.
pub(crate) fn tier_name(t: Tier) -> &'static str {
    match t {
        Tier::None => "None",
        Tier::Anp => "AdminNetworkPolicy",
        Tier::Np => "NetworkPolicy",
        Tier::Banp => "BaselineAdminNetworkPolicy",
        Tier::Default => "Default",
    }
}
