//! ADD: which network, the fabric address, the Port, the veth, the programs, the maps.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

use cozyplane_bpf::maps::sock_netns::SockNetnsMap;
use cozyplane_cni::proto::Request;
use cozyplane_cni::spec::{CniError, CniResult, ErrorCode, Interface, IpConfig, Route};
use serde_json::Value;

use super::{AgentState, Steps, blocking, host_veth_name, internal};
use crate::core::api::Persistent;
use crate::core::cni::attachment::{self, Attachment};
use crate::core::datapath::netdev::{self, GATEWAY, GATEWAY6, format_mac, parse_mac};
use crate::core::datapath::netns_cookie;
use crate::core::ipam::{VpcAddress, VpcAttachment};

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

    pub(super) async fn add(
        &self,
        req: &Request,
        version: &str,
        steps: &mut Steps,
    ) -> Result<Option<Value>, CniError> {
        let att = self.requested(req).await?;
        let env = &req.env;
        let vpc = match (&att, &self.api) {
            (Attachment::Default, _) => None,
            (Attachment::Vpc { .. }, None) => {
                return Err(attachment::unsupported(&att).unwrap_or_else(|| {
                    CniError::plain(ErrorCode::VpcUnavailable, "VPC attachments need --kubeconfig")
                }));
            }
            (Attachment::Vpc { vpc }, Some(api)) => {
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
        let _attachment = self.attachments.lock(&env.container_id, &env.ifname).await;
        let (ip, ip6, previous, retried) = {
            let mut ipam = self.ipam();
            let retried = ipam.get(&env.container_id, &env.ifname).is_some();
            let ip = ipam
                .allocate(&env.container_id, &env.ifname, &env.netns, &pod)
                .map_err(|e| internal("fabric address allocation failed", e))?;
            // A repeated ADD (runtime retry) reuses the Port it created before.
            let record = ipam.get(&env.container_id, &env.ifname);
            let previous = record.and_then(|a| a.vpc.clone());
            let ip6 = record.and_then(|a| a.ip6);
            (ip, ip6, previous, retried)
        };
        // The record goes to disk once, complete, before ADD returns; until then the address
        // is only held in memory. An ADD cut short by a crash leaves at most a host veth
        // without a record, which restart reconciliation deletes by its name.
        let host = host_veth_name(&env.container_id, &env.ifname);
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
                // workload's Ports, wherever they were (issue 27).
                let persistent = Persistent::of(&api.pod_facts(&p.namespace, &p.name).await?, &env.ifname);
                let port = match existing {
                    Some(port) => port,
                    None => {
                        api.take_port(v, (&p.namespace, &p.name), uid, persistent.as_ref())
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
                            api.create_port(v, &p.namespace, &p.name, Some(family), persistent.as_ref())
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
                    self.ipam().release(&env.container_id, &env.ifname);
                    let _ = self.persist().await;
                    return Err(e);
                }
            }
            if v.mtu > 0 {
                mtu = mtu.min(v.mtu);
            }
            steps.mark("port");
        }
        let fabric: Vec<IpAddr> = std::iter::once(IpAddr::V4(ip))
            .chain(ip6.map(IpAddr::V6))
            .collect();
        let pod_ips: Vec<IpAddr> = vpc_att
            .as_ref()
            .map_or_else(|| fabric.clone(), |v| v.ips().collect());

        // The pod's netns cookie once registered in sdn_sock_netns, for the undo below.
        let mut cookie = None;
        let setup = async {
            // The pod was stamped with the Port's address and MAC when the Port was made.
            let (hl, pod_mac) = self
                .netdev
                .create_pod_veth(&host, &env.netns, &env.ifname, &pod_ips, vpc_mac, &fabric, mtu)
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
            // VPC pod is registered with its VNI, which the hooks leave alone).
            let c = blocking(|| netns_cookie::of_path(Path::new(&env.netns)))
                .map_err(|e| internal("reading the pod's netns cookie failed", e))?;
            SockNetnsMap::from_pin(&self.pin_dir)
                .and_then(|mut m| m.upsert(c, vpc_att.as_ref().map_or(0, |v| v.vni)))
                .map_err(|e| internal("writing the datapath maps failed", e))?;
            cookie = Some(c);
            steps.mark("maps");
            self.ipam()
                .complete(ip, hl.index, &format_mac(pod_mac), vpc_att.clone());
            self.ipam().set_netns_cookie(ip, c);
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
                self.ipam().release(&env.container_id, &env.ifname);
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
        let result = CniResult {
            cni_version: String::new(),
            interfaces: vec![
                Interface {
                    name: host,
                    mac: format_mac(hl.mac),
                    mtu: Some(mtu),
                    sandbox: None,
                },
                Interface {
                    name: env.ifname.clone(),
                    mac: format_mac(pod_mac),
                    mtu: Some(mtu),
                    sandbox: Some(env.netns.clone()),
                },
            ],
            // The fabric addresses: what kubelet reports as status.podIPs.
            ips: fabric
                .iter()
                .map(|f| IpConfig {
                    version: None,
                    address: host_prefix(*f),
                    gateway: Some(gateway_of(*f)),
                    interface: Some(1),
                })
                .collect(),
            routes: fabric
                .iter()
                .map(|f| Route {
                    dst: if f.is_ipv4() { "0.0.0.0/0" } else { "::/0" }.into(),
                    gw: Some(gateway_of(*f)),
                })
                .collect(),
            dns: Default::default(),
        }
        .for_version(version);
        serde_json::to_value(result)
            .map(Some)
            .map_err(|e| internal("encoding the result failed", e))
    }
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
