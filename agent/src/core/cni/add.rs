//! ADD: which network, the fabric address, the Port, the veth, the programs, the maps; then
//! the secondary interfaces the pod lists (issue 37, [`secondary`]).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

use cozyplane_bpf::maps::sock_netns::SockNetnsMap;
use cozyplane_cni::proto::Request;
use cozyplane_cni::spec::{CniError, CniResult, ErrorCode, Interface, IpConfig, Route};
use serde_json::Value;

use super::{AgentState, Steps, blocking, host_veth_name, internal};
use crate::core::api::prepare::persistent_of;
use crate::core::api::secondary::{self, Wanted};
use crate::core::cni::attachment::{self, Attachment};
use crate::core::datapath::netdev::{self, GATEWAY, GATEWAY6, PodRoutes, format_mac, parse_mac};
use crate::core::datapath::netns_cookie;
use crate::core::ipam::{Secondary, VpcAddress, VpcAttachment};

impl AgentState {
    /// Which network the pod asked for: the netconf/`CNI_ARGS` request, else the pod's
    /// annotation (watch cache, or a GET on a miss). No API configured: net 0.
    pub(super) async fn requested(&self, req: &Request) -> Result<Attachment, CniError> {
        let att = attachment::classify(&req.env, &req.config);
        if att != Attachment::Default {
            return Ok(att);
        }
        let (Some(api), Some(pod)) = (&self.api, req.env.pod()) else {
            return Ok(att);
        };
        Ok(match api.requested_vpc(&pod.namespace, &pod.name).await? {
            Some(vpc) => Attachment::Vpc { vpc },
            None => Attachment::Default,
        })
    }

    /// ADD: the pod's network (`CNI_IFNAME`), then the secondary interfaces its
    /// `sdn.cozystack.io/vpcs` lists; or, for a Multus delegate call (`"vpc"` in the netconf),
    /// that one secondary interface. One result names every interface made.
    pub(super) async fn add(
        &self,
        req: &Request,
        version: &str,
        steps: &mut Steps,
    ) -> Result<Option<Value>, CniError> {
        let env = &req.env;
        let result = match secondary::delegated(env, &req.config)? {
            Some(w) => {
                self.attach(req, &Iface::Secondary(w, Secondary::Delegated), steps)
                    .await?
            }
            None => {
                let att = self.requested(req).await?;
                // Checked before anything is made: a bad list fails the ADD whole.
                let listed = self.listed(req).await?;
                let mut result = self.attach(req, &Iface::Primary(att), steps).await?;
                if !listed.is_empty() {
                    let mut statuses = vec![status_of(&result, conflist_name(&req.config), true)];
                    for w in listed {
                        let name = w.vpc.clone();
                        let more = match self
                            .attach(req, &Iface::Secondary(w, Secondary::Listed), steps)
                            .await
                        {
                            Ok(r) => r,
                            Err(e) => {
                                // The pod's DEL removes what its listed interfaces made, too.
                                let _ = self.del(&env.container_id, &env.ifname).await;
                                return Err(e);
                            }
                        };
                        statuses.push(status_of(&more, &name, false));
                        merge(&mut result, more);
                    }
                    self.report_status(req, &statuses);
                    steps.mark("status");
                }
                result
            }
        };
        serde_json::to_value(result.for_version(version))
            .map(Some)
            .map_err(|e| internal("encoding the result failed", e))
    }

    /// The secondary interfaces pod `req` lists (`sdn.cozystack.io/vpcs`): none without an
    /// API or a pod.
    async fn listed(&self, req: &Request) -> Result<Vec<Wanted>, CniError> {
        let (Some(api), Some(pod)) = (&self.api, req.env.pod()) else {
            return Ok(Vec::new());
        };
        match api.pod_facts(&pod.namespace, &pod.name).await?.vpcs {
            Some(v) => secondary::listed(&v, &req.env.ifname),
            None => Ok(Vec::new()),
        }
    }

    /// Writes `k8s.v1.cni.cncf.io/network-status` on the pod, as Multus does for its own, once
    /// ADD has returned: the runtime and kubelet never wait for it (a kube API write, queued
    /// behind the node's other calls: 50 pods at once waited ~40 ms more for it at p99), its
    /// readers (KubeVirt, users) read it later. Tried five times over about 6 s.
    fn report_status(&self, req: &Request, statuses: &[Value]) {
        let (Some(api), Some(pod)) = (self.api.clone(), req.env.pod()) else {
            return;
        };
        let Ok(text) = serde_json::to_string_pretty(statuses) else {
            return;
        };
        tokio::spawn(async move {
            let mut wait = std::time::Duration::from_millis(200);
            for _ in 0..5 {
                match api
                    .annotate_pod(
                        &pod.namespace,
                        &pod.name,
                        secondary::NETWORK_STATUS_ANNOTATION,
                        &text,
                    )
                    .await
                {
                    Ok(()) => return,
                    Err(e) => {
                        tracing::warn!(pod = %format!("{}/{}", pod.namespace, pod.name), "writing the network status: {e}");
                        tokio::time::sleep(wait).await;
                        wait *= 2;
                    }
                }
            }
        });
    }

    /// One interface: which network, the address(es), the Port(s), the veth, the programs,
    /// the maps, the record.
    async fn attach(&self, req: &Request, iface: &Iface, steps: &mut Steps) -> Result<CniResult, CniError> {
        let env = &req.env;
        let ifname = iface.ifname(env);
        let vpc = match (iface, &self.api) {
            (Iface::Primary(Attachment::Default), _) => None,
            (Iface::Primary(att @ Attachment::Vpc { .. }), None) => {
                return Err(attachment::unsupported(att).unwrap_or_else(|| {
                    CniError::plain(ErrorCode::VpcUnavailable, "VPC attachments need --kubeconfig")
                }));
            }
            (Iface::Secondary(..), None) => {
                return Err(CniError::plain(
                    ErrorCode::VpcUnavailable,
                    "secondary VPC interfaces need the agent's --kubeconfig",
                ));
            }
            (
                Iface::Primary(Attachment::Vpc { vpc }) | Iface::Secondary(Wanted { vpc, .. }, _),
                Some(api),
            ) => {
                // The namespace comes from the runtime (CNI_ARGS), never from the pod.
                let pod = env.pod().ok_or_else(|| {
                    CniError::new(
                        ErrorCode::InvalidEnv,
                        "a VPC attachment needs K8S_POD_NAMESPACE and K8S_POD_NAME in CNI_ARGS",
                        format!("requested VPC {vpc:?}"),
                    )
                })?;
                Some((api, api.resolve_vpc(&pod.namespace, &pod.name, vpc).await?, pod))
            }
        };
        steps.mark("resolve");
        let pod = env
            .pod()
            .map(|p| format!("{}/{}", p.namespace, p.name))
            .unwrap_or_default();
        let key = (env.container_id.as_str(), ifname);
        let _attachment = self.attachments.lock(key.0, key.1).await;
        let (fabric, previous, retried) = {
            let mut ipam = self.ipam();
            let retried = ipam.get(key.0, key.1).is_some();
            let fabric = match iface {
                Iface::Primary(_) => {
                    let ip = ipam
                        .allocate(key.0, key.1, &env.netns, &pod)
                        .map_err(|e| internal("fabric address allocation failed", e))?;
                    let ip6 = ipam.get(key.0, key.1).and_then(|a| a.ip6);
                    std::iter::once(IpAddr::V4(ip))
                        .chain(ip6.map(IpAddr::V6))
                        .collect()
                }
                Iface::Secondary(_, how) => {
                    ipam.allocate_secondary(key, &env.netns, &pod, *how);
                    Vec::new()
                }
            };
            // A repeated ADD (runtime retry) reuses the Port it created before.
            let previous = ipam.get(key.0, key.1).and_then(|a| a.vpc.clone());
            (fabric, previous, retried)
        };
        // The record goes to disk once, complete, before ADD returns; until then the address
        // is only held in memory. An ADD cut short by a crash leaves at most a host veth
        // without a record, which restart reconciliation deletes by its name.
        let host = host_veth_name(key.0, key.1);
        // A repeated ADD starts from a clean slate for this attachment. A first ADD has
        // nothing to clean: a failed ADD removes its veth, and so does a restart.
        if retried {
            let _ = self.datapath().detach(&host);
            let _ = self.netdev.delete(&host).await;
        }
        steps.mark("ipam");

        // The VPC side: the Port (reused on a retry), its address and MAC.
        let mut vpc_att: Option<VpcAttachment> = None;
        let mut vpc_mac: Option<[u8; 6]> = None;
        let mut port_uid = String::new();
        let mut mtu = self.mtu;
        let ask = match iface {
            Iface::Secondary(w, _) => Some(w.ask()),
            Iface::Primary(_) => None,
        };
        if let Some((api, v, p)) = &vpc {
            let claimed = async {
                let existing = match &previous {
                    // A Port being deleted is revoked, not reused.
                    Some(prev) if prev.vni == v.vni => api
                        .get_port(&prev.port)
                        .await?
                        .filter(|p| p.metadata.deletion_timestamp.is_none()),
                    _ => None,
                };
                let uid = Some(p.uid.as_str()).filter(|u| !u.is_empty());
                // A workload's pod (a KubeVirt launcher, an annotated pod) takes the
                // workload's Ports, wherever they were (issue 27); a secondary interface's
                // pins are its request's.
                let facts = api.pod_facts(&p.namespace, &p.name).await?;
                let persistent = persistent_of(&facts, ifname, ask.as_ref());
                let port = match existing {
                    Some(port) => port,
                    None => {
                        api.take_port(
                            v,
                            (&p.namespace, &p.name),
                            uid,
                            (persistent.as_ref(), ask.as_ref()),
                        )
                        .await?
                    }
                };
                let name = port.metadata.name.clone().unwrap_or_default();
                let vip: IpAddr = port.spec.ip.parse().map_err(|_| {
                    internal("the Port has no address", format!("{name}: {:?}", port.spec.ip))
                })?;
                let mac = parse_mac(&port.spec.mac)
                    .ok_or_else(|| internal("the Port has no MAC", format!("{name}: {:?}", port.spec.mac)))?;
                let mut va = VpcAttachment {
                    vni: v.vni,
                    ip: vip,
                    port: name,
                    vpc: format!("{}/{}", v.namespace, v.name),
                    other: None,
                    persistent: persistent.is_some(),
                    // A live migration's target: prepared here, relaying to the holder.
                    migration_peer: port
                        .spec
                        .migration_target
                        .as_ref()
                        .filter(|t| t.node == api.node)
                        .and_then(|_| port.spec.node_ip.parse().ok()),
                    routes: match iface {
                        Iface::Secondary(..) => v.ranges.iter().map(|(n, l)| format!("{n}/{l}")).collect(),
                        Iface::Primary(_) => Vec::new(),
                    },
                };
                // A dual-stack VPC: one more Port, for the other family (docs/design.md,
                // "Dual-stack Ports"). Both or none: a failure deletes the first one too.
                if v.dual_stack {
                    let reused = match previous.as_ref().and_then(|p| p.other.as_ref()) {
                        Some(o) if previous.as_ref().is_some_and(|p| p.vni == v.vni) => {
                            api.get_port(&o.port).await.ok().flatten()
                        }
                        _ => None,
                    };
                    let family = if vip.is_ipv4() {
                        IpAddr::V6(Ipv6Addr::UNSPECIFIED)
                    } else {
                        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
                    };
                    let kept = match (&reused, &persistent) {
                        (None, Some(w)) => api
                            .bind_persistent(v, &p.namespace, &p.name, w)
                            .await?
                            .into_iter()
                            .find(|o| {
                                o.spec
                                    .ip
                                    .parse::<IpAddr>()
                                    .is_ok_and(|ip| ip.is_ipv4() != vip.is_ipv4())
                            }),
                        _ => None,
                    };
                    let second = match reused.or(kept) {
                        Some(p) => Ok(p),
                        None => {
                            api.create_port(
                                v,
                                &p.namespace,
                                &p.name,
                                Some(family),
                                persistent.as_ref(),
                                ask.as_ref(),
                            )
                            .await
                        }
                    };
                    let other = second.and_then(|s| {
                        let n = s.metadata.name.clone().unwrap_or_default();
                        let ip: IpAddr = s.spec.ip.parse().map_err(|_| {
                            internal("the Port has no address", format!("{n}: {:?}", s.spec.ip))
                        })?;
                        Ok(VpcAddress { ip, port: n })
                    });
                    match other {
                        Ok(o) => va.other = Some(o),
                        Err(e) => {
                            // A workload's Port stays the workload's.
                            if !va.persistent {
                                let _ = api.discard_port(&va.port).await;
                            }
                            return Err(e);
                        }
                    }
                }
                Ok::<_, CniError>((va, mac, port.metadata.uid.clone().unwrap_or_default()))
            }
            .await;
            match claimed {
                Ok((va, mac, uid)) => {
                    vpc_att = Some(va);
                    vpc_mac = Some(mac);
                    port_uid = uid;
                }
                Err(e) => {
                    self.ipam().release(key.0, key.1);
                    let _ = self.persist().await;
                    return Err(e);
                }
            }
            if v.mtu > 0 {
                mtu = mtu.min(v.mtu);
            }
            steps.mark("port");
        }
        let pod_ips: Vec<IpAddr> = vpc_att
            .as_ref()
            .map_or_else(|| fabric.clone(), |v| v.ips().collect());
        // A secondary interface routes only its VPC's ranges: the pod's network keeps the
        // default route.
        let ranges: Vec<(IpAddr, u8)> = match (iface, &vpc) {
            (Iface::Secondary(..), Some((_, v, _))) => v.ranges.clone(),
            _ => Vec::new(),
        };
        let routes = match iface {
            Iface::Primary(_) => PodRoutes::Default,
            Iface::Secondary(..) => PodRoutes::Ranges(&ranges),
        };

        // The pod's netns cookie once registered in sdn_sock_netns, for the undo below.
        let mut cookie = None;
        let setup = async {
            // The pod was stamped with the Port's address and MAC when the Port was made.
            let (hl, pod_mac) = self
                .netdev
                .create_pod_veth(
                    &host,
                    (&env.netns, ifname),
                    &pod_ips,
                    vpc_mac,
                    &fabric,
                    mtu,
                    routes,
                )
                .await
                .map_err(|e| match e {
                    netdev::NetdevError::Io { ref what, .. } if what.starts_with("open netns") => {
                        CniError::new(
                            ErrorCode::UnknownContainer,
                            "container netns not found",
                            e.to_string(),
                        )
                    }
                    e => internal("creating the pod interface failed", e),
                })?;
            steps.mark("veth");
            {
                // aya's tc requests take RTNL too: in turn with the netlink work, so the ADDs
                // waiting for it hold no thread.
                let _turn = netdev::rtnl_turn().await;
                blocking(|| self.datapath().attach_pod(&host))
                    .map_err(|e| internal("attaching the datapath failed", e))?;
            }
            steps.mark("attach");
            self.write_maps(hl.index, &fabric, vpc_att.as_ref(), pod_mac)
                .map_err(|e| internal("writing the datapath maps failed", e))?;
            // The socket-level load balancer serves the pod's sockets when it is on net 0 (a
            // VPC pod is registered with its VNI, which the hooks leave alone). The netns is
            // the pod's network's: a secondary interface leaves it alone.
            if let Iface::Primary(_) = iface {
                let c = blocking(|| netns_cookie::of_path(Path::new(&env.netns)))
                    .map_err(|e| internal("reading the pod's netns cookie failed", e))?;
                SockNetnsMap::from_pin(&self.pin_dir)
                    .and_then(|mut m| m.upsert(c, vpc_att.as_ref().map_or(0, |v| v.vni)))
                    .map_err(|e| internal("writing the datapath maps failed", e))?;
                cookie = Some(c);
            }
            steps.mark("maps");
            self.ipam()
                .complete(key, hl.index, &format_mac(pod_mac), vpc_att.clone());
            if let Some(c) = cookie {
                self.ipam().set_netns_cookie(key, c);
            }
            // After the record: the sever task either finds it or is seen here (the revocation feature, features/sever).
            if let (Some(va), Some(api)) = (&vpc_att, &self.api)
                && api.severed.contains(&port_uid)
            {
                return Err(CniError::new(
                    ErrorCode::VpcUnavailable,
                    "the pod's VPC access was revoked",
                    format!("Port {} is being deleted", va.port),
                ));
            }
            self.persist().await?;
            steps.mark("persist");
            Ok::<_, CniError>((hl, pod_mac))
        }
        .await;
        let (hl, pod_mac) = match setup {
            Ok(v) => v,
            Err(e) => {
                self.sync_error("add");
                // Undo whatever part was done; each step tolerates "already gone".
                let l = self.netdev.link(&host).await.ok().flatten();
                let _ = self.remove_maps(l.map(|l| l.index), &fabric, vpc_att.as_ref());
                if let Some(c) = cookie {
                    let _ = SockNetnsMap::from_pin(&self.pin_dir).and_then(|mut m| m.remove(c));
                }
                let _ = self.datapath().detach(&host);
                let _ = self.netdev.delete(&host).await;
                self.ipam().release(key.0, key.1);
                let _ = self.persist().await;
                if let (Some(va), Some((api, _, _))) = (&vpc_att, &vpc)
                    && !va.persistent
                {
                    for port in va.ports() {
                        let _ = api.discard_port(port).await;
                    }
                }
                return Err(e);
            }
        };
        // The pod's network reports the fabric addresses (what kubelet shows as
        // status.podIPs) and a default route; a secondary interface its VPC addresses and
        // the VPC's ranges.
        let (ips, routes): (Vec<IpAddr>, Vec<(IpAddr, u8)>) = match iface {
            Iface::Primary(_) => (
                fabric.clone(),
                fabric
                    .iter()
                    .map(|f| {
                        (
                            if f.is_ipv4() {
                                Ipv4Addr::UNSPECIFIED.into()
                            } else {
                                Ipv6Addr::UNSPECIFIED.into()
                            },
                            0,
                        )
                    })
                    .collect(),
            ),
            Iface::Secondary(..) => (
                pod_ips.clone(),
                ranges
                    .iter()
                    .filter(|(n, _)| pod_ips.iter().any(|ip| ip.is_ipv4() == n.is_ipv4()))
                    .copied()
                    .collect(),
            ),
        };
        Ok(CniResult {
            cni_version: String::new(),
            interfaces: vec![
                Interface {
                    name: host,
                    mac: format_mac(hl.mac),
                    mtu: Some(mtu),
                    sandbox: None,
                },
                Interface {
                    name: ifname.to_string(),
                    mac: format_mac(pod_mac),
                    mtu: Some(mtu),
                    sandbox: Some(env.netns.clone()),
                },
            ],
            ips: ips
                .iter()
                .map(|f| IpConfig {
                    version: None,
                    address: host_prefix(*f),
                    gateway: Some(gateway_of(*f)),
                    interface: Some(1),
                })
                .collect(),
            routes: routes
                .iter()
                .map(|(n, len)| Route {
                    dst: format!("{n}/{len}"),
                    gw: Some(gateway_of(*n)),
                })
                .collect(),
            dns: Default::default(),
        })
    }
}

/// One interface an ADD attaches.
pub(super) enum Iface {
    /// The pod's network (`CNI_IFNAME`): net 0, or the VPC the pod asks for.
    Primary(Attachment),
    /// A secondary interface (issue 37) and how it came.
    Secondary(Wanted, Secondary),
}

impl Iface {
    fn ifname<'a>(&'a self, env: &'a cozyplane_cni::env::CniEnv) -> &'a str {
        match self {
            Self::Secondary(w, Secondary::Listed) => &w.interface,
            _ => &env.ifname,
        }
    }
}

/// The network's name in the netconf, for the pod's network's status entry.
fn conflist_name(config: &Value) -> &str {
    config["name"].as_str().unwrap_or("cozyplane")
}

/// The `network-status` entry of the interface `r` made (its pod side is `interfaces[1]`).
fn status_of(r: &CniResult, name: &str, default: bool) -> Value {
    let pod = r.interfaces.iter().find(|i| i.sandbox.is_some());
    let ips: Vec<IpAddr> = r
        .ips
        .iter()
        .filter_map(|i| i.address.split('/').next()?.parse().ok())
        .collect();
    secondary::network_status(
        name,
        pod.map_or("", |p| p.name.as_str()),
        &ips,
        pod.map_or("", |p| p.mac.as_str()),
        default,
    )
}

/// Appends `more`'s interfaces, addresses (their interface index moved past `r`'s) and routes
/// to `r`.
fn merge(r: &mut CniResult, more: CniResult) {
    let base = r.interfaces.len();
    r.interfaces.extend(more.interfaces);
    r.ips.extend(more.ips.into_iter().map(|mut i| {
        i.interface = i.interface.map(|n| n + base);
        i
    }));
    r.routes.extend(more.routes);
}

/// `ip/32` or `ip/128`.
pub(super) fn host_prefix(ip: IpAddr) -> String {
    format!("{ip}/{}", if ip.is_ipv4() { 32 } else { 128 })
}

/// The link-local gateway of `ip`'s family.
fn gateway_of(ip: IpAddr) -> String {
    if ip.is_ipv4() {
        GATEWAY.to_string()
    } else {
        GATEWAY6.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(ifname: &str, ip: &str) -> CniResult {
        CniResult {
            interfaces: vec![
                Interface {
                    name: format!("cph-{ifname}"),
                    ..Default::default()
                },
                Interface {
                    name: ifname.into(),
                    mac: "02:00:00:00:00:01".into(),
                    sandbox: Some("/n".into()),
                    ..Default::default()
                },
            ],
            ips: vec![IpConfig {
                version: None,
                address: format!("{ip}/32"),
                gateway: None,
                interface: Some(1),
            }],
            routes: vec![Route {
                dst: format!("{ip}/24"),
                gw: None,
            }],
            ..Default::default()
        }
    }

    #[test]
    fn merged_addresses_point_at_their_own_interface() {
        let mut r = one("eth0", "10.244.0.5");
        merge(&mut r, one("net1", "10.1.0.5"));
        merge(&mut r, one("net2", "10.1.0.5"));
        let names: Vec<_> = r.interfaces.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(
            names,
            ["cph-eth0", "eth0", "cph-net1", "net1", "cph-net2", "net2"]
        );
        let idx: Vec<_> = r.ips.iter().map(|i| i.interface).collect();
        assert_eq!(idx, [Some(1), Some(3), Some(5)]);
        assert_eq!(r.routes.len(), 3);
        let s = status_of(&one("net1", "10.1.0.5"), "t1/blue", false);
        assert_eq!(s["interface"], "net1");
        assert_eq!(s["ips"], serde_json::json!(["10.1.0.5"]));
        assert_eq!(s["mac"], "02:00:00:00:00:01");
    }
}
