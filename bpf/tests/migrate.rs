//! Live migration's endpoint gate (`lib/migrate.h`) through `BPF_PROG_TEST_RUN`: a prepared
//! target launcher's endpoint (flagged migrating, its relay standing by) receives nothing, a
//! counted `DROP_MIG_STANDBY`, until its VM announces itself on the veth (a gratuitous ARP or
//! QEMU's RARP); a pod's ordinary ARP request is no announcement. Without the flag nothing of
//! this runs. The relay's copy to the other node needs a tunnel device (`lab/tests/migration.rs`
//! proves it with real packets). Needs root.

mod common;

use common::fixtures::*;
use common::pkt::{self, ICMP};
use common::{Datapath, LO, TC_ACT_REDIRECT, TC_ACT_SHOT};
use cozyplane_bpf::DropReason;
use cozyplane_bpf::abi::Endpoint;
use cozyplane_bpf::maps::endpoints::{self, EndpointsMap};
use cozyplane_bpf::maps::migrations::{self, MigrationsMap};

const VM: &str = "10.0.0.5";
const NEIGHBOUR: &str = "10.0.0.6";
const MAC_A2: [u8; 6] = [0x0a, 0, 0, 0, 0, 0xa2];
/// The source launcher's node, which the target relays to.
const SOURCE_NODE: &str = "192.0.2.20";

/// The VM's target launcher on lo (a migrating endpoint whose relay stands by), and a
/// neighbour of its VPC on this node that pings it.
fn target(migrating: bool) -> Datapath {
    let mut dp = Datapath::load(&cfg());
    vpc_pod(&mut dp, VPC_A, NEIGHBOUR, MAC_A2);
    let flags = if migrating { Endpoint::F_MIGRATING } else { 0 };
    EndpointsMap::try_from(dp.map_mut(endpoints::NAME))
        .unwrap()
        .upsert_flagged(VPC_A, ip(VM), LO, MAC_A1, flags)
        .unwrap();
    MigrationsMap::try_from(dp.map_mut(migrations::NAME))
        .unwrap()
        .upsert(LO, ip(SOURCE_NODE), true)
        .unwrap();
    dp
}

fn ping() -> Vec<u8> {
    pkt::ipv4(MAC_A2, cfg().gw_mac, v4(NEIGHBOUR), v4(VM), ICMP, 7, 7, 8)
}

fn standby(dp: &Datapath) -> bool {
    MigrationsMap::try_from(dp.map(migrations::NAME))
        .unwrap()
        .flags(LO)
        .unwrap()
        .expect("the relay entry")
        & migrations::F_STANDBY
        != 0
}

#[test]
fn a_standby_target_receives_nothing_until_its_vm_announces_itself() {
    let dp = target(true);
    let out = dp.run(FROM_POD, &ping(), LO, 0);
    assert_dropped(&dp, out.verdict, DropReason::MigStandby);

    // The launcher's own ARP for its gateway is no announcement.
    let gw = cfg().gw_ipv4;
    dp.run(FROM_POD, &pkt::arp_request(MAC_A1, v4(VM), gw), LO, 0);
    assert!(
        standby(&dp),
        "an ARP request for the gateway left the target standing by"
    );
    assert_eq!(dp.run(FROM_POD, &ping(), LO, 0).verdict, TC_ACT_SHOT);

    // The VM's gratuitous ARP after the switch: delivered from then on.
    dp.run(FROM_POD, &pkt::arp_request(MAC_A1, v4(VM), v4(VM)), LO, 0);
    assert!(!standby(&dp), "the gratuitous ARP ended the standby");
    let out = dp.run(FROM_POD, &ping(), LO, 0);
    assert_eq!(out.verdict, TC_ACT_REDIRECT, "delivered to the VM");
    assert_eq!(pkt::parse_v4(&out.packet).dst_mac, MAC_A1);
}

#[test]
fn qemus_rarp_announces_the_vm_too() {
    let dp = target(true);
    let mut rarp = pkt::arp_request(MAC_A1, v4("0.0.0.0"), v4("0.0.0.0"));
    rarp[12..14].copy_from_slice(&0x8035u16.to_be_bytes());
    rarp[20..22].copy_from_slice(&3u16.to_be_bytes()); // reverse request
    dp.run(FROM_POD, &rarp, LO, 0);
    assert!(!standby(&dp), "QEMU's RARP ended the standby");
    assert_eq!(dp.run(FROM_POD, &ping(), LO, 0).verdict, TC_ACT_REDIRECT);
}

// An endpoint without the migrating flag never looks at the relay: delivered at once.
#[test]
fn an_endpoint_that_is_not_migrating_is_not_gated() {
    let dp = target(false);
    assert_eq!(dp.run(FROM_POD, &ping(), LO, 0).verdict, TC_ACT_REDIRECT);
    assert_eq!(total_drops(&dp), 0);
}
