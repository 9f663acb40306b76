//! The guest's side of `autoconf.rs`: Debian's real clients (`dhclient`, `rdisc6`) run in a
//! lab pod's netns stripped of what CNI ADD put there, the sysctls of a guest that
//! autoconfigures, and what a capture inside the guest says (exchanges and their timing, the
//! addresses the answers name). Test files are separate crates: a helper one of them does not
//! call is not dead code.
#![allow(dead_code)]

mod capture;
mod gate;
mod web;
pub(crate) use capture::*;
pub(crate) use gate::*;
pub(crate) use web::*;

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
    /// Per family (4, 6): the last run bound, so a daemon of it is (or is about to be)
    /// named by the pid file.
    bound: std::cell::Cell<[bool; 2]>,
}

impl Dhclient {
    pub(crate) fn new(p: &LabPod) -> Self {
        let etc = PathBuf::from(format!("/etc/netns/{}", p.ns.0));
        std::fs::create_dir_all(&etc).unwrap();
        std::fs::write(etc.join("resolv.conf"), "").unwrap();
        Self {
            dir: tempfile::tempdir().unwrap(),
            etc,
            bound: std::cell::Cell::new([false; 2]),
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

    /// Every process still running with this guest's lease or pid files on its command line
    /// (a zombie has none): its PID and command line.
    pub(crate) fn running(&self) -> Vec<(i32, String)> {
        let mine = self.dir.path().to_str().unwrap().to_string();
        let Ok(procs) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        procs
            .filter_map(|e| {
                let pid = e.ok()?.file_name().to_str()?.parse::<i32>().ok()?;
                let c = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
                let c = String::from_utf8_lossy(&c).replace('\0', " ");
                c.contains(&mine).then_some((pid, c))
            })
            .collect()
    }

    /// That daemon stopped (SIGTERM, by its PID, again every 100 ms until it has exited;
    /// SIGKILL after 3 s), without a release; then its pid file is removed. The daemon's
    /// parent exited when it forked, so once it exits it is a zombie of PID 1 until that
    /// reaps it (the lab's machine reaps about once a second), and a `dhclient -r` or `-x`
    /// that finds a zombie's PID in the pid file "kills" it and then sleeps 1 s for it to
    /// exit (ISC dhclient's `main`); with no pid file it releases at once. A pid file naming
    /// no running daemon of ours goes too: PIDs wrap quickly here (`pid_max` 32768, tens of
    /// processes per cycle), and `dhclient -r` would signal whoever has the PID now.
    ///
    /// After a run that bound, its daemon is waited for first (up to 5 s): the daemon writes
    /// its pid file just after closing the output the run waits for, and a stop that looked
    /// before that missed it; the next run's daemon then took the pid file and the first ran
    /// on unseen, holding the lease (a busy machine keeps a process in that gap long enough:
    /// 34 of 50 guests ended a 1,000-cycle run with such a daemon). What still escapes is
    /// [`Dhclient::running`]'s to find.
    pub(crate) fn stop(&self, fam: u8) {
        use nix::sys::signal::{Signal, kill};
        let i = usize::from(fam == 6);
        let mut bound = self.bound.get();
        if bound[i] {
            let t = Instant::now();
            while self.daemon(fam).is_none() && t.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(5));
            }
            bound[i] = false;
            self.bound.set(bound);
        }
        if let Some(pid) = self.daemon(fam) {
            let pid = nix::unistd::Pid::from_raw(pid);
            let t = Instant::now();
            let mut sent: Option<Instant> = None;
            let mut sig = Signal::SIGTERM;
            while self.daemon(fam).is_some() && t.elapsed() < Duration::from_secs(10) {
                if t.elapsed() > Duration::from_secs(3) && sig == Signal::SIGTERM {
                    sig = Signal::SIGKILL;
                    sent = None;
                }
                if sent.is_none_or(|s| s.elapsed() >= Duration::from_millis(100)) {
                    let _ = kill(pid, sig);
                    sent = Some(Instant::now());
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        let _ = std::fs::remove_file(self.pid(fam));
    }

    /// `dhclient -<fam> -1 -v`, then `extra`, on eth0. A bound `dhclient` stays as a daemon,
    /// and a new one does not stop it (only `-r` and `-x` do, by the pid file, which the new
    /// one overwrites): so the previous daemon is stopped first (else each renewal left one
    /// running, holding its netns). Before a release (`-r`) too, as `dhclient -r` would
    /// (it SIGTERMs the daemon of the pid file, then sleeps 1 s): [`Dhclient::stop`] waits
    /// only as long as the daemon takes to exit, then the release (DHCPRELEASE, DHCPv6
    /// RELEASE) goes out from the lease file at once.
    pub(crate) fn run(&self, p: &LabPod, fam: u8, extra: &[&str]) -> std::process::Output {
        self.stop(fam);
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
        let o = p.ns.exec(&args);
        if o.status.success() && !extra.contains(&"-r") {
            let mut bound = self.bound.get();
            bound[usize::from(fam == 6)] = true;
            self.bound.set(bound);
        }
        o
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

/// Waits (up to 10 s) until no IPv6 address of the guest is tentative (its duplicate address
/// detection is over), as [`cozyplane_lab::Netns::wait_v6_settled`] does but without a
/// process per look: one thread in the guest's netns reads `/proc/thread-self/net/if_inet6`
/// (flags column, `IFA_F_TENTATIVE`) every 20 ms. Fifty guests polling with `ip` every 50 ms
/// were a good part of the CPU two vCPUs had for their cycles.
pub(crate) fn wait_dad(p: &LabPod) {
    const TENTATIVE: u32 = 0x40;
    let settled = cozyplane_lab::run_in(&p.ns, || {
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(10) {
            let table = std::fs::read_to_string("/proc/thread-self/net/if_inet6").unwrap();
            let tentative = table.lines().any(|l| {
                l.split_whitespace()
                    .nth(4)
                    .and_then(|f| u32::from_str_radix(f, 16).ok())
                    .is_some_and(|f| f & TENTATIVE != 0)
            });
            if !tentative {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    });
    assert!(settled, "{}: IPv6 addresses still tentative after 10 s", p.name);
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
