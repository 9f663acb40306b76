//! Label-set identities: pods of one namespace with the same labels (minus the ones every
//! replica has its own value of) and the same named ports share one identity, so a
//! Deployment's churn costs nothing and rules grow with label sets, not pods.
//!
//! Ids are a hash of the identity's key, so every node (and a full recompile) derives the
//! same id for the same label set; a collision is resolved by probing, which only the
//! (astronomically rare) colliding set notices as a different id.

use std::collections::BTreeMap;

use crate::selector::Labels;

/// Label keys that differ between replicas of one workload and never select.
pub const IGNORED_LABELS: &[&str] = &[
    "pod-template-hash",
    "controller-revision-hash",
    "statefulset.kubernetes.io/pod-name",
    "apps.kubernetes.io/pod-index",
    "controller-uid",
    "job-name",
    "batch.kubernetes.io/controller-uid",
    "batch.kubernetes.io/job-name",
    "batch.kubernetes.io/job-completion-index",
];

/// A container port with a name: `(name, protocol, port)`.
pub type NamedPort = (String, u8, u16);

/// What pods sharing an identity share.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IdentityKey {
    /// Namespace.
    pub ns: String,
    /// Labels without [`IGNORED_LABELS`].
    pub labels: Labels,
    /// Named container ports, sorted.
    pub named_ports: Vec<NamedPort>,
}

impl IdentityKey {
    /// The key of a pod.
    pub fn new(ns: &str, labels: &Labels, mut named_ports: Vec<NamedPort>) -> Self {
        named_ports.sort();
        named_ports.dedup();
        Self {
            ns: ns.to_string(),
            labels: labels
                .iter()
                .filter(|(k, _)| !IGNORED_LABELS.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            named_ports,
        }
    }

    /// The port a name resolves to for `proto`, if the pods have it.
    pub fn resolve(&self, name: &str, proto: u8) -> Option<u16> {
        self.named_ports
            .iter()
            .find(|(n, p, _)| n == name && *p == proto)
            .map(|(_, _, port)| *port)
    }
}

/// Stable 64-bit FNV-1a, the id hash (std's hasher is not stable across releases).
pub fn fnv(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.iter().chain(&[0xff]) {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// First id handed out; below are reserved (0 is `SDN_PEER_ANY`).
pub const FIRST_ID: u32 = 16;
/// Ids stay below `SDN_PEER_ISOLATED` and never set `SDN_PEER_CLASS`.
const ID_SPACE: u32 = 0x7fff_fff0 - FIRST_ID;

/// Pick the id for `seed` in `taken`, probing past collisions.
pub fn allocate(seed: u64, taken: &impl Fn(u32) -> bool) -> u32 {
    let mut id = FIRST_ID + ((seed ^ (seed >> 32)) as u32) % ID_SPACE;
    while taken(id) {
        id = FIRST_ID + (id - FIRST_ID + 1) % ID_SPACE;
    }
    id
}

/// The identities in use, with how many pods hold each.
#[derive(Clone, Debug, Default)]
pub struct Identities {
    by_key: BTreeMap<IdentityKey, u32>,
    /// id → (key, pods holding it).
    pub by_id: BTreeMap<u32, (IdentityKey, usize)>,
}

impl Identities {
    /// Take a reference on `key`'s identity; `true` when it was created.
    pub fn acquire(&mut self, key: &IdentityKey) -> (u32, bool) {
        if let Some(id) = self.by_key.get(key) {
            self.by_id.get_mut(id).expect("indexes agree").1 += 1;
            return (*id, false);
        }
        let labels: Vec<u8> = key
            .labels
            .iter()
            .flat_map(|(k, v)| [k.as_bytes(), b"=", v.as_bytes(), b","].concat())
            .collect();
        let ports: Vec<u8> = key
            .named_ports
            .iter()
            .flat_map(|(n, p, port)| [n.as_bytes(), &[*p], &port.to_be_bytes()].concat())
            .collect();
        let seed = fnv(&[key.ns.as_bytes(), &labels, &ports]);
        let id = allocate(seed, &|id| self.by_id.contains_key(&id));
        self.by_key.insert(key.clone(), id);
        self.by_id.insert(id, (key.clone(), 1));
        (id, true)
    }

    /// Drop a reference; `true` when the identity is gone.
    pub fn release(&mut self, id: u32) -> bool {
        let Some((key, n)) = self.by_id.get_mut(&id) else {
            return false;
        };
        *n -= 1;
        if *n > 0 {
            return false;
        }
        let key = key.clone();
        self.by_id.remove(&id);
        self.by_key.remove(&key);
        true
    }

    /// The key of `id`.
    pub fn key(&self, id: u32) -> Option<&IdentityKey> {
        self.by_id.get(&id).map(|(k, _)| k)
    }
}
