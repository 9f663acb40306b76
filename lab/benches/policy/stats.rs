//! The policy bench's accounting: the kernel's run time of our programs, the machine's CPU
//! time and the hypervisor's steal, and one phase's figures.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::{median, secs};

/// `kernel.bpf_stats_enabled` on for the bench's life (the kernel then accounts every
/// program's run time and run count), restored when dropped.
pub(crate) struct BpfStats(String);

impl BpfStats {
    const KNOB: &str = "/proc/sys/kernel/bpf_stats_enabled";

    pub(crate) fn on() -> Self {
        let was = std::fs::read_to_string(Self::KNOB).unwrap_or_else(|_| "0".into());
        std::fs::write(Self::KNOB, "1").expect("kernel.bpf_stats_enabled");
        Self(was.trim().to_string())
    }
}

impl Drop for BpfStats {
    fn drop(&mut self) {
        let _ = std::fs::write(Self::KNOB, &self.0);
    }
}

/// Run time (ns) and run count of the loaded `sdn_*` programs, summed by name over both
/// nodes' agents (they load the same programs).
pub(crate) type ProgStats = BTreeMap<String, (u64, u64)>;

pub(crate) fn prog_stats() -> ProgStats {
    let out = std::process::Command::new("bpftool")
        .args(["-j", "prog", "show"])
        .output()
        .expect("bpftool runs");
    let progs: serde_json::Value = serde_json::from_slice(&out.stdout).expect("bpftool's JSON");
    let mut m = ProgStats::new();
    for p in progs.as_array().into_iter().flatten() {
        let Some(name) = p["name"].as_str().filter(|n| n.starts_with("sdn_")) else {
            continue;
        };
        let e = m.entry(name.to_string()).or_default();
        e.0 += p["run_time_ns"].as_u64().unwrap_or(0);
        e.1 += p["run_cnt"].as_u64().unwrap_or(0);
    }
    m
}

/// Adds `after - before` into `into`.
pub(crate) fn add_delta(into: &mut ProgStats, before: &ProgStats, after: &ProgStats) {
    for (name, (ns, runs)) in after {
        let (ns0, runs0) = before.get(name).copied().unwrap_or_default();
        let e = into.entry(name.clone()).or_default();
        e.0 += ns - ns0;
        e.1 += runs - runs0;
    }
}

/// One phase's figures for one pair: per-round (Gbit/s, conn/s), and the programs' run
/// time during its iperf runs with the bytes those moved.
#[derive(Default)]
pub(crate) struct Figures {
    pub(crate) rounds: Vec<(f64, f64)>,
    pub(crate) progs: ProgStats,
    pub(crate) gbytes: f64,
    /// The machine's CPU time during each iperf run, with its Gbit/s.
    pub(crate) cpu: Vec<(f64, CpuTicks)>,
}

/// The machine's CPU time (all cores, `/proc/stat` ticks): working (user, nice, system, irq,
/// softirq), stolen by the hypervisor, and in all.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CpuTicks {
    busy: u64,
    steal: u64,
    total: u64,
}

impl CpuTicks {
    pub(crate) fn now() -> Self {
        let stat = std::fs::read_to_string("/proc/stat").expect("/proc/stat");
        let v: Vec<u64> = stat
            .lines()
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .skip(1)
            .filter_map(|f| f.parse().ok())
            .collect();
        let at = |i: usize| v.get(i).copied().unwrap_or(0);
        // user nice system idle iowait irq softirq steal (guest time is inside user).
        Self {
            busy: at(0) + at(1) + at(2) + at(5) + at(6),
            steal: at(7),
            total: (0..8).map(at).sum(),
        }
    }

    pub(crate) fn since(self, before: Self) -> Self {
        Self {
            busy: self.busy - before.busy,
            steal: self.steal - before.steal,
            total: self.total - before.total,
        }
    }

    /// Waits (at most 60 s) until the machine's working share of what the hypervisor left
    /// it stays under 10 % for a second: a relabel's recompilation in the agents, the
    /// connection phases' clean-up or the API server's loops must not run inside a figure.
    /// How long it waited.
    pub(crate) fn quiet() -> Duration {
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(60) {
            let a = Self::now();
            std::thread::sleep(Duration::from_secs(1));
            let d = Self::now().since(a);
            if (d.busy as f64) < 0.10 * (d.total - d.steal).max(1) as f64 {
                break;
            }
        }
        t.elapsed()
    }

    /// The share of the machine the hypervisor did not take.
    pub(crate) fn ours(self) -> f64 {
        1.0 - self.steal as f64 / self.total.max(1) as f64
    }
}

impl Figures {
    pub(crate) fn medians(&self) -> (f64, f64) {
        (
            median(self.rounds.iter().map(|r| r.0).collect()),
            median(self.rounds.iter().map(|r| r.1).collect()),
        )
    }

    /// The median of each run's Gbit/s divided by the share of the machine the hypervisor
    /// left us during it.
    pub(crate) fn unstolen_median(&self) -> f64 {
        median(self.cpu.iter().map(|(g, c)| g / c.ours().max(0.01)).collect())
    }

    /// The share of the machine stolen over the runs (%).
    pub(crate) fn steal_pct(&self) -> f64 {
        let (s, t) = self
            .cpu
            .iter()
            .fold((0, 0), |(s, t), (_, c)| (s + c.steal, t + c.total));
        100.0 * s as f64 / t.max(1) as f64
    }

    /// The machine's working CPU time per GB moved (seconds; USER_HZ is 100).
    pub(crate) fn machine_s_per_gb(&self) -> f64 {
        let busy: u64 = self.cpu.iter().map(|(_, c)| c.busy).sum();
        busy as f64 / 100.0 / self.gbytes.max(f64::MIN_POSITIVE)
    }

    /// Adds `other`'s rounds, bytes and program accounting to these.
    pub(crate) fn absorb(&mut self, other: &Figures) {
        self.rounds.extend_from_slice(&other.rounds);
        self.cpu.extend_from_slice(&other.cpu);
        self.gbytes += other.gbytes;
        for (name, (ns, runs)) in &other.progs {
            let e = self.progs.entry(name.clone()).or_default();
            e.0 += ns;
            e.1 += runs;
        }
    }

    /// The datapath programs' CPU time as a share (%) of all cores over the iperf runs.
    pub(crate) fn cpu_share(&self) -> f64 {
        let ns: u64 = self.progs.values().map(|p| p.0).sum();
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        100.0 * ns as f64 / (self.rounds.len() as f64 * secs() as f64 * cores as f64 * 1e9)
    }

    /// The datapath programs' CPU time per GB moved, in ms.
    pub(crate) fn bpf_ms_per_gb(&self) -> f64 {
        let ns: u64 = self.progs.values().map(|p| p.0).sum();
        ns as f64 / 1e6 / self.gbytes.max(f64::MIN_POSITIVE)
    }
}
