//! The loader's side of the socket hooks: `Datapath::attach_sock` pins one cgroup link per
//! hook, a restarted agent's load swaps its programs into those links in place, a link whose
//! cgroup is gone is replaced, `detach_sock` removes them; and the netns cookies the CNI path
//! registers name the netns they are read from. What the hooks do with sockets is
//! `bpf/tests/sock_lb.rs`. Root (bpffs, cgroup2, netns); fails without it.

use std::path::{Path, PathBuf};

use aya::programs::links::{FdLink, PinnedLink};
use cozyplane_agent::core::datapath::loader::{AttachOutcome, Datapath};
use cozyplane_agent::core::datapath::{cgroup, netns_cookie};
use cozyplane_bpf::maps::sock_netns::SockNetnsMap;
use cozyplane_bpf::{DatapathConfig, programs};
use cozyplane_lab::{require_root, sh, sh_ok};

const HOOKS: [&str; 8] = [
    "sock_connect4",
    "sock_connect6",
    "sock_sendmsg4",
    "sock_sendmsg6",
    "sock_recvmsg4",
    "sock_recvmsg6",
    "sock_getpeername4",
    "sock_getpeername6",
];

/// A private bpffs, a cgroup2 directory and a netns, each removed on drop.
struct Scratch {
    bpffs: tempfile::TempDir,
    cgroups: Vec<PathBuf>,
    netns: Option<String>,
}

impl Scratch {
    fn new() -> Self {
        require_root();
        let bpffs = tempfile::tempdir().unwrap();
        sh_ok(&[
            "mount",
            "-t",
            "bpf",
            "cpsockattach",
            bpffs.path().to_str().unwrap(),
        ]);
        Self {
            bpffs,
            cgroups: Vec::new(),
            netns: None,
        }
    }

    fn pins(&self) -> PathBuf {
        self.bpffs.path().join("cozyplane")
    }

    fn cgroup(&mut self, name: &str) -> PathBuf {
        let root = cgroup::cgroup2_root().expect("a cgroup2 mount");
        let dir = root.join(format!("cpsockattach-{}-{name}", std::process::id()));
        std::fs::create_dir(&dir).unwrap();
        self.cgroups.push(dir.clone());
        dir
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = sh(&["umount", "-l", self.bpffs.path().to_str().unwrap()]);
        for c in &self.cgroups {
            let _ = std::fs::remove_dir(c);
        }
        if let Some(ns) = &self.netns {
            let _ = sh(&["ip", "netns", "del", ns]);
        }
    }
}

/// The program id behind each hook's pin.
fn pinned_programs(pins: &Path) -> Vec<u32> {
    HOOKS
        .iter()
        .map(|h| {
            let link = FdLink::from(PinnedLink::from_pin(pins.join("links").join(h)).unwrap());
            link.info().unwrap().program_id()
        })
        .collect()
}

#[test]
fn socket_hooks_are_pinned_links_updated_in_place_across_a_restart() {
    let mut s = Scratch::new();
    assert_eq!(programs::SOCK.len(), HOOKS.len());
    let cg = s.cgroup("a");
    let mut first = Datapath::load(&s.pins(), &DatapathConfig::default()).expect("load");
    assert_eq!(first.attach_sock(&cg).unwrap(), AttachOutcome::Created);
    let before = pinned_programs(&s.pins());

    // A restart: a new load reuses the pins; the links take its programs.
    let mut second = Datapath::load(&s.pins(), &DatapathConfig::default()).expect("reload");
    drop(first);
    assert_eq!(second.attach_sock(&cg).unwrap(), AttachOutcome::Replaced);
    let after = pinned_programs(&s.pins());
    for ((h, b), a) in HOOKS.iter().zip(&before).zip(&after) {
        assert_ne!(a, b, "{h}: the restarted agent's program");
    }

    second.detach_sock().unwrap();
    for h in HOOKS {
        assert!(!s.pins().join("links").join(h).exists(), "{h} unpinned");
    }
    second.detach_sock().expect("detaching twice is fine");
}

/// Pins remember no cgroup: a link serving another cgroup, or one removed since (which a
/// link update would still accept until the kernel releases it), is replaced.
#[test]
fn a_link_of_another_or_a_removed_cgroup_is_replaced() {
    let mut s = Scratch::new();
    let gone = s.cgroup("gone");
    let mut dp = Datapath::load(&s.pins(), &DatapathConfig::default()).expect("load");
    dp.attach_sock(&gone).unwrap();
    std::fs::remove_dir(&gone).expect("a cgroup with only bpf links attached can go");
    let cg = s.cgroup("b");
    assert_eq!(dp.attach_sock(&cg).unwrap(), AttachOutcome::Created);
    assert_eq!(dp.attach_sock(&cg).unwrap(), AttachOutcome::Replaced);
    let other = s.cgroup("c");
    assert_eq!(dp.attach_sock(&other).unwrap(), AttachOutcome::Created);
    let id = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&other).unwrap());
    for h in HOOKS {
        let pin = s.pins().join("links").join(h);
        assert_eq!(cozyplane_bpf::sys::cgroup_link_target(&pin).unwrap(), id, "{h}");
    }
    dp.detach_sock().unwrap();
}

#[test]
fn the_cookie_of_a_netns_path_is_that_netns() {
    let mut s = Scratch::new();
    let ns = format!("cpsockattach-{}", std::process::id());
    sh_ok(&["ip", "netns", "add", &ns]);
    s.netns = Some(ns.clone());
    let own = netns_cookie::own().unwrap();
    let theirs = netns_cookie::of_path(Path::new(&format!("/run/netns/{ns}"))).unwrap();
    assert_ne!(theirs, own);
    assert_eq!(
        netns_cookie::of_path(Path::new("/proc/self/ns/net")).unwrap(),
        own
    );
    assert_eq!(
        netns_cookie::own().unwrap(),
        own,
        "the caller never left its netns"
    );

    let _dp = Datapath::load(&s.pins(), &DatapathConfig::default()).expect("load");
    assert_eq!(netns_cookie::register_own(&s.pins()).unwrap(), own);
    let m = SockNetnsMap::from_pin(&s.pins()).unwrap();
    assert_eq!(m.get(own).unwrap(), Some(0));
    assert_eq!(m.get(theirs).unwrap(), None);
}
