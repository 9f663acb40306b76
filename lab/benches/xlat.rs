//! NAT46 benchmark on the netns lab (issue 28): TCP throughput and request/response rate from
//! a default-network pod to a VPC pod's IPv4 fabric address (its `status.podIP`), through the
//! fabric bridge, for a v6-only VPC pod (translated: IPv4 ↔ IPv6, `lib/xlat.h`) against a
//! v4 VPC pod (the same bridge without the translation), interleaved in the same run. Needs
//! root and the agent and CNI binaries (release for recorded figures, as `datapath.rs`):
//!
//! ```text
//! cargo bench -p cozyplane-lab --bench xlat
//! ```
//!
//! One node (IPv4 default network); client c (net 0), servers s (VPC `six`, `fd00:6::/64`)
//! and d (VPC `four`, `10.61.0.0/24`). *Throughput*: iperf3, `XLAT_SECS` s (default 5) after
//! 1 s omitted, one stream, median of `XLAT_ROUNDS` (default 5). *Requests*: iperf3's reverse
//! is not a rate; `ping -f`-like request/response is approximated by 1-byte TCP_RR through
//! `tests/vip/probe.py tcp` (a connection, a line, a close each), `XLAT_CONNS` (default 300)
//! one after the other. Figures are printed, never asserted; the ratio translated/same-family
//! is the one to watch (issue 28's target: ≥ 95 %).

use std::net::IpAddr;
use std::process::Stdio;

use cozyplane_lab::{Lab, LabPod, Proc, bin_dir, require_root, result_ip};

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "kit/mod.rs"]
mod kit;
use common::{Cp, pod, tenant};
use kit::{median, probe, setup_rate, throughput};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    require_root();
    let _ = bin_dir();
    Lab::run(1, body);
}

/// The servers of `p`: iperf3 on 5201 and the probe's line server on 8080, both families.
fn serve(p: &LabPod) -> Vec<Proc> {
    let mut line =
        p.ns.command(&["python3", &probe(), "serve", &p.name])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
    let mut first = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(line.stdout.take().unwrap()),
        &mut first,
    )
    .unwrap();
    let iperf =
        p.ns.command(&["iperf3", "-s", "-p", "5201"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
    vec![Proc(line), Proc(iperf)]
}

async fn body(lab: &mut Lab) {
    let (secs, rounds, conns) = (
        env("XLAT_SECS", 5) as u32,
        env("XLAT_ROUNDS", 5),
        env("XLAT_CONNS", 300),
    );
    let cp = Cp::start(lab).await;
    let lab = &*lab;
    tenant(&cp, "t1", "six", "fd00:6::/64").await;
    tenant(&cp, "t2", "four", "10.61.0.0/24").await;
    let c = pod(&cp, lab, 0, "default", "c", None).await;
    let s = pod(&cp, lab, 0, "t1", "s", Some("t1/six")).await;
    let d = pod(&cp, lab, 0, "t2", "d", Some("t2/four")).await;
    let (fs, fd) = (result_ip(&s.result).unwrap(), result_ip(&d.result).unwrap());
    assert!(
        common::pod_addrs(&s).iter().all(IpAddr::is_ipv6),
        "s is v6-only inside: {:?}",
        common::pod_addrs(&s)
    );
    let _servers = [serve(&s), serve(&d)];

    println!("NAT46 bench: c (net 0) -> s (v6-only VPC, fabric {fs}) and d (v4 VPC, fabric {fd}), one node");
    let (mut ts, mut td, mut rs, mut rd) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        td.push(throughput(&c, fd, 5201, secs));
        ts.push(throughput(&c, fs, 5201, secs));
        rd.push(setup_rate(&c, fd, 8080, conns));
        rs.push(setup_rate(&c, fs, 8080, conns));
    }
    let (ts, td, rs, rd) = (median(ts), median(td), median(rs), median(rd));
    println!(
        "TCP throughput (iperf3 {secs} s, median of {rounds}): same family {td:.2} Gbit/s, translated {ts:.2} Gbit/s ({:.1} %)",
        100.0 * ts / td
    );
    println!(
        "connections ({conns} sequential, a line each, median of {rounds}): same family {rd:.0}/s, translated {rs:.0}/s ({:.1} %)",
        100.0 * rs / rd
    );
}
