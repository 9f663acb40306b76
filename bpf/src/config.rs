//! Load-time configuration, mirroring the `DECLARE_CONFIG` list in `include/sdn/config.h`.
//!
//! Each field becomes the `.rodata` global `__config_<field>` of every object, patched by
//! the loader with `must_exist = true`: a knob renamed on one side fails the load instead
//! of silently keeping the C default.

use std::mem::size_of;
use std::net::{Ipv4Addr, Ipv6Addr};

use aya::EbpfLoader;

use crate::abi::{Addr, Mac};

/// Prefix of the C globals (`DECLARE_CONFIG` in `include/sdn/config.h`).
pub const GLOBAL_PREFIX: &str = "__config_";

/// The knobs, with the same names and descriptions as the C declarations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DatapathConfig {
    /// ifindex of the collect-metadata VXLAN/Geneve device; 0 = no overlay.
    pub tunnel_ifindex: u32,
    /// VNI that carries the default network (net 0) on the wire.
    pub net0_vni: u32,
    /// Link-local IPv4 gateway every pod routes through.
    pub gw_ipv4: Ipv4Addr,
    /// MAC that answers ARP for the gateway and sources frames delivered to pods.
    pub gw_mac: [u8; 6],
    /// Inner destination MAC of overlay frames: the tunnel device MAC, equal on all nodes.
    pub tunnel_mac: [u8; 6],
    /// skb mark bit the agent's netfilter rule sets on DNATed packets routed into a pod; 0 =
    /// none.
    pub dnat_mark: u32,
    /// How the source's SecurityGroups travel in the tunnel option (lib/policy.h): 0 = not
    /// carried, 1 = VXLAN-GBP policy id (the device needs gbp), 2 = a Geneve option.
    pub tunnel_groups: u32,
    /// UDP port of the overlay (the agent's --tunnel-port), host byte order: HostFirewall
    /// exempts it between known nodes.
    pub tunnel_port: u32,
    /// This node's IPv4 fabric block and its prefix length: no other node may send from it
    /// over the overlay (`own_block`, `own_block_len`).
    pub own_block: Option<(Ipv4Addr, u8)>,
    /// This node's IPv6 fabric block: no other node may send from it over the overlay
    /// (`own_block6`, `own_block6_len`).
    pub own_block6: Option<(Ipv6Addr, u8)>,
}

impl Default for DatapathConfig {
    /// The C defaults.
    fn default() -> Self {
        Self {
            tunnel_ifindex: 0,
            net0_vni: 1,
            gw_ipv4: Ipv4Addr::new(169, 254, 1, 1),
            gw_mac: [0x02, 0xcf, 0x00, 0x00, 0x00, 0x01],
            tunnel_mac: [0x02, 0xcf, 0xcf, 0xcf, 0xcf, 0xcf],
            dnat_mark: 0x0010_0000,
            tunnel_groups: 0,
            tunnel_port: 4789,
            own_block: None,
            own_block6: None,
        }
    }
}

/// The knobs in their C representation, owned so the loader can borrow them.
#[derive(Clone, Debug)]
pub struct ConfigValues {
    tunnel_ifindex: u32,
    net0_vni: u32,
    gw_ipv4: [u8; 4],
    gw_mac: Mac,
    tunnel_mac: Mac,
    dnat_mark: u32,
    tunnel_groups: u32,
    tunnel_port: u32,
    own_block: Addr,
    own_block_len: u32,
    own_block6: Addr,
    own_block6_len: u32,
}

/// Every knob's name (without [`GLOBAL_PREFIX`]) and the size of its C global, which
/// aya compares with the value it patches in.
pub const GLOBALS: [(&str, usize); 12] = [
    ("tunnel_ifindex", size_of::<u32>()),
    ("net0_vni", size_of::<u32>()),
    ("gw_ipv4", size_of::<[u8; 4]>()),
    ("gw_mac", size_of::<Mac>()),
    ("tunnel_mac", size_of::<Mac>()),
    ("dnat_mark", size_of::<u32>()),
    ("tunnel_groups", size_of::<u32>()),
    ("tunnel_port", size_of::<u32>()),
    ("own_block", size_of::<Addr>()),
    ("own_block_len", size_of::<u32>()),
    ("own_block6", size_of::<Addr>()),
    ("own_block6_len", size_of::<u32>()),
];

impl DatapathConfig {
    /// The values as the C globals store them.
    pub fn values(&self) -> ConfigValues {
        ConfigValues {
            tunnel_ifindex: self.tunnel_ifindex,
            net0_vni: self.net0_vni,
            // __be32: the octets in wire order.
            gw_ipv4: self.gw_ipv4.octets(),
            gw_mac: Mac { addr: self.gw_mac },
            tunnel_mac: Mac {
                addr: self.tunnel_mac,
            },
            dnat_mark: self.dnat_mark,
            tunnel_groups: self.tunnel_groups,
            tunnel_port: self.tunnel_port,
            // The IPv4 block in the 128-bit form: 96 bits of 64:ff9b::/96 first.
            own_block: self.own_block.map_or(Addr { b: [0; 16] }, |(a, _)| Addr::from(a)),
            own_block_len: self.own_block.map_or(0, |(_, len)| 96 + u32::from(len.min(32))),
            own_block6: self
                .own_block6
                .map_or(Addr { b: [0; 16] }, |(a, _)| Addr::from(a)),
            own_block6_len: self.own_block6.map_or(0, |(_, len)| u32::from(len.min(128))),
        }
    }
}

impl ConfigValues {
    /// Set every knob on `loader`; loading then fails if an object lacks one.
    pub fn apply<'a>(&'a self, loader: &mut EbpfLoader<'a>) {
        loader
            .override_global("__config_tunnel_ifindex", &self.tunnel_ifindex, true)
            .override_global("__config_net0_vni", &self.net0_vni, true)
            .override_global("__config_gw_ipv4", &self.gw_ipv4, true)
            .override_global("__config_gw_mac", &self.gw_mac, true)
            .override_global("__config_tunnel_mac", &self.tunnel_mac, true)
            .override_global("__config_dnat_mark", &self.dnat_mark, true)
            .override_global("__config_tunnel_groups", &self.tunnel_groups, true)
            .override_global("__config_tunnel_port", &self.tunnel_port, true)
            .override_global("__config_own_block", &self.own_block, true)
            .override_global("__config_own_block_len", &self.own_block_len, true)
            .override_global("__config_own_block6", &self.own_block6, true)
            .override_global("__config_own_block6_len", &self.own_block6_len, true);
    }
}

#[cfg(test)]
mod tests {
    use object::{Object as _, ObjectSymbol as _};

    use super::*;
    use crate::Object;

    #[test]
    fn every_knob_is_a_global_of_every_object_with_the_same_size() {
        for obj in Object::ALL {
            let elf = object::File::parse(obj.bytes()).expect("embedded object parses");
            for (name, size) in GLOBALS {
                let sym = format!("{GLOBAL_PREFIX}{name}");
                let found = elf.symbols().find(|s| s.name() == Ok(sym.as_str()));
                let found = found.unwrap_or_else(|| panic!("{sym} missing from {}", obj.file_name()));
                assert_eq!(found.size() as usize, size, "{sym} in {}", obj.file_name());
            }
        }
    }
}
