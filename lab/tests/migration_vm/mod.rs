//! The live-migration lab's VM (`migration.rs`): a guest played by a network namespace of its
//! own, plugged into one virt-launcher pod at a time as KubeVirt's bridge binding does it.
//!
//! In each launcher pod's netns the CNI's `eth0` (the Port's address and MAC) gives both to
//! the guest: its address is flushed, it gets a MAC of its own and joins a bridge `k6t` with
//! the launcher's end of a veth pair (the tap); the guest's end is in the VM's netns, under
//! the guest's bridge `br0`, which holds the Port's MAC and address and the route to the
//! link-local gateway. A migration plugs the guest into the target launcher (its veth
//! waiting, down) and, at the cutover, takes it out of the source's and into the target's in
//! one `ip -batch`: the guest's sockets (a TCP stream's) never notice, as a migrated guest's
//! do not. Then the guest announces itself on its new link, as QEMU does with RARP: here by
//! its ARP for the gateway.

use std::net::Ipv4Addr;
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cozyplane_lab::{LabPod, Netns, Proc};

/// The guest.
pub(crate) struct Vm {
    /// Its netns.
    pub(crate) ns: Netns,
    mac: [u8; 6],
    ip: Ipv4Addr,
    /// The guest-side veth of the launcher it is in now.
    nic: Option<String>,
    plugs: usize,
}

/// Seconds since the epoch, as `ping -D` prints them.
pub(crate) fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

impl Vm {
    /// The guest of the Port `ip`/`mac` (from its first launcher), not yet plugged.
    pub(crate) fn new(ip: Ipv4Addr, mac: &str) -> Self {
        let ns = Netns::new("vm");
        ns.sysctl("net.ipv6.conf.all.disable_ipv6=1");
        ns.ip_ok(&["link", "add", "br0", "type", "bridge"]);
        ns.ip_ok(&["link", "set", "br0", "address", mac]);
        ns.ip_ok(&["addr", "add", &format!("{ip}/32"), "dev", "br0"]);
        ns.ip_ok(&["link", "set", "br0", "up"]);
        let mut m = [0u8; 6];
        for (b, h) in m.iter_mut().zip(mac.split(':')) {
            *b = u8::from_str_radix(h, 16).expect("a MAC");
        }
        Self {
            ns,
            mac: m,
            ip,
            nic: None,
            plugs: 0,
        }
    }

    /// The guest's address.
    pub(crate) fn ip(&self) -> Ipv4Addr {
        self.ip
    }

    /// Prepares `launcher` for the guest (bridge binding) and a veth from it to the guest,
    /// left down on the guest's side; returns that side's name.
    pub(crate) fn wire(&mut self, launcher: &LabPod) -> String {
        let l = &launcher.ns;
        l.sysctl("net.ipv6.conf.all.disable_ipv6=1");
        l.ip_ok(&["link", "add", "k6t", "type", "bridge"]);
        l.ip_ok(&["link", "set", "k6t", "up"]);
        l.ip_ok(&["addr", "flush", "dev", "eth0"]);
        l.ip_ok(&["link", "set", "eth0", "address", "02:6b:36:74:00:01"]);
        l.ip_ok(&["link", "set", "eth0", "master", "k6t"]);
        self.plugs += 1;
        let nic = format!("nic{}", self.plugs);
        l.ip_ok(&[
            "link", "add", "tap0", "type", "veth", "peer", "name", &nic, "netns", &self.ns.0,
        ]);
        l.ip_ok(&["link", "set", "tap0", "master", "k6t"]);
        l.ip_ok(&["link", "set", "tap0", "up"]);
        // Up before the switch, so its carrier and queue are ready when it joins br0.
        self.ns.ip_ok(&["link", "set", &nic, "up"]);
        nic
    }

    /// The guest leaves its launcher and runs behind `nic` ([`Vm::wire`]) from now on: one
    /// batch of netlink requests. The first plug also sets the guest's routes. Returns when
    /// it was done (epoch seconds).
    pub(crate) fn switch_to(&mut self, nic: &str) -> f64 {
        let mut batch = String::new();
        if let Some(old) = self.nic.take() {
            batch.push_str(&format!("link set {old} nomaster\n"));
        }
        batch.push_str(&format!("link set {nic} master br0\n"));
        let file = tempfile::NamedTempFile::new().expect("batch file");
        std::fs::write(file.path(), batch).expect("batch");
        self.ns
            .ip_ok(&["-batch", file.path().to_str().expect("utf-8 path")]);
        let at = now();
        if self.plugs > 1 {
            // The announce QEMU makes after a migration (bpf/lib/migrate.h).
            self.announce();
        }
        if self.plugs == 1 {
            self.ns
                .ip_ok(&["route", "add", "169.254.1.1", "dev", "br0", "scope", "link"]);
            self.ns
                .ip_ok(&["route", "add", "default", "via", "169.254.1.1", "dev", "br0"]);
        }
        self.nic = Some(nic.to_string());
        at
    }
}

impl Vm {
    /// A gratuitous ARP for the guest's address out of `br0`, as QEMU announces a migrated
    /// guest (it sends RARP; the datapath takes either).
    fn announce(&self) {
        use nix::sys::socket::{AddressFamily, LinkAddr, MsgFlags, SockFlag, SockType, sendto, socket};
        let ns = std::fs::File::open(self.ns.path()).expect("the VM's netns");
        let (mac, ip) = (self.mac, self.ip.octets());
        std::thread::scope(|s| {
            s.spawn(|| {
                nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
                let ifindex = nix::net::if_::if_nametoindex("br0").expect("br0");
                let fd = socket(AddressFamily::Packet, SockType::Raw, SockFlag::empty(), None)
                    .expect("packet socket");
                let mut frame = vec![0xff; 6];
                frame.extend_from_slice(&mac);
                frame.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
                frame.extend_from_slice(&mac);
                frame.extend_from_slice(&ip);
                frame.extend_from_slice(&[0; 6]);
                frame.extend_from_slice(&ip);
                // br0's link address (from getifaddrs: building a sockaddr_ll takes `unsafe`,
                // which this workspace forbids); a raw packet socket sends the frame as it is.
                let addr: LinkAddr = nix::ifaddrs::getifaddrs()
                    .expect("getifaddrs")
                    .find_map(|i| {
                        let l = *i.address?.as_link_addr()?;
                        (l.ifindex() == ifindex as usize).then_some(l)
                    })
                    .expect("br0's link address");
                sendto(
                    std::os::fd::AsRawFd::as_raw_fd(&fd),
                    &frame,
                    &addr,
                    MsgFlags::empty(),
                )
                .expect("send the announce");
            });
        });
    }
}

/// `ping -D -i 0.01` running from a pod: every reply's time, by sequence number.
pub(crate) struct Pinger {
    proc: Option<Proc>,
    out: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Pinger {
    /// Starts pinging `to` from `from` every 10 ms.
    pub(crate) fn start(from: &Netns, to: Ipv4Addr) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = dir.path().join("ping.log");
        let f = std::fs::File::create(&out).expect("ping log");
        let p = from
            .command(&["ping", "-n", "-D", "-i", "0.01", "-W", "1", &to.to_string()])
            .stdout(f)
            .stderr(Stdio::null())
            .spawn()
            .expect("ping");
        Self {
            proc: Some(Proc(p)),
            out,
            _dir: dir,
        }
    }

    /// Stops it; the replies `(seq, epoch seconds)` in order.
    pub(crate) fn stop(&mut self) -> Vec<(u64, f64)> {
        if let Some(p) = self.proc.take() {
            drop(p);
        }
        std::thread::sleep(Duration::from_millis(50));
        replies(&std::fs::read_to_string(&self.out).unwrap_or_default())
    }
}

/// Parses `ping -D` lines: `[1733570000.123456] 64 bytes from …: icmp_seq=7 ttl=63 time=…`.
pub(crate) fn replies(text: &str) -> Vec<(u64, f64)> {
    text.lines()
        .filter_map(|l| {
            let t = l.strip_prefix('[')?.split(']').next()?.parse().ok()?;
            let seq = l
                .split("icmp_seq=")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()?;
            Some((seq, t))
        })
        .collect()
}

/// Probes lost in `[from, to]` (epoch seconds): sequence numbers missing between the replies
/// received in that window and its neighbours.
pub(crate) fn lost_between(r: &[(u64, f64)], from: f64, to: f64) -> u64 {
    let first = r.iter().position(|(_, t)| *t >= from);
    let last = r.iter().rposition(|(_, t)| *t <= to);
    let (Some(a), Some(b)) = (first, last) else {
        return u64::MAX;
    };
    let (a, b) = (a.saturating_sub(1), (b + 1).min(r.len() - 1));
    r[a..=b]
        .windows(2)
        .map(|w| w[1].0.saturating_sub(w[0].0 + 1))
        .sum()
}

/// The gap between the last reply before `at` and the first after it (seconds).
pub(crate) fn gap_at(r: &[(u64, f64)], at: f64) -> f64 {
    let after = r.iter().position(|(_, t)| *t > at).unwrap_or(r.len() - 1);
    let before = after.saturating_sub(1);
    r[after].1 - r[before].1
}

/// The `q` quantile (0..=1) of `v` (nearest rank).
pub(crate) fn quantile(v: &[f64], q: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let i = ((q * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1;
    s[i]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn losses_and_gaps_from_ping_lines() {
        let text = "[10.00] 64 bytes from 10.0.0.2: icmp_seq=1 ttl=63 time=0.1 ms\n\
                    [10.01] 64 bytes from 10.0.0.2: icmp_seq=2 ttl=63 time=0.1 ms\n\
                    [10.05] 64 bytes from 10.0.0.2: icmp_seq=6 ttl=63 time=0.1 ms\n\
                    no answer yet for icmp_seq=7\n\
                    [10.06] 64 bytes from 10.0.0.2: icmp_seq=7 ttl=63 time=0.1 ms\n";
        let r = replies(text);
        assert_eq!(r.len(), 4);
        assert_eq!(lost_between(&r, 10.02, 10.04), 3);
        assert_eq!(lost_between(&r, 10.055, 10.07), 0);
        assert!((gap_at(&r, 10.02) - 0.04).abs() < 1e-9);
        assert_eq!(quantile(&[3.0, 1.0, 2.0], 0.5), 2.0);
        assert_eq!(quantile(&[3.0, 1.0, 2.0], 0.99), 3.0);
    }
}
