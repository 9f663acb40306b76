//! The world outside the cluster: a router on the lab's underlay and an "internet" host behind
//! it, for the north-south tests (`tests/egress.rs`, `tests/fip.rs`) and bench
//! (`benches/northsouth.rs`).
//!
//! ```text
//!   node-i ─┐                                           (MTU 1500, or narrower)
//!   node-j ─┼─ underlay br0 ─ rtr (192.168.77.254, fd77::fe) ─── inet (198.51.100.2,
//!   ctl   ──┘                  wan 198.51.100.1, 2001:db8:100::1     2001:db8:100::2)
//! ```
//!
//! * `rtr` plays the site's border router: every node's default route (both families, the
//!   IPv6 one on a dual-stack lab) points at it, and it routes the "LoadBalancer pool"
//!   ([`POOL4`], [`POOL6`]) to one node's underlay address, as MetalLB's L2 or BGP mode
//!   would attract a Service address to a node. [`Outside::attract`] re-points the pool.
//! * `inet` plays a host on the internet: it knows nothing of the cluster (default route
//!   via `rtr`) and sees only what leaves it, which is what the tests capture
//!   ([`Outside::capture`]).
//!
//! Outside addresses come from the documentation ranges only (RFC 5737, RFC 3849), and only
//! inside namespaces the lab creates. Dropping an `Outside` deletes its namespaces (their
//! veths go with them) and the default routes it gave the nodes.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::{Lab, Netns, sh, start_tcpdump, stop_tcpdump};

/// The router's address on the underlay.
pub const ROUTER4: Ipv4Addr = Ipv4Addr::new(192, 168, 77, 254);
/// The router's IPv6 address on the underlay (dual-stack labs).
pub const ROUTER6: Ipv6Addr = Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 0, 0xfe);
/// The router's side of the internet link.
pub const WAN4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
/// The router's side of the internet link, IPv6.
pub const WAN6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 1);
/// The internet host.
pub const INET4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 2);
/// The internet host, IPv6.
pub const INET6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 2);
/// The IPv4 LoadBalancer pool the router attracts to a node.
pub const POOL4: &str = "203.0.113.0/26";
/// The IPv6 LoadBalancer pool the router attracts to a node.
pub const POOL6: &str = "2001:db8:cafe::/112";

/// `rtr` and `inet` (see the module doc).
#[derive(Debug)]
pub struct Outside {
    /// The border router.
    pub router: Netns,
    /// The internet host (its device is `eth0`).
    pub internet: Netns,
    /// MTU of the router–internet link.
    pub wan_mtu: u32,
    /// The node netns names given a default route, with whether it was IPv6 too.
    routed: Vec<(String, bool)>,
}

impl Outside {
    /// Builds the router and the internet host on `lab`'s underlay, the router–internet link
    /// with `wan_mtu` (1500 for an ordinary one), and points every node's default route at
    /// the router. The pool is not attracted anywhere until [`Outside::attract`].
    pub fn new(lab: &Lab, wan_mtu: u32) -> Self {
        let router = Netns::new("rtr");
        let internet = Netns::new("inet");
        let port = format!("p-{}", &router.0[router.0.len().saturating_sub(8)..]);
        lab.ul.ip_ok(&[
            "link", "add", &port, "type", "veth", "peer", "name", "ul0", "netns", &router.0,
        ]);
        lab.ul.ip_ok(&["link", "set", &port, "master", "br0", "up"]);
        router.ip_ok(&["addr", "add", &format!("{ROUTER4}/24"), "dev", "ul0"]);
        router.ip_ok(&["addr", "add", &format!("{ROUTER6}/64"), "dev", "ul0", "nodad"]);
        router.ip_ok(&["link", "set", "ul0", "up"]);

        let mtu = wan_mtu.to_string();
        router.ip_ok(&[
            "link",
            "add",
            "wan0",
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            &internet.0,
        ]);
        router.ip_ok(&["link", "set", "wan0", "mtu", &mtu, "up"]);
        router.ip_ok(&["addr", "add", &format!("{WAN4}/24"), "dev", "wan0"]);
        router.ip_ok(&["addr", "add", &format!("{WAN6}/64"), "dev", "wan0", "nodad"]);
        internet.ip_ok(&["link", "set", "eth0", "mtu", &mtu, "up"]);
        internet.ip_ok(&["addr", "add", &format!("{INET4}/24"), "dev", "eth0"]);
        internet.ip_ok(&["addr", "add", &format!("{INET6}/64"), "dev", "eth0", "nodad"]);
        internet.ip_ok(&["route", "add", "default", "via", &WAN4.to_string()]);
        internet.ip_ok(&["-6", "route", "add", "default", "via", &WAN6.to_string()]);
        router.sysctl("net.ipv4.ip_forward=1");
        router.sysctl("net.ipv6.conf.all.forwarding=1");

        router.wait_v6_settled();
        internet.wait_v6_settled();
        let mut routed = Vec::new();
        for n in &lab.nodes {
            n.ns.ip_ok(&[
                "route",
                "replace",
                "default",
                "via",
                &ROUTER4.to_string(),
                "dev",
                "ul0",
            ]);
            let v6 = n.v6.is_some();
            if v6 {
                n.ns.ip_ok(&[
                    "-6",
                    "route",
                    "replace",
                    "default",
                    "via",
                    &ROUTER6.to_string(),
                    "dev",
                    "ul0",
                ]);
            }
            routed.push((n.ns.0.clone(), v6));
        }
        Self {
            router,
            internet,
            wan_mtu,
            routed,
        }
    }

    /// Routes the LoadBalancer pool (both families) to node `i`'s underlay address, replacing
    /// where it went before: the address attraction of MetalLB (L2 or BGP).
    pub fn attract(&self, lab: &Lab, i: usize) {
        let n = &lab.nodes[i];
        self.router
            .ip_ok(&["route", "replace", POOL4, "via", &n.ip.to_string()]);
        if let Some((_, v6)) = &n.v6 {
            self.router
                .ip_ok(&["-6", "route", "replace", POOL6, "via", &v6.to_string()]);
        }
    }

    /// Changes the MTU of the router–internet link (both ends), e.g. to narrow it for a PMTU
    /// test; the router then answers larger packets with "fragmentation needed".
    pub fn set_wan_mtu(&mut self, mtu: u32) {
        let m = mtu.to_string();
        self.router.ip_ok(&["link", "set", "wan0", "mtu", &m]);
        self.internet.ip_ok(&["link", "set", "eth0", "mtu", &m]);
        // Path MTUs learnt over the old link must not linger on either side.
        self.router.ip_ok(&["route", "flush", "cache"]);
        self.internet.ip_ok(&["route", "flush", "cache"]);
        self.wan_mtu = mtu;
    }

    /// The internet host's address of `ip`'s family.
    pub fn inet(ip: IpAddr) -> IpAddr {
        match ip {
            IpAddr::V4(_) => INET4.into(),
            IpAddr::V6(_) => INET6.into(),
        }
    }

    /// Captures on the internet host's `eth0` while `f` runs; returns the matching packets as
    /// `tcpdump -n` prints them (one line each).
    pub fn capture(&self, filter: &str, f: impl FnOnce()) -> Vec<String> {
        capture_lines(&self.internet, "eth0", filter, f)
    }
}

/// Captures on `dev` inside `ns` while `f` runs; the packets matching `filter` as
/// `tcpdump -n` prints them.
pub fn capture_lines(ns: &Netns, dev: &str, filter: &str, f: impl FnOnce()) -> Vec<String> {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("cap.pcap");
    let p = start_tcpdump(ns, dev, filter, &file);
    f();
    std::thread::sleep(std::time::Duration::from_millis(300));
    stop_tcpdump(p);
    read_pcap(&file)
}

fn read_pcap(file: &Path) -> Vec<String> {
    let out = sh(&["tcpdump", "-n", "-r", file.to_str().unwrap_or_default()]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

impl Drop for Outside {
    fn drop(&mut self) {
        for (ns, v6) in &self.routed {
            let _ = sh(&[
                "ip",
                "-n",
                ns,
                "route",
                "del",
                "default",
                "via",
                &ROUTER4.to_string(),
            ]);
            if *v6 {
                let _ = sh(&[
                    "ip",
                    "-n",
                    ns,
                    "-6",
                    "route",
                    "del",
                    "default",
                    "via",
                    &ROUTER6.to_string(),
                ]);
            }
        }
    }
}

impl Lab {
    /// The outside world on this lab's underlay ([`Outside::new`]).
    pub fn outside(&self, wan_mtu: u32) -> Outside {
        Outside::new(self, wan_mtu)
    }
}

/// Debian's `dnsmasq` (package `dnsmasq-base`) serving records on port 53 inside a lab
/// namespace: the internet's resolver ([`Outside::dns`]), a stand-in for the cluster DNS on a
/// node, or the real-node lab's cluster DNS (`lab/tests/realnode/dns.rs`), which rewrites its
/// records as Services change ([`Dnsmasq::reload`]). Its records only (`--no-resolv
/// --no-hosts`: nothing is forwarded, the machine's `/etc/hosts` is not read); its output goes
/// to `dnsmasq.log` in its directory; killed by PID when dropped.
#[derive(Debug)]
pub struct Dnsmasq {
    /// Where it listens (port 53).
    pub addrs: Vec<IpAddr>,
    /// The namespace's name (`ip netns exec <name>`).
    netns: String,
    /// `None` only inside [`Dnsmasq::restart`].
    proc: Option<crate::Proc>,
    dir: tempfile::TempDir,
}

/// The binary, wherever Debian put it.
fn dnsmasq_bin() -> &'static str {
    ["/usr/sbin/dnsmasq", "/usr/bin/dnsmasq"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("dnsmasq is installed (make deps installs dnsmasq-base)")
}

impl Dnsmasq {
    /// Starts dnsmasq in `ns` on `listen` (port 53, UDP and TCP) answering `records`
    /// (`(name, address)`; a name may have several, of both families) with a TTL of 60 s;
    /// returns once it accepts TCP on the first address.
    pub fn start(ns: &Netns, listen: &[IpAddr], records: &[(&str, IpAddr)]) -> Self {
        let hosts: String = records.iter().map(|(n, a)| format!("{a} {n}\n")).collect();
        Self::serve(ns, listen, &hosts, &["--local-ttl=60".into()])
    }

    /// Starts dnsmasq in `ns` on `listen` (port 53, UDP and TCP) with `hosts` (hosts(5) text)
    /// as its records file and `options` besides the fixed ones (e.g. `--local=/<domain>/`,
    /// `--cname=…`); returns once it accepts TCP on the first address.
    pub fn serve(ns: &Netns, listen: &[IpAddr], hosts: &str, options: &[String]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("hosts"), hosts).expect("write hosts");
        let proc = spawn(&ns.0, listen, dir.path(), options);
        Self {
            addrs: listen.to_vec(),
            netns: ns.0.clone(),
            proc: Some(proc),
            dir,
        }
    }

    /// Its PID (`ip netns exec` execs in place: dnsmasq's own).
    pub fn pid(&self) -> u32 {
        self.proc.as_ref().expect("dnsmasq runs").0.id()
    }

    /// Replaces its records file with `hosts` (a rename: never read half-written) and has it
    /// read again: SIGHUP by PID (dnsmasq re-reads `--addn-hosts` files on SIGHUP, not its
    /// other options).
    pub fn reload(&self, hosts: &str) {
        let tmp = self.dir.path().join("hosts.new");
        std::fs::write(&tmp, hosts).expect("write hosts");
        std::fs::rename(&tmp, self.dir.path().join("hosts")).expect("replace hosts");
        let pid = i32::try_from(self.pid()).expect("PID");
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGHUP)
            .unwrap_or_else(|e| panic!("SIGHUP dnsmasq (PID {pid}): {e}\n{}", self.log()));
    }

    /// Stops it (SIGKILL by PID) and starts it again on the same addresses and records file
    /// with `options` instead: what changing an option other than the records needs (dnsmasq
    /// reads `--cname` only when it starts). Queries in between go unanswered.
    pub fn restart(&mut self, options: &[String]) {
        // Killed and reaped once, before its addresses are bound again.
        drop(self.proc.take());
        self.proc = Some(spawn(&self.netns, &self.addrs, self.dir.path(), options));
    }

    /// What it logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("dnsmasq.log")).unwrap_or_default()
    }
}

/// Starts dnsmasq in the netns `netns` on `addrs` with `dir`'s `hosts` and `options`, its
/// output appended to `dir`'s `dnsmasq.log`; returns once it accepts TCP on the first address
/// (its signal handlers are set by then), panics (killing it) if it exits or does not within
/// 10 s.
fn spawn(netns: &str, addrs: &[IpAddr], dir: &Path, options: &[String]) -> crate::Proc {
    let listen = addrs.iter().map(IpAddr::to_string).collect::<Vec<_>>().join(",");
    let log_path = dir.join("dnsmasq.log");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .expect("dnsmasq.log");
    let child = Command::new("ip")
        .args(["netns", "exec", netns, dnsmasq_bin()])
        .args([
            "--keep-in-foreground",
            "--no-resolv",
            "--no-hosts",
            "--bind-interfaces",
            "--port=53",
            "--pid-file=",
            "--user=root",
            "--log-facility=-",
        ])
        .arg(format!("--listen-address={listen}"))
        .arg(format!("--addn-hosts={}", dir.join("hosts").display()))
        .args(options)
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("dnsmasq.log"))
        .stderr(log)
        .spawn()
        .expect("spawn dnsmasq");
    let mut proc = crate::Proc(child);
    let first = SocketAddr::new(addrs[0], 53);
    let ns = std::fs::File::open(format!("/run/netns/{netns}")).expect("open netns");
    let t = Instant::now();
    loop {
        let up = std::thread::scope(|s| {
            s.spawn(|| {
                nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
                TcpStream::connect_timeout(&first, Duration::from_millis(200)).is_ok()
            })
            .join()
            .unwrap_or(false)
        });
        if up {
            return proc;
        }
        let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
        if let Ok(Some(status)) = proc.0.try_wait() {
            // Reaped: its PID may be another process's by now, so no SIGKILL by it.
            std::mem::forget(proc);
            panic!("dnsmasq on {first} in {netns} exited ({status}):\n{}", log());
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "dnsmasq on {first} in {netns} did not come up in 10 s:\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Outside {
    /// The internet's resolver: dnsmasq on the internet host ([`INET4`] and [`INET6`], port
    /// 53) answering `records`, which the nodes' resolvers may be given as upstream.
    pub fn dns(&self, records: &[(&str, IpAddr)]) -> Dnsmasq {
        Dnsmasq::start(&self.internet, &[INET4.into(), INET6.into()], records)
    }
}
