//! A guest's address autoconfiguration (issue 28): DHCPv4, router advertisements and DHCPv6,
//! answered by the agent on the node, on the pod's own link, so that a VM guest (which never
//! reads `status.podIP`) configures exactly what CNI ADD gives a pod: the Port's address(es),
//! the link-local gateway as its default route, the link MTU, the resolvers and the search
//! domains.
//!
//! How the requests get here: the datapath keeps a pod's DHCP and router solicitations on its
//! link (`bpf/lib/autoconf.h`): passed up the host veth marked for packet sockets only, never
//! routed. One `AF_PACKET` socket per family ([`socket`]), with a classic BPF filter that
//! takes only those requests, reads them from every pod veth; the veth's index
//! (`sll_ifindex`) names the attachment ([`crate::core::cni::AgentState`]), so the answer is
//! built from that attachment's record alone (its Port's address and MAC, the MTU of its
//! host veth) and sent back out of the same veth. A request whose MAC is not the Port's is
//! dropped; no answer ever names another Port's address. Why userspace and not eBPF:
//! `docs/datapath.md`, "Guest autoconfiguration".
//!
//! What a guest gets beyond its address is merged per field from its Port's `spec.dhcp`, its
//! VPC's and the flags ([`options`]), from a watch of this node's Ports and the VPCs
//! ([`watch`]).
//!
//! Counters: `cozyplane_autoconf_answers_total{kind}`, `cozyplane_autoconf_drops_total{reason}`,
//! `cozyplane_autoconf_ignored_total{reason}` and `cozyplane_autoconf_answer_seconds`
//! ([`metrics`]).

pub mod dhcp4;
pub mod dhcp6;
pub mod frame;
pub mod metrics;
pub mod options;
pub mod ra;
pub mod socket;
pub mod watch;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;

use futures::TryStreamExt as _;
use ipnet::{Ipv4Net, Ipv6Net};
use netlink_packet_route::link::LinkAttribute;

use self::options::{Clamps, Level, Table};
use crate::core::api::ApiClients;
use crate::core::cni::AgentState;
use crate::core::datapath::netdev::parse_mac;
use crate::core::feature::{Core, Feature, FeatureError};
use crate::core::ipam::Allocation;
use crate::core::metrics::MetricsBuilder;

/// `cozyplane-agent` flags of guest autoconfiguration.
#[derive(Clone, Debug, clap::Args)]
pub struct AutoconfFlags {
    /// Answer the pods' DHCPv4, DHCPv6 and router solicitations (VM guests).
    #[arg(long, env = "COZYPLANE_AUTOCONF")]
    pub autoconf: bool,
    /// The resolvers handed to guests (comma-separated; normally the cluster DNS Service's
    /// addresses, which the DNS feature steers to the VPC's view), unless `spec.dhcp` of the
    /// Port or its VPC lists some of that family.
    #[arg(long, env = "COZYPLANE_AUTOCONF_DNS", value_delimiter = ',')]
    pub autoconf_dns: Vec<IpAddr>,
    /// The cluster domain of the search list (`<ns>.svc.<domain> svc.<domain> <domain>`).
    #[arg(long, env = "COZYPLANE_AUTOCONF_DOMAIN", default_value = cozyplane_resolver::DEFAULT_DOMAIN)]
    pub autoconf_domain: String,
    /// DHCP lease (and DHCPv6 lifetime) in seconds, unless `spec.dhcp.leaseSeconds` says.
    #[arg(long, default_value_t = 3600)]
    pub autoconf_lease: u32,
    /// Seconds between unsolicited router advertisements on each IPv6 link.
    #[arg(long, default_value_t = 200)]
    pub autoconf_ra_interval: u32,
}

/// What the Port behind one link gives its guest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Guest {
    /// The Port's MAC (the pod interface's): the only client answered.
    pub mac: [u8; 6],
    /// Its IPv4 address, if it has one.
    pub v4: Option<Ipv4Addr>,
    /// Its IPv6 address, if it has one.
    pub v6: Option<Ipv6Addr>,
    /// The MTU: the link's (the host veth's, which CNI ADD set to the pod's), or a smaller one
    /// of `spec.dhcp`.
    pub mtu: u32,
    /// IPv4 resolvers.
    pub dns4: Vec<Ipv4Addr>,
    /// IPv6 resolvers.
    pub dns6: Vec<Ipv6Addr>,
    /// Search domains, most specific first.
    pub search: Vec<String>,
    /// Extra IPv4 routes and their next hops (`spec.dhcp.routes`).
    pub routes4: Vec<(Ipv4Net, Ipv4Addr)>,
    /// Extra IPv6 routes, through the link gateway.
    pub routes6: Vec<Ipv6Net>,
    /// Lease and lifetimes, seconds.
    pub lease_secs: u32,
    /// The gateway is the guest's default router: false on a secondary interface (issue 37),
    /// whose guest is given only its VPC's ranges through it; the pod's network keeps the
    /// default route.
    pub default_route: bool,
}

/// The node-wide part of every answer.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The gateway's MAC (the datapath's ARP/NDP answers give the same).
    pub gw_mac: [u8; 6],
    /// Unsolicited RA interval, seconds.
    pub ra_interval_secs: u32,
}

/// Why a request got no answer and was counted as a drop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Drop {
    /// Not a well-formed request of its protocol.
    Malformed,
    /// From a veth that is no attachment of this node.
    NoPort,
    /// Its MAC (frame or `chaddr`) is not the Port's.
    Mac,
    /// The Port has no address of that family.
    NoAddress,
    /// A message type a server does not answer.
    Unsupported,
}

impl Drop {
    /// The `reason` label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Malformed => "malformed",
            Self::NoPort => "no_port",
            Self::Mac => "mac",
            Self::NoAddress => "no_address",
            Self::Unsupported => "unsupported",
        }
    }
}

/// What a request gets.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// This frame, out of the link it came in on (`kind`: offer, ack, nak, advertise, reply,
    /// release, decline, ra).
    Answer(&'static str, Vec<u8>),
    /// Nothing, as the protocol wants (a DHCPv4 RELEASE or DECLINE, a message for another
    /// server): counted as an answer of that kind.
    Quiet(&'static str),
    /// Nothing: counted as a drop.
    Drop(Drop),
    /// Nothing, and nothing wrong: a request that is normal traffic for this guest but has
    /// no answer here (`reason`: `no_ipv6`, a router solicitation from a Port without an
    /// IPv6 address, which every IPv4-only guest's kernel sends when its link comes up).
    /// Counted apart from drops, so that an alert on drops means a fault.
    Ignored(&'static str),
}

/// The resolvers a guest gets over IPv6 where its options name none: those of `--autoconf-dns`
/// of IPv6; for an IPv6-only guest (`has_v4` false) on a cluster whose DNS is IPv4 only, that
/// DNS in its NAT64 form, `64:ff9b::a.b.c.d`, which the datapath steers to the VPC resolver
/// and translates (`lib/dns.h`).
fn default_dns6(dns: &[IpAddr], has_v4: bool) -> Vec<Ipv6Addr> {
    let v6: Vec<Ipv6Addr> = dns
        .iter()
        .filter_map(|i| match i {
            IpAddr::V6(v) => Some(*v),
            IpAddr::V4(_) => None,
        })
        .collect();
    if !v6.is_empty() || has_v4 {
        return v6;
    }
    dns.iter()
        .filter_map(|i| match i {
            IpAddr::V4(v) => Some(cozyplane_apis::net::nat64::to_nat64(*v)),
            IpAddr::V6(_) => None,
        })
        .collect()
}

/// The guest of attachment `a`: its Port's addresses (net 0: its fabric ones) and MAC; the
/// options of `opts` (its Ports' and VPC's `spec.dhcp`, merged), and where those set nothing,
/// the MTU of its host veth (`mtu`, which CNI ADD made the pod interface's; also the most
/// `opts` may ask for), the resolvers and lease of `flags` and the search list of its
/// namespace.
pub fn guest(a: &Allocation, mtu: u32, flags: &AutoconfFlags, opts: &Level) -> Option<Guest> {
    let mac = parse_mac(a.mac.as_deref()?)?;
    let ips: Vec<IpAddr> = match &a.vpc {
        Some(v) => v.ips().collect(),
        None => a.fabric_ips(),
    };
    // A secondary interface: its VPC's ranges instead of a default route, and no resolvers
    // or search list unless its Port or VPC sets them (the pod's network has its own).
    let secondary = a.secondary.is_some();
    let mut routes = opts.routes.clone().unwrap_or_default();
    for r in a.vpc.iter().flat_map(|v| &v.routes) {
        match r.parse::<ipnet::IpNet>() {
            Ok(ipnet::IpNet::V4(n)) => routes.v4.push((n, crate::core::datapath::netdev::GATEWAY)),
            Ok(ipnet::IpNet::V6(n)) => routes.v6.push(n),
            Err(_) => {}
        }
    }
    let flags_dns = if secondary {
        &[][..]
    } else {
        &flags.autoconf_dns[..]
    };
    Some(Guest {
        mac,
        v4: ips.iter().find_map(|i| match i {
            IpAddr::V4(v) => Some(*v),
            IpAddr::V6(_) => None,
        }),
        v6: ips.iter().find_map(|i| match i {
            IpAddr::V6(v) => Some(*v),
            IpAddr::V4(_) => None,
        }),
        mtu: options::mtu(opts.mtu, mtu),
        dns4: opts.dns4.clone().unwrap_or_else(|| {
            flags_dns
                .iter()
                .filter_map(|i| match i {
                    IpAddr::V4(v) => Some(*v),
                    IpAddr::V6(_) => None,
                })
                .collect()
        }),
        dns6: opts
            .dns6
            .clone()
            .unwrap_or_else(|| default_dns6(flags_dns, ips.iter().any(IpAddr::is_ipv4))),
        search: opts.search.clone().unwrap_or_else(|| {
            if secondary {
                Vec::new()
            } else {
                search_list(&a.pod, &flags.autoconf_domain)
            }
        }),
        routes4: routes.v4,
        routes6: routes.v6,
        lease_secs: opts.lease_secs.unwrap_or(flags.autoconf_lease).max(60),
        default_route: !secondary,
    })
}

/// What a guest is built from besides its attachment: the flags, the options the watch keeps
/// and the record of MTUs already reported as lowered.
#[derive(Clone)]
struct Inputs {
    flags: AutoconfFlags,
    table: Arc<RwLock<Table>>,
    clamps: Arc<Clamps>,
}

impl Inputs {
    /// The guest of attachment `a` on a link of MTU `link` ([`guest`]).
    fn guest(&self, a: &Allocation, link: u32) -> Option<Guest> {
        let opts = self.table.read().map(|t| t.level_of(a)).unwrap_or_default();
        if let Some(v) = &a.vpc {
            self.clamps.note(&v.port, opts.mtu, link);
        }
        guest(a, link, &self.flags, &opts)
    }
}

/// The search list kubelet writes for a pod of namespace `ns` (`pod` is `ns/name`).
pub fn search_list(pod: &str, domain: &str) -> Vec<String> {
    let domain = domain.trim_end_matches('.');
    let mut out = Vec::new();
    if let Some((ns, _)) = pod.split_once('/')
        && !ns.is_empty()
    {
        out.push(format!("{ns}.svc.{domain}"));
    }
    out.push(format!("svc.{domain}"));
    out.push(domain.to_string());
    out
}

/// The answer to request frame `f` (of `v6`'s family) from the guest `g`.
pub fn answer(f: &[u8], v6: bool, g: &Guest, s: &Settings) -> Outcome {
    if !v6 {
        return dhcp4::answer(f, g, s);
    }
    match frame::ip6(f) {
        Ok(p) if p.proto == frame::ICMPV6 => ra::answer(f, g, s),
        Ok(_) => dhcp6::answer(f, g, s),
        Err(_) => Outcome::Drop(Drop::Malformed),
    }
}

/// The responder: one task per family reading its packet socket, one sending the periodic
/// router advertisements, one watching the options ([`watch`]).
pub async fn run(
    pods: Arc<AgentState>,
    api: ApiClients,
    flags: AutoconfFlags,
    m: metrics::AutoconfMetrics,
) -> Result<(), FeatureError> {
    let s = Settings {
        gw_mac: cozyplane_bpf::DatapathConfig::default().gw_mac,
        ra_interval_secs: flags.autoconf_ra_interval.max(4),
    };
    let inputs = Inputs {
        flags,
        table: Arc::default(),
        clamps: Arc::default(),
    };
    tokio::spawn(watch::run(api, inputs.table.clone()));
    // The link MTU, asked of the kernel (sysfs shows the mounting namespace's links, which
    // need not be the agent's).
    let (conn, nl, _) = rtnetlink::new_connection()?;
    tokio::spawn(conn);
    let rt = tokio::runtime::Handle::current();
    let sock4 = Arc::new(socket::Socket::open(false)?);
    let sock6 = Arc::new(socket::Socket::open(true)?);
    for (sock, v6) in [(sock4, false), (sock6.clone(), true)] {
        let (pods, inputs, s, m) = (pods.clone(), inputs.clone(), s.clone(), m.clone());
        let (nl, rt) = (nl.clone(), rt.clone());
        let mtu = move |ifindex| rt.block_on(link_mtu(&nl, ifindex));
        std::thread::Builder::new()
            .name(if v6 { "autoconf6" } else { "autoconf4" }.into())
            .spawn(move || serve(&sock, v6, &pods, &inputs, &s, &m, &mtu))?;
    }
    let interval = Duration::from_secs(u64::from(s.ra_interval_secs));
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        loop {
            tick.tick().await;
            for a in pods.attachments() {
                let Some(ifindex) = a.host_ifindex else { continue };
                let Some(g) = inputs.guest(&a, link_mtu(&nl, ifindex).await.unwrap_or(1500)) else {
                    continue;
                };
                if g.v6.is_some()
                    && sock6
                        .send(ifindex, &ra::advertisement(&g, &s, ra::ALL_NODES))
                        .is_ok()
                {
                    m.answer("ra_periodic", Duration::ZERO);
                }
            }
        }
    });
    Ok(())
}

/// The MTU of link `ifindex`; `None` when it is gone.
async fn link_mtu(nl: &rtnetlink::Handle, ifindex: u32) -> Option<u32> {
    let mut s = nl.link().get().match_index(ifindex).execute();
    let msg = s.try_next().await.ok()??;
    msg.attributes.iter().find_map(|a| match a {
        LinkAttribute::Mtu(m) => Some(*m),
        _ => None,
    })
}

/// One family's requests, read and answered until the process ends (a thread: the reads
/// block, see [`socket::Socket`]).
fn serve(
    sock: &socket::Socket,
    v6: bool,
    pods: &AgentState,
    inputs: &Inputs,
    s: &Settings,
    m: &metrics::AutoconfMetrics,
    mtu: &dyn Fn(u32) -> Option<u32>,
) {
    let mut buf = vec![0u8; 2048];
    loop {
        let (n, ifindex) = match sock.recv(&mut buf) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!("autoconf: receive: {e}");
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        let started = Instant::now();
        let att = pods.attachment_by_ifindex(ifindex);
        let g = att.and_then(|a| inputs.guest(&a, mtu(ifindex)?));
        let out = match g {
            Some(g) => answer(&buf[..n], v6, &g, s),
            None => {
                // Rare once only the pods' links are read: say which link it was.
                tracing::info!(
                    ifindex,
                    v6,
                    len = n,
                    "autoconf: a request from no attachment of this node"
                );
                Outcome::Drop(Drop::NoPort)
            }
        };
        match out {
            Outcome::Answer(kind, frame) => match sock.send(ifindex, &frame) {
                Ok(()) => m.answer(kind, started.elapsed()),
                Err(e) => {
                    tracing::warn!(ifindex, "autoconf: send {kind}: {e}");
                    m.drop(Drop::NoPort);
                }
            },
            Outcome::Quiet(kind) => m.answer(kind, started.elapsed()),
            Outcome::Drop(d) => m.drop(d),
            Outcome::Ignored(reason) => m.ignored(reason),
        }
    }
}

/// Guest autoconfiguration, with `--autoconf`; its metrics are registered either way.
#[derive(Debug)]
pub struct Autoconf {
    flags: AutoconfFlags,
    metrics: Option<metrics::AutoconfMetrics>,
}

impl Autoconf {
    /// The feature with its flags.
    pub fn new(flags: AutoconfFlags) -> Self {
        Self { flags, metrics: None }
    }
}

impl Feature for Autoconf {
    fn name(&self) -> &'static str {
        "autoconf"
    }

    fn metrics(&mut self, m: &mut MetricsBuilder) {
        self.metrics = Some(metrics::AutoconfMetrics::register(m.registry()));
    }

    fn start(self: Box<Self>, core: Core) -> BoxFuture<'static, Result<(), FeatureError>> {
        Box::pin(async move {
            if !self.flags.autoconf {
                return Ok(());
            }
            let m = self.metrics.unwrap_or_else(|| {
                metrics::AutoconfMetrics::register(&mut prometheus_client::registry::Registry::default())
            });
            run(core.pods, core.api, self.flags, m).await
        })
    }
}

#[cfg(test)]
mod tests;
