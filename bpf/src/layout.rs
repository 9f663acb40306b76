//! The definitions of the pinned maps as the embedded objects declare them.
//!
//! aya opens a map pinned by name without comparing it with the object's definition, so an
//! agent whose map changed (a wider value, a new key field, more entries) would load its
//! programs against the old map pinned by the previous version. The agent compares each pin
//! with [`MapLayout`] before loading (`agent/src/datapath/upgrade.rs`) and rebuilds only the
//! maps that differ.

use aya_obj::maps::PinningType;

use crate::Object;

/// What a map is, as far as the kernel can tell two maps apart: a pin whose kernel map
/// differs in any of these cannot serve programs built for this definition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapLayout {
    /// The C identifier, which is also the pin name.
    pub name: String,
    /// `BPF_MAP_TYPE_*`.
    pub map_type: u32,
    /// Key size in bytes.
    pub key_size: u32,
    /// Value size in bytes.
    pub value_size: u32,
    /// Capacity.
    pub max_entries: u32,
    /// `BPF_F_*` creation flags.
    pub flags: u32,
}

impl MapLayout {
    /// A definition with exactly this layout and nothing else (no BTF, no pinning), for
    /// tools and tests that create a map the way a loader of this layout would: e.g. one
    /// shaped like an older version's.
    pub fn definition(&self) -> aya_obj::Map {
        aya_obj::Map::Legacy(aya_obj::maps::LegacyMap {
            def: aya_obj::maps::bpf_map_def {
                map_type: self.map_type,
                key_size: self.key_size,
                value_size: self.value_size,
                max_entries: self.max_entries,
                map_flags: self.flags,
                ..Default::default()
            },
            inner_def: None,
            section_index: 0,
            section_kind: aya_obj::EbpfSectionKind::Maps,
            symbol_index: None,
            data: Vec::new(),
        })
    }

    fn of(name: &str, m: &aya_obj::Map) -> Self {
        Self {
            name: name.to_string(),
            map_type: m.map_type(),
            key_size: m.key_size(),
            value_size: m.value_size(),
            max_entries: m.max_entries(),
            flags: m.map_flags(),
        }
    }
}

impl Object {
    /// The maps of this object pinned by name (every map of `include/sdn/maps.h`; not the
    /// config sections), sorted by name.
    pub fn pinned_maps(self) -> Vec<MapLayout> {
        let mut out: Vec<MapLayout> = self
            .parse()
            .maps
            .iter()
            .filter(|(_, m)| m.pinning() == PinningType::ByName)
            .map(|(name, m)| MapLayout::of(name, m))
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    fn parse(self) -> aya_obj::Object {
        // The objects are embedded and checked by this crate's tests: a parse failure is a
        // build defect, not an input error.
        aya_obj::Object::parse(self.bytes()).expect("embedded object parses")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_map_is_pinned_and_declared_alike_in_every_object() {
        let pod = Object::Pod.pinned_maps();
        let overlay = Object::Overlay.pinned_maps();
        let names: Vec<&str> = pod.iter().map(|m| m.name.as_str()).collect();
        let mut all = crate::maps::ALL.to_vec();
        all.sort_unstable();
        assert_eq!(names, all, "the pod object pins every map of maps::ALL");
        assert_eq!(pod, overlay, "both objects share one definition per map");
        assert_eq!(pod, Object::Uplink.pinned_maps(), "the uplink object too");
        assert_eq!(pod, Object::Sock.pinned_maps(), "the socket hooks' object too");
        assert!(
            pod.iter()
                .all(|m| m.key_size > 0 && m.value_size > 0 && m.max_entries > 0)
        );
    }

    #[test]
    fn a_definition_has_the_layout() {
        for m in Object::Pod.pinned_maps() {
            let d = m.definition();
            assert_eq!(
                MapLayout::of(&m.name, &d),
                m,
                "{} round-trips through its definition",
                m.name
            );
        }
    }
}
