//! The core's command-line configuration: the flags every node needs whatever features run
//! (where state and pins live, the API, the node's identity, the overlay, the cluster's
//! internal ranges). Each feature declares its own flags (an `Args` struct in `features/<name>`);
//! the composition root (`AgentConfig` in `lib.rs`) flattens them all into one command line.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use cozyplane_apis::net::{IpNet, parse_cidr};

use crate::core::ipam::{Block, Block6};

/// The overlay encapsulation; both use a collect-metadata device and carry the net in the VNI.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TunnelKind {
    /// VXLAN (`external`), UDP 4789. The only one the reference kernel has.
    Vxlan,
    /// Geneve (`external`), UDP 6081.
    Geneve,
}

impl TunnelKind {
    /// The IANA port.
    pub fn default_port(self) -> u16 {
        match self {
            Self::Vxlan => 4789,
            Self::Geneve => 6081,
        }
    }

    /// Bytes the encapsulation adds over an underlay of the family of `underlay` (this node's
    /// tunnel address; IPv4 when unknown): the outer IP header (20, or 40 for IPv6), UDP 8,
    /// the tunnel header 8 and the inner Ethernet header 14: both kinds add 50 over IPv4 and
    /// 70 over IPv6, before options ([`Self::groups_overhead`]). The pod MTU is the underlay's less this,
    /// so that no encapsulated frame needs fragmenting and a pod's own MTU is its path MTU
    /// inside its VPC.
    pub fn overhead(self, underlay: Option<IpAddr>) -> u32 {
        let outer_ip = match underlay {
            Some(IpAddr::V6(_)) => 40,
            _ => 20,
        };
        outer_ip + 8 + 8 + 14
    }

    /// Bytes the source's-groups option adds to every VPC packet ([`TunnelGroups::On`]):
    /// none on VXLAN (the GBP extension reuses reserved header bits), one 12-byte option
    /// (4-byte header, 8 bytes of groups) on Geneve.
    pub fn groups_overhead(self, groups: TunnelGroups) -> u32 {
        match (self, groups) {
            (Self::Geneve, TunnelGroups::On) => 12,
            _ => 0,
        }
    }

    /// The datapath's `tunnel_groups` knob for this encapsulation (`docs/policy.md`, "The
    /// source's groups on the wire"): 1 VXLAN-GBP, 2 Geneve option, 0 none.
    pub fn groups_knob(self, groups: TunnelGroups) -> u32 {
        match (self, groups) {
            (_, TunnelGroups::Off) => 0,
            (Self::Vxlan, TunnelGroups::On) => 1,
            (Self::Geneve, TunnelGroups::On) => 2,
        }
    }
}

/// Whether a VPC packet carries its source's SecurityGroups to the receiving node in the
/// tunnel header (VXLAN-GBP, or a Geneve option), where they are authoritative. Every node
/// must agree: a VXLAN-GBP packet reaching a device without `gbp` is dropped by the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TunnelGroups {
    /// Carry them (a VXLAN device is created with `gbp`).
    On,
    /// Do not (a VXLAN device without `gbp`; the receiver looks the source up).
    Off,
}

/// The core's flags of `cozyplane-agent`.
#[derive(Clone, Debug, clap::Args)]
pub struct CoreConfig {
    /// Directory for the agent's persistent state (IPAM allocations).
    #[arg(long, env = "COZYPLANE_STATE_DIR", default_value = "/var/lib/cozyplane")]
    pub state_dir: PathBuf,
    /// bpffs directory for pinned maps and links; must be on a bpf filesystem.
    #[arg(long, env = "COZYPLANE_BPFFS_DIR", default_value = "/sys/fs/bpf/cozyplane")]
    pub bpffs_dir: PathBuf,
    /// Unix socket the CNI plugin talks to.
    #[arg(long, env = "COZYPLANE_CNI_SOCKET", default_value = cozyplane_cni::spec::DEFAULT_AGENT_SOCKET)]
    pub cni_socket: PathBuf,
    /// This node's block of fabric (net 0) addresses, e.g. 10.244.3.0/24. Default: the
    /// Node's `spec.podCIDR` (kube-controller-manager `--allocate-node-cidrs`), read with
    /// `--kubeconfig`; the agent waits until it is set.
    #[arg(long, env = "COZYPLANE_FABRIC_BLOCK")]
    pub fabric_block: Option<Block>,
    /// This node's IPv6 block of fabric addresses (dual-stack default network), e.g.
    /// fd44:0:0:3::/64. Default: the IPv6 entry of the Node's `spec.podCIDRs`, if any; without
    /// one the default network is IPv4 only.
    #[arg(long, env = "COZYPLANE_FABRIC_BLOCK6")]
    pub fabric_block6: Option<Block6>,
    /// Overlay encapsulation.
    #[arg(long, value_enum, default_value = "vxlan")]
    pub tunnel: TunnelKind,
    /// Name of the collect-metadata tunnel device.
    #[arg(long, default_value = "cozyplane0")]
    pub tunnel_dev: String,
    /// The source's SecurityGroups in the tunnel header (VXLAN-GBP or a Geneve option):
    /// `on` or `off`, the same on every node. A VXLAN device found with the other setting
    /// (an agent upgraded or reconfigured) is recreated, which cuts the overlay for a moment.
    #[arg(long, env = "COZYPLANE_TUNNEL_GROUPS", value_enum, default_value = "on")]
    pub tunnel_groups: TunnelGroups,
    /// UDP port of the tunnel (default: 4789 VXLAN, 6081 Geneve).
    #[arg(long)]
    pub tunnel_port: Option<u16>,
    /// The underlay device whose MTU bounds the overlay (default: the default route's device).
    #[arg(long)]
    pub underlay_dev: Option<String>,
    /// VNI that carries the default network.
    #[arg(long, default_value_t = 1)]
    pub net0_vni: u32,
    /// The skb mark bit the agent's netfilter rule sets on DNATed flows into pods, so that
    /// their replies go back through this node's conntrack (decimal or `0x` hex; 0 turns the
    /// rule and the recognition off). Pick a bit no other component of the node uses.
    #[arg(long, default_value = "0x00100000", value_parser = parse_mark)]
    pub dnat_mark: u32,
    /// Where to serve Prometheus metrics (`/metrics`); omit to disable.
    #[arg(long, env = "COZYPLANE_METRICS_ADDR")]
    pub metrics_addr: Option<SocketAddr>,
    /// kubeconfig of the kube API (Nodes, Pods). Without it (and without `--in-cluster`)
    /// the agent serves net 0 on this node only: no other nodes, and VPC requests fail.
    #[arg(long, env = "COZYPLANE_KUBECONFIG", conflicts_with = "in_cluster")]
    pub kubeconfig: Option<PathBuf>,
    /// Reach the kube API (and our API, through aggregation) with the pod's service
    /// account, as a DaemonSet does.
    #[arg(long, env = "COZYPLANE_IN_CLUSTER")]
    pub in_cluster: bool,
    /// kubeconfig of the sdn.cozystack.io API (default: `--kubeconfig`, i.e. through
    /// aggregation).
    #[arg(long, env = "COZYPLANE_SDN_KUBECONFIG")]
    pub sdn_kubeconfig: Option<PathBuf>,
    /// This node's name (required with an API).
    #[arg(long, env = "NODE_NAME")]
    pub node_name: Option<String>,
    /// The cluster's Service CIDRs (comma-separated), both families in a dual-stack cluster:
    /// cluster-internal like every node's pod block and addresses ([`crate::internal`]).
    #[arg(long, value_delimiter = ',', default_value = "10.96.0.0/12")]
    pub service_cidr: Vec<cozyplane_apis::net::IpNet>,
    /// Shards of the VPC gateway NAT port range (1024–65535): each node allocates from the
    /// shard its fabric block names, so two nodes never use one port of one NAT address. The
    /// same on every node.
    #[arg(long, default_value_t = 16)]
    pub nat_shards: u16,
    /// This node's underlay address: the outer address peers tunnel to (required with an
    /// API; a DaemonSet passes `status.hostIP`). IPv4 or IPv6: an IPv6 address makes this
    /// node's tunnels IPv6 (a node tunnels to each peer in the family of the peer's address).
    #[arg(long, env = "COZYPLANE_NODE_IP")]
    pub node_ip: Option<IpAddr>,
    /// More cluster-internal ranges (comma-separated CIDRs or addresses) besides the nodes'
    /// pod blocks and addresses and `--service-cidr`, e.g. a node-local DNS address. Nothing
    /// internal is masqueraded or NATed out of a VPC, and a VPC pod's port 53 to it goes to
    /// the node's resolver ([`crate::internal`]). Once spelled `--dns-internal-cidrs` and
    /// `--cluster-dns`, still accepted.
    #[arg(
        long,
        env = "COZYPLANE_INTERNAL_CIDRS",
        value_delimiter = ',',
        value_parser = parse_range,
        aliases = ["dns-internal-cidrs", "cluster-dns"]
    )]
    pub internal_cidrs: Vec<cozyplane_apis::net::IpNet>,
}

/// `--internal-cidrs` values: a CIDR, or a bare address (one host; the spelling of the
/// deprecated `--cluster-dns`).
pub fn parse_range(s: &str) -> Result<IpNet, String> {
    match s.parse::<IpAddr>() {
        Ok(ip) => Ok(IpNet::from(ip)),
        Err(_) => parse_cidr(s)
            .map(|n| n.trunc())
            .map_err(|e| format!("{s:?}: {e}")),
    }
}

/// A mark bit: decimal or `0x` hex.
fn parse_mark(s: &str) -> Result<u32, String> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16),
        None => s.parse(),
    };
    r.map_err(|e| format!("{s:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The core's flags alone, as the agent's command line carries them.
    fn parse<const N: usize>(args: [&str; N]) -> Result<CoreConfig, clap::Error> {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            core: CoreConfig,
        }
        <Cli as clap::Parser>::try_parse_from(args).map(|c| c.core)
    }

    #[test]
    fn in_cluster_or_a_kubeconfig_and_the_block_is_optional() {
        let c = parse(["cozyplane-agent", "--in-cluster", "--node-name", "n1"]).unwrap();
        assert!(c.in_cluster && c.kubeconfig.is_none() && c.fabric_block.is_none());
        assert!(
            parse(["cozyplane-agent", "--in-cluster", "--kubeconfig", "/k"]).is_err(),
            "--in-cluster and --kubeconfig are exclusive"
        );
        let c = parse(["cozyplane-agent", "--fabric-block", "10.244.3.0/24"]).unwrap();
        assert_eq!(
            c.fabric_block.map(|b| b.to_string()).as_deref(),
            Some("10.244.3.0/24")
        );
        assert!(parse(["cozyplane-agent", "--fabric-block", "10.244.3.1/24"]).is_err());
    }

    #[test]
    fn the_dnat_mark_defaults_to_the_datapaths_and_takes_hex_or_decimal() {
        let c = parse(["cozyplane-agent"]).unwrap();
        assert_eq!(c.dnat_mark, cozyplane_bpf::DatapathConfig::default().dnat_mark);
        let c = parse(["cozyplane-agent", "--dnat-mark", "0x200"]).unwrap();
        assert_eq!(c.dnat_mark, 0x200);
        let c = parse(["cozyplane-agent", "--dnat-mark", "0"]).unwrap();
        assert_eq!(c.dnat_mark, 0);
        assert!(parse(["cozyplane-agent", "--dnat-mark", "0xzz"]).is_err());
    }

    #[test]
    fn overhead_follows_the_underlay_family() {
        for kind in [TunnelKind::Vxlan, TunnelKind::Geneve] {
            assert_eq!(kind.overhead(None), 50);
            assert_eq!(
                kind.overhead(Some(IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 1)))),
                50
            );
            assert_eq!(kind.overhead(Some("2001:db8::1".parse().unwrap())), 70);
        }
    }

    #[test]
    fn groups_travel_unless_turned_off() {
        let c = parse(["cozyplane-agent"]).unwrap();
        assert_eq!(c.tunnel_groups, TunnelGroups::On);
        assert_eq!(c.tunnel.groups_knob(c.tunnel_groups), 1);
        assert_eq!(TunnelKind::Vxlan.groups_overhead(TunnelGroups::On), 0);
        assert_eq!(TunnelKind::Geneve.groups_knob(TunnelGroups::On), 2);
        assert_eq!(TunnelKind::Geneve.groups_overhead(TunnelGroups::On), 12);
        let c = parse(["cozyplane-agent", "--tunnel-groups=off"]).unwrap();
        assert_eq!(c.tunnel.groups_knob(c.tunnel_groups), 0);
        assert_eq!(TunnelKind::Geneve.groups_overhead(TunnelGroups::Off), 0);
    }

    #[test]
    fn one_flag_takes_ranges_and_hosts_and_the_old_spellings_still_parse() {
        let c = parse([
            "cozyplane-agent",
            "--internal-cidrs",
            "10.244.0.0/16,10.1.2.3/8",
            "--dns-internal-cidrs",
            "fd00:96::/108",
            "--cluster-dns",
            "169.254.20.10",
        ])
        .unwrap();
        let got: Vec<String> = c.internal_cidrs.iter().map(ToString::to_string).collect();
        assert_eq!(
            got,
            ["10.244.0.0/16", "10.0.0.0/8", "fd00:96::/108", "169.254.20.10/32"]
        );
        assert_eq!(
            c.service_cidr,
            vec!["10.96.0.0/12".parse::<IpNet>().unwrap()],
            "the default Service CIDR"
        );
        assert!(parse(["cozyplane-agent", "--internal-cidrs", "nope"]).is_err());
    }
}
