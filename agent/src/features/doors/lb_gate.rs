//! LoadBalancer ingress into VPCs (`bpf/lib/lb_gate.h`), the agent's half:
//!
//! * `sdn_lbg_ingress[vni]` for every VPC whose effective VPCGateway (the oldest of the
//!   VPC's gateways: creation time, then name) has `spec.ingress.loadBalancer: true`;
//! * `sdn_lbg_front[{address, port, protocol}]` for every port of every LoadBalancer Service
//!   whose ready backends are all VPC pods of one VPC: each `status.loadBalancer.ingress`
//!   IP of the backends' family, with the backends' VPC addresses (their Ports, found by
//!   the pod of each EndpointSlice endpoint) and target ports; at most 16 (sorted, the rest
//!   left out, logged);
//! * `sdn_lbg_rev[{vni, backend, target port, protocol}]` → the frontend, for the replies;
//! * for a Service port with a `nodePort`, a gate-only frontend on each of this node's
//!   addresses (`SDN_LBG_F_GATE_ONLY`): the gate applies there too, and an admitted packet is
//!   left to the node's Service proxy. Otherwise the NodePort would be a side door.
//!
//! A Service with a default-network backend is not a door into a VPC: it is left to
//! whatever serves Services on the node (kube-proxy). The Services the server owns for
//! FloatingIPs and gateways (`service.kubernetes.io/service-proxy-name: cozyplane`) are
//! the Floating IP's and the gateway NAT's, not LoadBalancer ingress. Frontends are
//! programmed whatever the gate says: the gate is `sdn_lbg_ingress`, so opening or closing
//! it is one entry per VPC, and a refused packet is counted as a refusal.
//!
//! The watches live in [`crate::features::doors`]; this module is the decision and the writes.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;
use std::path::Path;

use cozyplane_apis::v1alpha1::VPCGateway;
use cozyplane_bpf::abi::LbgFront;
use cozyplane_bpf::maps::lbg_front::{Frontend, LbgFrontMap};
use cozyplane_bpf::maps::lbg_ingress::LbgIngressMap;
use cozyplane_bpf::maps::lbg_rev::{Backend, LbgRevMap};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

use crate::core::watch::{name_of, pinned as read_pinned};
use crate::features::doors::fip::{ObjKey, age_of};

const TCP: u8 = 6;
const UDP: u8 = 17;
/// Services the server owns for FloatingIPs and gateways carry this proxy name.
const PROXY_NAME_LABEL: &str = "service.kubernetes.io/service-proxy-name";
const OWN_PROXY: &str = "cozyplane";
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// What the gate needs of a VPCGateway.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct GwRow {
    pub(crate) vpc: ObjKey,
    pub(crate) age: (String, String),
    pub(crate) lb: bool,
}

pub(crate) fn gw_row(g: &VPCGateway) -> Option<(ObjKey, GwRow)> {
    if g.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let key = name_of(&g.metadata);
    Some((
        key.clone(),
        GwRow {
            vpc: (key.0.clone(), g.spec.vpc_ref.name.clone()),
            age: (age_of(&g.metadata), key.1),
            lb: g.spec.ingress.load_balancer,
        },
    ))
}

/// A port: `(name, port, protocol)`.
type SvcPort = (String, u16, u8);

/// What the decision needs of a LoadBalancer Service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SvcRow {
    pub(crate) ingress: Vec<IpAddr>,
    pub(crate) ports: Vec<SvcPort>,
    /// `(port name, nodePort, protocol)` of the ports that have one.
    pub(crate) node_ports: Vec<SvcPort>,
}

/// A Service's or an EndpointSlice's port as the API spells it (the protocol TCP when
/// unset); `None` for other protocols and numbers that are no port.
fn svc_port(name: Option<&String>, port: Option<i32>, protocol: Option<&String>) -> Option<SvcPort> {
    let proto = match protocol.map_or("TCP", String::as_str) {
        "TCP" => TCP,
        "UDP" => UDP,
        _ => return None,
    };
    Some((
        name.cloned().unwrap_or_default(),
        u16::try_from(port?).ok()?,
        proto,
    ))
}

pub(crate) fn svc_row(s: &Service) -> Option<(ObjKey, SvcRow)> {
    let spec = s.spec.as_ref()?;
    if spec.type_.as_deref() != Some("LoadBalancer") {
        return None;
    }
    let own = s
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(PROXY_NAME_LABEL))
        .is_some_and(|v| v == OWN_PROXY);
    if own {
        return None;
    }
    let ingress = s
        .status
        .as_ref()
        .and_then(|st| st.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .map(|v| v.iter().filter_map(|i| i.ip.as_ref()?.parse().ok()).collect())
        .unwrap_or_default();
    let ports = spec
        .ports
        .iter()
        .flatten()
        .filter_map(|p| svc_port(p.name.as_ref(), Some(p.port), p.protocol.as_ref()))
        .collect();
    let node_ports = spec
        .ports
        .iter()
        .flatten()
        .filter_map(|p| svc_port(p.name.as_ref(), p.node_port, p.protocol.as_ref()))
        .collect();
    Some((
        name_of(&s.metadata),
        SvcRow {
            ingress,
            ports,
            node_ports,
        },
    ))
}

/// What the decision needs of an EndpointSlice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SliceRow {
    /// `(namespace, kubernetes.io/service-name)`.
    pub(crate) service: ObjKey,
    /// `(name, target port, protocol)`.
    pub(crate) ports: Vec<SvcPort>,
    /// Ready endpoints by their pod `(namespace, name)`; `None`: not a pod.
    pub(crate) pods: Vec<Option<ObjKey>>,
}

pub(crate) fn slice_row(s: &EndpointSlice) -> Option<(ObjKey, SliceRow)> {
    let key = name_of(&s.metadata);
    let svc = s.metadata.labels.as_ref()?.get(SERVICE_NAME_LABEL)?.clone();
    let ports = s
        .ports
        .iter()
        .flatten()
        .filter_map(|p| svc_port(p.name.as_ref(), p.port, p.protocol.as_ref()))
        .collect();
    let pods = s
        .endpoints
        .iter()
        .flatten()
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true))
        .map(|e| {
            let t = e.target_ref.as_ref()?;
            if t.kind.as_deref() != Some("Pod") {
                return None;
            }
            Some((
                t.namespace.clone().unwrap_or_else(|| key.0.clone()),
                t.name.clone()?,
            ))
        })
        .collect();
    Some((
        key.clone(),
        SliceRow {
            service: (key.0, svc),
            ports,
            pods,
        },
    ))
}

/// The VNIs whose effective gateway admits LoadBalancer ingress.
pub(crate) fn admitted<'a>(
    vnis: &HashMap<ObjKey, u32>,
    gws: impl IntoIterator<Item = &'a GwRow>,
) -> HashSet<u32> {
    let mut oldest: HashMap<&ObjKey, &GwRow> = HashMap::new();
    for g in gws {
        let e = oldest.entry(&g.vpc).or_insert(g);
        if g.age < e.age {
            *e = g;
        }
    }
    oldest
        .into_iter()
        .filter(|(_, g)| g.lb)
        .filter_map(|(vpc, _)| vnis.get(vpc).copied())
        .filter(|v| *v != 0)
        .collect()
}

/// A frontend's value: `(net, SDN_LBG_F_* flags, backends)`.
pub(crate) type FrontValue = (u32, u32, Vec<(IpAddr, u16)>);

/// The frontend and reverse entries this node should hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Desired {
    pub(crate) front: HashMap<Frontend, FrontValue>,
    pub(crate) rev: HashMap<Backend, Frontend>,
}

/// The entries for `services`, their `slices`, and the VPC addresses of pods
/// (`(pod namespace, pod name)` → `(vni, vpc address)`, one per family); `node_addrs` are
/// this node's addresses, for the NodePorts.
pub(crate) fn desired(
    services: &HashMap<ObjKey, SvcRow>,
    slices: &HashMap<ObjKey, SliceRow>,
    pod_addrs: &HashMap<ObjKey, Vec<(u32, IpAddr)>>,
    node_addrs: &[IpAddr],
) -> Desired {
    let mut by_svc: HashMap<&ObjKey, Vec<&SliceRow>> = HashMap::new();
    for s in slices.values() {
        by_svc.entry(&s.service).or_default().push(s);
    }
    let mut d = Desired::default();
    // Sorted, so that a reverse entry two frontends want goes to the same one every time.
    let services: BTreeMap<&ObjKey, &SvcRow> = services.iter().collect();
    for (key, svc) in services {
        let slices = by_svc.get(key).map(Vec::as_slice).unwrap_or_default();
        for (name, port, proto) in &svc.ports {
            for addr in &svc.ingress {
                let mut nets = HashSet::new();
                let mut backends: Vec<(IpAddr, u16)> = Vec::new();
                let mut vpc_only = true;
                for s in slices {
                    let Some((_, tport, _)) = s.ports.iter().find(|(n, _, pr)| n == name && pr == proto)
                    else {
                        continue;
                    };
                    for pod in &s.pods {
                        let addrs = pod.as_ref().and_then(|p| pod_addrs.get(p));
                        let Some(addrs) = addrs else {
                            vpc_only = false;
                            continue;
                        };
                        for (vni, ip) in addrs.iter().filter(|(_, ip)| ip.is_ipv4() == addr.is_ipv4()) {
                            nets.insert(*vni);
                            backends.push((*ip, *tport));
                        }
                    }
                }
                if !vpc_only || nets.len() != 1 {
                    if vpc_only && nets.len() > 1 {
                        tracing::warn!(service = ?key, "backends in several VPCs: no LoadBalancer door");
                    }
                    continue;
                }
                let net = nets.into_iter().next().unwrap_or_default();
                backends.sort_unstable();
                backends.dedup();
                if backends.len() > cozyplane_bpf::abi::LB_BACKENDS {
                    tracing::warn!(service = ?key, n = backends.len(), "more than 16 backends: the rest are left out");
                    backends.truncate(cozyplane_bpf::abi::LB_BACKENDS);
                }
                let front = (*addr, *port, *proto);
                for (ip, tport) in &backends {
                    d.rev.entry((net, (*ip, *tport, *proto))).or_insert(front);
                }
                d.front.insert(front, (net, 0, backends));
            }
        }
        // The VPC of the Service's frontends gates its NodePorts on this node.
        let nets: HashSet<u32> = d
            .front
            .iter()
            .filter(|((a, _, _), _)| svc.ingress.contains(a))
            .map(|(_, (net, _, _))| *net)
            .collect();
        if let (1, Some(net)) = (nets.len(), nets.iter().next()) {
            for (_, np, proto) in &svc.node_ports {
                for node in node_addrs {
                    d.front
                        .insert((*node, *np, *proto), (*net, LbgFront::F_GATE_ONLY, Vec::new()));
                }
            }
        }
    }
    d
}

/// What is pinned now (adopted at start).
pub(crate) fn pinned(pin_dir: &Path) -> (Desired, HashSet<u32>) {
    let front = read_pinned(LbgFrontMap::from_pin(pin_dir), LbgFrontMap::entries)
        .map(|(f, net, flags, be)| (f, (net, flags, be)))
        .collect();
    let rev = read_pinned(LbgRevMap::from_pin(pin_dir), LbgRevMap::entries).collect();
    let gate = read_pinned(LbgIngressMap::from_pin(pin_dir), LbgIngressMap::nets).collect();
    (Desired { front, rev }, gate)
}

/// Writes the difference: the gate first when it closes, last when it opens; reverse
/// entries before the frontends that lead to them.
pub(crate) fn sync(
    pin_dir: &Path,
    want: &Desired,
    want_gate: &HashSet<u32>,
    applied: &mut Desired,
    applied_gate: &mut HashSet<u32>,
    prunable: bool,
    gate_prunable: bool,
) {
    let (Ok(mut front), Ok(mut rev), Ok(mut gate)) = (
        LbgFrontMap::from_pin(pin_dir),
        LbgRevMap::from_pin(pin_dir),
        LbgIngressMap::from_pin(pin_dir),
    ) else {
        tracing::warn!(
            "sdn_lbg_front/sdn_lbg_rev/sdn_lbg_ingress are not pinned under {}",
            pin_dir.display()
        );
        return;
    };
    // The gate closes only on what the API says (a VPC's gateway not listed yet is no
    // reason to close): it waits for complete lists of VPCs and gateways, and only those,
    // so a Service watch that cannot list never keeps a gate open.
    if gate_prunable {
        for net in applied_gate.clone().difference(want_gate) {
            if gate.refuse(*net).is_ok() {
                applied_gate.remove(net);
                tracing::info!(net, "LoadBalancer ingress closed");
            }
        }
    }
    for (b, f) in &want.rev {
        if applied.rev.get(b) != Some(f) && rev.upsert(*b, *f).is_ok() {
            applied.rev.insert(*b, *f);
        }
    }
    for (f, v) in &want.front {
        if applied.front.get(f) != Some(v) {
            match front.upsert(*f, v.0, v.1, &v.2) {
                Ok(()) => {
                    applied.front.insert(*f, v.clone());
                }
                Err(e) => tracing::warn!(frontend = ?f, "sdn_lbg_front upsert: {e}"),
            }
        }
    }
    if prunable {
        let stale: Vec<Frontend> = applied
            .front
            .keys()
            .filter(|f| !want.front.contains_key(*f))
            .copied()
            .collect();
        for f in stale {
            if front.remove(f).is_ok() {
                applied.front.remove(&f);
            }
        }
        let stale: Vec<Backend> = applied
            .rev
            .keys()
            .filter(|b| !want.rev.contains_key(*b))
            .copied()
            .collect();
        for b in stale {
            if rev.remove(b).is_ok() {
                applied.rev.remove(&b);
            }
        }
    }
    for net in want_gate.difference(&applied_gate.clone()) {
        match gate.admit(*net) {
            Ok(()) => {
                applied_gate.insert(*net);
                tracing::info!(net, "LoadBalancer ingress admitted");
            }
            Err(e) => tracing::warn!(net, "sdn_lbg_ingress admit: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(ns: &str, name: &str) -> ObjKey {
        (ns.into(), name.into())
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn gw(vpc: &str, age: &str, lb: bool) -> GwRow {
        GwRow {
            vpc: key("t1", vpc),
            age: (age.into(), "g".into()),
            lb,
        }
    }

    #[test]
    fn the_effective_gateway_decides_the_gate() {
        let vnis = HashMap::from([
            (key("t1", "a"), 100),
            (key("t1", "b"), 200),
            (key("t1", "c"), 300),
        ]);
        let gws = [
            gw("a", "2026-01-01T00:00:00Z", true),
            // b's oldest gateway does not admit; a newer one that does is not effective.
            gw("b", "2026-01-01T00:00:00Z", false),
            gw("b", "2026-01-02T00:00:00Z", true),
            // c's newer one does not matter either way.
            gw("c", "2026-01-02T00:00:00Z", false),
            gw("c", "2026-01-01T00:00:00Z", true),
            gw("nobody", "1", true),
        ];
        assert_eq!(admitted(&vnis, &gws), HashSet::from([100, 300]));
        assert_eq!(admitted(&vnis, &[]), HashSet::new(), "no gateway: refused");
    }

    fn svc(ingress: &[&str]) -> SvcRow {
        SvcRow {
            ingress: ingress.iter().map(|s| ip(s)).collect(),
            ports: vec![("web".into(), 80, TCP)],
            node_ports: vec![("web".into(), 30080, TCP)],
        }
    }

    fn slice(pods: &[Option<(&str, &str)>]) -> SliceRow {
        SliceRow {
            service: key("t1", "s"),
            ports: vec![("web".into(), 8080, TCP)],
            pods: pods.iter().map(|p| p.map(|(n, m)| key(n, m))).collect(),
        }
    }

    fn pods() -> HashMap<ObjKey, Vec<(u32, IpAddr)>> {
        HashMap::from([
            (
                key("t1", "p1"),
                vec![(100, ip("10.0.0.1")), (100, ip("fd00:a::1"))],
            ),
            (key("t1", "p2"), vec![(100, ip("10.0.0.2"))]),
            (key("t1", "q"), vec![(200, ip("10.0.0.9"))]),
        ])
    }

    fn run(s: SvcRow, sl: SliceRow) -> Desired {
        desired(
            &HashMap::from([(key("t1", "s"), s)]),
            &HashMap::from([(key("t1", "s-1"), sl)]),
            &pods(),
            &[ip("192.0.2.2")],
        )
    }

    #[test]
    fn vpc_backends_make_a_frontend_per_ingress_address_and_family() {
        let d = run(
            svc(&["203.0.113.20", "2001:db8::20"]),
            slice(&[Some(("t1", "p2")), Some(("t1", "p1"))]),
        );
        assert_eq!(
            d.front[&(ip("203.0.113.20"), 80, TCP)],
            (100, 0, vec![(ip("10.0.0.1"), 8080), (ip("10.0.0.2"), 8080)])
        );
        assert_eq!(
            d.front[&(ip("2001:db8::20"), 80, TCP)],
            (100, 0, vec![(ip("fd00:a::1"), 8080)])
        );
        // The NodePort on this node's address: the gate only.
        assert_eq!(
            d.front[&(ip("192.0.2.2"), 30080, TCP)],
            (100, LbgFront::F_GATE_ONLY, vec![])
        );
        assert_eq!(d.front.len(), 3);
        assert_eq!(
            d.rev[&(100, (ip("10.0.0.2"), 8080, TCP))],
            (ip("203.0.113.20"), 80, TCP)
        );
        assert_eq!(d.rev.len(), 3);
    }

    #[test]
    fn default_network_or_mixed_vpc_backends_are_no_door() {
        assert_eq!(
            run(
                svc(&["203.0.113.20"]),
                slice(&[Some(("t1", "p1")), Some(("t1", "net0"))])
            ),
            Desired::default()
        );
        assert_eq!(
            run(svc(&["203.0.113.20"]), slice(&[Some(("t1", "p1")), None])),
            Desired::default()
        );
        assert_eq!(
            run(
                svc(&["203.0.113.20"]),
                slice(&[Some(("t1", "p1")), Some(("t1", "q"))])
            ),
            Desired::default()
        );
        assert_eq!(
            run(svc(&[]), slice(&[Some(("t1", "p1"))])),
            Desired::default(),
            "no address yet"
        );
    }

    #[test]
    fn no_ready_backend_leaves_no_frontend() {
        let d = run(svc(&["203.0.113.20"]), slice(&[]));
        assert_eq!(
            d.front.len(),
            0,
            "no backend: the Service's VPC is unknown, nothing to gate"
        );
    }

    #[test]
    fn ports_default_to_tcp_and_other_protocols_or_numbers_are_left_out() {
        let (web, udp, sctp) = ("web".to_string(), "UDP".to_string(), "SCTP".to_string());
        assert_eq!(
            svc_port(Some(&web), Some(80), None),
            Some(("web".into(), 80, TCP))
        );
        assert_eq!(
            svc_port(None, Some(53), Some(&udp)),
            Some((String::new(), 53, UDP))
        );
        assert_eq!(svc_port(Some(&web), Some(80), Some(&sctp)), None);
        assert_eq!(svc_port(Some(&web), Some(70000), None), None);
        assert_eq!(svc_port(Some(&web), None, None), None, "no nodePort");
    }

    #[test]
    fn own_services_and_other_types_are_not_load_balancer_ingress() {
        let mut s = Service {
            spec: Some(k8s_openapi::api::core::v1::ServiceSpec {
                type_: Some("LoadBalancer".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(svc_row(&s).is_some());
        s.metadata.labels = Some([(PROXY_NAME_LABEL.to_string(), OWN_PROXY.to_string())].into());
        assert!(svc_row(&s).is_none(), "a FloatingIP's or gateway's own Service");
        s.metadata.labels = None;
        s.spec.as_mut().unwrap().type_ = Some("ClusterIP".into());
        assert!(svc_row(&s).is_none());
    }
}
