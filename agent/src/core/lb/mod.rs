//! The load balancer's maps (`bpf/lib/lb.h`) as one writer that several features feed:
//! ServiceVIPs inside VPCs and the cluster's Kubernetes Services on the default network
//! both become frontends `sdn_lb_svc[{net, vip, proto, port}]` with backends in
//! `sdn_lb_backends` and a Maglev table in `sdn_lb_maglev` ([`maglev`]).
//!
//! Each feature is an [`Owner`] and hands over the whole set it wants ([`Lb::sync`]); the
//! writer keeps one id space for all of them. The owner is written into the frontend's
//! `flags` (its low byte; the datapath ignores it), so a restarted agent knows whose each
//! pinned frontend is and an owner prunes only its own: one owner's first full list never
//! removes another's frontends that it has not re-listed yet (fail static across restarts).
//!
//! Ids are this node's own: a backend `{net, address, port}` keeps its id while any table
//! names it, a frontend keeps its id for life; both are adopted from the pins at start, so
//! a restarted agent rewrites nothing that did not change. Order of writes: new backends
//! first, then each changed table, then its frontend; a removed frontend goes before its
//! table, an unused backend last. A packet therefore never meets an id that leads nowhere.
//! Flows already pinned by the datapath keep their backend whatever the tables become.

pub mod maglev;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use cozyplane_bpf::abi::{LB_SLOTS, LbSvc};
use cozyplane_bpf::maps::lb_backends::LbBackendsMap;
use cozyplane_bpf::maps::lb_maglev::LbMaglevMap;
pub use cozyplane_bpf::maps::lb_svc::Frontend;
use cozyplane_bpf::maps::lb_svc::LbSvcMap;

/// A backend as the datapath sees it: `(net, address, target port)`.
pub type Backend = (u32, IpAddr, u16);

/// The low byte of `sdn_lb_svc.flags`: the owner of the frontend.
const OWNER_MASK: u32 = 0xff;

/// Who wants a frontend. The value is what is written into the map; a pin of an agent
/// older than owners holds 0, which were ServiceVIPs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Owner {
    /// VPC ServiceVIPs (`features/services`).
    ServiceVip = 0,
    /// Kubernetes Services on the default network (`features/kubeproxy`).
    KubeService = 1,
}

impl Owner {
    fn of_flags(flags: u32) -> Option<Self> {
        match flags & OWNER_MASK {
            0 => Some(Self::ServiceVip),
            1 => Some(Self::KubeService),
            _ => None,
        }
    }
}

/// What one frontend should be.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Want {
    /// Distinct, sorted.
    pub backends: Vec<Backend>,
    /// ClientIP affinity timeout in seconds; 0 for none.
    pub affinity: u32,
}

/// The identity Maglev hashes a backend by: address and port (the net is the frontend's).
fn identity(b: &Backend) -> Vec<u8> {
    let mut v = match b.1 {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    };
    v.extend_from_slice(&b.2.to_be_bytes());
    v
}

/// One programmed frontend.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Held {
    id: u32,
    owner: Option<Owner>,
    want: Want,
}

/// What this node has written, with the ids it gave out.
#[derive(Debug, Default)]
struct Applied {
    fronts: HashMap<Frontend, Held>,
    backends: HashMap<Backend, u32>,
    front_ids: HashSet<u32>,
    backend_ids: HashSet<u32>,
    /// How many programmed tables name each backend.
    refs: HashMap<Backend, u32>,
    /// Backends whose count fell to 0 (removed by the next collection).
    unreferenced: HashSet<Backend>,
    next_front: u32,
    next_backend: u32,
}

impl Applied {
    /// Adopt what is pinned: the frontends (with their backends read back from the tables
    /// and their owners from the flags) and the backend ids.
    fn from_pins(pin_dir: &Path) -> Self {
        let mut a = Self::default();
        let (Ok(svc), Ok(tables), Ok(bes)) = (
            LbSvcMap::from_pin(pin_dir),
            LbMaglevMap::from_pin(pin_dir),
            LbBackendsMap::from_pin(pin_dir),
        ) else {
            return a;
        };
        let mut by_id = HashMap::new();
        for id in bes.ids().unwrap_or_default() {
            if let Ok(Some(b)) = bes.get(id) {
                a.backends.insert(b, id);
                a.backend_ids.insert(id);
                by_id.insert(id, b);
                a.next_backend = a.next_backend.max(id);
            }
        }
        for f in svc.frontends().unwrap_or_default() {
            let Ok(Some(v)) = svc.get(f) else { continue };
            let mut set: BTreeSet<Backend> = BTreeSet::new();
            if let Ok(Some(t)) = tables.get(v.id) {
                set.extend(t.iter().filter_map(|id| by_id.get(id).copied()));
            }
            a.next_front = a.next_front.max(v.id);
            let want = Want {
                backends: set.into_iter().collect(),
                affinity: v.affinity,
            };
            let owner = Owner::of_flags(v.flags);
            a.front_ids.insert(v.id);
            a.reference(&want.backends, 1);
            a.fronts.insert(
                f,
                Held {
                    id: v.id,
                    owner,
                    want,
                },
            );
        }
        // A pinned backend no table names (an agent stopped between the two writes).
        for b in a.backends.keys() {
            if !a.refs.contains_key(b) {
                a.unreferenced.insert(*b);
            }
        }
        a
    }
}

/// Id 0 means "no backend" in a table slot, so ids start at 1.
fn next_id(counter: &mut u32, taken: impl Fn(u32) -> bool) -> u32 {
    loop {
        *counter = counter.wrapping_add(1);
        if *counter != 0 && !taken(*counter) {
            return *counter;
        }
    }
}

/// The writer of the load balancer's maps under one pin directory; cheap to clone.
#[derive(Clone, Debug)]
pub struct Lb {
    pin_dir: PathBuf,
    applied: Arc<Mutex<Applied>>,
}

/// What one [`Lb::sync`] did, for the caller's log and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Synced {
    /// Frontends written (new or changed).
    pub written: usize,
    /// Frontends removed.
    pub removed: usize,
    /// Frontends held by this owner after the call.
    pub held: usize,
}

impl Lb {
    /// The writer over the maps pinned under `pin_dir`, adopting what they hold.
    pub fn new(pin_dir: &Path) -> Self {
        let applied = Applied::from_pins(pin_dir);
        tracing::info!(
            adopted_frontends = applied.fronts.len(),
            adopted_backends = applied.backends.len(),
            "load balancer maps adopted"
        );
        Self {
            pin_dir: pin_dir.to_path_buf(),
            applied: Arc::new(Mutex::new(applied)),
        }
    }

    /// How many pinned frontends `owner` holds now.
    pub fn held(&self, owner: Owner) -> usize {
        self.applied
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .held(owner)
    }

    /// Make `owner`'s frontends `want`: write what is new or changed; when `complete` (the
    /// owner's watches have listed everything), also remove the owner's frontends that are
    /// not wanted. A frontend another owner holds is left to it (and logged).
    pub fn sync(&self, owner: Owner, want: &BTreeMap<Frontend, Want>, complete: bool) -> Synced {
        self.with(owner, |a, m, done| {
            for (f, w) in want {
                done.written += usize::from(a.write(m, owner, *f, w));
            }
            if complete {
                let gone: Vec<Frontend> = a
                    .fronts
                    .iter()
                    .filter(|(f, h)| h.owner == Some(owner) && !want.contains_key(f))
                    .map(|(f, _)| *f)
                    .collect();
                for f in gone {
                    done.removed += usize::from(a.remove(m, f));
                }
            }
        })
    }

    /// Change some of `owner`'s frontends: `Some` writes (if changed), `None` removes. The
    /// incremental step after [`Lb::sync`]: its cost is that of the frontends named.
    pub fn update(&self, owner: Owner, changes: &[(Frontend, Option<Want>)]) -> Synced {
        self.with(owner, |a, m, done| {
            for (f, w) in changes {
                match w {
                    Some(w) => done.written += usize::from(a.write(m, owner, *f, w)),
                    None if a.fronts.get(f).is_some_and(|h| h.owner == Some(owner)) => {
                        done.removed += usize::from(a.remove(m, *f));
                    }
                    None => {}
                }
            }
        })
    }

    /// `step` on the state and the opened maps, then the backends no table names removed.
    fn with(&self, owner: Owner, step: impl FnOnce(&mut Applied, &mut Maps, &mut Synced)) -> Synced {
        let mut a = self
            .applied
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(mut m) = Maps::open(&self.pin_dir) else {
            return Synced::default();
        };
        let mut done = Synced::default();
        step(&mut a, &mut m, &mut done);
        a.collect_backends(&mut m);
        done.held = a.held(owner);
        done
    }
}

/// The three maps the writer writes, opened from their pins.
struct Maps {
    svc: LbSvcMap<aya::maps::MapData>,
    tables: LbMaglevMap<aya::maps::MapData>,
    bes: LbBackendsMap<aya::maps::MapData>,
}

impl Maps {
    fn open(pin_dir: &Path) -> Option<Self> {
        match (
            LbSvcMap::from_pin(pin_dir),
            LbMaglevMap::from_pin(pin_dir),
            LbBackendsMap::from_pin(pin_dir),
        ) {
            (Ok(svc), Ok(tables), Ok(bes)) => Some(Self { svc, tables, bes }),
            _ => {
                tracing::warn!(
                    "the load balancer's maps are not pinned under {}",
                    pin_dir.display()
                );
                None
            }
        }
    }
}

impl Applied {
    fn held(&self, owner: Owner) -> usize {
        self.fronts.values().filter(|h| h.owner == Some(owner)).count()
    }

    fn reference(&mut self, backends: &[Backend], by: i32) {
        for b in backends {
            let n = self.refs.entry(*b).or_insert(0);
            *n = n.saturating_add_signed(by);
            if *n == 0 {
                self.unreferenced.insert(*b);
            } else {
                self.unreferenced.remove(b);
            }
        }
    }

    /// Write one frontend of `owner` (new backends first, then its table, then the
    /// frontend). False when nothing changed or it is another owner's.
    fn write(&mut self, m: &mut Maps, owner: Owner, f: Frontend, w: &Want) -> bool {
        if let Some(h) = self.fronts.get(&f) {
            if h.owner != Some(owner) {
                tracing::warn!(frontend = ?f, ?owner, held_by = ?h.owner,
                    "frontend wanted by two owners: left to the one holding it");
                return false;
            }
            if &h.want == w {
                return false;
            }
        }
        for b in &w.backends {
            if self.backends.contains_key(b) {
                continue;
            }
            let id = next_id(&mut self.next_backend, |i| self.backend_ids.contains(&i));
            match m.bes.upsert(id, b.0, b.1, b.2) {
                Ok(()) => {
                    self.backends.insert(*b, id);
                    self.backend_ids.insert(id);
                    // Unreferenced until a table names it: collected if none ever does.
                    self.refs.entry(*b).or_insert(0);
                    self.unreferenced.insert(*b);
                }
                Err(e) => tracing::warn!(backend = ?b, "sdn_lb_backends upsert: {e}"),
            }
        }
        let id = match self.fronts.get(&f) {
            Some(h) => h.id,
            None => next_id(&mut self.next_front, |i| self.front_ids.contains(&i)),
        };
        // A backend whose id could not be written is left out of the table.
        let ready: Vec<(Backend, u32)> = w
            .backends
            .iter()
            .filter_map(|b| self.backends.get(b).map(|id| (*b, *id)))
            .collect();
        let names: Vec<Vec<u8>> = ready.iter().map(|(b, _)| identity(b)).collect();
        let slots: Vec<u32> = if ready.is_empty() {
            vec![0; LB_SLOTS]
        } else {
            maglev::table(&names, LB_SLOTS)
                .into_iter()
                .map(|i| ready[i].1)
                .collect()
        };
        let value = LbSvc {
            id,
            count: ready.len() as u32,
            affinity: w.affinity,
            flags: owner as u32,
        };
        if let Err(e) = m.tables.set(id, &slots).and_then(|()| m.svc.upsert(f, value)) {
            tracing::warn!(frontend = ?f, "sdn_lb_svc/sdn_lb_maglev write: {e}");
            return false;
        }
        let have = Want {
            backends: ready.iter().map(|(b, _)| *b).collect(),
            affinity: w.affinity,
        };
        self.reference(&have.backends, 1);
        let old = self.fronts.insert(
            f,
            Held {
                id,
                owner: Some(owner),
                want: have,
            },
        );
        if let Some(old) = old {
            self.reference(&old.want.backends, -1);
        }
        self.front_ids.insert(id);
        true
    }

    /// Remove one frontend: the frontend, then its table.
    fn remove(&mut self, m: &mut Maps, f: Frontend) -> bool {
        let Some(id) = self.fronts.get(&f).map(|h| h.id) else {
            return false;
        };
        if m.svc.remove(f).is_err() || m.tables.remove(id).is_err() {
            return false;
        }
        if let Some(old) = self.fronts.remove(&f) {
            self.reference(&old.want.backends, -1);
        }
        self.front_ids.remove(&id);
        true
    }

    /// Remove the backends no table names any more.
    fn collect_backends(&mut self, m: &mut Maps) {
        for b in std::mem::take(&mut self.unreferenced) {
            let Some(&id) = self.backends.get(&b) else {
                self.refs.remove(&b);
                continue;
            };
            if m.bes.remove(id).is_ok() {
                self.backends.remove(&b);
                self.backend_ids.remove(&id);
                self.refs.remove(&b);
            } else {
                self.unreferenced.insert(b);
            }
        }
    }
}
