//! The load balancer's maps (`bpf/lib/lb.h`) as one writer that several features feed:
//! ServiceVIPs inside VPCs and the cluster's Kubernetes Services on the default network
//! both become frontends `sdn_lb_svc[{net, vip, proto, port}]` with backends in
//! `sdn_lb_backends` and a Maglev table ([`maglev`]) in `sdn_lb_maglev`, or in
//! `sdn_lb_mag_big` for a frontend with many backends ([`Size`]).
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
//!
//! A frontend moving between the two table sizes gets its new table and then the frontend
//! naming it (`LbSvc::F_BIG`), and only then loses the old one; a table no frontend names in
//! its map (an agent stopped between those writes) is found at adoption and removed by the
//! next write.

pub mod maglev;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use aya::maps::MapError;
use cozyplane_bpf::abi::{LB_BIG_SLOTS, LB_SLOTS, LbSvc};
use cozyplane_bpf::maps::lb_backends::LbBackendsMap;
use cozyplane_bpf::maps::lb_mag_big::LbMagBigMap;
use cozyplane_bpf::maps::lb_maglev::LbMaglevMap;
pub use cozyplane_bpf::maps::lb_svc::Frontend;
use cozyplane_bpf::maps::lb_svc::LbSvcMap;

/// A backend as the datapath sees it: `(net, address, target port)`.
pub type Backend = (u32, IpAddr, u16);

/// The low byte of `sdn_lb_svc.flags`: the owner of the frontend.
const OWNER_MASK: u32 = 0xff;

/// A frontend with this many backends gets a big table ([`Size::Big`])...
///
/// Removing one of N backends moves 3–5 % of the others' slots in a small table for any N
/// from 16 to 100 (3.4 % at 16, 5.0 % at 40, 4.8 % at 63, 3.7 % at 99), and under 1 % in a
/// big one (0.62 % at 32, 0.79 % at 64, 0.86 % at 100; `maglev.rs`'s tests measure the big
/// side). No threshold keeps the small side at ~1 %, so this one is a memory budget: a big
/// table costs 120 KiB of kernel memory, 15 times a small one (8 KiB: its 4084 bytes and
/// the kernel's element header take the next allocation size up from 4 KiB), i.e. under
/// 2 KiB per backend from here on. Typical Services (a few to a few dozen pods) stay small;
/// issue 26's case, 100 backends, is big.
pub const BIG_FROM: usize = 64;

/// ...and keeps it until it has fewer than this. A change of size is a new table of another
/// modulus, which moves nearly every client's next flow (established flows stay pinned):
/// with half the threshold between the two, a Service scaling around it does not flap, and
/// a move back costs no more than the halving that causes it.
pub const BIG_UNTIL: usize = 32;

/// Which of the two maps holds a frontend's table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Size {
    /// `sdn_lb_maglev`, [`LB_SLOTS`] slots.
    Small,
    /// `sdn_lb_mag_big`, [`LB_BIG_SLOTS`] slots, flagged [`LbSvc::F_BIG`].
    Big,
}

impl Size {
    fn of_flags(flags: u32) -> Self {
        if flags & LbSvc::F_BIG != 0 {
            Self::Big
        } else {
            Self::Small
        }
    }

    /// The size for `n` backends of a frontend that has `now` (none if new).
    fn for_backends(n: usize, now: Option<Self>) -> Self {
        let from = if now == Some(Self::Big) {
            BIG_UNTIL
        } else {
            BIG_FROM
        };
        if n >= from { Self::Big } else { Self::Small }
    }

    fn slots(self) -> usize {
        match self {
            Self::Small => LB_SLOTS,
            Self::Big => LB_BIG_SLOTS,
        }
    }

    fn flag(self) -> u32 {
        match self {
            Self::Small => 0,
            Self::Big => LbSvc::F_BIG,
        }
    }

    fn other(self) -> Self {
        match self {
            Self::Small => Self::Big,
            Self::Big => Self::Small,
        }
    }
}

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
    /// Where its table is.
    size: Size,
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
    /// Tables no frontend names in their map, removed before the next write; their ids are
    /// not given out meanwhile.
    stale: BTreeSet<(Size, u32)>,
    /// Frontends that found `sdn_lb_mag_big` full in the current call (logged once).
    big_refused: usize,
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
        // Pins of an agent older than big tables lack the map; none of its frontends has one.
        let big = LbMagBigMap::from_pin(pin_dir).ok();
        let mut by_id = HashMap::new();
        for id in bes.ids().unwrap_or_default() {
            if let Ok(Some(b)) = bes.get(id) {
                a.backends.insert(b, id);
                a.backend_ids.insert(id);
                by_id.insert(id, b);
                a.next_backend = a.next_backend.max(id);
            }
        }
        // Every table a frontend names; the others are stale, if the frontends were all read.
        let mut named: BTreeSet<(Size, u32)> = BTreeSet::new();
        let (fronts, mut complete) = match svc.frontends() {
            Ok(v) => (v, true),
            Err(_) => (Vec::new(), false),
        };
        for f in fronts {
            let Ok(Some(v)) = svc.get(f) else {
                complete = false;
                continue;
            };
            let size = Size::of_flags(v.flags);
            named.insert((size, v.id));
            let t = match (size, &big) {
                (Size::Small, _) => tables.get(v.id),
                (Size::Big, Some(big)) => big.get(v.id),
                (Size::Big, None) => Ok(None),
            };
            let mut set: BTreeSet<Backend> = BTreeSet::new();
            if let Ok(Some(t)) = t {
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
                    size,
                },
            );
        }
        if complete {
            let small_ids = tables
                .ids()
                .map(|ids| ids.into_iter().map(|id| (Size::Small, id)));
            let big_ids = big
                .as_ref()
                .map_or(Ok(Vec::new()), LbMagBigMap::ids)
                .map(|ids| ids.into_iter().map(|id| (Size::Big, id)));
            if let (Ok(small_ids), Ok(big_ids)) = (small_ids, big_ids) {
                a.stale = small_ids.chain(big_ids).filter(|t| !named.contains(t)).collect();
            }
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
        // Before the step: a stale table's id may be given out again once it is gone.
        a.collect_tables(&mut m);
        a.big_refused = 0;
        step(&mut a, &mut m, &mut done);
        a.collect_backends(&mut m);
        if a.big_refused > 0 {
            tracing::warn!(
                frontends = a.big_refused,
                max = cozyplane_bpf::maps::lb_mag_big::MAX,
                "sdn_lb_mag_big refused new tables (full?): frontends with many backends got a \
                 small one (more of their clients move when a backend changes)"
            );
        }
        done.held = a.held(owner);
        done
    }
}

/// The four maps the writer writes, opened from their pins.
struct Maps {
    svc: LbSvcMap<aya::maps::MapData>,
    tables: LbMaglevMap<aya::maps::MapData>,
    big: LbMagBigMap<aya::maps::MapData>,
    bes: LbBackendsMap<aya::maps::MapData>,
}

impl Maps {
    fn open(pin_dir: &Path) -> Option<Self> {
        match (
            LbSvcMap::from_pin(pin_dir),
            LbMaglevMap::from_pin(pin_dir),
            LbMagBigMap::from_pin(pin_dir),
            LbBackendsMap::from_pin(pin_dir),
        ) {
            (Ok(svc), Ok(tables), Ok(big), Ok(bes)) => Some(Self {
                svc,
                tables,
                big,
                bes,
            }),
            _ => {
                tracing::warn!(
                    "the load balancer's maps are not pinned under {}",
                    pin_dir.display()
                );
                None
            }
        }
    }

    /// Write the table of frontend `id` in the map of `size`.
    fn set_table(&mut self, size: Size, id: u32, slots: &[u32]) -> Result<(), MapError> {
        match size {
            Size::Small => self.tables.set(id, slots),
            Size::Big => self.big.set(id, slots),
        }
    }

    /// Remove the table of `id` from the map of `size`; absent is not an error.
    fn remove_table(&mut self, size: Size, id: u32) -> Result<(), MapError> {
        match size {
            Size::Small => self.tables.remove(id),
            Size::Big => self.big.remove(id),
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
        let held = self.fronts.get(&f).map(|h| h.size);
        let id = match self.fronts.get(&f) {
            Some(h) => h.id,
            None => next_id(&mut self.next_front, |i| {
                self.front_ids.contains(&i) || self.stale.iter().any(|(_, s)| *s == i)
            }),
        };
        // A backend whose id could not be written is left out of the table.
        let ready: Vec<(Backend, u32)> = w
            .backends
            .iter()
            .filter_map(|b| self.backends.get(b).map(|id| (*b, *id)))
            .collect();
        let names: Vec<Vec<u8>> = ready.iter().map(|(b, _)| identity(b)).collect();
        let slots = |size: Size| -> Vec<u32> {
            if ready.is_empty() {
                vec![0; size.slots()]
            } else {
                maglev::table(&names, size.slots())
                    .into_iter()
                    .map(|i| ready[i].1)
                    .collect()
            }
        };
        let mut size = Size::for_backends(ready.len(), held);
        let mut table = m.set_table(size, id, &slots(size));
        if let Err(e) = &table
            && size == Size::Big
            && held != Some(Size::Big)
        {
            // The big map is full (its bound is what caps the kernel memory of big tables):
            // a small table serves, with more disruption when a backend changes. Tried again
            // at the frontend's next change.
            tracing::debug!(frontend = ?f, "sdn_lb_mag_big write: {e}");
            self.big_refused += 1;
            // The chunks written before the map filled up: no frontend names them.
            if m.remove_table(Size::Big, id).is_err() {
                self.stale.insert((Size::Big, id));
            }
            size = Size::Small;
            table = m.set_table(size, id, &slots(size));
        }
        // Named by the frontend from the update below: no longer stale, if it was.
        self.stale.remove(&(size, id));
        let value = LbSvc {
            id,
            count: ready.len() as u32,
            affinity: w.affinity,
            flags: owner as u32 | size.flag(),
        };
        if let Err(e) = table.and_then(|()| m.svc.upsert(f, value)) {
            tracing::warn!(frontend = ?f, ?size, "sdn_lb_svc/table write: {e}");
            if held != Some(size) {
                // Written, perhaps, where the frontend does not look.
                self.stale.insert((size, id));
            } else {
                // The frontend's own table may name the new backends now (a big one is
                // written chunk by chunk): they stay, as the frontend's, until its next
                // write, which the differing set forces.
                self.hold_too(f, &ready);
            }
            return false;
        }
        // The frontend names its new map: the table in the other one is unused.
        if let Some(old) = held.filter(|old| *old != size)
            && let Err(e) = m.remove_table(old, id)
        {
            tracing::warn!(frontend = ?f, size = ?old, "old table removal: {e}");
            self.stale.insert((old, id));
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
                size,
            },
        );
        if let Some(old) = old {
            self.reference(&old.want.backends, -1);
        }
        self.front_ids.insert(id);
        true
    }

    /// Count `extra` backends among those of the held frontend `f`.
    fn hold_too(&mut self, f: Frontend, extra: &[(Backend, u32)]) {
        let Some(h) = self.fronts.get_mut(&f) else {
            return;
        };
        let new: Vec<Backend> = extra
            .iter()
            .map(|(b, _)| *b)
            .filter(|b| !h.want.backends.contains(b))
            .collect();
        h.want.backends.extend(&new);
        h.want.backends.sort_unstable();
        self.reference(&new, 1);
    }

    /// Remove one frontend: the frontend, then its table, and any copy in the other map.
    fn remove(&mut self, m: &mut Maps, f: Frontend) -> bool {
        let Some((id, size)) = self.fronts.get(&f).map(|h| (h.id, h.size)) else {
            return false;
        };
        if m.svc.remove(f).is_err() || m.remove_table(size, id).is_err() {
            return false;
        }
        if m.remove_table(size.other(), id).is_err() {
            self.stale.insert((size.other(), id));
        }
        if let Some(old) = self.fronts.remove(&f) {
            self.reference(&old.want.backends, -1);
        }
        self.front_ids.remove(&id);
        true
    }

    /// Remove the tables no frontend names in their map; those that fail stay for the next
    /// call.
    fn collect_tables(&mut self, m: &mut Maps) {
        self.stale
            .retain(|(size, id)| m.remove_table(*size, *id).is_err());
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

#[cfg(test)]
mod tests {
    use super::*;

    // Issue 26's case is big, and stays big when one of its backends goes; a frontend between
    // the thresholds keeps the size it has, so scaling around one never flaps.
    #[test]
    fn big_tables_from_64_backends_until_fewer_than_32() {
        assert_eq!(Size::for_backends(100, None), Size::Big);
        assert_eq!(Size::for_backends(99, Some(Size::Big)), Size::Big);
        assert_eq!(Size::for_backends(BIG_FROM - 1, None), Size::Small);
        assert_eq!(Size::for_backends(BIG_FROM - 1, Some(Size::Small)), Size::Small);
        assert_eq!(Size::for_backends(BIG_FROM, Some(Size::Small)), Size::Big);
        assert_eq!(Size::for_backends(BIG_UNTIL, Some(Size::Big)), Size::Big);
        assert_eq!(Size::for_backends(BIG_UNTIL - 1, Some(Size::Big)), Size::Small);
        assert_eq!(Size::for_backends(0, Some(Size::Big)), Size::Small);
    }

    #[test]
    fn the_size_round_trips_through_the_flags_without_touching_the_owner() {
        for size in [Size::Small, Size::Big] {
            for owner in [Owner::ServiceVip, Owner::KubeService] {
                let flags = owner as u32 | size.flag();
                assert_eq!(Size::of_flags(flags), size);
                assert_eq!(Owner::of_flags(flags), Some(owner));
            }
        }
    }
}
