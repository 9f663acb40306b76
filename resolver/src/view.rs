//! What the resolver knows of the cluster: a snapshot the agent rebuilds from its watches
//! (Ports and this node's Pods for the queriers, VPCPeerings, Services, EndpointSlices,
//! ServiceVIPs) and swaps in whole ([`ViewHandle::set`]). Queries read one snapshot, so an
//! answer never mixes two generations.
//!
//! The rules of the split horizon live here, apart from any wire format: who is asking
//! ([`View::querier`]) and which Services that VPC may see ([`View::visible`]), and whether
//! the querier's VPC asked for DNS64 ([`View::dns64`]).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::{Arc, RwLock};

/// A VPC by `(owner namespace, name)`.
pub type VpcKey = (String, String);

/// A Service by `(namespace, name)`.
pub type ServiceKey = (String, String);

/// A Service port's transport, as SRV names spell it (`_tcp`, `_udp`, `_sctp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
    /// SCTP.
    Sctp,
}

impl Protocol {
    /// From a Kubernetes `protocol` field (empty means TCP, as the API defaults it).
    pub fn from_kube(s: &str) -> Option<Self> {
        match s {
            "" | "TCP" => Some(Self::Tcp),
            "UDP" => Some(Self::Udp),
            "SCTP" => Some(Self::Sctp),
            _ => None,
        }
    }

    /// The SRV label without its underscore, lowercase.
    pub fn label(self) -> &'static str {
        match self {
            Self::Tcp => "tcp",
            Self::Udp => "udp",
            Self::Sctp => "sctp",
        }
    }
}

/// A named Service port (unnamed ports have no SRV name).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServicePort {
    /// `spec.ports[].name`, lowercase.
    pub name: String,
    /// Transport.
    pub protocol: Protocol,
    /// `spec.ports[].port` (what a client of the Service dials).
    pub port: u16,
}

/// A ready endpoint of a headless Service, by its VPC addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// `endpoints[].hostname` (lowercase), if the pod set one.
    pub hostname: Option<String>,
    /// The endpoint pod's addresses inside the Service's VPC (never its fabric address).
    pub addrs: Vec<IpAddr>,
}

impl Endpoint {
    /// The label this endpoint answers under `<label>.<svc>.<ns>.svc.<domain>` for one of
    /// its addresses: its hostname, else the address with dashes (`172-16-0-5`,
    /// `fd00--5`), which is also the SRV target of an endpoint without a hostname.
    pub fn label_for(&self, addr: IpAddr) -> String {
        match &self.hostname {
            Some(h) => h.clone(),
            None => dashed(addr),
        }
    }
}

/// An address as one DNS label: dots and colons become dashes.
pub fn dashed(addr: IpAddr) -> String {
    addr.to_string().replace(['.', ':'], "-")
}

/// A Service attached to a VPC (annotation `sdn.cozystack.io/vpc`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Service {
    /// The VPC it is attached to.
    pub vpc: VpcKey,
    /// Headless (`clusterIP: None`): answered with its endpoints, not a VIP.
    pub headless: bool,
    /// The ServiceVIP's addresses (one per family); empty until the VIP exists.
    pub vips: Vec<IpAddr>,
    /// Named ports, for SRV.
    pub ports: Vec<ServicePort>,
    /// Ready endpoints (headless Services only need them).
    pub endpoints: Vec<Endpoint>,
}

/// One generation of the cluster as the resolver sees it.
#[derive(Clone, Debug, Default)]
pub struct View {
    /// The fabric address of every VPC pod of this node → its VPC. The steering rewrites a
    /// VPC pod's query to come from this address, so it names the querier.
    queriers: HashMap<IpAddr, VpcKey>,
    /// VPC → the VPCs it is peered with (Ready peerings, both directions).
    peers: HashMap<VpcKey, BTreeSet<VpcKey>>,
    /// Attached Services.
    services: HashMap<ServiceKey, Service>,
    /// VPCs with DNS64 on (`spec.dns64`): their forwarded AAAA questions get synthesized
    /// answers when the name has only A records ([`crate::dns64`]).
    dns64: HashSet<VpcKey>,
    /// The SOA serial of this snapshot.
    generation: u32,
}

impl View {
    /// An empty view: everybody is refused.
    pub fn new() -> Self {
        Self::default()
    }

    /// A VPC pod of this node, by the fabric address its steered queries come from.
    pub fn add_querier(&mut self, fabric: IpAddr, vpc: VpcKey) -> &mut Self {
        self.queriers.insert(fabric, vpc);
        self
    }

    /// A Ready peering between `a` and `b` (symmetric: both see the other's Services).
    pub fn add_peering(&mut self, a: VpcKey, b: VpcKey) -> &mut Self {
        self.peers.entry(a.clone()).or_default().insert(b.clone());
        self.peers.entry(b).or_default().insert(a);
        self
    }

    /// An attached Service. Names are stored lowercase, as they are compared.
    pub fn add_service(&mut self, (ns, name): ServiceKey, svc: Service) -> &mut Self {
        self.services
            .insert((ns.to_ascii_lowercase(), name.to_ascii_lowercase()), svc);
        self
    }

    /// DNS64 for the pods of `vpc` (its `spec.dns64`).
    pub fn add_dns64(&mut self, vpc: VpcKey) -> &mut Self {
        self.dns64.insert(vpc);
        self
    }

    /// Whether the pods of `vpc` get DNS64 answers for forwarded names.
    pub fn dns64(&self, vpc: &VpcKey) -> bool {
        self.dns64.contains(vpc)
    }

    /// The serial number of the synthesized SOA; the agent bumps it with every snapshot.
    pub fn set_generation(&mut self, g: u32) -> &mut Self {
        self.generation = g;
        self
    }

    /// The SOA serial.
    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// Number of queriers, peered pairs' halves and Services (for logs).
    pub fn sizes(&self) -> (usize, usize, usize) {
        (
            self.queriers.len(),
            self.peers.values().map(BTreeSet::len).sum(),
            self.services.len(),
        )
    }

    /// The VPC of the pod behind a (steered) source address; `None` = refuse.
    pub fn querier(&self, src: IpAddr) -> Option<&VpcKey> {
        self.queriers.get(&canonical(src))
    }

    /// Whether a querier in `from` may see Services attached to `to`.
    pub fn sees(&self, from: &VpcKey, to: &VpcKey) -> bool {
        from == to || self.peers.get(from).is_some_and(|p| p.contains(to))
    }

    /// The Service `ns/name` if `from` may see it. Invisible and absent are the same
    /// answer on purpose: another tenant's names cannot be probed.
    pub fn visible(&self, from: &VpcKey, ns: &str, name: &str) -> Option<&Service> {
        self.services
            .get(&(ns.to_string(), name.to_string()))
            .filter(|s| self.sees(from, &s.vpc))
    }

    /// Whether `from` sees any Service in namespace `ns` (the name `<ns>.svc.<domain>`
    /// then exists, without records).
    pub fn sees_namespace(&self, from: &VpcKey, ns: &str) -> bool {
        self.services
            .iter()
            .any(|((n, _), s)| n == ns && self.sees(from, &s.vpc))
    }
}

/// An IPv4-mapped IPv6 source (a dual-stack socket) is the IPv4 address.
fn canonical(a: IpAddr) -> IpAddr {
    match a {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(a, IpAddr::V4),
        v4 => v4,
    }
}

/// The current snapshot, shared by the agent (writer) and the server tasks (readers).
#[derive(Clone, Debug, Default)]
pub struct ViewHandle(Arc<RwLock<Arc<View>>>);

impl ViewHandle {
    /// A handle on `v`.
    pub fn new(v: View) -> Self {
        Self(Arc::new(RwLock::new(Arc::new(v))))
    }

    /// The snapshot queries read now.
    pub fn get(&self) -> Arc<View> {
        match self.0.read() {
            Ok(g) => g.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Replace the snapshot.
    pub fn set(&self, v: View) {
        let v = Arc::new(v);
        match self.0.write() {
            Ok(mut g) => *g = v,
            Err(poisoned) => *poisoned.into_inner() = v,
        }
    }
}
