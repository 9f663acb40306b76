//! The programs in the embedded objects and where the agent attaches them.

use crate::Object;

/// Where a program is attached (tc: pod hooks as `cls_bpf` filters, the overlay as a TCX link;
/// the socket hooks as cgroup links).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachPoint {
    /// Ingress of the host side of every pod veth: packets the pod sends.
    PodVethIngress,
    /// Egress of the host side of every pod veth: packets entering the pod.
    PodVethEgress,
    /// Ingress of the node's collect-metadata tunnel device.
    OverlayIngress,
    /// Ingress of the node's uplink (the default route's device), ahead of its routing.
    UplinkIngress,
    /// Egress of the node's uplink and of its tunnel device: the node's own packets leaving.
    HostEgress,
    /// A cgroup2 directory (the unified hierarchy's root on a node): every socket below it.
    /// Which of the `cgroup/*` sock_addr hooks is the program's section name (aya reads it
    /// from the object).
    Cgroup,
}

/// One entry program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProgramSpec {
    /// Function name in C; also the program name aya looks up.
    pub name: &'static str,
    /// Object that holds it.
    pub object: Object,
    /// Hook it belongs to.
    pub attach: AttachPoint,
}

/// `sdn_from_pod`.
pub const FROM_POD: ProgramSpec = ProgramSpec {
    name: "sdn_from_pod",
    object: Object::Pod,
    attach: AttachPoint::PodVethIngress,
};
/// `sdn_to_pod`.
pub const TO_POD: ProgramSpec = ProgramSpec {
    name: "sdn_to_pod",
    object: Object::Pod,
    attach: AttachPoint::PodVethEgress,
};
/// `sdn_from_overlay`.
pub const FROM_OVERLAY: ProgramSpec = ProgramSpec {
    name: "sdn_from_overlay",
    object: Object::Overlay,
    attach: AttachPoint::OverlayIngress,
};

/// `sdn_from_uplink`.
pub const FROM_UPLINK: ProgramSpec = ProgramSpec {
    name: "sdn_from_uplink",
    object: Object::Uplink,
    attach: AttachPoint::UplinkIngress,
};

/// `sdn_host_out` (the HostFirewall's egress hook; `lib/hostfw.h`).
pub const HOST_OUT: ProgramSpec = ProgramSpec {
    name: "sdn_host_out",
    object: Object::Uplink,
    attach: AttachPoint::HostEgress,
};

/// The socket hooks (`progs/sock.bpf.c`, `lib/sock_lb.h`): `connect`, `sendmsg`, `recvmsg`
/// and `getpeername`, for IPv4 and IPv6 sockets.
pub const SOCK: [ProgramSpec; 8] = [
    sock("sdn_sock_connect4"),
    sock("sdn_sock_connect6"),
    sock("sdn_sock_sendmsg4"),
    sock("sdn_sock_sendmsg6"),
    sock("sdn_sock_recvmsg4"),
    sock("sdn_sock_recvmsg6"),
    sock("sdn_sock_getpeername4"),
    sock("sdn_sock_getpeername6"),
];

const fn sock(name: &'static str) -> ProgramSpec {
    ProgramSpec {
        name,
        object: Object::Sock,
        attach: AttachPoint::Cgroup,
    }
}

/// The tc programs (`SchedClassifier`).
pub const TC: [ProgramSpec; 5] = [FROM_POD, TO_POD, FROM_OVERLAY, FROM_UPLINK, HOST_OUT];

/// Every entry program: [`TC`], then [`SOCK`].
pub const ALL: [ProgramSpec; 13] = [
    FROM_POD,
    TO_POD,
    FROM_OVERLAY,
    FROM_UPLINK,
    HOST_OUT,
    SOCK[0],
    SOCK[1],
    SOCK[2],
    SOCK[3],
    SOCK[4],
    SOCK[5],
    SOCK[6],
    SOCK[7],
];

/// Times [`load`] tries a program the kernel refused with `EAGAIN`.
const LOAD_TRIES: u32 = 5;

/// Loads `prog` into the kernel, trying again when the verifier was interrupted.
///
/// The verifier gives up with `EAGAIN` when a signal is pending for the loading thread
/// while it works; `sdn_from_pod` takes it over a second on a loaded machine, long enough
/// for that to happen now and then (seen in the test suite). libbpf retries the same way.
pub fn load(prog: &mut aya::programs::SchedClassifier) -> Result<(), aya::programs::ProgramError> {
    retry(|| prog.load())
}

/// [`load`] for a socket hook.
pub fn load_sock(prog: &mut aya::programs::CgroupSockAddr) -> Result<(), aya::programs::ProgramError> {
    retry(|| prog.load())
}

fn retry(
    mut load: impl FnMut() -> Result<(), aya::programs::ProgramError>,
) -> Result<(), aya::programs::ProgramError> {
    let mut tries = 0;
    loop {
        match load() {
            Err(aya::programs::ProgramError::LoadError { io_error, .. })
                if io_error.raw_os_error() == Some(11) && tries + 1 < LOAD_TRIES =>
            {
                tries += 1;
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_program_of_every_object_has_a_spec() {
        for obj in Object::ALL {
            let parsed = aya_obj::Object::parse(obj.bytes()).expect("embedded object parses");
            let mut names: Vec<&str> = parsed.programs.keys().map(String::as_str).collect();
            let mut specs: Vec<&str> = ALL.iter().filter(|s| s.object == obj).map(|s| s.name).collect();
            names.sort_unstable();
            specs.sort_unstable();
            assert_eq!(names, specs, "{}", obj.file_name());
        }
        assert!(TC.iter().all(|s| s.attach != AttachPoint::Cgroup));
        assert!(SOCK.iter().all(|s| s.attach == AttachPoint::Cgroup));
    }
}
