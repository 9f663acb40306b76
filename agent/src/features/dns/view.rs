//! The resolver's view ([`cozyplane_resolver::View`]) built from the objects the DNS
//! task watches, and the steering entries of this node (`sdn_dns_pods`). Pure: rows in,
//! view out, so the rules are tested without a cluster.
//!
//! * Queriers: this node's VPC pods, by their fabric addresses (`status.podIPs`), in the
//!   VPC of their Port.
//! * Peerings: the halves whose `status.phase` is `Ready`.
//! * Services: those annotated `sdn.cozystack.io/vpc: [<owner-ns>/]<vpc>`. A headless one
//!   (`clusterIP: None`) answers the VPC addresses of its ready endpoints: each endpoint's
//!   `targetRef` pod → that pod's Port in the Service's VPC (an endpoint outside the VPC
//!   has no address there and is left out). Any other answers the addresses of its
//!   ServiceVIPs in that VPC.
//! * DNS64: the VPCs whose `spec.dns64` is on ([`cozyplane_resolver::dns64`]).

use std::collections::HashMap;
use std::net::IpAddr;

use cozyplane_apis::v1alpha1::{Port, ServiceVIP, VPC, VPCPeering};
use cozyplane_resolver::{Endpoint, Protocol, Service, ServicePort, View, VpcKey};
use k8s_openapi::api::core::v1::{Pod, Service as KubeService};
use k8s_openapi::api::discovery::v1::EndpointSlice;

use crate::core::api::{VPC_ANNOTATION, parse_vpc_request};
use crate::core::watch::name_of;

/// `(namespace, name)`.
pub(crate) type Key = (String, String);

/// What the view needs of a Port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PortRow {
    pub(crate) vpc: VpcKey,
    pub(crate) ip: Option<IpAddr>,
    pub(crate) node: String,
    pub(crate) pod: Key,
}

pub(crate) fn port_row(p: &Port) -> Option<(String, PortRow)> {
    if p.spec.gateway {
        return None;
    }
    Some((
        p.metadata.name.clone()?,
        PortRow {
            vpc: (p.spec.vpc_ref.namespace.clone(), p.spec.vpc_ref.name.clone()),
            ip: p.spec.ip.parse().ok(),
            node: p.spec.node.clone(),
            pod: (p.spec.pod_namespace.clone(), p.spec.pod_name.clone()),
        },
    ))
}

/// What the view and the steering need of a VPC.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct VpcRow {
    /// Its VNI; 0 until allocated (its pods are not steered yet).
    pub(crate) vni: u32,
    /// `spec.dns64`.
    pub(crate) dns64: bool,
}

pub(crate) fn vpc_row(v: &VPC) -> Option<(Key, VpcRow)> {
    let vni = v
        .status
        .as_ref()
        .and_then(|s| u32::try_from(s.vni).ok())
        .unwrap_or(0);
    Some((
        name_of(&v.metadata),
        VpcRow {
            vni,
            dns64: v.spec.dns64,
        },
    ))
}

/// A pod of this node: its fabric addresses.
pub(crate) fn pod_row(p: &Pod) -> Option<(Key, Vec<IpAddr>)> {
    let st = p.status.as_ref()?;
    let mut ips: Vec<IpAddr> = st
        .pod_ips
        .iter()
        .flatten()
        .filter_map(|i| i.ip.parse().ok())
        .collect();
    if ips.is_empty() {
        ips.extend(st.pod_ip.as_deref().and_then(|i| i.parse::<IpAddr>().ok()));
    }
    (!ips.is_empty()).then(|| (name_of(&p.metadata), ips))
}

/// A Ready peering half: `(local VPC, peer VPC)`.
pub(crate) fn peering_row(p: &VPCPeering) -> Option<(Key, (VpcKey, VpcKey))> {
    let ready = p.status.as_ref().is_some_and(|s| s.phase == "Ready");
    if !ready || p.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let key = name_of(&p.metadata);
    let peer_ns = if p.spec.peer_ref.namespace.is_empty() {
        key.0.clone()
    } else {
        p.spec.peer_ref.namespace.clone()
    };
    let local = (key.0.clone(), p.spec.vpc_ref.name.clone());
    Some((key, (local, (peer_ns, p.spec.peer_ref.name.clone()))))
}

/// An attached Service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ServiceRow {
    pub(crate) vpc: VpcKey,
    pub(crate) headless: bool,
    pub(crate) ports: Vec<ServicePort>,
}

pub(crate) fn service_row(s: &KubeService) -> Option<(Key, ServiceRow)> {
    let key = name_of(&s.metadata);
    let req = s.metadata.annotations.as_ref()?.get(VPC_ANNOTATION)?;
    let vpc = parse_vpc_request(&key.0, req).ok()?;
    let spec = s.spec.as_ref()?;
    let headless = spec.cluster_ip.as_deref() == Some("None");
    let ports = spec
        .ports
        .iter()
        .flatten()
        .filter_map(|p| {
            Some(ServicePort {
                name: p.name.clone().filter(|n| !n.is_empty())?.to_ascii_lowercase(),
                protocol: Protocol::from_kube(p.protocol.as_deref().unwrap_or(""))?,
                port: u16::try_from(p.port).ok()?,
            })
        })
        .collect();
    Some((key, ServiceRow { vpc, headless, ports }))
}

/// A ready endpoint as the slice names it: hostname and target pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SliceEndpoint {
    pub(crate) hostname: Option<String>,
    pub(crate) pod: Key,
}

/// An EndpointSlice: its Service and its ready endpoints that are pods.
pub(crate) fn slice_row(s: &EndpointSlice) -> Option<(Key, (Key, Vec<SliceEndpoint>))> {
    let key = name_of(&s.metadata);
    let svc = s
        .metadata
        .labels
        .as_ref()?
        .get("kubernetes.io/service-name")?
        .clone();
    let eps = s
        .endpoints
        .iter()
        .flatten()
        // An unset condition means ready (discovery/v1).
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true))
        .filter_map(|e| {
            let t = e.target_ref.as_ref()?;
            if t.kind.as_deref() != Some("Pod") {
                return None;
            }
            Some(SliceEndpoint {
                hostname: e.hostname.clone().map(|h| h.to_ascii_lowercase()),
                pod: (
                    t.namespace.clone().unwrap_or_else(|| key.0.clone()),
                    t.name.clone()?,
                ),
            })
        })
        .collect();
    Some((key.clone(), ((key.0, svc), eps)))
}

/// A ServiceVIP: its Service, its VPC, its address.
pub(crate) fn vip_row(v: &ServiceVIP) -> Option<(Key, (Key, VpcKey, IpAddr))> {
    let key = name_of(&v.metadata);
    let ip = v.spec.ip.parse().ok()?;
    let svc_ns = if v.spec.service_ref.namespace.is_empty() {
        key.0.clone()
    } else {
        v.spec.service_ref.namespace.clone()
    };
    let vpc_ns = if v.spec.vpc_ref.namespace.is_empty() {
        key.0.clone()
    } else {
        v.spec.vpc_ref.namespace.clone()
    };
    Some((
        key,
        (
            (svc_ns, v.spec.service_ref.name.clone()),
            (vpc_ns, v.spec.vpc_ref.name.clone()),
            ip,
        ),
    ))
}

/// Everything the view is built from.
#[derive(Debug, Default)]
pub(crate) struct Inputs<'a> {
    pub(crate) node: &'a str,
    pub(crate) pods: Option<&'a HashMap<Key, Vec<IpAddr>>>,
    pub(crate) ports: Option<&'a HashMap<String, PortRow>>,
    pub(crate) vpcs: Option<&'a HashMap<Key, VpcRow>>,
    pub(crate) peerings: Option<&'a HashMap<Key, (VpcKey, VpcKey)>>,
    pub(crate) services: Option<&'a HashMap<Key, ServiceRow>>,
    pub(crate) slices: Option<&'a HashMap<Key, (Key, Vec<SliceEndpoint>)>>,
    pub(crate) vips: Option<&'a HashMap<Key, (Key, VpcKey, IpAddr)>>,
}

/// The view for one generation.
pub(crate) fn build(i: &Inputs<'_>, generation: u32) -> View {
    let empty_ports = HashMap::new();
    let ports = i.ports.unwrap_or(&empty_ports);
    let mut v = View::new();
    v.set_generation(generation);

    // Ports by pod: a dual-stack pod has one per family.
    let mut by_pod: HashMap<&Key, Vec<&PortRow>> = HashMap::new();
    for p in ports.values() {
        by_pod.entry(&p.pod).or_default().push(p);
    }
    if let Some(pods) = i.pods {
        for (pod, fabric) in pods {
            let Some(vpc) = by_pod
                .get(pod)
                .and_then(|ps| ps.iter().find(|p| p.node == i.node))
                .map(|p| p.vpc.clone())
            else {
                continue;
            };
            for f in fabric {
                v.add_querier(*f, vpc.clone());
            }
        }
    }
    for (vpc, row) in i.vpcs.into_iter().flatten() {
        if row.dns64 {
            v.add_dns64(vpc.clone());
        }
    }
    for (a, b) in i.peerings.into_iter().flat_map(HashMap::values) {
        v.add_peering(a.clone(), b.clone());
    }

    let mut vips: HashMap<(&Key, &VpcKey), Vec<IpAddr>> = HashMap::new();
    for (svc, vpc, ip) in i.vips.into_iter().flat_map(HashMap::values) {
        vips.entry((svc, vpc)).or_default().push(*ip);
    }
    let mut slices: HashMap<&Key, Vec<&SliceEndpoint>> = HashMap::new();
    for (svc, eps) in i.slices.into_iter().flat_map(HashMap::values) {
        slices.entry(svc).or_default().extend(eps.iter());
    }
    for (key, s) in i.services.into_iter().flatten() {
        let mut endpoints = Vec::new();
        if s.headless {
            for e in slices.get(key).into_iter().flatten() {
                let addrs: Vec<IpAddr> = by_pod
                    .get(&e.pod)
                    .into_iter()
                    .flatten()
                    .filter(|p| p.vpc == s.vpc)
                    .filter_map(|p| p.ip)
                    .collect();
                if !addrs.is_empty() {
                    endpoints.push(Endpoint {
                        hostname: e.hostname.clone(),
                        addrs,
                    });
                }
            }
        }
        let mut vip_addrs = vips.get(&(key, &s.vpc)).cloned().unwrap_or_default();
        vip_addrs.sort();
        v.add_service(
            key.clone(),
            Service {
                vpc: s.vpc.clone(),
                headless: s.headless,
                vips: if s.headless { Vec::new() } else { vip_addrs },
                ports: s.ports.clone(),
                endpoints,
            },
        );
    }
    v
}

/// `sdn_dns_pods`: `(VNI, VPC address)` of every VPC pod of this node → its fabric
/// address of the same family; a v6-only pod without a v6 fabric address (a v4 default
/// network) → its v4 one, whose queries to `64:ff9b::<ClusterIP>` the datapath translates
/// (`lib/dns.h`, as the bridge does for its `status.podIP`).
pub(crate) fn steering_sources(
    node: &str,
    pods: &HashMap<Key, Vec<IpAddr>>,
    ports: &HashMap<String, PortRow>,
    vpcs: &HashMap<VpcKey, VpcRow>,
) -> HashMap<(u32, IpAddr), IpAddr> {
    let mine = || ports.values().filter(|p| p.node == node);
    let with_v4: std::collections::HashSet<&Key> = mine()
        .filter(|p| p.ip.is_some_and(|ip| ip.is_ipv4()))
        .map(|p| &p.pod)
        .collect();
    mine()
        .filter_map(|p| {
            let vni = vpcs.get(&p.vpc).map(|r| r.vni).filter(|v| *v != 0)?;
            let ip = p.ip?;
            let fabrics = pods.get(&p.pod)?;
            let same = fabrics.iter().find(|f| f.is_ipv4() == ip.is_ipv4());
            let translated = || {
                let v6_only = ip.is_ipv6() && !with_v4.contains(&p.pod);
                fabrics.iter().find(|f| v6_only && f.is_ipv4())
            };
            Some(((vni, ip), *same.or_else(translated)?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use cozyplane_resolver::answer::{Action, Transport, Zone, handle};
    use hickory_proto::op::{Message, Query, ResponseCode};
    use hickory_proto::rr::{Name, RecordType};

    use super::*;

    fn k(a: &str, b: &str) -> Key {
        (a.into(), b.into())
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn port(vpc: (&str, &str), ip_: &str, node: &str, pod: (&str, &str)) -> PortRow {
        PortRow {
            vpc: k(vpc.0, vpc.1),
            ip: Some(ip(ip_)),
            node: node.into(),
            pod: k(pod.0, pod.1),
        }
    }

    fn ask(v: &View, from: &str, name: &str) -> (ResponseCode, Vec<IpAddr>) {
        let mut m = Message::query();
        m.add_query(Query::query(Name::from_ascii(name).unwrap(), RecordType::A));
        let zone = Zone::new("cozy.local", 5).unwrap();
        match handle(v, &zone, ip(from), &m.to_vec().unwrap(), Transport::Udp) {
            Action::Reply { bytes, .. } => {
                let r = Message::from_vec(&bytes).unwrap();
                let mut a: Vec<IpAddr> = r.answers.iter().filter_map(|r| r.data.ip_addr()).collect();
                a.sort();
                (r.metadata.response_code, a)
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn objects_become_the_view_queriers_vips_and_headless_endpoints() {
        let pods = HashMap::from([
            (k("t1", "client"), vec![ip("10.244.1.10")]),
            (k("t2", "other"), vec![ip("10.244.1.11")]),
            // A default-network pod: no Port, no querier.
            (k("t1", "plain"), vec![ip("10.244.1.12")]),
        ]);
        let ports = HashMap::from([
            (
                "p1".into(),
                port(("t1", "blue"), "172.16.0.2", "n1", ("t1", "client")),
            ),
            (
                "p2".into(),
                port(("t2", "red"), "172.16.0.2", "n1", ("t2", "other")),
            ),
            (
                "p3".into(),
                port(("t1", "blue"), "172.16.0.7", "n2", ("t1", "db-0")),
            ),
            (
                "p4".into(),
                port(("t1", "blue"), "172.16.0.8", "n2", ("t1", "db-1")),
            ),
        ]);
        let services = HashMap::from([
            (
                k("t1", "web"),
                ServiceRow {
                    vpc: k("t1", "blue"),
                    headless: false,
                    ports: vec![],
                },
            ),
            (
                k("t1", "db"),
                ServiceRow {
                    vpc: k("t1", "blue"),
                    headless: true,
                    ports: vec![],
                },
            ),
        ]);
        let vips = HashMap::from([
            (
                k("t1", "web-v4"),
                (k("t1", "web"), k("t1", "blue"), ip("172.16.0.250")),
            ),
            // A VIP of another VPC for the same Service name does not count.
            (
                k("t1", "stale"),
                (k("t1", "web"), k("t1", "green"), ip("172.20.0.250")),
            ),
        ]);
        let slices = HashMap::from([(
            k("t1", "db-abcde"),
            (
                k("t1", "db"),
                vec![
                    SliceEndpoint {
                        hostname: Some("db-0".into()),
                        pod: k("t1", "db-0"),
                    },
                    SliceEndpoint {
                        hostname: None,
                        pod: k("t1", "db-1"),
                    },
                    // A pod without a Port in the VPC: no VPC address, left out.
                    SliceEndpoint {
                        hostname: None,
                        pod: k("t1", "plain"),
                    },
                ],
            ),
        )]);
        let inputs = Inputs {
            node: "n1",
            pods: Some(&pods),
            ports: Some(&ports),
            services: Some(&services),
            vips: Some(&vips),
            slices: Some(&slices),
            peerings: None,
            vpcs: None,
        };
        let v = build(&inputs, 1);
        assert_eq!(v.querier(ip("10.244.1.10")), Some(&k("t1", "blue")));
        assert_eq!(v.querier(ip("10.244.1.11")), Some(&k("t2", "red")));
        assert_eq!(v.querier(ip("10.244.1.12")), None);
        assert_eq!(
            ask(&v, "10.244.1.10", "web.t1.svc.cozy.local."),
            (ResponseCode::NoError, vec![ip("172.16.0.250")])
        );
        assert_eq!(
            ask(&v, "10.244.1.10", "db.t1.svc.cozy.local."),
            (ResponseCode::NoError, vec![ip("172.16.0.7"), ip("172.16.0.8")])
        );
        assert_eq!(
            ask(&v, "10.244.1.10", "db-0.db.t1.svc.cozy.local."),
            (ResponseCode::NoError, vec![ip("172.16.0.7")])
        );
        assert_eq!(
            ask(&v, "10.244.1.11", "web.t1.svc.cozy.local.").0,
            ResponseCode::NXDomain
        );

        // A Ready peering makes blue's names visible to red.
        let peerings = HashMap::from([(k("t2", "to-blue"), (k("t2", "red"), k("t1", "blue")))]);
        let v = build(
            &Inputs {
                peerings: Some(&peerings),
                ..inputs
            },
            2,
        );
        assert_eq!(
            ask(&v, "10.244.1.11", "web.t1.svc.cozy.local."),
            (ResponseCode::NoError, vec![ip("172.16.0.250")])
        );
    }

    #[test]
    fn annotated_services_only_and_the_owner_defaults_to_the_services_namespace() {
        let svc = |ann: Option<&str>, cluster_ip: &str| {
            let mut s = KubeService::default();
            s.metadata.namespace = Some("t1".into());
            s.metadata.name = Some("web".into());
            if let Some(a) = ann {
                s.metadata.annotations = Some([(VPC_ANNOTATION.to_string(), a.to_string())].into());
            }
            s.spec = Some(k8s_openapi::api::core::v1::ServiceSpec {
                cluster_ip: Some(cluster_ip.into()),
                ports: Some(vec![k8s_openapi::api::core::v1::ServicePort {
                    name: Some("HTTP".into()),
                    port: 80,
                    ..Default::default()
                }]),
                ..Default::default()
            });
            s
        };
        assert!(service_row(&svc(None, "10.96.0.5")).is_none());
        let (_, r) = service_row(&svc(Some("blue"), "10.96.0.5")).unwrap();
        assert_eq!(r.vpc, k("t1", "blue"));
        assert!(!r.headless);
        assert_eq!(r.ports[0].name, "http");
        assert_eq!(r.ports[0].protocol, Protocol::Tcp);
        let (_, r) = service_row(&svc(Some("owner/blue"), "None")).unwrap();
        assert_eq!(r.vpc, k("owner", "blue"));
        assert!(r.headless);
        assert!(service_row(&svc(Some("Not A Label"), "None")).is_none());
    }

    #[test]
    fn steering_sources_are_this_nodes_vpc_pods_by_family() {
        let pods = HashMap::from([(k("t1", "c"), vec![ip("10.244.1.10"), ip("fd44::10")])]);
        let ports = HashMap::from([
            ("p1".into(), port(("t1", "blue"), "172.16.0.2", "n1", ("t1", "c"))),
            ("p2".into(), port(("t1", "blue"), "fd00::2", "n1", ("t1", "c"))),
            ("p3".into(), port(("t1", "blue"), "172.16.0.3", "n2", ("t1", "d"))),
            ("p4".into(), port(("t1", "nope"), "172.16.0.4", "n1", ("t1", "c"))),
        ]);
        let vpcs = HashMap::from([
            (
                k("t1", "blue"),
                VpcRow {
                    vni: 100,
                    dns64: false,
                },
            ),
            // No VNI yet: not steered.
            (k("t1", "nope"), VpcRow { vni: 0, dns64: true }),
        ]);
        let s = steering_sources("n1", &pods, &ports, &vpcs);
        assert_eq!(
            s,
            HashMap::from([
                ((100, ip("172.16.0.2")), ip("10.244.1.10")),
                ((100, ip("fd00::2")), ip("fd44::10")),
            ])
        );
    }

    #[test]
    fn a_v6_only_pod_on_a_v4_default_network_is_steered_from_its_v4_fabric_address() {
        let pods = HashMap::from([
            (k("t1", "six"), vec![ip("10.244.1.11")]),
            (k("t1", "dual"), vec![ip("10.244.1.12")]),
        ]);
        let ports = HashMap::from([
            ("p1".into(), port(("t1", "blue"), "fd00::2", "n1", ("t1", "six"))),
            (
                "p2".into(),
                port(("t1", "blue"), "172.16.0.3", "n1", ("t1", "dual")),
            ),
            ("p3".into(), port(("t1", "blue"), "fd00::3", "n1", ("t1", "dual"))),
        ]);
        let vpcs = HashMap::from([(
            k("t1", "blue"),
            VpcRow {
                vni: 100,
                dns64: false,
            },
        )]);
        // The dual-stack pod asks over IPv4; only the v6-only one is translated.
        assert_eq!(
            steering_sources("n1", &pods, &ports, &vpcs),
            HashMap::from([
                ((100, ip("fd00::2")), ip("10.244.1.11")),
                ((100, ip("172.16.0.3")), ip("10.244.1.12")),
            ])
        );
    }

    #[test]
    fn a_vpcs_dns64_reaches_the_view_for_its_pods_only() {
        let vpc = |name: &str, cidrs: &[&str], dns64: bool, vni: i32| {
            let mut v = VPC::new(
                name,
                cozyplane_apis::v1alpha1::VPCSpec {
                    cidrs: cidrs.iter().map(|c| (*c).to_owned()).collect(),
                    dns64,
                    ..Default::default()
                },
            );
            v.metadata.namespace = Some("t1".into());
            v.status = Some(cozyplane_apis::v1alpha1::VPCStatus {
                vni,
                ..Default::default()
            });
            v
        };
        let vpcs: HashMap<Key, VpcRow> = [
            vpc("six", &["fd00:6::/64"], true, 100),
            vpc("dual", &["10.0.0.0/24", "fd00:7::/64"], false, 0),
        ]
        .iter()
        .filter_map(vpc_row)
        .collect();
        assert_eq!(
            vpcs[&k("t1", "six")],
            VpcRow {
                vni: 100,
                dns64: true
            }
        );
        assert_eq!(vpcs[&k("t1", "dual")], VpcRow { vni: 0, dns64: false });

        let pods = HashMap::from([
            (k("t1", "a"), vec![ip("10.244.1.10")]),
            (k("t1", "b"), vec![ip("10.244.1.11")]),
        ]);
        let ports = HashMap::from([
            ("p1".into(), port(("t1", "six"), "fd00:6::2", "n1", ("t1", "a"))),
            ("p2".into(), port(("t1", "dual"), "fd00:7::2", "n1", ("t1", "b"))),
        ]);
        let v = build(
            &Inputs {
                node: "n1",
                pods: Some(&pods),
                ports: Some(&ports),
                vpcs: Some(&vpcs),
                ..Inputs::default()
            },
            1,
        );
        assert!(v.dns64(&k("t1", "six")));
        assert!(!v.dns64(&k("t1", "dual")));
        // An external AAAA question takes the DNS64 path from six's pod only; A questions and
        // cluster names never do.
        let decide = |from: &str, name: &str, t: RecordType| {
            let mut m = Message::query();
            m.add_query(Query::query(Name::from_ascii(name).unwrap(), t));
            let zone = Zone::new("cozy.local", 5).unwrap();
            handle(&v, &zone, ip(from), &m.to_vec().unwrap(), Transport::Udp)
        };
        assert_eq!(
            decide("10.244.1.10", "www.example.com.", RecordType::AAAA),
            Action::ForwardDns64
        );
        assert_eq!(
            decide("10.244.1.10", "www.example.com.", RecordType::A),
            Action::Forward
        );
        assert_eq!(
            decide("10.244.1.11", "www.example.com.", RecordType::AAAA),
            Action::Forward
        );
        assert!(matches!(
            decide("10.244.1.10", "web.t1.svc.cozy.local.", RecordType::AAAA),
            Action::Reply { .. }
        ));
        // Steering needs the VNI: dual has none yet.
        let steer = steering_sources("n1", &pods, &ports, &vpcs);
        assert_eq!(
            steer,
            HashMap::from([((100, ip("fd00:6::2")), ip("10.244.1.10"))])
        );
    }
}
