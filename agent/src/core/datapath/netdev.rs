//! Netlink (rtnetlink) work: the tunnel device and pod veths.
//!
//! Pod veths are point-to-point: the pod gets its fabric address as a /32 and a default
//! route via the link-local gateway `169.254.1.1`, `onlink`; the
//! gateway's ARP is answered by `sdn_from_pod`. On the host side the agent installs a
//! /32 route and a permanent neighbour entry per pod, so the host stack (and net-0
//! traffic it forwards) reaches the pod without ARP.
//!
//! Work inside a pod's netns goes through a netlink socket created there: a netlink socket
//! talks to the netns it was created in, and `setns` moves only the calling thread, so one
//! long-lived thread per agent ([`NetnsOpener`]) enters the pod's netns, opens the socket
//! (registered with the agent's runtime) and returns home. The requests themselves then run
//! on the agent's runtime like any other: no thread, runtime or netns switch per request.
//!
//! Requests that take RTNL (the kernel's one lock for link, address, route and neighbour
//! changes) take an async turn first ([`in_turn`]): with many pods added at once, the
//! kernel's mutex lets waiters spin on a CPU while the holder runs on the other, which on a
//! small node is CPU the plugin and the pods' probes need.

use std::fs::File;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, OnceLock, mpsc};

use futures::TryStreamExt as _;
use netlink_packet_route::address::{AddressAttribute, AddressFlags, AddressHeaderFlags};
use netlink_packet_route::link::{InfoData, InfoKind, InfoVeth, LinkAttribute, LinkFlags, LinkMessage};
use netlink_packet_route::neighbour::NeighbourState;
use netlink_packet_route::route::{
    RouteAttribute, RouteFlags, RouteIp6Tunnel, RouteIp6TunnelFlags, RouteIpTunnel, RouteLwEnCapType,
    RouteLwTunnelEncap, RouteLwTunnelOpt, RouteScope, RouteVxlanOpt,
};
use nix::sched::{CloneFlags, setns};
use rtnetlink::{Handle, LinkUnspec, LinkVeth, RouteMessageBuilder, new_connection};

/// The gateway every pod routes through (`DatapathConfig::gw_ipv4`).
pub const GATEWAY: Ipv4Addr = Ipv4Addr::new(169, 254, 1, 1);
/// The IPv6 gateway every pod routes through (the datapath's `SDN_GW6`): link-local, owned by
/// no interface; the datapath answers its neighbour solicitations.
pub const GATEWAY6: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1);

/// Failures of netlink work.
#[derive(Debug, thiserror::Error)]
pub enum NetdevError {
    /// A netlink request failed.
    #[error("{what}: {source}")]
    Netlink {
        /// What was being done.
        what: String,
        /// The error.
        source: rtnetlink::Error,
    },
    /// Opening or entering a netns, or a socket.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: std::io::Error,
    },
    /// Something expected is missing.
    #[error("{0}")]
    Missing(String),
}

pub(super) fn nl(what: impl Into<String>) -> impl FnOnce(rtnetlink::Error) -> NetdevError {
    let what = what.into();
    move |source| NetdevError::Netlink { what, source }
}

/// Whether a netlink error means "no such object" (ENODEV, ENOENT, ESRCH).
pub(super) fn is_not_found(e: &rtnetlink::Error) -> bool {
    matches!(e, rtnetlink::Error::NetlinkError(m)
        if m.code.is_some_and(|c| [nix::libc::ENODEV, nix::libc::ENOENT, nix::libc::ESRCH].contains(&-c.get())))
}

/// What the agent needs to know about a link.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkInfo {
    /// ifindex.
    pub index: u32,
    /// MTU.
    pub mtu: u32,
    /// MAC.
    pub mac: [u8; 6],
    /// Administratively up.
    pub up: bool,
}

pub(super) fn link_info(m: &LinkMessage) -> LinkInfo {
    let mut info = LinkInfo {
        index: m.header.index,
        mtu: 0,
        mac: [0; 6],
        up: m.header.flags.contains(LinkFlags::Up),
    };
    for a in &m.attributes {
        match a {
            LinkAttribute::Mtu(v) => info.mtu = *v,
            LinkAttribute::Address(b) if b.len() == 6 => info.mac.copy_from_slice(b),
            _ => {}
        }
    }
    info
}

/// `aa:bb:cc:dd:ee:ff`.
pub fn format_mac(mac: [u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Parse `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut out = [0u8; 6];
    let mut parts = s.split(':');
    for b in &mut out {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(out)
}

/// Netlink handle for the agent's own (node) netns.
#[derive(Clone, Debug)]
pub struct NetDev {
    h: Handle,
    /// Started on first use (most agents' second `NetDev`, the watch's, never needs it).
    opener: Arc<OnceLock<Result<NetnsOpener, String>>>,
}

impl NetDev {
    /// Open a netlink connection in the current netns; must run inside a tokio runtime.
    pub fn new() -> Result<Self, NetdevError> {
        let (conn, h, _) = new_connection().map_err(|source| NetdevError::Io {
            what: "netlink socket".into(),
            source,
        })?;
        tokio::spawn(conn);
        Ok(Self {
            h,
            opener: Arc::default(),
        })
    }

    /// The link called `name`, if it exists.
    pub async fn link(&self, name: &str) -> Result<Option<LinkInfo>, NetdevError> {
        link_by_name(&self.h, name).await
    }

    /// The rtnetlink handle, for the agent's other netlink work (e.g. the uplink's, `features/uplink`).
    pub fn handle(&self) -> &Handle {
        &self.h
    }

    /// The MTU the overlay must fit in: `dev`'s, else the default route's device's, else
    /// 1500 (a node without a default route, as in tests).
    pub async fn underlay_mtu(&self, dev: Option<&str>) -> Result<u32, NetdevError> {
        if let Some(dev) = dev {
            return self
                .link(dev)
                .await?
                .map(|l| l.mtu)
                .ok_or_else(|| NetdevError::Missing(format!("underlay device {dev} not found")));
        }
        let mut routes = self
            .h
            .route()
            .get(RouteMessageBuilder::<Ipv4Addr>::new().build())
            .execute();
        while let Some(r) = routes.try_next().await.map_err(nl("list routes"))? {
            if r.header.destination_prefix_length != 0 {
                continue;
            }
            let oif = r.attributes.iter().find_map(|a| match a {
                RouteAttribute::Oif(i) => Some(*i),
                _ => None,
            });
            if let Some(oif) = oif {
                let mut links = self.h.link().get().match_index(oif).execute();
                if let Some(l) = links.try_next().await.map_err(nl("get default route device"))? {
                    return Ok(link_info(&l).mtu);
                }
            }
        }
        Ok(1500)
    }

    /// The names of this netns's links that start with `prefix`.
    pub async fn link_names(&self, prefix: &str) -> Result<Vec<String>, NetdevError> {
        let mut links = self.h.link().get().execute();
        let mut names = Vec::new();
        while let Some(m) = links.try_next().await.map_err(nl("list links"))? {
            names.extend(m.attributes.iter().find_map(|a| match a {
                LinkAttribute::IfName(n) if n.starts_with(prefix) => Some(n.clone()),
                _ => None,
            }));
        }
        Ok(names)
    }

    /// Delete link `name`; `false` if it did not exist.
    pub async fn delete(&self, name: &str) -> Result<bool, NetdevError> {
        let Some(l) = self.link(name).await? else {
            return Ok(false);
        };
        match in_turn(self.h.link().del(l.index).execute()).await {
            Ok(()) => Ok(true),
            Err(e) if is_not_found(&e) => Ok(false),
            Err(e) => Err(nl(format!("delete {name}"))(e)),
        }
    }

    /// Create the veth pair of a pod: `host` stays here, the peer moves into `netns` as
    /// `ifname` with `ips` (one per family, /32 or /128; and `mac`, if given) and a default
    /// route per family via [`GATEWAY`] or [`GATEWAY6`]; the host gets a host route and
    /// permanent neighbour for each of `host_ips` (the fabric addresses: the pod's own on
    /// net 0, the bridged ones for a VPC pod). Returns (host link, pod MAC).
    #[allow(clippy::too_many_arguments)]
    pub async fn create_pod_veth(
        &self,
        host: &str,
        (netns, ifname): (&str, &str),
        ips: &[IpAddr],
        mac: Option<[u8; 6]>,
        host_ips: &[IpAddr],
        mtu: u32,
        routes: PodRoutes<'_>,
    ) -> Result<(LinkInfo, [u8; 6]), NetdevError> {
        use std::os::fd::AsRawFd as _;
        let ns = File::open(netns).map_err(|source| NetdevError::Io {
            what: format!("open netns {netns}"),
            source,
        })?;
        // One request makes both ends: the peer is born inside the pod's netns under its
        // final name (no temporary name, no move, no rename: each of those is a netlink
        // round trip, and a move between namespaces waits for an RCU grace period). The
        // host end comes up with it; the peer cannot (veth configures it before the pair
        // is joined, and opening an unjoined veth fails with ENOTCONN).
        let mut peer = LinkUnspec::new_with_name(ifname)
            .mtu(mtu)
            .setns_by_fd(ns.as_raw_fd());
        if let Some(mac) = mac {
            peer = peer.address(mac.to_vec());
        }
        let msg = rtnetlink::LinkMessageBuilder::<LinkVeth>::new_with_info_kind(InfoKind::Veth)
            .name(host.to_string())
            .mtu(mtu)
            .up()
            .set_info_data(InfoData::Veth(InfoVeth::Peer(peer.build())))
            .build();
        in_turn(self.h.link().add(msg).execute())
            .await
            .map_err(nl(format!("create veth {host} with {ifname} in {netns}")))?;

        let ifname_owned = ifname.to_string();
        let ips = ips.to_vec();
        let ranges: Option<Vec<(IpAddr, u8)>> = match routes {
            PodRoutes::Default => None,
            PodRoutes::Ranges(r) => Some(r.to_vec()),
        };
        let pod_mac = self
            .in_netns(netns, move |h| async move {
                let l = link_by_name(&h, &ifname_owned)
                    .await?
                    .ok_or_else(|| NetdevError::Missing(format!("{ifname_owned} not in the pod netns")))?;
                in_turn(
                    h.link()
                        .set(LinkUnspec::new_with_index(l.index).up().build())
                        .execute(),
                )
                .await
                .map_err(nl(format!("up {ifname_owned}")))?;
                for ip in ips {
                    pod_address(&h, l.index, ip).await?;
                    match &ranges {
                        None => pod_route(&h, l.index, ip, None).await?,
                        Some(r) => {
                            for range in r.iter().filter(|(n, _)| n.is_ipv4() == ip.is_ipv4()) {
                                pod_route(&h, l.index, ip, Some(*range)).await?;
                            }
                        }
                    }
                }
                Ok(l.mac)
            })
            .await?;

        let host_link = self
            .link(host)
            .await?
            .ok_or_else(|| NetdevError::Missing(format!("host veth {host} missing")))?;
        for ip in host_ips {
            self.pod_host_routes(host_link.index, *ip, pod_mac).await?;
        }
        Ok((host_link, pod_mac))
    }

    /// The host route to another node's fabric block: `block/len` out of the
    /// collect-metadata tunnel device `tunnel` with a lightweight-tunnel encap `{id vni,
    /// dst node}`, so the host stack (node → pod on another node, the node's replies to such
    /// pods) reaches it over the overlay (replace: idempotent).
    pub async fn remote_block_route(
        &self,
        tunnel: u32,
        (block, len): (IpAddr, u8),
        vni: u32,
        node: IpAddr,
    ) -> Result<(), NetdevError> {
        // The tunnel key's family is the node's (the underlay's), whatever the block's: a v6
        // block over a v4 underlay, or the reverse, is fine.
        let mut msg = block_route(tunnel, block, len);
        match node {
            IpAddr::V4(node) => {
                msg.attributes
                    .push(RouteAttribute::EncapType(RouteLwEnCapType::Ip));
                msg.attributes.push(RouteAttribute::Encap(vec![
                    RouteLwTunnelEncap::Ip(RouteIpTunnel::Id(u64::from(vni))),
                    RouteLwTunnelEncap::Ip(RouteIpTunnel::Destination(node)),
                ]));
                if super::tunnel::routes_need_gbp_none() {
                    push_encap(&mut msg, RouteLwTunnelEncap::Ip(RouteIpTunnel::Opts(gbp_none())));
                }
            }
            IpAddr::V6(node) => {
                msg.attributes
                    .push(RouteAttribute::EncapType(RouteLwEnCapType::Ip6));
                msg.attributes.push(RouteAttribute::Encap(vec![
                    RouteLwTunnelEncap::Ip6(RouteIp6Tunnel::Id(u64::from(vni))),
                    RouteLwTunnelEncap::Ip6(RouteIp6Tunnel::Destination(node)),
                    // An outer UDP checksum: a zero one over IPv6 is dropped by a receiver
                    // without udp6zerocsumrx (the datapath's own encap asks the same).
                    RouteLwTunnelEncap::Ip6(RouteIp6Tunnel::Flags(
                        RouteIp6TunnelFlags::Key | RouteIp6TunnelFlags::Checksum,
                    )),
                ]));
                if super::tunnel::routes_need_gbp_none() {
                    push_encap(
                        &mut msg,
                        RouteLwTunnelEncap::Ip6(RouteIp6Tunnel::Opts(gbp_none())),
                    );
                }
            }
        }
        in_turn(self.h.route().add(msg).replace().execute())
            .await
            .map_err(nl(format!("route {block}/{len} via {node}")))
    }

    /// Remove the route [`Self::remote_block_route`] installed; absent is fine.
    pub async fn remove_remote_block_route(
        &self,
        tunnel: u32,
        (ip, len): (IpAddr, u8),
    ) -> Result<(), NetdevError> {
        let msg = block_route(tunnel, ip, len);
        match in_turn(self.h.route().del(msg).execute()).await {
            Ok(()) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(nl(format!("delete route {ip}/{len}"))(e)),
        }
    }

    /// The host-side host route (/32, /128) and permanent neighbour of a pod (replace:
    /// idempotent).
    pub async fn pod_host_routes(&self, index: u32, ip: IpAddr, pod_mac: [u8; 6]) -> Result<(), NetdevError> {
        let route = match ip {
            IpAddr::V4(v4) => RouteMessageBuilder::<Ipv4Addr>::new()
                .destination_prefix(v4, 32)
                .output_interface(index)
                .scope(RouteScope::Link)
                .build(),
            IpAddr::V6(v6) => RouteMessageBuilder::<Ipv6Addr>::new()
                .destination_prefix(v6, 128)
                .output_interface(index)
                .build(),
        };
        in_turn(self.h.route().add(route).replace().execute())
            .await
            .map_err(nl(format!("host route {ip}")))?;
        in_turn(
            self.h
                .neighbours()
                .add(index, ip)
                .link_layer_address(&pod_mac)
                .state(NeighbourState::Permanent)
                .replace()
                .execute(),
        )
        .await
        .map_err(nl(format!("neighbour {ip}")))
    }

    /// Look at `ifname` inside `netns`; `None` if it does not exist.
    pub async fn inspect_pod(&self, netns: &str, ifname: &str) -> Result<Option<PodSide>, NetdevError> {
        let ifname = ifname.to_string();
        self.in_netns(netns, move |h| async move {
            let Some(link) = link_by_name(&h, &ifname).await? else {
                return Ok(None);
            };
            let mut addrs = Vec::new();
            let mut s = h.address().get().set_link_index_filter(link.index).execute();
            while let Some(m) = s.try_next().await.map_err(nl("list addresses"))? {
                for a in &m.attributes {
                    match a {
                        AddressAttribute::Address(ip @ IpAddr::V4(_)) => {
                            addrs.push((*ip, m.header.prefix_len));
                        }
                        AddressAttribute::Address(ip @ IpAddr::V6(v6)) if !v6.is_unicast_link_local() => {
                            addrs.push((*ip, m.header.prefix_len));
                        }
                        _ => {}
                    }
                }
            }
            Ok(Some(PodSide { link, addrs }))
        })
        .await
    }

    /// Runs `f` with a netlink handle inside the netns at `path`, on the agent's runtime.
    pub async fn in_netns<F, Fut, T>(&self, path: &str, f: F) -> Result<T, NetdevError>
    where
        F: FnOnce(Handle) -> Fut,
        Fut: Future<Output = Result<T, NetdevError>>,
    {
        let opener = self
            .opener
            .get_or_init(|| NetnsOpener::start().map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| NetdevError::Missing(format!("netns opener: {e}")))?;
        let (conn, h) = opener.open(path).await?;
        let conn = tokio::spawn(conn);
        let res = f(h).await;
        // The connection would end once its handles are gone; no need to wait for that.
        conn.abort();
        res
    }
}

/// A turn for RTNL-taking work, one holder at a time per agent (RTNL is one lock for the whole
/// kernel): this module's requests, and the program attach that aya does over its own netlink
/// sockets.
pub async fn rtnl_turn() -> tokio::sync::MutexGuard<'static, ()> {
    static TURNS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    TURNS.lock().await
}

/// Runs one RTNL-taking request in its turn ([`rtnl_turn`]).
pub(super) async fn in_turn<T>(request: impl Future<Output = T>) -> T {
    let _turn = rtnl_turn().await;
    request.await
}

type Connection = rtnetlink::proto::Connection<netlink_packet_route::RouteNetlinkMessage>;
type Opened = Result<(Connection, Handle), NetdevError>;

/// The one thread that changes netns: it opens netlink connections inside other network
/// namespaces and is back in the agent's own before it takes the next request, so no runtime
/// worker ever leaves the node's netns.
#[derive(Debug)]
struct NetnsOpener {
    requests: mpsc::Sender<(String, tokio::sync::oneshot::Sender<Opened>)>,
}

impl NetnsOpener {
    /// Must run inside the agent's runtime: the sockets it opens are registered with it.
    fn start() -> std::io::Result<Self> {
        let home = File::open("/proc/thread-self/ns/net")?;
        let runtime = tokio::runtime::Handle::current();
        let (requests, rx) = mpsc::channel::<(String, tokio::sync::oneshot::Sender<Opened>)>();
        std::thread::Builder::new()
            .name("cozyplane-netns".into())
            .spawn(move || {
                let _runtime = runtime.enter();
                for (path, reply) in rx {
                    let _ = reply.send(open_in(&path, &home));
                }
            })?;
        Ok(Self { requests })
    }

    async fn open(&self, path: &str) -> Opened {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.requests
            .send((path.to_string(), tx))
            .map_err(|_| NetdevError::Missing("netns opener thread is gone".into()))?;
        rx.await
            .map_err(|_| NetdevError::Missing("netns opener thread is gone".into()))?
    }
}

fn open_in(path: &str, home: &File) -> Opened {
    let io = |what: String| move |source| NetdevError::Io { what, source };
    let ns = File::open(path).map_err(io(format!("open netns {path}")))?;
    setns(&ns, CloneFlags::CLONE_NEWNET).map_err(|e| io(format!("setns {path}"))(e.into()))?;
    let opened = new_connection();
    if let Err(e) = setns(home, CloneFlags::CLONE_NEWNET) {
        // Every later socket would land in a pod's netns: stop rather than misconfigure.
        tracing::error!("cannot return to the agent's netns from {path}: {e}");
        std::process::abort();
    }
    let (conn, h, _) = opened.map_err(io("netlink socket in netns".into()))?;
    Ok((conn, h))
}

/// What CHECK finds inside the pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodSide {
    /// The pod interface.
    pub link: LinkInfo,
    /// Its addresses with prefix lengths (IPv6 link-local ones left out).
    pub addrs: Vec<(IpAddr, u8)>,
}

/// A route to another node's block out of the tunnel device.
/// A VXLAN option with policy id 0 ("groups not carried"), for routes into a `gbp` device.
fn gbp_none() -> Vec<RouteLwTunnelOpt> {
    vec![RouteLwTunnelOpt::Vxlan(vec![RouteVxlanOpt::Gbp(0)])]
}

/// Appends `e` to the route's `RTA_ENCAP`.
fn push_encap(msg: &mut netlink_packet_route::route::RouteMessage, e: RouteLwTunnelEncap) {
    for a in &mut msg.attributes {
        if let RouteAttribute::Encap(v) = a {
            v.push(e);
            return;
        }
    }
}

fn block_route(tunnel: u32, block: IpAddr, len: u8) -> netlink_packet_route::route::RouteMessage {
    match block {
        IpAddr::V4(b) => RouteMessageBuilder::<Ipv4Addr>::new()
            .destination_prefix(b, len)
            .output_interface(tunnel)
            .scope(RouteScope::Link)
            .build(),
        IpAddr::V6(b) => RouteMessageBuilder::<Ipv6Addr>::new()
            .destination_prefix(b, len)
            .output_interface(tunnel)
            .build(),
    }
}

/// One address of the pod interface and the default route of its family. IPv6: without
/// duplicate address detection (the VPC or the node block hands each address out once, and
/// a tentative address could not send for a second or more).
/// The routes a pod interface gets to its gateway.
#[derive(Clone, Copy, Debug)]
pub enum PodRoutes<'a> {
    /// The default route of each family: the pod's network.
    Default,
    /// Only these ranges (a VPC's, on a secondary interface, issue 37): the pod's network
    /// keeps the default route.
    Ranges(&'a [(IpAddr, u8)]),
}

async fn pod_address(h: &Handle, index: u32, ip: IpAddr) -> Result<(), NetdevError> {
    let mut add = h.address().add(index, ip, if ip.is_ipv4() { 32 } else { 128 });
    if ip.is_ipv6() {
        add.message_mut().header.flags |= AddressHeaderFlags::Nodad;
        add.message_mut()
            .attributes
            .push(AddressAttribute::Flags(AddressFlags::Nodad));
    }
    in_turn(add.execute()).await.map_err(nl(format!("address {ip}")))
}

/// The route to `dst` (`None`: the default route) via the link-local gateway of `ip`'s family.
/// A range's route has the interface's index as its metric: two VPCs of one pod may share a
/// range (each interface then has a route to it, which one table holds only with distinct
/// metrics); a socket bound to an interface takes that interface's, an unbound one the
/// lowest.
async fn pod_route(h: &Handle, index: u32, ip: IpAddr, dst: Option<(IpAddr, u8)>) -> Result<(), NetdevError> {
    let route = match (ip, dst) {
        // `onlink`: the gateway needs no route of its own to be reachable on the link (one
        // RTNL round trip fewer per pod than an extra /32 route).
        (IpAddr::V4(_), dst) => {
            let mut b = RouteMessageBuilder::<Ipv4Addr>::new()
                .gateway(GATEWAY)
                .output_interface(index);
            if let Some((IpAddr::V4(n), len)) = dst {
                b = b.destination_prefix(n, len).priority(index);
            }
            let mut r = b.build();
            r.header.flags |= RouteFlags::Onlink;
            r
        }
        // A link-local gateway is on-link by definition.
        (IpAddr::V6(_), dst) => {
            let mut b = RouteMessageBuilder::<Ipv6Addr>::new()
                .gateway(GATEWAY6)
                .output_interface(index);
            if let Some((IpAddr::V6(n), len)) = dst {
                b = b.destination_prefix(n, len).priority(index);
            }
            b.build()
        }
    };
    let what = match dst {
        Some((n, len)) => format!("route {n}/{len} via the gateway of {ip}"),
        None => format!("default route via the gateway of {ip}"),
    };
    in_turn(h.route().add(route).execute()).await.map_err(nl(what))
}

async fn link_by_name(h: &Handle, name: &str) -> Result<Option<LinkInfo>, NetdevError> {
    let mut s = h.link().get().match_name(name.to_string()).execute();
    match s.try_next().await {
        Ok(m) => Ok(m.as_ref().map(link_info)),
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => Err(nl(format!("get link {name}"))(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mac_round_trip() {
        let m = [0x02, 0xcf, 0, 0x0a, 0xff, 1];
        assert_eq!(format_mac(m), "02:cf:00:0a:ff:01");
        assert_eq!(parse_mac(&format_mac(m)), Some(m));
        assert_eq!(parse_mac("02:cf"), None);
        assert_eq!(parse_mac("02:cf:00:0a:ff:01:02"), None);
    }
}
