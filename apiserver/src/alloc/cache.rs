//! The claim cache: what the allocators know without asking storage.
//!
//! One per store (every [`Store`](crate::registry::Store) on one storage shares it). Two
//! list-then-watch loops keep it current: one over the claim keys (every pool's taken set, and
//! each VNI claim's holder and revision), one over the VPCs (what a Port create needs to know
//! about its VPC). The create and delete transactions of this process are applied at once as
//! well ([`ClaimCache::committed`]), so this process reads its own writes without waiting for
//! the watch; a watched change older than such a write does not undo it.
//!
//! Nothing here is an authority. The create transaction still proves every claim (`Absent`)
//! and the VPC and VNI claim it relied on (`ModRevision` guards), so a stale cache costs a
//! retry, never a double allocation; and an empty-looking pool is re-read from storage before
//! the create fails with 507.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, RwLock, Weak};
use std::time::Duration;

use bytes::Bytes;
use cozyplane_apis::ApiKind;
use cozyplane_apis::net::IpFamily;
use cozyplane_apis::net::claim::unescape_ip;
use cozyplane_apis::v1alpha1::VPC;
use cozyplane_storage::{Event, KeyValue, ListOptions, Op, Revision, Storage, WatchOptions};
use futures::StreamExt;
use tokio::sync::watch;

use super::intervals::IntervalSet;
use super::pool::{self, SharedPool};
use super::{CLAIMS, addr, storage_error};
use crate::errors::{ApiError, Result};

/// How long a create waits for the first listing of the claims (a stalled disk under a loaded
/// etcd can take seconds; a create the store would have served must not fail for it).
const READY_WAIT: Duration = Duration::from_secs(30);
/// How often an idle watch reports progress (and so notices a dropped cache).
const PROGRESS: Duration = Duration::from_secs(1);
/// Pause before a failed list-and-watch starts over.
const RESTART: Duration = Duration::from_millis(200);

/// The name of the VNI pool.
pub const VNI_POOL: &str = "vni";

/// The name of the address pool of VNI `vni` and `family`.
pub fn ip_pool(vni: u32, family: IpFamily) -> String {
    format!("ip/{vni}/{family}")
}

/// The name of the group-id pool of VPC `ns/vpc`.
pub fn sgid_pool(ns: &str, vpc: &str) -> String {
    format!("sgid/{ns}/{vpc}")
}

/// The pool and value a claim key stands for (`None` for MACs and foreign keys).
pub fn pool_of(key: &str) -> Option<(String, u128)> {
    let rest = key.strip_prefix(CLAIMS)?;
    if let Some(v) = rest.strip_prefix("vni/") {
        return Some((VNI_POOL.into(), v.parse().ok()?));
    }
    if let Some(v) = rest.strip_prefix("ip/") {
        let (vni, ip) = v.split_once('/')?;
        let ip: IpAddr = unescape_ip(ip)?;
        return Some((ip_pool(vni.parse().ok()?, IpFamily::of(ip)), addr::to_int(ip)));
    }
    if let Some(v) = rest.strip_prefix("sgid/") {
        let (group, id) = v.rsplit_once('/')?;
        let (ns, vpc) = group.split_once('/')?;
        return Some((sgid_pool(ns, vpc), id.parse().ok()?));
    }
    None
}

fn vni_of(key: &str) -> Option<u32> {
    key.strip_prefix(CLAIMS)?.strip_prefix("vni/")?.parse().ok()
}

/// A VPC as the cache holds it, with the revision it was read at.
#[derive(Clone, Debug)]
pub struct CachedVpc {
    /// The object.
    pub vpc: Arc<VPC>,
    /// Its `mod_revision`.
    pub revision: Revision,
}

#[derive(Default)]
struct Vpcs {
    objects: HashMap<String, CachedVpc>,
    /// Every change up to here has been applied.
    applied: Revision,
}

/// The cache of one store; see the [module docs](self).
pub struct ClaimCache {
    storage: Weak<dyn Storage>,
    started: AtomicBool,
    pools: RwLock<HashMap<String, SharedPool>>,
    /// VNI → (holder, revision) of its claim.
    vnis: Mutex<HashMap<u32, (Bytes, Revision)>>,
    /// Every claim change up to here has been applied (moved under the lock of the pool the
    /// change was applied to, so a pool never looks older than this revision says).
    claims_applied: AtomicU64,
    claims_ready: watch::Sender<bool>,
    vpcs: Mutex<Vpcs>,
    vpcs_ready: AtomicBool,
}

type Registry = Vec<(Weak<dyn Storage>, Weak<ClaimCache>)>;
static CACHES: LazyLock<Mutex<Registry>> = LazyLock::new(Default::default);

fn guard<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl ClaimCache {
    /// The cache of `storage`, shared by every store on it; made on first use. Its loops start
    /// with the first allocation and end once the last store holding it is gone.
    pub fn for_storage(storage: &Arc<dyn Storage>) -> Arc<Self> {
        let mut reg = guard(&CACHES);
        reg.retain(|(_, c)| c.strong_count() > 0);
        let found = reg
            .iter()
            .find(|(s, _)| std::ptr::addr_eq(s.as_ptr(), Arc::as_ptr(storage)))
            .and_then(|(_, c)| c.upgrade());
        if let Some(c) = found {
            return c;
        }
        let c = Arc::new(Self {
            storage: Arc::downgrade(storage),
            started: AtomicBool::new(false),
            pools: RwLock::default(),
            vnis: Mutex::default(),
            claims_applied: AtomicU64::new(0),
            claims_ready: watch::channel(false).0,
            vpcs: Mutex::default(),
            vpcs_ready: AtomicBool::new(false),
        });
        // The weak storage pointer keeps its allocation, so the address is not reused while
        // the entry exists.
        reg.push((Arc::downgrade(storage), Arc::downgrade(&c)));
        c
    }

    /// The pool `name`, made empty if new.
    pub fn pool(&self, name: &str) -> SharedPool {
        if let Some(p) = self
            .pools
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(name)
        {
            return p.clone();
        }
        self.pools
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(name.to_string())
            .or_default()
            .clone()
    }

    /// Starts the loops (once) and waits until the claims are listed.
    pub async fn ready(self: &Arc<Self>) -> Result<()> {
        if !self.started.swap(true, Ordering::SeqCst) {
            tokio::spawn(claims_loop(Arc::downgrade(self)));
            tokio::spawn(vpcs_loop(Arc::downgrade(self)));
        }
        let mut rx = self.claims_ready.subscribe();
        match tokio::time::timeout(READY_WAIT, rx.wait_for(|r| *r)).await {
            Ok(Ok(_)) => Ok(()),
            _ => Err(ApiError::unavailable(
                "the allocator has not yet read the claims from storage; try again",
            )),
        }
    }

    /// The holder and revision of VNI `vni`'s claim, if cached.
    pub fn vni_claim(&self, vni: u32) -> Option<(Bytes, Revision)> {
        guard(&self.vnis).get(&vni).cloned()
    }

    /// The VPC stored at `key`, if the VPC loop has listed and holds it.
    pub fn vpc(&self, key: &str) -> Option<CachedVpc> {
        if !self.vpcs_ready.load(Ordering::SeqCst) {
            return None;
        }
        guard(&self.vpcs).objects.get(key).cloned()
    }

    /// Applies one claim change. `watched`: from the watch (else this process's own write).
    fn apply_claim(&self, key: &str, value: Option<&Bytes>, rev: Revision, watched: bool) {
        if let Some(vni) = vni_of(key) {
            let mut vnis = guard(&self.vnis);
            let newer = vnis.get(&vni).is_none_or(|(_, r)| *r <= rev);
            if newer {
                match value {
                    Some(v) => vnis.insert(vni, (v.clone(), rev)),
                    None => vnis.remove(&vni),
                };
            }
        }
        let Some((name, v)) = pool_of(key) else {
            if watched {
                self.claims_applied.fetch_max(rev, Ordering::SeqCst);
            }
            return;
        };
        let pool = self.pool(&name);
        let mut p = pool::lock(&pool);
        if watched {
            p.watched(v, rev, value.is_some());
            self.claims_applied.fetch_max(rev, Ordering::SeqCst);
        } else if rev > self.claims_applied.load(Ordering::SeqCst) {
            // Not yet delivered by the watch (had it been, the watch would be past `rev`).
            p.wrote(v, rev, value.is_some());
        }
    }

    /// Applies one VPC change (`None`: deleted). `watched` as in [`Self::apply_claim`].
    fn apply_vpc(&self, key: &str, value: Option<&[u8]>, rev: Revision, watched: bool) {
        let mut vpcs = guard(&self.vpcs);
        if !watched && rev <= vpcs.applied {
            return;
        }
        let newer = vpcs.objects.get(key).is_none_or(|c| c.revision <= rev);
        if newer {
            match value.map(serde_json::from_slice::<VPC>) {
                Some(Ok(vpc)) => {
                    vpcs.objects.insert(
                        key.to_string(),
                        CachedVpc {
                            vpc: Arc::new(vpc),
                            revision: rev,
                        },
                    );
                }
                // Undecodable: better not known than wrong.
                Some(Err(_)) | None => {
                    vpcs.objects.remove(key);
                }
            }
        }
        if watched {
            vpcs.applied = vpcs.applied.max(rev);
        }
    }

    /// This process committed `ops` at `revision`: the claims (and VPCs) they write are known
    /// now, before the watch brings them.
    pub fn committed(&self, ops: &[Op], revision: Revision) {
        if !self.started.load(Ordering::SeqCst) {
            return;
        }
        let vpc_prefix = vpc_prefix();
        for op in ops {
            let (key, value) = match op {
                Op::Put { key, value } => (key, Some(value)),
                Op::Delete { key } => (key, None),
            };
            if key.starts_with(CLAIMS) {
                self.apply_claim(key, value, revision, false);
            } else if key.starts_with(&vpc_prefix) {
                self.apply_vpc(key, value.map(|v| &v[..]), revision, false);
            }
        }
    }

    /// A failed transaction showed these keys' current items: claims found taken are known
    /// taken from now on.
    pub fn observed(&self, current: &[(String, Option<KeyValue>)]) {
        if !self.started.load(Ordering::SeqCst) {
            return;
        }
        for (key, kv) in current {
            if let Some(kv) = kv
                && key.starts_with(CLAIMS)
            {
                self.apply_claim(key, Some(&kv.value), kv.mod_revision, false);
            }
        }
    }

    /// Re-reads pool `name` (the claims under `prefix`, `parse` naming a key's value) from
    /// storage. Used before answering 507: a pool that only looks full must not fail a create.
    pub async fn resync(
        &self,
        storage: &Arc<dyn Storage>,
        name: &str,
        prefix: &str,
        parse: impl Fn(&str) -> Option<u128>,
    ) -> Result<()> {
        let listed = list_all(storage, prefix).await.map_err(|e| storage_error(&e))?;
        let taken: IntervalSet = listed
            .items
            .iter()
            .filter_map(|kv| kv.key.strip_prefix(prefix).and_then(&parse))
            .collect();
        let pool = self.pool(name);
        let mut p = pool::lock(&pool);
        // A watch already past the listing knows better; one behind it replays changes the
        // listing already holds, which leaves every value as the listing has it.
        if self.claims_applied.load(Ordering::SeqCst) <= listed.revision {
            p.reset(taken, listed.revision);
        }
        Ok(())
    }

    /// One listing of every claim: the pools, the VNI holders.
    fn load_claims(&self, items: &[KeyValue], revision: Revision) {
        let mut sets: HashMap<String, IntervalSet> = HashMap::new();
        let mut vnis = HashMap::new();
        for kv in items {
            if let Some(vni) = vni_of(&kv.key) {
                vnis.insert(vni, (kv.value.clone(), kv.mod_revision));
            }
            if let Some((name, v)) = pool_of(&kv.key) {
                sets.entry(name).or_default().insert(v);
            }
        }
        {
            let mut old = guard(&self.vnis);
            for (vni, (holder, rev)) in old.drain() {
                if rev > revision {
                    vnis.insert(vni, (holder, rev));
                }
            }
            *old = vnis;
        }
        let names: Vec<String> = {
            let pools = self
                .pools
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            pools.keys().chain(sets.keys()).cloned().collect()
        };
        for name in names {
            let pool = self.pool(&name);
            let mut p = pool::lock(&pool);
            p.reset(sets.remove(&name).unwrap_or_default(), revision);
        }
        self.claims_applied.store(revision, Ordering::SeqCst);
    }

    fn load_vpcs(&self, items: &[KeyValue], revision: Revision) {
        let mut vpcs = guard(&self.vpcs);
        let kept: Vec<(String, CachedVpc)> = vpcs
            .objects
            .drain()
            .filter(|(_, c)| c.revision > revision)
            .collect();
        for kv in items {
            if let Ok(vpc) = serde_json::from_slice::<VPC>(&kv.value) {
                vpcs.objects.insert(
                    kv.key.clone(),
                    CachedVpc {
                        vpc: Arc::new(vpc),
                        revision: kv.mod_revision,
                    },
                );
            }
        }
        vpcs.objects.extend(kept);
        vpcs.applied = revision;
    }
}

fn vpc_prefix() -> String {
    crate::registry::keys::prefix(&VPC::INFO, None)
}

/// Lists everything under `prefix`, page by page, at one revision.
async fn list_all(
    storage: &Arc<dyn Storage>,
    prefix: &str,
) -> cozyplane_storage::Result<cozyplane_storage::ListResult> {
    let mut opts = ListOptions {
        limit: Some(1000),
        ..Default::default()
    };
    let mut all = storage.list(prefix, &opts).await?;
    while let Some(t) = all.continue_token.take() {
        opts.continue_token = Some(t);
        let page = storage.list(prefix, &opts).await?;
        all.items.extend(page.items);
        all.continue_token = page.continue_token;
    }
    Ok(all)
}

/// What a list-and-watch loop does with what it reads.
trait Follow {
    fn prefix() -> String;
    fn load(c: &ClaimCache, items: &[KeyValue], revision: Revision);
    fn change(c: &ClaimCache, key: &str, value: Option<&Bytes>, revision: Revision);
    fn progress(c: &ClaimCache, revision: Revision);
}

struct FollowClaims;
impl Follow for FollowClaims {
    fn prefix() -> String {
        CLAIMS.to_string()
    }
    fn load(c: &ClaimCache, items: &[KeyValue], revision: Revision) {
        c.load_claims(items, revision);
        c.claims_ready.send_replace(true);
    }
    fn change(c: &ClaimCache, key: &str, value: Option<&Bytes>, revision: Revision) {
        c.apply_claim(key, value, revision, true);
    }
    fn progress(c: &ClaimCache, revision: Revision) {
        c.claims_applied.fetch_max(revision, Ordering::SeqCst);
    }
}

struct FollowVpcs;
impl Follow for FollowVpcs {
    fn prefix() -> String {
        vpc_prefix()
    }
    fn load(c: &ClaimCache, items: &[KeyValue], revision: Revision) {
        c.load_vpcs(items, revision);
        c.vpcs_ready.store(true, Ordering::SeqCst);
    }
    fn change(c: &ClaimCache, key: &str, value: Option<&Bytes>, revision: Revision) {
        c.apply_vpc(key, value.map(|v| &v[..]), revision, true);
    }
    fn progress(c: &ClaimCache, revision: Revision) {
        let mut v = guard(&c.vpcs);
        v.applied = v.applied.max(revision);
    }
}

async fn claims_loop(weak: Weak<ClaimCache>) {
    follow::<FollowClaims>(weak).await;
}

async fn vpcs_loop(weak: Weak<ClaimCache>) {
    follow::<FollowVpcs>(weak).await;
}

/// Lists then watches `F::prefix()` until the cache or its storage is gone; starts over after
/// an error (a compacted revision, a lost connection). The cache is held only while a change
/// is applied, so dropping the last store ends the loop at the next event or progress tick.
async fn follow<F: Follow>(weak: Weak<ClaimCache>) {
    let prefix = F::prefix();
    loop {
        let stream = {
            let Some(c) = weak.upgrade() else { return };
            let Some(storage) = c.storage.upgrade() else {
                return;
            };
            let listed = match list_all(&storage, &prefix).await {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!(prefix, error = %e, "allocation cache: list failed");
                    drop((c, storage));
                    tokio::time::sleep(RESTART).await;
                    continue;
                }
            };
            F::load(&c, &listed.items, listed.revision);
            let opts = WatchOptions {
                revision: Some(listed.revision),
                prefix: true,
                progress_interval: Some(PROGRESS),
            };
            match storage.watch(&prefix, opts).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(prefix, error = %e, "allocation cache: watch failed");
                    drop((c, storage));
                    tokio::time::sleep(RESTART).await;
                    continue;
                }
            }
        };
        let mut stream = stream;
        while let Some(ev) = stream.next().await {
            let Some(c) = weak.upgrade() else { return };
            match ev {
                Ok(Event::Put { kv, .. }) => F::change(&c, &kv.key, Some(&kv.value), kv.mod_revision),
                Ok(Event::Delete { key, revision, .. }) => F::change(&c, &key, None, revision),
                Ok(Event::Progress { revision }) => F::progress(&c, revision),
                Err(e) => {
                    tracing::debug!(prefix, error = %e, "allocation cache: watch ended");
                    break;
                }
            }
        }
        tokio::time::sleep(RESTART).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claim_keys_name_their_pools() {
        let ip = "10.0.0.5".parse().unwrap();
        assert_eq!(
            pool_of(&super::super::keys::ip(100, ip)),
            Some(("ip/100/IPv4".into(), addr::to_int(ip)))
        );
        let ip6: IpAddr = "fd00::7".parse().unwrap();
        assert_eq!(
            pool_of(&super::super::keys::ip(7, ip6)).map(|p| p.0),
            Some(ip_pool(7, IpFamily::V6))
        );
        assert_eq!(
            pool_of(&super::super::keys::vni(123)),
            Some((VNI_POOL.into(), 123))
        );
        assert_eq!(
            pool_of(&super::super::keys::sgid("ns", "blue", 7)),
            Some(("sgid/ns/blue".into(), 7))
        );
        assert_eq!(pool_of(&super::super::keys::mac("02:00:00:00:00:01")), None);
        assert_eq!(vni_of(&super::super::keys::vni(123)), Some(123));
    }
}
