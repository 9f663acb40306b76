//! Bringing the node up: everything between the flags and the first CNI request that touches
//! the kernel.

use cozyplane_bpf::DatapathConfig;

use crate::core::api::ApiClients;
use crate::core::cni::{self, AgentState};
use crate::core::config::CoreConfig;
use crate::core::datapath::loader::Datapath;
use crate::core::datapath::netdev::NetDev;
use crate::core::error::StartError;
use crate::core::feature::{DatapathCtx, Feature};
use crate::core::ipam::{Block, Block6, Ipam};

/// Brings the node up: sysctls, the tunnel device, the datapath (reusing pins), each feature's
/// part ([`Feature::datapath`]), the netfilter rule, IPAM, and the pods' lifecycle with the
/// attachments of a previous run reconciled.
pub async fn bring_up(
    cfg: &CoreConfig,
    block: Block,
    block6: Option<Block6>,
    api: Option<ApiClients>,
    features: &mut [Box<dyn Feature>],
) -> Result<AgentState, StartError> {
    // The host stack forwards net-0 traffic between pods and to the tunnel.
    std::fs::write("/proc/sys/net/ipv4/ip_forward", "1").map_err(|source| StartError::Io {
        what: "enable net.ipv4.ip_forward".into(),
        source,
    })?;
    // Only with an IPv6 fabric: forwarding turns off accepting router advertisements on
    // interfaces that rely on them, which a single-stack node need not risk.
    if block6.is_some() {
        std::fs::write("/proc/sys/net/ipv6/conf/all/forwarding", "1").map_err(|source| StartError::Io {
            what: "enable net.ipv6.conf.all.forwarding".into(),
            source,
        })?;
    }
    let netdev = NetDev::new()?;
    let underlay = netdev.underlay_mtu(cfg.underlay_dev.as_deref()).await?;
    // The tunnel's outer family is this node's tunnel address's.
    let overhead = cfg.tunnel.overhead(cfg.node_ip) + cfg.tunnel.groups_overhead(cfg.tunnel_groups);
    let mtu = underlay.saturating_sub(overhead).max(576);
    let port = cfg.tunnel_port.unwrap_or_else(|| cfg.tunnel.default_port());
    let dp_cfg = DatapathConfig {
        net0_vni: cfg.net0_vni,
        dnat_mark: cfg.dnat_mark,
        tunnel_groups: cfg.tunnel.groups_knob(cfg.tunnel_groups),
        tunnel_port: u32::from(port),
        // Overlay trust: another node sending from this node's block is forging it.
        own_block: Some((block.base(), block.prefix())),
        own_block6: block6.map(|b| (b.base(), b.prefix())),
        ..DatapathConfig::default()
    };
    // The device MAC is per node (from the node IP) when known: frames the host stack
    // sends into the tunnel carry it as inner source, and a VXLAN device drops received
    // frames whose inner source is its own MAC (loop check). The datapath never needs the
    // device MAC: it addresses overlay frames to `tunnel_mac` and the receiving program
    // redirects them whatever their destination MAC.
    let dev_mac = cfg.node_ip.map_or(dp_cfg.tunnel_mac, |ip| {
        // An IPv6 node address folded into four bytes (XOR of its 32-bit words) with the
        // top bit set: `fd77::1` must not become `02:cf:00:00:00:01`, the gateway MAC
        // the datapath writes as inner source of every encapsulated frame.
        let o = match ip {
            std::net::IpAddr::V4(v4) => v4.octets(),
            std::net::IpAddr::V6(v6) => {
                let w = v6.octets().chunks(4).fold([0u8; 4], |mut acc, c| {
                    for (a, b) in acc.iter_mut().zip(c) {
                        *a ^= b;
                    }
                    acc
                });
                [w[0] | 0x80, w[1], w[2], w[3]]
            }
        };
        [0x02, 0xcf, o[0], o[1], o[2], o[3]]
    });
    let tunnel = netdev
        .ensure_tunnel(
            (cfg.tunnel, cfg.tunnel_groups),
            &cfg.tunnel_dev,
            port,
            mtu,
            dev_mac,
        )
        .await?;
    let dp_cfg = DatapathConfig {
        tunnel_ifindex: tunnel.index,
        ..dp_cfg
    };
    let mut datapath = Datapath::load(&cfg.bpffs_dir, &dp_cfg)?;
    tracing::info!(
        reused_maps = datapath.reused_maps,
        rebuilt_maps = ?datapath.rebuilt_maps.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(),
        pin_dir = %cfg.bpffs_dir.display(),
        tunnel = %cfg.tunnel_dev,
        underlay_mtu = underlay,
        pod_mtu = mtu,
        "datapath loaded"
    );
    // The node's own sockets are the socket-level load balancer's (net 0), registered before
    // any feature can attach its hooks (`Datapath::attach_sock`).
    crate::core::datapath::netns_cookie::register_own(&cfg.bpffs_dir).map_err(|source| StartError::Io {
        what: "registering the node's netns in sdn_sock_netns".into(),
        source,
    })?;
    datapath.attach_overlay(&cfg.tunnel_dev)?;
    // The node's own traffic to other nodes' pods leaves through the tunnel device.
    datapath.attach_host_out(&cfg.tunnel_dev)?;
    for f in features.iter_mut() {
        let ctx = DatapathCtx {
            config: cfg,
            datapath: &mut datapath,
            netdev: &netdev,
            block: &block,
        };
        f.datapath(ctx).await.map_err(|source| StartError::Feature {
            feature: f.name(),
            source,
        })?;
    }
    crate::core::datapath::netfilter::install(dp_cfg.dnat_mark, cni::HOST_VETH_PREFIX).await?;
    let mut ipam = Ipam::open(&cfg.state_dir, block)?;
    ipam.set_block6(block6);
    Ok(AgentState::start(ipam, datapath, netdev, mtu, api).await)
}
