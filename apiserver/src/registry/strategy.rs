//! Per-kind policy plugged into the generic [`Store`](super::store::Store).
//!
//! The split is Kubernetes': the store owns the flow (metadata, preconditions, storage), the
//! strategy owns the policy (what users may set, what is valid, how the kind prints). A kind
//! writes `validate` and `validate_update` and its printer columns; everything else has a default.
//!
//! Create runs `prepare_for_create` → `validate` (+ object metadata rules) → `canonicalize` →
//! persist. Update runs `prepare_for_update` → `validate_update` (+ metadata rules) →
//! `canonicalize` → persist. The `validate*` hooks take `&Object` and therefore cannot mutate.

use cozyplane_apis::{ApiObject, HasSpecStatus};
use kube_core::Resource as _;

use super::validate::field::FieldErrors;

/// One extra printer column of `kubectl get` (between `Name` and `Age`).
#[derive(Clone, Copy, Debug)]
pub struct Column {
    /// Header, e.g. `VNI`.
    pub name: &'static str,
    /// OpenAPI type of the cells: `string`, `integer`, `number`, `boolean` or `date`.
    pub kind: &'static str,
    /// JSON pointer into the object, e.g. `/status/vni`. Arrays print comma-joined.
    pub pointer: &'static str,
    /// 0 for the default view, 1 for `-o wide` only.
    pub priority: u8,
    /// Shown by `kubectl explain`-like tools and in the Table's column definition.
    pub description: &'static str,
}

/// Create/update policy of one kind.
pub trait Strategy: Send + Sync + 'static {
    /// The stored type.
    type Object: ApiObject;

    /// Extra printer columns.
    const COLUMNS: &'static [Column] = &[];

    /// Field selectors beyond `metadata.name`/`metadata.namespace`: (label, JSON pointer).
    const SELECTABLE_FIELDS: &'static [(&'static str, &'static str)] = &[];

    /// Clears what users may not set on create (status).
    fn prepare_for_create(&self, obj: &mut Self::Object) {
        obj.reset_status();
    }

    /// Fills in defaults, after the namespace and a generated name are set.
    fn default(&self, _obj: &mut Self::Object) {}

    /// Every problem with a new object.
    fn validate(&self, obj: &Self::Object) -> FieldErrors;

    /// Normalises after validation, before persisting.
    fn canonicalize(&self, _obj: &mut Self::Object) {}

    /// Sets the parts of the status that follow from the object alone, in the same write as a
    /// create or a main-resource update. A status a controller would otherwise write right
    /// after every create then never lags behind the object (no second write, no extra
    /// `MODIFIED` event, no conflict for a client that reuses the create's resourceVersion).
    /// Not called on `/status` writes, whose body is the writer's to decide.
    fn derive_status(&self, _obj: &mut Self::Object) {}

    /// Copies server-owned parts from `old` on a main-resource update (status).
    fn prepare_for_update(&self, new: &mut Self::Object, old: &Self::Object) {
        new.keep_status_from(old);
    }

    /// Immutability rules plus the create rules.
    fn validate_update(&self, new: &Self::Object, _old: &Self::Object) -> FieldErrors {
        self.validate(new)
    }

    /// Rules for writes to `/status`; none by default.
    fn validate_status_update(&self, _new: &Self::Object, _old: &Self::Object) -> FieldErrors {
        FieldErrors::new()
    }

    /// Whether a deleted object must wait for the kind's own finalizers (besides
    /// `metadata.finalizers`), e.g. a namespace's `spec.finalizers`: the delete then marks it
    /// and a controller finishes it with [`Store::finalize`](super::Store::finalize). `false`
    /// by default.
    fn deletion_held(&self, _obj: &Self::Object) -> bool {
        false
    }

    /// Why the object may not be deleted at all (Kubernetes keeps `default`, `kube-system` and
    /// `kube-public`), answered `403 Forbidden`; `None` (deletable) by default.
    fn delete_forbidden(&self, _obj: &Self::Object) -> Option<&'static str> {
        None
    }

    /// Changes the object makes when it is marked for deletion (a namespace's phase
    /// `Terminating`); nothing by default.
    fn prepare_for_delete(&self, _obj: &mut Self::Object) {}

    /// Server-side allocation (VNI, addresses, MACs, group ids): the store runs it after
    /// defaulting and before validation, and joins its claims to the create transaction and
    /// its releases to the delete transaction (`crate::alloc`). None by default.
    fn allocator(&self) -> Option<&dyn crate::alloc::Allocator<Self::Object>> {
        None
    }

    /// Virtual-verb checks admission runs for the requesting user on create (e.g. `export`
    /// on a referenced VPC); none by default.
    fn create_checks(&self, _obj: &Self::Object) -> Vec<super::hooks::VerbCheck> {
        Vec::new()
    }

    /// Virtual-verb checks admission runs on a main-resource update; none by default.
    fn update_checks(&self, _new: &Self::Object, _old: &Self::Object) -> Vec<super::hooks::VerbCheck> {
        Vec::new()
    }
}

/// `/status` policy derived from a main strategy: spec and metadata come from the stored
/// object, only status is taken from the request.
pub struct StatusStrategy<'a, S>(pub &'a S);

impl<S: Strategy> StatusStrategy<'_, S> {
    /// Keeps everything but status (and the precondition fields) from `old`.
    pub fn prepare_for_update(&self, new: &mut S::Object, old: &S::Object) {
        new.keep_spec_from(old);
        let rv = new.meta().resource_version.clone();
        *new.meta_mut() = old.meta().clone();
        new.meta_mut().resource_version = rv;
    }

    /// The main strategy's status rules.
    pub fn validate_update(&self, new: &S::Object, old: &S::Object) -> FieldErrors {
        self.0.validate_status_update(new, old)
    }
}
