//! The policy bench's comparisons with the rules loaded: the measured pods moved out of the
//! rules' reach and back by their labels, in turn ([`Ab`]) or side by side ([`Par`]).

use std::net::{IpAddr, TcpStream};
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use cozyplane_lab::load::CONN_PORT;
use cozyplane_lab::{LabPod, run_in};
use serde_json::json;

use super::common::{Cp, wait};
use super::stats::{CpuTicks, Figures};
use super::{Pairs, conn_rate, env_or, iperf, label};

/// The rules stay loaded and the measured pods are alternately out of their reach and in
/// it (`POL_AB_ROUNDS` rounds, default 8; a round measures both states, in alternating
/// order), so that both states share the same minutes of the machine: on this two-core VM
/// the same path's throughput drifted between 4 and 12 Gbit/s over a bench (steal time, the
/// clean-up of the connection phases' sockets and conntrack entries), far more than the
/// policy costs. "Out of reach": the net-0 server's `app` and the VPC server's and client's
/// `role` changed, so that no NetworkPolicy selects the server (the net-0 fast path) and no
/// SecurityGroup the VPC pods (open within the VPC) — what the datapath does with no rules
/// for these pods, the 13,130 map entries still loaded. A state counts only once a probe
/// pod that no rule admits is refused (in reach) or admitted (out of it) on both paths.
pub(crate) struct Ab<'a> {
    pub(crate) cp: &'a Cp,
    pub(crate) pods: [&'a LabPod; 3],
    pub(crate) probes: [(&'a LabPod, IpAddr); 2],
}

impl Ab<'_> {
    async fn set(&self, selected: bool) {
        let [s0, s1, c1] = self.pods;
        let off = |v: &str| {
            if selected {
                v.to_string()
            } else {
                format!("{v}-off")
            }
        };
        label(self.cp, s0, json!({"app": off("server")})).await;
        label(self.cp, s1, json!({"role": off("server")})).await;
        label(self.cp, c1, json!({"role": off("client")})).await;
        for (probe, to) in self.probes {
            wait("the probe sees the rules' reach change", || {
                let open = run_in(&probe.ns, || {
                    TcpStream::connect_timeout(&(to, CONN_PORT).into(), Duration::from_millis(500)).is_ok()
                });
                open != selected
            });
        }
    }

    /// `[out of reach, in reach]` figures of both pairs.
    pub(crate) async fn measure(&self, pairs: &Pairs<'_>) -> [[Figures; 2]; 2] {
        let mut figs: [[Figures; 2]; 2] = Default::default();
        let rounds = usize::try_from(env_or("POL_AB_ROUNDS", 8)).unwrap_or(8).max(1);
        for round in 0..rounds {
            let order = if round % 2 == 0 {
                [false, true]
            } else {
                [true, false]
            };
            for selected in order {
                self.set(selected).await;
                let f = &mut figs[usize::from(selected)];
                let g = pairs.throughput(f);
                for (fig, g) in f.iter_mut().zip(g) {
                    fig.rounds.push((g, 0.0));
                }
                eprintln!("A/B round {round}, selected {selected}: {g:.2?}");
            }
        }
        self.set(true).await;
        figs
    }
}

/// Two identical pairs of each network stream at once, one in the rules' reach and one out of
/// it, then the other way round (`POL_PAR_ROUNDS` rounds of both orders, default 4): the
/// hypervisor's steal, which moved single figures between 3.5 and 12 Gbit/s, falls on both
/// streams of a figure alike, so their ratio is the policy's cost at one moment. The same
/// for the connection set-up rate: both pairs' connect loops run at once, after both
/// networks' streams (a loop's TIME_WAIT sockets would otherwise weigh on the next stream).
/// Reach is set by labels as in [`Ab`], each state confirmed by the probe pods.
pub(crate) struct Par<'a> {
    pub(crate) cp: &'a Cp,
    /// Per network: both pairs' (client, server, server's address, server's accept count).
    pub(crate) net0: [ParPair<'a>; 2],
    pub(crate) vpc: [ParPair<'a>; 2],
    pub(crate) probes: [&'a LabPod; 2],
}

pub(crate) type ParPair<'a> = (&'a LabPod, &'a LabPod, IpAddr, &'a AtomicU64);

/// Per network: every figure's in-reach / out-of-reach ratio (%) and both pairs' sum, for
/// throughput (Gbit/s) and connection set-up rate (conn/s).
#[derive(Default)]
pub(crate) struct ParFigures {
    pub(crate) gbps: (Vec<f64>, Vec<f64>),
    pub(crate) conns: (Vec<f64>, Vec<f64>),
}

/// Runs `f` for both pairs at once; their results in pair order.
fn both<'a, F>(pairs: &[ParPair<'a>; 2], f: F) -> [f64; 2]
where
    F: Fn(&ParPair<'a>) -> f64 + Sync,
{
    std::thread::scope(|sc| {
        let h = pairs.each_ref().map(|p| {
            let f = &f;
            sc.spawn(move || f(p))
        });
        h.map(|h| h.join().expect("measuring thread"))
    })
}

/// Pushes `g[selected] / g[other]` (%) and the sum; returns the ratio.
fn record(into: &mut (Vec<f64>, Vec<f64>), g: [f64; 2], selected: usize) -> f64 {
    let ratio = 100.0 * g[selected] / g[1 - selected].max(f64::MIN_POSITIVE);
    into.0.push(ratio);
    into.1.push(g[0] + g[1]);
    ratio
}

impl Par<'_> {
    /// Pair `selected` of each network in reach, the other out of it.
    async fn set(&self, selected: usize) {
        for i in 0..2 {
            let on = |v: &str| {
                if i == selected {
                    v.to_string()
                } else {
                    format!("{v}-off")
                }
            };
            label(self.cp, self.net0[i].1, json!({"app": on("server")})).await;
            label(self.cp, self.vpc[i].1, json!({"role": on("server")})).await;
            label(self.cp, self.vpc[i].0, json!({"role": on("client")})).await;
        }
        for (probe, pairs) in self.probes.iter().zip([&self.net0, &self.vpc]) {
            for (i, (_, _, to, _)) in pairs.iter().enumerate() {
                wait("the probe sees the rules' reach change", || {
                    let open = run_in(&probe.ns, || {
                        TcpStream::connect_timeout(&(*to, CONN_PORT).into(), Duration::from_millis(500))
                            .is_ok()
                    });
                    open != (i == selected)
                });
            }
        }
    }

    /// Per network, [`ParFigures`].
    pub(crate) async fn measure(&self) -> [ParFigures; 2] {
        let mut out: [ParFigures; 2] = Default::default();
        let rounds = usize::try_from(env_or("POL_PAR_ROUNDS", 4)).unwrap_or(4).max(1);
        for round in 0..rounds {
            for selected in [round % 2, 1 - round % 2] {
                self.set(selected).await;
                for (n, pairs) in [&self.net0, &self.vpc].into_iter().enumerate() {
                    let waited = CpuTicks::quiet();
                    if waited > Duration::from_secs(2) {
                        eprintln!("waited {:.1} s for a quiet machine", waited.as_secs_f64());
                    }
                    let g = both(pairs, |(c, s, to, _)| iperf(&s.ns, &c.ns, *to));
                    let ratio = record(&mut out[n].gbps, g, selected);
                    eprintln!(
                        "concurrent round {round}, network {n}, pair {selected} in reach: {g:.2?} Gbit/s, {ratio:.1} %"
                    );
                }
                for (n, pairs) in [&self.net0, &self.vpc].into_iter().enumerate() {
                    CpuTicks::quiet();
                    let g = both(pairs, |(c, _, to, accepted)| conn_rate(&c.ns, *to, accepted));
                    let ratio = record(&mut out[n].conns, g, selected);
                    eprintln!(
                        "concurrent round {round}, network {n}, pair {selected} in reach: {g:.0?} conn/s, {ratio:.1} %"
                    );
                }
            }
        }
        self.set(0).await;
        out
    }
}
