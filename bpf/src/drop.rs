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
    /// `DROP_NO_GATEWAY`: a VPC pod to outside the cluster, and its VPC has no NAT gateway
    /// (for the packet's family).
    NoGateway = -20,
    /// `DROP_SNAT_FULL`: no free NAT port for a new flow.
    SnatFull = -21,
    /// `DROP_SNAT_NO_ROUTE`: a NATed packet has no route out of the uplink.
    SnatNoRoute = -22,
    /// `DROP_SNAT_NO_OWNER`: a reply to a VPC NAT address whose port shard has no known node.
    SnatNoOwner = -23,
    /// `DROP_SNAT_NO_CT`: a reply to a VPC NAT address without a NAT flow at its owner.
    SnatNoCt = -24,
    /// `DROP_SNAT_UNSUPPORTED`: VPC traffic to outside that the gateway cannot translate
    /// (a protocol, or an ICMP error about no NATed flow).
    SnatUnsupported = -25,
    /// `DROP_SNAT_TCP_NO_FLOW`: a TCP packet other than a SYN with no NAT flow (it never gets
    /// a port).
    SnatTcpNoFlow = -26,
    /// `DROP_FIP_NO_TARGET`: a Floating IP whose target is neither on this node nor known remotely.
    FipNoTarget = -28,
    /// `DROP_NS_NO_ROUTE`: north-south egress with no route out of the node (`bpf_fib_lookup`).
    NsNoRoute = -29,
    /// `DROP_LB_REFUSED`: LoadBalancer traffic into a VPC whose gateway does not admit it.
    LbRefused = -30,
    /// `DROP_LB_NO_BACKEND`: a LoadBalancer frontend of a VPC with no ready backend.
    LbNoBackend = -31,
    /// `DROP_DNS_NO_SOURCE`: a VPC pod's DNS query to steer, but its fabric address is unknown.
    DnsNoSource = -34,
    /// `DROP_DNS_CT_FULL`: DNS steering could not record the query's state.
    DnsCtFull = -35,
    /// `DROP_DNS_NO_CT`: an answer from the node resolver's port with no steered query.
    DnsNoCt = -36,
    /// `DROP_VIP_NO_BACKEND`: a new flow to a ServiceVIP port that has no backend.
    VipNoBackend = -38,
    /// `DROP_POL_NP`: NetworkPolicy admits the flow in neither the source's egress nor the
    /// destination's ingress (one of them refuses it).
    PolNp = -45,
    /// `DROP_POL_SG`: SecurityGroups: no rule of either end's groups admits the flow.
    PolSg = -46,
    /// `DROP_POL_CT_INVALID`: a policed flow's packet without a live connection entry that
    /// cannot open one (TCP without a lone SYN, an ICMP error of no known flow).
    PolCtInvalid = -47,
    /// `DROP_POL_REVOKED`: an established flow re-checked after a policy generation change,
    /// and no longer admitted.
    PolRevoked = -48,
    /// `DROP_POL_HF_INGRESS`: HostFirewall: ingress is armed on this node and no rule admits
    /// the flow into it.
    PolHfIngress = -49,
    /// `DROP_POL_HF_EGRESS`: HostFirewall: egress is armed on this node and no rule admits the
    /// flow out of it.
    PolHfEgress = -50,
    /// `DROP_POL_SCRATCH`: a policy layer found no per-CPU scratch; the packet is dropped,
    /// never passed unjudged.
    PolScratch = -51,
    /// `DROP_POL_ANP`: AdminNetworkPolicy: the first matching rule of the source's egress or
    /// the destination's ingress is `Deny`.
    PolAnp = -52,
    /// `DROP_POL_BANP`: BaselineAdminNetworkPolicy: its first matching rule is `Deny` (no ANP
    /// decided, no NetworkPolicy isolates the pod).
    PolBanp = -53,
    /// `DROP_OVERLAY_FORGED_SRC`: an overlay packet from a known node whose inner source
    /// that node does not hold.
    OverlayForgedSrc = -54,
    /// `DROP_OVERLAY_FORGED_TAG`: an overlay packet whose group tag is not its inner
    /// source's groups as this node knows them.
    OverlayForgedTag = -55,
    /// `DROP_MIG_STANDBY`: to a live migration's target launcher before its VM announced
    /// itself there (the copy relayed to the source is the one delivered).
    MigStandby = -56,
    /// `DROP_XLAT`: cross-family translation (NAT46/64) refused a packet it cannot
    /// translate (IPv4 options, a fragment, UDP without a checksum, an ICMP error, another
    /// protocol).
    Xlat = -57,
}

/// `SDN_DROP_MAX`: entries of `sdn_drops`.
pub const DROP_MAX: u32 = 64;

impl DropReason {
    /// Every reason, in value order.
    pub const ALL: &[Self] = &[
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
        Self::NoGateway,
        Self::SnatFull,
        Self::SnatNoRoute,
        Self::SnatNoOwner,
        Self::SnatNoCt,
        Self::SnatUnsupported,
        Self::SnatTcpNoFlow,
        Self::FipNoTarget,
        Self::NsNoRoute,
        Self::LbRefused,
        Self::LbNoBackend,
        Self::DnsNoSource,
        Self::DnsCtFull,
        Self::DnsNoCt,
        Self::VipNoBackend,
        Self::PolNp,
        Self::PolSg,
        Self::PolCtInvalid,
        Self::PolRevoked,
        Self::PolHfIngress,
        Self::PolHfEgress,
        Self::PolScratch,
        Self::PolAnp,
        Self::PolBanp,
        Self::OverlayForgedSrc,
        Self::OverlayForgedTag,
        Self::MigStandby,
        Self::Xlat,
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
            Self::NoGateway => "DROP_NO_GATEWAY",
            Self::SnatFull => "DROP_SNAT_FULL",
            Self::SnatNoRoute => "DROP_SNAT_NO_ROUTE",
            Self::SnatNoOwner => "DROP_SNAT_NO_OWNER",
            Self::SnatNoCt => "DROP_SNAT_NO_CT",
            Self::SnatUnsupported => "DROP_SNAT_UNSUPPORTED",
            Self::SnatTcpNoFlow => "DROP_SNAT_TCP_NO_FLOW",
            Self::FipNoTarget => "DROP_FIP_NO_TARGET",
            Self::NsNoRoute => "DROP_NS_NO_ROUTE",
            Self::LbRefused => "DROP_LB_REFUSED",
            Self::LbNoBackend => "DROP_LB_NO_BACKEND",
            Self::DnsNoSource => "DROP_DNS_NO_SOURCE",
            Self::DnsCtFull => "DROP_DNS_CT_FULL",
            Self::DnsNoCt => "DROP_DNS_NO_CT",
            Self::VipNoBackend => "DROP_VIP_NO_BACKEND",
            Self::PolNp => "DROP_POL_NP",
            Self::PolSg => "DROP_POL_SG",
            Self::PolCtInvalid => "DROP_POL_CT_INVALID",
            Self::PolRevoked => "DROP_POL_REVOKED",
            Self::PolHfIngress => "DROP_POL_HF_INGRESS",
            Self::PolHfEgress => "DROP_POL_HF_EGRESS",
            Self::PolScratch => "DROP_POL_SCRATCH",
            Self::PolAnp => "DROP_POL_ANP",
            Self::PolBanp => "DROP_POL_BANP",
            Self::OverlayForgedSrc => "DROP_OVERLAY_FORGED_SRC",
            Self::OverlayForgedTag => "DROP_OVERLAY_FORGED_TAG",
            Self::MigStandby => "DROP_MIG_STANDBY",
            Self::Xlat => "DROP_XLAT",
        }
    }

    /// The `sdn_drops` index (`-value`).
    pub const fn index(self) -> u32 {
        (self as i32).unsigned_abs()
    }

    /// The reason stored at `sdn_drops[index]`, if it is one this build knows.
    pub fn from_index(index: u32) -> Option<Self> {
        Self::ALL.iter().copied().find(|r| r.index() == index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexes_ascend_are_unique_and_fit_the_map() {
        // Helpers own blocks of numbers (docs/datapath.md), so a block may have gaps.
        let mut last = 0;
        for &r in DropReason::ALL {
            assert!(r.index() > last, "{r:?} out of order");
            last = r.index();
            assert!(r.index() < DROP_MAX);
            assert_eq!(DropReason::from_index(r.index()), Some(r));
        }
    }
}
