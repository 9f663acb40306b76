//! The Service proxy on the default network (`lib/lb.h` at `sdn_from_pod`'s net-0 branch)
//! through `BPF_PROG_TEST_RUN`: a net-0 pod's packet to a Service frontend (net 0) is
//! DNATed to a backend and handed to the host like any net-0 packet; a local backend's reply
//! leaves with the frontend as its source; a frontend without backends answers a SYN with
//! a reset and drops the rest (counted); both families. How NetworkPolicy sees these flows is `policy_np.rs`'s; the overlay side
//! of the reverse NAT needs tunnel metadata a test run cannot attach (the labs cover it).
//! Needs root; fails (never skips) without it.

mod common;

use std::net::IpAddr;

use common::fixtures::*;
use common::pkt::{self, TCP, UDP};
use common::{Datapath, LO, TC_ACT_OK, TC_ACT_REDIRECT};
use cozyplane_bpf::DropReason;
use cozyplane_bpf::abi::{LB_SLOTS, LbSvc};
use cozyplane_bpf::maps::{
    lb_backends::{self, LbBackendsMap},
    lb_maglev::{self, LbMaglevMap},
    lb_stats::{self, LbStatsMap},
    lb_svc::{self, Frontend, LbSvcMap},
};

const CLUSTER_IP: &str = "10.96.0.10";
const CLIENT: &str = "10.244.1.2";
const BACKEND: &str = "10.244.1.3";
const CLUSTER_IP6: &str = "fd96::10";
const CLIENT6: &str = "fd44::2";
const BACKEND6: &str = "fd44::3";

fn mac_of(a: IpAddr) -> [u8; 6] {
    let o = match a {
        IpAddr::V4(v) => v.octets(),
        IpAddr::V6(v) => v.octets()[12..].try_into().unwrap(),
    };
    [0x0a, 0x50, o[0], o[1], o[2], o[3]]
}

/// A node whose net-0 pods are `pods` (their veth is `lo`); the pod ranges are
/// cluster-internal, as the agent writes them.
fn node(pods: &[&str]) -> Datapath {
    let mut dp = Datapath::load(&cfg());
    port(&mut dp, LO, 0);
    inside(&mut dp, 0, "10.244.0.0", 16);
    inside(&mut dp, 0, "fd44::", 16);
    for p in pods {
        endpoint(&mut dp, 0, p, LO, mac_of(ip(p)));
    }
    dp
}

/// Frontend `vip:port/proto` of net 0 (table `id`) balanced over `backends`.
fn service(dp: &mut Datapath, id: u32, vip: &str, proto: u8, port: u16, backends: &[(u32, &str, u16)]) {
    for (bid, addr, tport) in backends {
        LbBackendsMap::try_from(dp.map_mut(lb_backends::NAME))
            .unwrap()
            .upsert(*bid, 0, ip(addr), *tport)
            .unwrap();
    }
    let ids: Vec<u32> = backends.iter().map(|b| b.0).collect();
    let slots: Vec<u32> = (0..LB_SLOTS)
        .map(|i| if ids.is_empty() { 0 } else { ids[i % ids.len()] })
        .collect();
    LbMaglevMap::try_from(dp.map_mut(lb_maglev::NAME))
        .unwrap()
        .set(id, &slots)
        .unwrap();
    let f = Frontend {
        net: 0,
        vip: ip(vip),
        proto,
        port,
    };
    let v = LbSvc {
        id,
        count: backends.len() as u32,
        affinity: 0,
        flags: 1,
    };
    LbSvcMap::try_from(dp.map_mut(lb_svc::NAME))
        .unwrap()
        .upsert(f, v)
        .unwrap();
}

fn packet(s: &str, sport: u16, d: &str, dport: u16, proto: u8) -> Vec<u8> {
    match (ip(s), ip(d)) {
        (IpAddr::V4(s4), IpAddr::V4(d4)) => {
            pkt::ipv4(mac_of(ip(s)), cfg().gw_mac, s4, d4, proto, sport, dport, 0)
        }
        (IpAddr::V6(s6), IpAddr::V6(d6)) => {
            pkt::ipv6(mac_of(ip(s)), cfg().gw_mac, s6, d6, proto, sport, dport, 0)
        }
        _ => unreachable!(),
    }
}

/// The packet's `(src, sport, dst, dport)` after a run that passed it to the host.
fn to_host(dp: &Datapath, p: &[u8]) -> (IpAddr, u16, IpAddr, u16) {
    let out = dp.run("sdn_from_pod", p, LO, 0);
    assert_eq!(out.verdict, TC_ACT_OK, "handed to the host stack");
    if out.packet[12..14] == [0x08, 0x00] {
        pkt::assert_v4_checksums(&out.packet);
        let q = pkt::parse_v4(&out.packet);
        (q.src.into(), q.sport, q.dst.into(), q.dport)
    } else {
        let q = pkt::parse_v6(&out.packet);
        (q.src.into(), q.sport, q.dst.into(), q.dport)
    }
}

#[test]
fn a_cluster_ip_is_dnated_and_the_reply_comes_from_it_in_both_families() {
    let mut dp = node(&[CLIENT, BACKEND, CLIENT6, BACKEND6]);
    service(&mut dp, 1, CLUSTER_IP, TCP, 80, &[(1, BACKEND, 8080)]);
    service(&mut dp, 2, CLUSTER_IP6, UDP, 53, &[(2, BACKEND6, 5353)]);
    for (client, vip, port, proto, backend, tport) in [
        (CLIENT, CLUSTER_IP, 80, TCP, BACKEND, 8080),
        (CLIENT6, CLUSTER_IP6, 53, UDP, BACKEND6, 5353),
    ] {
        let fwd = to_host(&dp, &packet(client, 40000, vip, port, proto));
        assert_eq!(fwd, (ip(client), 40000, ip(backend), tport), "to the backend");
        let back = to_host(&dp, &packet(backend, tport, client, 40000, proto));
        assert_eq!(back, (ip(vip), port, ip(client), 40000), "from the frontend");
        // A packet of the backend that answers no balanced flow is untouched.
        let other = to_host(&dp, &packet(backend, tport, client, 40001, proto));
        assert_eq!(other, (ip(backend), tport, ip(client), 40001));
    }
    // Another port of the ClusterIP is no frontend: to the host as it was.
    let p = to_host(&dp, &packet(CLIENT, 40000, CLUSTER_IP, 81, TCP));
    assert_eq!(p.2, ip(CLUSTER_IP));
    let s = LbStatsMap::try_from(dp.map(lb_stats::NAME))
        .unwrap()
        .get()
        .unwrap();
    assert_eq!((s.flows, s.misses), (2, 0));
    assert_eq!(total_drops(&dp), 0);
}

// kube-proxy's reject: a SYN to a frontend without endpoints comes back as the frontend's
// RST|ACK (acking the SYN) out of the client's own veth; a UDP datagram is a counted miss.
#[test]
fn a_cluster_ip_without_endpoints_resets_a_syn_and_drops_the_rest() {
    let mut dp = node(&[CLIENT, CLIENT6]);
    service(&mut dp, 1, CLUSTER_IP, TCP, 80, &[]);
    service(&mut dp, 2, CLUSTER_IP6, TCP, 80, &[]);
    service(&mut dp, 3, CLUSTER_IP, UDP, 53, &[]);
    for (client, vip) in [(CLIENT, CLUSTER_IP), (CLIENT6, CLUSTER_IP6)] {
        let out = dp.run("sdn_from_pod", &packet(client, 40000, vip, 80, TCP), LO, 0);
        assert_eq!(out.verdict, TC_ACT_REDIRECT, "{vip}: the reset goes back");
        let r = &out.packet;
        assert_eq!(r[0..6], mac_of(ip(client)), "to the client's MAC");
        assert_eq!(r[6..12], cfg().gw_mac, "from the gateway's");
        let (l4, addrs) = if ip(client).is_ipv4() {
            pkt::assert_v4_checksums(r);
            let q = pkt::parse_v4(r);
            (34, (IpAddr::from(q.src), q.sport, IpAddr::from(q.dst), q.dport))
        } else {
            pkt::assert_v6_checksums(r);
            let q = pkt::parse_v6(r);
            (54, (IpAddr::from(q.src), q.sport, IpAddr::from(q.dst), q.dport))
        };
        assert_eq!(r.len(), l4 + 20, "headers only");
        assert_eq!(addrs, (ip(vip), 80, ip(client), 40000));
        assert_eq!(r[l4 + 13], 0x14, "RST|ACK");
        assert_eq!(r[l4 + 8..l4 + 12], 2u32.to_be_bytes(), "acks the SYN (seq 1)");
    }
    let out = dp.run("sdn_from_pod", &packet(CLIENT, 40000, CLUSTER_IP, 53, UDP), LO, 0);
    assert_dropped(&dp, out.verdict, DropReason::VipNoBackend);
    let s = LbStatsMap::try_from(dp.map(lb_stats::NAME))
        .unwrap()
        .get()
        .unwrap();
    assert_eq!(s.misses, 3);
}
