//! ServiceVIP benchmark on the netns lab (issue 13): connection set-up rate and TCP throughput
//! through a VIP against the same backend reached directly by its VPC address. Needs root and
//! the agent and CNI binaries (release for recorded figures, as `datapath.rs`):
//!
//! ```text
//! cargo bench -p cozyplane-lab --bench vip
//! ```
//!
//! (`--profile dev` runs it against the debug binaries; quick checks on a loaded two-core
//! machine gave set-up 479/s direct vs 606/s VIP and 7.74 vs 7.06 Gbit/s, and later 669/s vs
//! 668/s (99.9 %) and 10.53 vs 10.13 Gbit/s (96.2 %): not a record.)
//!
//! Client c1 on n1, backend b2 on n2 (VPC a, 10.60.0.0/24), so both paths cross the overlay.
//! *Set-up*: `tests/vip/probe.py tcp` opens `CONNS` connections one after the other, each
//! waiting for the server's first line (a full handshake and a round trip), timed from outside.
//! *Throughput*: iperf3, `SECS` s after 1 s omitted, one stream. Figures are printed, never
//! asserted; the ratio VIP/direct is the one to watch (issue 13's target: ≥ 95 %).

use std::net::Ipv4Addr;
use std::process::Stdio;

use cozyplane_apis::v1alpha1::ServiceVIP;
use cozyplane_lab::{Lab, Proc, bin_dir, require_root};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "kit/mod.rs"]
mod kit;
use common::{Cp, pod, tenant, vni, vpc_ip};
use kit::{median, probe, setup_rate, throughput};

const CONNS: usize = 300;
const SECS: u32 = 5;
const ROUNDS: usize = 3;

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    require_root();
    let _ = bin_dir();
    Lab::run(2, body);
}

async fn body(lab: &mut Lab) {
    let cp = Cp::start(lab).await;
    let lab = &*lab;
    tenant(&cp, "t1", "a", "10.60.0.0/24").await;
    let va = vni(&cp, "t1", "a").await;
    let c1 = pod(&cp, lab, 0, "t1", "c1", Some("a")).await;
    let b2 = pod(&cp, lab, 1, "t1", "b2", Some("a")).await;
    let ib2 = vpc_ip(&cp, &b2).await;
    let mut serve = b2
        .ns
        .command(&["python3", &probe(), "serve", "b2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(serve.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let _serve = Proc(serve);
    let _iperf = Proc(
        b2.ns
            .command(&["iperf3", "-s", "-p", "5201"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );

    let v: ServiceVIP = serde_json::from_value(json!({
        "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "ServiceVIP",
        "metadata": { "generateName": "sv" },
        "spec": {
            "vpcRef": { "namespace": "t1", "name": "a" }, "ip": "0.0.0.0",
            "serviceRef": { "namespace": "t1", "name": "bench" },
            "ports": [ { "protocol": "TCP", "port": 80 }, { "protocol": "TCP", "port": 5201 } ],
        },
    }))
    .unwrap();
    let api = Api::<ServiceVIP>::all(cp.sdn.clone());
    let v = api.create(&PostParams::default(), &v).await.unwrap();
    let name = v.metadata.name.clone().unwrap();
    let vip: Ipv4Addr = v.spec.ip.parse().unwrap();
    let status = json!({ "status": { "phase": "Ready", "backends": [{ "ip": ib2.to_string(), "ports": [
        { "protocol": "TCP", "port": 80, "targetPort": 8080 },
        { "protocol": "TCP", "port": 5201, "targetPort": 5201 },
    ]}]}});
    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    let pins = lab.nodes[0].scratch.pins();
    common::wait("n1 programs the VIP", || {
        cozyplane_bpf::maps::lb_svc::LbSvcMap::from_pin(&pins)
            .and_then(|m| m.frontends())
            .is_ok_and(|f| f.iter().filter(|f| f.net == va).count() == 2)
    });

    println!("ServiceVIP bench: c1 (n1) -> b2 (n2), VPC a, vip {vip}, b2 {ib2}");
    let (mut sd, mut sv, mut td, mut tv) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        sd.push(setup_rate(&c1, ib2, 8080, CONNS));
        sv.push(setup_rate(&c1, vip, 80, CONNS));
        td.push(throughput(&c1, ib2, 5201, SECS));
        tv.push(throughput(&c1, vip, 5201, SECS));
    }
    let (sd, sv, td, tv) = (median(sd), median(sv), median(td), median(tv));
    println!(
        "connection set-up ({CONNS} sequential, median of {ROUNDS}): direct {sd:.0}/s, VIP {sv:.0}/s ({:.1} %)",
        100.0 * sv / sd
    );
    println!(
        "TCP throughput (iperf3 {SECS} s, median of {ROUNDS}): direct {td:.2} Gbit/s, VIP {tv:.2} Gbit/s ({:.1} %)",
        100.0 * tv / td
    );
}
