//! Map-layout upgrades: a pinned map whose kernel definition differs from what the embedded
//! objects declare is retired before loading, so the new programs never run against it.
//!
//! aya reuses a pin by name without comparing definitions. When a new agent version changes
//! one map (a wider value, a new key field, a different capacity), loading would either fail
//! in the verifier or, worse, succeed and read the old layout. Instead the loader unlinks that
//! one pin; aya then creates the map afresh and the agent's ordinary start-up refills it from
//! its sources of truth: the pod maps from the IPAM records and the pod veths
//! (`cni_server/reconcile.rs`), the node and remote maps from the API watches (`watch.rs`,
//! which start from what is pinned and write what differs, i.e. everything for an empty
//! map), the cross-net maps from the peering watch. Flow state (conntrack, DNAT) and counters
//! of a retired map start empty; the flows re-establish. Every other map keeps its pin, its
//! entries and its id, and the programs still attached keep using the retired map until the
//! loader swaps them, so traffic on unaffected paths keeps flowing.

use std::collections::BTreeMap;
use std::path::Path;

use aya::maps::MapInfo;
use cozyplane_bpf::{MapLayout, Object};

/// One pin that did not match: what was pinned and what the objects want.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Retired {
    /// Map (and pin) name.
    pub name: String,
    /// The pinned map's definition, or `None` when the pin could not be read as a map.
    pub pinned: Option<MapLayout>,
    /// The definition of the objects being loaded.
    pub wanted: MapLayout,
}

/// Unlinks every pin under `pin_dir` whose map differs from the embedded objects'
/// definition and returns what was retired. Absent pins are not an upgrade (a first start).
pub fn retire_incompatible_pins(pin_dir: &Path) -> std::io::Result<Vec<Retired>> {
    let wanted: BTreeMap<String, MapLayout> = Object::ALL
        .iter()
        .flat_map(|o| o.pinned_maps())
        .map(|m| (m.name.clone(), m))
        .collect();
    let mut retired = Vec::new();
    for (name, want) in wanted {
        let pin = pin_dir.join(&name);
        if !pin.exists() {
            continue;
        }
        let pinned = pinned_layout(&pin, &name);
        if pinned.as_ref() == Some(&want) {
            continue;
        }
        std::fs::remove_file(&pin)?;
        retired.push(Retired {
            name,
            pinned,
            wanted: want,
        });
    }
    Ok(retired)
}

/// The kernel's view of the map pinned at `pin`.
fn pinned_layout(pin: &Path, name: &str) -> Option<MapLayout> {
    let info = MapInfo::from_pin(pin).ok()?;
    Some(MapLayout {
        name: name.to_string(),
        map_type: info.map_type().ok()? as u32,
        key_size: info.key_size(),
        value_size: info.value_size(),
        max_entries: info.max_entries(),
        flags: info.map_flags(),
    })
}
