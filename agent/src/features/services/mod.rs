//! ServiceVIPs turned into frontends of the load balancer (`bpf/lib/lb.h`, written by the
//! core's [`Lb`]): for every port of every ServiceVIP whose VPC has a VNI, a frontend
//! `{vni, vip, proto, port}` with its backends (`status.backends`, each at the target port of
//! that Service port). Every node programs every ServiceVIP: the client's node balances,
//! wherever the backends are.
//!
//! The task watches ServiceVIPs and VPCs cluster-wide (the VNI comes from the VPC's
//! status). Pinned frontends of this owner are pruned only once both lists completed.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;

use cozyplane_apis::v1alpha1::{ServiceVIP, VPC};
use futures::{StreamExt as _, stream::BoxStream};
use kube::api::Api;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};

use crate::core::api::ApiClients;
use crate::core::lb::{Frontend, Lb, Owner, Want};
use crate::core::watch::{Cache, changes_live, name_of};

pub mod metrics;
use futures::future::BoxFuture;

use crate::core::feature::{Core, Feature, FeatureError, spawned};
use crate::core::metrics::MetricsBuilder;

/// `sessionAffinity: ClientIP`'s timeout: Kubernetes' default (the ServiceVIP carries no
/// timeout of its own).
pub const AFFINITY_SECONDS: u32 = 10_800;

/// A VPC by `(namespace, name)`.
type VpcKey = (String, String);

fn proto_number(p: &str) -> Option<u8> {
    match p {
        "TCP" | "" => Some(6),
        "UDP" => Some(17),
        _ => None,
    }
}

/// A ServiceVIP as `(its VPC, frontends without the net)`: the VNI is filled in later
/// from the VPC cache.
type VipRow = (VpcKey, Vec<(IpAddr, u8, u16, Want)>);

fn vip_row(v: &ServiceVIP) -> Option<(String, VipRow)> {
    if v.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let name = v.metadata.name.clone()?;
    let vip: IpAddr = v.spec.ip.parse().ok()?;
    let vpc_ns = if v.spec.vpc_ref.namespace.is_empty() {
        v.spec.service_ref.namespace.clone()
    } else {
        v.spec.vpc_ref.namespace.clone()
    };
    let affinity = if v.spec.session_affinity == "ClientIP" {
        AFFINITY_SECONDS
    } else {
        0
    };
    let backends = v
        .status
        .as_ref()
        .map(|s| s.backends.as_slice())
        .unwrap_or_default();
    let mut fronts = Vec::new();
    for p in &v.spec.ports {
        let (Some(proto), Ok(port)) = (proto_number(&p.protocol), u16::try_from(p.port)) else {
            continue;
        };
        let mut set = BTreeSet::new();
        for b in backends {
            let Ok(ip) = b.ip.parse::<IpAddr>() else { continue };
            // Only a backend of the VIP's own family can be reached by rewriting addresses.
            if ip.is_ipv4() != vip.is_ipv4() {
                continue;
            }
            let target = b
                .ports
                .iter()
                .find(|bp| proto_number(&bp.protocol) == Some(proto) && bp.port == p.port)
                .and_then(|bp| u16::try_from(bp.target_port).ok())
                .filter(|t| *t != 0);
            if let Some(t) = target {
                set.insert((0, ip, t));
            }
        }
        fronts.push((
            vip,
            proto,
            port,
            Want {
                backends: set.into_iter().collect(),
                affinity,
            },
        ));
    }
    Some((name, ((vpc_ns, v.spec.vpc_ref.name.clone()), fronts)))
}

/// The frontends this node should hold, from the ServiceVIP rows and the VPCs' VNIs.
pub(crate) fn desired<'a>(
    vnis: &HashMap<VpcKey, u32>,
    vips: impl IntoIterator<Item = &'a VipRow>,
) -> BTreeMap<Frontend, Want> {
    let mut out = BTreeMap::new();
    for (vpc, fronts) in vips {
        let Some(&net) = vnis.get(vpc).filter(|v| **v != 0) else {
            continue;
        };
        for (vip, proto, port, want) in fronts {
            let mut w = want.clone();
            for b in &mut w.backends {
                b.0 = net;
            }
            out.insert(
                Frontend {
                    net,
                    vip: *vip,
                    proto: *proto,
                    port: *port,
                },
                w,
            );
        }
    }
    out
}

enum Ev {
    Vpc(Result<Event<VPC>, watcher::Error>),
    Vip(Result<Event<ServiceVIP>, watcher::Error>),
}

fn vni_row(v: &VPC) -> Option<(VpcKey, u32)> {
    let vni = v
        .status
        .as_ref()
        .and_then(|s| u32::try_from(s.vni).ok())
        .unwrap_or(0);
    Some((name_of(&v.metadata), vni))
}

/// Runs the ServiceVIP and VPC watches forever, keeping this owner's frontends in line with
/// them.
pub async fn run(api: ApiClients, lb: Lb) {
    let cfg = watcher::Config::default();
    let vpcs = watcher::watcher(Api::<VPC>::all(api.sdn.clone()), cfg.clone())
        .default_backoff()
        .map(Ev::Vpc);
    let vips = watcher::watcher(Api::<ServiceVIP>::all(api.sdn.clone()), cfg)
        .default_backoff()
        .map(Ev::Vip);
    let streams: Vec<BoxStream<'static, Ev>> = vec![vpcs.boxed(), vips.boxed()];
    let mut events = futures::stream::select_all(streams);

    let mut vpc_cache: Cache<VpcKey, u32> = Cache::new();
    let mut vip_cache: Cache<String, VipRow> = Cache::new();
    tracing::info!(
        adopted_frontends = lb.held(Owner::ServiceVip),
        "watching ServiceVIPs"
    );
    while let Some(ev) = events.next().await {
        let (recompute, res) = match ev {
            Ev::Vpc(r) => (
                changes_live(&r),
                r.map(|e| vpc_cache.apply(e, vni_row, |v| name_of(&v.metadata))),
            ),
            Ev::Vip(r) => (
                changes_live(&r),
                r.map(|e| {
                    vip_cache.apply(e, vip_row, |v| v.metadata.name.clone().unwrap_or_default());
                }),
            ),
        };
        if let Err(e) = res {
            tracing::warn!("service watch: {e}");
            continue;
        }
        if !recompute {
            continue;
        }
        let want = desired(&vpc_cache.live, vip_cache.live.values());
        let done = lb.sync(Owner::ServiceVip, &want, vpc_cache.synced && vip_cache.synced);
        if done.written + done.removed > 0 {
            tracing::info!(
                written = done.written,
                removed = done.removed,
                held = done.held,
                "ServiceVIP frontends programmed"
            );
        }
    }
}

/// ServiceVIPs: the VPC load balancer's maps, and its counters ([`metrics`]).
#[derive(Debug, Default)]
pub struct Services;

impl Feature for Services {
    fn name(&self) -> &'static str {
        "services"
    }

    fn metrics(&mut self, m: &mut MetricsBuilder) {
        m.collector(metrics::LbCollector(m.scope().pin_dir.clone()));
        m.map_sizes(metrics::map_sizes);
    }

    fn start(self: Box<Self>, core: Core) -> BoxFuture<'static, Result<(), FeatureError>> {
        spawned(run(core.api, core.lb))
    }
}

#[cfg(test)]
mod tests {
    use cozyplane_apis::v1alpha1::{
        ServiceVIPBackend, ServiceVIPBackendPort, ServiceVIPPort, ServiceVIPStatus,
    };

    use super::*;

    fn vip(ip: &str, affinity: &str, backends: &[(&str, i32)]) -> ServiceVIP {
        let mut v = ServiceVIP::default();
        v.metadata.name = Some(format!("sv100.{ip}"));
        v.spec.ip = ip.into();
        v.spec.vpc_ref.namespace = "t".into();
        v.spec.vpc_ref.name = "a".into();
        v.spec.session_affinity = affinity.into();
        v.spec.ports = vec![
            ServiceVIPPort {
                name: "http".into(),
                protocol: "TCP".into(),
                port: 80,
            },
            ServiceVIPPort {
                name: "dns".into(),
                protocol: "UDP".into(),
                port: 53,
            },
        ];
        v.status = Some(ServiceVIPStatus {
            backends: backends
                .iter()
                .map(|(ip, t)| ServiceVIPBackend {
                    ip: (*ip).into(),
                    ports: vec![ServiceVIPBackendPort {
                        protocol: "TCP".into(),
                        port: 80,
                        target_port: *t,
                    }],
                })
                .collect(),
            ..Default::default()
        });
        v
    }

    #[test]
    fn a_vip_becomes_one_frontend_per_port_with_the_vpcs_vni() {
        let v = vip(
            "10.0.0.254",
            "ClientIP",
            &[("10.0.0.3", 8080), ("10.0.0.2", 8080), ("fd00::2", 80)],
        );
        let (_, row) = vip_row(&v).unwrap();
        let vnis = HashMap::from([(("t".to_string(), "a".to_string()), 100)]);
        let d = desired(&vnis, [&row]);
        let tcp = Frontend {
            net: 100,
            vip: "10.0.0.254".parse().unwrap(),
            proto: 6,
            port: 80,
        };
        assert_eq!(
            d[&tcp].backends,
            vec![
                (100, "10.0.0.2".parse().unwrap(), 8080),
                (100, "10.0.0.3".parse().unwrap(), 8080)
            ],
            "sorted, same family only"
        );
        assert_eq!(d[&tcp].affinity, AFFINITY_SECONDS);
        let udp = Frontend {
            proto: 17,
            port: 53,
            ..tcp
        };
        assert!(d[&udp].backends.is_empty(), "no backend serves the UDP port");
        // No VNI yet: nothing.
        assert!(desired(&HashMap::new(), [&row]).is_empty());
    }
}
