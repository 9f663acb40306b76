//! What the node side measures around the guests: the machine's CPU time and captures of the
//! responder's traffic where none may show.

use std::path::{Path, PathBuf};

use cozyplane_lab::{Netns, start_tcpdump, stop_tcpdump};

/// The machine's CPU time so far (`/proc/stat`, all CPUs, in ticks): (busy, all).
pub(crate) fn cpu_ticks() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let v: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let all: u64 = v.iter().sum();
    // idle and iowait
    (
        all - v.get(3).copied().unwrap_or(0) - v.get(4).copied().unwrap_or(0),
        all,
    )
}

/// A capture of `filter` on `dev` of `ns`, read when [`Leak::count`] stops it.
pub(crate) struct Leak {
    what: String,
    file: PathBuf,
    p: cozyplane_lab::Proc,
}

impl Leak {
    pub(crate) fn start(dir: &Path, (node, ns): (&str, &Netns), dev: &str, filter: &str) -> Self {
        let file = dir.join(format!("{node}-{dev}-{}.pcap", filter.len()));
        let p = start_tcpdump(ns, dev, filter, &file);
        Self {
            what: format!("{node} {dev}"),
            file,
            p,
        }
    }

    pub(crate) fn lines(self) -> (String, Vec<String>) {
        stop_tcpdump(self.p);
        let o = std::process::Command::new("tcpdump")
            .args(["-n", "-e", "-r", self.file.to_str().unwrap()])
            .output()
            .expect("tcpdump -r");
        let l = String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(String::from)
            .collect();
        (self.what, l)
    }
}
