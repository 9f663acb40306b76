//! `make e2e`: an agent upgrade that changes the layout of one pinned map (issue 11, item 8).
//! Needs root, ping, and the agent and CNI binaries built.
//!
//! The previous version's map is made the way its loader would have made it: the objects'
//! definition of `sdn_remotes` with a wider value, pinned where the agent pins it, while the
//! programs already attached keep the map they were loaded with (as after a real upgrade, the
//! old programs run until the new agent swaps them). The new agent must rebuild that one map
//! from its sources (the API watches) and keep every other map, with its entries and its id,
//! and traffic on paths that do not read the changed map keeps flowing across the restart.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use aya::maps::{MapData, MapInfo};
use cozyplane_bpf::{Object, maps};
use cozyplane_lab::{Lab, received};

mod common;
use common::{Cp, pod, tenant, vni, vpc_ip, wait};

/// Kernel map id of every pinned map.
fn ids(pins: &Path) -> BTreeMap<&'static str, u32> {
    maps::ALL
        .iter()
        .map(|n| {
            let info = MapInfo::from_pin(pins.join(n)).unwrap_or_else(|e| panic!("{n}: {e}"));
            (*n, info.id())
        })
        .collect()
}

#[test]
fn lab_upgrade() {
    Lab::run(2, body);
}

async fn body(lab: &mut Lab) {
    let cp = Cp::start(lab).await;
    let lab = &*lab;
    let n1 = &lab.nodes[0];
    tenant(&cp, "t1", "a", "10.30.0.0/24").await;
    let a1 = pod(&cp, lab, 0, "t1", "a1", Some("a")).await;
    let a2 = pod(&cp, lab, 0, "t1", "a2", Some("a")).await;
    let a3 = pod(&cp, lab, 1, "t1", "a3", Some("a")).await;
    let (ia2, ia3) = (vpc_ip(&cp, &a2).await, vpc_ip(&cp, &a3).await);
    let vni = vni(&cp, "t1", "a").await;
    wait("n1 learns a3", || n1.remote(vni, ia3).is_some());
    assert!(a1.ns.ping(ia2, 3, 3), "a1 -> a2, same node");
    assert!(a1.ns.ping(ia3, 3, 3), "a1 (n1) -> a3 (n2)");

    let pins = n1.scratch.pins();
    let before = ids(&pins);
    n1.stop_agent();
    // The previous version's sdn_remotes: 8 bytes more per value.
    let mut old = Object::Pod
        .pinned_maps()
        .into_iter()
        .find(|m| m.name == maps::remotes::NAME)
        .expect("sdn_remotes definition");
    let wanted_value = old.value_size;
    old.value_size += 8;
    let pin = pins.join(maps::remotes::NAME);
    std::fs::remove_file(&pin).unwrap();
    let old = MapData::create(old.definition(), maps::remotes::NAME, None).expect("create the old layout");
    old.pin(&pin).expect("pin the old layout");
    drop(old);
    let old_id = MapInfo::from_pin(&pin).unwrap().id();

    // A same-node stream (reads the pod maps, never sdn_remotes) across the upgrade.
    let flow = a1
        .ns
        .command(&[
            "ping",
            "-n",
            "-q",
            "-c",
            "100",
            "-i",
            "0.02",
            "-W",
            "1",
            &ia2.to_string(),
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    n1.start_agent(&cp.kube_kubeconfig(), &cp.server.kubeconfig);
    let out = flow.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let got = received(&text);
    eprintln!("same-node stream across the upgrade: {got} of 100 replies");
    assert!(got >= 97, "at most a handful lost on an unaffected path: {text}");

    // Only the changed map was made anew, with the new layout.
    let info = MapInfo::from_pin(&pin).unwrap();
    assert_eq!(info.value_size(), wanted_value, "sdn_remotes has the new layout");
    assert_ne!(info.id(), old_id, "the old-layout map was retired");
    let after = ids(&pins);
    for (name, id) in &before {
        if *name != maps::remotes::NAME {
            assert_eq!(after[name], *id, "{name} kept (same kernel map)");
        }
    }
    assert!(
        n1.log_text().contains("rebuilding it from its sources"),
        "the agent says which map it rebuilt:\n{}",
        n1.log_text()
    );
    // Refilled from the API: the cross-node path works again.
    wait("n1 relearns a3 into the new map", || {
        n1.remote(vni, ia3).is_some()
    });
    assert!(a1.ns.ping(ia3, 3, 3), "a1 (n1) -> a3 (n2) after the upgrade");
    eprintln!("PASS an agent upgrade rebuilds only the map whose layout changed");
}
