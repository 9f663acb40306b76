//! Loading the embedded objects of `cozyplane-bpf` and attaching them so the datapath
//! outlives the agent process.
//!
//! * The **overlay device** gets a pinned TCX link, `links/<device>_in` under the agent's
//!   bpffs directory (bpffs rejects dots in names). On start the loader swaps the newly
//!   loaded program into the pinned link (`bpf_link_update`) instead of detaching.
//! * **Pod veths** get `cls_bpf` filters on a `clsact` qdisc (netlink), at a fixed
//!   priority and handle. Not TCX: every TCX attach waits for an RCU grace period while
//!   holding the RTNL lock (the kernel swaps the device's program array), which cost
//!   ~12 ms per hook on the reference machine and stalled every other pod's netlink work
//!   behind it. A filter lives with its device, so it needs no pin; on restart the
//!   program is replaced in place (a filter change at the same priority and handle).
//! * The **socket hooks** of the default network's Services (`programs::SOCK`) get pinned
//!   cgroup links, `links/sock_<hook>`, on a cgroup2 directory ([`Datapath::attach_sock`]).
//!   On start the loader swaps the new program into each pinned link (`BPF_LINK_UPDATE`,
//!   [`cozyplane_bpf::sys::update_link`]), as for the TCX links: no socket is ever unserved.
//!
//! The maps are pinned by name by aya (one file per `maps::*::NAME`); on start the loader
//! reuses them (aya opens an existing pin instead of creating a map), except a map whose
//! pinned definition differs from the objects' ([`super::upgrade`]): that one is created
//! afresh and refilled by the start-up reconciliation. No packet ever sees an unattached
//! device.

use std::fs::File;
use std::os::fd::AsFd as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use aya::programs::links::{FdLink, LinkError, PinnedLink};
use aya::programs::tc::{NlOptions, SchedClassifierLink, TcAttachOptions, TcHandle};
use aya::programs::{CgroupAttachMode, CgroupSockAddr, SchedClassifier, TcAttachType};
use aya::{Ebpf, EbpfLoader};
use cozyplane_bpf::programs::{self, AttachPoint, ProgramSpec};
use cozyplane_bpf::{DatapathConfig, Object, maps};

/// The `cls_bpf` filter of a pod hook: priority 1, handle 1 on the clsact hook. Fixed, so
/// a restarted agent finds (and replaces) exactly its own filter.
const POD_FILTER_PRIORITY: u16 = 1;
const POD_FILTER_HANDLE: TcHandle = TcHandle::new(0, 1);

/// `BPF_FS_MAGIC` from `linux/magic.h`.
const BPF_FS_MAGIC: i64 = 0xcafe_4a11;

/// Why loading or attaching failed.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The pin directory is not on a bpffs (pins would fail or not survive).
    #[error("{0} is not on a bpf filesystem; mount one (mount -t bpf bpffs <dir>) or pass --bpffs-dir")]
    NotBpffs(PathBuf),
    /// Filesystem work in the pin directory.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: std::io::Error,
    },
    /// aya failed to load an object or a program.
    #[error("loading {what}: {source}")]
    Load {
        /// Object or program.
        what: String,
        /// The error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Attaching or pinning a link failed.
    #[error("attaching {prog} to {dev}: {source}")]
    Attach {
        /// Program name.
        prog: &'static str,
        /// Device name, or the cgroup directory of a socket hook.
        dev: String,
        /// The error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// What happened to one attachment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachOutcome {
    /// A new link (or filter) was created.
    Created,
    /// A link or filter existed; its program was replaced in place.
    Replaced,
}

/// The loaded objects; the programs stay loaded while this lives, the links and maps
/// stay regardless (they are pinned).
pub struct Datapath {
    pin_dir: PathBuf,
    pod: Ebpf,
    overlay: Ebpf,
    uplink: Ebpf,
    sock: Ebpf,
    /// How many maps were already pinned when this process loaded them.
    pub reused_maps: usize,
    /// Pinned maps whose layout had changed: created afresh by this load.
    pub rebuilt_maps: Vec<super::upgrade::Retired>,
}

impl std::fmt::Debug for Datapath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Datapath")
            .field("pin_dir", &self.pin_dir)
            .finish_non_exhaustive()
    }
}

impl Datapath {
    /// Load every object with `cfg`, pinning (or reusing) the maps under `pin_dir`.
    pub fn load(pin_dir: &Path, cfg: &DatapathConfig) -> Result<Self, LoadError> {
        let io = |what: String| move |source| LoadError::Io { what, source };
        std::fs::create_dir_all(pin_dir.join("links"))
            .map_err(io(format!("create {}", pin_dir.display())))?;
        let fs = nix::sys::statfs::statfs(pin_dir)
            .map_err(|e| io(format!("statfs {}", pin_dir.display()))(std::io::Error::from(e)))?;
        if fs.filesystem_type().0 as i64 != BPF_FS_MAGIC {
            return Err(LoadError::NotBpffs(pin_dir.to_path_buf()));
        }
        let rebuilt_maps = super::upgrade::retire_incompatible_pins(pin_dir)
            .map_err(io(format!("retire changed maps in {}", pin_dir.display())))?;
        for r in &rebuilt_maps {
            tracing::warn!(map = %r.name, pinned = ?r.pinned, wanted = ?r.wanted,
                "pinned map has another layout than this agent's: rebuilding it from its sources");
        }
        let reused_maps = maps::ALL.iter().filter(|m| pin_dir.join(m).exists()).count();

        let values = cfg.values();
        let mut loader = EbpfLoader::new();
        loader.default_map_pin_directory(pin_dir);
        values.apply(&mut loader);
        let mut load = |obj: Object| {
            let mut ebpf = loader.load(obj.bytes()).map_err(|e| LoadError::Load {
                what: obj.file_name().to_string(),
                source: Box::new(e),
            })?;
            for spec in programs::ALL.iter().filter(|s| s.object == obj) {
                let loaded = match spec.attach {
                    AttachPoint::Cgroup => programs::load_sock(sock_addr(&mut ebpf, spec)?),
                    _ => programs::load(classifier(&mut ebpf, spec)?),
                };
                loaded.map_err(|e| LoadError::Load {
                    what: spec.name.to_string(),
                    source: Box::new(e),
                })?;
            }
            Ok::<_, LoadError>(ebpf)
        };
        let pod = load(Object::Pod)?;
        let overlay = load(Object::Overlay)?;
        let uplink = load(Object::Uplink)?;
        let sock = load(Object::Sock)?;
        Ok(Self {
            pin_dir: pin_dir.to_path_buf(),
            pod,
            overlay,
            uplink,
            sock,
            reused_maps,
            rebuilt_maps,
        })
    }

    /// The bpffs directory.
    pub fn pin_dir(&self) -> &Path {
        &self.pin_dir
    }

    /// Attach `sdn_from_pod` (ingress) and `sdn_to_pod` (egress) to a host veth.
    pub fn attach_pod(&mut self, dev: &str) -> Result<AttachOutcome, LoadError> {
        let a = self.attach_filter(&programs::FROM_POD, dev, TcAttachType::Ingress)?;
        let b = self.attach_filter(&programs::TO_POD, dev, TcAttachType::Egress)?;
        Ok(if a == AttachOutcome::Created || b == AttachOutcome::Created {
            AttachOutcome::Created
        } else {
            AttachOutcome::Replaced
        })
    }

    /// Attach `sdn_from_overlay` to the tunnel device's ingress.
    pub fn attach_overlay(&mut self, dev: &str) -> Result<AttachOutcome, LoadError> {
        self.attach(&programs::FROM_OVERLAY, dev, TcAttachType::Ingress)
    }

    /// Attach `sdn_from_uplink` to the uplink's ingress (a pinned TCX link, like the
    /// overlay's: a restarted agent swaps its program in, and the hook stays while no agent
    /// runs).
    pub fn attach_uplink(&mut self, dev: &str) -> Result<AttachOutcome, LoadError> {
        self.attach(&programs::FROM_UPLINK, dev, TcAttachType::Ingress)
    }

    /// Attach `sdn_host_out` (the HostFirewall's egress hook) to `dev`'s egress: the uplink's
    /// and the tunnel device's (how the node reaches other nodes' pods). A pinned TCX link,
    /// like the ingress hooks'.
    pub fn attach_host_out(&mut self, dev: &str) -> Result<AttachOutcome, LoadError> {
        self.attach(&programs::HOST_OUT, dev, TcAttachType::Egress)
    }

    /// Remove the link pins of `dev` (a pod's filters go with its veth; pins are left only
    /// by agents that attached pods with TCX). Absent pins are fine (idempotent DEL).
    pub fn detach(&self, dev: &str) -> Result<(), LoadError> {
        for dir in ["in", "eg"] {
            unpin(&self.link_pin(dev, dir))?;
        }
        Ok(())
    }

    fn link_pin(&self, dev: &str, dir: &str) -> PathBuf {
        self.pin_dir.join("links").join(format!("{dev}_{dir}"))
    }

    fn attach(
        &mut self,
        spec: &ProgramSpec,
        dev: &str,
        at: TcAttachType,
    ) -> Result<AttachOutcome, LoadError> {
        let pin = self.link_pin(
            dev,
            match at {
                TcAttachType::Egress => "eg",
                _ => "in",
            },
        );
        let ebpf = match spec.object {
            Object::Pod => &mut self.pod,
            Object::Overlay => &mut self.overlay,
            Object::Uplink => &mut self.uplink,
            Object::Sock => &mut self.sock,
        };
        let prog = classifier(ebpf, spec)?;
        let err = |source: Box<dyn std::error::Error + Send + Sync>| LoadError::Attach {
            prog: spec.name,
            dev: dev.to_string(),
            source,
        };
        // An absent pin is the normal first attach; check the path rather than decoding
        // BPF_OBJ_GET's errno, which aya does not expose uniformly.
        if pin.exists() {
            let old = PinnedLink::from_pin(&pin).map_err(|e| err(Box::new(e)))?;
            {
                let link = SchedClassifierLink::try_from(FdLink::from(old)).map_err(|e| err(Box::new(e)))?;
                match prog.attach_to_link(link) {
                    Ok(id) => {
                        // The pin keeps the link; this process's handle may go.
                        drop(prog.take_link(id).map_err(|e| err(Box::new(e)))?);
                        return Ok(AttachOutcome::Replaced);
                    }
                    Err(e) => {
                        // A link whose device is gone (veth recreated under the same name)
                        // cannot be updated: drop the stale pin and attach afresh.
                        tracing::debug!(%dev, prog = spec.name, "stale link pin: {e}");
                        let _ = std::fs::remove_file(&pin);
                    }
                }
            }
        }
        let id = prog.attach(dev, at).map_err(|e| err(Box::new(e)))?;
        let link = prog.take_link(id).map_err(|e| err(Box::new(e)))?;
        let fd: FdLink = link.try_into().map_err(|e: LinkError| err(Box::new(e)))?;
        fd.pin(&pin).map_err(|e| err(Box::new(e)))?;
        Ok(AttachOutcome::Created)
    }
}

impl Datapath {
    /// A pod hook: our `cls_bpf` filter, created, or its program replaced in place.
    fn attach_filter(
        &mut self,
        spec: &ProgramSpec,
        dev: &str,
        at: TcAttachType,
    ) -> Result<AttachOutcome, LoadError> {
        let prog = classifier(&mut self.pod, spec)?;
        let err = |source: Box<dyn std::error::Error + Send + Sync>| LoadError::Attach {
            prog: spec.name,
            dev: dev.to_string(),
            source,
        };
        // EEXIST: the device has its clsact qdisc already (restart, or the other hook).
        if let Err(e) = aya::programs::tc::qdisc_add_clsact(dev) {
            let exists = matches!(&e, aya::programs::tc::TcError::NetlinkError(n)
                if n.raw_os_error() == Some(nix::libc::EEXIST));
            if !exists {
                return Err(err(Box::new(e)));
            }
        }
        let opts = NlOptions {
            priority: POD_FILTER_PRIORITY,
            handle: POD_FILTER_HANDLE,
            classid: None,
        };
        let (id, outcome) = match prog.attach_with_options(dev, at, TcAttachOptions::Netlink(opts)) {
            Ok(id) => (id, AttachOutcome::Created),
            Err(first) => {
                // Our filter is there already (agent restart): swap the program in place.
                let link =
                    SchedClassifierLink::attached(dev, at, POD_FILTER_PRIORITY, POD_FILTER_HANDLE, None)
                        .map_err(|e| err(Box::new(e)))?;
                match prog.attach_to_link(link) {
                    Ok(id) => (id, AttachOutcome::Replaced),
                    Err(e) => {
                        return Err(err(format!("{first}; replacing: {e}").into()));
                    }
                }
            }
        };
        // The filter must outlive this process: a link handle detaches when dropped.
        let link = prog.take_link(id).map_err(|e| err(Box::new(e)))?;
        std::mem::forget(link);
        Ok(outcome)
    }
}

impl Datapath {
    /// Attach the socket hooks of the default network's Services ([`programs::SOCK`]) to the
    /// cgroup2 directory `cgroup`: on a node, the unified hierarchy's root
    /// ([`super::cgroup::cgroup2_root`]), whose hooks run for every process of the machine
    /// (`sdn_sock_netns` limits them to this node's sockets). Each hook is a pinned bpf link,
    /// `links/sock_<hook>` (`sock_connect4`, …). When the pin exists and its link serves
    /// `cgroup` (an agent restart), the link takes this process's program in place, so sockets
    /// are never unserved. A pinned link of another cgroup, or of one removed since, is
    /// replaced: the new link first, then the pin. `Created` if any link was new.
    pub fn attach_sock(&mut self, cgroup: &Path) -> Result<AttachOutcome, LoadError> {
        let io = |what: String| move |source| LoadError::Io { what, source };
        let dir = File::open(cgroup).map_err(io(format!("open cgroup {}", cgroup.display())))?;
        // A cgroup's id is its directory's inode number; a link reports the id it serves.
        let id = dir
            .metadata()
            .map_err(io(format!("stat cgroup {}", cgroup.display())))?
            .ino();
        let mut outcome = AttachOutcome::Replaced;
        for spec in &programs::SOCK {
            if self.attach_sock_hook(spec, &dir, (cgroup, id))? == AttachOutcome::Created {
                outcome = AttachOutcome::Created;
            }
        }
        Ok(outcome)
    }

    /// Remove the socket hooks: unpinning a link detaches it (nothing else holds it).
    /// Absent pins are fine.
    pub fn detach_sock(&self) -> Result<(), LoadError> {
        for spec in &programs::SOCK {
            unpin(&self.sock_pin(spec))?;
        }
        Ok(())
    }

    /// `links/sock_connect4` for `sdn_sock_connect4`.
    fn sock_pin(&self, spec: &ProgramSpec) -> PathBuf {
        let hook = spec.name.strip_prefix("sdn_").unwrap_or(spec.name);
        self.pin_dir.join("links").join(hook)
    }

    fn attach_sock_hook(
        &mut self,
        spec: &ProgramSpec,
        dir: &File,
        (cgroup, cgroup_id): (&Path, u64),
    ) -> Result<AttachOutcome, LoadError> {
        let pin = self.sock_pin(spec);
        let prog = sock_addr(&mut self.sock, spec)?;
        let err = |source: Box<dyn std::error::Error + Send + Sync>| LoadError::Attach {
            prog: spec.name,
            dev: cgroup.display().to_string(),
            source,
        };
        let stale = pin.exists();
        if stale {
            let fd = prog.fd().map_err(|e| err(Box::new(e)))?;
            // A link of a removed cgroup reports 0 once released, and takes no program
            // (ENOLINK) from then on; until then it would, and serve nobody.
            let updated = match cozyplane_bpf::sys::cgroup_link_target(&pin) {
                Ok(id) if id == cgroup_id => cozyplane_bpf::sys::update_link(&pin, fd.as_fd()),
                Ok(id) => Err(std::io::Error::other(format!("the link serves cgroup id {id}"))),
                Err(e) => Err(e),
            };
            match updated {
                Ok(()) => return Ok(AttachOutcome::Replaced),
                Err(e) => {
                    tracing::info!(prog = spec.name, pin = %pin.display(), "replacing a stale link: {e}");
                }
            }
        }
        // The new link first, then the old pin goes: meanwhile both run, and the second sees
        // a backend's address, no frontend, and leaves it alone.
        let id = prog
            .attach(dir, CgroupAttachMode::Single)
            .map_err(|e| err(Box::new(e)))?;
        let link: FdLink = prog
            .take_link(id)
            .map_err(|e| err(Box::new(e)))?
            .try_into()
            .map_err(|e: LinkError| err(Box::new(e)))?;
        if stale {
            let _ = std::fs::remove_file(&pin);
        }
        link.pin(&pin).map_err(|e| err(Box::new(e)))?;
        Ok(AttachOutcome::Created)
    }
}

fn sock_addr<'a>(ebpf: &'a mut Ebpf, spec: &ProgramSpec) -> Result<&'a mut CgroupSockAddr, LoadError> {
    let missing = || LoadError::Load {
        what: spec.name.to_string(),
        source: format!("{} has no program {}", spec.object.file_name(), spec.name).into(),
    };
    ebpf.program_mut(spec.name)
        .ok_or_else(missing)?
        .try_into()
        .map_err(|e: aya::programs::ProgramError| LoadError::Load {
            what: spec.name.to_string(),
            source: Box::new(e),
        })
}

fn classifier<'a>(ebpf: &'a mut Ebpf, spec: &ProgramSpec) -> Result<&'a mut SchedClassifier, LoadError> {
    let missing = || LoadError::Load {
        what: spec.name.to_string(),
        source: format!("{} has no program {}", spec.object.file_name(), spec.name).into(),
    };
    ebpf.program_mut(spec.name)
        .ok_or_else(missing)?
        .try_into()
        .map_err(|e: aya::programs::ProgramError| LoadError::Load {
            what: spec.name.to_string(),
            source: Box::new(e),
        })
}

/// Remove a link pin (unpinning a link nothing else holds detaches it); absent is fine.
fn unpin(pin: &Path) -> Result<(), LoadError> {
    match std::fs::remove_file(pin) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(LoadError::Io {
            what: format!("unpin {}", pin.display()),
            source,
        }),
    }
}
