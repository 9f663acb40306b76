//! Shared harness for the datapath tests that run programs in the kernel
//! (`BPF_PROG_TEST_RUN`): loading both objects against a private pin directory, and
//! building/inspecting packets.

#![allow(
    dead_code,
    unreachable_pub,
    reason = "each test binary uses a different subset"
)]

pub mod doors;
pub mod fixtures;
pub mod lb;
pub mod pkt;
pub mod policy;

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use aya::programs::{SchedClassifier, TestRun as _, TestRunOptions};
use aya::{Ebpf, EbpfLoader};
use cozyplane_bpf::{DatapathConfig, Object, programs};

/// tc verdicts as the programs return them.
pub const TC_ACT_OK: u32 = 0;
pub const TC_ACT_SHOT: u32 = 2;
pub const TC_ACT_REDIRECT: u32 = 7;

/// `sizeof(struct __sk_buff)` in the 6.1 UAPI, and the offsets the tests set or read.
const SKB_CTX_LEN: usize = 192;
const SKB_MARK: usize = 8;
const SKB_INGRESS_IFINDEX: usize = 36;
const SKB_IFINDEX: usize = 40;

/// The test run's skb sits on the loopback device: `BPF_PROG_TEST_RUN` uses `lo` unless
/// `__sk_buff.ifindex` names another device of the caller's netns, and these tests create
/// no devices. The programs only use the ifindex as a map key, so one is enough.
pub const LO: u32 = 1;

/// Root is required; a test that cannot load programs must fail, not pass vacuously.
pub fn require_root() {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let euid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .expect("Uid line");
    assert_eq!(
        euid, "0",
        "the BPF_PROG_TEST_RUN tests load eBPF programs and need root (CAP_BPF + CAP_NET_ADMIN); \
         run them as root (`make -C bpf test`), they do not skip"
    );
}

/// Both objects loaded, sharing their maps through a private bpffs directory that is
/// removed on drop.
pub struct Datapath {
    pub pod: Ebpf,
    pub overlay: Ebpf,
    pub uplink: Ebpf,
    pin_dir: PathBuf,
}

/// Output of one program run.
#[derive(Debug)]
pub struct Run {
    pub verdict: u32,
    pub packet: Vec<u8>,
    pub mark: u32,
}

impl Datapath {
    pub fn load(cfg: &DatapathConfig) -> Self {
        require_root();
        static SEQ: AtomicU32 = AtomicU32::new(0);
        // A private bpffs instance per datapath: its pins cannot collide with anything
        // else on the machine, and unmounting it removes them all, even after a panic.
        let pin_dir = std::env::temp_dir().join(format!(
            "cpbpf-bpffs-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir(&pin_dir).unwrap_or_else(|e| panic!("create {}: {e}", pin_dir.display()));
        let mut guard = PinDirGuard(Some(pin_dir.clone()));
        let mounted = Command::new("mount")
            .args(["-t", "bpf", "cpbpf"])
            .arg(&pin_dir)
            .status();
        assert!(
            mounted.is_ok_and(|s| s.success()),
            "mount -t bpf on {} failed: the tests need to mount a private bpffs",
            pin_dir.display()
        );

        let values = cfg.values();
        let mut loader = EbpfLoader::new();
        loader.default_map_pin_directory(&pin_dir);
        values.apply(&mut loader);
        let mut pod = loader.load(Object::Pod.bytes()).expect("load pod.o");
        let mut overlay = loader.load(Object::Overlay.bytes()).expect("load overlay.o");
        let mut uplink = loader.load(Object::Uplink.bytes()).expect("load uplink.o");
        for spec in programs::TC {
            let ebpf = match spec.object {
                Object::Pod => &mut pod,
                Object::Overlay => &mut overlay,
                Object::Uplink => &mut uplink,
                Object::Sock => unreachable!("programs::TC has no socket hook"),
            };
            let prog: &mut SchedClassifier = ebpf
                .program_mut(spec.name)
                .unwrap_or_else(|| panic!("{} not in object", spec.name))
                .try_into()
                .expect("a tc classifier");
            programs::load(prog).unwrap_or_else(|e| panic!("verifier rejected {}: {e:?}", spec.name));
        }
        guard.0 = None;
        Self {
            pod,
            overlay,
            uplink,
            pin_dir,
        }
    }

    fn prog(&self, name: &str) -> &SchedClassifier {
        let object = programs::TC
            .iter()
            .find(|s| s.name == name)
            .map_or(Object::Pod, |s| s.object);
        let ebpf = match object {
            Object::Pod | Object::Sock => &self.pod,
            Object::Overlay => &self.overlay,
            Object::Uplink => &self.uplink,
        };
        ebpf.program(name).unwrap().try_into().unwrap()
    }

    /// Run `name` on `packet` as if it arrived on device `ifindex` with `mark`.
    pub fn run(&self, name: &str, packet: &[u8], ifindex: u32, mark: u32) -> Run {
        self.run_iif(name, packet, ifindex, 0, mark)
    }

    /// [`Self::run`] with `__sk_buff.ingress_ifindex` (`skb_iif`): nonzero for a packet the
    /// host received on some device before (forwarded), 0 for one it sent itself.
    pub fn run_iif(&self, name: &str, packet: &[u8], ifindex: u32, iif: u32, mark: u32) -> Run {
        let mut ctx = [0u8; SKB_CTX_LEN];
        ctx[SKB_MARK..SKB_MARK + 4].copy_from_slice(&mark.to_ne_bytes());
        ctx[SKB_INGRESS_IFINDEX..SKB_INGRESS_IFINDEX + 4].copy_from_slice(&iif.to_ne_bytes());
        ctx[SKB_IFINDEX..SKB_IFINDEX + 4].copy_from_slice(&ifindex.to_ne_bytes());
        let mut ctx_out = [0u8; SKB_CTX_LEN];
        let mut out = vec![0u8; packet.len() + 256];
        let res = self
            .prog(name)
            .test_run(TestRunOptions {
                data_in: Some(packet),
                data_out: Some(&mut out),
                ctx_in: Some(&ctx),
                ctx_out: Some(&mut ctx_out),
                ..TestRunOptions::default()
            })
            .unwrap_or_else(|e| panic!("BPF_PROG_TEST_RUN {name}: {e:?}"));
        out.truncate(res.data_size_out as usize);
        let mark = u32::from_ne_bytes(ctx_out[SKB_MARK..SKB_MARK + 4].try_into().unwrap());
        Run {
            verdict: res.return_value,
            packet: out,
            mark,
        }
    }

    pub fn map_mut(&mut self, name: &str) -> &mut aya::maps::Map {
        self.pod
            .map_mut(name)
            .unwrap_or_else(|| panic!("{name} not in pod.o"))
    }

    pub fn map(&self, name: &str) -> &aya::maps::Map {
        self.pod
            .map(name)
            .unwrap_or_else(|| panic!("{name} not in pod.o"))
    }
}

impl Drop for Datapath {
    fn drop(&mut self) {
        drop(PinDirGuard(Some(self.pin_dir.clone())));
    }
}

/// Unmounts and removes a test bpffs directory.
struct PinDirGuard(Option<PathBuf>);

impl Drop for PinDirGuard {
    fn drop(&mut self) {
        let Some(dir) = self.0.take() else { return };
        let _ = Command::new("umount").arg(&dir).status();
        let _ = std::fs::remove_dir(&dir);
    }
}
