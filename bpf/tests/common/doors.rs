//! Set-up and counters of the north-south doors (Floating IPs, LoadBalancer gate, meter),
//! and a network namespace with a route out for the paths that leave by `bpf_fib_lookup`.

use std::net::IpAddr;
use std::process::Command;

use cozyplane_bpf::abi::{Addr, DoorKey, DoorStats, SnatConf};
use cozyplane_bpf::maps::{
    door_stats::{self, DoorStatsMap},
    fip_in::{self, FipInMap},
    fip_out::{self, FipOutMap},
    lbg_front::{self, LbgFrontMap},
    lbg_ingress::{self, LbgIngressMap},
    lbg_rev::{self, LbgRevMap},
    remotes::{self, RemotesMap},
    snat_addrs::{self, SnatAddrsMap},
    snat_conf::{self, SnatConfMap},
    snat_gws::{self, SnatGwsMap},
};

use super::Datapath;
use super::fixtures::{ip, v4};

/// The uplink program.
pub const FROM_UPLINK: &str = "sdn_from_uplink";

/// The MAC the uplink's frames arrive with (the router's) and are addressed to (ours).
pub const ROUTER_MAC: [u8; 6] = [0x0a, 0, 0, 0, 0, 0xfe];
pub const UPLINK_MAC: [u8; 6] = [0x0a, 0, 0, 0, 0, 0x01];

/// The uplink's IPv4 address in [`in_routed_netns`], which the masquerade NATs to.
pub const NODE4: &str = "192.0.2.1";

/// The ifindex of `dev` in the calling thread's namespace.
pub fn ifindex(dev: &str) -> u32 {
    let out = Command::new("ip")
        .args(["-o", "link", "show", dev])
        .output()
        .unwrap();
    let s = String::from_utf8_lossy(&out.stdout);
    s.split(':')
        .next()
        .and_then(|i| i.trim().parse().ok())
        .unwrap_or_else(|| panic!("no ifindex for {dev}: {s}"))
}

/// This node's SNAT out of `up0` (call inside [`in_routed_netns`]): net-0 masquerade to
/// [`NODE4`] over the ports `masq` (inclusive); the gateway's range from `gw_min` in
/// `gw_shards` shards of `gw_shard_size` ports, this node owning shard 0; and each VPC of
/// `gateways` NATing to its IPv4 address.
pub fn snat_ipv4(
    dp: &mut Datapath,
    masq: (u16, u16),
    (gw_min, gw_shard_size, gw_shards): (u16, u16, u16),
    gateways: &[(u32, &str)],
) {
    let c = SnatConf {
        flags: SnatConf::F_MASQ | SnatConf::F_HAVE4,
        uplink_ifindex: ifindex("up0"),
        node4: Addr::from(v4(NODE4)),
        masq_min: masq.0,
        masq_max: masq.1,
        gw_min,
        gw_shard_size,
        gw_shards,
        shard: 0,
        ..SnatConf::default()
    };
    SnatConfMap::try_from(dp.map_mut(snat_conf::NAME))
        .unwrap()
        .set(c)
        .unwrap();
    let mut addrs = SnatAddrsMap::try_from(dp.map_mut(snat_addrs::NAME)).unwrap();
    addrs.insert(ip(NODE4), 0).unwrap();
    for (net, nat) in gateways {
        addrs.insert(ip(nat), *net).unwrap();
    }
    let mut gws = SnatGwsMap::try_from(dp.map_mut(snat_gws::NAME)).unwrap();
    for (net, nat) in gateways {
        gws.upsert(*net, (Some(v4(nat)), None)).unwrap();
    }
}

/// The Floating IP `public` of `vpc_ip` in `net`, both directions.
pub fn floating_ip(dp: &mut Datapath, public: &str, net: u32, vpc_ip: &str) {
    FipInMap::try_from(dp.map_mut(fip_in::NAME))
        .unwrap()
        .upsert(ip(public), net, ip(vpc_ip))
        .unwrap();
    FipOutMap::try_from(dp.map_mut(fip_out::NAME))
        .unwrap()
        .upsert(net, ip(vpc_ip), ip(public))
        .unwrap();
}

/// `cidr` is internal for `net` (0: the whole cluster): [`super::fixtures::inside`] in CIDR form.
pub fn internal_range(dp: &mut Datapath, net: u32, cidr: &str) {
    let (base, len) = cidr.split_once('/').unwrap();
    super::fixtures::inside(dp, net, base, len.parse().unwrap());
}

/// `vpc_ip` of `net` lives on the node `node`.
pub fn remote(dp: &mut Datapath, net: u32, vpc_ip: &str, node: &str) {
    RemotesMap::try_from(dp.map_mut(remotes::NAME))
        .unwrap()
        .upsert(net, ip(vpc_ip), ip(node))
        .unwrap();
}

/// A LoadBalancer frontend `addr:port/proto` of VPC `net` with `backends`, and the way
/// back for each backend.
pub fn lb_frontend(dp: &mut Datapath, addr: &str, port: u16, proto: u8, net: u32, backends: &[(&str, u16)]) {
    let be: Vec<(IpAddr, u16)> = backends.iter().map(|(a, p)| (ip(a), *p)).collect();
    LbgFrontMap::try_from(dp.map_mut(lbg_front::NAME))
        .unwrap()
        .upsert((ip(addr), port, proto), net, 0, &be)
        .unwrap();
    let mut rev = LbgRevMap::try_from(dp.map_mut(lbg_rev::NAME)).unwrap();
    for (a, p) in be {
        rev.upsert((net, (a, p, proto)), (ip(addr), port, proto)).unwrap();
    }
}

/// A NodePort `node:port/proto` of this node into VPC `net`: gated only.
pub fn lb_node_port(dp: &mut Datapath, node: &str, port: u16, proto: u8, net: u32) {
    LbgFrontMap::try_from(dp.map_mut(lbg_front::NAME))
        .unwrap()
        .upsert(
            (ip(node), port, proto),
            net,
            cozyplane_bpf::abi::LbgFront::F_GATE_ONLY,
            &[],
        )
        .unwrap();
}

/// The VPC's gateway admits LoadBalancer ingress (or no longer does).
pub fn lb_admit(dp: &mut Datapath, net: u32, admit: bool) {
    let mut m = LbgIngressMap::try_from(dp.map_mut(lbg_ingress::NAME)).unwrap();
    if admit {
        m.admit(net).unwrap();
    } else {
        m.refuse(net).unwrap();
    }
}

/// The counters of `{net, door, dir}`, zero if the row does not exist.
pub fn door(dp: &Datapath, net: u32, door: u8, dir: u8) -> DoorStats {
    DoorStatsMap::try_from(dp.map(door_stats::NAME))
        .unwrap()
        .entries()
        .unwrap()
        .into_iter()
        .find(|(k, _)| k.net == net && k.door == door && k.dir == dir)
        .map(|(_, v)| v)
        .unwrap_or_default()
}

/// Every row of `sdn_door_stats`.
pub fn door_rows(dp: &Datapath) -> Vec<(DoorKey, DoorStats)> {
    DoorStatsMap::try_from(dp.map(door_stats::NAME))
        .unwrap()
        .entries()
        .unwrap()
}

fn sh(args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .expect("run ip/sysctl");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `f` on a thread of its own in a new network namespace (gone when the thread ends,
/// whatever happens) whose forwarding is on and which has a default route in each family
/// through an uplink `up0` (one end of a veth pair) (192.0.2.1/24 via .254; 2001:db8:ff::1/64 via ::fe). A test
/// run's skb is on that namespace's `lo`, and `bpf_fib_lookup` resolves there.
pub fn in_routed_netns<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(move || {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).expect("unshare(CLONE_NEWNET)");
        sh(&["ip", "link", "set", "lo", "up"]);
        // A veth pair, as this kernel has no dummy devices; the far end only gives carrier.
        sh(&["ip", "link", "add", "up0", "type", "veth", "peer", "name", "up1"]);
        sh(&["ip", "link", "set", "up1", "up"]);
        sh(&["ip", "link", "set", "up0", "up"]);
        sh(&["ip", "addr", "add", "192.0.2.1/24", "dev", "up0"]);
        sh(&[
            "ip",
            "-6",
            "addr",
            "add",
            "2001:db8:ff::1/64",
            "dev",
            "up0",
            "nodad",
        ]);
        sh(&["ip", "route", "add", "default", "via", "192.0.2.254"]);
        sh(&["ip", "-6", "route", "add", "default", "via", "2001:db8:ff::fe"]);
        sh(&[
            "sysctl",
            "-qw",
            "net.ipv4.ip_forward=1",
            "net.ipv6.conf.all.forwarding=1",
        ]);
        f()
    })
    .join()
    .unwrap_or_else(|e| std::panic::resume_unwind(e))
}
