//! The cozyplane eBPF datapath: C tc and socket programs and their Rust ABI.
//!
//! The C side is the source of truth: `include/sdn/*.h` defines every map, key, value,
//! drop reason and config knob; `progs/*.bpf.c` are the programs. The objects are built
//! by `make -C bpf` with Debian's clang-19, committed under `obj/` and embedded here, so
//! building this crate needs no C toolchain (`make -C bpf verify` catches a stale object).
//!
//! This crate is not the loader: it offers the objects ([`Object`]), the program table
//! ([`programs`]), typed map wrappers ([`maps`]), the config knobs ([`config`]), the
//! drop reasons ([`drop`]) and the two system calls aya does not wrap ([`sys`]). The agent loads, attaches and pins. See `docs/datapath.md`.

pub mod abi;
pub mod addr;
pub mod config;
pub mod drop;
pub mod layout;
pub mod maps;
pub mod programs;
pub mod sys;

pub use abi::Addr;
pub use config::DatapathConfig;
pub use drop::DropReason;
pub use layout::MapLayout;

/// `obj/pod.o`: `sdn_from_pod` and `sdn_to_pod`.
static POD_OBJECT: &[u8] = aya::include_bytes_aligned!("../obj/pod.o");
/// `obj/overlay.o`: `sdn_from_overlay`.
static OVERLAY_OBJECT: &[u8] = aya::include_bytes_aligned!("../obj/overlay.o");
/// `obj/uplink.o`: `sdn_from_uplink` and `sdn_host_out`.
static UPLINK_OBJECT: &[u8] = aya::include_bytes_aligned!("../obj/uplink.o");
/// `obj/sock.o`: the `sdn_sock_*` cgroup socket hooks.
static SOCK_OBJECT: &[u8] = aya::include_bytes_aligned!("../obj/sock.o");

/// One embedded ELF object; one per attach device (style: one object per attach point).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Object {
    /// The pod veth hooks (`progs/pod.bpf.c`).
    Pod,
    /// The tunnel device hook (`progs/overlay.bpf.c`).
    Overlay,
    /// The uplink device hook (`progs/uplink.bpf.c`).
    Uplink,
    /// The cgroup socket hooks of the default network's Services (`progs/sock.bpf.c`).
    Sock,
}

impl Object {
    /// Every object.
    pub const ALL: [Self; 4] = [Self::Pod, Self::Overlay, Self::Uplink, Self::Sock];

    /// The ELF bytes, 8-byte aligned as aya requires.
    pub fn bytes(self) -> &'static [u8] {
        match self {
            Self::Pod => POD_OBJECT,
            Self::Overlay => OVERLAY_OBJECT,
            Self::Uplink => UPLINK_OBJECT,
            Self::Sock => SOCK_OBJECT,
        }
    }

    /// File name under `bpf/obj/`.
    pub fn file_name(self) -> &'static str {
        match self {
            Self::Pod => "pod.o",
            Self::Overlay => "overlay.o",
            Self::Uplink => "uplink.o",
            Self::Sock => "sock.o",
        }
    }
}
