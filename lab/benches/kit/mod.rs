//! Measurements the lab benches share: connection set-up through `tests/vip/probe.py`, iperf3
//! throughput, medians. Figures only: nothing here asserts a speed.

use std::net::Ipv4Addr;
use std::time::Instant;

use cozyplane_lab::LabPod;
use serde_json::Value;

/// The probe of `tests/vip/probe.py` (a line server, a sequential TCP client).
pub(crate) fn probe() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vip/probe.py").to_string()
}

/// Connections per second from `c` to `ip:port`, `conns` one after the other, each answered
/// by the server's first line (a full handshake and a round trip).
pub(crate) fn setup_rate(c: &LabPod, ip: Ipv4Addr, port: u16, conns: usize) -> f64 {
    let t = Instant::now();
    let out = c.ns.exec(&[
        "python3",
        &probe(),
        "tcp",
        &ip.to_string(),
        &port.to_string(),
        &conns.to_string(),
    ]);
    let secs = t.elapsed().as_secs_f64();
    let text = String::from_utf8_lossy(&out.stdout);
    let ok = text.lines().filter(|l| *l != "ERR").count();
    assert_eq!(ok, conns, "every connection answered:\n{text}");
    conns as f64 / secs
}

/// Received Gbit/s of one iperf3 run of `secs` s (1 s omitted) from `c` to `ip:port`.
pub(crate) fn throughput(c: &LabPod, ip: Ipv4Addr, port: u16, secs: u32) -> f64 {
    let out = c.ns.exec(&[
        "iperf3",
        "-c",
        &ip.to_string(),
        "-p",
        &port.to_string(),
        "-t",
        &secs.to_string(),
        "-O",
        "1",
        "-J",
    ]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap_or(0.0)
        / 1e9
}

/// The median of `v` (the upper one of an even count).
pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
