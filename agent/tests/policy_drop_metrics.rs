//! The policy layers' drop family of `/metrics` (`sdn_pol_drops`), read from real pinned
//! maps (a private bpffs, the agent's own loader): one row per layer, reason and VPC, with
//! the VPC's names and the node. Needs root; fails (never skips) without it.

mod common;

use aya::maps::{Map, MapData, PerCpuHashMap, PerCpuValues};
use cozyplane_agent::core::datapath::loader::Datapath;
use cozyplane_agent::core::metrics::VpcNames;
use cozyplane_bpf::abi::{DropStats, LAYER_NP, LAYER_SG, PolDropKey};
use cozyplane_bpf::{DatapathConfig, DropReason, maps};
use cozyplane_lab::require_root;

#[test]
fn policy_drops_carry_layer_reason_vpc_and_node() {
    require_root();
    let fs = common::Bpffs::new("cppoldrops");
    let dp = Datapath::load(&fs.pins(), &DatapathConfig::default()).expect("load the datapath");
    let pins = dp.pin_dir().to_path_buf();
    let mut m: PerCpuHashMap<MapData, PolDropKey, DropStats> = PerCpuHashMap::try_from(
        Map::from_map_data(MapData::from_pin(pins.join(maps::pol_drops::NAME)).unwrap()).unwrap(),
    )
    .unwrap();
    let n = aya::util::nr_cpus().unwrap();
    // Counts spread over two CPUs where there are two: the family sums them.
    let mut put = |net, layer, reason: DropReason, packets: u64, bytes: u64| {
        let mut vals = vec![DropStats::default(); n];
        vals[0] = DropStats { packets, bytes };
        if n > 1 {
            vals[1] = DropStats {
                packets: 1,
                bytes: 10,
            };
        }
        let key = PolDropKey {
            net,
            layer,
            reason: u8::try_from(reason.index()).unwrap(),
            pad: [0; 2],
        };
        m.insert(key, PerCpuValues::try_from(vals).unwrap(), 0).unwrap();
    };
    put(0, LAYER_NP, DropReason::PolNp, 4, 400);
    put(100, LAYER_SG, DropReason::PolSg, 2, 200);
    put(200, LAYER_SG, DropReason::PolCtInvalid, 6, 600);
    let extra = u64::from(n > 1);

    let names = VpcNames::default();
    names.set([(100, ("t1".to_string(), "blue".to_string()))]);
    let text = common::agent_metrics(pins, "n1", names).render();
    let has = |line: String| assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
    has(format!(
        r#"cozyplane_policy_drops_packets_total{{layer="np",reason="DROP_POL_NP",vni="0",vpc_namespace="",vpc="",node="n1"}} {}"#,
        4 + extra
    ));
    has(format!(
        r#"cozyplane_policy_drops_bytes_total{{layer="sg",reason="DROP_POL_SG",vni="100",vpc_namespace="t1",vpc="blue",node="n1"}} {}"#,
        200 + 10 * extra
    ));
    // A VPC the watch has not named yet keeps empty names.
    has(format!(
        r#"cozyplane_policy_drops_packets_total{{layer="sg",reason="DROP_POL_CT_INVALID",vni="200",vpc_namespace="",vpc="",node="n1"}} {}"#,
        6 + extra
    ));
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("cozyplane_policy_drops_packets_total{"))
            .count(),
        3,
        "one row per key:\n{text}"
    );
    drop(dp);
}
