//! The HostFirewall's per-packet cost (issue 29) through `BPF_PROG_TEST_RUN`: the kernel's own
//! average run time of a program over `HF_BENCH_REPEAT` runs (default 1,000,000) of one packet,
//! on the datapath the tests load (`tests/common`). Needs root:
//!
//! ```text
//! cargo bench -p cozyplane-bpf --bench hostfw
//! ```
//!
//! A TCP packet to the node's address (10.0.0.1:22) into `sdn_from_uplink`, and the same from a
//! net-0 pod of the node into `sdn_from_pod`, on three datapaths loaded side by side:
//!
//! * **off**: no HostFirewall (nothing armed) — the baseline, run on the very frames measured
//!   on the others;
//! * **1 rule**: one HostFirewall selecting the node, ingress armed, one rule admitting
//!   192.168.0.0/16 and 10.244.0.0/16 to TCP 22;
//! * **1,000 rules**: the same plus 1,000 ingress rules, each a distinct peer (a /24 or a /32
//!   of 172.16.0.0/12, alternately) on a distinct port (20000 + i).
//!
//! Cases on each: an **established flow** (its SYN, the node's SYN-ACK through `sdn_host_out`
//! or `sdn_to_pod` and the ACK sent once, then its ACK segment measured: the connection-table
//! hit); a **refused new flow** (a lone SYN to port 2222, which no rule admits: every run is a
//! connection-table miss, the rules' whole lookup — class, then rule by class, then rule by
//! any peer — and a counted drop). An *admitted* SYN cannot be measured with `repeat`: its first
//! run opens the entry and the others hit it. So the admitted new flow is measured by single
//! runs (`repeat` 1), each with its own source port (a new flow each time; the table emptied
//! before each round), `HF_BENCH_SINGLES` of them per round (default 10,000), against the same
//! single runs on the datapath with nothing armed: a single run's time also holds one
//! `ktime_get_ns()` of the kernel's timer, the same on both sides, so only the difference is the
//! firewall's.
//!
//! Every case of every datapath is measured once per round, `HF_BENCH_ROUNDS` rounds (default 9),
//! in an order reversed every other round; the figure is the median of the rounds. Figures are
//! printed, never asserted (the verdicts are). Under `cargo test` (no `--bench` argument) one
//! short round proves that it runs.

#[path = "../tests/common/mod.rs"]
mod common;

use std::net::IpAddr;

use aya::programs::{SchedClassifier, TestRun as _, TestRunOptions};
use common::fixtures::{FROM_POD, TO_POD, cfg, endpoint, ip, port};
use common::policy::{self as pol, ACK, SYN};
use common::{Datapath, LO, TC_ACT_OK, TC_ACT_SHOT};
use cozyplane_apis::v1alpha1::{
    HostFirewall, HostFirewallIngressRule, HostFirewallPeer, HostFirewallPort, HostFirewallSpec,
};
use cozyplane_bpf::abi::PolState;
use cozyplane_bpf::maps::pol_state::{self, PolStateMap};
use cozyplane_policy::hf::{HfCompiler, NodeInfo};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

const IN: &str = "sdn_from_uplink";
const OUT: &str = "sdn_host_out";

const NODE4: &str = "10.0.0.1";
const ADMIN: &str = "192.168.1.10";
const POD4: &str = "10.244.1.5";
const MAC_UP: [u8; 6] = [0x0a, 0, 0, 0, 0, 0x01];
const MAC_GW: [u8; 6] = [0x0a, 0, 0, 0, 0, 0xfe];
const MAC_POD: [u8; 6] = [0x0a, 0x50, 0, 0, 0, 0x05];

/// The admitted port, the refused one, and the established flow's source port.
const SSH: u16 = 22;
const CLOSED: u16 = 2222;
const EST_SPORT: u16 = 50000;
/// The extra rules of the large set.
const MANY: usize = 1_000;

/// `sizeof(struct __sk_buff)` and the offset of `ifindex` (as `tests/common`).
const SKB_CTX_LEN: usize = 192;
const SKB_IFINDEX: usize = 40;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Where the packet enters: the uplink, or a net-0 pod's veth.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Path {
    Uplink,
    Pod,
}

impl Path {
    fn name(self) -> &'static str {
        match self {
            Self::Uplink => "uplink (sdn_from_uplink)",
            Self::Pod => "net-0 pod (sdn_from_pod)",
        }
    }

    fn peer(self) -> IpAddr {
        ip(match self {
            Self::Uplink => ADMIN,
            Self::Pod => POD4,
        })
    }

    fn prog(self) -> &'static str {
        match self {
            Self::Uplink => IN,
            Self::Pod => FROM_POD,
        }
    }

    /// A TCP segment from this path's peer to the node.
    fn to_node(self, sport: u16, dport: u16, flags: u8) -> Vec<u8> {
        let (s, d) = (self.peer(), ip(NODE4));
        match self {
            Self::Uplink => pol::tcp(MAC_GW, MAC_UP, s, d, sport, dport, flags),
            Self::Pod => pol::tcp(MAC_POD, cfg().gw_mac, s, d, sport, dport, flags),
        }
    }

    /// The node's answer, through the hook that sees it leave.
    fn answer(self, dp: &Datapath, sport: u16, dport: u16, flags: u8) {
        let (s, d) = (ip(NODE4), self.peer());
        let (hook, frame) = match self {
            Self::Uplink => (OUT, pol::tcp(MAC_UP, MAC_GW, s, d, sport, dport, flags)),
            Self::Pod => (TO_POD, pol::tcp(cfg().gw_mac, MAC_POD, s, d, sport, dport, flags)),
        };
        let v = dp.run(hook, &frame, LO, 0).verdict;
        assert_ne!(v, TC_ACT_SHOT, "{hook}: the node's answer dropped");
    }

    fn classifier(self, dp: &Datapath) -> &SchedClassifier {
        let ebpf = match self {
            Self::Uplink => &dp.uplink,
            Self::Pod => &dp.pod,
        };
        ebpf.program(self.prog()).unwrap().try_into().unwrap()
    }
}

/// The kernel's average run time in ns of `repeat` runs of `frame`, and the verdict.
fn timed(dp: &Datapath, path: Path, frame: &[u8], repeat: u32) -> (u32, f64) {
    let mut ctx = [0u8; SKB_CTX_LEN];
    ctx[SKB_IFINDEX..SKB_IFINDEX + 4].copy_from_slice(&LO.to_ne_bytes());
    let mut out = vec![0u8; frame.len() + 256];
    let res = path
        .classifier(dp)
        .test_run(TestRunOptions {
            data_in: Some(frame),
            data_out: Some(&mut out),
            ctx_in: Some(&ctx),
            repeat,
            ..TestRunOptions::default()
        })
        .unwrap_or_else(|e| panic!("BPF_PROG_TEST_RUN {}: {e:?}", path.prog()));
    (res.return_value, res.duration.as_nanos() as f64)
}

fn node_info() -> NodeInfo {
    NodeInfo {
        name: "n1".into(),
        labels: [("role".to_string(), "worker".to_string())].into(),
        addresses: vec![ip(NODE4)],
    }
}

fn peer(cidr: String) -> HostFirewallPeer {
    HostFirewallPeer {
        cidr,
        except: Vec::new(),
    }
}

fn tcp_port(port: u16) -> HostFirewallPort {
    HostFirewallPort {
        protocol: "TCP".into(),
        port: i32::from(port),
        end_port: 0,
    }
}

/// The measured rule, after `extra` rules of other peers on other ports.
fn firewall(extra: usize) -> HostFirewall {
    let mut ingress: Vec<HostFirewallIngressRule> = (0..extra)
        .map(|i| {
            let (hi, lo) = (16 + i / 256, i % 256);
            let cidr = if i % 2 == 0 {
                format!("172.{hi}.{lo}.0/24")
            } else {
                format!("172.{hi}.{lo}.7/32")
            };
            HostFirewallIngressRule {
                from: vec![peer(cidr)],
                ports: vec![tcp_port(20000 + u16::try_from(i).unwrap())],
            }
        })
        .collect();
    ingress.push(HostFirewallIngressRule {
        from: vec![peer("192.168.0.0/16".into()), peer("10.244.0.0/16".into())],
        ports: vec![tcp_port(SSH)],
    });
    HostFirewall {
        metadata: ObjectMeta {
            name: Some("bench".into()),
            ..Default::default()
        },
        spec: HostFirewallSpec {
            policy_types: vec!["Ingress".into()],
            ingress,
            ..Default::default()
        },
        status: None,
    }
}

/// A datapath of this node with a net-0 pod on `lo`; with `rules`, a HostFirewall of
/// `rules - 1` extra rules and the measured one, armed as the agent arms it.
fn datapath(rules: Option<usize>) -> Datapath {
    let mut dp = Datapath::load(&cfg());
    port(&mut dp, LO, 0);
    endpoint(&mut dp, 0, POD4, LO, MAC_POD);
    if let Some(extra) = rules {
        let mut c = HfCompiler::new(node_info());
        c.set_firewall(&firewall(extra));
        assert!(c.warnings().is_empty(), "{:?}", c.warnings());
        let t = c.tables().clone();
        pol::load(&mut dp, &t);
        let mut st = PolStateMap::try_from(dp.map_mut(pol_state::NAME)).unwrap();
        let s = st.get().unwrap();
        st.set(PolState {
            generation: s.generation,
            flags: t.state_flags,
        })
        .unwrap();
        eprintln!(
            "firewall of {} ingress rules: {} sdn_pol_rules entries, {} sdn_pol_cidrs classes",
            extra + 1,
            t.rules.len(),
            t.cidrs.len()
        );
    }
    dp
}

/// The established flow of `path` opened (by its handshake).
fn establish(dp: &Datapath, path: Path) {
    let d = ip(NODE4);
    assert_ne!(
        dp.run(path.prog(), &path.to_node(EST_SPORT, SSH, SYN), LO, 0)
            .verdict,
        TC_ACT_SHOT,
        "{}: the SYN to {d}:{SSH}",
        path.name()
    );
    path.answer(dp, SSH, EST_SPORT, SYN | ACK);
    assert_ne!(
        dp.run(path.prog(), &path.to_node(EST_SPORT, SSH, ACK), LO, 0)
            .verdict,
        TC_ACT_SHOT
    );
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Case {
    /// The established flow's ACK, `repeat` runs.
    Established,
    /// A SYN no rule admits, `repeat` runs.
    Refused,
    /// Single runs of SYNs, each a new flow the rule admits.
    NewAdmitted,
}

impl Case {
    fn name(self) -> &'static str {
        match self {
            Self::Established => "established flow (ACK, connection-table hit)",
            Self::Refused => "refused new flow (SYN to :2222, full rule lookup, dropped)",
            Self::NewAdmitted => "admitted new flow (SYN, single runs, one entry made each)",
        }
    }
}

/// One measurement: a case of a path on one of the datapaths ([`DPS`]).
#[derive(Clone, Copy)]
struct Cell {
    path: Path,
    case: Case,
    dp: usize,
}

const DPS: [&str; 4] = ["no HostFirewall", "1 rule", "1,001 rules", "1 rule, control"];

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// One round's figure of `c`.
fn measure(dps: &[Datapath], c: Cell, repeat: u32, singles: u16, round: u16) -> f64 {
    let dp = &dps[c.dp];
    let armed = c.dp > 0;
    match c.case {
        Case::Established | Case::Refused => {
            let frame = if c.case == Case::Established {
                c.path.to_node(EST_SPORT, SSH, ACK)
            } else {
                c.path.to_node(EST_SPORT + 1, CLOSED, SYN)
            };
            let (v, ns) = timed(dp, c.path, &frame, repeat);
            let dropped = c.case == Case::Refused && armed;
            assert_eq!(
                v == TC_ACT_SHOT,
                dropped,
                "{} {}: verdict {v}",
                c.path.name(),
                c.case.name()
            );
            ns
        }
        Case::NewAdmitted => {
            // Source ports of this round only: 1024 + round * singles + i, modulo the range.
            let mut ns: Vec<f64> = (0..singles)
                .map(|i| {
                    let sp = 1024 + (u32::from(round) * u32::from(singles) + u32::from(i)) % 48000;
                    let frame = c.path.to_node(u16::try_from(sp).unwrap(), SSH, SYN);
                    let (v, t) = timed(dp, c.path, &frame, 1);
                    assert_ne!(v, TC_ACT_SHOT, "{}: admitted SYN dropped", c.path.name());
                    if c.path == Path::Uplink {
                        assert_eq!(v, TC_ACT_OK);
                    }
                    t
                })
                .collect();
            median(&mut ns)
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--list") {
        return;
    }
    let full = args.iter().any(|a| a == "--bench");
    let repeat = u32::try_from(env_or("HF_BENCH_REPEAT", if full { 1_000_000 } else { 1_000 })).unwrap();
    let rounds = u16::try_from(env_or("HF_BENCH_ROUNDS", if full { 9 } else { 1 })).unwrap();
    let singles = u16::try_from(env_or("HF_BENCH_SINGLES", if full { 10_000 } else { 100 })).unwrap();
    common::require_root();

    // The control: a second one-rule datapath loaded last, for the spread between two
    // identical instances (their maps sit elsewhere in memory).
    let mut dps = vec![
        datapath(None),
        datapath(Some(0)),
        datapath(Some(MANY)),
        datapath(Some(0)),
    ];
    let mut cells = Vec::new();
    for path in [Path::Uplink, Path::Pod] {
        for case in [Case::Established, Case::Refused, Case::NewAdmitted] {
            for dp in 0..dps.len() {
                cells.push(Cell { path, case, dp });
            }
        }
    }
    eprintln!(
        "{} cells, {rounds} rounds, repeat {repeat}, {singles} single runs per admitted-new cell",
        cells.len()
    );
    let mut figures: Vec<Vec<f64>> = vec![Vec::new(); cells.len()];
    for round in 0..rounds {
        // The table emptied (the last round's single runs) and both established flows
        // opened again: with no entry, an ACK would be judged by the rules every time.
        for (i, dp) in dps.iter_mut().enumerate() {
            pol::clear_ct(dp);
            for path in [Path::Uplink, Path::Pod] {
                establish(dp, path);
            }
            let want = if i == 0 { 0 } else { 2 };
            assert_eq!(
                pol::ct_entries(dp).len(),
                want,
                "{}: connection-table entries",
                DPS[i]
            );
        }
        let mut order: Vec<usize> = (0..cells.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            figures[i].push(measure(&dps, cells[i], repeat, singles, round));
        }
        eprintln!("round {} of {rounds} done", round + 1);
    }

    println!();
    println!("HostFirewall per-packet cost: BPF_PROG_TEST_RUN, TCP to the node's address");
    println!(
        "median of {rounds} rounds; repeat {repeat} (established, refused), {singles} single runs (admitted new)"
    );
    println!();
    println!("| path | case | firewall | ns/packet | vs no HostFirewall | rounds min–max |");
    println!("|---|---|---|---|---|---|");
    for (i, c) in cells.iter().enumerate() {
        let mut v = figures[i].clone();
        let m = median(&mut v);
        let base = {
            let b = cells
                .iter()
                .position(|o| o.path == c.path && o.case == c.case && o.dp == 0)
                .unwrap();
            median(&mut figures[b].clone())
        };
        let diff = if c.dp == 0 {
            "baseline".to_string()
        } else {
            format!("{:+.0} ns ({:+.0} %)", m - base, (m / base - 1.0) * 100.0)
        };
        println!(
            "| {} | {} | {} | {m:.0} | {diff} | {:.0}–{:.0} |",
            c.path.name(),
            c.case.name(),
            DPS[c.dp],
            v[0],
            v[v.len() - 1]
        );
    }
}
