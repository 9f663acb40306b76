//! Server-side allocation: VNIs, VPC addresses, MACs and SecurityGroup ids.
//!
//! Every allocated value is *claimed* by a key under [`CLAIMS`], written with `Compare::Absent`
//! in the same [`Txn`] that stores the object holding it; deleting the object releases its
//! claims in the delete's transaction. A crash can therefore never leave a claim without its
//! owner, nor an owner without its claim. The value of a claim key is the storage key of its
//! owner (empty for a released VNI that is kept as a tombstone, see [`kinds::VpcAllocator`]).
//!
//! The store calls an [`Allocator`] between defaulting and validation: the allocator fills the
//! server-chosen fields (so validation sees a complete object) and returns the [`Allocation`]
//! the store joins to its create transaction. When a claim loses a race, the store retries the
//! whole allocation (bounded), avoiding the keys it lost; a claim the user asked for explicitly
//! is a 409 Conflict instead. A per-store [claim cache](cache), kept by a storage watch and
//! this process's own writes, holds every pool's taken values as [intervals] and the VPCs, so
//! a pick neither lists nor scans and unrelated pools never share a lock; storage stays the
//! only authority. Design notes and key layout: `docs/allocation.md`.

pub mod addr;
pub mod cache;
pub mod intervals;
pub mod kinds;
pub mod pool;
pub mod projection;
pub mod ranges;
pub mod scan;

use std::collections::HashSet;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use cozyplane_apis::KindInfo;
use cozyplane_storage::{Compare, KeyValue, Op, Revision, Storage, Txn};

use crate::errors::{ApiError, ConflictKind, Reason, Result};

pub use crate::registry::keys::CLAIMS;

/// How many times a create re-runs its allocation after losing a race.
pub const MAX_ATTEMPTS: u32 = 64;

/// Claim-key layout.
pub mod keys {
    use std::net::IpAddr;

    use cozyplane_apis::net::claim::escape_ip;

    use super::CLAIMS;

    /// Prefix of the VNI claims.
    pub fn vni_prefix() -> String {
        format!("{CLAIMS}vni/")
    }
    /// The claim of VNI `vni`.
    pub fn vni(vni: u32) -> String {
        format!("{CLAIMS}vni/{vni:08}")
    }
    /// Prefix of the address claims (Ports and ServiceVIPs) of VNI `vni`.
    pub fn ip_prefix(vni: u32) -> String {
        format!("{CLAIMS}ip/{vni}/")
    }
    /// The claim of `ip` in VNI `vni`.
    pub fn ip(vni: u32, ip: IpAddr) -> String {
        format!("{CLAIMS}ip/{vni}/{}", escape_ip(ip))
    }
    /// The claim of a MAC address (canonical text).
    pub fn mac(mac: &str) -> String {
        format!("{CLAIMS}mac/{mac}")
    }
    /// Prefix of the SecurityGroup id claims of VPC `ns/vpc`.
    pub fn sgid_prefix(ns: &str, vpc: &str) -> String {
        format!("{CLAIMS}sgid/{ns}/{vpc}/")
    }
    /// The claim of SecurityGroup id `id` in VPC `ns/vpc`.
    pub fn sgid(ns: &str, vpc: &str, id: u32) -> String {
        format!("{CLAIMS}sgid/{ns}/{vpc}/{id:02}")
    }
}

/// The storage key of an object of kind `info`.
pub fn object_key(info: &KindInfo, ns: Option<&str>, name: &str) -> String {
    crate::registry::keys::object(info, ns, name)
}

/// One key an object claims in its create transaction.
#[derive(Clone, Debug)]
pub struct ClaimKey {
    /// The claim key.
    pub key: String,
    /// What the key holds (the owner's storage key).
    pub value: Bytes,
    /// `None`: the key must be absent; `Some(rev)`: it must still be at `rev` (reuse of a
    /// released tombstone).
    pub expect: Option<Revision>,
    /// The server chose the value: losing the key means "try another". Otherwise the user
    /// asked for it and losing it is a 422 on [`ClaimKey::field`] (a 409 without one).
    pub chosen: bool,
    /// The field and value, for messages (`spec.ip 10.0.0.5`).
    pub what: String,
    /// The user's field this claim pins (`spec.ip`, `spec.mac`) and its value: another
    /// holder of it is a `422` on that field (as a Service's taken `clusterIP` is), not a 409.
    pub field: Option<(&'static str, String)>,
}

/// What a create must claim and check, and the hints to settle once it is decided.
#[derive(Debug, Default)]
pub struct Allocation {
    /// Keys to claim.
    pub claims: Vec<ClaimKey>,
    /// Extra conditions; when one fails the allocation is retried.
    pub guards: Vec<Compare>,
    /// Whether the server filled `metadata.name` (then a taken name means "retry").
    pub name_chosen: bool,
    /// Whether `metadata.name` was derived from a value the user pinned (a Port's `spec.ip`
    /// without a name): then a taken name is that field's conflict, not the name's.
    pub name_derived: bool,
    reservations: Vec<pool::Reservation>,
}

/// How the store should react to a failed create transaction.
pub enum Outcome {
    /// Allocate again, avoiding the keys that were lost.
    Retry,
    /// Give up with this error.
    Fail(ApiError),
    /// The object's own key is taken and its name was given by the user.
    NameTaken,
}

impl Allocation {
    /// Adds a claim.
    pub fn claim(&mut self, c: ClaimKey) {
        self.claims.push(c);
    }

    pub(crate) fn reserve(&mut self, r: pool::Reservation) {
        self.reservations.push(r);
    }

    /// The create transaction: the object at `key` (absent) plus every claim and guard.
    pub fn txn(&self, key: &str, value: Bytes) -> Txn {
        let mut t = Txn::new().when(Compare::Absent(key.into())).put(key, value);
        for c in &self.claims {
            t = t
                .when(match c.expect {
                    None => Compare::Absent(c.key.clone()),
                    Some(rev) => Compare::ModRevision(c.key.clone(), rev),
                })
                .put(c.key.clone(), c.value.clone());
        }
        for g in &self.guards {
            t = t.when(g.clone());
        }
        t
    }

    /// The attempt is decided: its picks are no longer in flight. (The claim cache learns the
    /// outcome from the transaction: [`cache::ClaimCache::committed`] and `observed`.)
    pub fn finish(&mut self) {
        for r in self.reservations.drain(..) {
            r.settle();
        }
    }

    /// Decides what a failed transaction means. `failed` are the compared keys whose condition
    /// did not hold, with their current items.
    pub fn resolve(&self, obj_key: &str, failed: &[(String, Option<KeyValue>)]) -> Outcome {
        // A name the user gave is taken: AlreadyExists, as for any kind.
        if !self.name_chosen && !self.name_derived && failed.iter().any(|(k, _)| k == obj_key) {
            return Outcome::NameTaken;
        }
        // A value the user pinned is held by another object: the field is invalid (before a
        // name derived from it, which is the same claim).
        for (key, current) in failed {
            if let Some(c) = self.claims.iter().find(|c| &c.key == key && !c.chosen)
                && let Some((field, value)) = &c.field
            {
                let (kind, name) = describe_owner(obj_key)
                    .split_once(' ')
                    .map(|(k, n)| (k.to_string(), n.to_string()))
                    .unwrap_or_default();
                return Outcome::Fail(invalid(
                    &kind,
                    &name,
                    field,
                    value,
                    format!("already allocated to {}", holder_of(current.as_ref())),
                ));
            }
        }
        let mut retry = false;
        for (key, current) in failed {
            if key == obj_key {
                if self.name_chosen {
                    retry = true;
                    continue;
                }
                return Outcome::NameTaken;
            }
            if let Some(c) = self.claims.iter().find(|c| &c.key == key) {
                if c.chosen {
                    retry = true;
                    continue;
                }
                return Outcome::Fail(ApiError::conflict_of(
                    ConflictKind::Allocated,
                    format!(
                        "{} is already allocated to {}",
                        c.what,
                        holder_of(current.as_ref())
                    ),
                    None,
                ));
            }
            // A guard (the VPC's VNI claim moved): read again.
            retry = true;
        }
        if retry {
            Outcome::Retry
        } else {
            // Nothing we compared failed: the store changed under a guard we do not track.
            Outcome::Retry
        }
    }
}

/// Who holds a claim key, from its current item (`another object` when unknown).
fn holder_of(current: Option<&KeyValue>) -> String {
    current
        .map(|kv| String::from_utf8_lossy(&kv.value).into_owned())
        .filter(|h| !h.is_empty())
        .map(|h| describe_owner(&h))
        .unwrap_or_else(|| "another object".into())
}

/// `Port v100.10-0-0-5` from `/registry/sdn.cozystack.io/ports/v100.10-0-0-5`.
pub fn describe_owner(key: &str) -> String {
    let (res, name) = crate::registry::keys::split(key).unwrap_or((key, ""));
    let kind = match res {
        "ports" => "Port",
        "servicevips" => "ServiceVIP",
        "vpcs" => "VPC",
        "securitygroups" => "SecurityGroup",
        other => other,
    };
    format!("{kind} {name}")
}

/// The keys of `txn`'s conditions that did not hold, with their current items.
pub fn failed_compares(txn: &Txn, current: &[(String, Option<KeyValue>)]) -> Vec<(String, Option<KeyValue>)> {
    txn.compares
        .iter()
        .zip(current.iter())
        .filter(|(c, (_, kv))| !c.holds(kv.as_ref().map(|kv| kv.mod_revision)))
        .map(|(c, (_, kv))| (c.key().to_string(), kv.clone()))
        .collect()
}

/// What an allocator gets to look at.
pub struct Cx<'a> {
    /// The store.
    pub storage: &'a Arc<dyn Storage>,
    /// The store's claim cache.
    pub cache: &'a Arc<cache::ClaimCache>,
    /// Which attempt of this request this is (0 first). A retry reads the VPC and its VNI
    /// claim from storage: the cached copies may be what made the first attempt fail.
    pub attempt: u32,
    /// Claim keys lost in earlier attempts of this request.
    pub avoid: &'a HashSet<String>,
    /// Whether the current name was generated from `generateName` (or is empty).
    pub name_generated: bool,
}

/// Allocation policy of one kind.
#[async_trait]
pub trait Allocator<O>: Send + Sync {
    /// Fills the server-chosen fields of `obj` and says what to claim. Called again for each
    /// retry, on a fresh copy of the object.
    async fn allocate(&self, obj: &mut O, cx: &Cx<'_>) -> Result<Allocation>;

    /// The writes that release what `obj` holds, joined to the transaction deleting it.
    fn release(&self, obj: &O) -> Vec<Op>;

    /// Refuses a main-resource update of `old` to `new` that would strand what is allocated
    /// (a VPC range that still holds addresses). Runs after validation; allows by default.
    async fn check_update(&self, _new: &O, _old: &O, _storage: &Arc<dyn Storage>) -> Result<()> {
        Ok(())
    }
}

/// `507 Insufficient Storage`: a pool has no free value left.
pub fn exhausted(what: impl Into<String>) -> ApiError {
    ApiError::new(507, Reason::InsufficientStorage, what)
}

/// `422 Invalid` with one cause at `field`.
pub fn invalid(kind: &str, name: &str, field: &str, value: &str, detail: impl Into<String>) -> ApiError {
    use crate::registry::validate::{FieldError, FieldErrors, FieldPath};
    let mut path: Option<FieldPath> = None;
    for part in field.split('.') {
        path = Some(match path {
            None => FieldPath::new(part),
            Some(p) => p.child(part),
        });
    }
    let errs = FieldErrors::from(FieldError::invalid(
        path.unwrap_or_else(|| FieldPath::new(field)),
        value,
        detail.into(),
    ));
    ApiError::invalid(kind, "sdn.cozystack.io", name, &errs)
}

/// A storage error as an API error.
pub fn storage_error(e: &cozyplane_storage::Error) -> ApiError {
    ApiError::unavailable(format!("storage: {e}"))
}
