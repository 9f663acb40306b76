//! Per-door metering (`lib/meter.h`, `sdn_door_stats`) through `BPF_PROG_TEST_RUN`: each
//! crossing is counted once, in bytes and packets, per VPC, door and direction; refusals
//! apart; nothing else is touched. Needs root; fails (never skips) without it.

mod common;

use common::doors::*;
use common::fixtures::*;
use common::pkt::{self, TCP, UDP};
use common::{Datapath, LO};
use cozyplane_bpf::abi::DoorKey;

#[test]
fn every_crossing_counts_bytes_and_packets_on_its_own_row() {
    in_routed_netns(|| {
        let mut dp = Datapath::load(&cfg());
        vpc_pod(&mut dp, VPC_A, "10.0.0.1", MAC_A1);
        endpoint(&mut dp, VPC_B, "10.0.0.1", 7, MAC_B1);
        floating_ip(&mut dp, "203.0.113.10", VPC_A, "10.0.0.1");
        lb_frontend(&mut dp, "203.0.113.20", 80, TCP, VPC_B, &[("10.0.0.1", 80)]);

        let (mut in_bytes, mut out_bytes) = (0u64, 0u64);
        for n in 0..5u16 {
            let p = pkt::ipv4(
                ROUTER_MAC,
                UPLINK_MAC,
                v4("198.51.100.7"),
                v4("203.0.113.10"),
                UDP,
                1000 + n,
                53,
                0,
            );
            in_bytes += p.len() as u64;
            dp.run(FROM_UPLINK, &p, LO, 0);
        }
        for n in 0..3u16 {
            let p = pkt::ipv4(
                MAC_A1,
                cfg().gw_mac,
                v4("10.0.0.1"),
                v4("198.51.100.7"),
                UDP,
                53,
                1000 + n,
                0,
            );
            out_bytes += p.len() as u64;
            dp.run(FROM_POD, &p, LO, 0);
        }
        // VPC b refuses LoadBalancer traffic (its gateway does not admit it).
        let p = pkt::ipv4(
            ROUTER_MAC,
            UPLINK_MAC,
            v4("198.51.100.7"),
            v4("203.0.113.20"),
            TCP,
            1,
            80,
            0,
        );
        dp.run(FROM_UPLINK, &p, LO, 0);

        let rin = door(&dp, VPC_A, DoorKey::EIP, DoorKey::IN);
        let rout = door(&dp, VPC_A, DoorKey::EIP, DoorKey::OUT);
        assert_eq!((rin.packets, rin.bytes), (5, in_bytes));
        assert_eq!((rout.packets, rout.bytes), (3, out_bytes));
        let lb = door(&dp, VPC_B, DoorKey::LOADBALANCER, DoorKey::IN);
        assert_eq!(
            (lb.packets, lb.refused_packets, lb.refused_bytes),
            (0, 1, p.len() as u64)
        );
        let mut rows: Vec<_> = door_rows(&dp)
            .into_iter()
            .map(|(k, _)| (k.net, k.door, k.dir))
            .collect();
        rows.sort_unstable();
        assert_eq!(
            rows,
            [
                (VPC_A, DoorKey::EIP, DoorKey::IN),
                (VPC_A, DoorKey::EIP, DoorKey::OUT),
                (VPC_B, DoorKey::LOADBALANCER, DoorKey::IN),
            ],
            "no other row"
        );
    });
}

#[test]
fn east_west_traffic_is_no_door_crossing() {
    let mut dp = Datapath::load(&cfg());
    vpc_pod(&mut dp, VPC_A, "10.0.0.1", MAC_A1);
    endpoint(&mut dp, VPC_A, "10.0.0.2", LO, [0x0a, 0, 0, 0, 0, 0xa2]);
    floating_ip(&mut dp, "203.0.113.10", VPC_A, "10.0.0.1");
    let r = dp.run(FROM_POD, &udp4(MAC_A1, "10.0.0.1", "10.0.0.2"), LO, 0);
    assert_eq!(r.verdict, common::TC_ACT_REDIRECT);
    assert!(
        door_rows(&dp).is_empty(),
        "a pod of its own VPC is no door, Floating IP or not"
    );
}
