//! The node's uplink: where north-south traffic leaves and its replies come back.
//!
//! At start the agent picks the uplink (`--uplink-device`, else the device of the IPv4
//! default route, else the IPv6 one), attaches `sdn_from_uplink` to its ingress and
//! `sdn_host_out` (the HostFirewall's egress) to its egress (pinned TCX links like the
//! overlay's, so the hooks and the NAT flows survive an agent restart: the datapath fails
//! static) and writes the node's NAT settings (`sdn_snat_conf`): the uplink's
//! ifindex and global addresses (what net-0 pods are masqueraded to), the masquerade port
//! range, and this node's shard of the gateway port range ([`crate::core::shards`]). The uplink's
//! addresses also go into `sdn_snat_addrs` as net 0, so that `sdn_from_uplink` recognises
//! replies to masqueraded flows.
//!
//! A node without an uplink (no default route, no flag) masquerades nothing: its pods' traffic
//! goes to the host stack as with `--masquerade=off`.

use std::net::IpAddr;

use cozyplane_bpf::abi::{Addr, SnatConf};
use cozyplane_bpf::maps::snat_addrs::SnatAddrsMap;
use cozyplane_bpf::maps::snat_conf::SnatConfMap;
use futures::TryStreamExt as _;
use futures::future::BoxFuture;
use netlink_packet_route::address::{AddressAttribute, AddressScope};
use netlink_packet_route::route::{RouteAttribute, RouteMessage};
use rtnetlink::RouteMessageBuilder;

use crate::core::datapath::loader::Datapath;
use crate::core::datapath::netdev::NetDev;
use crate::core::feature::{Core, DatapathCtx, Feature, FeatureError};
use crate::core::ipam::Block;
use crate::core::shards::{GW_PORTS, shard_of, shard_size};

/// The uplink's flags.
#[derive(Clone, Debug, clap::Args)]
// Every feature's struct is `Args`: clap's default group id (the struct's name) would clash.
#[group(skip)]
pub struct Args {
    /// The node's uplink, where north-south traffic leaves and its replies arrive
    /// (`sdn_from_uplink` is attached to its ingress). Default: the default route's device.
    #[arg(long, env = "COZYPLANE_UPLINK_DEVICE")]
    pub uplink_device: Option<String>,
    /// Egress masquerade of default-network pods to outside the cluster: `bpf` (the datapath
    /// translates to the uplink's address) or `off` (an operator who masquerades elsewhere).
    #[arg(long, value_enum, default_value = "bpf")]
    pub masquerade: Masquerade,
    /// The ports masqueraded flows get, `MIN-MAX` (inclusive). Keep them out of the node's
    /// own ephemeral range (`net.ipv4.ip_local_port_range`, 32768–60999 by default), or the
    /// node's connections and masqueraded ones may meet at one port.
    #[arg(long, default_value = "61000-65535", value_parser = parse_port_range)]
    pub masquerade_ports: (u16, u16),
}

/// `--masquerade`: who translates default-network pods' traffic to outside the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Masquerade {
    /// The datapath (eBPF), to the uplink's address.
    Bpf,
    /// Nobody here: the operator masquerades elsewhere (or routes pod addresses).
    Off,
}

/// Net-0 masquerade ports by default (`--masquerade-ports`): above the host's default
/// ephemeral range (32768–60999), so the node's own connections never collide with
/// masqueraded ones.
pub const MASQ_PORTS: (u16, u16) = (61000, 65535);

/// `--masquerade-ports`: `MIN-MAX`, 1 ≤ MIN ≤ MAX.
pub fn parse_port_range(s: &str) -> Result<(u16, u16), String> {
    let (a, b) = s
        .split_once('-')
        .ok_or_else(|| format!("{s:?}: expected MIN-MAX"))?;
    let port = |p: &str| p.trim().parse::<u16>().map_err(|e| format!("{s:?}: {p:?}: {e}"));
    let (min, max) = (port(a)?, port(b)?);
    if min == 0 || min > max {
        return Err(format!("{s:?}: expected 1 <= MIN <= MAX"));
    }
    Ok((min, max))
}
/// Why the uplink could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum UplinkError {
    /// Netlink work failed.
    #[error("{what}: {source}")]
    Netlink {
        /// What was being done.
        what: String,
        /// The error.
        source: rtnetlink::Error,
    },
    /// The named device does not exist.
    #[error("uplink device {0} not found")]
    Missing(String),
    /// `--nat-shards` out of range.
    #[error("--nat-shards must be 1..={max}, got {0}", max = cozyplane_bpf::maps::snat_shards::MAX)]
    Shards(u16),
    /// Attaching `sdn_from_uplink`.
    #[error("{0}")]
    Attach(#[from] crate::core::datapath::loader::LoadError),
    /// Writing the maps.
    #[error("{what}: {source}")]
    Map {
        /// What was being done.
        what: String,
        /// The error.
        source: aya::maps::MapError,
    },
}

/// The uplink as found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Uplink {
    /// Device name.
    pub dev: String,
    /// Its ifindex.
    pub index: u32,
    /// Its first global IPv4 and IPv6 addresses.
    pub addr4: Option<std::net::Ipv4Addr>,
    /// See `addr4`.
    pub addr6: Option<std::net::Ipv6Addr>,
}

/// The settings `sdn_snat_conf` gets; `masq` with its port range (`--masquerade-ports`).
pub fn conf(
    up: Option<&Uplink>,
    (masq, masq_ports): (Masquerade, (u16, u16)),
    block: &Block,
    shards: u16,
) -> SnatConf {
    let mut c = SnatConf {
        masq_min: masq_ports.0,
        masq_max: masq_ports.1,
        gw_min: GW_PORTS.0,
        gw_shard_size: shard_size(shards),
        gw_shards: shards,
        shard: shard_of((block.base(), block.prefix()), shards),
        ..SnatConf::default()
    };
    let Some(up) = up else { return c };
    c.uplink_ifindex = up.index;
    if masq == Masquerade::Bpf {
        c.flags |= SnatConf::F_MASQ;
    }
    if let Some(a) = up.addr4 {
        c.node4 = Addr::from(a);
        c.flags |= SnatConf::F_HAVE4;
    }
    if let Some(a) = up.addr6 {
        c.node6 = Addr::from(a);
        c.flags |= SnatConf::F_HAVE6;
    }
    c
}

fn nl(what: impl Into<String>) -> impl FnOnce(rtnetlink::Error) -> UplinkError {
    let what = what.into();
    move |source| UplinkError::Netlink { what, source }
}

/// The output device of a default route among `routes`.
fn default_oif(routes: &[RouteMessage]) -> Option<u32> {
    routes
        .iter()
        .filter(|r| r.header.destination_prefix_length == 0)
        .find_map(|r| {
            r.attributes.iter().find_map(|a| match a {
                RouteAttribute::Oif(i) => Some(*i),
                _ => None,
            })
        })
}

/// Finds the uplink: `dev`, else the default route's device (IPv4 first); None without one.
pub async fn find(netdev: &NetDev, dev: Option<&str>) -> Result<Option<Uplink>, UplinkError> {
    let h = netdev.handle();
    let index = match dev {
        Some(d) => Some(
            netdev
                .link(d)
                .await
                .map_err(|e| UplinkError::Missing(format!("{d}: {e}")))?
                .ok_or_else(|| UplinkError::Missing(d.to_string()))?
                .index,
        ),
        None => {
            let v4: Vec<RouteMessage> = h
                .route()
                .get(RouteMessageBuilder::<std::net::Ipv4Addr>::new().build())
                .execute()
                .try_collect()
                .await
                .map_err(nl("list IPv4 routes"))?;
            let v6: Vec<RouteMessage> = h
                .route()
                .get(RouteMessageBuilder::<std::net::Ipv6Addr>::new().build())
                .execute()
                .try_collect()
                .await
                .map_err(nl("list IPv6 routes"))?;
            default_oif(&v4).or_else(|| default_oif(&v6))
        }
    };
    let Some(index) = index else { return Ok(None) };
    let mut links = h.link().get().match_index(index).execute();
    let name = links
        .try_next()
        .await
        .map_err(nl(format!("get link {index}")))?
        .and_then(|m| {
            m.attributes.iter().find_map(|a| match a {
                netlink_packet_route::link::LinkAttribute::IfName(n) => Some(n.clone()),
                _ => None,
            })
        })
        .unwrap_or_default();
    let addrs: Vec<_> = h
        .address()
        .get()
        .set_link_index_filter(index)
        .execute()
        .try_collect()
        .await
        .map_err(nl(format!("addresses of {name}")))?;
    let mut up = Uplink {
        dev: name,
        index,
        addr4: None,
        addr6: None,
    };
    for m in addrs.iter().filter(|m| m.header.scope == AddressScope::Universe) {
        for a in &m.attributes {
            match a {
                AddressAttribute::Address(IpAddr::V4(v4)) if up.addr4.is_none() => up.addr4 = Some(*v4),
                AddressAttribute::Address(IpAddr::V6(v6)) if up.addr6.is_none() => up.addr6 = Some(*v6),
                _ => {}
            }
        }
    }
    Ok(Some(up))
}

/// Start-up: find the uplink, attach `sdn_from_uplink`, write `sdn_snat_conf` and this
/// node's addresses into `sdn_snat_addrs` (net 0; earlier ones no longer on the uplink go).
pub async fn setup(
    datapath: &mut Datapath,
    netdev: &NetDev,
    cfg: &Args,
    nat_shards: u16,
    block: &Block,
) -> Result<Option<Uplink>, UplinkError> {
    if nat_shards == 0 || u32::from(nat_shards) > cozyplane_bpf::maps::snat_shards::MAX {
        return Err(UplinkError::Shards(nat_shards));
    }
    let up = find(netdev, cfg.uplink_device.as_deref()).await?;
    if let Some(u) = &up {
        datapath.attach_uplink(&u.dev)?;
        datapath.attach_host_out(&u.dev)?;
    }
    let pins = datapath.pin_dir();
    let map = |what: &str| {
        let what = what.to_string();
        move |source| UplinkError::Map { what, source }
    };
    let c = conf(
        up.as_ref(),
        (cfg.masquerade, cfg.masquerade_ports),
        block,
        nat_shards,
    );
    SnatConfMap::from_pin(pins)
        .and_then(|mut m| m.set(c))
        .map_err(map("write sdn_snat_conf"))?;
    let mut addrs = SnatAddrsMap::from_pin(pins).map_err(map("open sdn_snat_addrs"))?;
    let mine: Vec<IpAddr> = up
        .iter()
        .flat_map(|u| [u.addr4.map(IpAddr::V4), u.addr6.map(IpAddr::V6)])
        .flatten()
        .collect();
    for (ip, net) in addrs.entries().map_err(map("read sdn_snat_addrs"))? {
        if net == 0 && !mine.contains(&ip) {
            addrs.remove(ip).map_err(map("prune sdn_snat_addrs"))?;
        }
    }
    for ip in &mine {
        addrs.insert(*ip, 0).map_err(map("write sdn_snat_addrs"))?;
    }
    match &up {
        Some(u) => tracing::info!(uplink = %u.dev, addr4 = ?u.addr4, addr6 = ?u.addr6,
            masquerade = ?cfg.masquerade, shard = c.shard, shard_size = c.gw_shard_size,
            "uplink attached"),
        None => tracing::warn!("no uplink (no default route, no --uplink-device): nothing is masqueraded"),
    }
    Ok(up)
}

/// The node's uplink: attached while the node comes up, so north-south traffic and its
/// replies are handled before the first pod is wired.
#[derive(Debug)]
pub struct UplinkFeature(pub Args);

impl Feature for UplinkFeature {
    fn name(&self) -> &'static str {
        "uplink"
    }

    fn datapath<'a>(&'a mut self, ctx: DatapathCtx<'a>) -> BoxFuture<'a, Result<(), FeatureError>> {
        Box::pin(async move {
            setup(
                ctx.datapath,
                ctx.netdev,
                &self.0,
                ctx.config.nat_shards,
                ctx.block,
            )
            .await?;
            Ok(())
        })
    }

    fn start(self: Box<Self>, _core: Core) -> BoxFuture<'static, Result<(), FeatureError>> {
        Box::pin(async { Ok(()) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_uplink_masquerades_nothing() {
        let block: Block = "10.244.1.0/24".parse().unwrap();
        let c = conf(None, (Masquerade::Bpf, MASQ_PORTS), &block, 16);
        assert_eq!(c.flags & SnatConf::F_MASQ, 0);
        let up = Uplink {
            dev: "eth0".into(),
            index: 2,
            addr4: Some("192.0.2.7".parse().unwrap()),
            addr6: None,
        };
        let c = conf(Some(&up), (Masquerade::Bpf, MASQ_PORTS), &block, 16);
        assert_eq!(c.flags, SnatConf::F_MASQ | SnatConf::F_HAVE4);
        let c = conf(Some(&up), (Masquerade::Off, (100, 200)), &block, 16);
        assert_eq!(c.flags, SnatConf::F_HAVE4);
        assert_eq!((c.shard, c.gw_shard_size), (1, 4032));
        assert_eq!((c.masq_min, c.masq_max), (100, 200));
    }

    #[test]
    fn masquerade_ports_parse_as_an_inclusive_range() {
        assert_eq!(parse_port_range("61000-65535"), Ok((61000, 65535)));
        assert_eq!(parse_port_range("61000-61000"), Ok((61000, 61000)));
        for bad in ["61000", "0-10", "20-10", "1-65536", "a-b"] {
            assert!(parse_port_range(bad).is_err(), "{bad}");
        }
    }
}
