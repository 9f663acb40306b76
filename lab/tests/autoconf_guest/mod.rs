//! The guest's side of `autoconf.rs`: Debian's real clients (`dhclient`, `rdisc6`) run in a
//! lab pod's netns stripped of what CNI ADD put there, the sysctls of a guest that
//! autoconfigures, and what a capture inside the guest says (exchanges and their timing, the
//! addresses the answers name). Test files are separate crates: a helper one of them does not
//! call is not dead code.
#![allow(dead_code)]

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cozyplane_lab::LabPod;

/// `dhclient` of either family for one guest: its own lease and pid files, resolv.conf
/// written to the netns's own (`ip netns exec` mounts `/etc/netns/<name>/resolv.conf`),
/// never the node's. Dropping it stops its daemons (by the PIDs in its pid files).
pub(crate) struct Dhclient {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) etc: PathBuf,
}

impl Dhclient {
    pub(crate) fn new(p: &LabPod) -> Self {
        let etc = PathBuf::from(format!("/etc/netns/{}", p.ns.0));
        std::fs::create_dir_all(&etc).unwrap();
        std::fs::write(etc.join("resolv.conf"), "").unwrap();
        Self {
            dir: tempfile::tempdir().unwrap(),
            etc,
        }
    }

    pub(crate) fn lease(&self, fam: u8) -> PathBuf {
        self.dir.path().join(format!("lease{fam}"))
    }

    pub(crate) fn pid(&self, fam: u8) -> PathBuf {
        self.dir.path().join(format!("pid{fam}"))
    }

    /// The PID of the daemon of family `fam` this guest's last `dhclient` left, if that is
    /// still a running `dhclient` of this pid file.
    pub(crate) fn daemon(&self, fam: u8) -> Option<i32> {
        let pf = self.pid(fam);
        let pid = std::fs::read_to_string(&pf).ok()?.trim().parse::<i32>().ok()?;
        let c = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        String::from_utf8_lossy(&c)
            .contains(pf.to_str().unwrap())
            .then_some(pid)
    }

    /// That daemon stopped (SIGTERM, by its PID), without a release.
    pub(crate) fn stop(&self, fam: u8) {
        let Some(pid) = self.daemon(fam) else { return };
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGTERM);
        let t = Instant::now();
        while self.daemon(fam).is_some() && t.elapsed() < Duration::from_secs(2) {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// `dhclient -<fam> -1 -v`, then `extra`, on eth0. A bound `dhclient` stays as a daemon,
    /// and a new one does not stop it (only `-r` and `-x` do, by the pid file, which the new
    /// one overwrites): so the previous daemon is stopped first (else each renewal left one
    /// running, holding its netns).
    pub(crate) fn run(&self, p: &LabPod, fam: u8, extra: &[&str]) -> std::process::Output {
        if !extra.contains(&"-r") {
            self.stop(fam);
        }
        let (lf, pf) = (self.lease(fam), self.pid(fam));
        let f = format!("-{fam}");
        let mut args = vec![
            "dhclient",
            &f,
            "-1",
            "-v",
            "-lf",
            lf.to_str().unwrap(),
            "-pf",
            pf.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        args.push("eth0");
        p.ns.exec(&args)
    }

    pub(crate) fn resolv(&self) -> String {
        std::fs::read_to_string(self.etc.join("resolv.conf")).unwrap_or_default()
    }

    /// Every address the leases of family `fam` name (`fixed-address`, `iaaddr`).
    pub(crate) fn leased(&self, fam: u8) -> Vec<IpAddr> {
        let text = std::fs::read_to_string(self.lease(fam)).unwrap_or_default();
        let key = if fam == 4 { "fixed-address" } else { "iaaddr" };
        text.lines()
            .filter_map(|l| {
                let l = l.trim().strip_prefix(key)?;
                l.trim().trim_end_matches([';', '{']).trim().parse().ok()
            })
            .collect()
    }
}

impl Drop for Dhclient {
    fn drop(&mut self) {
        self.stop(4);
        self.stop(6);
        let _ = std::fs::remove_dir_all(&self.etc);
    }
}

/// Strip what CNI ADD configured for IPv4: the guest starts with a bare link.
pub(crate) fn bare4(p: &LabPod) {
    p.ns.ip_ok(&["-4", "route", "flush", "dev", "eth0"]);
    p.ns.ip_ok(&["-4", "addr", "flush", "dev", "eth0"]);
}

/// The same for IPv6: no global address, no default route (the link-local address and
/// `fe80::/64` stay, as on a guest whose link just came up).
pub(crate) fn bare6(p: &LabPod) {
    p.ns.ip_ok(&["-6", "addr", "flush", "dev", "eth0", "scope", "global"]);
    while p
        .ns
        .ip(&["-6", "route", "del", "default", "dev", "eth0"])
        .status
        .success()
    {}
}

/// A guest that autoconfigures IPv6 (see the module comment).
pub(crate) fn guest_sysctls(p: &LabPod) {
    for kv in [
        "net.ipv6.conf.all.forwarding=0",
        "net.ipv6.conf.eth0.forwarding=0",
        "net.ipv6.conf.eth0.accept_ra=1",
        "net.ipv6.conf.eth0.accept_ra_defrtr=1",
        "net.ipv6.conf.eth0.accept_ra_pinfo=1",
        "net.ipv6.conf.eth0.accept_ra_mtu=1",
        "net.ipv6.conf.eth0.autoconf=1",
        "net.ipv6.conf.eth0.accept_dad=1",
    ] {
        p.ns.sysctl(kv);
    }
}

pub(crate) fn out(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

pub(crate) fn link_mtu(p: &LabPod) -> String {
    let l = p.ns.ip_ok(&["-o", "link", "show", "eth0"]);
    l.split(" mtu ").nth(1).unwrap().split(' ').next().unwrap().into()
}

/// One captured packet: its time and its `tcpdump -v` text (all its lines).
pub(crate) struct Pkt {
    pub(crate) t: f64,
    pub(crate) text: String,
}

pub(crate) fn packets(file: &Path) -> Vec<Pkt> {
    let o = std::process::Command::new("tcpdump")
        .args(["-tt", "-n", "-v", "-r", file.to_str().unwrap()])
        .output()
        .expect("tcpdump -r");
    let mut v: Vec<Pkt> = Vec::new();
    for l in String::from_utf8_lossy(&o.stdout).lines() {
        let first = l.split_whitespace().next().and_then(|w| w.parse::<f64>().ok());
        match first {
            Some(t) if !l.starts_with(char::is_whitespace) => v.push(Pkt { t, text: l.into() }),
            _ => {
                if let Some(p) = v.last_mut() {
                    p.text.push('\n');
                    p.text.push_str(l);
                }
            }
        }
    }
    v
}

/// Request → answer on the wire: from the first of a run of requests (retransmissions
/// included) to the answer that ends it, in seconds.
pub(crate) fn exchanges(pkts: &[Pkt], req: &str, ans: &str) -> Vec<f64> {
    let mut pending = None;
    let mut v = Vec::new();
    for p in pkts {
        if p.text.contains(req) {
            pending.get_or_insert(p.t);
        } else if p.text.contains(ans)
            && let Some(t0) = pending.take()
        {
            v.push(p.t - t0);
        }
    }
    v
}

/// Every address an answer names: DHCP `Your-IP`, DHCPv6 `IA_ADDR`, RA prefixes.
pub(crate) fn named(pkts: &[Pkt]) -> Vec<String> {
    let mut v = Vec::new();
    for p in pkts {
        for key in ["Your-IP ", "IA_ADDR ", "prefix info: "] {
            for (i, _) in p.text.match_indices(key) {
                let rest = &p.text[i + key.len()..];
                v.push(
                    rest.split([' ', ')', '/', '\n', ','])
                        .next()
                        .unwrap_or_default()
                        .to_string(),
                );
            }
        }
    }
    v
}

pub(crate) fn pct(v: &mut [f64], p: f64) -> Duration {
    v.sort_by(f64::total_cmp);
    let i = ((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1;
    Duration::from_secs_f64(v[i])
}
