//! Map set-up and drop accounting shared by the program tests.

use std::net::{IpAddr, Ipv4Addr};

use cozyplane_bpf::maps::{
    drops::{self, DropsMap},
    endpoints::{self, EndpointsMap},
    ports::{self, PortsMap},
};
use cozyplane_bpf::{DatapathConfig, DropReason};

use super::pkt::{self, UDP};
use super::{Datapath, LO, TC_ACT_SHOT};

/// The source tc program of pod traffic.
pub const FROM_POD: &str = "sdn_from_pod";

/// VNIs of the test VPCs.
pub const VPC_A: u32 = 100;
pub const VPC_B: u32 = 200;

/// MACs of the test pods.
pub const MAC_A1: [u8; 6] = [0x0a, 0, 0, 0, 0, 0xa1];
pub const MAC_B1: [u8; 6] = [0x0a, 0, 0, 0, 0, 0xb1];

pub fn v4(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

pub fn cfg() -> DatapathConfig {
    // The tunnel "device" is lo too: a redirect target is not validated by a test run.
    DatapathConfig {
        tunnel_ifindex: LO,
        ..DatapathConfig::default()
    }
}

/// `ifindex` belongs to `net`.
pub fn port(dp: &mut Datapath, ifindex: u32, net: u32) {
    PortsMap::try_from(dp.map_mut(ports::NAME))
        .unwrap()
        .set(ifindex, net)
        .unwrap();
}

pub fn endpoint(dp: &mut Datapath, net: u32, addr: &str, ifindex: u32, mac: [u8; 6]) {
    EndpointsMap::try_from(dp.map_mut(endpoints::NAME))
        .unwrap()
        .upsert(net, ip(addr), ifindex, mac)
        .unwrap();
}

/// `addr/len` is inside `net` (net 0: cluster-internal) in `sdn_internal`, as
/// `agent/src/internal.rs` writes it.
pub fn inside(dp: &mut Datapath, net: u32, addr: &str, len: u8) {
    cozyplane_bpf::maps::internal::InternalMap::try_from(dp.map_mut(cozyplane_bpf::maps::internal::NAME))
        .unwrap()
        .insert((net, ip(addr), len))
        .unwrap();
}

/// A VPC pod of `net` on this node: port on lo, endpoint on lo.
pub fn vpc_pod(dp: &mut Datapath, net: u32, addr: &str, mac: [u8; 6]) {
    port(dp, LO, net);
    endpoint(dp, net, addr, LO, mac);
}

/// A UDP datagram from `src` to `dst`, sent to the gateway MAC.
pub fn udp4(src_mac: [u8; 6], src: &str, dst: &str) -> Vec<u8> {
    pkt::ipv4(src_mac, cfg().gw_mac, v4(src), v4(dst), UDP, 5000, 53, 0)
}

pub fn drops_of(dp: &Datapath, reason: DropReason) -> u64 {
    DropsMap::try_from(dp.map(drops::NAME))
        .unwrap()
        .get(reason)
        .unwrap()
        .packets
}

/// Sum of all drop counters: a test that expects one drop reason also proves no other.
pub fn total_drops(dp: &Datapath) -> u64 {
    DropsMap::try_from(dp.map(drops::NAME))
        .unwrap()
        .all()
        .unwrap()
        .iter()
        .map(|(_, s)| s.packets)
        .sum()
}

#[track_caller]
pub fn assert_dropped(dp: &Datapath, verdict: u32, reason: DropReason) {
    assert_eq!(verdict, TC_ACT_SHOT, "expected a drop for {reason:?}");
    assert_eq!(drops_of(dp, reason), 1, "{reason:?} counted once");
    assert_eq!(total_drops(dp), 1, "no other reason counted");
}

/// The sdn_to_pod program: what the host stack routes into a pod.
pub const TO_POD: &str = "sdn_to_pod";

/// The fabric IP `fabric` is bridged to the VPC address `vpc` of `net`.
pub fn bridge(dp: &mut Datapath, fabric: &str, net: u32, vpc: &str) {
    cozyplane_bpf::maps::bridges::BridgesMap::try_from(dp.map_mut(cozyplane_bpf::maps::bridges::NAME))
        .unwrap()
        .upsert(ip(fabric), net, ip(vpc))
        .unwrap();
}
