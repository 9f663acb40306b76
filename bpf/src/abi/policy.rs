//! Mirrors of `include/sdn/policy_maps.h` and `include/sdn/ct.h`: the three policy layers
//! and their shared connection table (issue 14; `docs/policy.md`).
//!
//! Checked against the headers like the rest of the ABI (`tests/abi_layout.rs` walks
//! [`POLICY_LAYOUTS`]); the map definitions themselves by `tests/policy_abi.rs`, which
//! compiles the header for the BPF target and compares the ELF's map table with
//! [`crate::maps::POLICY`].

use std::mem::{align_of, offset_of, size_of};

use super::{Abi, Addr, StructLayout};

/// `SDN_LAYER_SG`: SecurityGroups, VPC nets.
pub const LAYER_SG: u8 = 1;
/// `SDN_LAYER_NP`: NetworkPolicy, the default network.
pub const LAYER_NP: u8 = 2;
/// `SDN_LAYER_HF`: HostFirewall, the node's own addresses.
pub const LAYER_HF: u8 = 3;
/// `SDN_LAYER_ANP`: AdminNetworkPolicy, the default network, above NetworkPolicy.
pub const LAYER_ANP: u8 = 4;
/// `SDN_LAYER_BANP`: BaselineAdminNetworkPolicy, below NetworkPolicy.
pub const LAYER_BANP: u8 = 5;
/// `SDN_ACTION_ALLOW`: an admin entry's action (`sdn_prule.flags`).
pub const ACTION_ALLOW: u32 = 1;
/// `SDN_ACTION_DENY`.
pub const ACTION_DENY: u32 = 2;
/// `SDN_ACTION_PASS`.
pub const ACTION_PASS: u32 = 3;
/// `SDN_MARK_NO_NP`: an isolation marker's flag, no NetworkPolicy isolates the subject.
pub const MARK_NO_NP: u32 = 1 << 0;
/// `SDN_MARK_ANP`: ANP rules apply to the subject.
pub const MARK_ANP: u32 = 1 << 1;
/// `SDN_MARK_BANP`: BANP rules apply to the subject.
pub const MARK_BANP: u32 = 1 << 2;
/// `SDN_DIR_INGRESS`.
pub const DIR_INGRESS: u8 = 0;
/// `SDN_DIR_EGRESS`.
pub const DIR_EGRESS: u8 = 1;
/// `SDN_PEER_CLASS`: a peer token that is a CIDR class of `sdn_pol_cidrs`.
pub const PEER_CLASS: u32 = 1 << 31;
/// `SDN_PEER_ANY`: any peer at all, the last of the datapath's three peer lookups.
pub const PEER_ANY: u32 = 0;
/// `SDN_PEER_ISOLATED`: the NP marker "this identity is isolated in this direction".
pub const PEER_ISOLATED: u32 = 0x7fff_ffff;
/// `SDN_PEER_ALL_BIT`: value bit for "the peer token as a whole".
pub const PEER_ALL_BIT: u32 = 63;
/// `SDN_PRULE_FIXED_BITS`: key bits after `prefixlen` that are always matched.
pub const PRULE_FIXED_BITS: u32 = 128;
/// `SDN_POL_F_HF_INGRESS`.
pub const POL_F_HF_INGRESS: u32 = 1 << 0;
/// `SDN_POL_F_HF_EGRESS`.
pub const POL_F_HF_EGRESS: u32 = 1 << 1;

abi_struct! {
    /// `struct sdn_prule_key`: key of `sdn_pol_rules`, an LPM trie whose last 16 matched
    /// bits are the port (ICMP: `type << 8 | code`).
    pub struct PruleKey = "sdn_prule_key" {
        /// `PRULE_FIXED_BITS` + port prefix bits (0..=16).
        pub prefixlen: u32,
        /// SG: the subject's net; NP, HF: 0.
        pub net: u32,
        /// SG: subject group id; NP: subject identity; HF: 0.
        pub subject: u32,
        /// SG: the peer's net; NP: peer identity; `PEER_CLASS | class`; `PEER_ISOLATED`.
        pub peer: u32,
        /// `LAYER_*`.
        pub layer: u8,
        /// `DIR_*`, the subject's view.
        pub dir: u8,
        /// IP protocol number.
        pub proto: u8,
        /// Always 0.
        pub pad: u8,
        /// Network-order port (or ICMP type/code), the LPM suffix.
        pub port: u16,
        /// Always 0; never matched.
        pub pad2: [u8; 2],
    }
}

abi_struct! {
    /// `struct sdn_prule`, value of `sdn_pol_rules`.
    pub struct Prule = "sdn_prule" align(8) {
        /// SG net peers: allowed group bitmap; otherwise bit `PEER_ALL_BIT`.
        pub peers: u64,
        /// One admitting rule's id (metrics, trace).
        pub rule: u32,
        /// Reserved, 0.
        pub flags: u32,
    }
}

abi_struct! {
    /// `struct sdn_pcidr_key`: key of `sdn_pol_cidrs` (LPM trie, `prefixlen` = 64 + bits
    /// of the 128-bit address).
    pub struct PcidrKey = "sdn_pcidr_key" {
        /// 64 + prefix bits.
        pub prefixlen: u32,
        /// SG: the subject's net; NP, HF: 0.
        pub scope: u32,
        /// `LAYER_*`.
        pub layer: u8,
        /// 1 for IPv6, 0 for IPv4 (which keeps `::/0` off IPv4).
        pub v6: u8,
        /// Always 0.
        pub pad: [u8; 2],
        /// The prefix, `Addr` form.
        pub ip: Addr,
    }
}

abi_struct! {
    /// `struct sdn_pcidr`, value of `sdn_pol_cidrs`.
    pub struct Pcidr = "sdn_pcidr" {
        /// The class: the rule key's peer is `PEER_CLASS | class`.
        pub class: u32,
        /// Reserved, 0.
        pub flags: u32,
    }
}

abi_struct! {
    /// `struct sdn_sg_member`, value of `sdn_sg_members` (key: [`super::EpKey`]).
    pub struct SgMember = "sdn_sg_member" align(8) {
        /// Bit n = group id n (1..=62).
        pub groups: u64,
    }
}

abi_struct! {
    /// `struct sdn_np_ident`, value of `sdn_np_idents` (key: a pod's [`Addr`]).
    pub struct NpIdent = "sdn_np_ident" {
        /// The label-set identity.
        pub id: u32,
        /// Reserved, 0.
        pub flags: u32,
    }
}

abi_struct! {
    /// `struct sdn_hf_self`, value of `sdn_hf_self` (key: one of this node's addresses).
    pub struct HfSelf = "sdn_hf_self" {
        /// Reserved, 0.
        pub flags: u32,
    }
}

abi_struct! {
    /// `struct sdn_pol_state`, `sdn_pol_state[0]`.
    pub struct PolState = "sdn_pol_state" {
        /// The policy generation; bumped after a change that removed or narrowed entries.
        pub generation: u32,
        /// `POL_F_*`.
        pub flags: u32,
    }
}

abi_struct! {
    /// `struct sdn_pct_key`: key of `sdn_pol_ct`, canonical (side a sorts first).
    pub struct PctKey = "sdn_pct_key" {
        /// Side a's address.
        pub a: Addr,
        /// Side b's address.
        pub b: Addr,
        /// Side a's net.
        pub net_a: u32,
        /// Side b's net.
        pub net_b: u32,
        /// Side a's port, network order (ICMP echo: the identifier).
        pub port_a: u16,
        /// Side b's port, network order.
        pub port_b: u16,
        /// IP protocol number.
        pub proto: u8,
        /// Always 0.
        pub pad: [u8; 3],
    }
}

abi_struct! {
    /// `struct sdn_pct`, value of `sdn_pol_ct`.
    pub struct Pct = "sdn_pct" align(8) {
        /// `bpf_ktime_get_ns()` deadline.
        pub expires: u64,
        /// Generation the flow was last admitted under.
        pub generation: u32,
        /// Admitting rule id.
        pub rule: u32,
        /// `PCT_F_*`.
        pub flags: u16,
        /// `TCP_*` state.
        pub tcp: u8,
        /// Bit `LAYER_x`: that layer admitted the flow.
        pub layers: u8,
        /// Always 0.
        pub pad: [u8; 4],
    }
}

abi_struct! {
    /// `struct sdn_pol_work`, the per-CPU scratch value of `sdn_pol_work`: the policy
    /// check's working set, laid out by `lib/policy.h` alone.
    pub struct PolWork = "sdn_pol_work" align(8) {
        /// Opaque to userspace.
        pub scratch: [u64; 32],
    }
}

impl Pct {
    /// `SDN_PCT_F_INIT_B`: side b sent the first packet.
    pub const F_INIT_B: u16 = 1 << 0;
    /// `SDN_PCT_F_REPLIED`: the responder has answered.
    pub const F_REPLIED: u16 = 1 << 1;
    /// `SDN_PCT_F_FIN_A`.
    pub const F_FIN_A: u16 = 1 << 2;
    /// `SDN_PCT_F_FIN_B`.
    pub const F_FIN_B: u16 = 1 << 3;
    /// `SDN_TCP_SYN_SENT`.
    pub const TCP_SYN_SENT: u8 = 1;
    /// `SDN_TCP_ESTABLISHED`.
    pub const TCP_ESTABLISHED: u8 = 2;
    /// `SDN_TCP_CLOSING`.
    pub const TCP_CLOSING: u8 = 3;
    /// `SDN_TCP_CLOSED`.
    pub const TCP_CLOSED: u8 = 4;
}

/// Every policy ABI struct, for the layout check.
pub const POLICY_LAYOUTS: &[StructLayout] = &[
    PruleKey::LAYOUT,
    Prule::LAYOUT,
    PcidrKey::LAYOUT,
    Pcidr::LAYOUT,
    SgMember::LAYOUT,
    NpIdent::LAYOUT,
    HfSelf::LAYOUT,
    PolState::LAYOUT,
    PctKey::LAYOUT,
    Pct::LAYOUT,
    PolWork::LAYOUT,
];

/// Constants shared with the headers, as `(C name, value)`, for the layout check.
pub const POLICY_CONSTANTS: &[(&str, u64)] = &[
    ("SDN_LAYER_SG", LAYER_SG as u64),
    ("SDN_LAYER_NP", LAYER_NP as u64),
    ("SDN_LAYER_HF", LAYER_HF as u64),
    ("SDN_LAYER_ANP", LAYER_ANP as u64),
    ("SDN_LAYER_BANP", LAYER_BANP as u64),
    ("SDN_ACTION_ALLOW", ACTION_ALLOW as u64),
    ("SDN_ACTION_DENY", ACTION_DENY as u64),
    ("SDN_ACTION_PASS", ACTION_PASS as u64),
    ("SDN_MARK_NO_NP", MARK_NO_NP as u64),
    ("SDN_MARK_ANP", MARK_ANP as u64),
    ("SDN_MARK_BANP", MARK_BANP as u64),
    ("SDN_DIR_INGRESS", DIR_INGRESS as u64),
    ("SDN_DIR_EGRESS", DIR_EGRESS as u64),
    ("SDN_PEER_CLASS", PEER_CLASS as u64),
    ("SDN_PEER_ANY", PEER_ANY as u64),
    ("SDN_PEER_ISOLATED", PEER_ISOLATED as u64),
    ("SDN_PEER_ALL_BIT", PEER_ALL_BIT as u64),
    ("SDN_PRULE_FIXED_BITS", PRULE_FIXED_BITS as u64),
    ("SDN_POL_F_HF_INGRESS", POL_F_HF_INGRESS as u64),
    ("SDN_POL_F_HF_EGRESS", POL_F_HF_EGRESS as u64),
    ("SDN_PCT_F_INIT_B", Pct::F_INIT_B as u64),
    ("SDN_PCT_F_REPLIED", Pct::F_REPLIED as u64),
    ("SDN_PCT_F_FIN_A", Pct::F_FIN_A as u64),
    ("SDN_PCT_F_FIN_B", Pct::F_FIN_B as u64),
    ("SDN_TCP_SYN_SENT", Pct::TCP_SYN_SENT as u64),
    ("SDN_TCP_ESTABLISHED", Pct::TCP_ESTABLISHED as u64),
    ("SDN_TCP_CLOSING", Pct::TCP_CLOSING as u64),
    ("SDN_TCP_CLOSED", Pct::TCP_CLOSED as u64),
];
