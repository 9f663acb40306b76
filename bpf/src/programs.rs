//! The programs in the embedded objects and where the agent attaches them.

use crate::Object;

/// Where a program is attached (tc: pod hooks as `cls_bpf` filters, the overlay as a TCX link).
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

/// Every entry program.
pub const ALL: [ProgramSpec; 5] = [FROM_POD, TO_POD, FROM_OVERLAY, FROM_UPLINK, HOST_OUT];

/// Times [`load`] tries a program the kernel refused with `EAGAIN`.
const LOAD_TRIES: u32 = 5;

/// Loads `prog` into the kernel, trying again when the verifier was interrupted.
///
/// The verifier gives up with `EAGAIN` when a signal is pending for the loading thread
/// while it works; `sdn_from_pod` takes it over a second on a loaded machine, long enough
/// for that to happen now and then (seen in the test suite). libbpf retries the same way.
pub fn load(prog: &mut aya::programs::SchedClassifier) -> Result<(), aya::programs::ProgramError> {
    let mut tries = 0;
    loop {
        match prog.load() {
            Err(aya::programs::ProgramError::LoadError { io_error, .. })
                if io_error.raw_os_error() == Some(11) && tries + 1 < LOAD_TRIES =>
            {
                tries += 1;
            }
            other => return other,
        }
    }
}
