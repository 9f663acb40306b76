//! Node-local fabric address allocation.
//!
//! Each node owns a block of the fabric (e.g. a /24), so a pod's ADD needs no API round
//! trip. Allocations are keyed by `(container id, ifname)` — the CNI attachment key — so a
//! repeated ADD gets the same address, and they are persisted to a JSON file (write to a
//! temporary file, fsync, rename) so an agent restart keeps every running pod's address.
//!
//! A secondary interface (issue 37: a Multus delegate call, or an entry of the pod's
//! `sdn.cozystack.io/vpcs`) holds only VPC addresses: its record takes no fabric address and
//! is kept apart, keyed by the attachment alone.
//!
//! Changes are made in memory and counted ([`Ipam::generation`]); [`Ipam::snapshot`] and
//! [`write_file`] persist them, so a caller can write outside its lock and one write can
//! cover every change made meanwhile (group commit, see the agent's CNI server).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// An IPv4 CIDR block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    base: Ipv4Addr,
    prefix: u8,
}

impl Block {
    /// `base/prefix`; host bits of `base` must be zero.
    pub fn new(base: Ipv4Addr, prefix: u8) -> Result<Self, String> {
        if prefix > 30 {
            return Err(format!("/{prefix} leaves no room for pods (need /30 or larger)"));
        }
        let mask = u32::MAX << (32 - prefix);
        if u32::from(base) & !mask != 0 {
            return Err(format!("{base}/{prefix} has host bits set"));
        }
        Ok(Self { base, prefix })
    }

    /// Usable pod addresses: every address but the network and broadcast ones.
    fn hosts(self) -> impl Iterator<Item = Ipv4Addr> {
        let first = u32::from(self.base) + 1;
        let last = u32::from(self.base) + (1u32 << (32 - self.prefix)) - 2;
        (first..=last).map(Ipv4Addr::from)
    }

    /// Whether `ip` is a pod address of the block.
    pub fn contains(self, ip: Ipv4Addr) -> bool {
        self.hosts().any(|h| h == ip)
    }

    /// The base address.
    pub fn base(self) -> Ipv4Addr {
        self.base
    }

    /// The prefix length.
    pub fn prefix(self) -> u8 {
        self.prefix
    }

    /// Number of pod addresses.
    pub fn size(self) -> u32 {
        (1u32 << (32 - self.prefix)) - 2
    }
}

impl FromStr for Block {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (ip, len) = s
            .split_once('/')
            .ok_or_else(|| format!("{s:?}: expected a.b.c.d/len"))?;
        let ip: Ipv4Addr = ip.parse().map_err(|e| format!("{s:?}: {e}"))?;
        let len: u8 = len.parse().map_err(|e| format!("{s:?}: {e}"))?;
        Self::new(ip, len)
    }
}

impl std::fmt::Display for Block {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.base, self.prefix)
    }
}

/// An IPv6 CIDR block: a node's second fabric block (dual-stack default network).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Block6 {
    base: Ipv6Addr,
    prefix: u8,
}

impl Block6 {
    /// `base/prefix`; host bits of `base` must be zero, at most /120.
    pub fn new(base: Ipv6Addr, prefix: u8) -> Result<Self, String> {
        if prefix > 120 {
            return Err(format!(
                "/{prefix} leaves too little room for pods (need /120 or larger)"
            ));
        }
        let host = u128::MAX.checked_shr(u32::from(prefix)).unwrap_or(0);
        if u128::from(base) & host != 0 {
            return Err(format!("{base}/{prefix} has host bits set"));
        }
        Ok(Self { base, prefix })
    }

    /// The base address.
    pub fn base(self) -> Ipv6Addr {
        self.base
    }

    /// The prefix length.
    pub fn prefix(self) -> u8 {
        self.prefix
    }

    /// The `n`-th pod address (the base address is never one).
    fn host(self, n: u128) -> Option<Ipv6Addr> {
        let span = u128::MAX.checked_shr(u32::from(self.prefix)).unwrap_or(0);
        (n >= 1 && n < span).then(|| Ipv6Addr::from(u128::from(self.base) + n))
    }
}

impl FromStr for Block6 {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (ip, len) = s
            .split_once('/')
            .ok_or_else(|| format!("{s:?}: expected an IPv6 prefix, e.g. fd44:0:0:1::/64"))?;
        let ip: Ipv6Addr = ip.parse().map_err(|e| format!("{s:?}: {e}"))?;
        let len: u8 = len.parse().map_err(|e| format!("{s:?}: {e}"))?;
        Self::new(ip, len)
    }
}

impl std::fmt::Display for Block6 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.base, self.prefix)
    }
}

/// One pod attachment and what the agent created for it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Allocation {
    /// The fabric address.
    pub ip: Ipv4Addr,
    /// The IPv6 fabric address, on a node with an IPv6 fabric block (dual-stack default
    /// network).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip6: Option<Ipv6Addr>,
    /// `CNI_CONTAINERID`.
    pub container_id: String,
    /// `CNI_IFNAME`.
    pub ifname: String,
    /// `CNI_NETNS` at ADD time.
    #[serde(default)]
    pub netns: String,
    /// `namespace/name` of the pod, for humans.
    #[serde(default)]
    pub pod: String,
    /// The pod interface's MAC once the veth exists (needed to rebuild `sdn_endpoints`).
    #[serde(default)]
    pub mac: Option<String>,
    /// The host veth's ifindex, which keys `sdn_ports`: DEL needs it when the runtime
    /// deleted the sandbox netns first, which destroys the veth (both ends) with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_ifindex: Option<u32>,
    /// Set for a VPC attachment: the pod interface carries the VPC address, the fabric
    /// address above is only bridged to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vpc: Option<VpcAttachment>,
    /// The cookie of the pod's netns, which keys its `sdn_sock_netns` entry (the socket-level
    /// load balancer): DEL removes the entry by it even when the netns is already gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netns_cookie: Option<u64>,
    /// Set for a secondary interface: it has no fabric address (`ip` is `0.0.0.0`), and the
    /// pod's netns belongs to its primary attachment (no `sdn_sock_netns` entry of its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secondary: Option<Secondary>,
}

/// How a secondary interface came (issue 37), which decides who removes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Secondary {
    /// A Multus delegate call (`"vpc"` in the netconf): the runtime's DEL of its `ifname`.
    Delegated,
    /// An entry of the pod's `sdn.cozystack.io/vpcs`: added and deleted with the pod's
    /// network (the DEL of the primary interface).
    Listed,
}

impl Allocation {
    /// A record of what an ADD is about to build: nothing but its key, where it runs and its
    /// fabric address (`0.0.0.0` for a secondary interface).
    fn new(
        ip: Ipv4Addr,
        (container_id, ifname): (&str, &str),
        (netns, pod): (&str, &str),
        secondary: Option<Secondary>,
    ) -> Self {
        Self {
            ip,
            ip6: None,
            container_id: container_id.to_string(),
            ifname: ifname.to_string(),
            netns: netns.to_string(),
            pod: pod.to_string(),
            mac: None,
            host_ifindex: None,
            vpc: None,
            netns_cookie: None,
            secondary,
        }
    }

    /// The fabric addresses, IPv4 first (none for a secondary interface).
    pub fn fabric_ips(&self) -> Vec<IpAddr> {
        if self.secondary.is_some() {
            return Vec::new();
        }
        std::iter::once(IpAddr::V4(self.ip))
            .chain(self.ip6.map(IpAddr::V6))
            .collect()
    }
}

/// The VPC side of an attachment (what DEL, CHECK and restart need).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VpcAttachment {
    /// The VPC's VNI (the datapath net).
    pub vni: u32,
    /// The pod's VPC address (either family; its MAC is the pod's).
    pub ip: IpAddr,
    /// The Port object (cluster-scoped) that holds the address.
    pub port: String,
    /// `namespace/name` of the VPC.
    pub vpc: String,
    /// A dual-stack VPC's address of the other family, held by a Port of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub other: Option<VpcAddress>,
    /// The Ports are a workload's (issue 27): DEL leaves them to it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub persistent: bool,
    /// While a live migration holds the Ports on this node and another: that node's
    /// underlay address, which the endpoint relays to (`sdn_migrations`, issue 27).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migration_peer: Option<IpAddr>,
    /// A secondary interface's routes: the VPC's ranges (CIDR text) at ADD, through the
    /// interface's gateway; what its guest is told instead of a default route (issue 37).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<String>,
}

/// One more VPC address of an attachment and the Port that holds it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VpcAddress {
    /// The address.
    pub ip: IpAddr,
    /// Its Port.
    pub port: String,
}

impl VpcAttachment {
    /// Every VPC address of the attachment, the Port's first.
    pub fn ips(&self) -> impl Iterator<Item = IpAddr> + '_ {
        std::iter::once(self.ip).chain(self.other.as_ref().map(|o| o.ip))
    }

    /// Every Port of the attachment.
    pub fn ports(&self) -> impl Iterator<Item = &str> + '_ {
        std::iter::once(self.port.as_str()).chain(self.other.as_ref().map(|o| o.port.as_str()))
    }
}

/// Why an allocation failed.
#[derive(Debug, thiserror::Error)]
pub enum IpamError {
    /// Every address of the block is in use.
    #[error("fabric block {0} is exhausted")]
    Exhausted(Block),
    /// The state file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The state file is not ours or is corrupt.
    #[error("{path}: {msg}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        msg: String,
    },
}

#[derive(Serialize, Deserialize)]
struct StateFile {
    block: String,
    allocations: Vec<Allocation>,
}

/// The allocator and its file.
#[derive(Debug)]
pub struct Ipam {
    path: PathBuf,
    block: Block,
    block6: Option<Block6>,
    by_ip: BTreeMap<Ipv4Addr, Allocation>,
    /// Secondary interfaces, by `(container id, ifname)`: they hold no fabric address.
    secondaries: BTreeMap<(String, String), Allocation>,
    generation: u64,
}

impl Ipam {
    /// Open (or create) the state in `dir/ipam.json` for `block`. Allocations outside
    /// `block` (the node's block changed) are kept until their pods are deleted; new ones
    /// come from the new block.
    pub fn open(dir: &Path, block: Block) -> Result<Self, IpamError> {
        let path = dir.join("ipam.json");
        let io = |source| IpamError::Io {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let all: Vec<Allocation> = match std::fs::read(&path) {
            Ok(bytes) => {
                let f: StateFile = serde_json::from_slice(&bytes).map_err(|e| IpamError::Corrupt {
                    path: path.clone(),
                    msg: e.to_string(),
                })?;
                if f.block != block.to_string() {
                    tracing::warn!(old = %f.block, new = %block, "fabric block changed; existing pods keep their addresses");
                }
                f.allocations
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(io(e)),
        };
        let (secondaries, primaries): (Vec<_>, Vec<_>) = all.into_iter().partition(|a| a.secondary.is_some());
        Ok(Self {
            path,
            block,
            block6: None,
            by_ip: primaries.into_iter().map(|a| (a.ip, a)).collect(),
            secondaries: secondaries
                .into_iter()
                .map(|a| ((a.container_id.clone(), a.ifname.clone()), a))
                .collect(),
            generation: 0,
        })
    }

    /// How many changes were made since the file was read; a snapshot of generation `g`
    /// holds every change up to `g`.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The file this state persists to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The current state, serialized, and its generation.
    pub fn snapshot(&self) -> Result<(u64, Vec<u8>), IpamError> {
        let f = StateFile {
            block: self.block.to_string(),
            allocations: self.all().cloned().collect(),
        };
        let bytes = serde_json::to_vec_pretty(&f).map_err(|e| IpamError::Io {
            path: self.path.clone(),
            source: std::io::Error::other(e),
        })?;
        Ok((self.generation, bytes))
    }

    /// Persist the current state now.
    pub fn save(&self) -> Result<(), IpamError> {
        let (_, bytes) = self.snapshot()?;
        write_file(&self.path, &bytes)
    }

    /// The block new addresses come from.
    pub fn block(&self) -> Block {
        self.block
    }

    /// The allocation of an attachment, if any.
    pub fn get(&self, container_id: &str, ifname: &str) -> Option<&Allocation> {
        self.all()
            .find(|a| a.container_id == container_id && a.ifname == ifname)
    }

    fn get_mut(&mut self, container_id: &str, ifname: &str) -> Option<&mut Allocation> {
        self.by_ip
            .values_mut()
            .chain(self.secondaries.values_mut())
            .find(|a| a.container_id == container_id && a.ifname == ifname)
    }

    /// The IPv6 fabric block, if the node has one: pods get an address of it too.
    pub fn set_block6(&mut self, b: Option<Block6>) {
        self.block6 = b;
    }

    /// The IPv6 fabric block.
    pub fn block6(&self) -> Option<Block6> {
        self.block6
    }

    /// Every allocation.
    pub fn all(&self) -> impl Iterator<Item = &Allocation> {
        self.by_ip.values().chain(self.secondaries.values())
    }

    /// Addresses still free.
    pub fn free(&self) -> u32 {
        let used = self.by_ip.keys().filter(|ip| self.block.contains(**ip)).count() as u32;
        self.block.size() - used
    }

    /// The address of `(container_id, ifname)`: the existing one, or the lowest free one
    /// (in memory; persist before relying on it).
    pub fn allocate(
        &mut self,
        container_id: &str,
        ifname: &str,
        netns: &str,
        pod: &str,
    ) -> Result<Ipv4Addr, IpamError> {
        if let Some(a) = self.get(container_id, ifname) {
            return Ok(a.ip);
        }
        let ip = self
            .block
            .hosts()
            .find(|ip| !self.by_ip.contains_key(ip))
            .ok_or(IpamError::Exhausted(self.block))?;
        self.by_ip.insert(
            ip,
            Allocation::new(ip, (container_id, ifname), (netns, pod), None),
        );
        if let Some(b6) = self.block6 {
            let used: std::collections::BTreeSet<Ipv6Addr> =
                self.by_ip.values().filter_map(|a| a.ip6).collect();
            // The lowest free address; the block is far larger than the v4 one, so the walk
            // ends at most one past the number of pods.
            let ip6 = (1..).map_while(|n| b6.host(n)).find(|a| !used.contains(a));
            if let Some(a) = self.by_ip.get_mut(&ip) {
                a.ip6 = ip6;
            }
        }
        self.generation += 1;
        Ok(ip)
    }

    /// The record of secondary interface `(container_id, ifname)`: the existing one, or a new
    /// one holding no fabric address (in memory; persist before relying on it).
    pub fn allocate_secondary(
        &mut self,
        (container_id, ifname): (&str, &str),
        netns: &str,
        pod: &str,
        how: Secondary,
    ) {
        let key = (container_id.to_string(), ifname.to_string());
        if self.secondaries.contains_key(&key) {
            return;
        }
        self.secondaries.insert(
            key,
            Allocation::new(
                Ipv4Addr::UNSPECIFIED,
                (container_id, ifname),
                (netns, pod),
                Some(how),
            ),
        );
        self.generation += 1;
    }

    /// Record what the ADD built: the host veth's ifindex, the pod interface's MAC and the
    /// VPC side, if any (in memory).
    pub fn complete(
        &mut self,
        (container_id, ifname): (&str, &str),
        host_ifindex: u32,
        mac: &str,
        vpc: Option<VpcAttachment>,
    ) {
        if let Some(a) = self.get_mut(container_id, ifname) {
            a.host_ifindex = Some(host_ifindex);
            a.mac = Some(mac.to_string());
            a.vpc = vpc;
            self.generation += 1;
        }
    }

    /// Record the pod's netns cookie (ADD, or a restart for records written before it was
    /// recorded); in memory.
    pub fn set_netns_cookie(&mut self, (container_id, ifname): (&str, &str), cookie: u64) {
        if let Some(a) = self.get_mut(container_id, ifname)
            && a.netns_cookie != Some(cookie)
        {
            a.netns_cookie = Some(cookie);
            self.generation += 1;
        }
    }

    /// Record where the attachment's endpoint relays during a live migration (`None`: it no
    /// longer does); persisted with the next write.
    pub fn set_migration_peer(&mut self, container_id: &str, ifname: &str, peer: Option<IpAddr>) {
        if let Some(v) = self.get_mut(container_id, ifname).and_then(|a| a.vpc.as_mut())
            && v.migration_peer != peer
        {
            v.migration_peer = peer;
            self.generation += 1;
        }
    }

    /// Record the host veth's ifindex found at a restart (records written before it was
    /// recorded, or a veth the agent re-created); in memory.
    pub fn set_host_ifindex(&mut self, (container_id, ifname): (&str, &str), host_ifindex: u32) {
        if let Some(a) = self.get_mut(container_id, ifname)
            && a.host_ifindex != Some(host_ifindex)
        {
            a.host_ifindex = Some(host_ifindex);
            self.generation += 1;
        }
    }

    /// Whether an attachment other than `(container_id, ifname)` records `host_ifindex`
    /// (the kernel handed a freed ifindex to a newer veth).
    pub fn ifindex_owned_elsewhere(&self, host_ifindex: u32, container_id: &str, ifname: &str) -> bool {
        self.all().any(|a| {
            a.host_ifindex == Some(host_ifindex) && (a.container_id != container_id || a.ifname != ifname)
        })
    }

    /// Free the attachment's address (in memory); `None` if it had none (idempotent DEL).
    pub fn release(&mut self, container_id: &str, ifname: &str) -> Option<Allocation> {
        let key = (container_id.to_string(), ifname.to_string());
        let gone = match self.secondaries.remove(&key) {
            Some(a) => Some(a),
            None => {
                let ip = self.get(container_id, ifname).map(|a| a.ip)?;
                self.by_ip.remove(&ip)
            }
        };
        self.generation += 1;
        gone
    }
}

/// Write an [`Ipam::snapshot`] to `path`: a temporary file, fsynced, renamed over it.
pub fn write_file(path: &Path, bytes: &[u8]) -> Result<(), IpamError> {
    let io = |source| IpamError::Io {
        path: path.to_path_buf(),
        source,
    };
    let tmp = path.with_extension("json.tmp");
    let mut file = std::fs::File::create(&tmp).map_err(io)?;
    file.write_all(bytes).map_err(io)?;
    // The rename must not expose a file whose data is not on disk yet.
    file.sync_all().map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block() -> Block {
        "10.9.0.0/29".parse().unwrap()
    }

    #[test]
    fn block_parsing() {
        assert!("10.9.0.1/24".parse::<Block>().is_err());
        assert!("10.9.0.0/31".parse::<Block>().is_err());
        assert!("10.9.0.0".parse::<Block>().is_err());
        assert_eq!(block().size(), 6);
        assert!(!block().contains(Ipv4Addr::new(10, 9, 0, 0)));
        assert!(!block().contains(Ipv4Addr::new(10, 9, 0, 7)));
    }

    #[test]
    fn lowest_free_idempotent_and_persistent() {
        let dir = tempfile::tempdir().unwrap();
        let mut ipam = Ipam::open(dir.path(), block()).unwrap();
        let a = ipam.allocate("c1", "eth0", "/n1", "ns/a").unwrap();
        let b = ipam.allocate("c2", "eth0", "/n2", "ns/b").unwrap();
        assert_eq!((a, b), (Ipv4Addr::new(10, 9, 0, 1), Ipv4Addr::new(10, 9, 0, 2)));
        assert_eq!(ipam.allocate("c1", "eth0", "/n1", "ns/a").unwrap(), a);
        assert_eq!(ipam.release("c1", "eth0").unwrap().ip, a);
        assert!(ipam.release("c1", "eth0").is_none());
        // The lowest free address is reused.
        assert_eq!(ipam.allocate("c3", "eth0", "/n3", "").unwrap(), a);
        ipam.complete(("c2", "eth0"), 7, "02:00:00:00:00:02", None);
        // Every change counts; a snapshot carries the generation it holds.
        assert_eq!(ipam.generation(), 5);
        assert_eq!(ipam.snapshot().unwrap().0, 5);
        ipam.save().unwrap();
        drop(ipam);

        let mut ipam = Ipam::open(dir.path(), block()).unwrap();
        assert_eq!(
            ipam.get("c2", "eth0").unwrap().mac.as_deref(),
            Some("02:00:00:00:00:02")
        );
        assert_eq!(ipam.get("c3", "eth0").unwrap().ip, a);
        assert_eq!(ipam.free(), 4);
        for i in 0..4 {
            ipam.allocate(&format!("x{i}"), "eth0", "", "").unwrap();
        }
        // Unsaved changes are gone after a reopen.
        drop(ipam);
        let mut ipam = Ipam::open(dir.path(), block()).unwrap();
        assert_eq!(ipam.free(), 4);
        for i in 0..4 {
            ipam.allocate(&format!("x{i}"), "eth0", "", "").unwrap();
        }
        assert!(matches!(
            ipam.allocate("y", "eth0", "", ""),
            Err(IpamError::Exhausted(_))
        ));
    }

    #[test]
    fn a_secondary_interface_takes_no_fabric_address_and_survives_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let mut ipam = Ipam::open(dir.path(), block()).unwrap();
        let a = ipam.allocate("c1", "eth0", "/n1", "ns/a").unwrap();
        ipam.allocate_secondary(("c1", "net1"), "/n1", "ns/a", Secondary::Listed);
        ipam.allocate_secondary(("c1", "net2"), "/n1", "ns/a", Secondary::Delegated);
        // Idempotent, like a retried ADD.
        ipam.allocate_secondary(("c1", "net2"), "/n1", "ns/a", Secondary::Delegated);
        assert_eq!(ipam.free(), 5);
        assert_eq!(ipam.all().count(), 3);
        assert!(ipam.get("c1", "net1").unwrap().fabric_ips().is_empty());
        ipam.complete(("c1", "net1"), 9, "02:00:00:00:00:09", None);
        ipam.set_host_ifindex(("c1", "net2"), 10);
        ipam.save().unwrap();
        drop(ipam);
        let mut ipam = Ipam::open(dir.path(), block()).unwrap();
        assert_eq!(ipam.get("c1", "eth0").unwrap().ip, a);
        let net1 = ipam.get("c1", "net1").unwrap();
        assert_eq!(
            (net1.secondary, net1.host_ifindex),
            (Some(Secondary::Listed), Some(9))
        );
        assert_eq!(ipam.get("c1", "net2").unwrap().host_ifindex, Some(10));
        assert!(ipam.ifindex_owned_elsewhere(9, "c1", "eth0"));
        assert_eq!(ipam.release("c1", "net1").unwrap().ifname, "net1");
        assert!(ipam.release("c1", "net1").is_none());
        assert_eq!(ipam.release("c1", "eth0").unwrap().ip, a);
        assert_eq!(ipam.all().count(), 1);
    }

    #[test]
    fn a_v6_block_gives_each_pod_a_second_address_that_survives_a_reopen() {
        assert!("fd44::1/64".parse::<Block6>().is_err(), "host bits");
        assert!("fd44::/124".parse::<Block6>().is_err(), "too small");
        assert!("10.0.0.0/24".parse::<Block6>().is_err());
        let b6: Block6 = "fd44:0:0:1::/64".parse().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut ipam = Ipam::open(dir.path(), block()).unwrap();
        ipam.set_block6(Some(b6));
        ipam.allocate("c1", "eth0", "", "").unwrap();
        ipam.allocate("c2", "eth0", "", "").unwrap();
        let six = |ipam: &Ipam, c: &str| ipam.get(c, "eth0").unwrap().ip6;
        assert_eq!(six(&ipam, "c1"), Some("fd44:0:0:1::1".parse().unwrap()));
        assert_eq!(six(&ipam, "c2"), Some("fd44:0:0:1::2".parse().unwrap()));
        assert_eq!(
            ipam.get("c1", "eth0").unwrap().fabric_ips(),
            vec![
                IpAddr::from([10, 9, 0, 1]),
                "fd44:0:0:1::1".parse::<IpAddr>().unwrap()
            ]
        );
        // The lowest free v6 address is reused, and a retried ADD keeps its address.
        ipam.release("c1", "eth0");
        ipam.allocate("c3", "eth0", "", "").unwrap();
        assert_eq!(six(&ipam, "c3"), Some("fd44:0:0:1::1".parse().unwrap()));
        ipam.allocate("c3", "eth0", "", "").unwrap();
        assert_eq!(six(&ipam, "c3"), Some("fd44:0:0:1::1".parse().unwrap()));
        ipam.save().unwrap();
        drop(ipam);
        // Records of a v4-only agent (no `ip6`) and of this one both read back.
        let ipam = Ipam::open(dir.path(), block()).unwrap();
        assert_eq!(six(&ipam, "c3"), Some("fd44:0:0:1::1".parse().unwrap()));
        let old: Allocation = serde_json::from_value(serde_json::json!({
            "ip": "10.9.0.4", "containerId": "c", "ifname": "eth0",
            "vpc": {"vni": 100, "ip": "10.0.0.2", "port": "v100.10-0-0-2", "vpc": "t/v"}
        }))
        .unwrap();
        assert_eq!(old.ip6, None);
        assert_eq!(
            old.vpc.unwrap().ips().collect::<Vec<_>>(),
            vec![IpAddr::from([10, 0, 0, 2])]
        );
    }
}
