//! Typed wrappers, one module per map of `include/sdn/maps.h`.
//!
//! Each module has `NAME`, the C identifier, which is also the pin file name under the
//! agent's bpffs directory. Wrappers take `std::net` addresses and hide the ABI
//! encoding; the raw aya map stays reachable through `inner()` for tools and tests.

use std::path::Path;

use aya::maps::{Map, MapData, MapError};

pub mod bridges;
pub mod ct_fwd;
pub mod ct_rev;
pub mod dnat;
pub mod dns_cfg;
pub mod dns_ct;
pub mod dns_pods;
pub mod door_stats;
pub mod drops;
pub mod endpoints;
pub mod fip_in;
pub mod fip_out;
pub mod forged;
pub mod frags;
pub mod internal;
pub mod lb_affinity;
pub mod lb_backends;
pub mod lb_flows;
pub mod lb_mag_big;
pub mod lb_maglev;
pub mod lb_rev;
pub mod lb_stats;
pub mod lb_svc;
pub mod lb_work;
pub mod lbg_front;
pub mod lbg_ingress;
pub mod lbg_rev;
pub mod mig_peers;
pub mod migrations;
pub mod net_stats;
pub mod node_blocks;
pub mod nodes;
pub mod pol_drops;
pub mod ports;
pub mod remotes;
pub mod snat_addrs;
pub mod snat_conf;
pub mod snat_fwd;
pub mod snat_gws;
pub mod snat_rev;
pub mod snat_shards;
pub mod snat_work;
pub mod sock_netns;
pub mod sock_rev;
pub mod sock_stats;
pub mod xnet_allow;
pub mod xnet_routes;

// The policy layers (include/sdn/policy_maps.h); also listed in POLICY.
pub mod hf_self;
pub mod np_idents;
pub mod pol_cidrs;
pub mod pol_ct;
pub mod pol_rules;
pub mod pol_state;
pub mod pol_work;
pub mod sg_members;

/// Every map name; each is in every object.
pub const ALL: &[&str] = &[
    ports::NAME,
    endpoints::NAME,
    remotes::NAME,
    node_blocks::NAME,
    bridges::NAME,
    ct_fwd::NAME,
    ct_rev::NAME,
    dns_cfg::NAME,
    dns_pods::NAME,
    dns_ct::NAME,
    dnat::NAME,
    drops::NAME,
    net_stats::NAME,
    pol_drops::NAME,
    forged::NAME,
    xnet_routes::NAME,
    xnet_allow::NAME,
    nodes::NAME,
    frags::NAME,
    snat_conf::NAME,
    snat_addrs::NAME,
    snat_gws::NAME,
    snat_shards::NAME,
    snat_fwd::NAME,
    snat_rev::NAME,
    snat_work::NAME,
    door_stats::NAME,
    fip_in::NAME,
    fip_out::NAME,
    internal::NAME,
    lbg_front::NAME,
    lbg_rev::NAME,
    lbg_ingress::NAME,
    lb_svc::NAME,
    lb_maglev::NAME,
    lb_mag_big::NAME,
    lb_backends::NAME,
    lb_flows::NAME,
    lb_rev::NAME,
    lb_affinity::NAME,
    lb_stats::NAME,
    lb_work::NAME,
    pol_ct::NAME,
    pol_state::NAME,
    pol_rules::NAME,
    pol_cidrs::NAME,
    sg_members::NAME,
    np_idents::NAME,
    hf_self::NAME,
    pol_work::NAME,
    sock_netns::NAME,
    sock_rev::NAME,
    sock_stats::NAME,
    migrations::NAME,
    mig_peers::NAME,
];

/// The policy layers' maps (`include/sdn/policy_maps.h`), a part of [`ALL`] that
/// `tests/policy_abi.rs` checks against the header compiled alone.
pub const POLICY: [&str; 8] = [
    pol_ct::NAME,
    pol_state::NAME,
    pol_rules::NAME,
    pol_cidrs::NAME,
    sg_members::NAME,
    np_idents::NAME,
    hf_self::NAME,
    pol_work::NAME,
];

/// Open the map `name` pinned in `dir` (the agent's bpffs directory).
pub fn open_pinned(dir: &Path, name: &str) -> Result<Map, MapError> {
    Map::from_map_data(MapData::from_pin(dir.join(name))?)
}

/// `Ok(None)` for a missing key instead of an error.
pub(crate) fn optional<V>(r: Result<V, MapError>) -> Result<Option<V>, MapError> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(MapError::KeyNotFound) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The wrapper struct and its constructors from aya's `Map` (owned, `&`, `&mut`) and
/// from a pin. aya checks key and value sizes against the map on conversion.
macro_rules! map_wrapper {
    ($(#[$meta:meta])* $wrapper:ident, $aya:ident < $($kv:ty),+ >) => {
        $(#[$meta])*
        pub struct $wrapper<T>(aya::maps::$aya<T, $($kv),+>);

        impl<T> $wrapper<T> {
            /// The underlying aya map.
            pub fn inner(&self) -> &aya::maps::$aya<T, $($kv),+> {
                &self.0
            }
        }

        impl $wrapper<aya::maps::MapData> {
            /// Open the pinned map `dir/NAME`.
            pub fn from_pin(dir: &std::path::Path) -> Result<Self, aya::maps::MapError> {
                Self::try_from(crate::maps::open_pinned(dir, NAME)?)
            }
        }

        impl TryFrom<aya::maps::Map> for $wrapper<aya::maps::MapData> {
            type Error = aya::maps::MapError;
            fn try_from(m: aya::maps::Map) -> Result<Self, Self::Error> {
                Ok(Self(aya::maps::$aya::try_from(m)?))
            }
        }

        impl<'a> TryFrom<&'a mut aya::maps::Map> for $wrapper<&'a mut aya::maps::MapData> {
            type Error = aya::maps::MapError;
            fn try_from(m: &'a mut aya::maps::Map) -> Result<Self, Self::Error> {
                Ok(Self(aya::maps::$aya::try_from(m)?))
            }
        }

        impl<'a> TryFrom<&'a aya::maps::Map> for $wrapper<&'a aya::maps::MapData> {
            type Error = aya::maps::MapError;
            fn try_from(m: &'a aya::maps::Map) -> Result<Self, Self::Error> {
                Ok(Self(aya::maps::$aya::try_from(m)?))
            }
        }
    };
}
pub(crate) use map_wrapper;

#[cfg(test)]
mod tests {
    use std::mem::size_of;

    use super::*;
    use crate::Object;
    use crate::abi::{
        Addr, BlockKey, Bridge, CtFwd, CtFwdKey, CtRev, CtRevKey, Dnat, DnatKey, DoorKey, DoorStats,
        DropStats, Endpoint, EpKey, Fip, FipPub, Frag, FragKey, Internal, LbAff, LbAffKey, LbBackend,
        LbChunk, LbChunkKey, LbFlow, LbFlowKey, LbKey, LbRev, LbRevKey, LbSvc, LbTable, LbWork, LbgFront,
        LbgKey, LbgRevKey, NetStats, NodeEntry, Port, Remote, SnatAddr, SnatConf, SnatFwd, SnatGw, SnatKey,
        SnatRev, SnatRkey, SnatWork, SockNetns, SockRev, SockRevKey, XnetKey, XnetPair, XnetRoute, XnetStats,
    };

    #[test]
    fn every_map_name_is_in_every_object() {
        for obj in Object::ALL {
            let parsed = aya_obj::Object::parse(obj.bytes()).expect("embedded object parses");
            for &name in ALL {
                assert!(
                    parsed.maps.contains_key(name),
                    "{name} missing from {}",
                    obj.file_name()
                );
            }
        }
    }

    #[test]
    fn map_names_fit_the_kernel_object_name() {
        for name in ALL {
            assert!(name.len() <= 15, "{name} would be truncated by the kernel");
            assert!(name.starts_with("sdn_"), "{name}");
        }
    }

    /// The sizes clang wrote into each object's map definitions match the Rust types,
    /// a second check of the layout besides tests/abi_layout.rs.
    #[test]
    fn object_key_and_value_sizes_match_the_rust_types() {
        let expect: &[(&str, usize, usize)] = &[
            (ports::NAME, size_of::<u32>(), size_of::<Port>()),
            (endpoints::NAME, size_of::<EpKey>(), size_of::<Endpoint>()),
            (remotes::NAME, size_of::<EpKey>(), size_of::<Remote>()),
            (node_blocks::NAME, size_of::<BlockKey>(), size_of::<Remote>()),
            (bridges::NAME, size_of::<Addr>(), size_of::<Bridge>()),
            (ct_fwd::NAME, size_of::<CtFwdKey>(), size_of::<CtFwd>()),
            (ct_rev::NAME, size_of::<CtRevKey>(), size_of::<CtRev>()),
            (dnat::NAME, size_of::<DnatKey>(), size_of::<Dnat>()),
            (drops::NAME, size_of::<u32>(), size_of::<DropStats>()),
            (net_stats::NAME, size_of::<u32>(), size_of::<NetStats>()),
            (
                pol_drops::NAME,
                size_of::<crate::abi::PolDropKey>(),
                size_of::<DropStats>(),
            ),
            (
                forged::NAME,
                size_of::<crate::abi::ForgedKey>(),
                size_of::<DropStats>(),
            ),
            (xnet_routes::NAME, size_of::<XnetKey>(), size_of::<XnetRoute>()),
            (xnet_allow::NAME, size_of::<XnetPair>(), size_of::<XnetStats>()),
            (nodes::NAME, size_of::<Addr>(), size_of::<NodeEntry>()),
            (frags::NAME, size_of::<FragKey>(), size_of::<Frag>()),
            (snat_conf::NAME, size_of::<u32>(), size_of::<SnatConf>()),
            (snat_addrs::NAME, size_of::<Addr>(), size_of::<SnatAddr>()),
            (snat_gws::NAME, size_of::<u32>(), size_of::<SnatGw>()),
            (snat_shards::NAME, size_of::<u32>(), size_of::<Remote>()),
            (snat_fwd::NAME, size_of::<SnatKey>(), size_of::<SnatFwd>()),
            (snat_rev::NAME, size_of::<SnatRkey>(), size_of::<SnatRev>()),
            (snat_work::NAME, size_of::<u32>(), size_of::<SnatWork>()),
            (door_stats::NAME, size_of::<DoorKey>(), size_of::<DoorStats>()),
            (fip_in::NAME, size_of::<Addr>(), size_of::<Fip>()),
            (fip_out::NAME, size_of::<EpKey>(), size_of::<FipPub>()),
            (internal::NAME, size_of::<XnetKey>(), size_of::<Internal>()),
            (lbg_front::NAME, size_of::<LbgKey>(), size_of::<LbgFront>()),
            (lbg_rev::NAME, size_of::<LbgRevKey>(), size_of::<LbgKey>()),
            (lbg_ingress::NAME, size_of::<u32>(), size_of::<u32>()),
            (dns_cfg::NAME, size_of::<u32>(), size_of::<crate::abi::DnsCfg>()),
            (
                dns_pods::NAME,
                size_of::<EpKey>(),
                size_of::<crate::abi::DnsPod>(),
            ),
            (
                dns_ct::NAME,
                size_of::<crate::abi::DnsCtKey>(),
                size_of::<crate::abi::DnsCt>(),
            ),
            (lb_svc::NAME, size_of::<LbKey>(), size_of::<LbSvc>()),
            (lb_maglev::NAME, size_of::<u32>(), size_of::<LbTable>()),
            (lb_mag_big::NAME, size_of::<LbChunkKey>(), size_of::<LbChunk>()),
            (lb_backends::NAME, size_of::<u32>(), size_of::<LbBackend>()),
            (lb_flows::NAME, size_of::<LbFlowKey>(), size_of::<LbFlow>()),
            (lb_rev::NAME, size_of::<LbRevKey>(), size_of::<LbRev>()),
            (lb_affinity::NAME, size_of::<LbAffKey>(), size_of::<LbAff>()),
            (lb_stats::NAME, size_of::<u32>(), size_of::<u64>()),
            (lb_work::NAME, size_of::<u32>(), size_of::<LbWork>()),
            (sock_netns::NAME, size_of::<u64>(), size_of::<SockNetns>()),
            (sock_rev::NAME, size_of::<SockRevKey>(), size_of::<SockRev>()),
            (sock_stats::NAME, size_of::<u32>(), size_of::<u64>()),
        ];
        for obj in Object::ALL {
            let parsed = aya_obj::Object::parse(obj.bytes()).expect("embedded object parses");
            for &(name, key, value) in expect {
                let m = &parsed.maps[name];
                assert_eq!(m.key_size() as usize, key, "{name} key in {}", obj.file_name());
                assert_eq!(
                    m.value_size() as usize,
                    value,
                    "{name} value in {}",
                    obj.file_name()
                );
            }
        }
    }
}
