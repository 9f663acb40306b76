//! The agent's two API clients and the calls the CNI path makes through them.
//!
//! * The **kube API** (`--kubeconfig`): Pods. The pod's `sdn.cozystack.io/vpc` annotation
//!   is read from the watch cache (kept by the core's watch, `core/watch`) and only on a miss with a GET, so a
//!   net-0 ADD normally makes no API round trip. After a VPC attach the pod is stamped with
//!   `sdn.cozystack.io/vpc-ip` and `-mac`.
//! * **Our API** (`--sdn-kubeconfig`, in production the same server via aggregation):
//!   VPCBindings (is the VPC granted to the pod's namespace?), VPCs (VNI, MTU) and Ports
//!   (created without `spec.ip`: the server allocates the address and MAC).
//!
//! The pod's namespace comes from `K8S_POD_NAMESPACE` in the CNI args: the runtime sets it,
//! the pod cannot. The VPC it asks for is only a request; the binding decides.
//!
//! The grant and the VPC's VNI are read from the watch caches ([`Grants`]) first, and the
//! Port is normally made when the pod is scheduled here ([`crate::core::api::prepare`]), so a VPC ADD
//! normally makes no round trip at all. Only a positive answer is taken
//! from the cache: a miss (a binding created a moment ago, a VPC without a VNI yet) asks
//! the API, which is authoritative. A binding deleted a moment ago may still grant for the
//! watch's lag, as with any informer-driven Kubernetes component.

mod client;
mod nodes;
pub mod prepare;
pub mod secondary;
pub mod severed;

pub use self::client::{client, in_cluster_client};
pub use self::nodes::{
    FABRIC_BLOCK_ANNOTATION, FABRIC_BLOCK6_ANNOTATION, TUNNEL_IP_ANNOTATION, node_address, node_pod_block,
    node_pod_block6, node_spec_block, node_spec_block6,
};

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use cozyplane_apis::v1alpha1::{
    MIGRATION_JOB_LABEL, PORT_INTERFACE_LABEL, PORT_WORKLOAD_LABEL, Port, PortMigrationTarget, PortSpec, VPC,
    VPCBinding, VPCRef,
};
use cozyplane_cni::spec::{CniError, ErrorCode};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};

/// The annotation a pod uses to ask for a VPC: `[<owner-ns>/]<vpc>`.
pub const VPC_ANNOTATION: &str = "sdn.cozystack.io/vpc";
/// Stamped on the pod after a VPC attach: its VPC address.
pub const VPC_IP_ANNOTATION: &str = "sdn.cozystack.io/vpc-ip";
/// Stamped on the pod after a VPC attach: its VPC MAC.
pub const VPC_MAC_ANNOTATION: &str = "sdn.cozystack.io/vpc-mac";

/// How long one API call of the CNI path may take (waiting for a turn included).
/// The finalizer the server puts on every Port; this agent removes it from its node's Ports
/// once it severed the pod (the revocation feature, `features/sever`).
pub const SEVER_FINALIZER: &str = "sdn.cozystack.io/sever";
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Calls of the CNI path in flight per API server. Over HTTP/2 they share one connection
/// anyway; this bounds what fifty pods added at once ask of the server at a time, and where
/// a server or proxy offers only HTTP/1.1, where each call beyond the pooled connections would
/// open one more with a TLS handshake on both ends (more CPU than the call itself), it keeps
/// them to a few warm connections.
pub const CALLS_IN_FLIGHT: usize = 4;

/// What the agent remembers of a pod (from the watch).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodFacts {
    /// The `sdn.cozystack.io/vpc` annotation, if any.
    pub vpc: Option<String>,
    /// The `sdn.cozystack.io/vpcs` annotation (secondary interfaces, issue 37), as written.
    pub vpcs: Option<String>,
    /// Its persistent identity (a KubeVirt launcher's VM, or the explicit annotation): its
    /// VPC Ports outlive it (`cozyplane_apis::v1alpha1::workload_of`).
    pub workload: Option<String>,
    /// The addresses and MAC a persistent Port is to be made with
    /// (`sdn.cozystack.io/ip`, `sdn.cozystack.io/mac`), as written.
    pub pins: (Option<String>, Option<String>),
    /// The live migration this pod is the target launcher of (KubeVirt's
    /// `kubevirt.io/migrationJobUID` label), if any.
    pub migration: Option<String>,
}

impl PodFacts {
    /// What the agent reads of a pod.
    pub fn of(p: &Pod) -> Self {
        Self {
            vpc: p
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(VPC_ANNOTATION))
                .filter(|v| !v.is_empty())
                .cloned(),
            vpcs: p
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(secondary::VPCS_ANNOTATION))
                .filter(|v| !v.trim().is_empty())
                .cloned(),
            workload: cozyplane_apis::v1alpha1::workload_of(
                p.metadata.labels.as_ref(),
                p.metadata.annotations.as_ref(),
            ),
            pins: {
                let get = |k: &str| p.metadata.annotations.as_ref().and_then(|a| a.get(k)).cloned();
                (
                    get(cozyplane_apis::v1alpha1::PIN_IP_ANNOTATION),
                    get(cozyplane_apis::v1alpha1::PIN_MAC_ANNOTATION),
                )
            },
            migration: p
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(MIGRATION_JOB_LABEL))
                .filter(|v| !v.is_empty())
                .cloned(),
        }
    }
}

/// A persistent attachment: the workload identity and the pod interface its Ports belong to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Persistent {
    /// The identity (`PORT_WORKLOAD_LABEL`).
    pub workload: String,
    /// The interface (`CNI_IFNAME`).
    pub ifname: String,
    /// Pinned addresses (one per family at most) and MAC, for the Ports made for it.
    pub pins: (Vec<String>, Option<String>),
    /// The pod is a live migration's target launcher (the job's UID): it is prepared beside
    /// the Ports' current holder instead of taking them ([`ApiClients::bind_persistent`]).
    pub migration: Option<String>,
}

impl Persistent {
    /// The attachment of `facts`' workload as `ifname`, with its pins; `None` for an ordinary
    /// pod.
    pub fn of(facts: &PodFacts, ifname: &str) -> Option<Self> {
        let workload = facts.workload.clone()?;
        let ips = facts
            .pins
            .0
            .iter()
            .flat_map(|v| v.split(','))
            .map(|a| a.trim().to_string())
            .filter(|a| !a.is_empty())
            .collect();
        Some(Self {
            workload,
            ifname: ifname.to_string(),
            pins: (ips, facts.pins.1.clone().filter(|m| !m.is_empty())),
            migration: facts.migration.clone(),
        })
    }
}

/// The pinned address of the family of `family` (an unspecified address) among `pins`, or
/// the first pinned one when no family is asked.
fn ip_for(pins: &[String], family: Option<IpAddr>) -> Option<String> {
    pins.iter().find_map(|a| match (a.parse::<IpAddr>(), family) {
        (Ok(ip), Some(f)) if ip.is_ipv4() == f.is_ipv4() => Some(a.clone()),
        (Ok(_), None) => Some(a.clone()),
        // Not an address: given as is, for the server's 422 to name it.
        (Err(_), _) => Some(a.clone()),
        _ => None,
    })
}

/// What a new Port is asked with besides its VPC and pod (issue 37): the pod interface
/// (`spec.interface`, empty for the pod's network) and the addresses (one per family at most)
/// and MAC the request pins.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PortAsk {
    /// `CNI_IFNAME` of a secondary interface; empty for the pod's network.
    pub interface: String,
    /// Pinned addresses and MAC.
    pub pins: (Vec<String>, Option<String>),
}

/// A VPC the pod may join.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedVpc {
    /// Owner namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `status.vni`.
    pub vni: u32,
    /// `spec.mtu` (0: not set).
    pub mtu: u32,
    /// The VPC has ranges of both families: a pod gets one address (and Port) per family.
    pub dual_stack: bool,
    /// `spec.cidrs` as `(network, prefix length)`: what a secondary interface routes to its
    /// gateway (issue 37).
    pub ranges: Vec<(IpAddr, u8)>,
}

/// `spec.cidrs` as `(network, prefix length)`; what does not parse is skipped (the server
/// validated them).
pub fn vpc_ranges(cidrs: &[String]) -> Vec<(IpAddr, u8)> {
    cidrs
        .iter()
        .filter_map(|c| c.parse::<ipnet::IpNet>().ok())
        .map(|n| (n.network(), n.prefix_len()))
        .collect()
}

/// Whether `cidrs` (a VPC's `spec.cidrs`) hold both families.
pub fn dual_stack(cidrs: &[String]) -> bool {
    cidrs.iter().any(|c| c.contains(':')) && cidrs.iter().any(|c| c.contains('.'))
}

/// The clients and this node's identity.
#[derive(Clone)]
pub struct ApiClients {
    /// The kube API.
    pub kube: kube::Client,
    /// Our API.
    pub sdn: kube::Client,
    /// This node's name (`spec.node` of our Ports, `spec.nodeName` of our pods).
    pub node: String,
    /// This node's underlay address (`spec.nodeIP`).
    pub node_ip: IpAddr,
    /// Pods by `(namespace, name)`, kept by the watch.
    pub pods: Arc<RwLock<HashMap<(String, String), PodFacts>>>,
    /// VPCBindings and VPCs, kept by the watch.
    pub grants: Arc<RwLock<Grants>>,
    /// Turns for CNI-path calls to the kube API ([`CALLS_IN_FLIGHT`]).
    pub kube_turns: Arc<tokio::sync::Semaphore>,
    /// Turns for CNI-path calls to our API ([`CALLS_IN_FLIGHT`]).
    pub sdn_turns: Arc<tokio::sync::Semaphore>,
    /// Ports made ahead of ADD ([`crate::core::api::prepare`]).
    pub prepared: Arc<prepare::Prepared>,
    /// This node's Ports seen terminating or gone ([`severed`]).
    pub severed: Arc<severed::Severed>,
}

/// A VPC's `spec.cidrs` as `(network, prefix length)`.
pub type VpcRanges = Vec<(IpAddr, u8)>;

/// What the CNI path needs of a VPC: `(vni, mtu, dual stack)`.
pub type VpcFacts = (u32, u32, bool);

/// What the watches know of VPCBindings and VPCs.
#[derive(Clone, Debug, Default)]
pub struct Grants {
    /// Per pod namespace: the `(owner namespace, name)` of every VPC a live binding grants.
    pub bindings: HashMap<String, Vec<(String, String)>>,
    /// `(namespace, name)` of a VPC with a VNI → its facts and ranges.
    pub vpcs: HashMap<(String, String), (VpcFacts, VpcRanges)>,
}

impl Grants {
    fn resolve(&self, pod_ns: &str, vns: &str, vname: &str) -> Option<ResolvedVpc> {
        let granted = self
            .bindings
            .get(pod_ns)?
            .iter()
            .any(|(n, v)| n == vns && v == vname);
        let ((vni, mtu, dual_stack), ranges) = self.vpcs.get(&(vns.to_string(), vname.to_string()))?;
        (granted && *vni != 0).then(|| ResolvedVpc {
            namespace: vns.to_string(),
            name: vname.to_string(),
            vni: *vni,
            mtu: *mtu,
            dual_stack: *dual_stack,
            ranges: ranges.clone(),
        })
    }
}

/// The VPC a binding in `pod_ns` grants, `(owner namespace, name)`; `None` while deleting.
pub fn binding_grant(b: &VPCBinding, pod_ns: &str) -> Option<(String, String)> {
    if b.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let ns = if b.spec.vpc_ref.namespace.is_empty() {
        pod_ns.to_string()
    } else {
        b.spec.vpc_ref.namespace.clone()
    };
    Some((ns, b.spec.vpc_ref.name.clone()))
}

impl std::fmt::Debug for ApiClients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiClients")
            .field("node", &self.node)
            .field("node_ip", &self.node_ip)
            .finish_non_exhaustive()
    }
}

fn api_error(what: &str, e: impl std::fmt::Display) -> CniError {
    CniError::new(ErrorCode::TryAgainLater, what.to_string(), e.to_string())
}

async fn timed<T, E: std::fmt::Display>(
    what: &str,
    f: impl Future<Output = Result<T, E>>,
) -> Result<T, CniError> {
    match tokio::time::timeout(CALL_TIMEOUT, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(api_error(what, e)),
        Err(_) => Err(api_error(what, "timed out")),
    }
}

/// [`timed`], once `turns` gives this call its turn.
async fn queued<T, E: std::fmt::Display>(
    what: &str,
    turns: &tokio::sync::Semaphore,
    f: impl Future<Output = Result<T, E>>,
) -> Result<T, CniError> {
    timed(what, async {
        // The semaphore is never closed.
        let _turn = turns.acquire().await.ok();
        f.await
    })
    .await
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

/// Splits `[<owner-ns>/]<vpc>`; the owner defaults to the pod's namespace.
pub fn parse_vpc_request(pod_ns: &str, req: &str) -> Result<(String, String), CniError> {
    let (ns, name) = match req.split_once('/') {
        Some((ns, name)) => (ns, name),
        None => (pod_ns, req),
    };
    let label = |s: &str| {
        !s.is_empty()
            && s.len() <= 63
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    };
    if !label(ns) || !label(name) {
        return Err(CniError::new(
            ErrorCode::InvalidConfig,
            format!("invalid {VPC_ANNOTATION} value {req:?}"),
            "expected [<owner-namespace>/]<vpc>, both DNS-1123 labels",
        ));
    }
    Ok((ns.to_string(), name.to_string()))
}

impl ApiClients {
    /// What the agent reads of pod `ns/name`, from the watch cache or (on a miss) the kube API.
    pub async fn pod_facts(&self, ns: &str, name: &str) -> Result<PodFacts, CniError> {
        let cached = self
            .pods
            .read()
            .ok()
            .and_then(|m| m.get(&(ns.to_string(), name.to_string())).cloned());
        if let Some(f) = cached {
            return Ok(f);
        }
        let pods: Api<Pod> = Api::namespaced(self.kube.clone(), ns);
        let pod = queued(
            "reading the pod from the kube API failed",
            &self.kube_turns,
            pods.get_opt(name),
        )
        .await?;
        let pod = pod.ok_or_else(|| {
            CniError::new(
                ErrorCode::TryAgainLater,
                format!("pod {ns}/{name} not found in the kube API"),
                "the pod's annotations decide its network; retry once the pod is visible",
            )
        })?;
        Ok(PodFacts::of(&pod))
    }

    /// The VPC the pod asks for, from the watch cache or (on a miss) the kube API.
    pub async fn requested_vpc(&self, ns: &str, name: &str) -> Result<Option<String>, CniError> {
        Ok(self.pod_facts(ns, name).await?.vpc)
    }

    /// Checks that a VPCBinding in `pod_ns` grants the VPC and reads its VNI and MTU.
    pub async fn resolve_vpc(&self, pod_ns: &str, pod: &str, req: &str) -> Result<ResolvedVpc, CniError> {
        let (vns, vname) = parse_vpc_request(pod_ns, req)?;
        let cached = self
            .grants
            .read()
            .ok()
            .and_then(|g| g.resolve(pod_ns, &vns, &vname));
        if let Some(v) = cached {
            return Ok(v);
        }
        let bindings: Api<VPCBinding> = Api::namespaced(self.sdn.clone(), pod_ns);
        let list = queued(
            "listing VPCBindings failed",
            &self.sdn_turns,
            bindings.list(&kube::api::ListParams::default()),
        )
        .await?;
        let granted = list
            .items
            .iter()
            .any(|b| binding_grant(b, pod_ns).is_some_and(|(n, v)| n == vns && v == vname));
        let vpcs: Api<VPC> = Api::namespaced(self.sdn.clone(), &vns);
        if !granted {
            // Whether a VPC exists is said only of the pod's own namespace: another tenant's
            // VPCs are not the pod's to probe.
            if vns == pod_ns
                && queued("reading the VPC failed", &self.sdn_turns, vpcs.get_opt(&vname))
                    .await?
                    .is_none()
            {
                return Err(CniError::new(
                    ErrorCode::VpcUnavailable,
                    format!("pod {pod_ns}/{pod} asks for VPC {vns}/{vname}, which does not exist"),
                    "create the VPC and a VPCBinding for it, or stop asking for it",
                ));
            }
            return Err(CniError::new(
                ErrorCode::VpcNotBound,
                format!(
                    "pod {pod_ns}/{pod} asks for VPC {vns}/{vname}, but no VPCBinding in namespace {pod_ns} grants it"
                ),
                format!(
                    "create a VPCBinding in {pod_ns} with spec.vpcRef {{namespace: {vns}, name: {vname}}}, or stop asking for it (the {VPC_ANNOTATION} or sdn.cozystack.io/vpcs annotation, or a NetworkAttachmentDefinition naming it)"
                ),
            ));
        }
        let vpc = queued("reading the VPC failed", &self.sdn_turns, vpcs.get_opt(&vname))
            .await?
            .ok_or_else(|| {
                CniError::new(
                    ErrorCode::VpcUnavailable,
                    format!("VPC {vns}/{vname} does not exist"),
                    format!("a VPCBinding in {pod_ns} names it, but the VPC is missing"),
                )
            })?;
        let vni = vpc
            .status
            .as_ref()
            .and_then(|s| u32::try_from(s.vni).ok())
            .unwrap_or(0);
        if vni == 0 {
            return Err(CniError::new(
                ErrorCode::TryAgainLater,
                format!("VPC {vns}/{vname} has no VNI yet"),
                "retry once the VPC is Ready",
            ));
        }
        Ok(ResolvedVpc {
            namespace: vns,
            name: vname,
            vni,
            mtu: u32::try_from(vpc.spec.mtu).unwrap_or(0),
            dual_stack: dual_stack(&vpc.spec.cidrs),
            ranges: vpc_ranges(&vpc.spec.cidrs),
        })
    }

    /// This node's fabric block: the first IPv4 CIDR of its `spec.podCIDRs`/`podCIDR`
    /// (`Ok(None)` until one is assigned).
    pub async fn node_block(&self) -> Result<Option<crate::core::ipam::Block>, String> {
        let nodes: Api<Node> = Api::all(self.kube.clone());
        let node = timed("reading this node", nodes.get(&self.node))
            .await
            .map_err(|e| e.to_string())?;
        Ok(node_spec_block(&node))
    }

    /// This node's IPv6 fabric block, from its `spec.podCIDRs` (`Ok(None)`: none).
    pub async fn node_block6(&self) -> Result<Option<crate::core::ipam::Block6>, String> {
        let nodes: Api<Node> = Api::all(self.kube.clone());
        let node = timed("reading this node", nodes.get(&self.node))
            .await
            .map_err(|e| e.to_string())?;
        Ok(node_spec_block6(&node))
    }

    /// Tells the other agents where this node's pods are: its fabric blocks and tunnel
    /// address as annotations on its Node (a merge patch, so only these keys change).
    pub async fn announce(
        &self,
        block: crate::core::ipam::Block,
        block6: Option<crate::core::ipam::Block6>,
    ) -> Result<(), String> {
        let nodes: Api<Node> = Api::all(self.kube.clone());
        let patch = serde_json::json!({ "metadata": { "annotations": {
            FABRIC_BLOCK_ANNOTATION: block.to_string(),
            FABRIC_BLOCK6_ANNOTATION: block6.map(|b| b.to_string()),
            TUNNEL_IP_ANNOTATION: self.node_ip.to_string(),
        } } });
        timed(
            "annotating this node",
            nodes.patch(&self.node, &PatchParams::default(), &Patch::Merge(&patch)),
        )
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
    }

    /// Creates the pod's Port; the server allocates the name, address and MAC. `family`
    /// (an unspecified address, `0.0.0.0` or `::`) asks for an address of that family, else
    /// the server takes the VPC's first range.
    pub async fn create_port(
        &self,
        vpc: &ResolvedVpc,
        pod_ns: &str,
        pod: &str,
        family: Option<IpAddr>,
        persistent: Option<&Persistent>,
        ask: Option<&PortAsk>,
    ) -> Result<Port, CniError> {
        let mut labels = BTreeMap::from([
            (
                "sdn.cozystack.io/vpc-namespace".to_string(),
                vpc.namespace.clone(),
            ),
            ("sdn.cozystack.io/vpc".to_string(), vpc.name.clone()),
            ("sdn.cozystack.io/pod-namespace".to_string(), pod_ns.to_string()),
        ]);
        if let Some(w) = persistent {
            labels.insert(PORT_WORKLOAD_LABEL.to_string(), w.workload.clone());
            labels.insert(PORT_INTERFACE_LABEL.to_string(), w.ifname.clone());
        }
        let interface = ask.map(|a| a.interface.clone()).unwrap_or_default();
        if !interface.is_empty() {
            labels.insert(PORT_INTERFACE_LABEL.to_string(), interface.clone());
        }
        // A workload's pins, else the request's.
        let pins = persistent.map(|w| &w.pins).or(ask.map(|a| &a.pins));
        let pinned = pins.map_or((None, String::new()), |(ips, mac)| {
            (
                ip_for(ips, family),
                // The MAC is the pod interface's: pinned on the Port of its first family only.
                if family.is_none() {
                    mac.clone().unwrap_or_default()
                } else {
                    String::new()
                },
            )
        });
        let port = Port {
            metadata: ObjectMeta {
                labels: Some(labels),
                ..Default::default()
            },
            spec: PortSpec {
                vpc_ref: VPCRef {
                    namespace: vpc.namespace.clone(),
                    name: vpc.name.clone(),
                },
                node: self.node.clone(),
                node_ip: self.node_ip.to_string(),
                pod_namespace: pod_ns.to_string(),
                pod_name: pod.to_string(),
                interface,
                ip: pinned
                    .0
                    .unwrap_or_else(|| family.map(|f| f.to_string()).unwrap_or_default()),
                mac: pinned.1,
                ..Default::default()
            },
            status: None,
        };
        let ports: Api<Port> = Api::all(self.sdn.clone());
        let made = queued("creating the Port failed", &self.sdn_turns, async {
            Ok::<_, std::convert::Infallible>(ports.create(&PostParams::default(), &port).await)
        })
        .await?;
        match made {
            Ok(p) => Ok(p),
            // The server refused what the pod asks for (a pinned address or MAC outside the
            // VPC or held by another object): no retry makes it pass.
            Err(kube::Error::Api(s)) if s.code == 422 => Err(CniError::new(
                ErrorCode::InvalidConfig,
                "the server refused the pod's Port",
                s.message,
            )),
            Err(e) => Err(api_error("creating the Port failed", e)),
        }
    }

    /// Reads a Port (`None`: gone).
    pub async fn get_port(&self, name: &str) -> Result<Option<Port>, CniError> {
        let ports: Api<Port> = Api::all(self.sdn.clone());
        queued("reading the Port failed", &self.sdn_turns, ports.get_opt(name)).await
    }

    /// The live Ports of `w` in VPC `vpc` (one per family), taken for pod `pod_ns/pod` of this
    /// node: each is re-pointed here (`spec.node`, `spec.nodeIP`, the pod) with the
    /// resourceVersion it was read at, its address and MAC kept. Oldest first (the Port of
    /// the VPC's first family was made first). Empty: the workload has none yet.
    pub async fn bind_persistent(
        &self,
        vpc: &ResolvedVpc,
        pod_ns: &str,
        pod: &str,
        w: &Persistent,
    ) -> Result<Vec<Port>, CniError> {
        let ports: Api<Port> = Api::all(self.sdn.clone());
        let selector = format!(
            "sdn.cozystack.io/vpc-namespace={},sdn.cozystack.io/vpc={},sdn.cozystack.io/pod-namespace={pod_ns},{PORT_WORKLOAD_LABEL}={},{PORT_INTERFACE_LABEL}={}",
            vpc.namespace, vpc.name, w.workload, w.ifname
        );
        let mut found = queued(
            "listing the workload's Ports failed",
            &self.sdn_turns,
            ports.list(&kube::api::ListParams::default().labels(&selector)),
        )
        .await?
        .items;
        // A Port being deleted is revoked, not reused (a new one is made).
        found.retain(|p| p.metadata.deletion_timestamp.is_none());
        found.sort_by(|a, b| {
            (&a.metadata.creation_timestamp, &a.metadata.name)
                .cmp(&(&b.metadata.creation_timestamp, &b.metadata.name))
        });
        // One live holder at a time: a Port still held by another running pod of the workload
        // is refused (a retry succeeds once that pod is gone, as when a VM restarts), unless
        // the requester is that pod's live migration target (KubeVirt labels it so): then it
        // is prepared beside the holder, which keeps the Port until the cutover.
        let mut live_holder = None;
        for p in &found {
            let holder = (p.spec.pod_namespace.as_str(), p.spec.pod_name.as_str());
            if holder.1.is_empty() || holder == (pod_ns, pod) {
                continue;
            }
            let pods: Api<Pod> = Api::namespaced(self.kube.clone(), holder.0);
            let live = queued(
                "reading the workload's current pod failed",
                &self.kube_turns,
                pods.get_opt(holder.1),
            )
            .await?
            .filter(|h| {
                h.metadata.deletion_timestamp.is_none()
                    && !matches!(
                        h.status.as_ref().and_then(|s| s.phase.as_deref()),
                        Some("Succeeded" | "Failed")
                    )
            });
            if live.is_some() {
                live_holder = Some((
                    holder.0.to_string(),
                    holder.1.to_string(),
                    p.metadata.name.clone(),
                ));
                break;
            }
        }
        if let Some((hns, hname, port)) = live_holder {
            if w.migration.is_some() {
                return self.prepare_migration(found, pod_ns, pod, w).await;
            }
            return Err(CniError::new(
                ErrorCode::TryAgainLater,
                format!(
                    "workload {} already has a live pod {hns}/{hname} holding its Port {}",
                    w.workload,
                    port.unwrap_or_default()
                ),
                "a persistent Port has one live holder outside a live migration; retry once that pod is gone",
            ));
        }
        let mut bound = Vec::new();
        for p in found {
            let name = p.metadata.name.clone().unwrap_or_default();
            let patch = serde_json::json!({
                "metadata": { "resourceVersion": p.metadata.resource_version },
                "spec": { "node": self.node, "nodeIP": self.node_ip.to_string(),
                          "podNamespace": pod_ns, "podName": pod } });
            let p = queued(
                "taking the workload's Port failed",
                &self.sdn_turns,
                ports.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)),
            )
            .await?;
            tracing::info!(port = %name, pod = %format!("{pod_ns}/{pod}"), workload = %w.workload,
                "persistent Port taken: its address and MAC move here");
            bound.push(p);
        }
        Ok(bound)
    }

    /// A live migration's target (pod `pod_ns/pod` of this node, the workload's Ports held by
    /// a live pod elsewhere): each Port gets `spec.migrationTarget` naming this pod and node,
    /// written with the resourceVersion it was read at; its holder keeps it until the
    /// server's cutover. A Port prepared for another target already (two migrations at once)
    /// is refused; prepared for this pod (a retried ADD), it is taken as it is.
    async fn prepare_migration(
        &self,
        found: Vec<Port>,
        pod_ns: &str,
        pod: &str,
        w: &Persistent,
    ) -> Result<Vec<Port>, CniError> {
        let ports: Api<Port> = Api::all(self.sdn.clone());
        let target = PortMigrationTarget {
            node: self.node.clone(),
            node_ip: self.node_ip.to_string(),
            pod_namespace: pod_ns.to_string(),
            pod_name: pod.to_string(),
            migration_uid: w.migration.clone().unwrap_or_default(),
        };
        let mut prepared = Vec::new();
        for p in found {
            let name = p.metadata.name.clone().unwrap_or_default();
            match &p.spec.migration_target {
                Some(t) if t.pod_namespace == pod_ns && t.pod_name == pod && t.node == self.node => {
                    prepared.push(p);
                    continue;
                }
                Some(t) => {
                    return Err(CniError::new(
                        ErrorCode::TryAgainLater,
                        format!(
                            "Port {name} of workload {} is being migrated to pod {}/{} on node {}",
                            w.workload, t.pod_namespace, t.pod_name, t.node
                        ),
                        "one live migration at a time: retry once it ends",
                    ));
                }
                None => {}
            }
            if p.spec.node == self.node {
                return Err(CniError::new(
                    ErrorCode::TryAgainLater,
                    format!(
                        "Port {name} of workload {} is held on this node already",
                        w.workload
                    ),
                    "a live migration's target is on another node than its source",
                ));
            }
            let patch = serde_json::json!({
                "metadata": { "resourceVersion": p.metadata.resource_version },
                "spec": { "migrationTarget": target } });
            let p = queued(
                "preparing the workload's Port for the migration failed",
                &self.sdn_turns,
                ports.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)),
            )
            .await?;
            tracing::info!(port = %name, pod = %format!("{pod_ns}/{pod}"), workload = %w.workload,
                source = %p.spec.node, "live migration: Port prepared on this node beside its holder");
            prepared.push(p);
        }
        Ok(prepared)
    }

    /// Clears a Port's `spec.migrationTarget` if it still names pod `pod_ns/pod` of this node
    /// (a migration's target going before the cutover); gone or not prepared for it is fine.
    pub async fn clear_migration_target(&self, name: &str, pod_ns: &str, pod: &str) -> Result<(), CniError> {
        let ports: Api<Port> = Api::all(self.sdn.clone());
        let Some(p) = self.get_port(name).await? else {
            return Ok(());
        };
        let mine = p
            .spec
            .migration_target
            .as_ref()
            .is_some_and(|t| t.node == self.node && t.pod_namespace == pod_ns && t.pod_name == pod);
        if !mine {
            return Ok(());
        }
        let patch = serde_json::json!({
            "metadata": { "resourceVersion": p.metadata.resource_version },
            "spec": { "migrationTarget": null } });
        match tokio::time::timeout(
            CALL_TIMEOUT,
            ports.patch(name, &PatchParams::default(), &Patch::Merge(&patch)),
        )
        .await
        {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) if is_status(&e, 404) => Ok(()),
            Ok(Err(e)) => Err(api_error(
                &format!("clearing Port {name}'s migration target failed"),
                e,
            )),
            Err(_) => Err(api_error(
                &format!("clearing Port {name}'s migration target failed"),
                "timed out",
            )),
        }
    }

    /// Deletes a Port; gone already is fine.
    pub async fn delete_port(&self, name: &str) -> Result<(), CniError> {
        let ports: Api<Port> = Api::all(self.sdn.clone());
        match tokio::time::timeout(CALL_TIMEOUT, ports.delete(name, &DeleteParams::default())).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) if is_status(&e, 404) => Ok(()),
            Ok(Err(e)) => Err(api_error(&format!("deleting Port {name} failed"), e)),
            Err(_) => Err(api_error(&format!("deleting Port {name} failed"), "timed out")),
        }
    }

    /// Deletes a Port nothing of this node uses (no attachment, or its local state already
    /// removed) and releases it at once ([`Self::release_port`]).
    pub async fn discard_port(&self, name: &str) -> Result<(), CniError> {
        self.delete_port(name).await?;
        self.release_port(name).await
    }

    /// Removes the agent's `sdn.cozystack.io/sever` finalizer from a Port, once nothing of the
    /// pod on this node can use its address any more (severed, or torn down): the server then
    /// finishes the delete and releases the claims. Gone already, or without the finalizer, is
    /// fine. The write carries the resourceVersion it was computed from (another finalizer
    /// changing meanwhile is a conflict, and the edit is made again).
    pub async fn release_port(&self, name: &str) -> Result<(), CniError> {
        let ports: Api<Port> = Api::all(self.sdn.clone());
        let what = format!("releasing Port {name} failed");
        let mut last = String::new();
        for _ in 0..5 {
            let Some(p) = self.get_port(name).await? else {
                return Ok(());
            };
            let have = p.metadata.finalizers.unwrap_or_default();
            if !have.iter().any(|f| f == SEVER_FINALIZER) {
                return Ok(());
            }
            let rest: Vec<&String> = have.iter().filter(|f| *f != SEVER_FINALIZER).collect();
            let patch = serde_json::json!({ "metadata": {
                "resourceVersion": p.metadata.resource_version, "finalizers": rest } });
            match tokio::time::timeout(
                CALL_TIMEOUT,
                ports.patch(name, &PatchParams::default(), &Patch::Merge(&patch)),
            )
            .await
            {
                Ok(Ok(_)) => return Ok(()),
                Ok(Err(e)) if is_status(&e, 404) => return Ok(()),
                Ok(Err(e)) if is_status(&e, 409) => last = e.to_string(),
                Ok(Err(e)) => return Err(api_error(&what, e)),
                Err(_) => return Err(api_error(&what, "timed out")),
            }
        }
        Err(api_error(&what, last))
    }

    /// Stamps the pod with its VPC address and MAC.
    pub async fn stamp_pod(&self, ns: &str, name: &str, ip: IpAddr, mac: &str) -> Result<(), CniError> {
        let patch = serde_json::json!({ "metadata": { "annotations": {
            VPC_IP_ANNOTATION: ip.to_string(),
            VPC_MAC_ANNOTATION: mac,
        } } });
        self.patch_pod(ns, name, &patch).await
    }

    /// Sets annotation `key` of pod `ns/name` to `value` (a merge patch: only that key).
    pub async fn annotate_pod(&self, ns: &str, name: &str, key: &str, value: &str) -> Result<(), CniError> {
        let patch = serde_json::json!({ "metadata": { "annotations": { key: value } } });
        self.patch_pod(ns, name, &patch).await
    }

    async fn patch_pod(&self, ns: &str, name: &str, patch: &serde_json::Value) -> Result<(), CniError> {
        let pods: Api<Pod> = Api::namespaced(self.kube.clone(), ns);
        queued(
            "annotating the pod failed",
            &self.kube_turns,
            pods.patch(name, &PatchParams::default(), &Patch::Merge(patch)),
        )
        .await
        .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    #[tokio::test]
    async fn queued_calls_never_exceed_their_turns() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let turns = tokio::sync::Semaphore::new(2);
        let (now, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let call = || async {
            let n = now.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(n, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(5)).await;
            now.fetch_sub(1, Ordering::SeqCst);
            Ok::<_, String>(n)
        };
        let all = futures::future::join_all((0..8).map(|_| queued("test", &turns, call()))).await;
        assert!(all.iter().all(Result::is_ok));
        assert_eq!(most.load(Ordering::SeqCst), 2, "two turns, two calls at a time");
    }

    #[test]
    fn cached_grants_answer_only_granted_vpcs_with_a_vni() {
        let g = Grants {
            bindings: HashMap::from([(
                "t1".to_string(),
                vec![
                    ("t1".to_string(), "blue".to_string()),
                    ("own".to_string(), "red".to_string()),
                ],
            )]),
            vpcs: HashMap::from([
                (
                    ("t1".to_string(), "blue".to_string()),
                    ((100, 1400, false), vpc_ranges(&["10.1.0.0/24".into()])),
                ),
                (
                    ("own".to_string(), "red".to_string()),
                    ((0, 0, false), Vec::new()),
                ),
                (
                    ("t1".to_string(), "green".to_string()),
                    ((101, 0, false), Vec::new()),
                ),
            ]),
        };
        let blue = g.resolve("t1", "t1", "blue").unwrap();
        assert_eq!((blue.vni, blue.mtu), (100, 1400));
        assert_eq!(blue.ranges, [("10.1.0.0".parse().unwrap(), 24)]);
        // Granted but no VNI yet, not granted, other namespace: ask the API.
        assert!(g.resolve("t1", "own", "red").is_none());
        assert!(g.resolve("t1", "t1", "green").is_none());
        assert!(g.resolve("t2", "t1", "blue").is_none());
    }

    #[test]
    fn a_nodes_announcement_wins_over_its_spec_and_status() {
        let mut n: Node = serde_json::from_value(serde_json::json!({
            "metadata": { "name": "n1" },
            "spec": { "podCIDR": "10.244.1.0/24" },
            "status": { "addresses": [
                { "type": "Hostname", "address": "n1" },
                { "type": "ExternalIP", "address": "203.0.113.1" },
                { "type": "InternalIP", "address": "192.168.0.1" }
            ] }
        }))
        .unwrap();
        assert_eq!(node_pod_block(&n).unwrap().to_string(), "10.244.1.0/24");
        assert_eq!(node_address(&n), Some(IpAddr::V4(Ipv4Addr::new(192, 168, 0, 1))));
        n.metadata.annotations = Some(BTreeMap::from([
            (FABRIC_BLOCK_ANNOTATION.to_string(), "10.250.0.0/24".to_string()),
            (TUNNEL_IP_ANNOTATION.to_string(), "10.0.0.1".to_string()),
        ]));
        assert_eq!(node_pod_block(&n).unwrap().to_string(), "10.250.0.0/24");
        assert_eq!(node_spec_block(&n).unwrap().to_string(), "10.244.1.0/24");
        assert_eq!(node_address(&n), Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))));
        // A garbled announcement falls back.
        n.metadata.annotations = Some(BTreeMap::from([(
            FABRIC_BLOCK_ANNOTATION.to_string(),
            "10.250.0.1/24".to_string(),
        )]));
        assert_eq!(node_pod_block(&n).unwrap().to_string(), "10.244.1.0/24");
    }

    #[test]
    fn vpc_requests_default_to_the_pod_namespace() {
        assert_eq!(
            parse_vpc_request("t1", "blue").unwrap(),
            ("t1".to_string(), "blue".to_string())
        );
        assert_eq!(
            parse_vpc_request("t1", "owner/blue").unwrap(),
            ("owner".to_string(), "blue".to_string())
        );
        assert!(parse_vpc_request("t1", "a/b/c").is_err());
        assert!(parse_vpc_request("t1", "/x").is_err());
        assert!(parse_vpc_request("t1", "Blue").is_err());
    }
}
