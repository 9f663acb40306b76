//! What the policy writer's tests share (`policy_watch.rs` on the kube stand-in,
//! `admin_policy_watch.rs` on the real kube-apiserver): the policy maps pinned in a private
//! bpffs, the writer started as the agent starts it, and the compilers' full compile of what
//! an API holds, built directly from the full objects (not through the writer's listings).

#![allow(dead_code, reason = "each test binary uses part of the kit")]

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cozyplane_agent::core::api::ApiClients;
use cozyplane_agent::features::policy::maps::{Pinned, PolicyMaps};
use cozyplane_apis::admin_policy::{AdminNetworkPolicy, BaselineAdminNetworkPolicy};
use cozyplane_apis::v1alpha1::{HostFirewall, Port, SecurityGroup, VPC};
use cozyplane_policy::hf::{HfCompiler, NodeInfo};
use cozyplane_policy::model::Tables;
use cozyplane_policy::np::{NamespaceInfo, NpCompiler, PodInfo};
use cozyplane_policy::sg::SgCompiler;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, ListParams};

/// Creates and pins the six maps the writer opens, with the header's types and sizes.
pub(crate) fn pin_policy_maps(dir: &Path) {
    use aya::maps::MapData;
    use cozyplane_bpf::abi::{
        Addr, EpKey, HfSelf, NpIdent, Pcidr, PcidrKey, PolState, Prule, PruleKey, SgMember,
    };
    use cozyplane_bpf::maps::{hf_self, np_idents, pol_cidrs, pol_rules, pol_state, sg_members};
    const HASH: u32 = 1;
    const ARRAY: u32 = 2;
    const LPM_TRIE: u32 = 11;
    const NO_PREALLOC: u32 = 1;
    let defs: [(&str, u32, usize, usize, u32, u32); 6] = [
        (
            pol_rules::NAME,
            LPM_TRIE,
            size_of::<PruleKey>(),
            size_of::<Prule>(),
            4096,
            NO_PREALLOC,
        ),
        (
            pol_cidrs::NAME,
            LPM_TRIE,
            size_of::<PcidrKey>(),
            size_of::<Pcidr>(),
            1024,
            NO_PREALLOC,
        ),
        (
            sg_members::NAME,
            HASH,
            size_of::<EpKey>(),
            size_of::<SgMember>(),
            1024,
            NO_PREALLOC,
        ),
        (
            np_idents::NAME,
            HASH,
            size_of::<Addr>(),
            size_of::<NpIdent>(),
            1024,
            NO_PREALLOC,
        ),
        (hf_self::NAME, HASH, size_of::<Addr>(), size_of::<HfSelf>(), 64, 0),
        (
            pol_state::NAME,
            ARRAY,
            size_of::<u32>(),
            size_of::<PolState>(),
            1,
            0,
        ),
    ];
    for (name, ty, k, v, max, flags) in defs {
        let obj = aya_obj::Map::new_from_params(ty, k as u32, v as u32, max, flags);
        let m = MapData::create(obj, name, None).unwrap_or_else(|e| panic!("create {name}: {e}"));
        m.pin(dir.join(name))
            .unwrap_or_else(|e| panic!("pin {name}: {e}"));
    }
}

/// The agent's clients for `kubeconfig` (both APIs through it, as behind the aggregator).
pub(crate) async fn agent_clients(kubeconfig: &Path, node: &str, node_ip: &str) -> ApiClients {
    let c = cozyplane_agent::core::api::client(kubeconfig).await.unwrap();
    ApiClients {
        kube: c.clone(),
        sdn: c,
        node: node.into(),
        node_ip: node_ip.parse().unwrap(),
        pods: Default::default(),
        grants: Default::default(),
        kube_turns: std::sync::Arc::new(tokio::sync::Semaphore::new(4)),
        sdn_turns: std::sync::Arc::new(tokio::sync::Semaphore::new(4)),
        prepared: Default::default(),
        severed: Default::default(),
    }
}

/// The writer as the agent starts it, with its metrics registered.
pub(crate) fn start_writer(
    api: ApiClients,
    pins: PathBuf,
) -> (
    tokio::task::JoinHandle<()>,
    cozyplane_agent::core::metrics::Metrics,
) {
    use cozyplane_agent::core::feature::Feature as _;
    use cozyplane_agent::features::policy::{Args, Mode, Policy};
    let mut builder =
        cozyplane_agent::core::metrics::MetricsBuilder::new(pins.clone(), String::new(), Default::default());
    let mut policy = Policy::new(Args {
        policy: Mode::On,
        host_devices: Vec::new(),
    });
    policy.metrics(&mut builder);
    let writer_metrics = policy.writer_metrics().expect("registered");
    let metrics = builder.build();
    let task = tokio::spawn(cozyplane_agent::features::policy::run(
        api,
        pins,
        metrics.clone(),
        writer_metrics,
        Vec::new(),
    ));
    (task, metrics)
}

/// Every object of a kind, or none when the API does not serve it (no CRD).
async fn list_or_none<K>(api: Api<K>) -> Vec<K>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    match api.list(&ListParams::default()).await {
        Ok(l) => l.items,
        Err(kube::Error::Api(s)) if s.code == 404 => Vec::new(),
        Err(e) => panic!("list: {e}"),
    }
}

/// The kube-apiserver's addresses as the API holds them now: the ready (or unconditioned)
/// endpoint addresses of the `default/kubernetes` Service's IP EndpointSlices.
pub(crate) async fn kube_apiserver(client: &kube::Client) -> Vec<IpAddr> {
    let lp = ListParams::default().labels("kubernetes.io/service-name=kubernetes");
    let slices = Api::<EndpointSlice>::namespaced(client.clone(), "default")
        .list(&lp)
        .await
        .unwrap();
    slices
        .items
        .iter()
        .filter(|s| s.address_type == "IPv4" || s.address_type == "IPv6")
        .flat_map(|s| s.endpoints.iter().flatten())
        .filter(|e| e.conditions.as_ref().is_none_or(|c| c.ready != Some(false)))
        .flat_map(|e| e.addresses.iter().filter_map(|a| a.parse().ok()))
        .collect()
}

/// What the compilers make of everything the API holds now: `node` (with `node_ip`) is the
/// node whose HostFirewall is compiled.
pub(crate) async fn full_compile(client: &kube::Client, node: &str, node_ip: &str) -> Tables {
    let lp = ListParams::default();
    let namespaces = Api::<Namespace>::all(client.clone()).list(&lp).await.unwrap();
    let pods = Api::<Pod>::all(client.clone()).list(&lp).await.unwrap();
    let policies = Api::<NetworkPolicy>::all(client.clone()).list(&lp).await.unwrap();
    let mut np = NpCompiler::build(
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
    let nodes = Api::<Node>::all(client.clone()).list(&lp).await.unwrap().items;
    for n in &nodes {
        np.set_node(cozyplane_policy::np::NodeInfo::from_k8s(n));
    }
    np.set_kube_apiserver(kube_apiserver(client).await);
    for p in list_or_none(Api::<AdminNetworkPolicy>::all(client.clone())).await {
        np.set_anp(&p);
    }
    for p in list_or_none(Api::<BaselineAdminNetworkPolicy>::all(client.clone())).await {
        np.set_banp(&p);
    }
    let mut sg = SgCompiler::new();
    for v in list_or_none(Api::<VPC>::all(client.clone())).await {
        let vni = v.status.as_ref().map_or(0, |s| s.vni);
        if vni > 0 {
            sg.set_vpc(
                v.metadata.namespace.as_deref().unwrap(),
                v.metadata.name.as_deref().unwrap(),
                vni as u32,
            );
        }
    }
    for g in list_or_none(Api::<SecurityGroup>::all(client.clone())).await {
        sg.set_group(&g);
    }
    for p in list_or_none(Api::<Port>::all(client.clone())).await {
        sg.set_port(&p);
    }
    let me = nodes.iter().find(|n| n.metadata.name.as_deref() == Some(node));
    let mut addresses: Vec<IpAddr> = me
        .iter()
        .flat_map(|n| n.status.iter())
        .flat_map(|s| s.addresses.iter().flatten())
        .filter_map(|a| a.address.parse().ok())
        .chain([node_ip.parse().unwrap()])
        .collect();
    addresses.sort_unstable();
    addresses.dedup();
    let mut hf = HfCompiler::new(NodeInfo {
        name: node.into(),
        labels: me.and_then(|n| n.metadata.labels.clone()).unwrap_or_default(),
        addresses,
    });
    for f in list_or_none(Api::<HostFirewall>::all(client.clone())).await {
        hf.set_firewall(&f);
    }
    let npt = np.tables();
    let mut t = sg.tables();
    t.rules.extend(npt.rules);
    t.cidrs.extend(npt.cidrs);
    t.np_idents = npt.np_idents;
    t.rules.extend(hf.tables().rules.clone());
    t.cidrs.extend(hf.tables().cidrs.clone());
    t.hf_self.clone_from(&hf.tables().hf_self);
    t.state_flags = hf.tables().state_flags;
    t
}

/// What the pinned maps hold.
pub(crate) fn pinned(dir: &Path) -> Tables {
    Pinned::open(dir).unwrap().read().unwrap().0
}

/// Polls until the maps equal the full compile of the API's objects (a hang guard bounds it).
pub(crate) async fn maps_match(
    dir: &Path,
    client: &kube::Client,
    node: &str,
    node_ip: &str,
    what: &str,
) -> Tables {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let want = full_compile(client, node, node_ip).await;
        let have = pinned(dir);
        if have == want {
            return want;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: the maps never matched the full compile\nhave: {have:#?}\nwant: {want:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
