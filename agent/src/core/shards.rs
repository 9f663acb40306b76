//! The gateway NAT's port shards: the VPC gateway's NAT port range cut into `--nat-shards`
//! equal shards, one per node by its fabric block, so two nodes never use one port of one NAT
//! address. Two features read it: the uplink writes this node's shard into `sdn_snat_conf`
//! (`features/uplink`), egress maps every node's shard to its tunnel address
//! (`features/egress`); so it lives in the core.

/// The gateway NAT range, cut into `--nat-shards` equal shards; the NAT address is the VPC's
/// own, so the whole unprivileged range is available.
pub const GW_PORTS: (u16, u16) = (1024, 65535);

/// This node's shard of the gateway port range: its fabric block's number (the block base
/// shifted right by the host bits) modulo `shards`. Deterministic and known to every node
/// (blocks are on the Nodes), and collision-free as long as the cluster's pod CIDR holds at
/// most `shards` blocks (a /16 cut into /24s needs 256: raise `--nat-shards`, which narrows
/// each shard, or use larger blocks). The node IPAM hands out blocks in order, so the first
/// `shards` nodes never collide whatever the CIDR.
pub fn shard_of(block: (std::net::Ipv4Addr, u8), shards: u16) -> u16 {
    let (base, len) = block;
    let number = u32::from(base)
        .checked_shr(32 - u32::from(len.min(32)))
        .unwrap_or(0);
    u16::try_from(number % u32::from(shards.max(1))).unwrap_or(0)
}

/// Ports per shard for `shards` shards of [`GW_PORTS`].
pub fn shard_size(shards: u16) -> u16 {
    let span = u32::from(GW_PORTS.1) - u32::from(GW_PORTS.0) + 1;
    u16::try_from(span / u32::from(shards.max(1))).unwrap_or(u16::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::ipam::Block;

    #[test]
    fn the_shard_is_the_block_number_modulo_the_shards() {
        let b = |s: &str| {
            let b: Block = s.parse().unwrap();
            (b.base(), b.prefix())
        };
        assert_eq!(shard_of(b("10.244.1.0/24"), 16), 1);
        assert_eq!(shard_of(b("10.244.2.0/24"), 16), 2);
        assert_eq!(shard_of(b("10.244.17.0/24"), 16), 1);
        assert_eq!(shard_of(b("10.244.0.0/16"), 16), 4);
        // Different blocks of one /16 cut into /24s never share a shard with 256 shards.
        let mut seen = std::collections::HashSet::new();
        for i in 0..=255u8 {
            assert!(seen.insert(shard_of(b(&format!("10.244.{i}.0/24")), 256)));
        }
    }

    #[test]
    fn shards_cut_the_gateway_range_without_overlap() {
        for shards in [1u16, 16, 64, 1024] {
            let size = u32::from(shard_size(shards));
            let last = u32::from(GW_PORTS.0) + u32::from(shards) * size - 1;
            assert!(last <= u32::from(GW_PORTS.1), "{shards} shards end at {last}");
            assert!(size > 0);
        }
    }
}
