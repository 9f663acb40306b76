//! The per-VPC door and east-west families of `/metrics`, read from real pinned maps (a
//! private bpffs, the agent's own loader). Needs root; fails (never skips) without it.

mod common;

use std::path::Path;

use aya::maps::{Map, MapData, PerCpuHashMap, PerCpuValues};
use cozyplane_agent::core::datapath::loader::Datapath;
use cozyplane_agent::core::metrics::VpcNames;
use cozyplane_bpf::DatapathConfig;
use cozyplane_bpf::abi::{DoorKey, DoorStats, NetStats};
use cozyplane_bpf::maps;
use cozyplane_lab::require_root;

fn per_cpu<K: aya::Pod, V: aya::Pod + Default>(pins: &Path, name: &str, key: K, first: V) {
    let mut m: PerCpuHashMap<MapData, K, V> =
        PerCpuHashMap::try_from(Map::from_map_data(MapData::from_pin(pins.join(name)).unwrap()).unwrap())
            .unwrap();
    let n = aya::util::nr_cpus().unwrap();
    let mut vals = vec![V::default(); n];
    vals[0] = first;
    m.insert(key, PerCpuValues::try_from(vals).unwrap(), 0).unwrap();
}

#[test]
fn door_and_east_west_counters_carry_the_vpc_and_node_labels() {
    require_root();
    let fs = common::Bpffs::new("cpdoors");
    let dp = Datapath::load(&fs.pins(), &DatapathConfig::default()).expect("load the datapath");
    let pins = dp.pin_dir().to_path_buf();
    let key = |net, door, dir| DoorKey {
        net,
        door,
        dir,
        pad: [0; 2],
    };
    let stats = |packets, bytes, refused_packets, refused_bytes| DoorStats {
        packets,
        bytes,
        refused_packets,
        refused_bytes,
    };
    per_cpu(
        &pins,
        maps::door_stats::NAME,
        key(100, DoorKey::EIP, DoorKey::IN),
        stats(5, 500, 0, 0),
    );
    per_cpu(
        &pins,
        maps::door_stats::NAME,
        key(100, DoorKey::EIP, DoorKey::OUT),
        stats(3, 300, 0, 0),
    );
    per_cpu(
        &pins,
        maps::door_stats::NAME,
        key(200, DoorKey::LOADBALANCER, DoorKey::IN),
        stats(0, 0, 2, 120),
    );
    let ew = NetStats {
        tx_packets: 7,
        tx_bytes: 700,
        rx_packets: 6,
        rx_bytes: 600,
    };
    per_cpu(&pins, maps::net_stats::NAME, 100u32, ew);
    per_cpu(&pins, maps::net_stats::NAME, 0u32, ew);

    let names = VpcNames::default();
    names.set([(100, ("t1".to_string(), "blue".to_string()))]);
    let text = common::agent_metrics(pins, "n1", names).render();
    let has = |line: &str| assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
    has(
        r#"cozyplane_vpc_door_packets_total{vni="100",vpc_namespace="t1",vpc="blue",node="n1",door="eip",direction="in"} 5"#,
    );
    has(
        r#"cozyplane_vpc_door_bytes_total{vni="100",vpc_namespace="t1",vpc="blue",node="n1",door="eip",direction="out"} 300"#,
    );
    // A VPC the watch has not named yet keeps empty names.
    has(
        r#"cozyplane_vpc_door_refused_packets_total{vni="200",vpc_namespace="",vpc="",node="n1",door="loadbalancer",direction="in"} 2"#,
    );
    has(
        r#"cozyplane_vpc_door_refused_bytes_total{vni="200",vpc_namespace="",vpc="",node="n1",door="loadbalancer",direction="in"} 120"#,
    );
    has(r#"cozyplane_vpc_packets_total{vni="100",vpc_namespace="t1",vpc="blue",node="n1",direction="tx"} 7"#);
    has(r#"cozyplane_vpc_bytes_total{vni="100",vpc_namespace="t1",vpc="blue",node="n1",direction="rx"} 600"#);
    assert!(
        !text
            .lines()
            .any(|l| l.starts_with("cozyplane_vpc_") && l.contains(r#"vni="0""#)),
        "net 0 is no VPC:\n{text}"
    );
    drop(dp);
}
