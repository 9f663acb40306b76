//! A Kubernetes Service and its EndpointSlices as the frontends this node programs: pure
//! data in, frontends out, with every refusal named ([`Refused`]) so the caller logs it with
//! the Service's name and nothing malformed reaches the maps.
//!
//! The semantics are kube-proxy's (`pkg/proxy`): a Service naming another proxy
//! (`service.kubernetes.io/service-proxy-name`) or headless is left alone (the watch's label
//! selector already drops most); ExternalName has no frontend; every ClusterIP of
//! `spec.clusterIPs` (one per family), every `spec.externalIPs` address and every
//! `status.loadBalancer.ingress` IP is a frontend of each port; a family's frontend has only
//! that family's endpoints (`addressType`); the slice port is the one with the Service
//! port's name and protocol (named `targetPort`s are resolved there by the endpointslice
//! controller); ready endpoints serve, and only when none is ready the serving terminating
//! ones; `internalTrafficPolicy: Local` keeps this node's endpoints only (none: the
//! connection is refused); `trafficDistribution` prefers this node's (`PreferSameNode`) or
//! this zone's (`PreferClose`, by the slices' hints) endpoints and falls back to all of them
//! when none is preferred. NodePorts are served on every node address, or on those
//! `--nodeport-addresses` admits ([`NodePortAddresses`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;

use cozyplane_apis::net::{IpNet, parse_cidr};
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;

use crate::core::lb::{Frontend, Want};

/// The label naming the proxy a Service is meant for; Services carrying it are not ours.
pub const PROXY_NAME_LABEL: &str = "service.kubernetes.io/service-proxy-name";
/// The label the endpoints controller puts on headless Services' slices.
pub const HEADLESS_LABEL: &str = "service.kubernetes.io/headless";
/// The label that ties an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// The label selector of both watches: what kube-proxy selects.
pub const SELECTOR: &str = "!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless";
/// `sessionAffinity: ClientIP` without `timeoutSeconds`: Kubernetes' default, 3 h.
pub const DEFAULT_AFFINITY_SECONDS: u32 = 10_800;

/// What this node is, for the topology-aware choices.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Me {
    /// This node's name (`endpoints[].nodeName`).
    pub node: String,
    /// Its `topology.kubernetes.io/zone`, if it has one.
    pub zone: Option<String>,
}

/// A part of a Service that cannot become a frontend, with why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refused {
    /// A port number outside 1–65535.
    Port(i32),
    /// A protocol the datapath does not balance (SCTP) or that is no protocol.
    Protocol(String),
    /// An address that does not parse.
    Address(String),
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Port(p) => write!(f, "port {p} is outside 1-65535"),
            Self::Protocol(p) if p == "SCTP" => write!(f, "protocol SCTP is not balanced yet"),
            Self::Protocol(p) => write!(f, "unknown protocol {p:?}"),
            Self::Address(a) => write!(f, "address {a:?} is no IP address"),
        }
    }
}

fn proto_number(p: Option<&str>) -> Result<u8, Refused> {
    match p {
        None | Some("TCP") => Ok(6),
        Some("UDP") => Ok(17),
        Some(other) => Err(Refused::Protocol(other.to_string())),
    }
}

fn port_number(p: i32) -> Result<u16, Refused> {
    u16::try_from(p).ok().filter(|p| *p != 0).ok_or(Refused::Port(p))
}

/// Whether `svc` is one this proxy serves at all.
pub fn ours(svc: &Service) -> bool {
    let labels = svc.metadata.labels.as_ref();
    let has = |k: &str| labels.is_some_and(|l| l.contains_key(k));
    !has(PROXY_NAME_LABEL) && !has(HEADLESS_LABEL)
}

/// One endpoint address of a slice port, with what the choice needs.
#[derive(Clone, Debug)]
struct Candidate {
    addr: IpAddr,
    port: u16,
    ready: bool,
    serving_terminating: bool,
    local: bool,
    same_zone: bool,
    for_me: bool,
}

fn candidates(slices: &[&EndpointSlice], ipv4: bool, port_name: &str, proto: u8, me: &Me) -> Vec<Candidate> {
    let mut out = Vec::new();
    let family = if ipv4 { "IPv4" } else { "IPv6" };
    for s in slices {
        if s.address_type != family {
            continue;
        }
        let port = s.ports.iter().flatten().find(|p| {
            p.name.as_deref().unwrap_or("") == port_name
                && proto_number(p.protocol.as_deref()).ok() == Some(proto)
        });
        let Some(port) = port.and_then(|p| p.port).and_then(|p| port_number(p).ok()) else {
            continue;
        };
        for ep in s.endpoints.iter().flatten() {
            // kube-proxy uses an endpoint's first address (the API allows only one).
            let Some(addr) = ep.addresses.first().and_then(|a| a.parse::<IpAddr>().ok()) else {
                continue;
            };
            if addr.is_ipv4() != ipv4 {
                continue;
            }
            let c = ep.conditions.as_ref();
            let ready = c.and_then(|c| c.ready).unwrap_or(true);
            let serving = c.and_then(|c| c.serving).unwrap_or(ready);
            let terminating = c.and_then(|c| c.terminating).unwrap_or(false);
            let hints = ep.hints.as_ref();
            out.push(Candidate {
                addr,
                port,
                ready,
                serving_terminating: serving && terminating,
                local: ep.node_name.as_deref() == Some(me.node.as_str()),
                same_zone: me.zone.as_ref().is_some_and(|z| {
                    hints
                        .and_then(|h| h.for_zones.as_ref())
                        .is_some_and(|zs| zs.iter().any(|fz| &fz.name == z))
                }),
                for_me: hints
                    .and_then(|h| h.for_nodes.as_ref())
                    .is_some_and(|ns| ns.iter().any(|n| n.name == me.node)),
            });
        }
    }
    out
}

/// The backends of one frontend from its candidates (the rules in the module docs).
/// `internal`: a ClusterIP, to which `internalTrafficPolicy` applies; an external address
/// reached from this node is served by every endpoint (kube-proxy's short-circuit: its
/// `externalTrafficPolicy` is about traffic from outside).
fn choose(cands: &[Candidate], svc: &Service, internal: bool) -> Vec<(IpAddr, u16)> {
    let spec = svc.spec.as_ref();
    let ready: Vec<&Candidate> = cands.iter().filter(|c| c.ready).collect();
    let mut set: Vec<&Candidate> = if ready.is_empty() {
        cands.iter().filter(|c| c.serving_terminating).collect()
    } else {
        ready
    };
    if internal && spec.and_then(|s| s.internal_traffic_policy.as_deref()) == Some("Local") {
        set.retain(|c| c.local);
    } else {
        let preferred: Vec<&Candidate> = match spec.and_then(|s| s.traffic_distribution.as_deref()) {
            Some("PreferSameNode") => set.iter().filter(|c| c.local || c.for_me).copied().collect(),
            Some("PreferClose" | "PreferSameZone") => {
                set.iter().filter(|c| c.same_zone || c.local).copied().collect()
            }
            _ => Vec::new(),
        };
        if !preferred.is_empty() {
            set = preferred;
        }
    }
    let distinct: BTreeSet<(IpAddr, u16)> = set.iter().map(|c| (c.addr, c.port)).collect();
    distinct.into_iter().collect()
}

/// The addresses a Service is reached at, each with whether it is a ClusterIP: its
/// ClusterIPs, external IPs and load balancer ingress IPs (not those of a load balancer that
/// proxies, `ipMode: Proxy`).
fn addresses(svc: &Service, refused: &mut Vec<Refused>) -> Vec<(IpAddr, bool)> {
    let mut raw: Vec<(&str, bool)> = Vec::new();
    if let Some(spec) = &svc.spec {
        match &spec.cluster_ips {
            Some(ips) if !ips.is_empty() => raw.extend(ips.iter().map(|ip| (ip.as_str(), true))),
            _ => raw.extend(spec.cluster_ip.as_deref().map(|ip| (ip, true))),
        }
        raw.retain(|(ip, _)| !ip.is_empty() && *ip != "None");
        raw.extend(spec.external_ips.iter().flatten().map(|ip| (ip.as_str(), false)));
    }
    let ingress = svc
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|l| l.ingress.as_ref());
    for i in ingress.into_iter().flatten() {
        if i.ip_mode.as_deref() != Some("Proxy")
            && let Some(ip) = i.ip.as_deref()
        {
            raw.push((ip, false));
        }
    }
    // A ClusterIP also listed as external stays internal.
    let mut out: BTreeMap<IpAddr, bool> = BTreeMap::new();
    for (a, internal) in raw {
        match a.parse::<IpAddr>() {
            Ok(ip) => *out.entry(ip).or_insert(internal) |= internal,
            Err(_) => refused.push(Refused::Address(a.to_string())),
        }
    }
    out.into_iter().collect()
}

/// The frontends of `svc` on net 0 with their backends from `slices` (the Service's own),
/// and what of it was refused; no NodePort frontends ([`frontends_with`] has them).
pub fn frontends(
    svc: &Service,
    slices: &[&EndpointSlice],
    me: &Me,
) -> (BTreeMap<Frontend, Want>, Vec<Refused>) {
    frontends_with(svc, slices, me, &NodeAddrs::default(), &NodePortAddresses::All)
}

/// A LoadBalancer Service with `externalTrafficPolicy: Local`: its `healthCheckNodePort` and
/// how many of its endpoints are on this node and ready (what kube-proxy answers there, so
/// that a load balancer sends outside traffic only to nodes with a local endpoint).
pub fn health_check(svc: &Service, slices: &[&EndpointSlice], me: &Me) -> Option<(u16, usize)> {
    let spec = svc.spec.as_ref()?;
    if spec.type_.as_deref() != Some("LoadBalancer")
        || spec.external_traffic_policy.as_deref() != Some("Local")
    {
        return None;
    }
    let port = port_number(spec.health_check_node_port?).ok()?;
    let local: BTreeSet<&str> = slices
        .iter()
        .flat_map(|s| s.endpoints.iter().flatten())
        .filter(|e| e.node_name.as_deref() == Some(me.node.as_str()))
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true))
        .filter_map(|e| e.addresses.first().map(String::as_str))
        .collect();
    Some((port, local.len()))
}

/// The net of the frontends met at the uplink (`SDN_LB_NET_EXTERNAL`, `lib/lb.h`).
pub const EXTERNAL_NET: u32 = cozyplane_bpf::abi::LB_NET_EXTERNAL;

/// This node's endpoints of `cands` that may serve (ready, else serving and terminating).
fn local_only(cands: &[Candidate]) -> Vec<(IpAddr, u16)> {
    let local: Vec<Candidate> = cands.iter().filter(|c| c.local).cloned().collect();
    let ready: Vec<&Candidate> = local.iter().filter(|c| c.ready).collect();
    let set: Vec<&Candidate> = if ready.is_empty() {
        local.iter().filter(|c| c.serving_terminating).collect()
    } else {
        ready
    };
    let distinct: BTreeSet<(IpAddr, u16)> = set.iter().map(|c| (c.addr, c.port)).collect();
    distinct.into_iter().collect()
}

/// The nodes' addresses, for NodePorts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeAddrs {
    /// Every node's `InternalIP`s and `ExternalIP`s, sorted and distinct.
    pub all: Vec<IpAddr>,
    /// This node's.
    pub mine: Vec<IpAddr>,
    /// Every node's primary addresses ([`primary_addresses`]), sorted and distinct: where
    /// `--nodeport-addresses=primary` serves NodePorts.
    pub primary: Vec<IpAddr>,
}

/// A node's primary address of each family, as kube-proxy picks its node IPs: the first
/// address of that family among the node's `InternalIP`s, else among its `ExternalIP`s.
pub fn primary_addresses(n: &Node) -> Vec<IpAddr> {
    let addrs = n.status.as_ref().and_then(|s| s.addresses.as_ref());
    let of_type = |t: &'static str| {
        addrs
            .into_iter()
            .flatten()
            .filter(move |a| a.type_ == t)
            .filter_map(|a| a.address.parse::<IpAddr>().ok())
    };
    let ordered: Vec<IpAddr> = of_type("InternalIP").chain(of_type("ExternalIP")).collect();
    [true, false]
        .into_iter()
        .filter_map(|v4| ordered.iter().find(|a| a.is_ipv4() == v4).copied())
        .collect()
}

/// `--nodeport-addresses`, kube-proxy's flag of that name: which node addresses serve
/// NodePorts. Parsed from its command-line form by [`NodePortAddresses::parse`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum NodePortAddresses {
    /// Every address of every node (the flag unset or empty).
    #[default]
    All,
    /// The addresses inside these ranges. A family none of the ranges is of keeps every
    /// address, as kube-proxy reads the flag: `10.0.0.0/8` alone restricts IPv4 only.
    Cidrs(Vec<IpNet>),
    /// `primary`: each node's primary address of each family ([`primary_addresses`]).
    Primary,
}

impl NodePortAddresses {
    /// The flag's value: comma-separated CIDRs (host bits allowed and dropped, as
    /// kube-proxy allows them), the keyword `primary` alone, or nothing. A malformed entry
    /// is refused with what was wrong, so that the agent does not start with it.
    pub fn parse(s: &str) -> Result<Self, String> {
        if s.trim().is_empty() {
            return Ok(Self::All);
        }
        let entries: Vec<&str> = s.split(',').map(str::trim).collect();
        if entries.contains(&"primary") {
            return if entries.len() == 1 {
                Ok(Self::Primary)
            } else {
                Err(format!("{s:?}: `primary` cannot be combined with CIDRs"))
            };
        }
        let mut nets = Vec::with_capacity(entries.len());
        for e in entries {
            if e.is_empty() {
                return Err(format!("{s:?}: an empty entry"));
            }
            let net = parse_cidr(e).map_err(|_| {
                format!("{e:?} is neither a CIDR (such as 10.0.0.0/8 or fd00::/64) nor `primary`")
            })?;
            nets.push(net.trunc());
        }
        Ok(Self::Cidrs(nets))
    }

    /// Whether a node's address `ip` serves NodePorts; `primary`: the nodes' primary
    /// addresses ([`NodeAddrs::primary`]).
    pub fn admits(&self, ip: IpAddr, primary: &[IpAddr]) -> bool {
        match self {
            Self::All => true,
            Self::Primary => primary.contains(&ip),
            Self::Cidrs(nets) => {
                let mut of_family = nets
                    .iter()
                    .filter(|n| matches!(n, IpNet::V4(_)) == ip.is_ipv4())
                    .peekable();
                of_family.peek().is_none() || of_family.any(|n| n.contains(&ip))
            }
        }
    }
}

/// [`frontends`], plus:
///
/// * for a NodePort or LoadBalancer Service, each port's `nodePort` on every address of
///   `nodes.all` of a family the Service has and that `nodeport_addresses` admits (the agent's
///   `--nodeport-addresses`, the same on every node): a client on this node (a pod, or the node)
///   reaching any node's NodePort is balanced here, over every endpoint (kube-proxy's treatment
///   of cluster-internal traffic to a NodePort); under `externalTrafficPolicy: Local` only this
///   node's own addresses, another node's NodePort being that node's to answer with its own
///   endpoints;
/// * the frontends traffic from outside the cluster meets at this node's uplink, in the
///   external net ([`EXTERNAL_NET`]): the NodePorts on the admitted addresses of `nodes.mine`, the external IPs and the
///   LoadBalancer IPs. Under `externalTrafficPolicy: Local` they are balanced over this node's
///   endpoints only (the client's address is kept; none: refused); under `Cluster` over the
///   same endpoints as a client inside (those of another node are reached NATed to this
///   node's address, `bpf/lib/lb_snat.h`).
pub fn frontends_with(
    svc: &Service,
    slices: &[&EndpointSlice],
    me: &Me,
    nodes: &NodeAddrs,
    nodeport_addresses: &NodePortAddresses,
) -> (BTreeMap<Frontend, Want>, Vec<Refused>) {
    let mut out = BTreeMap::new();
    let mut refused = Vec::new();
    let Some(spec) = svc.spec.as_ref() else {
        return (out, refused);
    };
    if !ours(svc) || spec.type_.as_deref() == Some("ExternalName") {
        return (out, refused);
    }
    let affinity = if spec.session_affinity.as_deref() == Some("ClientIP") {
        spec.session_affinity_config
            .as_ref()
            .and_then(|c| c.client_ip.as_ref())
            .and_then(|c| c.timeout_seconds)
            .and_then(|t| u32::try_from(t).ok())
            .filter(|t| *t > 0)
            .unwrap_or(DEFAULT_AFFINITY_SECONDS)
    } else {
        0
    };
    let ips = addresses(svc, &mut refused);
    let families: BTreeSet<bool> = ips
        .iter()
        .filter(|(_, internal)| *internal)
        .map(|(ip, _)| ip.is_ipv4())
        .collect();
    let node_ports = matches!(spec.type_.as_deref(), Some("NodePort" | "LoadBalancer"));
    let external_local = spec.external_traffic_policy.as_deref() == Some("Local");
    for p in spec.ports.iter().flatten() {
        let (proto, port) = match (proto_number(p.protocol.as_deref()), port_number(p.port)) {
            (Ok(proto), Ok(port)) => (proto, port),
            (Err(e), _) | (_, Err(e)) => {
                refused.push(e);
                continue;
            }
        };
        let name = p.name.as_deref().unwrap_or("");
        // One frontend: in the external net (outside clients: this node's endpoints only
        // under `externalTrafficPolicy: Local`, else any), or net 0 (`internal`: a
        // ClusterIP, to which internalTrafficPolicy applies).
        let mut front = |ip: IpAddr, port: u16, net: u32, internal: bool| {
            let cands = candidates(slices, ip.is_ipv4(), name, proto, me);
            let chosen = if net == EXTERNAL_NET && external_local {
                local_only(&cands)
            } else {
                choose(&cands, svc, internal)
            };
            let backends = chosen.into_iter().map(|(a, port)| (0, a, port)).collect();
            let f = Frontend {
                net,
                vip: ip,
                proto,
                port,
            };
            out.insert(f, Want { backends, affinity });
        };
        for (ip, internal) in &ips {
            if !internal {
                front(*ip, port, EXTERNAL_NET, false);
            }
            front(*ip, port, 0, *internal);
        }
        let Some(node_port) = p.node_port.filter(|_| node_ports) else {
            continue;
        };
        let node_port = match port_number(node_port) {
            Ok(n) => n,
            Err(e) => {
                refused.push(e);
                continue;
            }
        };
        let serves = |ip: &&IpAddr| {
            families.contains(&ip.is_ipv4()) && nodeport_addresses.admits(**ip, &nodes.primary)
        };
        for ip in nodes.mine.iter().filter(serves) {
            front(*ip, node_port, EXTERNAL_NET, false);
        }
        // Another node's NodePort of an `externalTrafficPolicy: Local` Service is that
        // node's to answer (with its own endpoints, or refused): not balanced here. The
        // upstream suite holds kube-proxy to this (`should fallback to local terminating
        // endpoints …`: a pod reaching a node without endpoints is refused).
        let reached_here = |ip: &&IpAddr| !external_local || nodes.mine.contains(*ip);
        for ip in nodes.all.iter().filter(serves).filter(reached_here) {
            front(*ip, node_port, 0, false);
        }
    }
    (out, refused)
}

/// One `hostPort` of a pod of this node: where it is reached and where it leads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostPort {
    /// `hostIP`; `None` for every address of the node.
    pub host_ip: Option<IpAddr>,
    /// `hostPort`.
    pub host_port: u16,
    /// 6 or 17.
    pub proto: u8,
    /// The pod's addresses (`status.podIPs`).
    pub pod_ips: Vec<IpAddr>,
    /// `containerPort`.
    pub container_port: u16,
}

/// The hostPorts of `pod` (none for a host-network pod, whose ports are the node's own, or a
/// pod without an address yet); malformed ones are left out.
pub fn host_ports(pod: &Pod) -> Vec<HostPort> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    if spec.host_network == Some(true) || pod.metadata.deletion_timestamp.is_some() {
        return Vec::new();
    }
    let pod_ips: Vec<IpAddr> = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ips.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|p| p.ip.parse().ok())
        .collect();
    if pod_ips.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for c in &spec.containers {
        for p in c.ports.iter().flatten() {
            let (Some(hp), Ok(proto)) = (p.host_port, proto_number(p.protocol.as_deref())) else {
                continue;
            };
            let (Ok(host_port), Ok(container_port)) = (port_number(hp), port_number(p.container_port)) else {
                continue;
            };
            let host_ip = p
                .host_ip
                .as_deref()
                .filter(|h| !h.is_empty() && *h != "0.0.0.0" && *h != "::")
                .and_then(|h| h.parse().ok());
            out.push(HostPort {
                host_ip,
                host_port,
                proto,
                pod_ips: pod_ips.clone(),
                container_port,
            });
        }
    }
    out
}

/// The frontends of a pod's hostPorts on this node's addresses `mine` (or its `hostIP`), each
/// to the pod's address of the same family: in net 0 (this node's clients) and in the external
/// net (everyone else, arriving at the uplink), as the `portmap` plugin's DNAT did.
pub fn host_port_frontends(hps: &[HostPort], mine: &[IpAddr]) -> BTreeMap<Frontend, Want> {
    let mut out = BTreeMap::new();
    for hp in hps {
        let addrs: Vec<IpAddr> = match hp.host_ip {
            Some(ip) => vec![ip],
            None => mine.to_vec(),
        };
        for addr in addrs {
            let Some(pod) = hp.pod_ips.iter().find(|p| p.is_ipv4() == addr.is_ipv4()) else {
                continue;
            };
            for net in [0, EXTERNAL_NET] {
                let f = Frontend {
                    net,
                    vip: addr,
                    proto: hp.proto,
                    port: hp.host_port,
                };
                let w = Want {
                    backends: vec![(0, *pod, hp.container_port)],
                    affinity: 0,
                };
                out.insert(f, w);
            }
        }
    }
    out
}

#[cfg(test)]
#[path = "model_tests.rs"]
mod tests;
