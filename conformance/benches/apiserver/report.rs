//! The side-by-side table: one row per figure, Go's value, ours and the ratio, one entry per
//! round (`a / b` for two rounds, round 1 first).
//!
//! Ratios read the same way in every row where more is better for us: for rates ours / Go, for
//! times Go / ours (so > 1 means ours is faster), and for memory ours / Go (so < 1 means ours is
//! smaller).

use crate::fanout::FanOut;
use crate::phases::{Creates, Memory, Stats};
use crate::{Config, Outcome};

/// How a row's ratio is formed.
#[derive(Clone, Copy)]
enum Better {
    /// A rate: ours / Go.
    Higher,
    /// A time: Go / ours.
    Lower,
    /// Memory: ours / Go (shown as such; < 1 is good).
    Smaller,
}

struct Row {
    label: String,
    go: Vec<(Option<f64>, String)>,
    ours: Vec<(Option<f64>, String)>,
    better: Better,
}

fn join(cells: &[String]) -> String {
    if cells.is_empty() {
        "not run".into()
    } else {
        cells.join(" / ")
    }
}

impl Row {
    fn render(&self) -> String {
        let go: Vec<String> = self.go.iter().map(|c| c.1.clone()).collect();
        let ours: Vec<String> = self.ours.iter().map(|c| c.1.clone()).collect();
        let ratios: Vec<String> = self
            .go
            .iter()
            .zip(&self.ours)
            .map(|(g, o)| match (g.0, o.0) {
                (Some(g), Some(o)) if g > 0.0 && o > 0.0 => format!(
                    "{:.2}×",
                    match self.better {
                        Better::Higher | Better::Smaller => o / g,
                        Better::Lower => g / o,
                    }
                ),
                _ => "—".into(),
            })
            .collect();
        format!(
            "| {} | {} | {} | {} |",
            self.label,
            join(&go),
            join(&ours),
            if ratios.is_empty() {
                "—".into()
            } else {
                ratios.join(" / ")
            }
        )
    }
}

fn rate_p99(c: &Creates) -> (Option<f64>, String) {
    (
        Some(c.stats.rate()),
        format!(
            "{:.0} (p99 {:.0} ms{})",
            c.stats.rate(),
            c.stats.ms(0.99),
            errors(c.stats.errors)
        ),
    )
}

fn settled(c: &Creates) -> (Option<f64>, String) {
    match c.settled_rate() {
        Some(r) => (
            Some(r),
            format!(
                "{r:.0} (idle after {:.1} s; {:.0} acknowledged{})",
                c.whole.unwrap_or_default().as_secs_f64(),
                c.stats.rate(),
                errors(c.stats.errors)
            ),
        ),
        None => (None, "never idle (600 s)".into()),
    }
}

fn errors(n: usize) -> String {
    if n == 0 {
        String::new()
    } else {
        format!(", {n} errors")
    }
}

fn watch(f: &FanOut) -> (Option<f64>, String) {
    let all = if f.delivered == f.expected {
        "all delivered".to_string()
    } else {
        format!("**{} of {} delivered**", f.delivered, f.expected)
    };
    (
        Some(f.p99_ms()),
        format!(
            "{:.0} ms ({all}; creates {:.0}/s{}{})",
            f.p99_ms(),
            f.create_rate,
            errors(f.create_errors),
            if f.refused > 0 {
                format!(", {} watches refused", f.refused)
            } else {
                String::new()
            }
        ),
    )
}

fn ms(v: f64) -> (Option<f64>, String) {
    (Some(v), format!("{v:.0} ms"))
}

fn cells(v: &[Outcome], f: impl Fn(&Outcome) -> Option<(Option<f64>, String)>) -> Vec<(Option<f64>, String)> {
    v.iter().filter_map(f).collect()
}

pub(crate) fn table(cfg: &Config, go: &[Outcome], ours: &[Outcome]) -> String {
    let n = cfg.creates;
    let mut rows = vec![
        Row {
            label: format!("plain creates/s, {n} at c=32 (Flunder vs FloatingIP)"),
            go: cells(go, |o| o.plain.as_ref().map(rate_p99)),
            ours: cells(ours, |o| o.plain.as_ref().map(rate_p99)),
            better: Better::Higher,
        },
        Row {
            label: format!("plain creates/s counting the work after the point, {n} at c=32"),
            go: cells(go, |o| o.plain.as_ref().map(settled)),
            ours: cells(ours, |o| o.plain.as_ref().map(settled)),
            better: Better::Higher,
        },
        Row {
            label: format!(
                "creates/s counting the work after the point, {n} at c=32 (Flunder vs VPCBinding)"
            ),
            go: cells(go, |o| o.settled.as_ref().map(settled)),
            ours: cells(ours, |o| o.settled.as_ref().map(settled)),
            better: Better::Higher,
        },
        Row {
            label: "Port creates/s with server-side IPAM (vs Go plain creates)".into(),
            go: cells(go, |o| o.plain.as_ref().map(rate_p99)),
            ours: cells(ours, |o| o.port.as_ref().map(rate_p99)),
            better: Better::Higher,
        },
        Row {
            label: "VPC creates/s with VNI allocation (vs Go plain creates)".into(),
            go: cells(go, |o| o.plain.as_ref().map(rate_p99)),
            ours: cells(ours, |o| o.vpc.as_ref().map(rate_p99)),
            better: Better::Higher,
        },
        Row {
            label: format!("GET one object, req/s ({} at c=32)", cfg.gets),
            go: cells(go, |o| o.get.as_ref().map(get)),
            ours: cells(ours, |o| o.get.as_ref().map(get)),
            better: Better::Higher,
        },
        Row {
            label: format!("LIST {}, consistent, p50", cfg.list_objects),
            go: cells(go, |o| o.consistent.as_ref().map(|l| ms(l.p50_ms))),
            ours: cells(ours, |o| o.consistent.as_ref().map(|l| ms(l.p50_ms))),
            better: Better::Lower,
        },
        Row {
            label: format!("LIST {}, `resourceVersion=0`, p50", cfg.list_objects),
            go: cells(go, |o| o.rv0.as_ref().map(|l| ms(l.p50_ms))),
            ours: cells(ours, |o| o.rv0.as_ref().map(|l| ms(l.p50_ms))),
            better: Better::Lower,
        },
        Row {
            label: format!("full paged walk of {}, limit=500, p50", cfg.list_objects),
            go: cells(go, |o| o.paged.as_ref().map(|l| ms(l.p50_ms))),
            ours: cells(ours, |o| o.paged.as_ref().map(|l| ms(l.p50_ms))),
            better: Better::Lower,
        },
        Row {
            label: format!(
                "{} watchers, {} creates at {}/s: delivery p99",
                cfg.watchers, cfg.watch_creates, cfg.watch_rate
            ),
            go: cells(go, |o| o.watch.as_ref().map(watch)),
            ours: cells(ours, |o| o.watch.as_ref().map(watch)),
            better: Better::Lower,
        },
        Row {
            label: format!(
                "{} Port watchers by `spec.node` (of {NODES_}), {} Port creates at {}/s: delivery p99",
                cfg.node_watchers,
                cfg.watch_creates,
                cfg.watch_rate,
                NODES_ = crate::NODES
            ),
            go: Vec::new(),
            ours: cells(ours, |o| o.node_watch.as_ref().map(watch)),
            better: Better::Lower,
        },
        Row {
            label: "RSS per stored object (server RSS / objects stored)".into(),
            go: cells(go, |o| o.mem.as_ref().map(per_object)),
            ours: cells(ours, |o| o.mem.as_ref().map(per_object)),
            better: Better::Smaller,
        },
        Row {
            label: "peak RSS during one full LIST of the collection".into(),
            go: cells(go, |o| o.mem.as_ref().map(peak)),
            ours: cells(ours, |o| o.mem.as_ref().map(peak)),
            better: Better::Smaller,
        },
    ];
    if go.is_empty() {
        for r in &mut rows {
            r.go.clear();
        }
    }
    let mut out = vec![
        "| | Go (sample-apiserver) | ours (cozyplane-apiserver) | ratio |".to_string(),
        "|---|---|---|---|".to_string(),
    ];
    out.extend(rows.iter().map(Row::render));
    out.push(String::new());
    out.push(
        "ratio: rates ours / Go, times Go / ours (> 1: ours is faster), memory ours / Go (< 1: ours is smaller); one entry per round".into(),
    );
    out.join("\n")
}

fn get(s: &Stats) -> (Option<f64>, String) {
    (
        Some(s.rate()),
        format!("{:.0} (p99 {:.0} ms)", s.rate(), s.ms(0.99)),
    )
}

fn per_object(m: &Memory) -> (Option<f64>, String) {
    let kib = m.rss_kib as f64 / m.objects as f64;
    (
        Some(kib),
        format!(
            "{kib:.1} KiB ({:.0} MiB for {} objects)",
            m.rss_kib as f64 / 1024.0,
            m.objects
        ),
    )
}

fn peak(m: &Memory) -> (Option<f64>, String) {
    let mib = m.peak_kib as f64 / 1024.0;
    (
        Some(mib),
        format!(
            "{mib:.0} MiB ({} items, {:.0} MiB of JSON in {:.1} s)",
            m.list_items,
            m.list_bytes as f64 / (1 << 20) as f64,
            m.list_time.as_secs_f64()
        ),
    )
}
