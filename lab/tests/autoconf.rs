//! `make e2e`, two nodes: VM guests configure themselves from the network (issue 28). Guests
//! are lab pods whose `eth0` is stripped of what CNI ADD put there (addresses, routes) and
//! then configured as a VM guest does it, from the agent's responder (`--autoconf`):
//!
//! - IPv4, Debian's `dhclient -4` (`isc-dhcp-client`): the Port's address as a /32, the
//!   on-link route to the gateway and the default route through it, the link MTU, the
//!   resolver and the search list in its resolv.conf, within 1 s; then it reaches another
//!   pod of its VPC. Renewal is ACKed, release is counted; a stale lease for another address
//!   is NAKed (init-reboot).
//! - IPv6, with the sysctls of a guest that autoconfigures (`forwarding=0`, `accept_ra=1`,
//!   `accept_ra_defrtr=1`, `accept_ra_pinfo=1`, `accept_ra_mtu=1`, `autoconf=1`,
//!   `accept_dad=1`: SLAAC on, duplicate address detection on): `rdisc6 -1` (`ndisc6`) gets
//!   one RA from `fe80::1` with M and O set, the MTU, RDNSS and DNSSL and no prefix (so
//!   SLAAC forms nothing), and the guest's kernel takes the default route via `fe80::1`
//!   from it (`proto ra`); `dhclient -6` gets exactly the Port's /128 (its only global
//!   address) and the resolver; then the guest reaches another pod over IPv6.
//! - An IPv4-only guest's router solicitation gets nothing and counts as
//!   `cozyplane_autoconf_ignored_total{reason="no_ipv6"}`, not as a drop.
//!
//! - `spec.dhcp` ([`lab_guest_options_from_the_vpc_and_a_port_override`], one guest): the VPC's
//!   resolver, search domain, routes (option 121, RA route information), MTU and lease reach
//!   `dhclient` and `rdisc6`, the flags' IPv6 resolver staying where the VPC lists none; then
//!   the Port's own resolver and route replace the VPC's and its search domain stays.
//!
//! Scale: [`GUESTS`] dual-stack guests (half on each node, each its own thread) × [`CYCLES`]
//! cycles of both families: 47–50 s of cycles, about 60 s for the whole test, on a 2 vCPU
//! Xeon (debug build); 100 boots of each family, 100 RS→RA. During the cycles every node's
//! uplink (`ul0`) and tunnel device (`cozyplane0`) are captured with a DHCP/DHCPv6/RS/RA
//! filter, and nothing may show there (the requests stay on the pod's link, the answers come
//! from the node; the underlay hosts' own router solicitations are left out by their MACs); a
//! control capture on the tunnel sees the guests' pings to the target on the other node.
//! Every answer each guest's own capture shows (DHCP `yiaddr`, DHCPv6 IA addresses, RA
//! prefixes) names only that guest's Port's addresses, and so do its lease files. No drop is
//! counted on either node, and no `dhclient` is left running. On the wire inside each guest:
//! DISCOVER→ACK, RS→RA and DHCPv6 SOLICIT→REPLY, p50/p99 printed (`docs/benchmarks.md`
//! quotes them).
//!
//! Needs root, `isc-dhcp-client`, `ndisc6` and `tcpdump` (`make deps`), the agent and CNI
//! binaries built. Not here: the 1,000 × 50 scale run (this is 10 × 10), a VPC Service
//! resolved by name through the resolver the guest got (the resolvers handed out here have no
//! DNS feature behind them).

use std::net::{IpAddr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cozyplane_lab::{Lab, LabPod, Netns, start_tcpdump, stop_tcpdump};

mod common;
// The guest's side: the real clients, its sysctls, and what its captures say.
mod autoconf_guest;
use autoconf_guest::*;
use common::{Cp, metric, pod, pod_addrs, tenant, tenant_ranges, vpc_ip};

const CLUSTER_DNS: &str = "10.96.0.10";
const CLUSTER_DNS6: &str = "fd00:96::a";
/// Dual-stack guests, half on each node.
const GUESTS: usize = 10;
/// Lease cycles of both families per guest.
const CYCLES: usize = 10;
/// What the responder's traffic looks like: DHCPv4, DHCPv6, router solicitations and
/// advertisements (no other ICMPv6: a tunnel's own neighbour discovery is not ours).
const AUTOCONF: &str = "udp port 67 or udp port 68 or udp port 546 or udp port 547 or \
                        ( icmp6 and ( ip6[40] == 133 or ip6[40] == 134 ) )";

/// What one guest's cycles measured.
#[derive(Default)]
struct Figures {
    boots4: Vec<Duration>,
    boots6: Vec<Duration>,
    discover_ack: Vec<f64>,
    rs_ra: Vec<f64>,
    solicit_reply: Vec<f64>,
}

/// `CYCLES` lease cycles of both families on guest `g` (Port addresses `v4`, `v6`), pinging
/// `target` (its v4 and v6) after each boot.
fn cycles(g: &LabPod, (v4, v6): (IpAddr, Ipv6Addr), target: (IpAddr, Ipv6Addr)) -> Figures {
    let mut f = Figures::default();
    let mtu = link_mtu(g);
    guest_sysctls(g);
    let dir = tempfile::tempdir().unwrap();
    let cap = dir.path().join("guest.pcap");
    let tcpdump = start_tcpdump(&g.ns, "eth0", AUTOCONF, &cap);
    let d = Dhclient::new(g);
    for cycle in 0..CYCLES {
        let at = format!("cycle {cycle} {}", g.name);
        // --- IPv4.
        bare4(g);
        let t = Instant::now();
        let o = d.run(g, 4, &[]);
        f.boots4.push(t.elapsed());
        assert!(o.status.success(), "{at}: dhclient -4: {}", out(&o));
        let addrs = g.ns.ip_ok(&["-4", "-o", "addr", "show", "dev", "eth0"]);
        assert!(addrs.contains(&format!("inet {v4}/32 ")), "{at}: {addrs}");
        assert_eq!(addrs.lines().count(), 1, "{at}: one address, the Port's: {addrs}");
        let routes = g.ns.ip_ok(&["-4", "route", "show", "dev", "eth0"]);
        assert!(routes.contains("default via 169.254.1.1"), "{at}: {routes}");
        assert!(
            routes.contains("169.254.1.1 "),
            "{at}: the gateway on the link: {routes}"
        );
        let link = g.ns.ip_ok(&["-o", "link", "show", "eth0"]);
        assert!(link.contains(&format!(" mtu {mtu} ")), "{at}: {link}");
        let resolv = d.resolv();
        assert!(
            resolv.contains(&format!("nameserver {CLUSTER_DNS}")),
            "{at}: {resolv}"
        );
        assert!(resolv.contains("t1.svc.cozy.local"), "{at}: {resolv}");
        assert!(g.ns.ping(target.0, 3, 1), "{at}: -> {}", target.0);
        // Renew (dhclient -1 again with the lease file: REQUEST for the leased address).
        let o = d.run(g, 4, &[]);
        assert!(o.status.success(), "{at}: renew: {}", out(&o));
        assert!(
            out(&o).contains(&format!("DHCPACK of {v4}")),
            "{at}: renewal ACKed: {}",
            out(&o)
        );
        let o = d.run(g, 4, &["-r"]);
        assert!(o.status.success(), "{at}: release: {}", out(&o));

        // --- IPv6: the router first (the default route), then the address.
        bare6(g);
        let o = g.ns.exec(&["rdisc6", "-1", "eth0"]);
        let ra = out(&o);
        assert!(o.status.success(), "{at}: rdisc6: {ra}");
        assert!(ra.contains("from fe80::1"), "{at}: {ra}");
        assert!(
            ra.lines()
                .any(|l| l.contains("Stateful address conf.") && l.contains("Yes")),
            "{at}: M: {ra}"
        );
        assert!(
            ra.lines()
                .any(|l| l.contains("Stateful other conf.") && l.contains("Yes")),
            "{at}: O: {ra}"
        );
        assert!(
            ra.lines()
                .any(|l| l.trim_start().starts_with("MTU") && l.contains(&format!(" {mtu} bytes"))),
            "{at}: MTU {mtu}: {ra}"
        );
        assert!(
            ra.lines()
                .any(|l| l.contains("Recursive DNS server") && l.contains(CLUSTER_DNS6)),
            "{at}: RDNSS: {ra}"
        );
        assert!(
            ra.lines()
                .any(|l| l.contains("DNS search list") && l.contains("t1.svc.cozy.local")),
            "{at}: DNSSL: {ra}"
        );
        assert!(!ra.contains("Prefix"), "{at}: no prefix information: {ra}");
        common::wait(&format!("{at}: the default route from the RA"), || {
            let r = g.ns.ip_ok(&["-6", "route", "show", "default", "dev", "eth0"]);
            r.contains("default via fe80::1 ") && r.contains("proto ra")
        });
        let t = Instant::now();
        let o = d.run(g, 6, &[]);
        f.boots6.push(t.elapsed());
        assert!(o.status.success(), "{at}: dhclient -6: {}", out(&o));
        let addrs =
            g.ns.ip_ok(&["-6", "-o", "addr", "show", "dev", "eth0", "scope", "global"]);
        assert!(addrs.contains(&format!("inet6 {v6}/128 ")), "{at}: {addrs}");
        assert_eq!(
            addrs.lines().count(),
            1,
            "{at}: one global address, the Port's /128 (no SLAAC): {addrs}"
        );
        let resolv = d.resolv();
        assert!(
            resolv.contains(&format!("nameserver {CLUSTER_DNS6}")),
            "{at}: {resolv}"
        );
        assert!(resolv.contains("t1.svc.cozy.local"), "{at}: {resolv}");
        // Duplicate address detection (a real guest's) finishes, then the guest reaches
        // another pod over IPv6.
        g.ns.wait_v6_settled();
        assert!(g.ns.ping(target.1, 3, 1), "{at}: -> {}", target.1);
        let o = d.run(g, 6, &["-r"]);
        assert!(o.status.success(), "{at}: release -6: {}", out(&o));
    }
    // Released: no daemon left behind.
    assert_eq!(
        (d.daemon(4), d.daemon(6)),
        (None, None),
        "{}: dhclient still running after its release",
        g.name
    );
    stop_tcpdump(tcpdump);
    let pkts = packets(&cap);
    // Every answer on this guest's link named this guest's addresses only, and so do its
    // leases.
    let mine = [v4.to_string(), v6.to_string()];
    for a in named(&pkts) {
        assert!(
            mine.contains(&a),
            "{}: an answer named {a} (its Port: {mine:?})",
            g.name
        );
    }
    assert!(
        d.leased(4).iter().all(|a| *a == v4),
        "{}: {:?}",
        g.name,
        d.leased(4)
    );
    assert!(
        d.leased(6).iter().all(|a| *a == IpAddr::V6(v6)),
        "{}: {:?}",
        g.name,
        d.leased(6)
    );
    f.discover_ack = exchanges(&pkts, ": Discover", ": ACK");
    f.rs_ra = exchanges(&pkts, "router solicitation", "router advertisement");
    f.solicit_reply = exchanges(&pkts, "dhcp6 solicit", "dhcp6 reply");
    assert!(
        f.discover_ack.len() >= CYCLES,
        "{}: {} DISCOVER→ACK",
        g.name,
        f.discover_ack.len()
    );
    assert!(f.rs_ra.len() >= CYCLES, "{}: {} RS→RA", g.name, f.rs_ra.len());
    f
}

fn v6_of(p: &LabPod) -> Ipv6Addr {
    pod_addrs(p)
        .into_iter()
        .find_map(|a| match a {
            IpAddr::V6(v) => Some(v),
            IpAddr::V4(_) => None,
        })
        .unwrap_or_else(|| panic!("{}: no IPv6 address", p.name))
}

/// A capture of `filter` on `dev` of `ns`, read when [`Leak::count`] stops it.
struct Leak {
    what: String,
    file: PathBuf,
    p: cozyplane_lab::Proc,
}

impl Leak {
    fn start(dir: &Path, (node, ns): (&str, &Netns), dev: &str, filter: &str) -> Self {
        let file = dir.join(format!("{node}-{dev}-{}.pcap", filter.len()));
        let p = start_tcpdump(ns, dev, filter, &file);
        Self {
            what: format!("{node} {dev}"),
            file,
            p,
        }
    }

    fn lines(self) -> (String, Vec<String>) {
        stop_tcpdump(self.p);
        let o = std::process::Command::new("tcpdump")
            .args(["-n", "-e", "-r", self.file.to_str().unwrap()])
            .output()
            .expect("tcpdump -r");
        let l = String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(String::from)
            .collect();
        (self.what, l)
    }
}

#[test]
fn lab_guests_configure_themselves_by_dhcp() {
    Lab::run_on(Lab::dual_stack(2), async |lab: &mut Lab| {
        let dns = format!("{CLUSTER_DNS},{CLUSTER_DNS6}");
        let cp = Cp::start_with_args(
            lab,
            Default::default(),
            &[
                "--autoconf",
                "--autoconf-dns",
                &dns,
                "--autoconf-domain",
                "cozy.local",
            ],
        )
        .await;
        tenant_ranges(&cp, "t1", "blue", &["10.46.0.0/24", "fd00:46::/64"]).await;
        tenant(&cp, "t2", "green", "10.47.0.0/24").await;
        let target = pod(&cp, lab, 1, "t1", "target", Some("t1/blue")).await;
        let target_ips = (IpAddr::V4(vpc_ip(&cp, &target).await), v6_of(&target));
        let mut guests = Vec::new();
        for i in 0..GUESTS {
            let g = pod(&cp, lab, i % 2, "t1", &format!("vm{i}"), Some("t1/blue")).await;
            let ips = (IpAddr::V4(vpc_ip(&cp, &g).await), v6_of(&g));
            guests.push((g, ips));
        }
        let solo = pod(&cp, lab, 0, "t2", "solo", Some("t2/green")).await;
        let solo_ip = vpc_ip(&cp, &solo).await;

        // --- An IPv4-only guest's router solicitation: no answer, ignored, no drop.
        let ignored = |n: usize| {
            metric(
                &lab.nodes[n].metrics(),
                "cozyplane_autoconf_ignored_total{reason=\"no_ipv6\"}",
            )
        };
        let before = ignored(0);
        let o = solo.ns.exec(&["rdisc6", "-1", "-r", "1", "-w", "500", "eth0"]);
        assert!(!o.status.success(), "no RA for an IPv4-only Port: {}", out(&o));
        common::wait("the solicitation counted as ignored", || ignored(0) > before);
        bare4(&solo);
        let d = Dhclient::new(&solo);
        let o = d.run(&solo, 4, &[]);
        assert!(o.status.success(), "solo: dhclient: {}", out(&o));
        let addrs = solo.ns.ip_ok(&["-4", "-o", "addr", "show", "dev", "eth0"]);
        assert!(addrs.contains(&format!("inet {solo_ip}/32 ")), "{addrs}");
        drop(d);

        // --- The cycles, every guest in its own thread, captured on every node's uplink
        // and tunnel device.
        // The underlay hosts' own router solicitations (the nodes', the control namespace's
        // and the bridge's links: an IPv6 link with no router) are theirs, not a guest's:
        // left out by their Ethernet source (every link of those namespaces; a guest's MAC,
        // its Port's, is in its pod namespace, not among them). A guest's solicitation cannot be routed (link-local),
        // so a leaked one would keep its Port's MAC; DHCP of any source counts.
        let mut hosts: Vec<String> = Vec::new();
        for ns in [&lab.ul, &lab.ctl]
            .into_iter()
            .chain(lab.nodes.iter().map(|n| &n.ns))
        {
            let links = ns.ip_ok(&["-o", "link", "show"]);
            hosts.extend(
                links
                    .split(" link/ether ")
                    .skip(1)
                    .filter_map(|l| Some(l.split(' ').next()?.to_string())),
            );
        }
        let filter = format!(
            "udp port 67 or udp port 68 or udp port 546 or udp port 547 or \
             ( icmp6 and ( ip6[40] == 133 or ip6[40] == 134 ) and not ether src {} )",
            hosts.join(" and not ether src ")
        );
        let capdir = tempfile::tempdir().unwrap();
        let mut leaks = Vec::new();
        for n in &lab.nodes {
            for dev in ["ul0", "cozyplane0"] {
                leaks.push(Leak::start(capdir.path(), (&n.name, &n.ns), dev, &filter));
            }
        }
        let control = Leak::start(
            capdir.path(),
            (&lab.nodes[1].name, &lab.nodes[1].ns),
            "cozyplane0",
            "icmp or icmp6",
        );
        let t = Instant::now();
        let figures: Vec<Figures> = std::thread::scope(|s| {
            let hs: Vec<_> = guests
                .iter()
                .map(|(g, ips)| s.spawn(move || cycles(g, *ips, target_ips)))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let took = t.elapsed();
        for l in leaks {
            let (what, lines) = l.lines();
            assert!(
                lines.is_empty(),
                "{what}: autoconfiguration left the link:\n{}",
                lines.join("\n")
            );
        }
        let (what, lines) = control.lines();
        assert!(
            lines.len() >= GUESTS / 2 * CYCLES,
            "{what}: the control capture sees the guests' pings across nodes ({} packets)",
            lines.len()
        );

        // --- A stale lease for another address is NAKed, and the guest ends up with its own.
        let (g, (ip, _)) = &guests[0];
        bare4(g);
        let d = Dhclient::new(g);
        let other = "10.46.0.250";
        std::fs::write(
            d.lease(4),
            format!(
                "lease {{\n  interface \"eth0\";\n  fixed-address {other};\n  option dhcp-server-identifier 169.254.1.1;\n  \
                 renew 4 2099/01/01 00:00:00;\n  rebind 4 2099/01/01 00:00:00;\n  expire 4 2099/01/01 00:00:00;\n}}\n"
            ),
        )
        .unwrap();
        let o = d.run(g, 4, &[]);
        let text = out(&o);
        assert!(text.contains("DHCPNAK"), "a request for {other} is NAKed: {text}");
        let addrs = g.ns.ip_ok(&["-4", "-o", "addr", "show", "dev", "eth0"]);
        assert!(
            addrs.contains(&format!("inet {ip}/32 ")) && !addrs.contains(other),
            "{addrs}"
        );
        let o = d.run(g, 4, &["-r"]);
        assert!(o.status.success(), "release: {}", out(&o));

        // --- Figures.
        let mut all = Figures::default();
        for f in figures {
            all.boots4.extend(f.boots4);
            all.boots6.extend(f.boots6);
            all.discover_ack.extend(f.discover_ack);
            all.rs_ra.extend(f.rs_ra);
            all.solicit_reply.extend(f.solicit_reply);
        }
        eprintln!("{GUESTS} dual-stack guests x {CYCLES} cycles in {took:?}");
        let secs = |v: &[Duration]| v.iter().map(Duration::as_secs_f64).collect::<Vec<_>>();
        for (what, mut v) in [
            ("dhclient -4 start -> bound", secs(&all.boots4)),
            ("dhclient -6 start -> bound", secs(&all.boots6)),
            ("DISCOVER -> ACK on the wire", all.discover_ack.clone()),
            ("RS -> RA on the wire", all.rs_ra.clone()),
            ("DHCPv6 SOLICIT -> REPLY on the wire", all.solicit_reply.clone()),
        ] {
            let n = v.len();
            let (p50, p99) = (pct(&mut v, 0.5), pct(&mut v, 0.99));
            let max = Duration::from_secs_f64(*v.last().unwrap());
            eprintln!("{what}: n={n} p50={p50:?} p99={p99:?} max={max:?}");
        }
        let max4 = *all.boots4.iter().max().unwrap();
        assert!(
            max4 < Duration::from_secs(1),
            "every IPv4 guest bound within 1 s (max {max4:?})"
        );
        for n in &lab.nodes {
            let m = n.metrics();
            for l in m
                .lines()
                .filter(|l| l.starts_with("cozyplane_autoconf") && !l.contains("_bucket"))
            {
                eprintln!("{}: {l}", n.name);
            }
            // Nothing dropped: not the IPv4-only guest's solicitation (ignored), not the
            // underlay hosts' own solicitations on the uplink (not kept for the responder), not
            // the frames the packet sockets queued before their filter (discarded at start).
            let drops: Vec<&str> = m
                .lines()
                .filter(|l| l.starts_with("cozyplane_autoconf_drops_total{") && !l.ends_with(" 0"))
                .collect();
            let log = n.log_text();
            let why: Vec<&str> = log.lines().filter(|l| l.contains("autoconf")).collect();
            assert!(
                drops.is_empty(),
                "{}: drops {drops:?}\n{}",
                n.name,
                why.join("\n")
            );
        }
    });
}

/// Runs `dhclient -4` on a bare link until its resolv.conf has `needle` (the agent's watch
/// of `spec.dhcp` is eventually consistent), then returns the guest's IPv4 routes.
fn bound_with(g: &LabPod, d: &Dhclient, needle: &str) -> String {
    let t = Instant::now();
    loop {
        bare4(g);
        let o = d.run(g, 4, &[]);
        assert!(o.status.success(), "dhclient: {}", out(&o));
        if d.resolv().contains(needle) {
            return g.ns.ip_ok(&["-4", "route", "show", "dev", "eth0"]);
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "no {needle} in {}",
            d.resolv()
        );
        let o = d.run(g, 4, &["-r"]);
        assert!(o.status.success(), "release: {}", out(&o));
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn lab_guest_options_from_the_vpc_and_a_port_override() {
    use cozyplane_apis::v1alpha1::{Port, VPC};
    use kube::api::{Api, Patch, PatchParams};
    use serde_json::json;

    Lab::run_on(Lab::dual_stack(1), async |lab: &mut Lab| {
        let dns = format!("{CLUSTER_DNS},{CLUSTER_DNS6}");
        let args = [
            "--autoconf",
            "--autoconf-dns",
            &dns,
            "--autoconf-domain",
            "cozy.local",
        ];
        let cp = Cp::start_with_args(lab, Default::default(), &args).await;
        tenant_ranges(&cp, "t1", "blue", &["10.46.0.0/24", "fd00:46::/64"]).await;
        let pp = PatchParams::default();
        let vpc = json!({"spec": {"dhcp": {
            "dnsServers": ["10.46.0.53"], "searchDomains": ["corp.example"], "mtu": 1300,
            "routes": [{"destination": "192.168.50.0/24"}, {"destination": "fd50::/48"}],
            "leaseSeconds": 600}}});
        Api::<VPC>::namespaced(cp.sdn.clone(), "t1")
            .patch("blue", &pp, &Patch::Merge(&vpc))
            .await
            .unwrap();
        let g = pod(&cp, lab, 0, "t1", "vm0", Some("t1/blue")).await;
        let ip = vpc_ip(&cp, &g).await;
        let port = cozyplane_apis::net::port_name(common::vni(&cp, "t1", "blue").await, ip.into());
        guest_sysctls(&g);
        g.ns.sysctl("net.ipv6.conf.eth0.accept_ra_rt_info_max_plen=64");
        let d = Dhclient::new(&g);

        // --- The VPC's options.
        let routes = bound_with(&g, &d, "nameserver 10.46.0.53");
        let resolv = d.resolv();
        assert!(resolv.contains("search corp.example"), "{resolv}");
        assert!(
            !resolv.contains(CLUSTER_DNS),
            "the VPC's resolver replaces the flags': {resolv}"
        );
        assert!(routes.contains("192.168.50.0/24 via 169.254.1.1"), "{routes}");
        assert!(routes.contains("default via 169.254.1.1"), "{routes}");
        assert_eq!(link_mtu(&g), "1300");
        let lease = std::fs::read_to_string(d.lease(4)).unwrap();
        assert!(lease.contains("option dhcp-lease-time 600;"), "{lease}");
        bare6(&g);
        // DAD is on: rdisc6 cannot send from a link-local address still tentative.
        g.ns.wait_v6_settled();
        let o = g.ns.exec(&["rdisc6", "-1", "eth0"]);
        let ra = out(&o);
        assert!(o.status.success(), "rdisc6: {ra}");
        assert!(
            ra.lines().any(|l| l.contains("Route") && l.contains("fd50::/48")),
            "route information: {ra}"
        );
        assert!(
            ra.lines()
                .any(|l| l.contains("Recursive DNS server") && l.contains(CLUSTER_DNS6)),
            "no IPv6 resolver in spec.dhcp: the flags' stays: {ra}"
        );
        assert!(
            ra.lines()
                .any(|l| l.trim_start().starts_with("MTU") && l.contains(" 1300 bytes")),
            "{ra}"
        );
        common::wait("the RA's route in the guest's table", || {
            let r = g.ns.ip_ok(&["-6", "route", "show", "fd50::/48"]);
            r.contains("via fe80::1") && r.contains("proto ra")
        });
        let o = d.run(&g, 4, &["-r"]);
        assert!(o.status.success(), "release: {}", out(&o));

        // --- The Port overrides the resolver and the routes; the VPC's search domain stays.
        let over = json!({"spec": {"dhcp": {
            "dnsServers": ["10.46.0.54"], "routes": [{"destination": "192.168.60.0/24"}]}}});
        Api::<Port>::all(cp.sdn.clone())
            .patch(&port, &pp, &Patch::Merge(&over))
            .await
            .unwrap();
        let routes = bound_with(&g, &d, "nameserver 10.46.0.54");
        let resolv = d.resolv();
        assert!(
            resolv.contains("search corp.example") && !resolv.contains("10.46.0.53"),
            "{resolv}"
        );
        assert!(routes.contains("192.168.60.0/24 via 169.254.1.1"), "{routes}");
        assert!(
            !routes.contains("192.168.50.0/24"),
            "the Port's routes replace the VPC's: {routes}"
        );
        let o = d.run(&g, 4, &["-r"]);
        assert!(o.status.success(), "release: {}", out(&o));
        assert_eq!(d.daemon(4), None, "dhclient still running after its release");
        drop(d);
    });
}
