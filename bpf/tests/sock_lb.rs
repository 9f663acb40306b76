//! The socket-level load balancer (`progs/sock.bpf.c`, `lib/sock_lb.h`) with real sockets.
//!
//! Each test loads `sock.o` against a private bpffs, attaches its eight hooks with aya to a
//! throwaway cgroup2 directory under the unified mount, and makes a throwaway netns whose
//! `lo` carries a VIP and two backends per family. The client is a child process: this test
//! binary again, running the same test with `CPSOCK_ROLE` set. It enters the netns, moves
//! itself into the cgroup (its pid into `cgroup.procs`), serves the backends from threads and
//! checks what its sockets see; a failed check fails the child, hence the test. A listener on
//! the VIP itself answers `0`, so a connection that was not translated shows as such instead
//! of failing. The frontends are written through the map wrappers, as the agent writes them.
//!
//! Root; fails, never skips, without it.

mod common;

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{self, ErrorKind, Read as _, Write as _};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsFd as _;
use std::os::unix::fs::MetadataExt as _;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use aya::maps::Map;
use aya::programs::cgroup_sock_addr::CgroupSockAddrLinkId;
use aya::programs::links::{FdLink, PinnedLink};
use aya::programs::{CgroupAttachMode, CgroupSockAddr};
use aya::{Ebpf, EbpfLoader};
use cozyplane_bpf::abi::{self, LbSvc};
use cozyplane_bpf::maps::lb_affinity::LbAffinityMap;
use cozyplane_bpf::maps::lb_backends::LbBackendsMap;
use cozyplane_bpf::maps::lb_mag_big::LbMagBigMap;
use cozyplane_bpf::maps::lb_maglev::LbMaglevMap;
use cozyplane_bpf::maps::lb_svc::{Frontend, LbSvcMap};
use cozyplane_bpf::maps::sock_netns::SockNetnsMap;
use cozyplane_bpf::maps::sock_rev::SockRevMap;
use cozyplane_bpf::maps::sock_stats::{SockStats, SockStatsMap};
use cozyplane_bpf::maps::{
    lb_affinity, lb_backends, lb_mag_big, lb_maglev, lb_svc, sock_netns, sock_rev, sock_stats,
};
use cozyplane_bpf::{DatapathConfig, Object, programs, sys};
use nix::sched::{CloneFlags, setns};

const VIP4: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 10);
const VIP6: Ipv6Addr = Ipv6Addr::new(0xfd96, 0, 0, 0, 0, 0, 0, 0x10);
const BACKENDS4: [Ipv4Addr; 2] = [Ipv4Addr::new(10, 200, 0, 1), Ipv4Addr::new(10, 200, 0, 2)];
const BACKENDS6: [Ipv6Addr; 2] = [
    Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1),
    Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2),
];
/// The Service port, and the backends' target port.
const PORT: u16 = 80;
const TARGET: u16 = 8080;
const TCP: u8 = 6;
const UDP: u8 = 17;
/// Connections (and UDP sockets) per address in the spread checks: two backends on an
/// alternating table all give the same answer by chance once in 2^23.
const ROUNDS: usize = 24;
const TIMEOUT: Duration = Duration::from_secs(3);

const ROLE: &str = "CPSOCK_ROLE";
const NETNS: &str = "CPSOCK_NETNS";
const CGROUP: &str = "CPSOCK_CGROUP";
/// What the child prints last: a child that ran no test (a wrong `--exact` name) lacks it.
const DONE: &str = "cpsock-client-done";

/// The frontends: table id, VIP, protocol. Backend ids 1, 2 are the IPv4 backends, 3, 4 the
/// IPv6 ones.
const FRONTENDS: [(u32, IpAddr, u8); 4] = [
    (1, IpAddr::V4(VIP4), TCP),
    (2, IpAddr::V4(VIP4), UDP),
    (3, IpAddr::V6(VIP6), TCP),
    (4, IpAddr::V6(VIP6), UDP),
];

fn vip4() -> SocketAddr {
    SocketAddr::from((VIP4, PORT))
}

fn vip6() -> SocketAddr {
    SocketAddr::from((VIP6, PORT))
}

/// The IPv4 VIP as a dual-stack IPv6 socket addresses it.
fn vip_mapped() -> SocketAddr {
    SocketAddr::V6(SocketAddrV6::new(VIP4.to_ipv6_mapped(), PORT, 0, 0))
}

// === The parent: bpffs, cgroup, netns, programs, maps ===

struct Fixture {
    test: &'static str,
    ebpf: Option<Ebpf>,
    links: Vec<(&'static str, CgroupSockAddrLinkId)>,
    pin_dir: Option<PathBuf>,
    cgroup: Option<PathBuf>,
    netns: Option<String>,
    cookie: u64,
}

impl Fixture {
    /// Everything for test `test` (its exact name: the child runs it again).
    fn new(test: &'static str) -> Self {
        common::require_root();
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let tag = format!("{}-{}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed));
        // Filled step by step, so that Drop undoes whatever part exists when a step fails.
        let mut f = Self {
            test,
            ebpf: None,
            links: Vec::new(),
            pin_dir: None,
            cgroup: None,
            netns: None,
            cookie: 0,
        };
        let pin_dir = std::env::temp_dir().join(format!("cpsock-bpffs-{tag}"));
        std::fs::create_dir(&pin_dir).unwrap();
        run("mount", &["-t", "bpf", "cpsock", pin_dir.to_str().unwrap()]);
        f.pin_dir = Some(pin_dir);

        let cgroup = cgroup2_mount().join(format!("cpsock-{tag}"));
        std::fs::create_dir(&cgroup).unwrap_or_else(|e| panic!("mkdir {}: {e}", cgroup.display()));
        f.cgroup = Some(cgroup);

        let ns = format!("cpsock-{tag}");
        run("ip", &["netns", "add", &ns]);
        f.netns = Some(ns.clone());
        run("ip", &["-n", &ns, "link", "set", "lo", "up"]);
        let v4 = [VIP4, BACKENDS4[0], BACKENDS4[1]].map(|a| format!("{a}/32"));
        let v6 = [VIP6, BACKENDS6[0], BACKENDS6[1]].map(|a| format!("{a}/128"));
        for a in v4.iter().chain(&v6) {
            run("ip", &["-n", &ns, "addr", "add", a, "dev", "lo", "nodad"]);
        }
        f.cookie = netns_cookie(&ns);
        assert_ne!(
            f.cookie,
            sys::netns_cookie(UnixDatagram::unbound().unwrap().as_fd()).unwrap(),
            "the test netns has a cookie of its own"
        );

        let mut ebpf = f.load();
        let cg = File::open(f.cgroup.as_ref().unwrap()).unwrap();
        for spec in programs::SOCK {
            let prog = sock_prog(&mut ebpf, spec.name);
            let id = prog
                .attach(&cg, CgroupAttachMode::Single)
                .unwrap_or_else(|e| panic!("attach {}: {e:?}", spec.name));
            f.links.push((spec.name, id));
        }
        f.ebpf = Some(ebpf);
        f
    }

    /// `sock.o` loaded against the fixture's bpffs (the maps pinned there by name, or reused).
    fn load(&self) -> Ebpf {
        let values = DatapathConfig::default().values();
        let mut loader = EbpfLoader::new();
        loader.default_map_pin_directory(self.pin_dir.as_ref().unwrap());
        values.apply(&mut loader);
        let mut ebpf = loader.load(Object::Sock.bytes()).expect("load sock.o");
        for spec in programs::SOCK {
            programs::load_sock(sock_prog(&mut ebpf, spec.name))
                .unwrap_or_else(|e| panic!("verifier rejected {}: {e:?}", spec.name));
        }
        ebpf
    }

    fn map(&mut self, name: &str) -> &mut Map {
        self.ebpf.as_mut().unwrap().map_mut(name).unwrap()
    }

    /// Registers the test netns as being on `net` (`None`: not at all).
    fn register(&mut self, net: Option<u32>) {
        let cookie = self.cookie;
        let mut m = SockNetnsMap::try_from(self.map(sock_netns::NAME)).unwrap();
        match net {
            Some(net) => m.upsert(cookie, net).unwrap(),
            None => m.remove(cookie).unwrap(),
        }
    }

    /// Every frontend with `count` backends and sessionAffinity `affinity` seconds; the
    /// tables alternate the family's two backends.
    fn serve(&mut self, count: u32, affinity: u32) {
        let backends = [BACKENDS4.map(IpAddr::V4), BACKENDS6.map(IpAddr::V6)].concat();
        let mut be = LbBackendsMap::try_from(self.map(lb_backends::NAME)).unwrap();
        for (id, a) in (1..).zip(backends) {
            be.upsert(id, 0, a, TARGET).unwrap();
        }
        for (id, vip, proto) in FRONTENDS {
            let ids = if vip.is_ipv4() { [1, 2] } else { [3, 4] };
            let slots: Vec<u32> = (0..abi::LB_SLOTS).map(|s| ids[s % 2]).collect();
            let mut maglev = LbMaglevMap::try_from(self.map(lb_maglev::NAME)).unwrap();
            maglev.set(id, &slots).unwrap();
            let f = Frontend {
                net: 0,
                vip,
                proto,
                port: PORT,
            };
            let v = LbSvc {
                id,
                count,
                affinity,
                flags: 0,
            };
            LbSvcMap::try_from(self.map(lb_svc::NAME))
                .unwrap()
                .upsert(f, v)
                .unwrap();
        }
    }

    /// Moves every frontend of [`Fixture::serve`] to a big table (`sdn_lb_mag_big`, the same
    /// alternation, [`LbSvc::F_BIG`] set) and empties its small one: a pick from the wrong
    /// map finds no backend, and the connect is refused.
    fn serve_big(&mut self) {
        for (id, vip, proto) in FRONTENDS {
            let ids = if vip.is_ipv4() { [1, 2] } else { [3, 4] };
            let slots: Vec<u32> = (0..abi::LB_BIG_SLOTS).map(|s| ids[s % 2]).collect();
            LbMagBigMap::try_from(self.map(lb_mag_big::NAME))
                .unwrap()
                .set(id, &slots)
                .unwrap();
            LbMaglevMap::try_from(self.map(lb_maglev::NAME))
                .unwrap()
                .set(id, &[0; abi::LB_SLOTS])
                .unwrap();
            let f = Frontend {
                net: 0,
                vip,
                proto,
                port: PORT,
            };
            let mut svc = LbSvcMap::try_from(self.map(lb_svc::NAME)).unwrap();
            let v = svc.get(f).unwrap().expect("served");
            svc.upsert(
                f,
                LbSvc {
                    flags: v.flags | LbSvc::F_BIG,
                    ..v
                },
            )
            .unwrap();
        }
    }

    fn stats(&mut self) -> SockStats {
        SockStatsMap::try_from(self.map(sock_stats::NAME))
            .unwrap()
            .get()
            .unwrap()
    }

    /// Runs the child in `role`; its failure is this test's.
    fn client(&self, role: &str) {
        let out = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", self.test, "--nocapture", "--test-threads=1"])
            .env(ROLE, role)
            .env(NETNS, self.netns.as_ref().unwrap())
            .env(CGROUP, self.cgroup.as_ref().unwrap())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains(&format!("{DONE} {role}")),
            "client {role} failed ({}):\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        // Closing aya's link descriptors detaches the hooks; unmounting the bpffs releases the
        // pinned ones and every map. The cgroup is empty once the child was waited for.
        drop(self.ebpf.take());
        if let Some(dir) = self.pin_dir.take() {
            let _ = Command::new("umount").arg(&dir).status();
            let _ = std::fs::remove_dir(&dir);
        }
        if let Some(cg) = self.cgroup.take()
            && let Err(e) = std::fs::remove_dir(&cg)
        {
            eprintln!("rmdir {}: {e}", cg.display());
        }
        if let Some(ns) = self.netns.take() {
            let _ = Command::new("ip").args(["netns", "del", &ns]).status();
        }
    }
}

fn sock_prog<'a>(ebpf: &'a mut Ebpf, name: &str) -> &'a mut CgroupSockAddr {
    ebpf.program_mut(name)
        .unwrap_or_else(|| panic!("{name} not in sock.o"))
        .try_into()
        .unwrap_or_else(|e| panic!("{name} is no cgroup sock_addr program: {e:?}"))
}

fn run(cmd: &str, args: &[&str]) {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The first cgroup2 mount of `/proc/self/mountinfo` (this machine: a cgroup v1 hybrid with
/// the unified hierarchy at `/sys/fs/cgroup/unified`).
fn cgroup2_mount() -> PathBuf {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    info.lines()
        .find_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let point = left.split(' ').nth(4)?;
            (right.split(' ').next()? == "cgroup2").then(|| PathBuf::from(point))
        })
        .expect("a cgroup2 mount: the socket hooks attach to a cgroup2 directory")
}

/// The netns cookie of the named netns, from a thread that enters it for the purpose.
fn netns_cookie(name: &str) -> u64 {
    let ns = File::open(format!("/run/netns/{name}")).unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            setns(&ns, CloneFlags::CLONE_NEWNET).unwrap();
            sys::netns_cookie(UnixDatagram::unbound().unwrap().as_fd()).unwrap()
        })
        .join()
        .unwrap()
    })
}

// === The child: the netns, the cgroup, the backends, the client's checks ===

/// In the child: enter the netns and the cgroup, start the backends and play the role.
/// Returns false in the parent (no role).
fn child() -> bool {
    let Ok(role) = std::env::var(ROLE) else {
        return false;
    };
    let ns = File::open(format!("/run/netns/{}", std::env::var(NETNS).unwrap())).unwrap();
    // This thread, and the threads it starts, are in the netns from here on.
    setns(&ns, CloneFlags::CLONE_NEWNET).unwrap();
    let procs = Path::new(&std::env::var(CGROUP).unwrap()).join("cgroup.procs");
    std::fs::write(&procs, std::process::id().to_string()).unwrap();
    backends();
    match role.as_str() {
        "balance" => balance(),
        "affinity" => affinity(),
        "refused" => refused(),
        "untranslated" => untranslated(),
        "one" => {
            let (id, peer) = tcp(vip4()).unwrap();
            assert!(
                id == b'1' || id == b'2',
                "translated to a backend, got {}",
                id as char
            );
            assert_eq!(peer, vip4());
        }
        r => panic!("unknown role {r}"),
    }
    println!("{DONE} {role}");
    true
}

/// TCP and UDP servers answering one byte: `1`, `2` (the backends, on the target port),
/// `0` (the VIP itself, on the Service port: what an untranslated socket reaches).
fn backends() {
    let servers = [
        (b'0', IpAddr::V4(VIP4), PORT),
        (b'1', IpAddr::V4(BACKENDS4[0]), TARGET),
        (b'2', IpAddr::V4(BACKENDS4[1]), TARGET),
        (b'0', IpAddr::V6(VIP6), PORT),
        (b'1', IpAddr::V6(BACKENDS6[0]), TARGET),
        (b'2', IpAddr::V6(BACKENDS6[1]), TARGET),
    ];
    for (id, ip, port) in servers {
        let tcp = TcpListener::bind((ip, port)).unwrap();
        std::thread::spawn(move || {
            for mut s in tcp.incoming().flatten() {
                let _ = s.write_all(&[id]);
            }
        });
        let udp = UdpSocket::bind((ip, port)).unwrap();
        std::thread::spawn(move || {
            let mut b = [0u8; 16];
            while let Ok((_, from)) = udp.recv_from(&mut b) {
                let _ = udp.send_to(&[id], from);
            }
        });
    }
}

/// A TCP connection to `to`: the answering server's byte and getpeername.
fn tcp(to: SocketAddr) -> io::Result<(u8, SocketAddr)> {
    let mut s = TcpStream::connect_timeout(&to, TIMEOUT)?;
    s.set_read_timeout(Some(TIMEOUT))?;
    let peer = s.peer_addr()?;
    let mut b = [0u8; 1];
    s.read_exact(&mut b)?;
    Ok((b[0], peer))
}

/// A datagram from a new unconnected socket to `to`: the answer's byte and its source.
fn udp(to: SocketAddr) -> io::Result<(u8, SocketAddr)> {
    let s = UdpSocket::bind(if to.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" })?;
    s.set_read_timeout(Some(TIMEOUT))?;
    s.send_to(b"ping", to)?;
    let mut b = [0u8; 16];
    let (_, from) = s.recv_from(&mut b)?;
    Ok((b[0], from))
}

fn balance() {
    let both = BTreeSet::from([b'1', b'2']);
    for vip in [vip4(), vip6(), vip_mapped()] {
        let mut seen = BTreeSet::new();
        for _ in 0..ROUNDS {
            let (id, peer) = tcp(vip).unwrap_or_else(|e| panic!("tcp {vip}: {e}"));
            assert_eq!(peer, vip, "getpeername of a TCP socket to {vip}");
            seen.insert(id);
        }
        assert_eq!(
            seen, both,
            "TCP to {vip}: both backends, never the VIP's own listener"
        );
        let mut seen = BTreeSet::new();
        for _ in 0..ROUNDS {
            let (id, from) = udp(vip).unwrap_or_else(|e| panic!("udp {vip}: {e}"));
            assert_eq!(from, vip, "recvfrom's source of a reply to {vip}");
            seen.insert(id);
        }
        assert_eq!(seen, both, "UDP to {vip}: both backends");
        // Connected UDP: translated once at connect.
        let s = UdpSocket::bind(if vip.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }).unwrap();
        s.set_read_timeout(Some(TIMEOUT)).unwrap();
        s.connect(vip).unwrap();
        assert_eq!(
            s.peer_addr().unwrap(),
            vip,
            "getpeername of a connected UDP socket"
        );
        s.send(b"ping").unwrap();
        let mut b = [0u8; 16];
        let (_, from) = s.recv_from(&mut b).unwrap();
        assert!(
            both.contains(&b[0]),
            "connected UDP to {vip} reached {}",
            b[0] as char
        );
        assert_eq!(from, vip, "recvfrom on a connected UDP socket");
    }
}

fn affinity() {
    for vip in [vip4(), vip6()] {
        let ids: BTreeSet<u8> = (0..ROUNDS).map(|_| tcp(vip).unwrap().0).collect();
        assert_eq!(
            ids.len(),
            1,
            "TCP to {vip}: one backend for one client, got {ids:?}"
        );
        assert!(ids.is_subset(&BTreeSet::from([b'1', b'2'])), "{ids:?}");
        let ids: BTreeSet<u8> = (0..ROUNDS).map(|_| udp(vip).unwrap().0).collect();
        assert_eq!(
            ids.len(),
            1,
            "UDP to {vip}: one backend for one client, got {ids:?}"
        );
    }
}

fn refused() {
    for vip in [vip4(), vip6(), vip_mapped()] {
        let e = tcp(vip).expect_err("a frontend without backends refuses connect()");
        assert_eq!(e.kind(), ErrorKind::ConnectionRefused, "TCP to {vip}: {e}");
    }
    for vip in [vip4(), vip6()] {
        let e = udp(vip).expect_err("a frontend without backends refuses sendto()");
        assert_eq!(e.kind(), ErrorKind::ConnectionRefused, "UDP to {vip}: {e}");
    }
}

fn untranslated() {
    for vip in [vip4(), vip6()] {
        assert_eq!(
            tcp(vip).unwrap(),
            (b'0', vip),
            "TCP to {vip} reaches the VIP itself"
        );
        assert_eq!(
            udp(vip).unwrap(),
            (b'0', vip),
            "UDP to {vip} reaches the VIP itself"
        );
    }
}

// === The tests ===

/// Connections and datagrams to a VIP (IPv4, IPv6, IPv4-mapped on a dual-stack socket)
/// reach both backends, and the application sees the VIP as its peer.
#[test]
fn sockets_to_a_vip_reach_both_backends_and_see_the_vip() {
    if child() {
        return;
    }
    let mut f = Fixture::new("sockets_to_a_vip_reach_both_backends_and_see_the_vip");
    f.register(Some(0));
    f.serve(2, 0);
    f.client("balance");
    let s = f.stats();
    // Per address: ROUNDS TCP connects and one connected UDP socket; ROUNDS datagrams.
    assert_eq!(s.connects, 3 * (ROUNDS as u64 + 1), "{s:?}");
    assert_eq!(s.datagrams, 3 * ROUNDS as u64, "{s:?}");
    assert_eq!(s.refused, 0, "{s:?}");
    assert!(s.reversed >= 6 * ROUNDS as u64, "{s:?}");
    let rev = SockRevMap::try_from(f.map(sock_rev::NAME))
        .unwrap()
        .entries()
        .unwrap();
    let v4: abi::Addr = IpAddr::V4(VIP4).into();
    assert!(
        rev.iter()
            .any(|(k, v)| v.vip == v4 && v.port == PORT.to_be() && k.proto == TCP)
    );
}

/// sessionAffinity: every connection of one client (its netns) goes to one backend, and the
/// affinity entry is keyed so that no tc-path client can share it.
#[test]
fn session_affinity_keeps_a_client_on_one_backend() {
    if child() {
        return;
    }
    let mut f = Fixture::new("session_affinity_keeps_a_client_on_one_backend");
    f.register(Some(0));
    f.serve(2, 60);
    f.client("affinity");
    let cookie = f.cookie;
    let aff = LbAffinityMap::try_from(f.map(lb_affinity::NAME))
        .unwrap()
        .entries()
        .unwrap();
    assert_eq!(aff.len(), FRONTENDS.len(), "one entry per frontend used: {aff:?}");
    for (k, v) in aff {
        assert_eq!(k.net, abi::SOCK_AFF_NET);
        assert_eq!(k.client, abi::sock_aff_client(cookie));
        assert!((1..=4).contains(&v.backend), "{v:?}");
    }
}

/// A frontend with a big table (`LbSvc::F_BIG`, many backends) is balanced from
/// `sdn_lb_mag_big` as one with a small table is from `sdn_lb_maglev`: the same checks, with
/// the small tables of the same ids holding no backend.
#[test]
fn a_big_table_balances_as_a_small_one() {
    if child() {
        return;
    }
    let mut f = Fixture::new("a_big_table_balances_as_a_small_one");
    f.register(Some(0));
    f.serve(2, 0);
    f.serve_big();
    f.client("balance");
    let s = f.stats();
    assert_eq!(s.refused, 0, "{s:?}");
    assert_eq!(s.connects, 3 * (ROUNDS as u64 + 1), "{s:?}");
}

/// A frontend with no backend refuses connect() and sendto() with ECONNREFUSED, though a
/// listener on the VIP itself would accept.
#[test]
fn a_frontend_without_backends_refuses() {
    if child() {
        return;
    }
    let mut f = Fixture::new("a_frontend_without_backends_refuses");
    f.register(Some(0));
    f.serve(0, 0);
    f.client("refused");
    let s = f.stats();
    assert_eq!((s.refused, s.connects, s.datagrams), (5, 0, 0), "{s:?}");
}

/// Only a netns registered on net 0 is translated: unregistered, or on a VPC's net, the
/// client reaches the VIP's own listener; registered on net 0, the same client is balanced.
#[test]
fn a_netns_not_on_net_0_is_left_alone() {
    if child() {
        return;
    }
    let mut f = Fixture::new("a_netns_not_on_net_0_is_left_alone");
    f.serve(2, 0);
    f.client("untranslated");
    f.register(Some(5));
    f.client("untranslated");
    assert_eq!(f.stats(), SockStats::default());
    f.register(Some(0));
    f.client("one");
    assert_eq!(f.stats().connects, 1);
}

/// A restarted agent's programs take over the pinned links in place (`sys::update_link`),
/// and the hooks keep translating after the first programs are gone.
#[test]
fn pinned_links_take_new_programs_in_place() {
    if child() {
        return;
    }
    let mut f = Fixture::new("pinned_links_take_new_programs_in_place");
    f.register(Some(0));
    f.serve(2, 0);
    let links = f.pin_dir.as_ref().unwrap().join("links");
    std::fs::create_dir(&links).unwrap();
    let first = f.ebpf.as_mut().unwrap();
    for (name, id) in std::mem::take(&mut f.links) {
        let link: FdLink = sock_prog(first, name).take_link(id).unwrap().try_into().unwrap();
        link.pin(links.join(name)).unwrap();
    }
    let cgroup_id = std::fs::metadata(f.cgroup.as_ref().unwrap()).unwrap().ino();
    // The second load reuses the maps pinned by name, as an agent's restart does.
    let mut second = f.load();
    for spec in programs::SOCK {
        let pin = links.join(spec.name);
        let prog = sock_prog(&mut second, spec.name);
        let before = FdLink::from(PinnedLink::from_pin(&pin).unwrap()).info().unwrap();
        sys::update_link(&pin, prog.fd().unwrap().as_fd())
            .unwrap_or_else(|e| panic!("update {}: {e}", spec.name));
        let after = FdLink::from(PinnedLink::from_pin(&pin).unwrap()).info().unwrap();
        let new = (
            after.id(),
            after.program_id(),
            sys::cgroup_link_target(&pin).unwrap(),
        );
        let want = (before.id(), prog.info().unwrap().id(), cgroup_id);
        assert_eq!(
            new, want,
            "{}: the same link and cgroup, the new program",
            spec.name
        );
    }
    // The first programs go; only the links (and the second load) hold programs now.
    f.ebpf = Some(second);
    f.client("balance");
}
