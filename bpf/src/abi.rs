//! `#[repr(C)]` mirrors of every key and value in `include/sdn/maps.h` and `config.h`.
//!
//! Hand-written, and checked against the header: each struct carries a [`StructLayout`]
//! (its C name, size, alignment and field offsets as rustc computes them), and
//! `tests/abi_layout.rs` turns those into `_Static_assert`s that clang evaluates against
//! the real header. A field added, moved or resized on one side only fails that test.
//! Field names are the C member names, so the check needs no mapping table.
//!
//! Addresses are [`Addr`]: 16 bytes, network order, IPv4 as `64:ff9b::a.b.c.d`. Fields
//! the C side types as `__be16` are `u16` holding network-order bytes (`u16::to_be`).

use std::mem::{align_of, offset_of, size_of};

/// Size, alignment and member offsets of one ABI struct, as rustc laid it out.
#[derive(Clone, Copy, Debug)]
pub struct StructLayout {
    /// The C struct tag, without `struct`.
    pub c_name: &'static str,
    /// `size_of` the Rust type.
    pub size: usize,
    /// `align_of` the Rust type.
    pub align: usize,
    /// Member name and offset, in declaration order.
    pub fields: &'static [(&'static str, usize)],
}

/// A Rust type that mirrors a C struct of the ABI.
pub trait Abi: aya::Pod {
    /// The layout compared with clang's by `tests/abi_layout.rs`.
    const LAYOUT: StructLayout;
}

/// Declares an ABI struct: `#[repr(C)]`, a [`StructLayout`], a compile-time proof that it
/// has no implicit padding, and its `aya::Pod` impl.
macro_rules! abi_struct {
    (
        $(#[$meta:meta])*
        pub struct $name:ident = $c_name:literal $(align($align:literal))? {
            $( $(#[$fmeta:meta])* pub $field:ident : $ty:ty ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[repr(C $(, align($align))?)]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
        pub struct $name {
            $( $(#[$fmeta])* pub $field: $ty ),*
        }

        // Every byte is a named field: no uninitialised padding can reach the kernel,
        // and byte-wise hashing of keys sees exactly what the C side wrote.
        const _: () = assert!(size_of::<$name>() == 0 $(+ size_of::<$ty>())*);

        impl Abi for $name {
            const LAYOUT: StructLayout = StructLayout {
                c_name: $c_name,
                size: size_of::<$name>(),
                align: align_of::<$name>(),
                fields: &[$((stringify!($field), offset_of!($name, $field))),*],
            };
        }

        // SAFETY: repr(C), only integer and byte-array fields, no implicit padding (asserted
        // above), layout checked against the C header by tests/abi_layout.rs; every bit
        // pattern is a valid value.
        #[expect(unsafe_code, reason = "aya::Pod for an ABI struct shared with the kernel")]
        unsafe impl aya::Pod for $name {}
    };
}

abi_struct! {
    /// `struct sdn_addr`: a 128-bit address in network byte order.
    pub struct Addr = "sdn_addr" align(4) {
        /// The address bytes; IPv4 as `64:ff9b::a.b.c.d` (RFC 6052).
        pub b: [u8; 16],
    }
}

abi_struct! {
    /// `struct sdn_mac`: a MAC address (config globals).
    pub struct Mac = "sdn_mac" {
        /// The six octets.
        pub addr: [u8; 6],
    }
}

abi_struct! {
    /// `struct sdn_port`, value of `sdn_ports` (key: host veth ifindex).
    pub struct Port = "sdn_port" {
        /// VNI of the pod's VPC; 0 = default network.
        pub net: u32,
        /// `SDN_PORT_F_*`, set by the datapath ([`Port::F_DNAT`]); the CNI writes 0.
        pub flags: u32,
    }
}

impl Port {
    /// `SDN_PORT_F_DNAT`: the host has delivered a DNATed flow into this port's pod.
    pub const F_DNAT: u32 = 1 << 0;
}

abi_struct! {
    /// `struct sdn_ep_key`: key of `sdn_endpoints` and `sdn_remotes`.
    pub struct EpKey = "sdn_ep_key" {
        /// The net (VNI) the address belongs to; 0 = default network.
        pub net: u32,
        /// The address within that net.
        pub ip: Addr,
    }
}

abi_struct! {
    /// `struct sdn_endpoint`, value of `sdn_endpoints`: a pod on this node.
    pub struct Endpoint = "sdn_endpoint" {
        /// ifindex of the host side of the pod's veth.
        pub ifindex: u32,
        /// MAC of the pod's interface (anti-spoofing and delivery).
        pub mac: [u8; 6],
        /// `SDN_EP_F_*`: [`Endpoint::F_SEVERED`], [`Endpoint::F_MIGRATING`], set by the agent.
        pub flags: u16,
    }
}

impl Endpoint {
    /// `SDN_EP_F_SEVERED`: the pod's Port is being deleted; its VPC traffic is dropped both
    /// ways (`DROP_SEVERED`), the fabric bridge keeps working.
    pub const F_SEVERED: u16 = 1 << 0;
    /// `SDN_EP_F_MIGRATING`: a live migration holds the Port on this node and another
    /// (`sdn_migrations`); delivery relays a copy there.
    pub const F_MIGRATING: u16 = 1 << 1;
}

abi_struct! {
    /// `struct sdn_remote`, value of `sdn_remotes`: the node hosting an endpoint.
    pub struct Remote = "sdn_remote" {
        /// Underlay address of the node; IPv4 in `64:ff9b::` form.
        pub node: Addr,
        /// Reserved, 0.
        pub flags: u32,
    }
}

abi_struct! {
    /// `struct sdn_block_key`: key of `sdn_node_blocks`. The map wrapper hands aya its
    /// `lpm_trie::Key<Addr>`, which has this layout (checked in `maps::node_blocks`).
    pub struct BlockKey = "sdn_block_key" {
        /// Prefix length in bits of the 128-bit address (IPv4 /24 = 120).
        pub prefixlen: u32,
        /// The block's base address.
        pub ip: Addr,
    }
}

abi_struct! {
    /// `struct sdn_bridge`, value of `sdn_bridges` (key: fabric IP).
    pub struct Bridge = "sdn_bridge" {
        /// The VPC (VNI) of the pod behind the fabric IP.
        pub net: u32,
        /// The pod's VPC address.
        pub vpc_ip: Addr,
    }
}

abi_struct! {
    /// `struct sdn_ct_fwd_key`: a fabric client flow entering a bridged pod.
    pub struct CtFwdKey = "sdn_ct_fwd_key" {
        /// The client's address (as it arrived).
        pub client: Addr,
        /// The pod's fabric IP.
        pub fabric: Addr,
        /// Client port (network order); ICMP echo id.
        pub client_port: u16,
        /// Pod port (network order); 0 for ICMP.
        pub pod_port: u16,
        /// IP protocol number.
        pub proto: u8,
        /// Explicit padding, 0.
        pub pad: [u8; 3],
    }
}

abi_struct! {
    /// `struct sdn_ct_fwd`, value of `sdn_ct_fwd`.
    pub struct CtFwd = "sdn_ct_fwd" {
        /// Gateway port the client was masqueraded to (network order).
        pub gw_port: u16,
        /// Explicit padding, 0.
        pub pad: [u8; 2],
    }
}

abi_struct! {
    /// `struct sdn_ct_rev_key`: the bridged pod's reply as it leaves the pod.
    pub struct CtRevKey = "sdn_ct_rev_key" {
        /// The pod's net (VNI).
        pub net: u32,
        /// The pod's VPC address (reply source).
        pub vpc_ip: Addr,
        /// Gateway port (reply destination port, network order).
        pub gw_port: u16,
        /// Pod port (reply source port, network order); 0 for ICMP.
        pub pod_port: u16,
        /// IP protocol number.
        pub proto: u8,
        /// Explicit padding, 0.
        pub pad: [u8; 3],
    }
}

abi_struct! {
    /// `struct sdn_ct_rev`, value of `sdn_ct_rev`: the original addressing of a flow.
    pub struct CtRev = "sdn_ct_rev" {
        /// The pod's fabric IP.
        pub fabric: Addr,
        /// The client's address.
        pub client: Addr,
        /// The client's port (network order); ICMP echo id.
        pub client_port: u16,
        /// Explicit padding, 0.
        pub pad: [u8; 2],
    }
}

abi_struct! {
    /// `struct sdn_dnat_key`: a flow the host DNATed into a pod, as the pod's reply
    /// leaves it.
    pub struct DnatKey = "sdn_dnat_key" {
        /// The pod (reply source): its fabric IP.
        pub pod: Addr,
        /// The client (reply destination).
        pub peer: Addr,
        /// Pod port (network order); ICMP echo id.
        pub pod_port: u16,
        /// Client port (network order); ICMP echo id.
        pub peer_port: u16,
        /// IP protocol number.
        pub proto: u8,
        /// Explicit padding, 0.
        pub pad: [u8; 3],
    }
}

abi_struct! {
    /// `struct sdn_dnat`, value of `sdn_dnat` (presence is the information).
    pub struct Dnat = "sdn_dnat" {
        /// Reserved, 0.
        pub flags: u32,
    }
}

abi_struct! {
    /// `struct sdn_frag_key`: a bridged datagram's identity as its fragments arrive.
    pub struct FragKey = "sdn_frag_key" {
        /// The net of the port the fragments are seen on.
        pub net: u32,
        /// Source address before the bridge's rewrite.
        pub src: Addr,
        /// Destination address before the bridge's rewrite.
        pub dst: Addr,
        /// IPv4 identification (network order) in the low 16 bits.
        pub id: u32,
        /// IP protocol number.
        pub proto: u8,
        /// Explicit padding, 0.
        pub pad: [u8; 3],
    }
}

abi_struct! {
    /// `struct sdn_frag`, value of `sdn_frags`: what the first fragment became.
    pub struct Frag = "sdn_frag" {
        /// Source address after the rewrite.
        pub src: Addr,
        /// Destination address after the rewrite.
        pub dst: Addr,
        /// The first fragment's source port after the rewrite (network order).
        pub sport: u16,
        /// The first fragment's destination port after the rewrite (network order).
        pub dport: u16,
        /// Reserved, 0.
        pub flags: u32,
    }
}

abi_struct! {
    /// `struct sdn_drop_stats`, per-CPU value of `sdn_drops`.
    pub struct DropStats = "sdn_drop_stats" {
        /// Dropped packets.
        pub packets: u64,
        /// Dropped bytes (`skb->len`).
        pub bytes: u64,
    }
}

abi_struct! {
    /// `struct sdn_net_stats`, per-CPU value of `sdn_net_stats` (key: net).
    pub struct NetStats = "sdn_net_stats" {
        /// Packets that left a pod of the net (counted in `sdn_from_pod`).
        pub tx_packets: u64,
        /// Bytes that left a pod of the net.
        pub tx_bytes: u64,
        /// Packets delivered to a pod of the net (counted in `sdn_to_pod`).
        pub rx_packets: u64,
        /// Bytes delivered to a pod of the net.
        pub rx_bytes: u64,
    }
}

abi_struct! {
    /// `struct sdn_xnet_key`: key of `sdn_xnet_routes`. The map wrapper hands aya its
    /// `lpm_trie::Key<EpKey>`, which has this layout (checked in `maps::xnet_routes`).
    pub struct XnetKey = "sdn_xnet_key" {
        /// Bits after this field that must match: 32 (the net) + the address prefix.
        pub prefixlen: u32,
        /// The source net (VNI), host byte order.
        pub net: u32,
        /// The destination prefix.
        pub ip: Addr,
    }
}

abi_struct! {
    /// `struct sdn_xnet_route`, value of `sdn_xnet_routes`.
    pub struct XnetRoute = "sdn_xnet_route" {
        /// The net (VNI) the destination belongs to.
        pub net: u32,
        /// Reserved, 0.
        pub flags: u32,
    }
}

abi_struct! {
    /// `struct sdn_xnet_pair`: key of `sdn_xnet_allow`.
    pub struct XnetPair = "sdn_xnet_pair" {
        /// The source net (VNI).
        pub src: u32,
        /// The destination net (VNI).
        pub dst: u32,
    }
}

abi_struct! {
    /// `struct sdn_xnet_stats`, value of `sdn_xnet_allow`: presence allows, the counters
    /// count the crossings this node decided.
    pub struct XnetStats = "sdn_xnet_stats" {
        /// Packets let across.
        pub packets: u64,
        /// Bytes let across.
        pub bytes: u64,
    }
}

abi_struct! {
    /// `struct sdn_node`, value of `sdn_nodes` (key: a node's tunnel address).
    pub struct NodeEntry = "sdn_node" {
        /// Reserved, 0.
        pub flags: u32,
    }
}

abi_struct! {
    /// `struct sdn_pol_drop_key`: key of `sdn_pol_drops`, the policy layers' drops per
    /// `{net, layer, reason}` (value: [`DropStats`], per CPU).
    pub struct PolDropKey = "sdn_pol_drop_key" {
        /// VNI of the VPC whose groups the flow met (SecurityGroups); 0 for NetworkPolicy.
        pub net: u32,
        /// `SDN_LAYER_*` (`abi::policy::LAYER_*`).
        pub layer: u8,
        /// `-DROP_POL_*`: [`crate::DropReason::index`] of the reason.
        pub reason: u8,
        /// Explicit padding, 0.
        pub pad: [u8; 2],
    }
}

abi_struct! {
    /// `struct sdn_forged_key`: key of `sdn_forged`, overlay packets refused by the
    /// trust check per sending node and reason (value: [`DropStats`], per CPU).
    pub struct ForgedKey = "sdn_forged_key" {
        /// The sender's tunnel address (`sdn_nodes`' key).
        pub node: Addr,
        /// `-DROP_OVERLAY_FORGED_*`: [`crate::DropReason::index`] of the reason.
        pub reason: u8,
        /// Explicit padding, 0.
        pub pad: [u8; 3],
    }
}

abi_struct! {
    /// `struct sdn_door_key`: key of `sdn_door_stats`, one row per `{VPC, door, direction}`.
    pub struct DoorKey = "sdn_door_key" {
        /// VNI of the VPC; net 0 is never metered.
        pub net: u32,
        /// `SDN_DOOR_*`: [`DoorKey::GATEWAY`], [`DoorKey::EIP`], [`DoorKey::LOADBALANCER`].
        pub door: u8,
        /// `SDN_DIR_*`: [`DoorKey::IN`] (into the VPC), [`DoorKey::OUT`].
        pub dir: u8,
        /// Explicit padding, 0.
        pub pad: [u8; 2],
    }
}

impl DoorKey {
    /// `SDN_DOOR_GATEWAY`: the VPCGateway's NAT identity.
    pub const GATEWAY: u8 = 0;
    /// `SDN_DOOR_EIP`: a FloatingIP.
    pub const EIP: u8 = 1;
    /// `SDN_DOOR_LOADBALANCER`: LoadBalancer Services into the VPC.
    pub const LOADBALANCER: u8 = 2;
    /// `SDN_DIR_IN`: into the VPC.
    pub const IN: u8 = 0;
    /// `SDN_DIR_OUT`: out of the VPC.
    pub const OUT: u8 = 1;
}

abi_struct! {
    /// `struct sdn_door_stats`, value of `sdn_door_stats` (per CPU).
    pub struct DoorStats = "sdn_door_stats" {
        /// Packets that crossed the door.
        pub packets: u64,
        /// Their bytes.
        pub bytes: u64,
        /// Packets the boundary refused at the door (dropped).
        pub refused_packets: u64,
        /// Their bytes.
        pub refused_bytes: u64,
    }
}

abi_struct! {
    /// `struct sdn_fip`, value of `sdn_fip_in` (key: the public address): the target.
    pub struct Fip = "sdn_fip" {
        /// VNI of the target's VPC.
        pub net: u32,
        /// The target's VPC address.
        pub vpc_ip: Addr,
        /// Reserved, 0.
        pub flags: u32,
    }
}

abi_struct! {
    /// `struct sdn_fip_pub`, value of `sdn_fip_out` (key: [`EpKey`] of the target).
    pub struct FipPub = "sdn_fip_pub" {
        /// The public address, of the target's family.
        pub addr: Addr,
        /// Reserved, 0.
        pub flags: u32,
    }
}

abi_struct! {
    /// `struct sdn_lbg_key`: a LoadBalancer frontend (key of `sdn_lbg_front`, value of
    /// `sdn_lbg_rev`).
    pub struct LbgKey = "sdn_lbg_key" {
        /// The `status.loadBalancer.ingress` address.
        pub addr: Addr,
        /// The Service port, network order.
        pub port: u16,
        /// 6 (TCP) or 17 (UDP).
        pub proto: u8,
        /// Explicit padding, 0.
        pub pad: u8,
    }
}

abi_struct! {
    /// `struct sdn_lbg_backend`: one backend of a frontend.
    pub struct LbgBackend = "sdn_lbg_backend" {
        /// The backend pod's VPC address.
        pub ip: Addr,
        /// The target port, network order.
        pub port: u16,
        /// Explicit padding, 0.
        pub pad: [u8; 2],
    }
}

/// `SDN_LBG_BACKENDS`: backends per frontend.
pub const LB_BACKENDS: usize = 16;

abi_struct! {
    /// `struct sdn_lbg_front`, value of `sdn_lbg_front`.
    pub struct LbgFront = "sdn_lbg_front" {
        /// VNI of the backends' VPC.
        pub net: u32,
        /// Backends in use (0: none ready).
        pub count: u32,
        /// `SDN_LBG_F_*`: [`LbgFront::F_GATE_ONLY`].
        pub flags: u32,
        /// The backends; the first `count` are used.
        pub be: [LbgBackend; LB_BACKENDS],
    }
}

impl LbgFront {
    /// `SDN_LBG_F_GATE_ONLY`: a NodePort of this node; only the gate applies, an admitted
    /// packet is the host's.
    pub const F_GATE_ONLY: u32 = 1 << 0;
}

abi_struct! {
    /// `struct sdn_lbg_rev_key`: a backend as its replies leave it (key of `sdn_lbg_rev`).
    pub struct LbgRevKey = "sdn_lbg_rev_key" {
        /// VNI of the backend's VPC.
        pub net: u32,
        /// The backend's VPC address.
        pub ip: Addr,
        /// The target port, network order.
        pub port: u16,
        /// 6 (TCP) or 17 (UDP).
        pub proto: u8,
        /// Explicit padding, 0.
        pub pad: u8,
    }
}

abi_struct! {
    /// `struct sdn_dns_cfg`, an entry of `sdn_dns_cfg` (one per family): where DNS steering
    /// sends that family's queries.
    pub struct DnsCfg = "sdn_dns_cfg" {
        /// The resolver's address.
        pub node: Addr,
        /// The resolver's port, network order (`u16::to_be`); 0 turns steering off.
        pub port: u16,
        /// Explicit padding, 0.
        pub pad: [u8; 2],
    }
}

abi_struct! {
    /// `struct sdn_dns_pod`, value of `sdn_dns_pods` (key: the pod's [`EpKey`]).
    pub struct DnsPod = "sdn_dns_pod" {
        /// The pod's fabric address: the source of its steered queries.
        pub fabric: Addr,
    }
}

abi_struct! {
    /// `struct sdn_dns_ct_key`: a steered query as its answer comes back.
    pub struct DnsCtKey = "sdn_dns_ct_key" {
        /// The pod's fabric address.
        pub fabric: Addr,
        /// The pod's source port, network order.
        pub sport: u16,
        /// IP protocol.
        pub proto: u8,
        /// Explicit padding, 0.
        pub pad: u8,
    }
}

abi_struct! {
    /// `struct sdn_dns_ct`: what the pod addressed.
    pub struct DnsCt = "sdn_dns_ct" {
        /// The address the pod asked.
        pub dst: Addr,
        /// Its port, network order.
        pub dport: u16,
        /// Explicit padding, 0.
        pub pad: [u8; 2],
    }
}

/// Every ABI struct, for the layout check.
pub const LAYOUTS: &[StructLayout] = &[
    Addr::LAYOUT,
    Mac::LAYOUT,
    Port::LAYOUT,
    EpKey::LAYOUT,
    Endpoint::LAYOUT,
    Remote::LAYOUT,
    BlockKey::LAYOUT,
    Bridge::LAYOUT,
    CtFwdKey::LAYOUT,
    CtFwd::LAYOUT,
    CtRevKey::LAYOUT,
    CtRev::LAYOUT,
    DnatKey::LAYOUT,
    Dnat::LAYOUT,
    DropStats::LAYOUT,
    NetStats::LAYOUT,
    XnetKey::LAYOUT,
    XnetRoute::LAYOUT,
    XnetPair::LAYOUT,
    XnetStats::LAYOUT,
    NodeEntry::LAYOUT,
    FragKey::LAYOUT,
    Frag::LAYOUT,
    LbKey::LAYOUT,
    LbSvc::LAYOUT,
    LbTable::LAYOUT,
    LbChunkKey::LAYOUT,
    LbChunk::LAYOUT,
    LbBackend::LAYOUT,
    LbFlowKey::LAYOUT,
    LbFlow::LAYOUT,
    LbRevKey::LAYOUT,
    LbRev::LAYOUT,
    LbAffKey::LAYOUT,
    LbAff::LAYOUT,
    LbWork::LAYOUT,
    SockNetns::LAYOUT,
    SockRevKey::LAYOUT,
    SockRev::LAYOUT,
    SnatConf::LAYOUT,
    Internal::LAYOUT,
    SnatAddr::LAYOUT,
    SnatGw::LAYOUT,
    SnatKey::LAYOUT,
    SnatFwd::LAYOUT,
    SnatRkey::LAYOUT,
    SnatRev::LAYOUT,
    SnatWork::LAYOUT,
    DnsCfg::LAYOUT,
    DnsPod::LAYOUT,
    DnsCtKey::LAYOUT,
    DnsCt::LAYOUT,
    DoorKey::LAYOUT,
    DoorStats::LAYOUT,
    PolDropKey::LAYOUT,
    ForgedKey::LAYOUT,
    Fip::LAYOUT,
    FipPub::LAYOUT,
    LbgKey::LAYOUT,
    LbgBackend::LAYOUT,
    LbgFront::LAYOUT,
    LbgRevKey::LAYOUT,
];

// === impl NetStats / DropStats ===

impl std::ops::AddAssign for NetStats {
    fn add_assign(&mut self, o: Self) {
        self.tx_packets += o.tx_packets;
        self.tx_bytes += o.tx_bytes;
        self.rx_packets += o.rx_packets;
        self.rx_bytes += o.rx_bytes;
    }
}

impl std::ops::AddAssign for DoorStats {
    fn add_assign(&mut self, o: Self) {
        self.packets += o.packets;
        self.bytes += o.bytes;
        self.refused_packets += o.refused_packets;
        self.refused_bytes += o.refused_bytes;
    }
}

impl std::ops::AddAssign for DropStats {
    fn add_assign(&mut self, o: Self) {
        self.packets += o.packets;
        self.bytes += o.bytes;
    }
}

// The policy layers' structs (include/sdn/policy_maps.h, ct.h) live in their own file.
mod policy;
pub use policy::*;

// The socket-level load balancer's structs (include/sdn/sock_maps.h).
mod sock;
pub use sock::*;

abi_struct! {
    /// `struct sdn_snat_conf`, the one value of `sdn_snat_conf`: the node's NAT settings.
    /// Ports in host byte order.
    pub struct SnatConf = "sdn_snat_conf" {
        /// `SDN_SNAT_F_*` ([`SnatConf::F_MASQ`], ...).
        pub flags: u32,
        /// Where NATed packets leave; 0 = no uplink.
        pub uplink_ifindex: u32,
        /// The uplink's IPv4 address (net-0 masquerade).
        pub node4: Addr,
        /// The uplink's IPv6 address.
        pub node6: Addr,
        /// Lowest net-0 masquerade port.
        pub masq_min: u16,
        /// Highest net-0 masquerade port.
        pub masq_max: u16,
        /// First port of the gateway range.
        pub gw_min: u16,
        /// Ports per gateway shard.
        pub gw_shard_size: u16,
        /// Number of gateway shards.
        pub gw_shards: u16,
        /// This node's shard.
        pub shard: u16,
    }
}

impl SnatConf {
    /// `SDN_SNAT_F_MASQ`: net-0 masquerade on.
    pub const F_MASQ: u32 = 1;
    /// `SDN_SNAT_F_HAVE4`: `node4` is set.
    pub const F_HAVE4: u32 = 1 << 1;
    /// `SDN_SNAT_F_HAVE6`: `node6` is set.
    pub const F_HAVE6: u32 = 1 << 2;
}

abi_struct! {
    /// `struct sdn_internal`, value of `sdn_internal` (key: [`XnetKey`]): a cluster-internal
    /// range (net 0) or a VPC's own (net N).
    pub struct Internal = "sdn_internal" {
        /// Reserved, 0.
        pub flags: u32,
    }
}

abi_struct! {
    /// `struct sdn_snat_addr`, value of `sdn_snat_addrs` (key: a NAT address).
    pub struct SnatAddr = "sdn_snat_addr" {
        /// Whose: 0 for this node's masquerade address, else the VPC's VNI.
        pub net: u32,
        /// Reserved, 0.
        pub flags: u32,
    }
}

abi_struct! {
    /// `struct sdn_snat_gw`, value of `sdn_snat_gws` (key: VNI).
    pub struct SnatGw = "sdn_snat_gw" {
        /// The IPv4 NAT address (valid with [`SnatGw::F_HAVE4`]).
        pub addr4: Addr,
        /// The IPv6 NAT address (valid with [`SnatGw::F_HAVE6`]).
        pub addr6: Addr,
        /// `SDN_SNAT_GW_F_*`.
        pub flags: u32,
    }
}

impl SnatGw {
    /// `SDN_SNAT_GW_F_HAVE4`.
    pub const F_HAVE4: u32 = 1;
    /// `SDN_SNAT_GW_F_HAVE6`.
    pub const F_HAVE6: u32 = 1 << 1;
}

abi_struct! {
    /// `struct sdn_snat_key`: key of `sdn_snat_fwd`, a NATed flow as it leaves the pod.
    pub struct SnatKey = "sdn_snat_key" {
        /// The pod's net.
        pub net: u32,
        /// The pod.
        pub src: Addr,
        /// The peer outside.
        pub dst: Addr,
        /// Source port (network order); ICMP echo: the id.
        pub sport: u16,
        /// Destination port (network order); ICMP echo: 0.
        pub dport: u16,
        /// IP protocol number.
        pub proto: u8,
        /// Explicit padding, 0.
        pub pad: [u8; 3],
    }
}

abi_struct! {
    /// `struct sdn_snat_fwd`, value of `sdn_snat_fwd`.
    pub struct SnatFwd = "sdn_snat_fwd" {
        /// The NAT address.
        pub nat: Addr,
        /// The NAT port (network order).
        pub nat_port: u16,
        /// Explicit padding, 0.
        pub pad: [u8; 2],
    }
}

abi_struct! {
    /// `struct sdn_snat_rkey`: key of `sdn_snat_rev`, a reply as it arrives from outside.
    pub struct SnatRkey = "sdn_snat_rkey" {
        /// The NAT address.
        pub nat: Addr,
        /// The peer outside.
        pub peer: Addr,
        /// The NAT port (network order).
        pub nat_port: u16,
        /// The peer's port (network order); ICMP echo: 0.
        pub peer_port: u16,
        /// IP protocol number.
        pub proto: u8,
        /// Explicit padding, 0.
        pub pad: [u8; 3],
    }
}

abi_struct! {
    /// `struct sdn_snat_rev`, value of `sdn_snat_rev`: the pod's side of the flow.
    pub struct SnatRev = "sdn_snat_rev" {
        /// The pod's net.
        pub net: u32,
        /// The pod.
        pub pod: Addr,
        /// The pod's port (network order).
        pub pod_port: u16,
        /// Explicit padding, 0.
        pub pad: [u8; 2],
        /// Last seen, in units of 2^30 ns of the kernel's monotonic clock.
        pub seen: u32,
        /// `SDN_SNAT_S_*`: what the NAT saw of a TCP connection, one byte per event (a
        /// count: non-zero once seen); 0 for other protocols.
        pub state: u32,
    }
}

impl SnatRev {
    /// `SDN_SNAT_S_REPLIED`: a packet came back from the peer.
    pub const S_REPLIED: u32 = 1;
    /// `SDN_SNAT_S_FIN_OUT`: the pod sent a FIN.
    pub const S_FIN_OUT: u32 = 1 << 8;
    /// `SDN_SNAT_S_FIN_IN`: the peer sent a FIN.
    pub const S_FIN_IN: u32 = 1 << 16;
    /// `SDN_SNAT_S_CLOSED`: an RST, or the last ACK after both FINs: the port is free.
    pub const S_CLOSED: u32 = 1 << 24;

    /// Whether event `e` (one of the `S_*`) was seen.
    pub const fn seen_event(&self, e: u32) -> bool {
        self.state & e.wrapping_mul(0xff) != 0
    }
}

impl SnatRkey {
    /// `SDN_SNAT_CLAIM`: `pad[0]` of a takeover lock key (no flow).
    pub const CLAIM: u8 = 1;
}

abi_struct! {
    /// `struct sdn_snat_work`, the per-CPU scratch value of `sdn_snat_work`.
    pub struct SnatWork = "sdn_snat_work" {
        /// The flow's forward key.
        pub fk: SnatKey,
        /// The flow's reverse key.
        pub rk: SnatRkey,
        /// The flow's reverse value.
        pub rv: SnatRev,
        /// The flow's forward value.
        pub fv: SnatFwd,
        /// The datagram's fragment key.
        pub frk: FragKey,
        /// An expired flow's forward key.
        pub old: SnatKey,
        /// What a first fragment became.
        pub frag: Frag,
    }
}

// === The load balancer's maps (include/sdn/lb_maps.h) ===

/// `SDN_LB_SLOTS`: slots of one Maglev table.
pub const LB_SLOTS: usize = 1021;

/// `SDN_LB_BIG_SLOTS`: slots of a big frontend's Maglev table (`sdn_lb_mag_big`).
pub const LB_BIG_SLOTS: usize = 29989;

/// `SDN_LB_CHUNK_SLOTS`: slots of one [`LbChunk`] of a big table (a 4 KiB map element).
pub const LB_CHUNK_SLOTS: usize = 1000;

/// `SDN_LB_BIG_CHUNKS`: chunks of a big table, the last one partly used.
pub const LB_BIG_CHUNKS: u32 = 30;

const _: () = assert!(
    LB_BIG_CHUNKS as usize * LB_CHUNK_SLOTS >= LB_BIG_SLOTS
        && (LB_BIG_CHUNKS as usize - 1) * LB_CHUNK_SLOTS < LB_BIG_SLOTS
);

/// `SDN_LB_NET_EXTERNAL`: the net of the frontends traffic from outside the cluster meets at
/// the uplink (outside the 24-bit VNI space).
pub const LB_NET_EXTERNAL: u32 = 0x4000_0000;

abi_struct! {
    /// `struct sdn_lb_key`: key of `sdn_lb_svc`, a ServiceVIP port.
    pub struct LbKey = "sdn_lb_key" {
        /// The VIP's net (VNI).
        pub net: u32,
        /// The virtual address.
        pub vip: Addr,
        /// The Service port, network order.
        pub port: u16,
        /// `IPPROTO_TCP` or `IPPROTO_UDP`.
        pub proto: u8,
        /// Zero.
        pub pad: u8,
    }
}

abi_struct! {
    /// `struct sdn_lb_svc`, value of `sdn_lb_svc`.
    pub struct LbSvc = "sdn_lb_svc" {
        /// Key of the frontend's table in `sdn_lb_maglev`.
        pub id: u32,
        /// Backends in the table; 0: none.
        pub count: u32,
        /// ClientIP affinity timeout in seconds; 0: none.
        pub affinity: u32,
        /// Low byte: the agent's owner of the frontend (0 ServiceVIPs, 1 Kubernetes
        /// Services), which the datapath ignores; `F_*` in the bits above it.
        pub flags: u32,
    }
}

impl LbSvc {
    /// `SDN_LB_SVC_F_BIG`: the frontend's table is in `sdn_lb_mag_big` ([`LbChunk`]s), not
    /// in `sdn_lb_maglev`.
    pub const F_BIG: u32 = 1 << 8;
}

/// `struct sdn_lb_table`, value of `sdn_lb_maglev`: a backend id per slot. Not through
/// `abi_struct!`, which derives `Default` (arrays this long have none).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LbTable {
    /// The backend id of each slot.
    pub slot: [u32; LB_SLOTS],
}

const _: () = assert!(size_of::<LbTable>() == 4 * LB_SLOTS);

impl Abi for LbTable {
    const LAYOUT: StructLayout = StructLayout {
        c_name: "sdn_lb_table",
        size: size_of::<LbTable>(),
        align: align_of::<LbTable>(),
        fields: &[("slot", offset_of!(LbTable, slot))],
    };
}

// SAFETY: repr(C), one u32 array, no padding (asserted above), layout checked against the
// C header by tests/abi_layout.rs; every bit pattern is a valid value.
#[expect(unsafe_code, reason = "aya::Pod for an ABI struct shared with the kernel")]
unsafe impl aya::Pod for LbTable {}

abi_struct! {
    /// `struct sdn_lb_chunk_key`: key of `sdn_lb_mag_big`, one chunk of a big table.
    pub struct LbChunkKey = "sdn_lb_chunk_key" {
        /// The frontend id (`LbSvc::id`).
        pub id: u32,
        /// `0..LB_BIG_CHUNKS`: the chunk holds slots from `chunk * LB_CHUNK_SLOTS` on.
        pub chunk: u32,
    }
}

/// `struct sdn_lb_chunk`, value of `sdn_lb_mag_big`: [`LB_CHUNK_SLOTS`] slots of a big
/// table of a frontend with [`LbSvc::F_BIG`]. Not through `abi_struct!` (no `Default`), as
/// [`LbTable`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LbChunk {
    /// The backend id of each slot.
    pub slot: [u32; LB_CHUNK_SLOTS],
}

const _: () = assert!(size_of::<LbChunk>() == 4 * LB_CHUNK_SLOTS);

impl Abi for LbChunk {
    const LAYOUT: StructLayout = StructLayout {
        c_name: "sdn_lb_chunk",
        size: size_of::<LbChunk>(),
        align: align_of::<LbChunk>(),
        fields: &[("slot", offset_of!(LbChunk, slot))],
    };
}

// SAFETY: as for LbTable: repr(C), one u32 array, no padding (asserted above), layout checked
// against the C header by tests/abi_layout.rs; every bit pattern is a valid value.
#[expect(unsafe_code, reason = "aya::Pod for an ABI struct shared with the kernel")]
unsafe impl aya::Pod for LbChunk {}

abi_struct! {
    /// `struct sdn_lb_backend`, value of `sdn_lb_backends`.
    pub struct LbBackend = "sdn_lb_backend" {
        /// The backend's net (VNI).
        pub net: u32,
        /// Its address.
        pub addr: Addr,
        /// The target port, network order.
        pub port: u16,
        /// Zero.
        pub pad: [u8; 2],
    }
}

abi_struct! {
    /// `struct sdn_lb_flow_key`: key of `sdn_lb_flows`, a client's flow to a VIP.
    pub struct LbFlowKey = "sdn_lb_flow_key" {
        /// The client's net.
        pub net: u32,
        /// The client.
        pub client: Addr,
        /// The VIP.
        pub vip: Addr,
        /// Network order.
        pub client_port: u16,
        /// Network order.
        pub vip_port: u16,
        /// L4 protocol.
        pub proto: u8,
        /// Zero.
        pub pad: [u8; 3],
    }
}

abi_struct! {
    /// `struct sdn_lb_flow`, value of `sdn_lb_flows`: the backend pinned for the flow.
    pub struct LbFlow = "sdn_lb_flow" {
        /// The backend.
        pub backend: Addr,
        /// The backend's net.
        pub net: u32,
        /// Network order.
        pub backend_port: u16,
        /// `SDN_LB_F_*`.
        pub flags: u8,
        /// Zero.
        pub pad: u8,
    }
}

abi_struct! {
    /// `struct sdn_lb_rev_key`: key of `sdn_lb_rev`, a backend's reply as it leaves it.
    pub struct LbRevKey = "sdn_lb_rev_key" {
        /// The backend's net.
        pub net: u32,
        /// The backend.
        pub backend: Addr,
        /// The client (the hairpin address for a hairpin flow).
        pub client: Addr,
        /// Network order.
        pub backend_port: u16,
        /// Network order.
        pub client_port: u16,
        /// L4 protocol.
        pub proto: u8,
        /// Zero.
        pub pad: [u8; 3],
    }
}

abi_struct! {
    /// `struct sdn_lb_rev`, value of `sdn_lb_rev`.
    pub struct LbRev = "sdn_lb_rev" {
        /// The VIP the reply must come from.
        pub vip: Addr,
        /// The real client.
        pub client: Addr,
        /// Network order.
        pub vip_port: u16,
        /// Zero.
        pub pad: [u8; 2],
    }
}

abi_struct! {
    /// `struct sdn_lb_work`, the per-CPU scratch value of `sdn_lb_work`.
    pub struct LbWork = "sdn_lb_work" {
        /// The flow's key.
        pub fk: LbFlowKey,
        /// The reverse key of a new flow.
        pub rk: LbRevKey,
        /// The reverse value of a new flow.
        pub rv: LbRev,
        /// The flow's value.
        pub nf: LbFlow,
    }
}

abi_struct! {
    /// `struct sdn_lb_aff_key`: key of `sdn_lb_affinity`.
    pub struct LbAffKey = "sdn_lb_aff_key" {
        /// The client's net.
        pub net: u32,
        /// The client.
        pub client: Addr,
        /// The frontend id.
        pub svc: u32,
    }
}

abi_struct! {
    /// `struct sdn_lb_aff`, value of `sdn_lb_affinity`.
    pub struct LbAff = "sdn_lb_aff" {
        /// `bpf_ktime_get_ns()` of the client's last new flow.
        pub seen_ns: u64,
        /// The backend id it was given.
        pub backend: u32,
        /// Zero.
        pub pad: u32,
    }
}

impl LbFlow {
    /// `SDN_LB_F_HAIRPIN`.
    pub const F_HAIRPIN: u8 = 1;
}
