//! The live-migration labs' VM (`migration.rs`, `migration_nics.rs`): a guest played by a
//! network namespace of its own, plugged into one virt-launcher pod at a time as KubeVirt's
//! bridge binding does it.
//!
//! Each guest NIC stands for one interface of the launcher pod (`eth0`, and a secondary
//! interface such as `net1`): in each launcher's netns the CNI's interface (the Port's address
//! and MAC) gives both to the guest: its address is flushed, it gets a MAC of its own and joins
//! a bridge `k6t<i>` with the launcher's end of a veth pair (the tap `tap<i>`); the guest's end
//! is in the VM's netns, under the guest's bridge `br<i>`, which holds the Port's MAC and
//! address and the routes through the link-local gateway (the default route on the first NIC,
//! the VPC's ranges on the others). A migration plugs the guest into the target launcher (its
//! veths waiting, down) and, at the cutover, takes every NIC out of the source's and into the
//! target's in one `ip -batch`: the guest's sockets (a TCP stream's) never notice, as a
//! migrated guest's do not. Then the guest announces itself on each new link, as QEMU does
//! with RARP: here by a gratuitous ARP.
//!
//! [`kubevirt`] plays what KubeVirt writes to the API. Test files are separate crates, so each
//! includes this module; a helper one of them does not call is not dead code.
#![allow(dead_code)]

pub(crate) mod kubevirt;

use std::net::Ipv4Addr;
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cozyplane_lab::{LabPod, Netns, Proc};

/// One NIC of the guest, bridged to the launcher's interface `pod_if`.
struct Nic {
    pod_if: String,
    mac: [u8; 6],
    ip: Ipv4Addr,
    /// What it routes through the link-local gateway: `None` the default route, else these
    /// ranges (a secondary interface's VPC).
    ranges: Option<Vec<String>>,
}

/// The guest.
pub(crate) struct Vm {
    /// Its netns.
    pub(crate) ns: Netns,
    /// Its NICs; the guest's bridge of NIC `i` is `br<i>`.
    nics: Vec<Nic>,
    /// The guest-side veth of the launcher it is in now (NIC 0's; [`nic_name`]).
    nic: Option<String>,
    plugs: usize,
}

/// Seconds since the epoch, as `ping -D` prints them.
pub(crate) fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn parse_mac(mac: &str) -> [u8; 6] {
    let mut m = [0u8; 6];
    for (b, h) in m.iter_mut().zip(mac.split(':')) {
        *b = u8::from_str_radix(h, 16).expect("a MAC");
    }
    m
}

/// The guest-side veth of NIC `i` of the plug named `base` ([`Vm::wire`]).
fn nic_name(base: &str, i: usize) -> String {
    if i == 0 {
        base.to_string()
    } else {
        format!("{base}-{i}")
    }
}

impl Vm {
    /// The guest of the Port `ip`/`mac` (from its first launcher's `eth0`), not yet plugged.
    pub(crate) fn new(ip: Ipv4Addr, mac: &str) -> Self {
        let ns = Netns::new("vm");
        ns.sysctl("net.ipv6.conf.all.disable_ipv6=1");
        let mut vm = Self {
            ns,
            nics: Vec::new(),
            nic: None,
            plugs: 0,
        };
        vm.add_nic("eth0", ip, mac, None);
        vm
    }

    /// One more NIC, bridged to the launcher's secondary interface `pod_if` (its Port's `ip`
    /// and `mac`), routing the VPC's `ranges`; before the first plug.
    pub(crate) fn with_nic(mut self, pod_if: &str, ip: Ipv4Addr, mac: &str, ranges: &[&str]) -> Self {
        assert_eq!(self.plugs, 0, "NICs are added before the guest is plugged");
        let ranges = ranges.iter().map(|r| (*r).to_string()).collect();
        self.add_nic(pod_if, ip, mac, Some(ranges));
        self
    }

    fn add_nic(&mut self, pod_if: &str, ip: Ipv4Addr, mac: &str, ranges: Option<Vec<String>>) {
        let br = format!("br{}", self.nics.len());
        self.ns.ip_ok(&["link", "add", &br, "type", "bridge"]);
        self.ns.ip_ok(&["link", "set", &br, "address", mac]);
        self.ns.ip_ok(&["addr", "add", &format!("{ip}/32"), "dev", &br]);
        self.ns.ip_ok(&["link", "set", &br, "up"]);
        self.nics.push(Nic {
            pod_if: pod_if.to_string(),
            mac: parse_mac(mac),
            ip,
            ranges,
        });
    }

    /// The guest's address (its first NIC's).
    pub(crate) fn ip(&self) -> Ipv4Addr {
        self.nics[0].ip
    }

    /// Prepares `launcher` for the guest (bridge binding of each NIC's interface) and a veth
    /// from it to the guest per NIC, left down on the guest's side; returns the plug's name
    /// (NIC 0's guest-side veth).
    pub(crate) fn wire(&mut self, launcher: &LabPod) -> String {
        let l = &launcher.ns;
        l.sysctl("net.ipv6.conf.all.disable_ipv6=1");
        self.plugs += 1;
        let base = format!("nic{}", self.plugs);
        for (i, n) in self.nics.iter().enumerate() {
            let (k6t, tap, nic) = (format!("k6t{i}"), format!("tap{i}"), nic_name(&base, i));
            l.ip_ok(&["link", "add", &k6t, "type", "bridge"]);
            l.ip_ok(&["link", "set", &k6t, "up"]);
            l.ip_ok(&["addr", "flush", "dev", &n.pod_if]);
            l.ip_ok(&[
                "link",
                "set",
                &n.pod_if,
                "address",
                &format!("02:6b:36:74:00:{:02x}", i + 1),
            ]);
            l.ip_ok(&["link", "set", &n.pod_if, "master", &k6t]);
            l.ip_ok(&[
                "link", "add", &tap, "type", "veth", "peer", "name", &nic, "netns", &self.ns.0,
            ]);
            l.ip_ok(&["link", "set", &tap, "master", &k6t]);
            l.ip_ok(&["link", "set", &tap, "up"]);
            // Up before the switch, so its carrier and queue are ready when it joins br<i>.
            self.ns.ip_ok(&["link", "set", &nic, "up"]);
        }
        base
    }

    /// The guest leaves its launcher and runs behind the plug `nic` ([`Vm::wire`]) from now
    /// on: one batch of netlink requests for every NIC. The first plug also sets the guest's
    /// routes. Returns when it was done (epoch seconds).
    pub(crate) fn switch_to(&mut self, nic: &str) -> f64 {
        let mut batch = String::new();
        let old = self.nic.take();
        for i in 0..self.nics.len() {
            if let Some(old) = &old {
                batch.push_str(&format!("link set {} nomaster\n", nic_name(old, i)));
            }
            batch.push_str(&format!("link set {} master br{i}\n", nic_name(nic, i)));
        }
        let file = tempfile::NamedTempFile::new().expect("batch file");
        std::fs::write(file.path(), batch).expect("batch");
        self.ns
            .ip_ok(&["-batch", file.path().to_str().expect("utf-8 path")]);
        let at = now();
        if self.plugs > 1 {
            // The announce QEMU makes after a migration (bpf/lib/migrate.h), on every NIC at
            // once.
            self.announce();
        }
        if self.plugs == 1 {
            for (i, n) in self.nics.iter().enumerate() {
                let br = format!("br{i}");
                match &n.ranges {
                    None => {
                        self.ns
                            .ip_ok(&["route", "add", "169.254.1.1", "dev", &br, "scope", "link"]);
                        self.ns
                            .ip_ok(&["route", "add", "default", "via", "169.254.1.1", "dev", &br]);
                    }
                    Some(ranges) => {
                        for r in ranges {
                            self.ns
                                .ip_ok(&["route", "add", r, "via", "169.254.1.1", "dev", &br, "onlink"]);
                        }
                    }
                }
            }
        }
        self.nic = Some(nic.to_string());
        at
    }
}

impl Vm {
    /// A gratuitous ARP for each NIC's address out of its bridge `br<i>`, as QEMU announces a
    /// migrated guest on all its NICs in one go (it sends RARP; the datapath takes either):
    /// one thread in the guest's netns, one socket, one frame per NIC.
    fn announce(&self) {
        use nix::sys::socket::{AddressFamily, LinkAddr, MsgFlags, SockFlag, SockType, sendto, socket};
        let ns = std::fs::File::open(self.ns.path()).expect("the VM's netns");
        let frames: Vec<(String, Vec<u8>)> = self
            .nics
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let mut frame = vec![0xff; 6];
                frame.extend_from_slice(&n.mac);
                frame.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
                frame.extend_from_slice(&n.mac);
                frame.extend_from_slice(&n.ip.octets());
                frame.extend_from_slice(&[0; 6]);
                frame.extend_from_slice(&n.ip.octets());
                (format!("br{i}"), frame)
            })
            .collect();
        std::thread::scope(|s| {
            s.spawn(|| {
                nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
                let fd = socket(AddressFamily::Packet, SockType::Raw, SockFlag::empty(), None)
                    .expect("packet socket");
                // The bridges' link addresses (from getifaddrs: building a sockaddr_ll takes
                // `unsafe`, which this workspace forbids); a raw packet socket sends each
                // frame as it is.
                let links: Vec<LinkAddr> = nix::ifaddrs::getifaddrs()
                    .expect("getifaddrs")
                    .filter_map(|i| Some(*i.address?.as_link_addr()?))
                    .collect();
                for (br, frame) in &frames {
                    let ifindex = nix::net::if_::if_nametoindex(br.as_str()).expect("the bridge");
                    let addr = links
                        .iter()
                        .find(|l| l.ifindex() == ifindex as usize)
                        .expect("the bridge's link address");
                    sendto(
                        std::os::fd::AsRawFd::as_raw_fd(&fd),
                        frame,
                        addr,
                        MsgFlags::empty(),
                    )
                    .expect("send the announce");
                }
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
