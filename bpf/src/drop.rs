//! Drop reasons, mirroring `include/sdn/drop_reasons.h` (checked by `tests/abi_layout.rs`).

/// Why the datapath dropped a packet. The discriminant is the C `DROP_*` value; the
/// `sdn_drops` index is its negation. Values are never renumbered or reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(i32)]
#[non_exhaustive]
pub enum DropReason {
    /// `DROP_INVALID`: truncated or malformed header.
    Invalid = -1,
    /// `DROP_UNKNOWN_L3`: ethertype other than IPv4/IPv6/ARP from a VPC port.
    UnknownL3 = -2,
    /// `DROP_NO_PORT`: the veth has no `sdn_ports` record.
    NoPort = -3,
    /// `DROP_SPOOF_IP`: source IP is not an endpoint of this port.
    SpoofIp = -4,
    /// `DROP_SPOOF_MAC`: source MAC differs from the endpoint record.
    SpoofMac = -5,
    /// `DROP_VPC_ISOLATION`: destination outside the source's net.
    VpcIsolation = -6,
    /// `DROP_NO_ENDPOINT`: delivery target missing or on another port.
    NoEndpoint = -7,
    /// `DROP_NO_TUNNEL_KEY`: overlay packet without tunnel metadata.
    NoTunnelKey = -8,
    /// `DROP_ARP`: ARP from a VPC port not asking for the gateway.
    Arp = -9,
    /// `DROP_CT_FULL`: no free gateway port for a bridged flow.
    CtFull = -10,
    /// `DROP_BRIDGE_NO_CT`: VPC pod to the gateway without a bridge flow.
    BridgeNoCt = -11,
    /// `DROP_FRAGMENT`: bridge: a later IP fragment whose first fragment was not seen.
    Fragment = -12,
    /// `DROP_UNSUPPORTED_L4`: bridge NAT of a protocol it does not translate.
    UnsupportedL4 = -13,
    /// `DROP_REWRITE`: a header or checksum rewrite failed.
    Rewrite = -14,
    /// `DROP_ENCAP`: tunnel key could not be set, or no tunnel device configured.
    Encap = -15,
    /// `DROP_UNSUPPORTED`: a path not implemented yet.
    Unsupported = -16,
    /// `DROP_XNET_DENIED`: destination in a peer net, but the peering is not allowed.
    XnetDenied = -17,
    /// `DROP_OVERLAY_SOURCE`: decapsulated packet whose outer source is no known node.
    OverlaySource = -18,
    /// `DROP_SEVERED`: VPC traffic from or to a pod whose Port was revoked.
    Severed = -19,
    /// `DROP_LB_NO_BACKEND`: a new flow to a ServiceVIP port that has no backend.
    LbNoBackend = -38,
}

/// `SDN_DROP_MAX`: entries of `sdn_drops`.
pub const DROP_MAX: u32 = 64;

impl DropReason {
    /// Every reason, in value order.
    pub const ALL: [Self; 20] = [
        Self::Invalid,
        Self::UnknownL3,
        Self::NoPort,
        Self::SpoofIp,
        Self::SpoofMac,
        Self::VpcIsolation,
        Self::NoEndpoint,
        Self::NoTunnelKey,
        Self::Arp,
        Self::CtFull,
        Self::BridgeNoCt,
        Self::Fragment,
        Self::UnsupportedL4,
        Self::Rewrite,
        Self::Encap,
        Self::Unsupported,
        Self::XnetDenied,
        Self::OverlaySource,
        Self::Severed,
        Self::LbNoBackend,
    ];

    /// The C macro name, e.g. `DROP_SPOOF_IP`; also the metric label.
    pub const fn c_name(self) -> &'static str {
        match self {
            Self::Invalid => "DROP_INVALID",
            Self::UnknownL3 => "DROP_UNKNOWN_L3",
            Self::NoPort => "DROP_NO_PORT",
            Self::SpoofIp => "DROP_SPOOF_IP",
            Self::SpoofMac => "DROP_SPOOF_MAC",
            Self::VpcIsolation => "DROP_VPC_ISOLATION",
            Self::NoEndpoint => "DROP_NO_ENDPOINT",
            Self::NoTunnelKey => "DROP_NO_TUNNEL_KEY",
            Self::Arp => "DROP_ARP",
            Self::CtFull => "DROP_CT_FULL",
            Self::BridgeNoCt => "DROP_BRIDGE_NO_CT",
            Self::Fragment => "DROP_FRAGMENT",
            Self::UnsupportedL4 => "DROP_UNSUPPORTED_L4",
            Self::Rewrite => "DROP_REWRITE",
            Self::Encap => "DROP_ENCAP",
            Self::Unsupported => "DROP_UNSUPPORTED",
            Self::XnetDenied => "DROP_XNET_DENIED",
            Self::OverlaySource => "DROP_OVERLAY_SOURCE",
            Self::Severed => "DROP_SEVERED",
            Self::LbNoBackend => "DROP_LB_NO_BACKEND",
        }
    }

    /// The `sdn_drops` index (`-value`).
    pub const fn index(self) -> u32 {
        (self as i32).unsigned_abs()
    }

    /// The reason stored at `sdn_drops[index]`, if it is one this build knows.
    pub fn from_index(index: u32) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.index() == index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexes_are_ascending_unique_and_fit_the_map() {
        // Ascending, not dense: each feature numbers its reasons in its own block.
        let mut last = 0;
        for r in DropReason::ALL {
            assert!(r.index() > last, "{r:?}");
            last = r.index();
            assert!(r.index() < DROP_MAX);
            assert_eq!(DropReason::from_index(r.index()), Some(r));
        }
    }
}
