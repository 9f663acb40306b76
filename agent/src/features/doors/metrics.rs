//! The doors' families, read from `sdn_door_stats` on each scrape:
//! `cozyplane_vpc_door_packets_total`, `cozyplane_vpc_door_bytes_total`
//! `{vni,vpc_namespace,vpc,node,door,direction}`: what crossed a VPC's boundary through a door
//! (`gateway`, `eip`, `loadbalancer`) in a direction (`in`, `out`) on this node;
//! `cozyplane_vpc_door_refused_packets_total`, `cozyplane_vpc_door_refused_bytes_total`, same
//! labels: what the boundary refused there.

use cozyplane_bpf::abi::DoorKey;
use cozyplane_bpf::maps::door_stats::DoorStatsMap;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;

use crate::core::metrics::{Scope, counter_family};

/// The label value of a door (`SDN_DOOR_*`).
fn door_name(door: u8) -> &'static str {
    match door {
        DoorKey::GATEWAY => "gateway",
        DoorKey::EIP => "eip",
        DoorKey::LOADBALANCER => "loadbalancer",
        _ => "unknown",
    }
}

/// Reads `sdn_door_stats` on each scrape.
#[derive(Debug)]
pub struct DoorCollector(pub Scope);

impl Collector for DoorCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        // A map that cannot be opened (agent starting, pins wiped) is left out of the scrape.
        let Ok(doors) = DoorStatsMap::from_pin(&self.0.pin_dir) else {
            return Ok(());
        };
        let Ok(rows) = doors.entries() else { return Ok(()) };
        let (mut pk, mut by, mut rpk, mut rby) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (k, v) in rows.into_iter().filter(|(k, _)| k.net != 0) {
            let mut l = self.0.vpc_labels(k.net);
            l.push(("door", door_name(k.door).to_string()));
            let dir = if k.dir == DoorKey::IN { "in" } else { "out" };
            l.push(("direction", dir.to_string()));
            pk.push((l.clone(), v.packets));
            by.push((l.clone(), v.bytes));
            rpk.push((l.clone(), v.refused_packets));
            rby.push((l, v.refused_bytes));
        }
        counter_family(
            &mut enc,
            "cozyplane_vpc_door_packets",
            "Packets through a VPC's door, by direction",
            &pk,
        )?;
        counter_family(
            &mut enc,
            "cozyplane_vpc_door_bytes",
            "Bytes through a VPC's door, by direction",
            &by,
        )?;
        counter_family(
            &mut enc,
            "cozyplane_vpc_door_refused_packets",
            "Packets the VPC boundary refused at a door",
            &rpk,
        )?;
        counter_family(
            &mut enc,
            "cozyplane_vpc_door_refused_bytes",
            "Bytes the VPC boundary refused at a door",
            &rby,
        )
    }
}
